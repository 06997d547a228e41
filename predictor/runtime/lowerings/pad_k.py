"""Short unaligned reductions padded to a multiple of 8: ``A (M, K) @ B (K, N)`` with K = 196 becomes
``[A | 0] (M, 200) @ [B ; 0] (200, N)``, the same product.

Why: an fp16/bf16 row of 196 elements is 392 bytes, not a multiple of 16, so cuBLAS runs its 2-byte-aligned kernels
and Triton's templates lose their even-K loads. Padded, both run their aligned kernels; the zeros add nothing. On
an H100 (``python -m benchmarks.pad_k_bench``, plain ``torch.compile``, the pad included) token-mixing GEMMs ran
1.3-2.7x faster: 24576 x 384 x 196 fp16 38.9 -> 26.6 us, 6272 x 3072 x 197 96.4 -> 35.6 us; one of six cases
(24576 x 1536 x 197 bf16) was even. Inductor's own ``pad_mm`` pass benchmarks this at compile time and left every
one of them unpadded; ``comprehensive_padding`` pads only strides above 1024 elements, and never a weight's.

Which GEMMs (``padded_k``): 2-D ``mm``/``addmm`` on CUDA in fp16/bf16 with static sizes, K a short unaligned side
(``predictor.core.regions``: not a multiple of 8, at most 1024: token mixing, patch-14 stems' K = 588), at least 2**27
multiply-adds (smaller ones take a few microseconds either way), more than one row (one-row GEMMs are GEMVs,
``runtime.gemv``).
The pad of an operand computed in the graph fuses into the kernel that produces it; a weight's is a copy of the
weight per call (N x K elements).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...core.regions import ALIGN, MIN_MNK, short_unaligned_side
from ..compile_state import static_int
from .tables import added_entries, decomposition_tables

DEVICES = ("cuda",)  # where it was measured (the CPU tests add "cpu")
DTYPES = ("float16", "bfloat16")


def padded_k(a: Any, b: Any) -> int | None:
    """The K to pad ``a @ b`` to, or None where the rule does not take the GEMM (module docstring)."""
    if a.dim() != 2 or b.dim() != 2 or a.device.type not in DEVICES or b.device != a.device:
        return None
    if str(a.dtype).removeprefix("torch.") not in DTYPES or b.dtype != a.dtype:
        return None
    m, k, n = (static_int(size) for size in (*a.shape, b.shape[1]))
    if m is None or k is None or n is None:  # a symbolic size: not known until run time
        return None
    if not short_unaligned_side(k) or m <= 1 or m * n * k < MIN_MNK:
        return None
    return k + ALIGN - k % ALIGN


def _padded(a: Any, b: Any, k: int) -> tuple[Any, Any]:
    import torch.nn.functional as F

    extra = k - a.shape[1]
    return F.pad(a, (0, extra)), F.pad(b, (0, 0, 0, extra))


def mm_padded(a: Any, b: Any) -> Any:
    """A decomposition of ``aten.mm``: the padded product where ``padded_k`` takes it, else ``NotImplemented``."""
    import torch

    k = padded_k(a, b)
    if k is None:
        return NotImplemented
    _COUNTS["padded_k"] += 1
    return torch.mm(*_padded(a, b, k))


def addmm_padded(bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    """A decomposition of ``aten.addmm``: as ``mm_padded``, the bias and scales kept."""
    import torch

    k = padded_k(a, b)
    if k is None:
        return NotImplemented
    _COUNTS["padded_k"] += 1
    return torch.addmm(bias, *_padded(a, b, k), beta=beta, alpha=alpha)


_COUNTS = {"padded_k": 0}


def padded_k_count() -> int:
    """GEMMs traced with a padded K in this process (the zoo's records report it)."""
    return _COUNTS["padded_k"]


@contextlib.contextmanager
def short_k_padded(enabled: bool = True) -> Iterator[None]:
    """While active (and ``enabled``), Inductor's decomposition tables pad each GEMM ``padded_k`` takes; the tables
    are restored on exit, also on an error."""
    import torch

    if not enabled:
        yield
        return
    aten = torch.ops.aten
    entries = {aten.mm.default: mm_padded, aten.addmm.default: addmm_padded}
    with added_entries(decomposition_tables(), entries, "predictor_pad_k"):
        yield
