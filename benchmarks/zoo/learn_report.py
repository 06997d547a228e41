"""The learn-from-use loop as one table: per model, the default on the shipped model (before), ``tune=5`` (which
records its benchmarks), and the default again on the refit local model (after), with the two ratios the
acceptance asks for: after's speed against the tuned run's, and after's compile against before's.

    python -m benchmarks.zoo.learn_report BEFORE/results.json TUNED/results.json AFTER/results.json [--set-b a,b]

Speed is the inverse of the step time (``step_ms``); compile is each run's own (``report.own_compile``: net of the
time it waited for other lanes' turns on the GPU). A model of ``--set-b`` was never tuned: its row compares after
with before only (does what was learned on set A carry to other sizes of its families?).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .report import geomean, pooled_records


def _ok(path: Path, mode: str) -> dict[str, dict[str, Any]]:
    records = json.loads(path.read_text())
    return {m: r for (m, md), r in pooled_records(records).items()
            if md == mode and r.get("status") == "ok" and r.get("step_ms") and r.get("compile_s")}


def learn_table(before: dict[str, dict], tuned: dict[str, dict], after: dict[str, dict],
                set_b: set[str]) -> list[str]:
    """Markdown lines: one row per model with a run in ``before`` or ``after``; geomean rows per set."""
    lines = ["| model (set) | before: step ms | compile s | `tune=5`: step ms | compile s | after: step ms | compile s "
             "| after vs tuned speed | after vs before speed | after / before compile |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    figures: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}

    def cell(r: dict | None, key: str, fmt: str) -> str:
        return format(r[key], fmt) if r else "–"

    def ratio(a: dict | None, b: dict | None, key: str, name: str, group: str) -> str:
        if not (a and b):
            return "–"
        value = a[key] / b[key]
        figures[group].setdefault(name, []).append(value)
        return f"{value:.3f}"

    models = [*before, *(m for m in after if m not in before)]
    for m in models:
        group = "B" if m in set_b else "A"
        b, t, a = before.get(m), tuned.get(m) if group == "A" else None, after.get(m)
        lines.append(f"| {m} ({group}) | {cell(b, 'step_ms', '.3f')} | {cell(b, 'compile_s', '.1f')} | "
                     f"{cell(t, 'step_ms', '.3f')} | {cell(t, 'compile_s', '.1f')} | {cell(a, 'step_ms', '.3f')} | "
                     f"{cell(a, 'compile_s', '.1f')} | {ratio(t, a, 'step_ms', 'tuned', group)} | "
                     f"{ratio(b, a, 'step_ms', 'before', group)} | {ratio(a, b, 'compile_s', 'compile', group)} |")
    for group, named in figures.items():
        if any(named.values()):
            g = {k: geomean(v) for k, v in named.items()}
            lines.append(f"| geomean, set {group} | | | | | | | " + " | ".join(
                f"{g[k]:.3f} ({len(named[k])})" if k in g else "–" for k in ("tuned", "before", "compile")) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo.learn_report", description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="results.json of the default on the shipped model")
    parser.add_argument("tuned", type=Path, help="results.json of the tune=5 runs (mode hook-tuned)")
    parser.add_argument("after", type=Path, help="results.json of the default on the refit local model")
    parser.add_argument("--set-b", default="", help="comma list of models never tuned (compared after vs before)")
    args = parser.parse_args(argv)
    try:
        before, tuned, after = _ok(args.before, "hook"), _ok(args.tuned, "hook-tuned"), _ok(args.after, "hook")
        set_b = {m.strip() for m in args.set_b.split(",") if m.strip()}
        print("\n".join(learn_table(before, tuned, after, set_b)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"learn_report: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
