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
  (``predictor.runtime.size_ranges``). The candidates judged are those labelled at the sweep's M nearest the
  representative (the candidates Inductor offers depend on its size hint, not on the range).

Decisions are the hook's own (``policy.decide_one`` with the shipped decide gap). Where a chosen kernel was not timed
at an M, that M is left out, never guessed. A family on the model's held-out side of its split is marked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..problem import problem_from_row
from ..runtime.policy import DECIDE_MIN_GAP, decide_gap_for, decide_one, trusted_kind
from ..runtime.size_ranges import BOUNDS, representatives
from .hint_eval import SWEEP_FAMILY, geomean_known

BOUND_SETS = (BOUNDS, (8, 32, 128), (32, 128, 512), (16, 128, 1024), (64, 256, 1024))


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


def evaluate(rows: pd.DataFrame, model: Any, device: Any, metadata: dict[str, Any],
             bound_sets: Sequence[Sequence[int]] = BOUND_SETS, gap: float = DECIDE_MIN_GAP,
             held_out: set[str] | None = None) -> pd.DataFrame:
    """One row per M-sweep family: geomean and worst fraction of the per-M oracle for each strategy."""
    ranges = metadata.get("problem_ranges")
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
        for bounds in bound_sets:
            reps = representatives(bounds)
            choice = {}
            for rep in reps:  # the candidates of the labelled M nearest the representative, judged at it
                nearest = min(times.index, key=lambda m: (abs(math.log(m / rep)), m))
                choice[rep] = _decide(model, device, ranges, by_m[nearest], rep, gap)
            strategies["ranges " + ",".join(map(str, bounds))] = pd.Series({
                m: next((choice[rep] for b, rep in zip(bounds, reps) if m <= b), plain[m]) for m in times.index})
        for name, chosen in strategies.items():
            fraction = _fraction(times, chosen)
            result[f"{name} geomean"] = geomean_known(fraction)
            result[f"{name} worst"] = float(fraction.min())
        out.append(result)
    return pd.DataFrame(out)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Geomean over families of each strategy's geomean, and the worst size of any family."""
    names = [c.removesuffix(" geomean") for c in table.columns if c.endswith(" geomean")]
    return pd.DataFrame({"strategy": names,
                         "geomean over families": [float(np.exp(np.log(table[f"{n} geomean"]).mean())) for n in names],
                         "worst size": [float(table[f"{n} worst"].min()) for n in names]})


def run(dataset: str | Path, model_folder: str | Path) -> str:
    """The markdown report of ``evaluate`` on a bulk dataset's M-sweeps with the model in ``model_folder``."""
    from ..artifacts import load_model
    from ..device import DeviceInfo
    from ..schema import read_dataset
    from .split import in_groups, recorded_test_groups

    model, metadata = load_model(model_folder)
    rows = read_dataset(dataset)
    test = rows[in_groups(rows, recorded_test_groups(metadata) or [])]
    table = evaluate(rows, model, DeviceInfo.from_metadata(metadata), metadata,
                     held_out=set(test["family_tag"].astype(str)))
    if table.empty:
        raise ValueError(f"{dataset}: no M-sweep family with cuBLAS and at least 6 sizes")
    meta = rows.attrs.get("metadata", {})
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [f"Size ranges on the M-sweeps of {dataset} ({meta.get('gpu', '?')}), model {model_folder}; fraction "
             "of the per-M oracle (1.0 = the fastest candidate measured at every M), M from 2 up", "",
             "| strategy | geomean over families | worst size |", "|---|---|---|"]
    lines += [f"| {r.strategy} | {r[2]:.3f} | {r[3]:.3f} |" for r in summary(table).itertuples()]
    lines += ["", "Per family (geomean / worst):", "",
              "| family | held out | sizes | " + " | ".join(c.removesuffix(" geomean") for c in table.columns
                                                    if c.endswith(" geomean")) + " |",
              "|---|---|---|" + "---|" * sum(c.endswith(" geomean") for c in table.columns)]
    for _, r in table.iterrows():
        cells = [f"{fmt(r[c])} / {fmt(r[c.replace('geomean', 'worst')])}"
                 for c in table.columns if c.endswith(" geomean")]
        held = "yes" if r["held out"] else "no"
        lines.append(f"| {r['family']} | {held} | {r['sizes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
