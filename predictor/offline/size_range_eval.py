"""How one kernel per range of a symbolic M does on the measured M-sweeps: the offline evaluation of size ranges.

    gemm-predictor size-range-eval datasets/nvidia-h200/default.parquet --model models/h200-default-lgbm

For each M-sweep family of a bulk dataset (one GEMM's N, K, dtype and layouts timed at some 37 values of M,
``family_tag`` ``msweep...``), at every labelled M from 2 up (a batch of 1 gets a static graph of its own under
``dynamic=True``), the fraction of the per-M oracle -- the fastest candidate measured at that M, cuBLAS included --
reached by:

- ``plain``: cuBLAS at every M (plain ``torch.compile(dynamic=True)``, and ``predictor.compile``'s default there);
- ``per size``: the hook's decision at that very M (a static compile per size: what no one-compile scheme beats);
- ``ranges <bounds>``: the hook's decision made once per range of M, at the range's representative M (its
  geometric middle), run at every M of the range, and cuBLAS above the last bound
  (``predictor.runtime.dynamic.size_ranges``). The candidates judged are those labelled at the sweep's M nearest the
  representative (the candidates Inductor offers depend on its size hint, not on the range).

- ``best per range <bounds>``: with hindsight, the one candidate per range (the tail above the last bound included)
  whose geomean over the range's labelled M is highest: the ceiling of any one-kernel-per-range scheme with those
  bounds, whoever picks the kernels;
- ``learned bounds``: the bounds learned from the labels, each family held out in turn. Among plain and every set of
  one to three bounds from ``BOUND_GRID``, the strategy with the best geomean over the other families is scored on
  the held-out one (plain is a candidate: the labels may say no split pays).

Decisions are the hook's own (``policy.decide_one`` with the shipped decide gap). Where a chosen kernel was not timed
at an M, that M is left out, never guessed. A family on the model's held-out side of its split is marked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.problem import problem_from_row
from ..runtime.choices.policy import DECIDE_MIN_GAP, decide_gap_for, decide_one, trusted_kind
from ..runtime.dynamic.size_ranges import BOUNDS, representatives
from .hint_eval import SWEEP_FAMILY, geomean_known

BOUND_SETS = (BOUNDS, (8, 32, 128), (32, 128, 512), (16, 128, 1024), (64, 256, 1024))
BOUND_GRID = (8, 16, 32, 64, 128, 256, 512, 1024)  # the learned bounds: one to three of these


def bound_candidates(grid: Sequence[int] = BOUND_GRID, most: int = 3) -> list[tuple[int, ...]]:
    """Every increasing set of one to ``most`` bounds from ``grid``."""
    return [c for n in range(1, most + 1) for c in itertools.combinations(sorted(grid), n)]


def _decide(model: Any, device: Any, ranges: Any, at: pd.DataFrame, m: int, gap: float) -> str:
    """The candidate the hook keeps among ``at`` (one labelled M's rows) judged at ``m``."""
    rows = at.assign(m=m).reset_index(drop=True)
    problem = problem_from_row(rows.iloc[0])
    scores = np.asarray(model.score(rows, device), dtype=float)
    is_aten = (rows["family"].astype(str) == "aten").to_numpy()
    chosen = decide_one(scores, is_aten, trusted_kind(ranges, problem), decide_gap_for(problem, gap))
    return str(rows["candidate"].iloc[chosen])


def _fraction(times: pd.DataFrame, chosen: pd.Series) -> pd.Series:
    """Per M, oracle / the time of the candidate ``chosen`` there (NaN where it was not timed)."""
    picked = [times.at[m, c] if c in times.columns else np.nan for m, c in chosen.items()]
    return times.min(axis=1) / pd.Series(picked, index=times.index, dtype=float)


def _best_per_range(times: pd.DataFrame, bounds: Sequence[int]) -> pd.Series:
    """Per M, with hindsight, the candidate with the best geomean fraction over M's range (the last range is
    everything above the last bound); candidates timed at every M of the range only."""
    fractions = times.rdiv(times.min(axis=1), axis=0)  # oracle / each candidate's time
    edges = [0, *bounds, math.inf]
    chosen = {}
    for low, high in zip(edges, edges[1:]):
        sizes = [m for m in times.index if low < m <= high]
        if not sizes:
            continue
        inside = fractions.loc[sizes].dropna(axis=1)
        best = np.log(inside).mean().idxmax() if not inside.empty else None
        chosen.update({m: best for m in sizes})
    return pd.Series(chosen).reindex(times.index)


def learned_bounds(table: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each family held out in turn: the strategy (``plain`` or ``ranges ...``, columns ``<name> geomean`` of
    ``table``) with the best geomean over the other families, and its geomean on the held-out family.
    Returns (fraction per family, strategy learned per family)."""
    names = ["plain", *(c.removesuffix(" geomean") for c in table.columns
                        if c.startswith("ranges ") and c.endswith(" geomean"))]
    logs = np.log(table[[f"{n} geomean" for n in names]].astype(float))
    logs.columns = names
    fraction, learned = {}, {}
    for i in table.index:
        others = logs.drop(index=i).mean(skipna=False)  # NaN (a strategy not scored somewhere) never wins
        learned[i] = "plain" if others.isna().all() else str(others.idxmax())
        fraction[i] = float(np.exp(logs.at[i, learned[i]]))
    return pd.Series(fraction), pd.Series(learned)


def evaluate(rows: pd.DataFrame, model: Any, device: Any, metadata: dict[str, Any],
             bound_sets: Sequence[Sequence[int]] = BOUND_SETS, gap: float = DECIDE_MIN_GAP,
             held_out: set[str] | None = None, learn_from: Sequence[Sequence[int]] | None = None) -> pd.DataFrame:
    """One row per M-sweep family: geomean and worst fraction of the per-M oracle for each strategy. With
    ``learn_from`` (bound sets, e.g. ``bound_candidates()``) also ``learned bounds`` (geomean only) and the bounds it
    learned for each family (``learned``)."""
    ranges = metadata.get("problem_ranges")
    scored = list(dict.fromkeys([*map(tuple, bound_sets), *map(tuple, learn_from or [])]))
    sweeps = rows[rows["family_tag"].astype(str).str.startswith("msweep") & (rows["status"] == "ok")]
    out = []
    for key, sub in sweeps.groupby(SWEEP_FAMILY, sort=True, observed=True):
        sub = sub[sub["m"] >= 2]
        times = sub.pivot_table(index="m", columns="candidate", values="time_us", aggfunc="min")
        if len(times) < 6 or not any(c.startswith("aten") for c in times.columns):
            continue
        aten = [c for c in times.columns if sub.loc[sub["candidate"] == c, "family"].astype(str).eq("aten").any()]
        plain = pd.Series(times[aten].idxmin(axis=1).where(times[aten].notna().any(axis=1)), index=times.index)
        by_m = {m: g for m, g in sub.groupby("m")}
        per_size = pd.Series({m: _decide(model, device, ranges, by_m[m], m, gap) for m in times.index})
        tag = str(sub["family_tag"].iloc[0])
        result: dict[str, Any] = {"family": " ".join(str(v) for v in (key[0], *key[2:5], *key[6:8])),
                                  "held out": bool(held_out and tag in held_out), "sizes": len(times)}
        strategies = {"plain": plain, "per size": per_size}
        decided: dict[float, str] = {}  # a representative M's decision, shared by the bound sets that have it
        for bounds in scored:
            reps = representatives(bounds)
            for rep in reps:  # the candidates of the labelled M nearest the representative, judged at it
                if rep not in decided:
                    nearest = min(times.index, key=lambda m: (abs(math.log(m / rep)), m))
                    decided[rep] = _decide(model, device, ranges, by_m[nearest], rep, gap)
            strategies["ranges " + ",".join(map(str, bounds))] = pd.Series({
                m: next((decided[rep] for b, rep in zip(bounds, reps) if m <= b), plain[m]) for m in times.index})
        for bounds in bound_sets:
            strategies[f"best per range {','.join(map(str, bounds))}"] = _best_per_range(times, bounds)
        for name, chosen in strategies.items():
            fraction = _fraction(times, chosen)
            result[f"{name} geomean"] = geomean_known(fraction)
            result[f"{name} worst"] = float(fraction.min())
        out.append(result)
    table = pd.DataFrame(out)
    if learn_from and len(table) > 1:
        table["learned bounds geomean"], table["learned"] = learned_bounds(table)
        shown = {"ranges " + ",".join(map(str, b)) for b in bound_sets}
        extra = [c for c in table.columns if c.startswith("ranges ") and c.rsplit(" ", 1)[0] not in shown]
        table = table.drop(columns=extra)  # the grid served the learning; the report shows the named sets
    return table


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Geomean over families of each strategy's geomean, and the worst size of any family."""
    names = [c.removesuffix(" geomean") for c in table.columns if c.endswith(" geomean")]
    worst = [float(table[f"{n} worst"].min()) if f"{n} worst" in table else float("nan") for n in names]
    return pd.DataFrame({"strategy": names,
                         "geomean over families": [float(np.exp(np.log(table[f"{n} geomean"]).mean())) for n in names],
                         "worst size": worst})


def run(dataset: str | Path, model_folder: str | Path) -> str:
    """The markdown report of ``evaluate`` on a bulk dataset's M-sweeps with the model in ``model_folder``."""
    from ..artifacts.model_folder import load_model
    from ..core.device import DeviceInfo
    from ..artifacts.schema import read_dataset
    from .split import in_groups, recorded_test_groups

    model, metadata = load_model(model_folder)
    rows = read_dataset(dataset)
    test = rows[in_groups(rows, recorded_test_groups(metadata) or [])]
    table = evaluate(rows, model, DeviceInfo.from_metadata(metadata), metadata,
                     held_out=set(test["family_tag"].astype(str)), learn_from=bound_candidates())
    if table.empty:
        raise ValueError(f"{dataset}: no M-sweep family with cuBLAS and at least 6 sizes")
    meta = rows.attrs.get("metadata", {})
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [f"Size ranges on the M-sweeps of {dataset} ({meta.get('gpu', '?')}), model {model_folder}; fraction "
             "of the per-M oracle (1.0 = the fastest candidate measured at every M), M from 2 up. Learned bounds: "
             f"plain or one to three bounds from {', '.join(map(str, BOUND_GRID))}, chosen on the other families", "",
             "| strategy | geomean over families | worst size |", "|---|---|---|"]
    lines += [f"| {r.strategy} | {r[2]:.3f} | {fmt(r[3]).replace('nan', '-')} |" for r in summary(table).itertuples()]
    geomeans = [c for c in table.columns if c.endswith(" geomean")]
    lines += ["", "Per family (geomean / worst):", "",
              "| family | held out | sizes | " + " | ".join(c.removesuffix(" geomean") for c in geomeans)
              + (" | learned with the family held out |" if "learned" in table else " |"),
              "|---|---|---|" + "---|" * (len(geomeans) + ("learned" in table))]
    for _, r in table.iterrows():
        worst = lambda c: r.get(c.replace("geomean", "worst"))  # noqa: E731
        cells = [fmt(r[c]) if worst(c) is None else f"{fmt(r[c])} / {fmt(worst(c))}" for c in geomeans]
        cells += [str(r["learned"])] if "learned" in table else []
        held = "yes" if r["held out"] else "no"
        lines.append(f"| {r['family']} | {held} | {r['sizes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
