"""The matrix-vector product (GEMV: one row, M=1, or one column, N=1) as a fused Triton reduction.

Why: a GEMM with one row reads every weight once and does two flops per weight, so its speed is HBM bandwidth;
cuBLAS's GEMV path reaches less of it than a Triton reduction over K does, and the reduction also fuses the
bias and the following pointwise ops (batch-1 LLM decode: docs/GEMV.md). Inductor has the reduction form (its
``mm`` decomposition, ``torch/_inductor/decomposition.py``) but only under ``coordinate_descent_tuning``, which
also tunes every other kernel of the graph (4-5x plain's compile). Here the decision is made per GEMM, at trace
time, from the rule in ``GEMV_RULE`` (fitted on the GEMV labels, ``datasets/<gpu>/gemv.parquet``), and the
reduction's block sizes are Inductor's own reduction heuristic: nothing is searched at compile time.

The rule needs M (or N) statically known to be 1; a dynamic batch never takes this path here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, Callable

# The reduction form where the labels say it pays (datasets/nvidia-h100/GEMV.md): half-precision operands and a
# weight of at least MIN_WEIGHT_ELEMENTS elements (below it a step is launch-bound and cuBLAS's GEMV is as fast).
HALF_DTYPES = ("float16", "bfloat16")
MIN_WEIGHT_ELEMENTS = 1 << 20


def takes_reduction(n: int, k: int, dtype: str) -> bool:
    """Whether a GEMV of an (n, k) weight in ``dtype`` runs as a Triton reduction rather than cuBLAS."""
    return dtype in HALF_DTYPES and n * k >= MIN_WEIGHT_ELEMENTS


def _static_one(size: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(size == 1))


def _static_int(size: Any) -> int | None:
    try:
        return int(size)
    except (TypeError, ValueError):  # a symbolic size: no decision
        return None


def _gemv_shape(a: Any, b: Any) -> tuple[int, int] | None:
    """(n, k) of the weight when ``a @ b`` is a GEMV this rule may take (CUDA, one static row or column), else None."""
    if a.device.type != "cuda" or a.dim() != 2 or b.dim() != 2 or a.dtype != b.dtype:
        return None
    m, k, n = _static_int(a.shape[0]), _static_int(a.shape[1]), _static_int(b.shape[1])
    if k is None:
        return None
    if m is not None and _static_one(a.shape[0]) and n is not None:
        return n, k
    if n is not None and _static_one(b.shape[1]) and m is not None:
        return m, k
    return None


def _reduction(a: Any, b: Any) -> Any:
    """``a @ b`` as Inductor's own decomposition spells it: a broadcast multiply summed over K (fp32 inside the
    fused kernel, as Inductor's reductions accumulate)."""
    return (a.unsqueeze(2) * b.unsqueeze(0)).sum(dim=1)


_RULE: list[Callable[[int, int, str], bool]] = [takes_reduction]


def _wants(a: Any, b: Any) -> bool:
    shape = _gemv_shape(a, b)
    return shape is not None and _RULE[-1](*shape, str(a.dtype).removeprefix("torch."))


def _mm(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def mm_as_gemv(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and _wants(a, b):
            _COUNTS["gemv_reductions"] += 1
            return _reduction(a, b)
        return original(a, b, *args, **kwargs)
    mm_as_gemv.predictor_gemv = True  # type: ignore[attr-defined]
    return mm_as_gemv


def _addmm(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def addmm_as_gemv(bias: Any, a: Any, b: Any, *args: Any, beta: Any = 1, alpha: Any = 1, **kwargs: Any) -> Any:
        if not args and not kwargs and _wants(a, b):
            _COUNTS["gemv_reductions"] += 1
            product = _reduction(a, b)
            product = product if alpha == 1 else product * alpha
            return product + (bias if beta == 1 else bias * beta)
        return original(bias, a, b, *args, beta=beta, alpha=alpha, **kwargs)
    addmm_as_gemv.predictor_gemv = True  # type: ignore[attr-defined]
    return addmm_as_gemv


_COUNTS = {"gemv_reductions": 0}


def gemv_count() -> int:
    """GEMMs traced into the reduction form in this process (``predictor.stats()`` reports it)."""
    return _COUNTS["gemv_reductions"]


@contextlib.contextmanager
def gemv_as_reduction(rule: Callable[[int, int, str], bool] | None = None) -> Iterator[None]:
    """While active, Inductor's decomposition table turns each GEMV that ``rule(n, k, dtype)`` takes (default:
    ``takes_reduction``) into the reduction form; other GEMMs keep their decompositions (or none). The table's
    entries are restored on exit, also on an error. (The GEMV collector passes a rule that takes every GEMV.)"""
    import torch
    from torch._inductor import decomposition

    aten = torch.ops.aten
    wrappers = {aten.mm.default: _mm, aten.addmm.default: _addmm}
    # select_decomp_table() returns either the table itself or a cached copy of it (fast_random_decomps): both
    tables = [decomposition.decompositions]
    copy = getattr(decomposition, "fast_random_decomps", None)
    if callable(copy):
        tables.append(copy())
    saved = [(table, {op: table.get(op) for op in wrappers}) for table in tables]
    for table in tables:
        for op, wrap in wrappers.items():
            current = table.get(op)
            if current is not None and getattr(current, "predictor_gemv", False):
                continue  # nested compiles wrap once
            table[op] = wrap(current if current is not None else _no_decomposition(op))
    _RULE.append(rule or takes_reduction)
    try:
        yield
    finally:
        _RULE.pop()
        for table, originals in saved:
            for op, original in originals.items():
                if original is None:
                    table.pop(op, None)
                else:
                    table[op] = original


def _no_decomposition(op: Any) -> Callable[..., Any]:
    """For an op without a decomposition of its own: NotImplemented tells the tracer to keep the op."""
    def keep(*args: Any, **kwargs: Any) -> Any:
        return NotImplemented
    return keep
