"""Spaces: the candidate list Inductor's max-autotune builds for a GEMM, reproduced without torch.

The hook, the collectors and the ``inductor_order`` baseline all need the exact list (and order) that
Inductor hands to ``InductorChoices._finalize_template_configs``. This module rebuilds it from the
Problem alone, following Inductor on CUDA with its default config apart from max-autotune. The config lists
come from the installed torch (or a frozen copy per release, ``predictor.spaces.configs``); the rules below
follow torch 2.11, and torch 2.13's source keeps them (read, not yet run on a GPU):

* ``kernel/mm.py`` ``tuned_mm`` / ``tuned_addmm`` / ``tuned_int_mm`` and ``kernel/bmm.py`` ``tuned_bmm``
  decide which templates are offered, in this order: aten op(s), decompose-K, ``triton::mm``
  (``triton::bmm`` for bmm), persistent TMA. Inductor flattens the per-template generators in
  that order, so the list is template-major.
* ``template_heuristics/triton.py`` gives each template's configs: the config lists, scaling of the
  block sizes to the next power of two of M/N/K (at least 16; BLOCK_K at least 32 for int8), the
  optional shared-memory pruning, register-spill pruning (EXHAUSTIVE only), then ``num_warps``
  clamped to ``BLOCK_M*BLOCK_N/256`` and de-duplication on (BLOCK_M, BLOCK_N, BLOCK_K, stages,
  hint, warps, GROUP_M) keeping the first occurrence.
* ``utils.py`` ``use_triton_template`` (dtype, >= 68 SMs), ``can_use_tma`` / ``use_triton_tma_template``
  (compute capability >= 9.0, 2-D operands, 16-byte alignment), ``use_decompose_k_choice`` and
  ``get_k_splits``.

Checked list-for-list against the lists Inductor 2.11 built on an H200
(``tests/data/inductor_choices_h200_torch211.json``, see ``tests/test_spaces.py``, with torch 2.11's lists);
no recording from 2.13 on a GPU exists yet (``tests/test_gpu_spaces.py`` checks the installed torch on one).

What is *upstream* of this module and not modelled: Inductor may rewrite the GEMM before lowering it.
``pad_mm`` pads unaligned M/N/K when its benchmark says so (seen: 4096x50257x768 fp16 became N=50264,
which made it TMA-eligible), and with ``coordinate_descent_tuning`` (set by ``mode="max-autotune"``)
an M=1 or N=1 mm is decomposed into a reduction and never autotuned. Pass the Problem as Inductor
lowers it (the hook sees exactly that).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

from ..core.candidate import Candidate
from ..core.device import DeviceInfo
from ..core.problem import FP8_DTYPES, SCALED_OPS, Problem
from .configs import SPACES, Config, configs_for


# Candidates carry GROUP_M 8: every CUDA GEMM config of the releases in configs.FROZEN has it, and
# configs.read_installed refuses (-> frozen fallback) a torch whose lists hold another.
GROUP_M = 8

# Inductor constants (torch/_inductor/utils.py, config.py, template_heuristics/triton.py), named so
# each rule below reads like the source it mirrors.
MIN_SMS_FOR_TEMPLATES = 68  # utils.is_big_gpu: fewer SMs -> no Triton GEMM templates at all
TMA_ALIGNMENT = 16  # utils.TMA_ALIGNMENT, bytes
MIN_BLOCK = 16  # _scale_mm_configs min_block_size
MIN_BLOCK_K_INT8 = 32  # _scale_mm_configs min_block_size_k with an int8 tensor
MAX_REGISTERS = 255  # _prune_reg_spill_configs NUM_REG
SMEM_EXTRA_BYTES = 128  # get_shared_memory_estimation extra_bytes (barriers)
DECOMPOSE_K_THRESHOLD = 32  # config.triton.decompose_k_threshold
NUM_DECOMPOSE_K_SPLITS = 10  # config.triton.num_decompose_k_splits
DECOMPOSE_K_MIN_PART = 128  # get_k_splits: K / split must be >= 128

_TRITON_OUT_DTYPES = ("float16", "bfloat16", "float32")  # use_triton_template layout dtypes


def _next_pow2(x: int) -> int:
    """runtime_utils.next_power_of_2 (1 for x <= 1)."""
    return 1 << (int(x) - 1).bit_length() if x > 1 else 1


def _check_space(space: str) -> None:
    if space not in SPACES:
        raise ValueError(f"unknown space {space!r}; expected one of {', '.join(SPACES)}")


def _cc_tuple(device: DeviceInfo) -> tuple[int, int]:
    try:
        major, minor = (int(x) for x in str(device.cc).split(".")[:2])
    except ValueError as err:
        raise ValueError(f"device compute capability {device.cc!r} is not of the form 'major.minor'") from err
    return major, minor


# ---------------------------------------------------------------------------------------------
# Template configs (template_heuristics/triton.py)
# ---------------------------------------------------------------------------------------------

def _smem_bytes(cfg: Config, dtype_bytes: int, conversion_bytes: int) -> int:
    """get_shared_memory_estimation: pipelined A/B tiles + (persistent TMA) epilogue layout conversion."""
    bm, bn, bk, stages, _ = cfg
    loads = dtype_bytes * (bm * bk + bn * bk)
    epilogue = 0
    if conversion_bytes:
        max_padding = 128 // (conversion_bytes * 8)
        epilogue = conversion_bytes * bm * (bn + max_padding)
    return loads * stages + epilogue + SMEM_EXTRA_BYTES


@functools.lru_cache(maxsize=4096)
def _template_configs(configs: tuple[Config, ...], m_hint: int, n_hint: int, k_hint: int, min_block_k: int,
                      drop_two_warps: bool, exhaustive: bool, smem_limit: int, dtype_bytes: int,
                      conversion_bytes: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """preprocess_mm_configs for one template: filter -> scale -> prune -> finalize (clamp warps, dedupe).

    ``m_hint``/``n_hint``/``k_hint`` are already next-power-of-two and floored, so the cache is hit by
    every problem in the same power-of-two bucket.
    """
    if drop_two_warps:  # TMAWorkspaceMixin._filter_configs: num_warps=2 is not safe for TMA
        configs = tuple(c for c in configs if c[4] != 2)
    scaled = [
        (max(min(bm, m_hint), MIN_BLOCK), max(min(bn, n_hint), MIN_BLOCK), max(min(bk, k_hint), min_block_k), s, w)
        for bm, bn, bk, s, w in configs
    ]
    if smem_limit > 0:  # _prune_exceeding_max_shared_mem_configs (only when the config flag is on)
        scaled = [c for c in scaled if _smem_bytes(c, dtype_bytes, conversion_bytes) <= smem_limit]
    if exhaustive:  # _prune_reg_spill_configs, on the un-clamped num_warps
        scaled = [c for c in scaled if math.ceil(c[0] * c[1] / (c[4] * 32)) <= MAX_REGISTERS]
    seen: dict[Config, None] = {}
    for bm, bn, bk, s, w in scaled:
        # _finalize_mm_configs: each warp computes a 16x16 tile, so small tiles get fewer warps
        seen.setdefault((bm, bn, bk, s, min(w, bm * bn // 256)), None)
    return tuple(seen)


@functools.lru_cache(maxsize=4096)
def _to_candidates(family: str, configs: tuple[Config, ...]) -> tuple[Candidate, ...]:
    return tuple(Candidate(family, bm, bn, bk, s, w, GROUP_M) for bm, bn, bk, s, w in configs)


def _triton_candidates(family: str, base: tuple[Config, ...], m: int, n: int, k: int, *, int8: bool,
                       tma: bool, exhaustive: bool, smem_limit: int, dtype_bytes: int,
                       conversion_bytes: int) -> tuple[Candidate, ...]:
    min_block_k = MIN_BLOCK_K_INT8 if int8 else MIN_BLOCK
    if smem_limit <= 0:  # the byte sizes only matter for pruning; keep them out of the cache key
        dtype_bytes = conversion_bytes = 0
    configs = _template_configs(
        base, max(_next_pow2(m), MIN_BLOCK), max(_next_pow2(n), MIN_BLOCK), max(_next_pow2(k), min_block_k),
        min_block_k, tma, exhaustive, smem_limit, dtype_bytes, conversion_bytes)
    return _to_candidates(family, configs)


# ---------------------------------------------------------------------------------------------
# Which templates Inductor offers (kernel/mm.py, kernel/bmm.py, utils.py)
# ---------------------------------------------------------------------------------------------

def use_triton_templates(problem: Problem, device: DeviceInfo) -> bool:
    """utils.use_triton_template under max-autotune: supported output dtype and a big enough GPU."""
    allowed = _TRITON_OUT_DTYPES + (("int32",) if problem.op == "int_mm" else ()) + (
        FP8_DTYPES if problem.op in SCALED_OPS else ())  # use_triton_template(enable_int32 / enable_float8)
    return problem.out_dtype in allowed and device.sm_count >= MIN_SMS_FOR_TEMPLATES


def tma_compatible(problem: Problem, dynamic_m: bool = False) -> bool:
    """utils.can_use_tma for both operands of a 2-D GEMM, from sizes, layouts and dtype.

    Inductor accepts an operand when exactly one dim has stride 1, every other stride is a
    multiple of 16 bytes, and the contiguous dim's size x itemsize is a multiple of 16 bytes.
    For the dense operands a Problem describes (``row``: inner dim contiguous; ``col``: the
    transpose of a contiguous tensor), the outer stride equals the inner dim's size, so both
    conditions reduce to ``inner_size * dtype_bytes % 16 == 0``; an inner size of 1 gives two
    stride-1 dims (PyTorch's contiguous strides for size-1 dims) and is rejected. Inner dims:
    A row -> K, A col -> M, B row -> N, B col -> K. A known ``problem.align`` below 16 means some
    stride or base is not 16-byte aligned, so TMA is refused. With ``dynamic_m`` a contiguous M
    dim is symbolic and Inductor cannot prove its alignment.
    """
    if problem.align and problem.align < TMA_ALIGNMENT:
        return False
    a_inner = problem.k if problem.layout_a == "row" else problem.m
    b_inner = problem.n if problem.layout_b == "row" else problem.k
    if dynamic_m and problem.layout_a == "col":
        return False
    for inner in (a_inner, b_inner):
        if inner == 1 or (inner * problem.dtype_bytes) % TMA_ALIGNMENT:
            return False
        if problem.dtype_bytes == 1 and inner < 32:  # 1-byte dtypes need an inner dim >= 32
            return False
    return True


def use_tma_template(problem: Problem, device: DeviceInfo, tma: bool, dynamic_m: bool = False) -> bool:
    """use_triton_tma_template: flag on, 2-D mm/addmm, TMA-capable device (cc >= 9.0), aligned operands."""
    if not tma or problem.op not in ("mm", "addmm", *SCALED_OPS) or _cc_tuple(device) < (9, 0):
        return False
    if not tma_compatible(problem, dynamic_m):
        return False
    if 10 <= _cc_tuple(device)[0] < 11:
        # use_triton_blackwell_tma_template takes precedence on datacenter Blackwell; its configs
        # (warp specialisation, epilogue subtiling) have no Candidate family yet.
        raise NotImplementedError(
            f"{device.gpu} (cc {device.cc}) would use Inductor's Blackwell TMA template, which this "
            "space does not model; pass tma=False")
    return True


def use_decompose_k(m: int, n: int, k: int, threshold_multiple: int = 1) -> bool:
    """utils.use_decompose_k_choice with default config: K >= threshold * M and K >= threshold * N."""
    threshold = DECOMPOSE_K_THRESHOLD * threshold_multiple
    return NUM_DECOMPOSE_K_SPLITS > 0 and k >= threshold * m and k >= threshold * n


@functools.lru_cache(maxsize=4096)
def k_splits(m: int, n: int, k: int, exhaustive: bool = False) -> tuple[int, ...]:
    """utils.get_k_splits: divisors of K in [2, min(K//M, K//N)] with K/split >= 128, ranked
    power-of-two parts first, then multiple-of-32 parts, then the rest (ascending split within each);
    capped at num_decompose_k_splits unless EXHAUSTIVE."""
    max_split = min(k // m, k // n)
    small = [d for d in range(1, math.isqrt(k) + 1) if k % d == 0]
    divisors = sorted(set(small + [k // d for d in small]))
    pow2, mul32, rest = [], [], []
    for d in divisors:
        if not 2 <= d <= max_split:
            continue
        part = k // d
        if part < DECOMPOSE_K_MIN_PART:
            continue
        if part & (part - 1) == 0:
            pow2.append(d)
        elif part % 32 == 0:
            mul32.append(d)
        else:
            rest.append(d)
    splits = pow2 + mul32 + rest
    return tuple(splits if exhaustive else splits[:NUM_DECOMPOSE_K_SPLITS])


def _aten(op: str) -> Candidate:
    return Candidate("aten", aten_op=op)


def enumerate_space(problem: Problem, space: str = "default", device: Optional[DeviceInfo] = None,
                    tma: bool = True, hint: Optional[int] = None, *,
                    prune_shared_mem: bool = False, torch_version: Optional[str] = None) -> list[Candidate]:
    """The candidates Inductor max-autotune offers for ``problem`` on ``device``, in its order.

    ``space``: ``default`` or ``exhaustive`` (``max_autotune_gemm_search_space``).
    ``tma``: ``config.triton.enable_persistent_tma_matmul``; TMA configs appear only where Inductor
    would also find the operands TMA-compatible.
    ``hint``: the ``hint_override`` of one multi-kernel-hint group of a dynamic-M GEMM
    (``config.multi_kernel_hints``): M is scaled by the hint instead of ``problem.m``; decompose-K is
    not offered (Inductor cannot prove K >= 32*M for a symbolic M) and a contiguous M is not
    provably TMA-aligned.
    ``prune_shared_mem``: ``config.max_autotune_prune_choices_based_on_shared_mem`` (off by default
    in 2.11, so Inductor offers configs that exceed the device's shared memory); when on, the limit is
    ``device.smem_per_block``.
    ``torch_version``: whose config lists (``"2.11"``: the frozen copy, e.g. to replay a recording made with
    it); None: the installed torch's.
    """
    _check_space(space)
    if device is None:
        raise TypeError("enumerate_space needs device= (SM count, shared memory and compute capability shape the space)")
    if hint is not None and hint <= 0:
        raise ValueError(f"hint must be a positive size, got {hint}")
    exhaustive = space == "exhaustive"
    dynamic = hint is not None
    m = hint if dynamic else problem.m
    n, k, op = problem.n, problem.k, problem.op
    same_out = problem.out_dtype == problem.dtype
    smem_limit = device.smem_per_block if prune_shared_mem else 0
    triton = use_triton_templates(problem, device)
    common = dict(exhaustive=exhaustive, smem_limit=smem_limit, dtype_bytes=problem.dtype_bytes)
    lists = configs_for(torch_version)
    base = lists.exhaustive if exhaustive else lists.mm
    tma_base = lists.exhaustive if exhaustive else lists.persistent_mm

    out: list[Candidate] = []
    if op == "mm":
        # tuned_mm: an out_dtype other than the input dtype gets aten's mm_dtype and nothing else.
        if not same_out:
            return [_aten("mm_dtype")]
        out.append(_aten("mm"))
        if not triton:
            return out
        if not dynamic and use_decompose_k(m, n, k):
            out.extend(Candidate("decompose_k", k_split=s) for s in k_splits(m, n, k, exhaustive))
        # Triton templates are skipped when K >= 64*max(M, N). tuned_mm means to keep them for
        # EXHAUSTIVE but compares the config to "exhaustive" while it holds "EXHAUSTIVE", so in 2.11
        # (and still in 2.13) they are skipped in both spaces; we reproduce that.
        if dynamic or not use_decompose_k(m, n, k, threshold_multiple=2):
            out.extend(_triton_candidates("triton_mm", base, m, n, k, int8=False, tma=False,
                                          conversion_bytes=0, **common))
            if use_tma_template(problem, device, tma, dynamic):
                out.extend(_triton_candidates("triton_tma", tma_base,
                                              m, n, k, int8=False, tma=True,
                                              conversion_bytes=problem.dtype_bytes, **common))
        return out

    if op == "addmm":
        if not same_out:
            raise ValueError(f"addmm has no out_dtype variant in Inductor; got {problem.dtype} -> {problem.out_dtype}")
        # aten bias_addmm (cuBLASLt epilogue) is offered when the bias is broadcast over rows
        # (stride 0, as for nn.Linear's 1-D bias); a Problem carries no bias layout, so we assume it.
        out += [_aten("bias_addmm"), _aten("addmm")]
        if triton:
            out.extend(_triton_candidates("triton_mm", base, m, n, k, int8=False, tma=False,
                                          conversion_bytes=0, **common))
            if use_tma_template(problem, device, tma, dynamic):
                # addmm converts the epilogue layout in the fp32 accumulator type (4 bytes)
                out.extend(_triton_candidates("triton_tma", tma_base,
                                              m, n, k, int8=False, tma=True, conversion_bytes=4, **common))
        return out

    if op == "bmm":
        out.append(_aten("bmm" if same_out else "bmm_dtype"))
        if triton and same_out:
            out.extend(_triton_candidates("triton_mm", base, m, n, k, int8=False, tma=False,
                                          conversion_bytes=0, **common))
        return out

    if op == "int_mm":
        # torch._int_mm itself needs M > 16 and K, N multiples of 8 on CUDA; Inductor lists the
        # choices regardless, so we do too. tuned_int_mm reads no strides (2.11 and 2.13), so B column-major
        # (torchao's `_int_mm(x, w.t())`) gets the same list as B row-major.
        if problem.out_dtype != "int32":
            raise ValueError(f"int_mm always produces int32; got out_dtype {problem.out_dtype}")
        out.append(_aten("_int_mm"))
        if triton:
            out.extend(_triton_candidates("triton_mm", lists.int8_mm, m, n, k, int8=True, tma=False,
                                          conversion_bytes=0, **common))
        return out

    if op in SCALED_OPS:
        out.append(_aten("_scaled_mm"))
        if triton:
            out.extend(_scaled_triton(problem, device, lists, m, n, k, tma, dynamic, exhaustive, smem_limit))
        return out

    raise ValueError(f"unknown op {op!r}")  # unreachable: Problem validates op


SCALED_MM_MIN_K = 16  # ScaledMMConfigMixin._valid: no triton::mm configs for K <= 16 ("Triton crashes")
SCALED_TMA_MIN_BLOCK_K = 32  # ScaledTMAConfigMixin._filter_configs: TMA needs an inner block >= 32
# CUDAScaledMMTemplateConfigHeuristic._filter_configs (2.11 and 2.13): triton::mm for scaled_mm drops BLOCK_K < 32
# before scaling. No DEFAULT scaled config has one, so it shows only in EXHAUSTIVE: Inductor 2.11 on an H100 listed
# 1601 choices for 128x4096x1024 rowwise, its triton::mm part starting at 16x16x32, which is what this rule gives
# (aten + 660 TMA + 940 triton::mm; without it the space had 235 more).
SCALED_MM_MIN_BLOCK_K = 32


def _scaled_triton(problem: Problem, device: DeviceInfo, lists, m: int, n: int, k: int, tma: bool, dynamic: bool,
                   exhaustive: bool, smem_limit: int) -> list[Candidate]:
    """kernel/mm.py ``tuned_scaled_mm`` (torch 2.13) after the aten choice, for tensorwise and rowwise scales (both
    are "epilogue scaling" types, so they get the same templates): the device-TMA epilogue-scaling template first
    (persistent, cc >= 9.0, TMA-compatible operands, no bias), then ``triton::mm`` with the scaling epilogue. fp8
    has no int8 tensor, so scaling floors BLOCK_K at 16 like fp16, but both templates drop configs with BLOCK_K < 32
    before scaling and K > 16 rounds up to at least 32, so no scaled-mm candidate has BLOCK_K 16."""
    if lists.scaled_mm is None or lists.scaled_persistent_mm is None:
        raise ValueError(f"torch {lists.torch}'s fp8 scaled-mm config lists are unknown here (no frozen copy): "
                         "enumerate with the installed torch (torch_version=None) on a machine that has it")
    if smem_limit > 0:
        # the TMA templates' epilogue-conversion size for scaled_mm was not read; better refuse than guess
        raise NotImplementedError("shared-memory pruning is not modelled for scaled_mm")
    out: list[Candidate] = []
    if use_tma_template(problem, device, tma, dynamic):
        base = lists.exhaustive if exhaustive else lists.scaled_persistent_mm
        base = tuple(c for c in base if c[2] >= SCALED_TMA_MIN_BLOCK_K)  # filtered before scaling, as Inductor does
        out.extend(_triton_candidates("triton_tma", base, m, n, k, int8=False, tma=True, exhaustive=exhaustive,
                                      smem_limit=0, dtype_bytes=problem.dtype_bytes, conversion_bytes=0))
    if k > SCALED_MM_MIN_K:
        base = lists.exhaustive if exhaustive else lists.scaled_mm
        base = tuple(c for c in base if c[2] >= SCALED_MM_MIN_BLOCK_K)  # filtered before scaling, as Inductor does
        out.extend(_triton_candidates("triton_mm", base, m, n, k, int8=False, tma=False, exhaustive=exhaustive,
                                      smem_limit=0, dtype_bytes=problem.dtype_bytes, conversion_bytes=0))
    return out
