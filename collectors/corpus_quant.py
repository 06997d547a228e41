"""The quantized shape corpus: the GEMMs quantized inference runs, as real code lays them out (issue 16).

A corpus of its own (``datasets/corpus/quant_v1.parquet``), not rows added to ``corpus_v1``: that file, its hash and
every dataset labelled from it stay valid, and the quantized problems can be collected in one run.

* ``int_mm`` with B column-major: torchao's int8 dynamic-activation/int8-weight and any ``F.linear``-style weight
  call ``torch._int_mm(x, w.t())`` (checked on an H100 with torchao 0.18: W (K, N) of strides (1, K)). corpus_v1's
  int8 problems are all B row-major.
* ``scaled_mm_tensorwise`` / ``scaled_mm_rowwise``: ``torch._scaled_mm`` on float8_e4m3fn with bf16 output, B
  column-major as ``_scaled_mm`` requires (torchao's ``Float8DynamicActivationFloat8WeightConfig``, PerTensor or
  PerRow).

Shapes: every linear layer of the model families that corpus_v1 already runs as int8 (LLMs, encoders, ViTs,
speech), forward only (inference), at M from decode batches (1..64) to prefill lengths. No randomness: the
corpus is the full product, deduplicated by problem id (the first family's tag wins, as in ``build_corpus``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from predictor.core.problem import SCALED_OPS

from .corpus_rows import _row, _take, corpus_frame, int_mm_ok
from .corpus_families import MODEL_FAMILIES, ModelFamily

QUANT_CORPUS_VERSION = 1
# decode batches (1..64; 17 and 24 because torch._int_mm needs M > 16) and prefill lengths (odd ones included)
QUANT_M: tuple[int, ...] = (1, 2, 4, 8, 16, 17, 24, 32, 48, 64, 128, 333, 512, 1024, 2048, 4096)
FP8_DTYPE = "float8_e4m3fn"  # e4m3 for both operands, as torchao's inference configs use; e5m2 is a gradient format


def scaled_mm_ok(m: int, n: int, k: int) -> bool:
    """torch._scaled_mm's constraints (CUDA): K and N multiples of 16 (cuBLASLt / CUTLASS fp8 alignment)."""
    return m >= 1 and k % 16 == 0 and n % 16 == 0


def quant_families() -> tuple[ModelFamily, ...]:
    """The families corpus_v1 runs as int8 (``int8_m``): the layer shapes quantized inference is used on."""
    return tuple(f for f in MODEL_FAMILIES if f.int8_m)


def quant_rows(family: ModelFamily) -> Iterator[dict[str, Any] | None]:
    """Each forward layer GEMM at each M of ``QUANT_M``: int8 ``_int_mm`` (B col), fp8 tensorwise and rowwise."""
    for tokens in QUANT_M:
        for layer in family.layers:
            m = tokens // layer.m_div
            if m < 1:
                continue
            tag = f"{family.group}:{layer.name}:fwd"
            n, k = layer.out_f, layer.in_f
            if int_mm_ok(m, n, k):
                yield _row(tag, "int_mm", m, n, k, "int8", layout_b="col")
            if scaled_mm_ok(m, n, k):
                for op in SCALED_OPS:
                    yield _row(tag, op, m, n, k, FP8_DTYPE, layout_b="col")


def build_quant_corpus() -> pd.DataFrame:
    """The quantized corpus, in the corpus_v1 columns and row order."""
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    for family in quant_families():
        _take(quant_rows(family), seen, rows)
    return corpus_frame(rows)
