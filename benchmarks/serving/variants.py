"""Tables of one served model's step time by size across runs of different product versions (A/B folders).

    python -m benchmarks.serving.variants docs/benchmarks/serving/nvidia-h100-dynamic-hints/results.json

Reads serving records that carry ``variant`` (what ran) and ``run`` (which process); prints Markdown: per
(model, phase), each run's back-to-back replay time (``step_ms_b2b``) by size, its geomean over sizes and that
geomean against the ``plain-dynamic`` run's.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd


def tables(records: list[dict]) -> str:
    frame = pd.DataFrame(records)
    frame = frame[frame["status"] == "ok"]
    frame["column"] = frame["variant"] + " (" + frame["run"] + ")"
    out = []
    for (model, phase), group in frame.groupby(["model", "phase"], sort=True):
        wide = group.pivot_table(index="size", columns="column", values="step_ms_b2b", aggfunc="first")
        order = sorted(wide.columns, key=lambda c: (not c.startswith("plain-dynamic"), c))
        wide = wide[order]
        geo = np.exp(np.log(wide).mean())
        plain = next((geo[c] for c in order if c.startswith("plain-dynamic")), float("nan"))
        out.append(f"## {model}, {phase}: ms per step by back-to-back CUDA-graph replay\n")
        out.append("| size | " + " | ".join(f"`{c}`" for c in order) + " |")
        out.append("|---|" + "---|" * len(order))
        for size, row in wide.iterrows():
            out.append(f"| {size} | " + " | ".join("-" if pd.isna(v) else f"{v:.4f}" for v in row) + " |")
        out.append("| geomean | " + " | ".join(f"{geo[c]:.4f}" for c in order) + " |")
        out.append("| vs plain-dynamic | " + " | ".join(f"{plain / geo[c]:.3f}" for c in order) + " |\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.variants", description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a results.json whose records carry 'variant' and 'run'")
    args = parser.parse_args(argv)
    try:
        with open(args.results) as f:
            records = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        sys.exit(f"variants: error: cannot read {args.results}: {exc}")
    missing = [i for i, r in enumerate(records) if "variant" not in r or "run" not in r]
    if missing:
        sys.exit(f"variants: error: {args.results}: record {missing[0]} has no 'variant' or 'run'")
    print(tables(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
