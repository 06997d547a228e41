"""Offline: how the hook's analytic CUTLASS ranking (``predictor.runtime.choices.cutlass.tile_score``) orders the CUTLASS kernels
Inductor really timed (CPU; reads a ``compile_bench`` results.json with ``+cutlass`` modes).

    python -m benchmarks.cutlass_ranking_eval docs/benchmarks/h200-cutlass/results.json

Every ``+cutlass`` run records each choice Inductor benchmarked (``timed_us``: Inductor's own benchmark time).
Per GEMM this pools the CUTLASS kernels of all its runs (a kernel's time = its best swizzle, the median over runs),
ranks them by ``tile_score`` and by Inductor's list order (what ``cutlass_max_profiling_configs`` keeps), and
reports the best time among each ranking's top k over the best time of all timed kernels (1.0 = the best kept),
plus the best CUTLASS kernel against cuBLAS in the same benchmark (which overstates cuBLAS on GEMMs under ~50 us,
so a ratio below 1 there is not a CUTLASS win in the program). Only kernels some run compiled are known, so this
scores the rankings within that pool, not within Inductor's whole CUTLASS list.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.candidate import from_choice_caller
from predictor.offline.report import markdown_table
from predictor.runtime.choices.cutlass import tile_score


def timed_kernels(results: dict, gemm: dict) -> tuple[pd.DataFrame, float]:
    """One row per CUTLASS kernel timed for this GEMM (best swizzle, median over runs), and cuBLAS's median time."""
    rows, aten = [], []
    for key, res in results.items():
        pid, _, mode = key.partition("|")
        if pid != gemm["problem_id"] or "+cutlass" not in mode:
            continue
        for order, (label, t) in enumerate(res.get("timed_us", {}).items()):
            if label in ("mm", "addmm", "bias_addmm"):
                aten.append(t)
            elif label.startswith("cutlass") and np.isfinite(t):
                name, _, desc = label.partition(" ")
                cand = from_choice_caller(name, desc)
                rows.append({"kernel": cand.key.rsplit("/sw", 1)[0], "candidate": cand, "time_us": t,
                             "first_n": mode.startswith("full"), "order": order})
    if not rows:
        return pd.DataFrame(), float("nan")
    df = pd.DataFrame(rows)
    per_run = df.groupby(["kernel", "first_n"], as_index=False).agg(time_us=("time_us", "min"), order=("order", "min"),
                                                                    candidate=("candidate", "first"))
    kernels = per_run.groupby("kernel", as_index=False).agg(time_us=("time_us", "median"), candidate=("candidate", "first"),
                                                            inductor_first=("first_n", "any"), order=("order", "min"))
    return kernels, float(np.median(aten)) if aten else float("nan")


def evaluate(results: dict, gemms: list[dict], sm_count: int, ks: tuple[int, ...]) -> pd.DataFrame:
    out = []
    for g in gemms:
        kernels, aten_us = timed_kernels(results, g)
        if len(kernels) < 2:
            continue
        kernels["score"] = [tile_score(int(g["m"]), int(g["n"]), c, sm_count) for c in kernels.candidate]
        best = kernels.time_us.min()
        row = {"gemm": f"{g['m']}x{g['n']}x{g['k']} {g['dtype']}", "kernels": len(kernels),
               "best_cutlass_over_cublas": best / aten_us}
        # Inductor's order: its first-N run's kernels in list order, then the others
        inductor = kernels.sort_values(["inductor_first", "order"], ascending=[False, True], kind="stable")
        # the hook's order: tile_score, ties in Inductor's order (prune_cutlass sorts stably over Inductor's list)
        analytic = kernels.sort_values(["score", "inductor_first", "order"], ascending=[False, False, True], kind="stable")
        for k in ks:
            row[f"analytic@{k}"] = best / analytic.time_us.head(k).min()
            row[f"inductor@{k}"] = best / inductor.time_us.head(k).min()
        out.append(row)
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="compile_bench results.json with +cutlass modes")
    ap.add_argument("--sm-count", type=int, default=132)
    ap.add_argument("--ks", default="1,2,4")
    args = ap.parse_args()
    saved = json.loads(Path(args.results).read_text())
    table = evaluate(saved["results"], saved["gemms"], args.sm_count, tuple(int(k) for k in args.ks.split(",")))
    if table.empty:
        raise SystemExit(f"{args.results}: no GEMM with two or more timed CUTLASS kernels")
    print(f"{args.results}: {len(table)} GEMMs; {saved['device']}")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else v
    print(markdown_table(list(table.columns), [[fmt(v) for v in row] for row in table.itertuples(index=False)]))
    gm = lambda s: float(np.exp(np.log(s).mean()))
    print("\ngeomean: " + ", ".join(f"{c} {gm(table[c]):.3f}" for c in table.columns if "@" in c or "over" in c))


if __name__ == "__main__":
    main()
