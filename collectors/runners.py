"""Turn (problem, candidate) into a launchable closure over preallocated operands, the way Inductor runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import triton

from predictor.core.candidate import Candidate
from predictor.core.problem import SCALED_OPS, Problem

from . import kernels

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "int8": torch.int8, "int32": torch.int32, "float8_e4m3fn": torch.float8_e4m3fn,
                "float8_e5m2": torch.float8_e5m2}
# Relative Frobenius error allowed against an fp32 reference, by input dtype (DESIGN: tolerances by dtype). fp8: the
# reference multiplies the same fp8 values exactly, so what remains is the bf16 output and fast accumulation.
REL_TOLERANCE = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-4, "int8": 0.0, "float8_e4m3fn": 2e-2,
                 "float8_e5m2": 2e-2}
# torchao's fp8 inference (Float8DynamicActivationFloat8WeightConfig) calls _scaled_mm with use_fast_accum=True
FP8_FAST_ACCUM = True


@dataclass
class Operands:
    a: torch.Tensor
    b: torch.Tensor
    bias: torch.Tensor | None
    out: torch.Tensor
    reference: torch.Tensor  # fp32 (or int32) result of torch.matmul on the same inputs
    scale_a: torch.Tensor | None = None  # fp8 scaled_mm: fp32 scales, (1, 1) tensorwise or (M, 1) rowwise
    scale_b: torch.Tensor | None = None  # (1, 1) or (1, N)


def make_operands(p: Problem, device: torch.device, seed: int = 0) -> Operands:
    """Random operands in the problem's layouts (``col`` = a transposed view of a contiguous tensor)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = TORCH_DTYPES[p.dtype]
    batch = (p.b,) if p.op == "bmm" else ()

    def operand(rows: int, cols: int, layout: str) -> torch.Tensor:
        shape = batch + ((cols, rows) if layout == "col" else (rows, cols))
        if dtype == torch.int8:
            t = torch.randint(-8, 8, shape, device=device, dtype=dtype, generator=gen)
        else:
            # scale so sums over k stay O(1) and relative errors are meaningful
            t = (torch.randn(shape, device=device, dtype=torch.float32, generator=gen) / (p.k ** 0.25)).to(dtype)
        return t.transpose(-1, -2) if layout == "col" else t

    if p.op in SCALED_OPS:
        return _scaled_operands(p, device, gen)
    a = operand(p.m, p.k, p.layout_a)
    b = operand(p.k, p.n, p.layout_b)
    bias = torch.randn(p.n, device=device, dtype=torch.float32, generator=gen).to(dtype) if p.op == "addmm" else None
    out = torch.empty(batch + (p.m, p.n), device=device, dtype=TORCH_DTYPES[p.out_dtype])
    if dtype == torch.int8:
        # fp32 is exact here (|entries| <= 8, so every partial sum is an integer below 2**24 for k <= 65536), and
        # unlike torch._int_mm it accepts every shape (cuBLASLt refuses some, e.g. 13499x128x80)
        reference = torch.matmul(a.float(), b.float()).to(torch.int32)
    else:
        reference = torch.matmul(a.float(), b.float())
        if bias is not None:
            reference = reference + bias.float()
    return Operands(a, b, bias, out, reference)


def _scaled_operands(p: Problem, device: torch.device, gen: torch.Generator) -> Operands:
    """fp8 operands quantised as torchao does (amax / fp8 max per tensor or per row of A / column of B), B the
    transpose of a contiguous (N, K) weight (``_scaled_mm`` needs B column-major); the reference multiplies the
    dequantised fp8 values in fp32."""
    if p.layout_a != "row" or p.layout_b != "col":
        raise ValueError(f"{p.op} needs A row-major and B column-major, got {p.layout_a}/{p.layout_b}")
    fp8 = TORCH_DTYPES[p.dtype]
    top = torch.finfo(fp8).max
    x = torch.randn((p.m, p.k), device=device, dtype=torch.float32, generator=gen)
    w = torch.randn((p.n, p.k), device=device, dtype=torch.float32, generator=gen)
    rowwise = p.op == "scaled_mm_rowwise"
    amax_x = x.abs().amax(dim=1, keepdim=True) if rowwise else x.abs().amax().reshape(1, 1)
    amax_w = w.abs().amax(dim=1, keepdim=True) if rowwise else w.abs().amax().reshape(1, 1)
    scale_a = (amax_x / top).clamp_min(1e-12)  # dequantisation scales, what _scaled_mm multiplies by
    scale_b = (amax_w / top).clamp_min(1e-12).t().contiguous() if rowwise else (amax_w / top).clamp_min(1e-12)
    a = (x / scale_a).to(fp8)
    b = (w / scale_b.t()).to(fp8).t()  # (K, N), strides (1, K)
    reference = (a.float() * scale_a) @ (b.float() * scale_b)
    out = torch.empty((p.m, p.n), device=device, dtype=TORCH_DTYPES[p.out_dtype])
    return Operands(a, b, None, out, reference, scale_a, scale_b)


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    diff = (out.float() - reference.float()).norm()
    return float(diff / reference.float().norm().clamp_min(1e-12))


