"""The zoo's view of the context-block programs, which live with the collection that uses them
(``collectors/in_program/context_blocks.py``): ``models.py`` builds a ``ctx-...`` model by name through this."""

from collectors.in_program.context_blocks import LAYERS, build_from_name, name_of, parse, sampled_names

__all__ = ["LAYERS", "build_from_name", "name_of", "parse", "sampled_names"]
