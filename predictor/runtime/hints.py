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

The hook uses it with ``install(hints="predict")``; ``benchmarks/hint_sweep_analysis.py`` evaluates it on the
M-sweep labels against the fixed ``[64, 256, 4096]`` list.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..candidate import CANDIDATE_FIELDS, Candidate, parse_key
from ..device import DeviceInfo
from ..problem import PROBLEM_FIELDS, Problem, problem_from_row

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


# --------------------------------------------------------------------------- offline evaluation

SWEEP_FAMILY = ["op", "b", "n", "k", "dtype", "out_dtype", "layout_a", "layout_b", "align"]


def hint_set_fraction(times: pd.DataFrame, hints: Sequence[int]) -> pd.Series:
    """``times``: runtime M x candidate (NaN = not timed). Per M, the fraction of the per-M oracle reached by
    the kernels chosen at the hints (the true best at M = h, as Inductor's autotuning would pick); NaN where
    none of those kernels was timed at that M (never guessed)."""
    kernels = [times.loc[h].idxmin() for h in hints if h in times.index]
    if not kernels:
        return pd.Series(np.nan, index=times.index)
    return times.min(axis=1) / times[kernels].min(axis=1)


def kernel_set_ceiling(times: pd.DataFrame, max_kernels: int = MAX_HINTS) -> tuple[float, float, list[str]]:
    """The best any set of at most ``max_kernels`` kernels (columns of ``times``: runtime M x candidate, NaN = not
    timed) can do against the per-M oracle, as (geomean over known sizes, worst size, kernels): a ceiling for
    every hint predictor, whatever its grid and whichever kernel it compiles per hint. Exhaustive over subsets
    (vectorised: every set grown by every kernel), unless that table would exceed ~5e7 entries; then only the
    best sets found so far are grown (a lower bound on the ceiling)."""
    frac = (times.min(axis=1).to_numpy()[:, None] / times.to_numpy()).T  # kernels x sizes, NaN = not timed
    n = len(frac)
    need = 0.5 * frac.shape[1]

    def score(f: np.ndarray) -> np.ndarray:  # geomean over known sizes; -inf with fewer than half known
        known = np.isfinite(f)
        logs = np.where(known, np.log(np.where(known, f, 1.0)), 0.0).sum(axis=-1)
        count = known.sum(axis=-1)
        return np.where(count >= max(need, 1), logs / np.maximum(count, 1), -np.inf)

    sets = [(i,) for i in range(n)]
    current = frac.copy()
    best_score, best_set = score(current), list(sets)
    best_i = int(np.argmax(best_score))
    best = (float(best_score[best_i]), best_set[best_i], current[best_i])
    limit = int(5e7 // max(1, n * frac.shape[1]))  # sets that fit one sets x kernels x sizes table
    for step in range(max_kernels - 1):
        if len(current) > limit:  # keep the sets x kernels x sizes table in memory: grow only the best sets
            keep = np.argsort(-score(current))[:limit]
            current, sets = current[keep], [sets[i] for i in keep]
        grown = np.fmax(current[:, None, :], frac[None, :, :])  # sets x kernels x sizes
        scores = score(grown)
        i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
        if scores[i, j] > best[0]:
            best = (float(scores[i, j]), (*sets[i], j), grown[i, j])
        if step == max_kernels - 2:
            break  # the sets of the last size were all scored; growing them further is not needed
        current = grown.reshape(-1, frac.shape[1])
        sets = [(*s_, k) for s_ in sets for k in range(n)]
    gm, members, f = best
    return float(np.exp(gm)), float(np.nanmin(f)), [str(times.columns[k]) for k in dict.fromkeys(members)]


def geomean_known(fractions: pd.Series) -> float:
    """Geometric mean over the sizes where the fraction is known (NaN when fewer than half are)."""
    known = fractions.dropna()
    return float(np.exp(np.log(known).mean())) if len(known) and len(known) >= 0.5 * len(fractions) else float("nan")


def evaluate_hint_choice(rows: pd.DataFrame, ranker: Any, device: DeviceInfo, grid: Sequence[int] = HINT_GRID,
                         fixed: Sequence[int] = FIXED_HINTS, max_hints: int = MAX_HINTS,
                         min_gain: float = MIN_GAIN) -> pd.DataFrame:
    """Per M-sweep family in ``rows`` (labelled bulk rows): fixed list vs predicted hints vs the best single
    hint in hindsight, each as geomean / worst fraction of the per-M oracle over the sweep's sizes."""
    sweeps = rows[rows["family_tag"].astype(str).str.startswith("msweep")]
    # a hint's kernel is a compiled template: Inductor's multi-kernel picks among the hints' Triton kernels at run
    # time, never cuBLAS, so aten is neither a hint's kernel nor part of the oracle here (with aten in, one hint
    # whose "kernel" was cuBLAS looked perfect offline; on the GPU that hint compiled a Triton kernel, 0.33x)
    sweeps = sweeps[sweeps["family"].astype(str) != "aten"]
    out = []
    for key, sub in sweeps.groupby(SWEEP_FAMILY, sort=True):
        times = sub[sub["status"] == "ok"].pivot_table(index="m", columns="candidate", values="time_us")
        sizes = sorted(times.index)
        grid_here = [h for h in grid if h in times.index]
        if len(sizes) < 6 or len(grid_here) < 2:
            continue
        problem = problem_from_row(sub.iloc[0])
        kernel_at = {}
        for h in grid_here:  # the ranker's favourite among what Inductor offers at M = h
            at_h = sub[sub["m"] == h]
            favourite = at_h.iloc[int(np.argmax(ranker.score(at_h, device)))]
            kernel_at[h] = parse_key(str(favourite["candidate"]))
        predicted = choose_hints(ranker, device, problem, kernel_at, sizes, max_hints, min_gain)
        fixed_here = [h for h in fixed if h in times.index]
        single = {h: hint_set_fraction(times, [h]) for h in grid_here}
        best_single = max(single, key=lambda h: np.nan_to_num(geomean_known(single[h]), nan=0.0))
        result = {"family": " ".join(str(v) for v in (key[0], *key[2:5], *key[6:8])), "sizes": len(sizes),
                  "winners": int(times.idxmin(axis=1).nunique()), "predicted hints": predicted,
                  "fixed hints": fixed_here, "best single hint": int(best_single)}
        # the ceiling: the best set of <= max_hints grid hints in hindsight (true times, every subset)
        subsets = [list(c) for r in range(1, max_hints + 1) for c in itertools.combinations(grid_here, r)]
        hindsight = max(subsets, key=lambda c: np.nan_to_num(geomean_known(hint_set_fraction(times, c)), nan=0.0))
        result["hindsight hints"] = hindsight
        ceiling_geomean, ceiling_worst, ceiling_kernels = kernel_set_ceiling(times, max_hints)
        for name, hints in (("predicted", predicted), ("fixed", fixed_here), ("best single", [best_single]),
                            ("hindsight", hindsight)):
            f = hint_set_fraction(times, hints)
            result[f"{name} geomean"] = geomean_known(f)
            result[f"{name} worst"] = float(f.min())
        result["any-kernels geomean"], result["any-kernels worst"] = ceiling_geomean, ceiling_worst
        result["any-kernels kernels"] = len(ceiling_kernels)
        out.append(result)
    return pd.DataFrame(out)


# --------------------------------------------------------------------------- config.multi_kernel_hints

def suggest_hints(gemms: Sequence[Problem], model: str | None = None, device: DeviceInfo | None = None,
                  grid: Sequence[int] = HINT_GRID, runtime: tuple[int, int] = (1, 16384),
                  max_hints: int = MAX_HINTS, min_gain: float = MIN_GAIN) -> list[int]:
    """``config.multi_kernel_hints`` for a program whose dynamic-M GEMMs are ``gemms`` (their M is ignored):
    the union of each GEMM's predicted hints over ``runtime``.

    Inductor compiles one kernel per hint in that global list for every dynamic GEMM, so this, not the
    choice filter, is what cuts the kernels compiled. Each hint's kernel is the model's favourite among
    Inductor's own candidates at M = hint (``predictor.spaces``). ``model``: a model folder (default: the
    shipped one for ``device``, itself defaulting to this GPU)."""
    from dataclasses import replace

    from ..artifacts import load_model
    from ..spaces import enumerate_space
    from .discovery import _this_gpu, find_model

    device = device or _this_gpu()
    if device is None:
        raise RuntimeError("suggest_hints needs the GPU to rank for: no CUDA device, pass device=")
    folder = model or find_model(device, allow_similar=True)
    if folder is None:
        raise FileNotFoundError(f"no model for {device.gpu} (cc {device.cc}); pass model=")
    ranker, meta = load_model(folder)
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
