"""Bulk-timing kernels that mirror Inductor 2.11's GEMM templates with sizes and strides as runtime arguments.

Inductor bakes M, N, K and strides into each generated kernel; timing 100k (problem, config) pairs that way
would mean 100k compiles. Here one compile per (config, dtype, layout, EVEN_K) serves every shape: the body
is Inductor's ``triton_mm.py.jinja`` / ``triton_persistent_tma_mm.py.jinja`` (and, for fp8 ``_scaled_mm``, the mm
template with its scaling epilogue and ``triton_epilogue_scaled_mm.py.jinja``) with the template variables turned
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


# --- fp8 torch._scaled_mm (tensorwise and rowwise scales) ------------------------------------------------------
# Inductor offers two Triton templates for them (kernel/mm.py tuned_scaled_mm): ``triton::mm`` with the scaling
# epilogue ``mm_common.scale_mm_epilogue`` (acc * (scale_a * scale_b), scales read through their broadcast loaders),
# and on Hopper the persistent device-TMA ``scaled_mm_device_tma_epilogue_scaling`` (triton_epilogue_scaled_mm.py.jinja).
# Both take USE_FAST_ACCUM from _scaled_mm's use_fast_accum: ``acc = tl.dot(a, b, acc)`` (the accumulator goes into
# the MMA, which on sm90 accumulates fp8 products imprecisely across the whole K loop) instead of ``acc += dot``.


@triton.jit(do_not_specialize=["M", "N", "K"])
def scaled_mm_kernel(
    A, B, C, SCALE_A, SCALE_B, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, ALLOW_TF32: tl.constexpr, ACC_TYPE: tl.constexpr, USE_FAST_ACCUM: tl.constexpr,
    A_CONTIGUOUS_M: tl.constexpr, B_CONTIGUOUS_N: tl.constexpr,
    SCALE_A_PER_ROW: tl.constexpr, SCALE_B_PER_COL: tl.constexpr,
):
    """triton_mm.py.jinja with scaled_mm's epilogue. ``SCALE_A_PER_ROW``: scale_a is (M, 1) with M > 1, else one
    value; ``SCALE_B_PER_COL``: scale_b is (1, N) with N > 1. Inductor's loaders skip size-1 dims, so a (1, 1)
    scale (tensorwise, or rowwise with M == 1) is read at offset 0."""
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N

    # re-order program ID for better L2 performance
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = tl.minimum(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
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
            a = tl.load(a_ptrs, mask=offs_k[None, :] < (K - k_idx * BLOCK_K), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < (K - k_idx * BLOCK_K), other=0.0)
        if USE_FAST_ACCUM:
            acc = tl.dot(a, b, acc, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)
        else:
            acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)

    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    # the suffix Inductor generates for scale_mm_epilogue: both scales loaded at the tile's shape, multiplied
    # together first, then into the fp32 accumulator, cast once at the store
    if SCALE_A_PER_ROW:
        scale_a = tl.load(SCALE_A + tl.broadcast_to(idx_m, (BLOCK_M, BLOCK_N)), mask, eviction_policy="evict_last")
    else:
        scale_a = tl.load(SCALE_A)
    if SCALE_B_PER_COL:
        scale_b = tl.load(SCALE_B + tl.broadcast_to(idx_n, (BLOCK_M, BLOCK_N)), mask, eviction_policy="evict_last")
    else:
        scale_b = tl.load(SCALE_B)
    acc = acc * (scale_a * scale_b)
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask)


@triton.jit(do_not_specialize=["M", "N", "K"])
def scaled_persistent_tma_kernel(
    A, B, C, SCALE_A, SCALE_B, M, N, K, stride_am, stride_bn, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, ACC_TYPE: tl.constexpr, USE_FAST_ACCUM: tl.constexpr,
    SCALE_RECIPE_A: tl.constexpr, SCALE_RECIPE_B: tl.constexpr,
):
    """triton_epilogue_scaled_mm.py.jinja (stable TMA API branch): A (M, K) row-major and B given as its (N, K)
    row-major transpose, one flattened loop over (tile, k) pairs per program, scales applied at each tile's last
    k step. ``SCALE_RECIPE_*``: 0 tensorwise, 1 rowwise (ScalingType). Inductor stores with block indexing, which
    without ``config.triton.enable_template_tma_store`` (off by default) is a masked pointer store."""
    if SCALE_RECIPE_A == 1:  # ScalingType.RowWise
        stride_a_scale_m = 1
    else:
        stride_a_scale_m = 0
    if SCALE_RECIPE_B == 1:
        stride_b_scale_n = 1
    else:
        stride_b_scale_n = 0

    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n

    a_desc = tl.make_tensor_descriptor(base=A, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(base=B, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])

    tiles_per_SM = num_tiles // NUM_SMS
    if start_pid < num_tiles % NUM_SMS:
        tiles_per_SM += 1

    tile_id = start_pid - NUM_SMS
    ki = -1

    pid_m = 0
    pid_n = 0
    offs_am = 0
    offs_bn = 0

    num_pid_in_group = GROUP_M * num_pid_n
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    a_scale = _load_scales(SCALE_A, SCALE_RECIPE_A)
    b_scale = _load_scales(SCALE_B, SCALE_RECIPE_B)

    for _ in range(0, k_tiles * tiles_per_SM):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            tile_id += NUM_SMS
            group_id = tile_id // num_pid_in_group
            first_pid_m = group_id * GROUP_M
            group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
            pid_m = first_pid_m + (tile_id % group_size_m)
            pid_n = (tile_id % num_pid_in_group) // group_size_m

            offs_am = pid_m * BLOCK_M
            offs_bn = pid_n * BLOCK_N

        offs_k = ki * BLOCK_K
        a = tl.load_tensor_descriptor(a_desc, [offs_am, offs_k])
        b = tl.load_tensor_descriptor(b_desc, [offs_bn, offs_k])
        if USE_FAST_ACCUM:
            accumulator = tl.dot(a, b.T, accumulator)
        else:
            accumulator += tl.dot(a, b.T)

        if ki == k_tiles - 1:
            offs_cm = offs_am + tl.arange(0, BLOCK_M)
            offs_cn = offs_bn + tl.arange(0, BLOCK_N)
            accumulator = _apply_scaling(accumulator, a_scale, b_scale, SCALE_RECIPE_A, SCALE_RECIPE_B, offs_cm,
                                         offs_cn, M, N, stride_a_scale_m, stride_b_scale_n)
            idx_m = offs_cm[:, None]
            idx_n = offs_cn[None, :]
            mask = (idx_m < M) & (idx_n < N)
            tl.store(C + idx_m * stride_cm + idx_n, accumulator.to(C.dtype.element_ty), mask)
            accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


@triton.jit
def _load_scales(scale_ptr, SCALE_RECIPE: tl.constexpr):
    if SCALE_RECIPE == 0:
        return tl.load(scale_ptr)  # tensorwise: the scalar itself
    else:
        return scale_ptr  # rowwise: the pointer, read per tile


@triton.jit
def _apply_scaling(accumulator, a_scale, b_scale, SCALE_RECIPE_A: tl.constexpr, SCALE_RECIPE_B: tl.constexpr,
                   offs_cm, offs_cn, M, N, stride_a_scale_m, stride_b_scale_n):
    if SCALE_RECIPE_A == 1 and SCALE_RECIPE_B == 1:  # (RowWise, RowWise)
        a_scales = tl.load(a_scale + (offs_cm * stride_a_scale_m), mask=offs_cm < M, other=0.0)
        b_scales = tl.load(b_scale + (offs_cn * stride_b_scale_n), mask=offs_cn < N, other=0.0)
        acc_scale = a_scales[:, None] * b_scales[None, :]
    else:  # (TensorWise, TensorWise)
        acc_scale = a_scale * b_scale
    return accumulator * acc_scale


@triton.jit(do_not_specialize=["MN"])
def sum_splits_kernel(P, C, MN, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    """The reduction half of decompose-K: C = sum over splits of the fp32 partial products, cast to C's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLITS):
        acc += tl.load(P + s * MN + offs, mask=mask, other=0.0)
    tl.store(C + offs, acc.to(C.dtype.element_ty), mask=mask)
