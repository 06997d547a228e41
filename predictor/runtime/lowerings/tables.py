"""Entries of Inductor's dispatch tables (lowerings, decompositions) wrapped for the length of one compile.

Why one helper: ``predictor.compile`` changes how a few ops are lowered or decomposed (convolutions, grouped GEMMs,
GEMVs, patch embeddings) only inside its own compiles; each wrap must happen once when compiles nest and be undone
on exit, also on an error, so a plain ``torch.compile`` in the same process sees Inductor's own tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Callable


@contextlib.contextmanager
def wrapped_entries(tables: Iterable[dict[Any, Any]], keys: Iterable[Any],
                    wrap: Callable[[Any, Callable[..., Any] | None], Callable[..., Any]], marker: str,
                    absent: bool = False) -> Iterator[None]:
    """While active, every ``key`` present in each table maps to ``wrap(key, original)``; with ``absent``, a key a
    table lacks maps to ``wrap(key, None)`` and is removed on exit. A wrapped entry carries ``marker`` (set here), so
    a nested compile leaves it as it is. The tables are as they were on exit, also on an error."""
    keys = list(keys)
    saved = [(table, {key: table.get(key) for key in keys if absent or key in table}) for table in tables]
    for table, originals in saved:
        for key, original in originals.items():
            if not getattr(original, marker, False):
                wrapped = wrap(key, original)
                setattr(wrapped, marker, True)
                table[key] = wrapped
    try:
        yield
    finally:
        for table, originals in saved:
            for key, original in originals.items():
                if original is None:
                    table.pop(key, None)
                else:
                    table[key] = original


def added_entries(tables: Iterable[dict[Any, Any]], entries: dict[Any, Callable[..., Any]],
                  marker: str) -> contextlib.AbstractContextManager[None]:
    """While active, each table maps every key of ``entries`` to its function; where the table had an entry for the
    key already, that one runs whenever the new one returns ``NotImplemented`` (``wrapped_entries`` with absent
    keys added)."""
    return wrapped_entries(tables, entries, lambda key, original: _first_of(entries[key], original), marker,
                           absent=True)


def _first_of(first: Callable[..., Any], then: Callable[..., Any] | None) -> Callable[..., Any]:
    def entry(*args: Any, **kwargs: Any) -> Any:
        out = first(*args, **kwargs)
        return then(*args, **kwargs) if out is NotImplemented and then is not None else out
    return entry


def decomposition_tables() -> list[dict[Any, Any]]:
    """Inductor's decomposition tables a compile may read: ``select_decomp_table()`` returns either the table itself
    or a cached copy of it (``fast_random_decomps``), so a wrap must cover both."""
    from torch._inductor import decomposition

    tables = [decomposition.decompositions]
    copy = getattr(decomposition, "fast_random_decomps", None)
    if callable(copy):
        tables.append(copy())
    return tables


@contextlib.contextmanager
def wrapped_attribute(owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
                      marker: str) -> Iterator[None]:
    """While active, ``owner.name`` is ``wrap(original)``, marked with ``marker`` so a nested compile wraps once;
    the original is back on exit, also on an error (Inductor functions and methods: ``compile_fx.cudagraphify``,
    ``TritonKernel.codegen_kernel``). A classmethod of a class (``SIMDScheduling.get_tiling_and_scores``) has its
    function wrapped and stays a classmethod, so subclasses still call it with their own class."""
    raw = vars(owner).get(name) if isinstance(owner, type) else None
    original = raw.__func__ if isinstance(raw, classmethod) else getattr(owner, name)
    if getattr(original, marker, False):
        yield
        return
    wrapped = wrap(original)
    setattr(wrapped, marker, True)
    setattr(owner, name, classmethod(wrapped) if isinstance(raw, classmethod) else wrapped)
    try:
        yield
    finally:
        setattr(owner, name, raw if isinstance(raw, classmethod) else original)
