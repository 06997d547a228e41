"""How well the hint choice of ``predictor.runtime.dynamic.hints`` does on measured M-sweeps: offline evaluation.

The hook never needs this (it predicts hints from the model alone); ``benchmarks/hint_sweep_analysis.py`` and the
tests judge the choice here against the fixed list, the best single hint and the best set in hindsight.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..core.candidate import parse_key
from ..core.device import DeviceInfo
from ..core.problem import problem_from_row
from ..runtime.choices.hint_buckets import FIXED_HINTS, HINT_GRID, MAX_HINTS, MIN_GAIN, choose_hints

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
