"""results.md and step_vs_size.png from serving records: per model and phase, each mode's step time at every size,
each of the product's modes (``HOOKS``) against the best of the four stock peers at that size and against
``plain-dynamic``."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from benchmarks.zoo.report import own_compile
from benchmarks.zoo.timing_checks import noisy_line

from . import models

PEERS = ("plain-dynamic", "plain-static", "ma-static", "ma-dynamic")
# the default, one kernel per range of M (size_ranges), the default compiled once per size (a server's compile sizes)
HOOKS = ("hook-dynamic", "hook-ranges-dynamic", "hook-static")


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def table(records: list[dict[str, Any]], timing: str = "step_ms") -> dict[tuple[str, str], dict[str, Any]]:
    """(model, phase) -> {"steps": {mode: {size: ms}}, "compile": {mode: s}, "recompiles": {mode: n},
    "max_rel_err": {mode: worst output error against eager's}, "sizes": [...],
    "vs_best": {hook mode: {size: ratio}}, "vs_plain": {hook mode: {size: ratio}}} over the ok records, by the
    records' ``timing`` (``step_ms``: replays timed one at a time; ``step_ms_b2b``: back to back). A mode run in
    several processes (records' ``process``) gets the median of their step times per size, and of their compiles."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in map(own_compile, records):  # compile times net of waits for other lanes' turns
        t = out.setdefault((r["model"], r["phase"]), {"steps": {}, "compile": {}, "recompiles": {}, "max_rel_err": {},
                                                      "sizes": set()})
        t["sizes"].add(r["size"])
        if r.get("status") != "ok" or not r.get(timing):
            continue
        t["steps"].setdefault(r["mode"], {}).setdefault(r["size"], []).append(r[timing])
        per_process = t["compile"].setdefault(r["mode"], {})
        process = r.get("process", 0)
        dynamic = r["mode"].endswith("-dynamic")  # one compile over every size; static: one per size, summed
        per_process[process] = r["compile_s"] if dynamic else per_process.get(process, 0.0) + r["compile_s"]
        t["recompiles"][r["mode"]] = max(t["recompiles"].get(r["mode"], 0), r.get("recompiles") or 0)
        if r.get("max_rel_err") is not None:
            t["max_rel_err"][r["mode"]] = max(t["max_rel_err"].get(r["mode"], 0.0), r["max_rel_err"])
    for t in out.values():
        t["sizes"] = sorted(t["sizes"])
        t["steps"] = {m: {size: statistics.median(v) for size, v in by_size.items()}
                      for m, by_size in t["steps"].items()}
        t["compile"] = {m: statistics.median(by_process.values()) for m, by_process in t["compile"].items()}
        t["vs_best"], t["vs_plain"] = {}, {}
        for hook in [h for h in HOOKS if h in t["steps"]]:
            best, plain = t["vs_best"].setdefault(hook, {}), t["vs_plain"].setdefault(hook, {})
            for size, ms in t["steps"][hook].items():
                peers = [t["steps"][m][size] for m in PEERS if size in t["steps"].get(m, {})]
                if peers:
                    best[size] = min(peers) / ms
                if size in t["steps"].get("plain-dynamic", {}):
                    plain[size] = t["steps"]["plain-dynamic"][size] / ms
    return out


def markdown(records: list[dict[str, Any]]) -> str:
    gpus = sorted({str(r.get("gpu")) for r in records if r.get("gpu")}) or ["-"]
    torch_versions = sorted({str(r.get("torch")) for r in records if r.get("torch")}) or ["-"]
    lines = ["# Serving: one compile for every size", "", f"GPU {', '.join(gpus)} · torch {', '.join(torch_versions)}",
             "", "Step time in ms by one CUDA-graph replay per size (lower is better); `hook-...` vs best = the best "
             f"of {', '.join(PEERS)} at that size / the hook mode's (higher is better). Compile: dynamic modes, the "
             "one graph's whole compile over every size; static modes, the sum of one compile per size; both without "
             "the time spent waiting for other runs' turns on the GPU where records say so (compile_waited_s).", ""]
    if any(r.get("process", 0) for r in records):
        lines += ["Modes run in several fresh processes (records' `process`) show the median per size, and of their "
                  "compiles.", ""]
    back_to_back = table(records, "step_ms_b2b")
    for (model, phase), t in table(records).items():
        modes = [m for m in models.MODES if m in t["steps"]]
        hooks = list(t["vs_best"])
        lines += [f"## {model}, {phase}", "", models.get(model).description if model in models.REGISTRY else "", "",
                  "| size | " + " | ".join(f"`{m}`" for m in modes)
                  + "".join(f" | `{h}` vs best | `{h}` vs plain-dynamic" for h in hooks) + " |",
                  "|---|" + "---|" * (len(modes) + 2 * len(hooks))]
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        for size in t["sizes"]:
            cells = [fmt(t["steps"][m].get(size)) for m in modes]
            for h in hooks:
                cells += [fmt(t["vs_best"][h].get(size)), fmt(t["vs_plain"][h].get(size))]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        lines += ["", "| mode | compile s | recompiles |", "|---|---|---|"]
        lines += [f"| `{m}` | {t['compile'][m]:.1f} | {t['recompiles'].get(m, 0)} |"
                  for m in modes if m in t["compile"]]
        if t["max_rel_err"]:
            lines += ["", "Outputs against eager's, worst over sizes (`max_rel_err`: max |out - eager| / max |eager|): "
                      + ", ".join(f"`{m}` {e:.1e}" for m, e in t["max_rel_err"].items()) + "."]
        lines.append("")
        for h in hooks:
            geo_plain, worst = _geomean(list(t["vs_plain"][h].values())), min(t["vs_best"][h].values(), default=None)
            compile_ratio = (t["compile"][h] / t["compile"]["plain-dynamic"]
                             if h in t["compile"] and t["compile"].get("plain-dynamic") else None)
            b2b = back_to_back.get((model, phase), {})
            b2b_plain = _geomean(list(b2b.get("vs_plain", {}).get(h, {}).values()))
            b2b_worst = min(b2b.get("vs_best", {}).get(h, {}).values(), default=None)
            lines.append(f"`{h}`: geomean over sizes vs plain-dynamic "
                         f"{'-' if geo_plain is None else f'{geo_plain:.3f}'}; worst vs the best peer "
                         f"{'-' if worst is None else f'{worst:.3f}'}; compile vs plain-dynamic "
                         f"{'-' if compile_ratio is None else f'{compile_ratio:.2f}x'}"
                         + ("." if b2b_plain is None else f". Replays back to back (`step_ms_b2b`): {b2b_plain:.3f} vs "
                            f"plain-dynamic, worst {'-' if b2b_worst is None else f'{b2b_worst:.3f}'} vs the best "
                            "peer."))
        lines.append("")
    lines += [noisy_line(records, lambda r: f"{r['model']} {r['phase']} {r['size']} `{r['mode']}`"), ""]
    failed = [r for r in records if r.get("status") != "ok"]
    if failed:
        lines += ["## Not ok", ""] + [f"- {r['model']} {r['phase']} {r['mode']} size {r['size']}: {r.get('status')} "
                                       f"{r.get('error', '')}" for r in failed]
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], path: Path) -> None:
    """Step time against size, one line per mode, one panel per (model, phase), four panels a row; log-log."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = table(records)
    columns = min(max(len(tables), 1), 4)
    rows = -(-max(len(tables), 1) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    for ax in axes.flat[len(tables):]:
        ax.set_visible(False)
    for ax, ((model, phase), t) in zip(axes.flat, tables.items()):
        for mode in [m for m in models.MODES if m in t["steps"]]:
            sizes = sorted(t["steps"][mode])
            ax.plot(sizes, [t["steps"][mode][s] for s in sizes], marker="o", label=mode,
                    color=f"C{models.MODES.index(mode)}")  # one colour per mode in every panel
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{model}, {phase}")
        ax.set_xlabel("batch size" if phase == "decode" else "tokens")
        ax.set_ylabel("step ms (lower is better)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(records: list[dict[str, Any]], out: Path) -> Path:
    out = Path(out)
    (out / "results.md").write_text(markdown(records))
    plot(records, out / "step_vs_size.png")
    return out / "results.md"
