"""The matrix-vector product (GEMV: a GEMM with one row, M=1) as a fused Triton reduction.

Why: a GEMM with one row reads every weight once and does two flops per weight, so its speed is HBM bandwidth;
cuBLAS's GEMV path reaches less of it than a Triton reduction over K does, and the reduction also fuses the
bias and the following pointwise ops (batch-1 LLM decode: docs/GEMV.md). Inductor has the reduction form (its
``mm`` decomposition, ``torch/_inductor/decomposition.py``) but only under ``coordinate_descent_tuning``, which
also tunes every other kernel of the graph (4-5x plain's compile). Here the decision is made per GEMM, at trace
time, from ``runtime_rule`` (every column-major GEMV where the block table knows what is fused ahead, else a width
threshold fitted on ``datasets/nvidia-h200/GEMV.md``), and the reduction's blocks
come from the GEMV block table of this GPU (``gemv_table.py``, written into the kernel by ``gemv_blocks.py``): nothing is searched at compile time.

The rule needs M statically known to be 1. Under ``dynamic=True`` a batch of 1 still gets it: Dynamo specialises
sizes 0 and 1, so batch 1 is compiled as a graph of its own with M = 1; other sizes of a symbolic M stay cuBLAS.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any, Callable

from ..compile_state import static_int, static_one
from . import gemv_table
from .gemv_table import MIN_K, GemvKernel, has_fused_forms, reduction_beats_cublas
from .tables import decomposition_tables, wrapped_entries

# Where the labels say the reduction pays under Inductor's default blocks (datasets/nvidia-h200/GEMV.md, gemm-predictor
# gemv-eval): a column-major weight (F.linear's, K contiguous per output) with at most MAX_N outputs. Wider heads
# (vocabulary projections) and row-major weights run slower there than under cuBLAS.
MAX_N = 6144
DTYPES = ("float16", "bfloat16", "float32")
DEVICES = ("cuda",)  # Inductor's mm decomposition has the reduction form for GPUs only


def takes_reduction(n: int, k: int, dtype: str, layout_b: str, every_width: bool = False) -> bool:
    """Whether a one-row GEMM with an (n, k) weight runs as a Triton reduction rather than cuBLAS's GEMV: column-major
    weights (F.linear's) with at most ``MAX_N`` outputs, or at every width (``every_width``) where the GPU's block
    table has labels of GEMVs with work fused ahead and gives the kernel its blocks (K of at least ``MIN_K``; a
    shorter K is one persistent block, which under Inductor's default lost to cuBLAS on a 151936-wide head: 96.5
    against 77.2 us, datasets/nvidia-h200/GEMV.md; with labels of its own, ``takes_reduction_by_table`` decides it).
    With the table the reduction beats cuBLAS at every width (``datasets/<gpu>/GEMV_BLOCKS.md``); without labels of
    what is fused ahead, a vocabulary head fused with the final norm took a plain GEMV's blocks and ran 1.5x slower
    than as a template (batch-1 Qwen2 on the H200, docs/GEMV.md)."""
    return dtype in DTYPES and layout_b == "col" and (n <= MAX_N or (every_width and k >= MIN_K))


def takes_reduction_by_table(n: int, k: int, dtype: str, layout_b: str, rows: Sequence[dict[str, Any]],
                             every_width: bool | None = None) -> bool:
    """``takes_reduction`` where a GPU's block table (``rows``) decides: a K short enough for one persistent block
    takes the reduction where its nearest labelled plain GEMV ran faster so than under cuBLAS
    (``gemv_table.reduction_beats_cublas``); otherwise every width when the table has labels of work fused ahead
    (``every_width``, read from ``rows`` unless given), else the width rule."""
    if dtype in DTYPES and layout_b == "col":
        wins = reduction_beats_cublas(GemvKernel(n, k, dtype), rows)
        if wins is not None:
            return wins
    every_width = has_fused_forms(rows) if every_width is None else every_width
    return takes_reduction(n, k, dtype, layout_b, every_width=every_width)


def runtime_rule(allow_similar: bool = True) -> Callable[[int, int, str, str], bool]:
    """``takes_reduction_by_table`` as the hook applies it in one compile, with this GPU's table (looked up and read
    for fused forms once here, not per GEMM). A GPU without a table (none of its own, and none borrowed under
    ``allow_similar``) keeps every GEMV on cuBLAS, as plain ``torch.compile`` does: the width rule and Inductor's
    default blocks were measured on the H100 and the H200 alone."""
    rows = gemv_table.table_for_this_gpu(allow_similar)
    if not rows:
        return lambda n, k, dtype, layout_b: False
    return functools.partial(takes_reduction_by_table, rows=rows, every_width=has_fused_forms(rows))


def _gemv_shape(a: Any, b: Any) -> tuple[int, int, str] | None:
    """(n, k, B's layout) when ``a @ b`` has one static row on CUDA, else None."""
    if a.device.type not in DEVICES or a.dim() != 2 or b.dim() != 2 or a.dtype != b.dtype:
        return None
    if not static_one(a.shape[0]):
        return None
    k, n = static_int(a.shape[1]), static_int(b.shape[1])
    if k is None or n is None:
        return None
    return n, k, "col" if static_int(b.stride(0)) == 1 and n > 1 else "row"


def _reduction(a: Any, b: Any) -> Any:
    """``a @ b`` as Inductor's own decomposition spells it: a broadcast multiply summed over K (fp32 inside the
    fused kernel, as Inductor's reductions accumulate)."""
    return (a.unsqueeze(2) * b.unsqueeze(0)).sum(dim=1)


_RULE: list[Callable[[int, int, str, str], bool]] = [takes_reduction]


def _wants(a: Any, b: Any) -> bool:
    shape = _gemv_shape(a, b)
    if shape is None:
        return False
    n, k, layout = shape
    return _RULE[-1](n, k, str(a.dtype).removeprefix("torch."), layout)


def _mm(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def mm_as_gemv(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and _wants(a, b):
            _COUNTS["gemv_reductions"] += 1
            return _reduction(a, b)
        return original(a, b, *args, **kwargs)
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
    return addmm_as_gemv


_COUNTS = {"gemv_reductions": 0}


def gemv_count() -> int:
    """GEMMs traced into the reduction form in this process (the zoo's records report it beside the hook's stats)."""
    return _COUNTS["gemv_reductions"]


@contextlib.contextmanager
def gemv_as_reduction(rule: Callable[[int, int, str, str], bool] | None = None,
                      allow_similar: bool = True) -> Iterator[None]:
    """While active, Inductor's ``mm``/``addmm`` decompositions turn each GEMV that ``rule(n, k, dtype, layout_b)``
    takes (default: ``runtime_rule(allow_similar)``) into the reduction form and leave every other GEMM to the original
    decomposition. The tables are restored on exit, also on an error. (The GEMV collector passes a rule that takes
    every GEMV.)"""
    import torch

    aten = torch.ops.aten
    wrappers = {aten.mm.default: _mm, aten.addmm.default: _addmm}
    _RULE.append(rule or runtime_rule(allow_similar))
    try:
        with wrapped_entries(decomposition_tables(), wrappers, lambda op, original: wrappers[op](original),
                             "predictor_gemv"):
            yield
    finally:
        _RULE.pop()
