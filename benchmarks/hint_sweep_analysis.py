"""What multi-kernel hints would buy on the collected M-sweeps (CPU; reads the bulk dataset; no label is
interpolated: a hint's kernel counts at a runtime M only where that exact candidate was timed there).

    python benchmarks/hint_sweep_analysis.py --dataset datasets/nvidia-h200/default.parquet

For each sweep family (N, K, dtype, layouts, op) and a hint set H: the kernel chosen at M = h (the best
candidate there) for each h in H; at every runtime M of the sweep the best of those kernels is used. Prints the
geomean and the worst fraction of the per-M oracle for the fixed list [64, 256, 4096], the best single hint, and
how many distinct winners the sweep has.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from predictor.schema import read_dataset  # noqa: E402

FAMILY = ["op", "n", "k", "dtype", "layout_a", "layout_b"]


def hint_set_fraction(times: pd.DataFrame, hints: list[int]) -> pd.Series:
    """times: runtime M x candidate (NaN = not timed). Fraction of the per-M oracle reached by the hints' kernels."""
    kernels = [times.loc[h].idxmin() for h in hints if h in times.index]
    if not kernels:
        return pd.Series(np.nan, index=times.index)
    return times.min(axis=1) / times[kernels].min(axis=1)


def analyse(rows: pd.DataFrame, fixed: list[int]) -> pd.DataFrame:
    sweeps = rows[rows.family_tag.str.startswith("msweep") & (rows.status == "ok")]
    out = []
    for key, sub in sweeps.groupby(FAMILY):
        times = sub.pivot_table(index="m", columns="candidate", values="time_us")
        if len(times) < 6:
            continue
        fixed_f = hint_set_fraction(times, [h for h in fixed if h in times.index])
        singles = {h: hint_set_fraction(times, [h]) for h in times.index}
        # where a hint's kernel was never timed at a runtime M the fraction is unknown: left out of the
        # geomean and counted (a set that is unknown nearly everywhere cannot win by it)
        gm = lambda f: float(np.exp(np.log(f.dropna()).mean())) if f.notna().mean() >= 0.5 else float("nan")
        best_h = max(singles, key=lambda h: np.nan_to_num(gm(singles[h]), nan=0.0))
        out.append({"family": " ".join(map(str, key)), "sweep Ms": len(times), "distinct winners": times.idxmin(axis=1).nunique(),
                    "fixed hints in sweep": [h for h in fixed if h in times.index],
                    "fixed geomean": gm(fixed_f), "fixed worst": float(fixed_f.min()),
                    "fixed unknown Ms": int(fixed_f.isna().sum()),
                    "best single hint": int(best_h), "single geomean": gm(singles[best_h]),
                    "single worst": float(singles[best_h].min()), "single unknown Ms": int(singles[best_h].isna().sum())})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="datasets/nvidia-h200/default.parquet")
    ap.add_argument("--fixed", default="64,256,4096")
    args = ap.parse_args()
    table = analyse(read_dataset(args.dataset), [int(h) for h in args.fixed.split(",")])
    print(table.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
