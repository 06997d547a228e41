"""Where a mode's compile time goes beyond plain ``torch.compile``'s: per model, the compile seconds of both and the
difference in each of torch's compile phases (``collectors.programs.step.COMPILE_PHASES``, recorded per run as
``compile_phases_s``), so the filter and lowerings (lowering), extra fused kernels (scheduler, code generation) and
Triton compiles (``async_compile.wait``) show apart.

    python -m benchmarks.zoo.compile_phases docs/benchmarks/zoo/<folder>/results.json --mode hook
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

# a phase is shown when it moves by at least this many seconds on some model
SHOWN_S = 0.2


def phase_table(records: list[dict[str, Any]], mode: str, base: str = "plain") -> list[str]:
    """Markdown lines: per model run in both ``mode`` and ``base`` (status ok), compile s of each, their ratio and
    ``mode`` minus ``base`` per phase; the last row the geomean ratio. Raises ValueError when no model has both."""
    runs = {(r["model"], r["mode"]): r for r in records if r.get("status") == "ok" and r.get("compile_s")}
    models = sorted({m for m, md in runs if md == mode and (m, base) in runs})
    if not models:
        raise ValueError(f"no model has ok runs of both {mode!r} and {base!r}")
    deltas = {}
    for m in models:
        ours, theirs = runs[m, mode].get("compile_phases_s", {}), runs[m, base].get("compile_phases_s", {})
        deltas[m] = {k: ours.get(k, 0.0) - theirs.get(k, 0.0) for k in {*ours, *theirs}}
    moved = {k: max(abs(d.get(k, 0.0)) for d in deltas.values()) for k in {k for d in deltas.values() for k in d}}
    phases = sorted((k for k, v in moved.items() if v >= SHOWN_S), key=lambda k: (-moved[k], k))  # largest first
    lines = [f"| model | `{base}` compile s | `{mode}` compile s | ratio | " +
             " | ".join(f"Δ {p} s" for p in phases) + " |", "|---|---|---|---|" + "---|" * len(phases)]
    ratios = []
    for m in models:
        a, b = runs[m, base]["compile_s"], runs[m, mode]["compile_s"]
        ratios.append(b / a)
        lines.append(f"| {m} | {a:.1f} | {b:.1f} | {b / a:.2f}x | " +
                     " | ".join(f"{deltas[m].get(p, 0.0):+.1f}" for p in phases) + " |")
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    lines.append(f"| geomean ({len(models)} models) | | | {geomean:.2f}x |" + " |" * len(phases))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo.compile_phases", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a zoo run's results.json")
    parser.add_argument("--mode", default="hook", help="the mode to explain (default: hook, predictor.compile)")
    parser.add_argument("--base", default="plain", help="the mode it is compared with (default: plain)")
    args = parser.parse_args(argv)
    try:
        records = json.loads(args.results.read_text())
        print("\n".join(phase_table(records, args.mode, args.base)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"compile_phases: error: {args.results}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
