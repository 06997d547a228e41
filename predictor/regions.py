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
model where one ships for the GPU. Plain arithmetic on scalars or numpy arrays: no pandas, no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHORT_UNALIGNED = "short-unaligned"
REGIONS = (SHORT_UNALIGNED,)
SHORT_SIDE = 1024  # the longest N or K counted as short
MIN_MNK = 2**27  # smaller GEMMs take a few microseconds whichever kernel runs them


def short_unaligned(op: Any, dtype: Any, m: Any, n: Any, k: Any) -> Any:
    """Whether each GEMM is in the ``short-unaligned`` region: a bool for scalars, a bool array for arrays."""
    op, dtype = np.asarray(op, dtype=object), np.asarray(dtype, dtype=object)
    m, n, k = (np.asarray(v, dtype=np.int64) for v in (m, n, k))
    kind = np.isin(op, ("mm", "addmm")) & np.isin(dtype, ("float16", "bfloat16"))
    short = ((n % 8 != 0) & (n <= SHORT_SIDE)) | ((k % 8 != 0) & (k <= SHORT_SIDE))
    inside = kind & short & (m.astype(np.float64) * n * k >= MIN_MNK)
    return bool(inside) if inside.ndim == 0 else inside


def in_region(region: str, problem: Any) -> bool:
    """Whether ``problem`` (a ``Problem``) lies in ``region``."""
    if region != SHORT_UNALIGNED:
        raise ValueError(f"unknown region {region!r}; known: {', '.join(REGIONS)}")
    return short_unaligned(problem.op, problem.dtype, problem.m, problem.n, problem.k)


def region_of(problem: Any) -> str | None:
    """The region ``problem`` lies in, or None."""
    return next((r for r in REGIONS if in_region(r, problem)), None)


def rows_in_region(region: str, rows: Any) -> np.ndarray:
    """Bool mask of a dataset's rows (a DataFrame with op, dtype, m, n, k) that lie in ``region``."""
    if region not in REGIONS:
        raise ValueError(f"unknown region {region!r}; known: {', '.join(REGIONS)}")
    return short_unaligned(rows["op"].astype(str).to_numpy(), rows["dtype"].astype(str).to_numpy(),
                           rows["m"].to_numpy(), rows["n"].to_numpy(), rows["k"].to_numpy())
