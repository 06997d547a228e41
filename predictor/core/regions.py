"""Problem regions: kinds of GEMM that a model of their own ranks, and where the decide policy needs its own floor.

One region so far, ``short-unaligned``: fp16/bf16 ``mm``/``addmm`` with an output width (N) or reduction (K) of at
most 1024 that is not a multiple of 8, and at least 2**27 multiply-adds. Token-mixing layers (MLP-Mixer, ResMLP,
gMLP: N or K is a token count such as 49, 196 or 577) are such GEMMs. Their rows are not 16-byte aligned, so
cuBLAS runs its 2-byte-aligned kernels, and which kernel wins there is another question than elsewhere:
- the shipped H100 ranker, trained on 148 such problems among 5143, reaches 0.926 of the best kernel on 155
  token-mixing problems it never saw (0.895 under the decide policy's -2.5 gap), cuBLAS alone 0.776;
- a ranker fitted on the region's problems alone, each token-mixing family held out in turn, reaches 0.976
  (``datasets/nvidia-h100/TOKEN_MIXING.md``).

Shared by training (``gemm-predictor train --region``) and the hook, which scores a region's GEMMs with the region's
model where one ships for the GPU. No pandas, no torch, no numpy at import.
"""

from __future__ import annotations

from typing import Any

SHORT_UNALIGNED = "short-unaligned"
REGIONS = (SHORT_UNALIGNED,)
ALIGN = 8  # elements: 16 bytes of fp16/bf16
SHORT_SIDE = 1024  # the longest N or K counted as short
MIN_MNK = 2**27  # smaller GEMMs take a few microseconds whichever kernel runs them
OPS = ("mm", "addmm")
DTYPES = ("float16", "bfloat16")
BOUNDS = (ALIGN, SHORT_SIDE, MIN_MNK, OPS, DTYPES)  # what decides membership (the hook's cache key carries it)


def short_unaligned_side(size: Any) -> Any:
    """Whether a GEMM side (an int, or a numpy array of them) is short and not a multiple of ``ALIGN``."""
    return (size % ALIGN != 0) & (size <= SHORT_SIDE)


def short_unaligned(op: str, dtype: str, m: int, n: int, k: int) -> bool:
    """Whether one GEMM is in the ``short-unaligned`` region (plain Python: the hook asks for every GEMM)."""
    return (op in OPS and dtype in DTYPES and bool(short_unaligned_side(n) or short_unaligned_side(k))
            and m * n * k >= MIN_MNK)


def region_of(problem: Any) -> str | None:
    """The region ``problem`` (a ``Problem``) lies in, or None."""
    return SHORT_UNALIGNED if short_unaligned(problem.op, problem.dtype, problem.m, problem.n, problem.k) else None


def rows_in_region(region: str, rows: Any) -> Any:
    """Bool mask (numpy) of a dataset's rows (a DataFrame with op, dtype, m, n, k) that lie in ``region``."""
    if region not in REGIONS:
        raise ValueError(f"unknown region {region!r}; known: {', '.join(REGIONS)}")
    m, n, k = (rows[c].to_numpy(dtype="int64") for c in ("m", "n", "k"))
    kind = (rows["op"].astype(str).isin(OPS) & rows["dtype"].astype(str).isin(DTYPES)).to_numpy()
    return kind & (short_unaligned_side(n) | short_unaligned_side(k)) & (m.astype(float) * n * k >= MIN_MNK)
