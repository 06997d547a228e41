"""What the hook keeps of one GEMM's choices: the pruning rules (``policy="prune"``, shared with the offline
evaluation), what it keeps when it decides alone (``policy="decide"``) or decides and then lets Inductor benchmark
within the decided kind (``policy="tune"``), and when it cannot decide.

Why decide rather than prune: whatever survives beside cuBLAS goes through Inductor's benchmark, which
overstates cuBLAS on small GEMMs and times bare kernels out of the program's context, so a Triton kernel kept
"just in case" tends to win the benchmark and lose in the program (measured: w8a8 int8 decode 0.86x plain
``torch.compile``; a transformer training step 0.91x), and every survivor costs compile time. One choice per
GEMM is used without any benchmark: plain ``torch.compile``'s compile time, and the model's pick on the kinds of
GEMM it has labels for (cuBLAS elsewhere).

Runtime code: numpy only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.problem import SCALED_OPS
from ...core.regions import BOUNDS, SHORT_UNALIGNED

log = logging.getLogger(__name__)

# The decide policy takes the model's favourite Triton candidate over cuBLAS unless cuBLAS's score (LambdaRank units:
# higher is predicted faster) leads it by more than this. Negative because the labels time bare GEMMs, while in the
# program a Triton template also absorbs the GEMM's bias/activation/residual epilogue, so near ties favour Triton.
# Chosen from whole-step timings of each decision's two sides (python -m collectors.in_program.collect --paired);
# figures and the cost on bare-GEMM labels: docs/DESIGN.md; findings 27, 30 and 34-38.
DECIDE_MIN_GAP = -2.5

# int8/fp8 GEMMs: the negative margin has no in-program evidence there (every GEMM measured in the program was fp16,
# bf16 or fp32), and their labels favour cuBLAS (it wins 444 of 557 int8 and 441 of 500 fp8 problems on the H100)
QUANTIZED_OPS = ("int_mm", *SCALED_OPS)


# float32 (TF32 off, Inductor's default) mm/addmm: the negative margin loses there in both sources. In whole steps
# Triton lost every one of 28 resolved fp32 mm/addmm decisions (datasets/nvidia-h100/CONTEXT.md), and on held-out
# bare-GEMM labels the picks a gap of -2.5 adds behind cuBLAS run 0.79x of it (policy oracle over 328 fp32 problems:
# 0.952 at -2.5, 0.986 at 0.0 on the H200; 0.962 and 0.979 on the H100). fp32 bmm keeps the margin: the zoo's
# attention GEMMs, which fuse the softmax's work, took Triton behind cuBLAS and won 4 of 5 (docs/DESIGN.md; 50).
FLOAT32_GAP = 0.0


# Few rows, long K (decode-sized down projections, single-token attention over a long context): cuBLAS splits K
# across the SMs and the Triton mm template does not, so such a GEMM keeps cuBLAS unless the model favours Triton by
# SMALL_M_LONG_K_GAP (whole-step timings: datasets/nvidia-h100/CONTEXT.md, docs/DESIGN.md; finding 36).
SMALL_M_LONG_K = (256, 3072)  # (largest m, k above which)
SMALL_M_LONG_K_GAP = 2.0


# Short unaligned GEMMs (predictor.core.regions, short-unaligned: token mixing) that a region model ranks: the in-program
# evidence for the negative gap came from aligned GEMMs ranked by the main model, and the region model was chosen at
# gap 0. Policy oracle, gap -2.5 against 0.0, region model with each token-mixing family held out: 0.947 / 0.976
# (datasets/nvidia-h100/TOKEN_MIXING.md). Where no region model ships the main model keeps the gap: at 0.0 it put
# MLP-Mixer-B/16's 196-wide token GEMMs back on cuBLAS (29 against 17 us each in the step, H100).
REGION_GAPS = {SHORT_UNALIGNED: 0.0}

# what decide_gap_for floors (part of the hook's cache key: graphs decided under other floors are not reused)
GAP_FLOORS = {"quantized": 0.0, "float32_mm": FLOAT32_GAP, "small_m_long_k": [*SMALL_M_LONG_K, SMALL_M_LONG_K_GAP],
              "regions": [REGION_GAPS, repr(BOUNDS)]}


def decide_gap_for(problem: Any, gap: float, region: str | None = None) -> float:
    """The decide gap for ``problem`` (a ``Problem``): ``gap``, floored at 0.0 for the quantized ops
    (QUANTIZED_OPS, no in-program evidence there), at FLOAT32_GAP for a float32 mm/addmm, at REGION_GAPS[region]
    where a region's model ranks it (``region``, ``predictor.core.regions``) and at SMALL_M_LONG_K_GAP for few rows with
    a long K (SMALL_M_LONG_K)."""
    if problem.op in QUANTIZED_OPS:
        return max(gap, 0.0)
    if region is not None:
        gap = max(gap, REGION_GAPS[region])
    if problem.dtype == "float32" and problem.op != "bmm":
        gap = max(gap, FLOAT32_GAP)
    largest_m, k_above = SMALL_M_LONG_K
    return max(gap, SMALL_M_LONG_K_GAP) if problem.m <= largest_m and problem.k > k_above else gap


FALLBACKS = ("aten", "full")


def keep_best(scores: np.ndarray, k: int, margin: float | None = None) -> np.ndarray:
    """Indices of the candidates one problem keeps: the k best scores (ties in the given order), minus any
    more than ``margin`` below the favourite. The hook and the offline evaluation share this rule."""
    scores = np.asarray(scores, dtype=float)
    order = np.argsort(-scores, kind="stable")
    chosen = order[:k]
    if margin is not None and len(order):
        chosen = chosen[scores[chosen] >= scores[order[0]] - margin]
    return chosen


def with_aten_fallback(kept: np.ndarray, scores: np.ndarray, is_aten: np.ndarray) -> np.ndarray:
    """``kept`` plus the best-scored aten candidate when none is kept (cuBLAS as the safe fallback)."""
    is_aten = np.asarray(is_aten, dtype=bool)
    if not is_aten.any() or is_aten[kept].any():
        return kept
    aten = np.flatnonzero(is_aten)
    best = aten[np.argsort(-np.asarray(scores, dtype=float)[aten], kind="stable")[0]]
    return np.append(kept, best)


def with_epilogue_templates(kept: np.ndarray, scores: np.ndarray, is_template: np.ndarray, n: int) -> np.ndarray:
    """``kept`` plus the ``n`` best-scored fusable Triton templates when fewer are kept.

    Why: a GEMM whose output feeds a pointwise op (bias, activation, residual add, gradient products) can
    have that op fused into a Triton template's epilogue, saving a kernel and a round trip through memory;
    cuBLAS cannot. Inductor decides that by benchmarking the best template with the epilogue fused against
    the best choice plus a separate epilogue kernel, but only among the choices it was given. Labels time
    bare GEMMs, so a model that favours cuBLAS would otherwise take the fusion away."""
    is_template = np.asarray(is_template, dtype=bool)
    missing = n - int(is_template[kept].sum())
    if missing <= 0 or not is_template.any():
        return kept
    candidates = np.flatnonzero(is_template & ~np.isin(np.arange(len(is_template)), kept))
    best = candidates[np.argsort(-np.asarray(scores, dtype=float)[candidates], kind="stable")[:missing]]
    return np.append(kept, best)


# GEMMs whose ideal time (features.ideal_time_us) is below this keep aten alone when the model favours it:
# Inductor's benchmark overstates cuBLAS there and would pick a slower Triton kernel. 100 us covers the
# losses measured on the H200 (docs/benchmarks/h200: 6-60 us GEMMs, up to 2.5x slower picks).
ATEN_ALONE_BELOW_US = 100.0


def aten_alone_if_small(kept: np.ndarray, scores: np.ndarray, is_aten: np.ndarray, ideal_us: float,
                        below_us: float | None) -> np.ndarray:
    """Only the favourite when it is aten and the GEMM's ideal time is under ``below_us``.

    Why: Inductor's own benchmark overstates cuBLAS's time on small GEMMs (launch overhead it does not
    charge to Triton kernels), so if a Triton candidate survives beside a favoured aten it is often picked
    although it is slower (measured up to 2.5x on an H200, docs/benchmarks). A single survivor is used
    without any benchmark. Offline, where benchmarking is perfect, this can only lose; the GPU benchmark
    is where it wins."""
    scores = np.asarray(scores, dtype=float)
    is_aten = np.asarray(is_aten, dtype=bool)
    if below_us is None or not len(kept) or ideal_us >= below_us or not is_aten.any():
        return kept
    best_aten = int(np.flatnonzero(is_aten)[np.argmax(scores[is_aten])])
    if is_aten.all() or scores[best_aten] > scores[~is_aten].max():  # strictly favoured, not a tie
        return np.asarray([best_aten])
    return kept


def is_aten_choice(choice: Any) -> bool:
    """A ``KernelTemplateChoice`` of an extern (aten/cuBLAS) kernel: what plain ``torch.compile`` runs."""
    template = getattr(choice, "template", None)
    uid = str(getattr(template, "uid", "") or "")
    return uid.startswith("aten::") or type(template).__name__ == "ExternKernelChoice"


def fallback_choices(choices: list[Any], fallback: str) -> list[Any]:
    """The choices a GEMM keeps when the hook cannot rank them (unknown op or template, no model, an error).

    ``"aten"``: the aten choices alone, i.e. what plain ``torch.compile`` would run, with no benchmark (a list
    without any aten choice is left whole: nothing safer exists). ``"full"``: Inductor's whole list (stock
    max-autotune, minutes of compile)."""
    if fallback == "full":
        return choices
    aten = [c for c in choices if is_aten_choice(c)]
    return aten[:1] if aten else choices


def decide_one(scores: np.ndarray, is_aten: Sequence[bool], trusted: bool, min_gap: float = DECIDE_MIN_GAP) -> int:
    """Index of the single candidate a GEMM runs.

    The model's favourite non-aten (Triton/decompose-K) candidate when its score minus the best aten candidate's
    is at least ``min_gap`` and the problem is of a kind the model was trained on (``trusted``); otherwise the
    best aten candidate (cuBLAS: plain ``torch.compile``'s choice). Without any aten candidate, the favourite;
    with only aten candidates, the best of them."""
    scores = np.asarray(scores, dtype=float)
    is_aten = np.asarray(is_aten, dtype=bool)
    if not is_aten.any() or is_aten.all():
        return int(np.argmax(scores))
    best_aten = int(np.flatnonzero(is_aten)[np.argmax(scores[is_aten])])
    best_other = int(np.flatnonzero(~is_aten)[np.argmax(scores[~is_aten])])
    if trusted and scores[best_other] - scores[best_aten] >= min_gap:
        return best_other
    return best_aten


def tuned_choices(scores: np.ndarray, is_aten: Sequence[bool], chosen: int, k: int) -> np.ndarray:
    """What ``predictor.compile(tune=K)`` hands Inductor's benchmark for one GEMM (indices, ascending): the kind
    ``decide_one`` chose, and only it. cuBLAS alone where it chose cuBLAS (nothing benchmarked); else the model's K
    best non-aten candidates, cuBLAS left out. Why: Inductor times each candidate alone, without the program around
    it. Where tuning the model's top 5 beside cuBLAS swapped a decided cuBLAS GEMM for a Triton template, the step
    ran 1.073x slower in geomean (18 model runs on the H100 and H200, up to 1.25x: bert-base, vit-base; finding 81)."""
    scores = np.asarray(scores, dtype=float)
    is_aten = np.asarray(is_aten, dtype=bool)
    if is_aten[chosen]:
        return np.asarray([chosen])
    others = np.flatnonzero(~is_aten)
    return np.sort(others[np.argsort(-scores[others], kind="stable")[:k]])


def decided_choices(scores: np.ndarray, is_aten: Sequence[bool], chosen: int, policy: str, k: int) -> np.ndarray:
    """What a GEMM ``decide_one`` decided keeps (indices): ``chosen`` alone under ``policy="decide"``; under
    ``"tune"`` the decided kind's top ``k`` (``tuned_choices``). The hook and the split ``addmm`` share it."""
    return tuned_choices(scores, is_aten, chosen, k) if policy == "tune" else np.asarray([chosen])


def runner_up(scores: np.ndarray, is_aten: Sequence[bool], chosen: int) -> tuple[int | None, float | None]:
    """The decision ``decide_one`` did not take, and the score gap behind it: ``(alternative, gap)``.

    The alternative is the best aten candidate when ``chosen`` is not aten, else the model's favourite non-aten
    (Triton/decompose-K) candidate; ``gap`` = favourite non-aten score - best aten score (what ``min_gap`` is
    compared with). ``(None, None)`` when one side has no candidate. Why: timing the program with the other side
    of each decision is how the in-program benchmark checks the policy (collectors/in_program/collect.py)."""
    scores = np.asarray(scores, dtype=float)
    is_aten = np.asarray(is_aten, dtype=bool)
    if is_aten.all() or not is_aten.any():
        return None, None
    best_aten = int(np.flatnonzero(is_aten)[np.argmax(scores[is_aten])])
    best_other = int(np.flatnonzero(~is_aten)[np.argmax(scores[~is_aten])])
    gap = float(scores[best_other] - scores[best_aten])
    return (best_other if is_aten[chosen] else best_aten), gap


def problem_kind(op: str, dtype: str, layout_a: str, layout_b: str) -> str:
    """The key of a problem's kind in a model's ``problem_ranges.kinds`` (e.g. ``int_mm/int8/row/col``)."""
    return f"{op}/{dtype}/{layout_a}/{layout_b}"


def out_of_training_range(ranges: Any, problem: Any, sizes: bool = True) -> str | None:
    """Why ``problem`` lies outside what a model was trained on, per its metadata's ``problem_ranges`` (an op or
    dtype it never saw; with ``sizes``, a dimension outside the trained extent), or None."""
    if not isinstance(ranges, dict):
        return None
    for name in ("b", "m", "n", "k") if sizes else ():
        bounds = ranges.get(name)
        value = getattr(problem, name)
        if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and not bounds[0] <= value <= bounds[1]:
            return f"{problem}: {name}={value} outside the training range {list(bounds)}"
    for name, field in (("ops", "op"), ("dtypes", "dtype")):
        allowed = ranges.get(name)
        if isinstance(allowed, list) and getattr(problem, field) not in allowed:
            return f"{problem}: {field} {getattr(problem, field)!r} never seen in training"
    return None


# Ops no model is trusted with until its metadata lists the problem's kind: fp8 came after the first models, whose
# metadata may record no kinds at all ("trusted everywhere" below), and a guess on ~100 scaled-mm choices either
# costs full max-autotune's compile (minutes) or runs an untrained pick.
EXPLICIT_KIND_OPS = SCALED_OPS


def untrained_kind(ranges: Any, problem: Any) -> str | None:
    """Why the hook must not rank ``problem`` at all (the fallback, plain torch.compile's aten choice by default,
    runs instead), or None: an op of ``EXPLICIT_KIND_OPS`` whose kind the model's ``problem_ranges.kinds`` does
    not list."""
    if problem.op not in EXPLICIT_KIND_OPS:
        return None
    kinds = ranges.get("kinds") if isinstance(ranges, dict) else None
    kind = problem_kind(problem.op, problem.dtype, problem.layout_a, problem.layout_b)
    if isinstance(kinds, list) and kind in kinds:
        return None
    return f"the model was not trained on {kind} GEMMs"


def trusted_kind(ranges: Any, problem: Any) -> bool:
    """Whether a model was trained on this kind of problem (op, dtype, layouts; ``problem_ranges.kinds``): a Triton
    pick is only taken over cuBLAS for kinds it has labels for. Why: int8 labels are all B row-major, while real
    int8 code (torchao, ``F.linear`` weights) runs B column-major, cuBLAS's fast path (a hook that kept Triton
    there ran 0.86x plain). A model that records no kinds is trusted everywhere."""
    kinds = ranges.get("kinds") if isinstance(ranges, dict) else None
    if not isinstance(kinds, list):
        return True
    return problem_kind(problem.op, problem.dtype, problem.layout_a, problem.layout_b) in kinds


def override_choice(best_choice: Any, timings: dict[Any, float], key_of: dict[Any, str], scores: dict[str, float],
                    gap: float) -> Any:
    """Inductor's benchmark pick ``best_choice``, or the best-scored choice that benchmarked to a finite time when
    the pick scores more than ``gap`` below it. Why: Inductor's benchmark overstates cuBLAS on small GEMMs, and the
    model, trained on clean labels (L2 flushed), can know better."""
    finite = [c for c, t in timings.items() if math.isfinite(float(t))]
    favourite = max(finite, key=lambda c: scores[key_of[c]])
    best_key, favourite_key = key_of[best_choice], key_of[favourite]
    if favourite_key == best_key or scores[favourite_key] - scores[best_key] <= gap:
        return best_choice
    log.debug("gemm-predictor: benchmark picked %s (%.3g), using the model's %s (%.3g)", best_key, scores[best_key],
              favourite_key, scores[favourite_key])
    return favourite
