"""The few-rows GEMM kernel: ``x @ w.T (+ bias)`` for an x of at most a block of rows and a weight in ``F.linear``'s
layout (n, k), every weight element read once.

Why a kernel of its own: a GEMM of 2-16 rows reads the whole weight to do a few flops per element, so its speed is
HBM bandwidth. cuBLAS's kernels for it reached 0.9-2.3 TB/s of an H100's 3.35 on decoder weights (isolated, L2
flushed: ``docs/benchmarks/small-m-reduction``), and the GEMV path's reduction form reads the weight once per row
(3.9x cuBLAS's time from two rows on). Here each program owns ``BLOCK_N`` outputs for every row: it streams its
``BLOCK_N x k`` slice of the weight once, in ``BLOCK_K`` steps pipelined ``num_stages`` deep, and multiplies each
step on the tensor cores against all rows at once (``BLOCK_M``: the rows padded to 16 or 32). Rows beyond ``m``
are masked, so one compiled kernel serves every ``m`` up to ``BLOCK_M``.

Imported only where a kernel runs (it imports Triton).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..compile_state import pow2_ceil


@triton.jit(do_not_specialize=["m"])  # one compiled kernel for every row count
def _few_rows_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, m, n, k,
                     stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                     HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_M)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    steps = tl.arange(0, BLOCK_K)
    row_ok = rows[:, None] < m
    col_ok = cols[None, :] < n
    x_ptrs = x_ptr + rows[:, None] * stride_xm + steps[None, :] * stride_xk
    w_ptrs = w_ptr + cols[None, :] * stride_wn + steps[:, None] * stride_wk  # (BLOCK_K, BLOCK_N): w.T's tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        if EVEN_K:
            xs = tl.load(x_ptrs, mask=row_ok, other=0.0)
            ws = tl.load(w_ptrs, mask=col_ok, other=0.0)
        else:
            left = k - start
            xs = tl.load(x_ptrs, mask=row_ok & (steps[None, :] < left), other=0.0)
            ws = tl.load(w_ptrs, mask=col_ok & (steps[:, None] < left), other=0.0)
        acc = tl.dot(xs, ws, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok & col_ok)


def block_rows(rows: int) -> int:
    """The rows a program multiplies at once for GEMMs of up to ``rows`` rows: tensor-core tiles start at 16."""
    return max(16, pow2_ceil(rows))


def few_rows_linear(x: Any, weight: Any, bias: Any, rows: int, block_n: int, block_k: int, warps: int,
                    stages: int) -> Any:
    """``x @ weight.T + bias`` by the few-rows kernel, for ``x`` of at most ``rows`` rows (``block_rows``), with one
    block config (``few_rows.Config``)."""
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _few_rows_kernel[(triton.cdiv(n, block_n),)](
        x, weight, bias if bias is not None else out, out, m, n, k, x.stride(0), x.stride(1), weight.stride(0),
        weight.stride(1), out.stride(0), out.stride(1), HAS_BIAS=bias is not None, EVEN_K=k % block_k == 0,
        BLOCK_M=block_rows(rows), BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
    return out


def warm(dtype: Any, n: int, k: int, has_bias: bool, rows: int, block_n: int, block_k: int, warps: int,
         stages: int, device: int) -> None:
    """Compile the kernel a ``few_rows_linear`` call on a contiguous (rows, k) ``x`` and an (n, k) weight will run,
    without running it (Triton's ``warmup``: the same specialisation, so the call finds it compiled)."""
    torch.cuda.set_device(device)  # Triton compiles for the current device of this thread
    _few_rows_kernel.warmup(dtype, dtype, dtype, dtype, 2, n, k, k, 1, k, 1, n, 1, HAS_BIAS=has_bias,
                            EVEN_K=k % block_k == 0, BLOCK_M=block_rows(rows), BLOCK_N=block_n, BLOCK_K=block_k,
                            num_warps=warps, num_stages=stages, grid=(1,))
