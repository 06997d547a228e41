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

The hook uses it with ``install(hints="predict")`` (``pruner.predicted_hints``); ``runtime.dynamic.hints.suggest_hints``
gives a program's hint list; ``predictor.offline.hint_eval`` evaluates it on the M-sweep labels against the fixed
``[64, 256, 4096]`` list.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
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
