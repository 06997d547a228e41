"""Multi-kernel hint buckets: which hints of a candidate grid to compile for a dynamic-M GEMM.

Inductor's ``config.multi_kernel_hints`` compiles one kernel per hint (each autotuned at M = hint) and picks
among them by the runtime size. A fixed list wastes compile time where one kernel serves every size and can
miss where the best kernel changes. The choice here rests on the GEMM ranker (the learned part):

1. each hint's kernel is the ranker's favourite at M = hint;
2. the ranker scores every such kernel at every runtime size of the expected range (its scores compare
   candidates of one problem, so each runtime size is compared within itself);
3. take the smallest set of at most ``max_hints`` hints whose kernels leave a low mean score regret over the
   runtime sizes (regret = best score among all the hints' kernels minus the best among the chosen): a larger
   set only when it lowers the regret by at least ``min_gain``.

The hook uses it with ``install(hints="predict")``; ``suggest_hints`` gives a program's hint list;
``benchmarks/hint_sweep_analysis.py`` evaluates it on the
M-sweep labels against the fixed ``[64, 256, 4096]`` list (through ``predictor.offline.hint_eval``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core.candidate import CANDIDATE_FIELDS, Candidate
from ...core.device import DeviceInfo
from ...core.problem import PROBLEM_FIELDS, Problem

log = logging.getLogger(__name__)

FIXED_HINTS = (64, 256, 4096)  # the list the multi-kernel-hints seed uses
# every power of two up to 16384: with at most 3 hints, the coarser (1, 16, 64, ..., 16384) grid capped even a
# perfect choice at 0.942 of the per-size best on the labelled sweeps (this grid: 0.973); scoring 15 candidate
# lists per GEMM instead of 7 costs a few ms, once per program
HINT_GRID = tuple(2 ** i for i in range(15))
MAX_HINTS = 3
MIN_GAIN = 0.05  # mean score regret a further hint must remove (LambdaRank score units) to be worth a compile


def runtime_sizes(lo: int, hi: int, per_octave: int = 2) -> list[int]:
    """Runtime sizes to judge hints on: a geometric grid from ``lo`` to ``hi`` (both included)."""
    if lo < 1 or hi < lo:
        raise ValueError(f"runtime range must satisfy 1 <= lo <= hi, got ({lo}, {hi})")
    steps = max(1, round(math.log2(hi / lo) * per_octave))
    return sorted({int(round(lo * (hi / lo) ** (i / steps))) for i in range(steps + 1)})


def best_hint_set(scores: np.ndarray, hints: Sequence[int], max_hints: int = MAX_HINTS,
                  min_gain: float = MIN_GAIN) -> list[int]:
    """``scores[r, j]``: score of hint j's kernel at runtime size r. The chosen hints, ascending.

    Every subset up to ``max_hints`` is tried (a grid of 7 hints has 63 of them): the best single hint, then
    the best pair if it lowers the mean regret by at least ``min_gain``, then likewise the best triple. Ties go
    to the smaller hints."""
    from itertools import combinations

    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[1] != len(hints) or not len(hints):
        raise ValueError(f"scores must be (runtime sizes, {len(hints)} hints), got {scores.shape}")
    order = np.argsort(hints, kind="stable")
    best = scores.max(axis=1)
    chosen: tuple[int, ...] = ()
    regret = math.inf
    for size in range(1, min(max_hints, len(hints)) + 1):
        trials = [(float(np.mean(best - scores[:, list(subset)].max(axis=1))), subset)
                  for subset in combinations(order.tolist(), size)]
        new_regret, subset = min(trials, key=lambda t: (t[0], [hints[j] for j in t[1]]))
        if chosen and regret - new_regret < min_gain:
            break
        chosen, regret = subset, new_regret
    return sorted(hints[j] for j in chosen)


def kernel_scores(ranker: Any, device: DeviceInfo, problem: Problem, kernels: Sequence[Candidate],
                  sizes: Sequence[int]) -> np.ndarray:
    """The ranker's score of each kernel at each runtime size (M replaced), shape (sizes, kernels)."""
    import pandas as pd  # at call time: the hook imports this module, and pandas costs a compile's start

    base = {name: getattr(problem, name) for name in PROBLEM_FIELDS}
    records = [{**base, "m": int(m), **{f: getattr(c, f) for f in CANDIDATE_FIELDS}} for m in sizes for c in kernels]
    scores = np.asarray(ranker.score(pd.DataFrame(records), device), dtype=float)
    return scores.reshape(len(sizes), len(kernels))


