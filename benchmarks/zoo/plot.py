"""The zoo report's plot: each mode's speed against its compile time, both relative to plain ``torch.compile``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def versions(records: list[dict[str, Any]], key: str) -> str:
    """The distinct values of ``key`` over the records (``-`` where none has one)."""
    values = sorted({str(r[key]) for r in records if r.get(key)})
    return ", ".join(values) or "-"


def plot(records: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    """Speed vs plain against compile time vs plain (log x), one marker style per mode, a point per model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = "os^vD<>Pp*Xh"
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for i, mode in enumerate(summary["mode_order"]):
        pts = [(runs[mode]["compile_vs_plain"], runs[mode]["speed_vs_plain"]) for runs in summary["models"].values()
               if mode in runs and runs[mode]["status"] == "ok" and runs[mode]["compile_vs_plain"]
               and runs[mode]["speed_vs_plain"]]
        if pts:
            ax.scatter(*zip(*pts), marker=markers[i % len(markers)], label=mode, alpha=0.8)
    ax.set_xscale("log")
    ticks = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x")
    ax.xaxis.set_major_formatter(ticks)
    ax.xaxis.set_minor_formatter(ticks)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("compile time / plain torch.compile (log)")
    ax.set_ylabel("speed vs plain (plain step / step)")
    gpu = versions(records, "gpu")
    ax.set_title(f"Model zoo on {'CPU' if gpu == '-' else gpu}: speed vs compile time, one point per model")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:  # e.g. a folder of max-autotune runs only: speeds are relative to plain runs kept elsewhere
        ax.text(0.5, 0.5, "no model has a plain run here to compare with", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
