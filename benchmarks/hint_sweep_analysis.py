"""Hint buckets offline: predicted multi-kernel hints vs the fixed [64, 256, 4096] list on the labelled M-sweeps.

    python -m benchmarks.hint_sweep_analysis --out docs/hints

For each M-sweep family of the bulk dataset: the hints ``predictor.runtime.dynamic.hints`` chooses from the grid (with the
model named by --model; families on the held-out side of its split are marked), the fixed list, and the best
single hint in hindsight. A hint's kernel is the true best at M = hint (what Inductor's autotuning at that hint
picks); at every runtime M of the sweep the best of the chosen kernels is used, as multi-kernel dispatch would.
No label is interpolated: where a kernel was never timed at an M, that M is unknown and left out. Writes
hints.md (table) and hints.png (fraction of the per-M oracle vs M, fixed vs predicted).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="datasets/nvidia-h200/default.parquet")
    ap.add_argument("--model", default="models/h200-default-lgbm", help="a model fit on a split (held-out marked)")
    ap.add_argument("--out", default="docs/hints")
    args = ap.parse_args()

    import numpy as np

    from predictor.artifacts.model_folder import load_model
    from predictor.core.device import DeviceInfo
    from predictor.offline.hint_eval import evaluate_hint_choice, hint_set_fraction
    from predictor.offline.split import in_groups, recorded_test_groups
    from predictor.runtime.dynamic.hints import FIXED_HINTS, HINT_GRID
    from predictor.artifacts.schema import read_dataset

    model, meta = load_model(args.model)
    device = DeviceInfo.from_metadata(meta)
    rows = read_dataset(args.dataset)
    test = rows[in_groups(rows, recorded_test_groups(meta) or [])]
    table = evaluate_hint_choice(rows, model, device)
    held_out_ms = test[test.family_tag.str.startswith("msweep")].groupby(["n", "k", "dtype"]).size()
    table.insert(1, "held out", [tuple(x) in held_out_ms.index for x in
                                 table.family.str.split(" ").map(lambda f: (int(f[1]), int(f[2]), f[3]))])
    summary = {name: (float(np.exp(np.log(table[f"{name} geomean"]).mean())), float(table[f"{name} worst"].min()),
                      float(table[f"{name} hints"].map(len).mean()) if f"{name} hints" in table
                      else float(table[f"{name} kernels"].mean()) if f"{name} kernels" in table else 1.0)
               for name in ("predicted", "fixed", "best single", "hindsight", "any-kernels")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Hint buckets offline — `{args.model}` on `{args.dataset}`", "",
             f"GPU {meta['device']['gpu']}; hint grid {list(HINT_GRID)}; fixed list {list(FIXED_HINTS)}; "
             f"command `python -m benchmarks.hint_sweep_analysis --out {args.out}`.", "",
             "`hindsight` = the best set of at most 3 grid hints chosen with the true times (the ceiling for any "
             "predictor on this grid). `any-kernels` = the best set of at most 3 of all the Triton kernels the sweep "
             "timed, whatever M they would be compiled at (the ceiling for any hint predictor on any grid).", "",
             "| hints | families | geomean of family geomeans | worst size, any family | kernels compiled per GEMM (mean) |",
             "|---|---|---|---|---|"]
    for name, (gm, worst, n) in summary.items():
        lines.append(f"| {name} | {len(table)} | {gm:.3f} | {worst:.3f} | {n:.2f} |")
    lines += ["", table.round(3).to_markdown(index=False) if _has_tabulate() else "```\n" + table.round(3).to_string(index=False) + "\n```", ""]
    (out / "hints.md").write_text("\n".join(lines))
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = rows[rows.family_tag.str.startswith("msweep") & (rows.status == "ok")]
    fig, axes = plt.subplots(1, len(table), figsize=(3.2 * len(table), 3.2), dpi=110, sharey=True, squeeze=False)
    for ax, (_, r) in zip(axes[0], table.iterrows()):
        op, n, k, dtype, la, lb = r.family.split(" ")
        sub = sweeps[(sweeps.n == int(n)) & (sweeps.k == int(k)) & (sweeps.dtype == dtype) & (sweeps.layout_a == la)
                     & (sweeps.layout_b == lb)]
        times = sub.pivot_table(index="m", columns="candidate", values="time_us")
        for name, hints, style in (("fixed", r["fixed hints"], "o-"), ("predicted", r["predicted hints"], "s--")):
            f = hint_set_fraction(times, hints)
            ax.plot(f.index, f.values, style, ms=3, label=f"{name} {hints}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{n}x{k} {dtype} {la}/{lb}" + (" (held out)" if r["held out"] else ""), fontsize=8)
        ax.set_xlabel("runtime M")
        ax.legend(fontsize=6, loc="lower left")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of the per-M oracle")
    fig.tight_layout()
    fig.savefig(out / "hints.png")


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
