"""Putting a pruner into Inductor and taking it out again: the stack of pruners installed now, innermost last.

``install.py`` (``install``/``uninstall``, the user's process-wide hook) and ``predictor.compile`` (a compiled
object's own pruner, active while that object compiles: ``active``) both push and pop here; the pruner's unpickling
reuses an installed pruner. A pruner is taken as it is (anything with ``__call__``, ``preprocess`` and
``settings``): this module imports nothing of the package, so every room above may use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass
class _Installed:
    pruner: Any  # a predictor.runtime.choices.pruner.GemmPruner
    previous_class: Any
    previous_space: Any
    previous_default: Any  # virtualized._choices._default
    by_compile: bool = False  # predictor.compile's process-wide entry: the next compile's replaces it


_STACK: list[_Installed] = []
_LAST: list[Any] = []  # the most recent pruner, so stats() still answers after uninstall
_KEY_GENERATION = [0]
_PREPROCESSING_REGISTERED = [False]


def _drop_cached_choices() -> None:
    """Make every thread build its InductorChoices afresh on its next compile.

    Inductor caches the handler per thread on first use (``virtualized._choices_default``). Deleting it here
    only reaches this thread, but a backward pass is compiled lazily in autograd's device thread, which
    keeps whatever it cached during an earlier compile (measured on the H200: a transformer block's backward
    GEMMs were then never pruned). Moving the cache to a new thread-local key misses in every thread."""
    from torch._inductor import virtualized

    key = virtualized._choices._key
    if hasattr(virtualized.threadlocal, key):
        delattr(virtualized.threadlocal, key)
    _KEY_GENERATION[0] += 1
    virtualized._choices._key = f"__torchinductor_choices_gemm_predictor_{_KEY_GENERATION[0]}"


def _preprocess_with_installed(choices: list[Any]) -> list[Any]:
    """Registered once with Inductor (preprocessing functions cannot be removed one by one): defers to the
    pruner installed now, and is a no-op when none is."""
    return _STACK[-1].pruner.preprocess(choices) if _STACK else choices


def _register_preprocessing() -> None:
    if _PREPROCESSING_REGISTERED[0]:
        return
    from torch._inductor import select_algorithm

    if hasattr(select_algorithm, "add_preprocessing_fn"):  # torch >= 2.10
        select_algorithm.add_preprocessing_fn(_preprocess_with_installed)
        _PREPROCESSING_REGISTERED[0] = True


def _choices_factory(pruner: Any) -> Any:
    """Inductor's per-thread default for ``V.choices``, building our choices in every thread.

    Setting ``config.inductor_choices_class`` alone is not enough: torch >= 2.13 keeps config assignments
    per thread (ContextVar), so autograd's thread, which compiles the backward pass, would not see it."""

    def make() -> Any:
        from torch._inductor import virtualized

        handler = pruner()
        setattr(virtualized.threadlocal, virtualized._choices._key, handler)
        return handler

    return make


def push(pruner: Any, search_space: str, by_compile: bool = False) -> None:
    """Install ``pruner`` over whatever is installed, with Inductor's ``max_autotune_gemm_search_space``
    ``search_space``. ``by_compile``: predictor.compile's process-wide entry, which a later compile's replaces
    (the stack does not grow with every compile)."""
    from torch._inductor import config, virtualized

    if by_compile and _STACK and _STACK[-1].by_compile:
        if _STACK[-1].pruner is pruner:
            _LAST[:] = [pruner]
            return
        pop()
    _STACK.append(_Installed(pruner, config.inductor_choices_class, config.max_autotune_gemm_search_space,
                             virtualized._choices._default, by_compile))
    virtualized._choices._default = _choices_factory(pruner)
    _register_preprocessing()
    _LAST[:] = [pruner]
    config.inductor_choices_class = pruner
    config.max_autotune_gemm_search_space = search_space
    _drop_cached_choices()


def pop() -> None:
    """Undo the most recent ``push`` (a no-op when none is active)."""
    if not _STACK:
        return
    entry = _STACK.pop()
    from torch._inductor import config, virtualized

    config.inductor_choices_class = entry.previous_class
    config.max_autotune_gemm_search_space = entry.previous_space
    virtualized._choices._default = entry.previous_default
    _drop_cached_choices()


@contextlib.contextmanager
def active(pruner: Any, search_space: str) -> Iterator[None]:
    """``pruner`` installed for the length of the block (a compile of the object it belongs to), then whatever was
    installed before, also on an error; a no-op when it is installed on top already."""
    if _STACK and _STACK[-1].pruner is pruner:
        yield
        return
    push(pruner, search_space)
    depth = len(_STACK)
    try:
        yield
    finally:
        while len(_STACK) >= depth:  # what the block installed and left behind goes with it
            pop()
