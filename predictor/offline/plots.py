"""The evaluation report's PNG plots (matplotlib is imported inside the functions: only when a report is written)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from .metrics import BASELINES, FAMILY_ORDER, EvaluationResult, summarise


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_oracle_curves(metrics: pd.DataFrame, rankers: Sequence[str], path: Path, title: str = "") -> Path:
    fig = _new_figure(11, 4.5)
    axes = fig.subplots(1, 2)
    alls = metrics[metrics.slice_kind == "all"]
    for r in rankers:
        sub = alls[alls.ranker == r].sort_values("k")
        if sub.empty:
            continue
        style = dict(marker="o", linewidth=2.2 if r == rankers[0] else 1.5,
                     linestyle="--" if r in BASELINES else "-")
        axes[0].plot(sub.k, sub.oracle, label=r, **style)
        axes[1].plot(sub.k, sub.hit, label=r, **style)
    for ax, what in zip(axes, ("oracle@k (geomean of best / chosen)", "hit@k (true best in top-k)")):
        ax.set_xlabel("k (candidates benchmarked)")
        ax.set_ylabel(what)
        ax.set_xticks(sorted(alls.k.unique()))
        ax.grid(True, alpha=0.3)
    for ax, col in zip(axes, ("oracle", "hit")):
        values = alls.loc[alls.ranker.isin(list(rankers)), col].dropna()
        low = float(values.min()) if len(values) else 0.0
        ax.set_ylim(max(0.0, math.floor((low - 0.05) * 10) / 10), 1.02)
    axes[0].set_title("oracle@k")
    axes[1].set_title("hit@k")
    axes[1].legend(loc="lower right", fontsize=8, frameon=True)
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120)
    return path


def plot_fraction_vs_size(result: EvaluationResult, ranker: str, path: Path, ks: Sequence[int] = (1, 5)) -> Path:
    fig = _new_figure(11, 4.5)
    axes = fig.subplots(1, len(ks), sharey=True, squeeze=False)[0]
    pp = result.per_problem[result.per_problem.ranker == ranker]
    for ax, k in zip(axes, ks):
        sub = pp[pp.k == k].set_index("problem_id")
        if sub.empty:
            ax.text(0.5, 0.5, f"k={k} not evaluated", ha="center", va="center", transform=ax.transAxes)
            continue
        attrs = result.problems.reindex(sub.index)
        for dtype in sorted(attrs["dtype"].unique()):
            m = (attrs["dtype"] == dtype).to_numpy()
            ax.scatter(attrs["log10_flops"].to_numpy()[m], sub["fraction"].to_numpy()[m], s=14, alpha=0.65, label=dtype)
        stats = summarise(sub["fraction"].to_numpy())
        ax.set_title(f"k={k}: oracle {stats['oracle']:.3f}, p5 {stats['p5']:.3f}, hit {stats['hit']:.2f}")
        ax.set_xlabel("log10(FLOPs) = log10(2·b·m·n·k)")
        ax.set_ylim(-0.02, 1.05)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("fraction = best time / chosen time")
    axes[-1].legend(title="dtype", loc="lower right", fontsize=8)
    fig.suptitle(f"Per-problem fraction vs problem size — {ranker}")
    fig.savefig(path, dpi=120)
    return path


def plot_family_confusion(result: EvaluationResult, ranker: str, path: Path) -> Path:
    pp = result.per_problem[(result.per_problem.ranker == ranker) & (result.per_problem.k == result.per_problem.k.min())]
    pp = pp.set_index("problem_id")
    true = result.problems["best_family"].reindex(pp.index).astype(str)
    chosen = pp["top1_family"].astype(str)
    labels = [f for f in FAMILY_ORDER if f in set(true) | set(chosen)] + sorted((set(true) | set(chosen)) - set(FAMILY_ORDER))
    counts = pd.crosstab(true, chosen).reindex(index=labels, columns=labels, fill_value=0)
    share = counts.div(counts.sum(axis=1).replace(0, 1), axis=0)
    fig = _new_figure(1.4 * len(labels) + 2.6, 1.2 * len(labels) + 1.8)
    ax = fig.subplots()
    image = ax.imshow(share.to_numpy(), cmap="Blues", vmin=0, vmax=1)
    for i in range(len(labels)):
        for j in range(len(labels)):
            c = int(counts.iat[i, j])
            ax.text(j, i, str(c), ha="center", va="center", color="white" if share.iat[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("family of the top-1 pick")
    ax.set_ylabel("family of the true best")
    ax.set_title(f"Top-1 family vs true-best family — {ranker}\n(counts; colour = share of the row)")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.savefig(path, dpi=120)
    return path