def choose_hints(ranker: Any, device: DeviceInfo, problem: Problem, kernel_at: dict[int, Candidate],
                 sizes: Sequence[int] | None = None, max_hints: int = MAX_HINTS,
                 min_gain: float = MIN_GAIN) -> list[int]:
    """Hints worth compiling, given each hint's kernel (``kernel_at[h]``: the favourite at M = h) and the
    runtime sizes expected (default: a geometric grid over the hints' span)."""
    hints = sorted(kernel_at)
    if len(hints) <= 1:
        return hints
    sizes = list(sizes) if sizes is not None else runtime_sizes(hints[0], hints[-1])
    scores = kernel_scores(ranker, device, problem, [kernel_at[h] for h in hints], sizes)
    return best_hint_set(scores, hints, max_hints, min_gain)


def hints_worth_tuning(ranker: Any, device: DeviceInfo, problem: Problem, cands: Sequence[Candidate],
                       scores: np.ndarray, groups: dict[int | None, list[int]]) -> tuple[set[int], int]:
    """For the hook: the hints of one GEMM's candidate list worth autotuning, and how many hints it offered.
    ``groups`` maps each hint to its candidates' indices; each hint's kernel is its best-scored candidate."""
    hint_values = sorted(h for h in groups if h is not None)
    kernel_at = {h: cands[max(groups[h], key=lambda i: scores[i])] for h in hint_values}
    chosen = set(choose_hints(ranker, device, problem, kernel_at))
    log.debug("gemm-predictor: %s: autotuning hints %s of %s", problem, sorted(chosen), hint_values)
    return chosen, len(hint_values)


# --------------------------------------------------------------------------- config.multi_kernel_hints


def suggest_hints(gemms: Sequence[Problem], model: str | None = None, device: DeviceInfo | None = None,
                  grid: Sequence[int] = HINT_GRID, runtime: tuple[int, int] = (1, 16384),
                  max_hints: int = MAX_HINTS, min_gain: float = MIN_GAIN, load: Any = None) -> list[int]:
    """``config.multi_kernel_hints`` for a program whose dynamic-M GEMMs are ``gemms`` (their M is ignored):
    the union of each GEMM's predicted hints over ``runtime``.

    Inductor compiles one kernel per hint in that global list for every dynamic GEMM, so this, not the
    choice filter, is what cuts the kernels compiled. Each hint's kernel is the model's favourite among
    Inductor's own candidates at M = hint (``predictor.spaces``). ``model``: a model folder (default: the
    shipped one for ``device``, itself defaulting to this GPU). ``load``: how the folder is read (default
    ``model_check.load_text_model``, a LightGBM model as the hook scores it; ``model_folder.load_runtime_model``
    also takes the other rankers)."""
    from dataclasses import replace

    import pandas as pd

    from ...artifacts.model_check import load_text_model
    from ...spaces.enumeration import enumerate_space
    from ..choices.discovery import _this_gpu, find_model

    device = device or _this_gpu()
    if device is None:
        raise RuntimeError("suggest_hints needs the GPU to rank for: no CUDA device, pass device=")
    folder = model or find_model(device, allow_similar=True)
    if folder is None:
        raise FileNotFoundError(f"no model for {device.gpu} (cc {device.cc}); pass model=")
    ranker, meta = (load or load_text_model)(Path(folder), None)
    rank_device = DeviceInfo.from_metadata(meta)
    sizes = runtime_sizes(*runtime)
    chosen: set[int] = set()
    for gemm in gemms:
        kernel_at = {}
        for h in grid:
            at_h = replace(gemm, m=int(h))
            # the hint's kernel is a Triton template (multi-kernel never dispatches to cuBLAS)
            cands = [c for c in enumerate_space(at_h, meta.get("space", "default"), device) if c.family != "aten"]
            records = [{**at_h.to_dict(), **c.to_dict()} for c in cands]
            scores = ranker.score(pd.DataFrame(records), rank_device)
            kernel_at[h] = cands[int(np.argmax(scores))]
        chosen.update(choose_hints(ranker, rank_device, gemm, kernel_at, sizes, max_hints, min_gain))
    return sorted(chosen)
