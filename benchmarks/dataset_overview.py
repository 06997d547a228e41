"""What a labelled dataset says, at a glance: which kernel family wins where, and by how much (CPU).

    python -m benchmarks.dataset_overview --dataset datasets/nvidia-h200/default.parquet \
        --out datasets/nvidia-h200/overview

Per problem: the family of the fastest ok candidate, and the ratio of the best Triton-template time to the best
aten (cuBLAS) time (> 1: cuBLAS faster). Writes overview.md (winner shares by dtype x size band) and
overview.png (the same as stacked bars, plus the Triton/cuBLAS ratio against problem size).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


TEMPLATE_FAMILIES = ("triton_mm", "triton_tma")


def per_problem(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem with an ok candidate: dtype, size band, winning family, best Triton / best aten."""
    from predictor.offline.metrics import SIZE_BANDS, size_band

    ok = rows[rows["status"] == "ok"]
    best = ok.loc[ok.groupby("problem_id")["time_us"].idxmin()].set_index("problem_id")
    family = ok["family"].astype(str)
    best_template = ok[family.isin(TEMPLATE_FAMILIES)].groupby("problem_id")["time_us"].min()
    best_aten = ok[family == "aten"].groupby("problem_id")["time_us"].min()
    flops = 2.0 * best["b"] * best["m"] * best["n"] * best["k"]
    return pd.DataFrame({
        "dtype": best["dtype"].astype(str),
        "log2_flops": np.log2(flops.astype(float)),
        "size": pd.Categorical(np.log2(flops.astype(float)).map(size_band), [name for name, _ in SIZE_BANDS]),
        "winner": best["family"].astype(str),
        "triton_over_aten": best_template / best_aten,
    })


def winner_table(problems: pd.DataFrame) -> pd.DataFrame:
    """Share of problems each family wins, per dtype x size band (rows), with the problem count."""
    shares = pd.crosstab([problems["dtype"], problems["size"]], problems["winner"], normalize="index")
    shares.insert(0, "problems", problems.groupby(["dtype", "size"], observed=True).size())
    return shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="datasets/nvidia-h200/default.parquet")
    ap.add_argument("--out", default="datasets/nvidia-h200/overview")
    args = ap.parse_args()

    from predictor.offline.report import markdown_table
    from predictor.artifacts.schema import read_dataset

    rows = read_dataset(args.dataset)
    gpu = rows.attrs["metadata"].get("gpu", "?")
    problems = per_problem(rows)
    table = winner_table(problems)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ratio = problems["triton_over_aten"].dropna()
    lines = [f"# Who wins — `{args.dataset}` ({gpu})", "",
             f"Command: `python -m benchmarks.dataset_overview --dataset {args.dataset} --out {args.out}`.", "",
             f"{len(problems)} problems. Best Triton template / best aten (cuBLAS) time: median {ratio.median():.2f}, "
             f"Triton faster on {(ratio < 1).mean():.0%} of the {len(ratio)} problems that have both.", "",
             "Share of problems each candidate family wins, by dtype and size band (2·M·N·K: small < 2^24, "
             "medium < 2^33):", "",
             markdown_table(["dtype", "size", *table.columns],
                            [[d, z, int(r["problems"]), *(f"{r[c]:.3f}" for c in table.columns[1:])]
                             for (d, z), r in table.iterrows()]), ""]
    (out / "overview.md").write_text("\n".join(lines))
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2), dpi=110)
    table.drop(columns="problems").plot.bar(stacked=True, ax=left, width=0.8)
    left.set_ylabel("share of problems won")
    left.set_xlabel("")
    left.set_xticklabels([f"{d}\n{s}" for d, s in table.index], fontsize=7)
    left.legend(fontsize=7)
    left.set_title("winning family by dtype and size", fontsize=9)
    for dtype, sub in problems.dropna(subset=["triton_over_aten"]).groupby("dtype"):
        right.scatter(sub["log2_flops"], sub["triton_over_aten"], s=5, alpha=0.5, label=dtype)
    right.axhline(1.0, color="black", lw=0.8)
    right.set_yscale("log")
    right.set_xlabel("log2(2·M·N·K)")
    right.set_ylabel("best Triton / best cuBLAS time (>1: cuBLAS faster)")
    right.legend(fontsize=7, markerscale=3)
    right.set_title(gpu, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "overview.png")


if __name__ == "__main__":
    main()
