"""Parallel precompilation for the bulk collector: the key that says which Triton binary a (problem, candidate)
needs, the worker that builds one into Triton's disk cache, and the pool that builds them ahead of timing, problems
ordered so that consecutive ones share binaries."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Iterable

from predictor.core.candidate import Candidate
from predictor.core.problem import SCALED_OPS, Problem


def _int_class(x: int) -> int:
    """A stand-in with the same Triton specialisation as ``x`` (== 1, divisible by 16, or neither)."""
    if x == 1:
        return 1
    if x >= 2 ** 31:
        return x
    return 16 if x % 16 == 0 else 17


def compile_key(p: Problem, c: Candidate) -> tuple | None:
    """What decides a distinct Triton binary for this pair (None for aten / decompose-K's trivial kernels)."""
    if not c.is_triton:
        return None
    k_stride_a = p.m if p.layout_a == "col" else p.k  # the non-unit stride of A
    n_stride_b = p.k if p.layout_b == "col" else p.n
    batched = p.op == "bmm"  # batch strides are 0 (not specialised apart) unless bmm
    key = (c.family, p.op, p.dtype, p.layout_a, p.layout_b, c.block_m, c.block_n, c.block_k, c.group_m,
           c.num_stages, c.num_warps, p.k % c.block_k == 0 if c.family == "triton_mm" else None,
           _int_class(k_stride_a), _int_class(n_stride_b), _int_class(p.n),
           _int_class(p.m * p.k) if batched else 0, _int_class(p.k * p.n) if batched else 0,
           _int_class(p.m * p.n) if batched else 0,
           *((p.m >= c.block_m and p.k > 1, p.n >= c.block_n and p.k > 1)  # mm's contiguity hints (dense layouts)
             if c.family == "triton_mm" else (None, None)))
    if p.op in SCALED_OPS:  # the scaled kernels' own constexprs and the output dtype, as (name, value) pairs
        from .runners import scaled_constexprs

        key += (tuple(sorted({"out_dtype": p.out_dtype, **scaled_constexprs(p, c.family)}.items())),)
    return key


def _warm_one(key: tuple, num_sms: int) -> str | None:
    """Compile one binary into Triton's disk cache (runs in a pool worker; never launches anything)."""
    import torch
    import triton.language as tl

    from . import kernels
    from .runners import TORCH_DTYPES

    (family, op, dtype, la, lb, bm, bn, bk, gm, stages, warps, even_k, sa, sb, sn, sab, sbb, scb, a_hint, b_hint,
     *scaled) = key
    dev = torch.device("cuda")
    t = TORCH_DTYPES[dtype]
    extra = dict(scaled[0]) if scaled else {}
    out_t = TORCH_DTYPES[extra.pop("out_dtype")] if scaled else torch.int32 if dtype == "int8" else t
    a, b = torch.empty(16, dtype=t, device=dev), torch.empty(16, dtype=t, device=dev)
    c = torch.empty(16, dtype=out_t, device=dev)
    acc = tl.int32 if dtype == "int8" else tl.float32
    tile = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_stages=stages, num_warps=warps)
    try:
        if scaled:  # fp8 _scaled_mm: A row-major, B column-major (refuse_unsupported); fp32 scales
            s = torch.empty(16, dtype=torch.float32, device=dev)
            if family == "triton_tma":
                kernels.scaled_persistent_tma_kernel.warmup(
                    a, b, c, s, s, 1, 1, 1, sa, sb, sn, NUM_SMS=num_sms, ACC_TYPE=acc, **extra, **tile, grid=(1,))
            else:
                kernels.scaled_mm_kernel.warmup(
                    a, b, c, s, s, 1, 1, 1, sa, 1, 1, sb, sn, 1, EVEN_K=even_k, ALLOW_TF32=False, ACC_TYPE=acc,
                    A_CONTIGUOUS_M=a_hint, B_CONTIGUOUS_N=b_hint, **extra, **tile, grid=(1,))
        elif family == "triton_tma":
            kernels.persistent_tma_mm_kernel.warmup(
                a, b, c, c, 1, 1, 1, sa if la == "row" else 1, 1 if la == "row" else sa,
                1 if lb == "col" else sb, sb if lb == "col" else 1, sn,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, A_ROW_MAJOR=la == "row", B_ROW_MAJOR=lb == "row",
                NUM_SMS=num_sms, ALLOW_TF32=False, ACC_TYPE=acc, HAS_BIAS=op == "addmm", num_stages=stages,
                num_warps=warps, grid=(1,))
        else:
            strides_a = (sa, 1) if la == "row" else (1, sa)
            strides_b = (sb, 1) if lb == "row" else (1, sb)
            batched = op == "bmm"
            kernels.mm_kernel.warmup(
                a, b, c, c, 1, 1, 1, *strides_a, *strides_b, sn, 1,
                sab if batched else 0, sbb if batched else 0, scb if batched else 0,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, EVEN_K=even_k, ALLOW_TF32=False, ACC_TYPE=acc,
                HAS_BIAS=op == "addmm", A_CONTIGUOUS_M=a_hint, B_CONTIGUOUS_N=b_hint, num_stages=stages,
                num_warps=warps, grid=(1,))
    except Exception as exc:  # the timing pass records the real status; here we only warm the cache
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def order_by_shared_binaries(keys_of: dict[str, set]) -> list[str]:
    """Problem ids, those whose binaries are shared by many problems first.

    Compilation, not timing, is the collector's bottleneck (a binary takes ~1.5 CPU-s; a problem ~0.1 GPU-s),
    and a few problems (odd strides, bmm batch strides) each need binaries nobody else uses. Taking problems in
    order of their summed 1/(problems sharing each binary) labels most of the corpus with a fraction of the
    compiles, so a time-boxed run ends with the most problems labelled.
    """
    from collections import Counter

    sharing = Counter(k for keys in keys_of.values() for k in keys)
    cost = {pid: sum(1.0 / sharing[k] for k in keys) for pid, keys in keys_of.items()}
    return sorted(keys_of, key=lambda pid: (cost[pid], pid))


class BackgroundCompiler:
    """Compiles binaries into Triton's disk cache in worker processes, in the order the timing loop needs them,
    so CPU compilation overlaps GPU timing instead of preceding it."""

    def __init__(self, ordered_keys: list[tuple], workers: int, num_sms: int) -> None:
        import multiprocessing as mp

        self.pool = ProcessPoolExecutor(max_workers=max(1, workers), mp_context=mp.get_context("spawn"))
        self.futures = {k: self.pool.submit(_warm_one, k, num_sms) for k in ordered_keys}
        self.failed = 0

    def wait(self, keys: Iterable[tuple], desc: str | None = None) -> None:
        """Block until these keys are compiled (or failed: the timing pass records the status). ``desc``: show a
        progress bar, for waits that take minutes (several GPUs compile everything before timing anything)."""
        from tqdm import tqdm

        keys = list(keys)
        for k in tqdm(keys, desc=desc, unit="binary", disable=desc is None, mininterval=2.0):
            fut = self.futures.get(k)
            if fut is not None and fut.result() is not None:
                self.failed += 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# --- measurement ---------------------------------------------------------------------------------------------
