"""Bulk-timing kernels that mirror Inductor 2.11's GEMM templates with sizes and strides as runtime arguments.

Inductor bakes M, N, K and strides into each generated kernel; timing 100k (problem, config) pairs that way
would mean 100k compiles. Here one compile per (config, dtype, layout, EVEN_K) serves every shape: the body
is Inductor's ``triton_mm.py.jinja`` / ``triton_persistent_tma_mm.py.jinja`` with the template variables turned
into kernel arguments. Triton still specialises stride == 1 and 16-divisibility of strides, which is what
lets Inductor's loads vectorise; M, N, K are not specialised (``do_not_specialize``) so shapes share binaries.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M", "N", "K"])
def mm_kernel(
    A, B, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_ab, stride_bb, stride_cb,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, ALLOW_TF32: tl.constexpr, ACC_TYPE: tl.constexpr, HAS_BIAS: tl.constexpr,
    A_CONTIGUOUS_M: tl.constexpr, B_CONTIGUOUS_N: tl.constexpr,
):
    # batch (bmm) is grid axis 1, as in Inductor's bmm template; strides are 0 for plain mm. The batch offset
    # is 64-bit; everything inside one matrix is int32, as Inductor's INDEX_DTYPE is for operands < 2**31.
    bid = tl.program_id(1).to(tl.int64)
    A += bid * stride_ab
    B += bid * stride_bb
    C += bid * stride_cb
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N

    # re-order program ID for better L2 performance (Inductor's GROUP_M swizzle)
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = tl.minimum(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Inductor decides these at codegen time from constant sizes and strides; a runtime `if` would merge both
    # branches and lose the contiguity hints (scalar loads, ~13x slower for row-major B), so the host decides
    # with the same condition and passes constexprs.
    if A_CONTIGUOUS_M:
        offs_a_m = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        offs_a_m = rm % M
    if B_CONTIGUOUS_N:
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)

    for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
        a_k = offs_k[None, :] + k_idx * BLOCK_K
        b_k = offs_k[:, None] + k_idx * BLOCK_K
        a_ptrs = A + offs_a_m[:, None] * stride_am + a_k * stride_ak
        b_ptrs = B + b_k * stride_bk + offs_b_n[None, :] * stride_bn
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < (K - k_idx * BLOCK_K), other=0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < (K - k_idx * BLOCK_K), other=0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)

    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    if HAS_BIAS:  # addmm epilogue: bias broadcast over rows, added in the accumulator type
        acc += tl.load(BIAS + idx_n, mask=idx_n < N, other=0).to(ACC_TYPE)
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask)


@triton.jit(do_not_specialize=["M", "N", "K"])
def persistent_tma_mm_kernel(
    A, B, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_ROW_MAJOR: tl.constexpr, B_ROW_MAJOR: tl.constexpr, NUM_SMS: tl.constexpr,
    ALLOW_TF32: tl.constexpr, ACC_TYPE: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    start_pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = grid_m * grid_n
    width = GROUP_M * grid_n

    a_desc = tl.make_tensor_descriptor(
        base=A,
        shape=[M, K] if A_ROW_MAJOR else [K, M],
        strides=[stride_am, 1] if A_ROW_MAJOR else [stride_ak, 1],
        block_shape=[BLOCK_M, BLOCK_K] if A_ROW_MAJOR else [BLOCK_K, BLOCK_M],
    )
    b_desc = tl.make_tensor_descriptor(
        base=B,
        shape=[K, N] if B_ROW_MAJOR else [N, K],
        strides=[stride_bk, 1] if B_ROW_MAJOR else [stride_bn, 1],
        block_shape=[BLOCK_K, BLOCK_N] if B_ROW_MAJOR else [BLOCK_N, BLOCK_K],
    )
    c_desc = tl.make_tensor_descriptor(base=C, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS):
        group_id = tile_id // width
        group_size = tl.minimum(grid_m - group_id * GROUP_M, GROUP_M)
        pid_m = group_id * GROUP_M + (tile_id % group_size)
        pid_n = (tile_id % width) // group_size
        rm = pid_m * BLOCK_M
        rn = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
        for rk in tl.range(0, K, BLOCK_K):
            a = tl.load_tensor_descriptor(a_desc, [rm, rk] if A_ROW_MAJOR else [rk, rm])
            b = tl.load_tensor_descriptor(b_desc, [rk, rn] if B_ROW_MAJOR else [rn, rk])
            acc += tl.dot(a if A_ROW_MAJOR else a.T, b if B_ROW_MAJOR else b.T, allow_tf32=ALLOW_TF32)
        if HAS_BIAS:  # addmm epilogue
            rcn = rn + tl.arange(0, BLOCK_N)
            acc += tl.load(BIAS + rcn, mask=rcn < N, other=0).to(ACC_TYPE)[None, :]
        tl.store_tensor_descriptor(c_desc, [rm, rn], acc.to(C.dtype.element_ty))


@triton.jit(do_not_specialize=["MN"])
def sum_splits_kernel(P, C, MN, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    """The reduction half of decompose-K: C = sum over splits of the fp32 partial products, cast to C's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLITS):
        acc += tl.load(P + s * MN + offs, mask=mask, other=0.0)
    tl.store(C + offs, acc.to(C.dtype.element_ty), mask=mask)