def make_runner(p: Problem, c: Candidate, ops: Operands, num_sms: int) -> Callable[[], None]:
    """A zero-argument closure that writes the candidate's result into ``ops.out``."""
    if c.family == "aten":
        return _aten_runner(c.aten_op, ops)
    if p.op in SCALED_OPS:
        if c.family == "triton_mm":
            return _scaled_mm_runner(p, c, ops)
        if c.family == "triton_tma":
            return _scaled_tma_runner(p, c, ops, num_sms)
        raise NotImplementedError(f"{c.key}: Inductor offers no {c.family} candidate for {p.op}, nor has the bulk "
                                  "collector a kernel for one")
    if c.family == "decompose_k":
        return _decompose_k_runner(p, c, ops)
    if c.family == "triton_tma":
        return _tma_runner(p, c, ops, num_sms)
    return _mm_runner(p, c, ops)


def _aten_runner(op: str, ops: Operands) -> Callable[[], None]:
    a, b, out, bias = ops.a, ops.b, ops.out, ops.bias
    if op == "mm":
        return lambda: torch.mm(a, b, out=out)
    if op == "bmm":
        return lambda: torch.bmm(a, b, out=out)
    if op == "_int_mm":
        return lambda: torch._int_mm(a, b, out=out)
    if op == "_scaled_mm":
        sa, sb = ops.scale_a, ops.scale_b
        return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=out.dtype, use_fast_accum=FP8_FAST_ACCUM, out=out)
    if op == "bias_addmm":  # Inductor's bias_addmm: 1-D bias, cuBLASLt epilogue
        return lambda: torch.addmm(bias, a, b, out=out)
    if op == "addmm":  # Inductor's aten addmm: the bias expanded to (m, n)
        full = bias.expand(out.shape)
        return lambda: torch.addmm(full, a, b, out=out)
    raise ValueError(f"unknown aten op {op!r}")


def _mm_runner(p: Problem, c: Candidate, ops: Operands) -> Callable[[], None]:
    a, b, out = ops.a, ops.b, ops.out
    batched = p.op == "bmm"
    sa = (a.stride(0), a.stride(1), a.stride(2)) if batched else (0, a.stride(0), a.stride(1))
    sb = (b.stride(0), b.stride(1), b.stride(2)) if batched else (0, b.stride(0), b.stride(1))
    sc = (out.stride(0), out.stride(1), out.stride(2)) if batched else (0, out.stride(0), out.stride(1))
    grid = (triton.cdiv(p.m, c.block_m) * triton.cdiv(p.n, c.block_n), p.b if batched else 1)
    acc = "tl.int32" if p.dtype == "int8" else "tl.float32"
    bias = ops.bias if ops.bias is not None else out
    kernel = kernels.mm_kernel[grid]
    args = (a, b, out, bias, p.m, p.n, p.k, sa[1], sa[2], sb[1], sb[2], sc[1], sc[2], sa[0], sb[0], sc[0])
    a_hint, b_hint = contiguity_hints(p.m, p.n, p.k, sa[1], sa[2], sb[1], sb[2], c.block_m, c.block_n)
    meta = dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m,
                EVEN_K=p.k % c.block_k == 0, ALLOW_TF32=False, ACC_TYPE=_acc_constexpr(acc),
                HAS_BIAS=ops.bias is not None, A_CONTIGUOUS_M=a_hint, B_CONTIGUOUS_N=b_hint,
                num_stages=c.num_stages, num_warps=c.num_warps)
    return lambda: kernel(*args, **meta)


def contiguity_hints(m: int, n: int, k: int, stride_am: int, stride_ak: int, stride_bk: int, stride_bn: int,
                     block_m: int, block_n: int) -> tuple[bool, bool]:
    """Inductor's mm template condition for promising contiguous, aligned row/column offsets."""
    a = ((stride_am == 1 and stride_ak == m) or (stride_am == k and stride_ak == 1)) and (m >= block_m and k > 1)
    b = ((stride_bk == 1 and stride_bn == k) or (stride_bk == n and stride_bn == 1)) and (n >= block_n and k > 1)
    return bool(a), bool(b)


def _acc_constexpr(name: str):
    import triton.language as tl

    return {"tl.float32": tl.float32, "tl.int32": tl.int32}[name]


