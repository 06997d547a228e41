"""A dynamic graph's pointwise kernel tiled in two dimensions where one dimension would have it divide each element's
index by a symbolic size.

Why: Inductor writes most pointwise kernels one-dimensional and recovers each coordinate by division
(``x1 = xindex // ks0``, ``x0 = xindex % ks0``). Compiled for one size the divisor is a constant, which the compiler
turns into a multiply; in a dynamic graph it is a kernel argument and each element pays a true integer division. A
4096-token OPT prefill's attention mask (tokens x tokens, each compared with its row) took 93 us in a dynamic graph
against 50 us compiled for that size, and 45 us tiled in two dimensions, where each coordinate is its own index
(H200, docs/DYNAMIC.md). Inductor tiles so only with ``triton.prefer_nd_tiling``, for every kernel; that would also
take the kernels over (rows x a static width) off their per-size blocks (``pointwise_by_size``), where a division by
a constant costs nothing. So the two-dimensional tiling is taken only where it saves a symbolic division: a kernel
Inductor tiles in one dimension whose element count is symbolic and whose inner dimension, in Inductor's own
N-dimensional candidate (``get_nd_tilings``), is symbolic too.

Only the tiling changes: every element is computed as before, from the same loads (no guard, no recompile).

Inductor asks for a kernel's tiling at every fusion it weighs, and its N-dimensional candidates match each index
expression against division patterns in sympy (10-200 ms a call): asked for every kernel, they took 11 s of a Qwen3
decode's compile under the profiler (34 s under ``plain-dynamic``, H100; docs/DYNAMIC.md). So they are asked for only
where a node of the kernel iterates over a symbolic inner dimension or indexes with a division or modulo by a symbolic
size (``may_divide_by_symbol``), the only kernels where a candidate can spare a symbolic division.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

POINTWISE_PREFIXES = ("z", "y", "x")  # Inductor's tiling names, outermost first (``SIMDScheduling.create_tiling``)
RULE_VERSION = 2  # in the hook's cache key: a graph compiled under another rule is not reused


def _symbolic(expr: Any) -> bool:
    return bool(getattr(expr, "free_symbols", None))


def divides_by_symbol(tiling: dict[str, Any]) -> bool:
    """Whether a pointwise tiling of two or more dimensions has a symbolic inner dimension: written one-dimensional,
    its index would be divided by it."""
    dims = [tiling[p] for p in POINTWISE_PREFIXES if p in tiling]
    return len(dims) >= 2 and any(_symbolic(d) for d in dims[1:])


def one_dimensional(tiling: dict[str, Any]) -> bool:
    return [p for p in POINTWISE_PREFIXES if p in tiling] == ["x"]


def divides_by_symbol_in(ranges: Any, indexing_exprs: Any) -> bool:
    """Whether a node iterating over pointwise ``ranges`` (outermost first) with these index expressions would divide
    by a symbolic size: an inner range is symbolic, or an expression divides or takes a modulo by a symbol."""
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    if len(ranges) >= 2 and any(_symbolic(d) for d in ranges[1:]):
        return True
    return any(_symbolic(arg) for expr in indexing_exprs if hasattr(expr, "atoms")
               for atom in expr.atoms(FloorDiv, ModularIndexing) for arg in atom.args[1:])


def may_divide_by_symbol(node_schedule: Any) -> bool:
    """Whether any node of a kernel's schedule ``divides_by_symbol_in``; True where a node does not answer (another
    torch), leaving the decision to Inductor's candidates."""
    from torch._inductor.scheduler import SchedulerNode

    for node in node_schedule:
        if not isinstance(node, SchedulerNode):
            continue  # Inductor's reduction markers
        try:
            ranges, exprs = node.get_ranges()[0], node._body.indexing_exprs.values()
        except (AttributeError, IndexError, TypeError):
            return True
        if divides_by_symbol_in(ranges, exprs):
            return True
    return False


def tiling_without_division(scheduling: type, node_schedule: Any, numel: Any, reduction_numel: Any,
                            tiling: dict[str, Any]) -> dict[str, Any] | None:
    """Inductor's first N-dimensional candidate that spares a symbolic division (module docstring) for a pointwise
    kernel ``tiling`` has left one-dimensional, where every node of the kernel can use it; None otherwise, also where
    Inductor's internals do not answer (another torch)."""
    if not (reduction_numel == 1 and one_dimensional(tiling) and _symbolic(numel)
            and may_divide_by_symbol(node_schedule)):
        return None
    try:
        for candidate in scheduling.get_nd_tilings(node_schedule, numel, reduction_numel):
            if divides_by_symbol(candidate) and scheduling.tiling_is_compatible(node_schedule, numel,
                                                                                reduction_numel, candidate):
                return candidate
    except Exception as exc:  # noqa: BLE001 - Inductor's internals of another torch: its own tiling
        log.debug("gemm-predictor: no 2-D tiling for a symbolic division (%s)", exc)
    return None


def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    """``SIMDScheduling.get_tiling_and_scores`` (the function under its classmethod) with a pointwise kernel's
    symbolic division tiled away (``tiling_without_division``); the tiling scores go with Inductor's own tiling only,
    as Inductor's own N-dimensional path returns none."""
    import sympy

    def get_tiling_and_scores(cls: type, node_schedule: Any, numel: Any, reduction_numel: Any = sympy.S.One,
                              *args: Any, **kwargs: Any) -> tuple[dict[str, Any], Any]:
        tiling, scores = original(cls, node_schedule, numel, reduction_numel, *args, **kwargs)
        better = tiling_without_division(cls, node_schedule, numel, reduction_numel, tiling)
        return (better, None) if better is not None else (tiling, scores)
    return get_tiling_and_scores
