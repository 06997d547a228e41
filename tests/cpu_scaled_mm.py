"""Whether this torch's CPU ``torch._scaled_mm`` takes rowwise scales. torch 2.11's takes per-tensor scales only (ATen
refuses others with "only supports per-tensor scaling for CPU backend"); 2.13's takes rowwise ones too. Tests that
run the aten runner or compare a kernel with ``_scaled_mm`` on the CPU do so for rowwise problems only where it can.
"""

from __future__ import annotations

import functools

import torch

NO_CPU_ROWWISE = "this torch's CPU _scaled_mm takes per-tensor scales only"


@functools.lru_cache(maxsize=1)
def cpu_scaled_mm_takes_row_scales() -> bool:
    a = torch.ones(16, 32, dtype=torch.float8_e4m3fn)
    b = torch.ones(16, 32, dtype=torch.float8_e4m3fn).t()
    try:
        torch._scaled_mm(a, b, torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16)
    except RuntimeError as exc:
        if "per-tensor" in str(exc):
            return False
        raise  # any other failure is not the missing feature: let the test see it
    return True
