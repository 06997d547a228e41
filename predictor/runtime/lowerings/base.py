"""The one interface every lowering registers through (``registry.LOWERINGS``): what it rewrites, at which stage,
the compile flags it reads, and its share of the cache key. A leaf: lowering modules may import it for the types
while the registry imports them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

STAGES = ("trace", "lower")


@dataclasses.dataclass(frozen=True)
class CompileFlags:
    """What one ``predictor.compile`` call tells its lowerings (``Lowering.reads`` names these fields)."""

    patchify: bool = True
    pad_k: bool = True
    size_ranges: bool = False
    gemv_top: int = 1  # GEMV block configs kept per kernel (``tune=K``: K, benchmarked by Inductor)
    # whether a per-GPU table (GEMV blocks, few rows, grouped GEMMs) made on another GPU of this architecture may be
    # read where this GPU has none of its own (the hook's ``allow_similar_gpu``)
    allow_similar_gpu: bool = True
    example_inputs: Any = None  # the graph being lowered ("lower" stage only)


@dataclasses.dataclass(frozen=True)
class Lowering:
    """One rewrite of what Inductor sees.

    ``stage``: "trace" wraps AOTAutograd's trace, where decompositions apply (forward and backward together);
    "lower" wraps Inductor's inner compile, one graph's lowering and codegen (a backward's runs at its first call).
    ``apply(flags)`` returns the context manager that makes the rewrite for the length of the compile, leaving
    Inductor's own tables as they were on exit (``tables``). ``reads``: the :class:`CompileFlags` fields it
    reads. ``cache_key()``: what, beyond ``module``'s source, decides its output (a table's hash, a rule's
    constants); None when the source is all. A lowering that reads ``allow_similar_gpu`` has its cache key called
    with it (``cache_key(allow_similar_gpu=...)``): which GPU's table it reads depends on it."""

    name: str
    rewrites: str
    stage: str
    apply: Callable[[CompileFlags], contextlib.AbstractContextManager[Any]]
    module: str
    reads: tuple[str, ...] = ()
    cache_key: Callable[[], Any] = lambda: None

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"lowering {self.name!r}: unknown stage {self.stage!r}; expected one of {STAGES}")
        unknown = set(self.reads) - {f.name for f in dataclasses.fields(CompileFlags)}
        if unknown:
            raise ValueError(f"lowering {self.name!r} reads unknown flag(s) {sorted(unknown)}")