def _tma_runner(p: Problem, c: Candidate, ops: Operands, num_sms: int) -> Callable[[], None]:
    if p.op not in ("mm", "addmm"):
        raise ValueError(f"persistent TMA is offered for mm and addmm only, not {p.op}")
    a, b, out = ops.a, ops.b, ops.out
    a_row = a.stride(1) == 1
    b_row = b.stride(1) == 1
    tiles = triton.cdiv(p.m, c.block_m) * triton.cdiv(p.n, c.block_n)
    grid = (min(num_sms, tiles),)
    kernel = kernels.persistent_tma_mm_kernel[grid]
    bias = ops.bias if ops.bias is not None else out
    args = (a, b, out, bias, p.m, p.n, p.k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0))
    meta = dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m, A_ROW_MAJOR=a_row,
                B_ROW_MAJOR=b_row, NUM_SMS=num_sms, ALLOW_TF32=False, ACC_TYPE=_acc_constexpr("tl.float32"),
                HAS_BIAS=ops.bias is not None, num_stages=c.num_stages, num_warps=c.num_warps)
    return lambda: kernel(*args, **meta)


def scaled_constexprs(p: Problem, family: str) -> dict:
    """The constexprs an fp8 scaled-mm problem fixes, besides the tile (one place for the runner and precompile).

    ``triton_mm`` reads each scale through Inductor's broadcast loader, so a (1, 1) scale is one value even for
    rowwise (M == 1 or N == 1); the TMA template takes the ScalingType of the pair (0 tensorwise, 1 rowwise)."""
    rowwise = p.op == "scaled_mm_rowwise"
    if family == "triton_mm":
        return dict(SCALE_A_PER_ROW=rowwise and p.m > 1, SCALE_B_PER_COL=rowwise and p.n > 1,
                    USE_FAST_ACCUM=FP8_FAST_ACCUM)
    return dict(SCALE_RECIPE_A=int(rowwise), SCALE_RECIPE_B=int(rowwise), USE_FAST_ACCUM=FP8_FAST_ACCUM)


def _scaled_mm_runner(p: Problem, c: Candidate, ops: Operands) -> Callable[[], None]:
    """Inductor's ``triton::mm`` with ``scale_mm_epilogue`` (kernels.scaled_mm_kernel)."""
    a, b, out = ops.a, ops.b, ops.out
    grid = (triton.cdiv(p.m, c.block_m) * triton.cdiv(p.n, c.block_n),)
    kernel = kernels.scaled_mm_kernel[grid]
    args = (a, b, out, ops.scale_a, ops.scale_b, p.m, p.n, p.k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            out.stride(0), out.stride(1))
    a_hint, b_hint = contiguity_hints(p.m, p.n, p.k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.block_m,
                                      c.block_n)
    meta = dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m,
                EVEN_K=p.k % c.block_k == 0, ALLOW_TF32=False, ACC_TYPE=_acc_constexpr("tl.float32"),
                A_CONTIGUOUS_M=a_hint, B_CONTIGUOUS_N=b_hint, **scaled_constexprs(p, c.family),
                num_stages=c.num_stages, num_warps=c.num_warps)
    return lambda: kernel(*args, **meta)


def _scaled_tma_runner(p: Problem, c: Candidate, ops: Operands, num_sms: int) -> Callable[[], None]:
    """Inductor's ``scaled_mm_device_tma_epilogue_scaling`` (kernels.scaled_persistent_tma_kernel): A row-major and
    B column-major only, which is all ``_scaled_mm`` accepts."""
    a, b, out = ops.a, ops.b, ops.out
    if a.stride(1) != 1 or b.stride(0) != 1:
        raise ValueError(f"{c.key}: the scaled TMA template needs A row-major and B column-major, got strides "
                         f"{tuple(a.stride())} and {tuple(b.stride())}")
    tiles = triton.cdiv(p.m, c.block_m) * triton.cdiv(p.n, c.block_n)
    kernel = kernels.scaled_persistent_tma_kernel[(min(num_sms, tiles),)]
    args = (a, b, out, ops.scale_a, ops.scale_b, p.m, p.n, p.k, a.stride(0), b.stride(1), out.stride(0))
    meta = dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m, NUM_SMS=num_sms,
                ACC_TYPE=_acc_constexpr("tl.float32"), **scaled_constexprs(p, c.family), num_stages=c.num_stages,
                num_warps=c.num_warps)
    return lambda: kernel(*args, **meta)


def _decompose_k_runner(p: Problem, c: Candidate, ops: Operands) -> Callable[[], None]:
    """Inductor's decomposeK: bmm over K chunks with fp32 output, then a sum over chunks cast back."""
    if p.op != "mm" or p.k % c.k_split:
        raise ValueError(f"decompose_k/k{c.k_split} needs an mm with k divisible by the split, got {p.op} k={p.k}")
    a, b, out = ops.a, ops.b, ops.out
    parts = p.k // c.k_split
    partial = torch.empty((c.k_split, p.m, p.n), device=out.device, dtype=torch.float32)
    mn = p.m * p.n
    block = 1024
    reduce = kernels.sum_splits_kernel[(triton.cdiv(mn, block),)]

    def run() -> None:
        a_r = torch.permute(a.reshape(p.m, c.k_split, parts), (1, 0, 2))
        b_r = b.reshape(c.k_split, parts, p.n)
        torch.bmm(a_r, b_r, out_dtype=torch.float32, out=partial)
        reduce(partial, out, mn, SPLITS=c.k_split, BLOCK=block)

    return run
