"""Offline evaluation: the one implementation of oracle@k, p5@k and hit@k, and the evaluation report.

For a ranker R and k, each problem's *fraction* is its best true time in the space divided by the
fastest true time among R's top-k candidates, a number in [0, 1] (DESIGN.md, "Ranking and metrics"):

- a row whose ``status`` is not ``ok`` counts as infinitely slow when chosen, so a top-k made only
  of failed rows scores 0; problems without any ``ok`` row have no best time and are dropped;
- ``oracle@k`` is the geometric mean of the fractions, each floored at ``FAILED_FLOOR`` (1e-3) so
  a single all-failed pick costs a lot (x0.93 on 100 problems) without zeroing the whole mean;
- ``p5@k`` is the 5th percentile (numpy's linear interpolation) of the unfloored fractions;
- ``hit@k`` is the share of problems whose true best time is in the top-k (fraction == 1; a
  candidate tied with the best counts);
- ``failed`` (extra) is the share of problems whose top-k holds only failed rows.

Ties in a ranker's scores are broken by row order (as ``rankers.base.top_k`` does); NaN scores
rank last. The ``random`` baseline is not drawn: it is its exact expectation over uniformly random
k-subsets (``random_expectation``).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .atomic import REPORT, check_output_folder, claim_output, staged_folder
from .device import DeviceInfo

logger = logging.getLogger(__name__)

KS = (1, 2, 3, 5, 8, 10)
FAILED_FLOOR = 1e-3
# Size bands by log2(b*m*n*k): small < 2^24 (below ~256^3: launch/latency bound), medium < 2^33
# (below ~2048^3), large >= 2^33 (compute bound on an H100).
SIZE_BANDS = (("small", 24.0), ("medium", 33.0), ("large", math.inf))
SLICE_KINDS = ("all", "dtype", "family", "size", "op", "applies")
METRIC_COLUMNS = ("ranker", "k", "slice_kind", "slice", "oracle", "p5", "hit", "n", "failed")
BASELINES = ("inductor_order", "aten_only", "random", "roofline", "autoheuristic")
RANDOM = "random"
HEADLINE = (("oracle", 1), ("oracle", 3), ("oracle", 5), ("p5", 5), ("hit", 1), ("hit", 5))
FAMILY_ORDER = ("aten", "triton_mm", "triton_tma", "decompose_k")


class EvaluationError(ValueError):
    """An evaluation that cannot run as asked (one line naming the problem)."""


@dataclass
class EvaluationResult:
    """``metrics``: tidy table (METRIC_COLUMNS); ``per_problem``: ranker, k, problem_id, fraction, hit,
    top1_family; ``problems``: one row per evaluated problem (op, dtype, family, size band, flops,
    best_family, and an ``applies:<ranker>`` flag per ranker that says where it applies)."""

    metrics: pd.DataFrame
    per_problem: pd.DataFrame
    problems: pd.DataFrame
    rankers: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- metrics


def _check_ks(ks: Iterable[Any]) -> tuple[int, ...]:
    ks = tuple(ks)
    if not ks:
        raise EvaluationError("no k values given; expected e.g. ks=(1, 2, 3, 5, 8, 10)")
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1]
    if bad:
        raise EvaluationError(f"unknown k values {bad}: every k must be an integer >= 1")
    return tuple(sorted(set(int(k) for k in ks)))


def _true_times(rows: pd.DataFrame) -> np.ndarray:
    """Measured time of ok rows; +inf for failed ones (infinitely slow when chosen)."""
    times = rows["time_us"].to_numpy(dtype=float, na_value=np.nan)
    ok = (rows["status"] == "ok").to_numpy() & np.isfinite(times) & (times > 0)
    return np.where(ok, times, np.inf)


def _ranked(rows: pd.DataFrame, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row order sorted by problem, then score (desc), then row position; plus group starts/sizes."""
    scores = np.asarray(scores, dtype=float)
    if scores.shape != (len(rows),):
        raise EvaluationError(f"ranker returned {scores.shape} scores for {len(rows)} rows")
    scores = np.where(np.isnan(scores), -np.inf, scores)
    codes, uniques = pd.factorize(rows["problem_id"], sort=False)
    order = np.lexsort((np.arange(len(rows)), -scores, codes))
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if len(rows) else np.array([], int)
    sizes = np.diff(np.r_[starts, len(rows)])
    return order, starts, sizes, np.asarray(uniques)[sorted_codes[starts]] if len(rows) else np.array([], object)


def _fractions_for_ks(rows: pd.DataFrame, scores: np.ndarray, ks: Sequence[int]) -> tuple[pd.DataFrame, pd.Series]:
    """Per problem (index) and k (columns): the fraction; plus the family of each problem's top-1 row."""
    order, starts, sizes, pids = _ranked(rows, scores)
    times = _true_times(rows)[order]
    cummin = pd.Series(times).groupby(np.repeat(np.arange(len(starts)), sizes)).cummin().to_numpy()
    best = cummin[starts + sizes - 1]
    keep = np.isfinite(best)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in ks:
            chosen = cummin[starts + np.minimum(k, sizes) - 1]
            out[k] = np.where(np.isfinite(chosen), best / chosen, 0.0)[keep]
    frame = pd.DataFrame(out, index=pd.Index(pids[keep], name="problem_id"))
    top1 = pd.Series(rows["family"].to_numpy()[order][starts][keep], index=frame.index, name="top1_family")
    return frame, top1


def per_problem_fraction(rows: pd.DataFrame, scores: np.ndarray, k: int) -> pd.Series:
    """Per problem: best true time / fastest true time among the ranker's top-k (0 if all chosen failed).

    Problems with no ``ok`` row are dropped. Index: ``problem_id``.
    """
    (k,) = _check_ks([k])
    frame, _ = _fractions_for_ks(rows, scores, [k])
    return frame[k].rename("fraction")


def random_expectation(rows: pd.DataFrame, k: int) -> pd.DataFrame:
    """The ``random`` baseline's exact per-problem expectation over uniformly random k-subsets.

    With the N candidates sorted by true time (failed = +inf), the fastest of a random k-subset is
    the j-th with probability C(N-j, k-1) / C(N, k). Columns: ``fraction`` = exp(E[log max(f,
    FAILED_FLOOR)]) (so the geometric mean over problems is exp(E[log oracle@k]) exactly) and
    ``hit`` = P(the best time is in the subset). Problems with no ``ok`` row are dropped.
    """
    (k,) = _check_ks([k])
    times = pd.Series(_true_times(rows), index=rows.index)
    fractions, hits, pids = [], [], []
    for pid, group in times.groupby(rows["problem_id"].to_numpy(), sort=False):
        t = np.sort(group.to_numpy())
        best = t[0]
        if not np.isfinite(best):
            continue
        n = len(t)
        kk = min(k, n)
        # P_1 = k/N, P_{j+1} = P_j * (N-j-k+1)/(N-j)  (j 1-based), zero once fewer than k-1 rows remain
        j = np.arange(1, n + 1)
        ratio = np.ones(n)
        ratio[1:] = np.clip(n - j[:-1] - kk + 1, 0, None) / (n - j[:-1])
        prob = kk / n * np.cumprod(ratio)
        with np.errstate(divide="ignore"):
            frac = np.maximum(np.where(np.isfinite(t), best / t, 0.0), FAILED_FLOOR)
        fractions.append(float(np.exp(np.sum(prob * np.log(frac)))))
        hits.append(float(np.sum(prob[t == best])))
        pids.append(pid)
    return pd.DataFrame({"fraction": fractions, "hit": hits}, index=pd.Index(pids, name="problem_id"))


def summarise(fractions: pd.Series | np.ndarray, hits: pd.Series | np.ndarray | None = None) -> dict[str, float]:
    """{oracle: geomean (floored at FAILED_FLOOR), p5: 5th percentile, hit: share with fraction == 1, n,
    failed: share with fraction 0}. ``hits`` overrides the hit indicator (the random expectation)."""
    f = np.asarray(fractions, dtype=float)
    n = int(len(f))
    if n == 0:
        return {"oracle": float("nan"), "p5": float("nan"), "hit": float("nan"), "n": 0, "failed": float("nan")}
    h = (f >= 1.0 - 1e-12).astype(float) if hits is None else np.asarray(hits, dtype=float)
    return {
        "oracle": float(np.exp(np.mean(np.log(np.maximum(f, FAILED_FLOOR))))),
        "p5": float(np.percentile(f, 5)),
        "hit": float(np.mean(h)),
        "n": n,
        "failed": float(np.mean(f <= 0.0)),
    }


def pruning_rule_summary(rows: pd.DataFrame, scores: np.ndarray, k: int, margin: float | None,
                         keep_aten: bool = True, aten_alone_below_us: float | None = None,
                         device: "DeviceInfo | None" = None) -> dict[str, float]:
    """What the hook keeps and reaches, by the hook's own rule (``policy.keep_best`` and
    ``with_aten_fallback``): per problem the top ``k``, minus those more than ``margin`` below the favourite,
    plus the best-scored aten row when ``keep_aten`` and none is kept; with ``aten_alone_below_us`` (needs
    ``device``), aten alone where it is the favourite of a GEMM whose ideal time is below that.

    Returns ``summarise`` of the fractions plus ``kept_mean`` (choices Inductor would still compile and
    benchmark) and ``single`` (share of problems left with one choice: no benchmarking at all)."""
    from .features import ideal_time_us
    from .policy import aten_alone_if_small, keep_best, with_aten_fallback

    if aten_alone_below_us is not None and device is None:
        raise ValueError("aten_alone_below_us needs the device (for the GEMM's ideal time)")
    times = _true_times(rows)
    scores = np.asarray(scores, dtype=float)
    is_aten = (rows["family"] == "aten").to_numpy()
    fractions, kept_counts = [], []
    for idx in rows.groupby("problem_id", sort=False).indices.values():
        best = times[idx].min()
        if not np.isfinite(best):
            continue  # no ok row: not evaluated, as everywhere else
        kept = keep_best(scores[idx], k, margin)
        if keep_aten:
            kept = with_aten_fallback(kept, scores[idx], is_aten[idx])
        if aten_alone_below_us is not None:
            r = rows.iloc[idx[0]]
            ideal = ideal_time_us(int(r["b"]), int(r["m"]), int(r["n"]), int(r["k"]), str(r["dtype"]),
                                  str(r["out_dtype"]), device)
            kept = aten_alone_if_small(kept, scores[idx], is_aten[idx], ideal, aten_alone_below_us)
        chosen = times[idx][kept].min()
        fractions.append(best / chosen if np.isfinite(chosen) else 0.0)
        kept_counts.append(len(kept))
    kept_counts = np.asarray(kept_counts)
    return {**summarise(np.asarray(fractions)), "kept_mean": float(kept_counts.mean()) if len(kept_counts) else float("nan"),
            "single": float((kept_counts == 1).mean()) if len(kept_counts) else float("nan")}


# --------------------------------------------------------------------------- slices and tables


def size_band(log2_size: float) -> str:
    for name, upper in SIZE_BANDS:
        if log2_size < upper:
            return name
    return SIZE_BANDS[-1][0]


def problem_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem with at least one ok row: slice keys, size and the true-best family."""
    first = rows.groupby("problem_id", sort=False)[["op", "dtype", "b", "m", "n", "k", "family_tag"]].first()
    ok = rows[rows["status"] == "ok"]
    best_idx = ok.groupby("problem_id", sort=False)["time_us"].idxmin()
    best = pd.Series(rows.loc[best_idx.to_numpy(), "family"].to_numpy(), index=best_idx.index)
    first = first.loc[first.index.isin(best.index)].copy()
    size = first[["b", "m", "n", "k"]].astype(float).prod(axis=1)
    first["log2_size"] = np.log2(size)
    first["log10_flops"] = np.log10(2.0 * size)
    first["size"] = first["log2_size"].map(size_band)
    first["family"] = first["family_tag"].astype(str).str.split(":").str[0]
    first["best_family"] = best.reindex(first.index)
    first["n_rows"] = rows.groupby("problem_id", sort=False).size().reindex(first.index)
    return first


def _metrics_table(per_problem: pd.DataFrame, problems: pd.DataFrame, rankers: Sequence[str]) -> pd.DataFrame:
    applies_cols = [c for c in problems.columns if c.startswith("applies:")]
    records = []
    for (ranker, k), group in per_problem.groupby(["ranker", "k"], sort=False):
        g = group.set_index("problem_id")
        attrs = problems.reindex(g.index)
        slices: list[tuple[str, str, np.ndarray]] = [("all", "all", np.ones(len(g), bool))]
        for kind in ("dtype", "family", "size", "op"):
            for value in sorted(attrs[kind].dropna().unique(), key=str):
                slices.append((kind, str(value), (attrs[kind] == value).to_numpy()))
        for col in applies_cols:
            slices.append(("applies", col.split(":", 1)[1], attrs[col].fillna(False).to_numpy(bool)))
        for kind, value, mask in slices:
            stats = summarise(g["fraction"].to_numpy()[mask], g["hit"].to_numpy()[mask])
            records.append({"ranker": ranker, "k": int(k), "slice_kind": kind, "slice": value, **stats})
    table = pd.DataFrame.from_records(records, columns=list(METRIC_COLUMNS))
    if table.empty:
        return table
    table["_r"] = table["ranker"].map({r: i for i, r in enumerate(rankers)})
    table["_s"] = table["slice_kind"].map({s: i for i, s in enumerate(SLICE_KINDS)})
    table = table.sort_values(["_r", "k", "_s", "slice"], kind="stable").drop(columns=["_r", "_s"])
    return table.reset_index(drop=True)


def evaluate(rows: pd.DataFrame, rankers: Mapping[str, Any], device: DeviceInfo, ks: Iterable[int] = KS) -> EvaluationResult:
    """Score every ranker on ``rows`` and compute all metrics and slices.

    A ranker named ``random`` (key or ``.name``) is never asked for scores: its exact expectation
    is reported. A ranker with an ``applies(rows, device)`` method (autoheuristic) adds a slice
    ``applies/<name>`` holding the problems where it ranks at least one row, for every ranker.
    """
    ks = _check_ks(ks)
    if not rankers:
        raise EvaluationError("no rankers to evaluate")
    rows = rows.reset_index(drop=True)
    problems = problem_table(rows)
    if problems.empty:
        raise EvaluationError("no problem has an ok row to evaluate on")
    parts = []
    for name, ranker in rankers.items():
        if name == RANDOM or getattr(ranker, "name", None) == RANDOM:
            for k in ks:
                exp = random_expectation(rows, k)
                parts.append(pd.DataFrame({"ranker": name, "k": k, "problem_id": exp.index, "fraction": exp["fraction"].to_numpy(),
                                           "hit": exp["hit"].to_numpy(), "top1_family": None}))
            continue
        scores = ranker.score(rows, device)
        frame, top1 = _fractions_for_ks(rows, scores, ks)
        for k in ks:
            f = frame[k].to_numpy()
            parts.append(pd.DataFrame({"ranker": name, "k": k, "problem_id": frame.index, "fraction": f,
                                       "hit": (f >= 1.0 - 1e-12).astype(float), "top1_family": top1.to_numpy()}))
        if hasattr(ranker, "applies"):
            mask = np.asarray(ranker.applies(rows, device), dtype=bool)
            share = pd.Series(mask, dtype=float).groupby(rows["problem_id"].to_numpy()).mean()
            problems[f"applies:{name}"] = share.reindex(problems.index).fillna(0.0).to_numpy() > 0
            problems[f"ranked_share:{name}"] = share.reindex(problems.index).fillna(0.0).to_numpy()
            logger.info("%s applies to %d of %d problems", name, int(problems[f"applies:{name}"].sum()), len(problems))
    per_problem = pd.concat(parts, ignore_index=True)
    names = list(rankers)
    return EvaluationResult(_metrics_table(per_problem, problems, names), per_problem, problems, names)


def evaluate_rankers(rows: pd.DataFrame, rankers: Mapping[str, Any], device: DeviceInfo, ks: Iterable[int] = KS) -> pd.DataFrame:
    """Tidy metrics: one row per (ranker, k, slice_kind, slice) with oracle, p5, hit, n (and failed)."""
    return evaluate(rows, rankers, device, ks).metrics


# --------------------------------------------------------------------------- report


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, Path):
        return str(value)
    return value


def metrics_dict(metrics: pd.DataFrame, context: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metrics.json`` document: {"context": {...}, "metrics": [{ranker, k, slice_kind, slice, ...}]}."""
    records = [{c: row[c] for c in METRIC_COLUMNS if c in metrics.columns} for _, row in metrics.iterrows()]
    return {"context": _jsonable(dict(context)), "metrics": _jsonable(records)}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in body]
    return "\n".join(lines)


def _lookup(metrics: pd.DataFrame) -> dict[tuple, dict]:
    return {(r.ranker, int(r.k), r.slice_kind, r.slice): r._asdict() for r in metrics.itertuples(index=False)}


def headline_table(metrics: pd.DataFrame, rankers: Sequence[str], slice_kind: str = "all", slice_: str = "all") -> str:
    look = _lookup(metrics)
    header = ["ranker"] + [f"{m}@{k}" for m, k in HEADLINE] + ["n"]
    body = []
    for r in rankers:
        cells = [look.get((r, k, slice_kind, slice_), {}).get(m) for m, k in HEADLINE]
        n = next((look[(r, k, slice_kind, slice_)]["n"] for _, k in HEADLINE if (r, k, slice_kind, slice_) in look), 0)
        body.append([f"`{r}`"] + [_fmt(c) for c in cells] + [n])
    return markdown_table(header, body)


def slice_table(metrics: pd.DataFrame, rankers: Sequence[str], slice_kind: str, ks: tuple[int, int] = (1, 5)) -> str:
    """Rows: slice values; columns: rankers; cells ``oracle@k1 / oracle@k2``."""
    look = _lookup(metrics)
    values = [v for v in dict.fromkeys(metrics.loc[metrics.slice_kind == slice_kind, "slice"])]
    header = [slice_kind, "n"] + [f"`{r}`" for r in rankers]
    body = []
    for v in values:
        n = next((look[(r, k, slice_kind, v)]["n"] for r in rankers for k in ks if (r, k, slice_kind, v) in look), 0)
        cells = [f"{_fmt(look.get((r, ks[0], slice_kind, v), {}).get('oracle'))} / "
                 f"{_fmt(look.get((r, ks[1], slice_kind, v), {}).get('oracle'))}" for r in rankers]
        body.append([v, n] + cells)
    return markdown_table(header, body)


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


def _as_result(results: EvaluationResult | pd.DataFrame) -> EvaluationResult:
    if isinstance(results, EvaluationResult):
        return results
    if isinstance(results, pd.DataFrame):
        return EvaluationResult(results, pd.DataFrame(), pd.DataFrame(), list(dict.fromkeys(results["ranker"])))
    raise TypeError(f"write_report takes an EvaluationResult or a metrics DataFrame, not {type(results).__name__}")


def write_report(results: EvaluationResult | pd.DataFrame, out_dir: str | Path, context: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``report.md``, ``metrics.json`` and PNG plots into ``out_dir``; return the metrics dict.

    ``context`` describes the run (gpu, torch, triton, dataset, dataset_sha256, command, model, ...);
    missing keys are shown as "n/a". ``context["main"]`` names the ranker the per-problem plots show
    (default: the first ranker). Per-problem plots need an ``EvaluationResult``. The folder is written whole
    beside ``out_dir`` and swapped in (``predictor.atomic``): an interrupted run never mixes new and old files.
    """
    final = check_output_folder(out_dir, REPORT)
    with staged_folder(final, REPORT) as out:
        doc = _write_report_files(_as_result(results), out, context)
    logger.info("wrote report to %s", final)
    return doc


def _write_report_files(result: EvaluationResult, out: Path, context: Mapping[str, Any]) -> dict[str, Any]:
    metrics = result.metrics
    rankers = result.rankers or list(dict.fromkeys(metrics["ranker"]))
    main = context.get("main") or (rankers[0] if rankers else "")
    ctx = dict(context)
    ctx.setdefault("main", main)
    ctx.setdefault("rankers", rankers)
    if not result.problems.empty:
        ctx.setdefault("n_problems", int(len(result.problems)))
        ctx.setdefault("n_rows", int(result.problems["n_rows"].sum()))
    ctx.setdefault("ks", sorted(int(k) for k in metrics["k"].unique()) if len(metrics) else [])
    ctx.setdefault("created", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    ctx.setdefault("failed_floor", FAILED_FLOOR)
    ctx.setdefault("size_bands_log2", {name: upper if np.isfinite(upper) else None for name, upper in SIZE_BANDS})

    plots: list[tuple[str, str]] = []
    if len(metrics):
        plots.append(("oracle@k and hit@k", plot_oracle_curves(metrics, rankers, out / "oracle_at_k.png",
                                                               f"{ctx.get('n_problems', '?')} problems, {ctx.get('gpu', 'n/a')}").name))
    if not result.per_problem.empty and main in set(result.per_problem.ranker):
        ks_avail = sorted(result.per_problem.loc[result.per_problem.ranker == main, "k"].unique())
        scatter_ks = [k for k in (1, 5) if k in ks_avail] or ks_avail[:2]
        plots.append((f"per-problem fraction vs size ({main})", plot_fraction_vs_size(result, main, out / "fraction_vs_size.png", scatter_ks).name))
        if result.per_problem.loc[result.per_problem.ranker == main, "top1_family"].notna().any():
            plots.append((f"top-1 family confusion ({main})", plot_family_confusion(result, main, out / "family_confusion.png").name))
    ctx["plots"] = [p for _, p in plots]

    doc = metrics_dict(metrics, ctx)
    (out / "metrics.json").write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    (out / "report.md").write_text(_report_markdown(metrics, rankers, ctx, plots, result))
    return doc


def _report_markdown(metrics: pd.DataFrame, rankers: Sequence[str], ctx: Mapping[str, Any],
                     plots: Sequence[tuple[str, str]], result: EvaluationResult) -> str:
    na = "n/a"
    lines = [f"# Evaluation report — `{ctx.get('model_name', ctx.get('main', na))}`", ""]
    facts = [
        ("GPU", f"{ctx.get('gpu', na)} (cc {ctx.get('cc', na)})"),
        ("torch / triton (dataset)", f"{ctx.get('torch', na)} / {ctx.get('triton', na)}"),
        ("dataset", f"`{ctx.get('dataset', na)}`"),
        ("dataset sha256", f"`{ctx.get('dataset_sha256', na)}`"),
        ("model", f"`{ctx.get('model_dir', na)}`"),
        ("space", ctx.get("space", na)),
        ("split", f"{ctx.get('split', na)} (seed {ctx.get('split_seed', na)}, test fraction {ctx.get('test_fraction', na)})"),
        ("problems / rows evaluated", f"{ctx.get('n_problems', na)} / {ctx.get('n_rows', na)}"),
        ("command", f"`{ctx.get('command', na)}`"),
        ("created", ctx.get("created", na)),
    ]
    lines += [markdown_table(["", ""], facts), ""]
    lines += ["## Headline (all evaluated problems)", "",
              "fraction = best true time / fastest true time among the top-k; oracle = geomean, "
              "p5 = 5th percentile, hit = share with the true best in the top-k.", "",
              headline_table(metrics, rankers), ""]
    for kind, title in (("dtype", "Per dtype"), ("family", "Per corpus family (family_tag prefix)"),
                        ("size", "Per size band"), ("op", "Per op"), ("applies", "Where a baseline applies")):
        if (metrics.slice_kind == kind).any():
            lines += [f"## {title} — oracle@1 / oracle@5", "", slice_table(metrics, rankers, kind), ""]
    if ctx.get("hook_rule"):
        lines += [f"## What the hook keeps — `{ctx.get('main', na)}`", "",
                  "oracle/p5 of the kept set (offline: benchmarking among the kept choices assumed perfect); kept = "
                  "choices left for Inductor to compile and benchmark; single = share of GEMMs left with one "
                  "choice (no benchmark at all).", "",
                  markdown_table(["k", "rule", "oracle", "p5", "kept (mean)", "single"],
                            [(r["k"], r["rule"], f"{r['oracle']:.3f}", f"{r['p5']:.3f}", f"{r['kept_mean']:.2f}",
                              f"{r['single']:.2f}") for r in ctx["hook_rule"]]), ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{caption}]({name})" for caption, name in plots] + [""]
    lines += ["## Notes", ""] + [f"- {n}" for n in _notes(ctx, result, rankers)] + [""]
    return "\n".join(lines)


def _notes(ctx: Mapping[str, Any], result: EvaluationResult, rankers: Sequence[str]) -> list[str]:
    bands = ", ".join(f"{n} < 2^{int(u)}" if np.isfinite(u) else f"{n} ≥ 2^{int(SIZE_BANDS[-2][1])}" for n, u in SIZE_BANDS)
    notes = [
        "`random` is the exact expectation over uniformly random k-subsets, not one draw: oracle is "
        "exp(E[log geomean]), hit is E[hit], p5 is the 5th percentile of the per-problem expected fractions.",
        f"A top-k holding only failed rows (status ≠ ok) scores fraction 0; the geomean floors fractions at {FAILED_FLOOR:g}. "
        "Problems with no ok row are not evaluated.",
        "Ties in a ranker's scores are broken by dataset row order.",
        f"Size bands by log2(b·m·n·k): {bands}.",
    ]
    if ctx.get("split") == "all":
        notes.append("split=all: the model's training problems are included, so its numbers are optimistic.")
    if ctx.get("n_dropped"):
        notes.append(f"{ctx['n_dropped']} problem(s) had no ok row and were dropped.")
    for col in (c for c in result.problems.columns if c.startswith("applies:")):
        name = col.split(":", 1)[1]
        applied = result.problems[col].to_numpy(bool)
        share = result.problems.get(f"ranked_share:{name}", pd.Series(np.nan, index=result.problems.index))[applied]
        notes.append(f"`{name}` ranks rows of {int(applied.sum())} of {len(result.problems)} problems "
                     f"({_fmt(float(share.mean()) if applied.any() else float('nan'), 2)} of their rows on average); "
                     "its unranked rows tie at the lowest score. The 'applies' table compares every ranker on those problems only.")
    if "autoheuristic" in rankers:
        notes.append("`autoheuristic` is torch's MMRankingH100 tree (opt-in in torch via TORCHINDUCTOR_AUTOHEURISTIC_USE=mm), "
                     "replayed on the dataset's space: tree choices outside the space (Inductor's extra mm-ah configs) cannot be "
                     "ranked, TMA and decompose-K rows are never ranked; see predictor/rankers/autoheuristic.py.")
    for item in ctx.get("skipped", []) or []:
        notes.append(f"not evaluated: {item}")
    for item in ctx.get("notes", []) or []:
        notes.append(str(item))
    return notes


# --------------------------------------------------------------------------- run_evaluation


class _ExpectedRandom:
    """Placeholder for the random baseline: ``evaluate`` reports its expectation, never its scores."""

    name = RANDOM

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "_ExpectedRandom":
        return self

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:  # pragma: no cover - never called
        raise EvaluationError("the random baseline is evaluated by its expectation, not by scores")


def _make_baseline(name: str) -> Any:
    if name == RANDOM:
        return _ExpectedRandom()
    try:
        from .rankers import make_ranker  # type: ignore[attr-defined]

        return make_ranker(name)
    except (ImportError, ValueError, KeyError):
        if name == "autoheuristic":
            from .rankers.autoheuristic import AutoHeuristicRanker

            return AutoHeuristicRanker()
        raise


def _select_space(rows: pd.DataFrame, space: str, source: str) -> pd.DataFrame:
    from .schema import DatasetError, select_space

    try:
        return select_space(rows, space, source)
    except DatasetError as exc:
        raise EvaluationError(f"{exc}; evaluate with a space the dataset holds") from None


def hook_rule_table(rows: pd.DataFrame, model: Any, device: DeviceInfo, meta: Mapping[str, Any],
                    ks: Iterable[int]) -> list[dict[str, Any]]:
    """What ``predictor.install(top_k=k)`` keeps and reaches on these rows, per k: its plain top k, then its
    defaults (the calibrated margin from ``meta``, a favoured aten alone on GEMMs under ATEN_ALONE_BELOW_US)."""
    from .policy import ATEN_ALONE_BELOW_US

    scores = np.asarray(model.score(rows, device), dtype=float)
    margin = (meta.get("pruning") or {}).get("margin")
    out = []
    for k in ks:
        for rule, kwargs in (("top k + aten", {"margin": None}),
                             ("+ margin", {"margin": margin}),
                             ("+ margin + aten alone (hook default)",
                              {"margin": margin, "aten_alone_below_us": ATEN_ALONE_BELOW_US, "device": device})):
            s = pruning_rule_summary(rows, scores, k, **kwargs)
            out.append({"k": int(k), "rule": rule, **{key: s[key] for key in ("oracle", "p5", "kept_mean", "single")}})
    return out


def run_evaluation(model_dir: str | Path, dataset: str | Path, out_dir: str | Path, space: str = "default",
                   ks: Iterable[int] = KS, split: str = "test", compare_models: Sequence[str | Path] = (),
                   command: str | None = None) -> dict[str, Any]:
    """Evaluate a trained model, the baselines and ``compare_models`` on the held-out split; write the report.

    ``compare_models`` entries are model folders (loaded like the main model) or registry ranker
    names (fitted on the training side of the same split). The split is the model's own:
    ``split_by_group(rows, test_fraction, split_seed)`` from its metadata (defaults 0.25 and 0), or exactly the
    ``split.test_groups`` its metadata records.
    Returns the ``metrics.json`` document.
    """
    ks = _check_ks(ks)
    if split not in ("test", "all"):
        raise EvaluationError(f"unknown split {split!r}; expected 'test' or 'all'")
    out = check_output_folder(out_dir, REPORT)  # before the work; held so a second run into it fails at once
    with claim_output(out):
        return _run_evaluation(model_dir, dataset, out, space, ks, split, compare_models, command)


def _run_evaluation(model_dir: str | Path, dataset: str | Path, out_dir: Path, space: str, ks: tuple[int, ...],
                    split: str, compare_models: Sequence[str | Path], command: str | None) -> dict[str, Any]:
    from .schema import DatasetError, file_sha256, read_dataset
    from .split import in_groups, recorded_test_groups, split_by_group

    try:
        from .artifacts import load_model
    except ImportError as exc:
        raise EvaluationError(f"cannot load models: predictor.artifacts is unavailable ({exc})") from None

    model_dir = Path(model_dir)
    model, meta = load_model(model_dir)
    model_space = meta.get("space", space)
    if model_space != space:
        raise EvaluationError(f"model {model_dir} was trained for space {model_space!r}, not the requested {space!r}")
    try:
        rows = read_dataset(dataset)
    except DatasetError as exc:
        raise EvaluationError(str(exc)) from None
    data_meta = dict(rows.attrs.get("metadata", {}))
    rows = _select_space(rows, space, str(dataset))
    if not (rows["status"] == "ok").any():
        raise EvaluationError(f"{dataset}: no rows with status ok")

    seed = int(meta.get("split_seed", 0))
    test_fraction = float(meta.get("test_fraction", 0.25))
    held_out = recorded_test_groups(meta)
    if split == "test" and held_out:
        # exactly the groups the model was held out from: a re-split of a different dataset (the exhaustive file
        # of a model trained on default + exhaustive rows, or a grown dataset) would move groups across sides
        is_test = in_groups(rows, held_out)
        train, test = rows[~is_test], rows[is_test]
    elif split == "test":
        try:
            train, test = split_by_group(rows, test_fraction=test_fraction, seed=seed)
        except ValueError as exc:
            raise EvaluationError(f"{dataset}: cannot split ({exc})") from None
    else:
        train, test = rows, rows
    if test.empty or not (test["status"] == "ok").any():
        raise EvaluationError(f"{dataset}: the {split} split (seed {seed}, test fraction {test_fraction}) has no ok rows")

    try:
        device = DeviceInfo.from_metadata(meta if isinstance(meta.get("device"), dict) else data_meta)
    except ValueError as exc:
        raise EvaluationError(f"{model_dir} / {dataset}: no usable device description in the metadata ({exc})") from None
    notes: list[str] = []
    data_gpu = data_meta.get("gpu")
    if data_gpu and data_gpu != device.gpu:
        notes.append(f"the model was made for {device.gpu} but the dataset was measured on {data_gpu}.")
        logger.warning("model made for %s, dataset measured on %s", device.gpu, data_gpu)

    main = str(meta.get("name") or model_dir.name)
    rankers: dict[str, Any] = {main: model}
    skipped: list[str] = []
    for entry in compare_models:
        path = Path(entry)
        if path.is_dir():
            other, other_meta = load_model(path)
            if other_meta.get("space", space) != space:
                raise EvaluationError(f"model {path} was trained for space {other_meta.get('space')!r}, not {space!r}")
            rankers[str(other_meta.get("name") or path.name)] = other
        else:
            try:
                rankers[str(entry)] = _make_baseline(str(entry)).fit(train, device)
            except (ImportError, ValueError, KeyError) as exc:
                raise EvaluationError(f"unknown model or ranker {entry!r} ({exc})") from None
    for name in BASELINES:
        if name in rankers:
            continue
        try:
            rankers[name] = _make_baseline(name).fit(train, device)
        except Exception as exc:  # a missing baseline must not hide the model's numbers; the report says so
            skipped.append(f"`{name}` ({type(exc).__name__}: {str(exc)[:160]})")
            logger.warning("baseline %s skipped: %s", name, exc)

    n_all = test["problem_id"].nunique()
    result = evaluate(test, rankers, device, ks)
    context = {
        "gpu": data_meta.get("gpu", device.gpu), "cc": data_meta.get("cc", device.cc),
        "torch": data_meta.get("torch"), "triton": data_meta.get("triton"),
        "dataset": str(dataset), "dataset_sha256": file_sha256(dataset),
        "model_dir": str(model_dir), "model_name": main, "model_gpu": device.gpu,
        "model_dataset_sha256": meta.get("dataset_sha256"),
        "space": space, "split": split, "split_seed": seed, "test_fraction": test_fraction,
        "ks": list(ks), "main": main, "rankers": list(rankers),
        "n_problems": int(len(result.problems)), "n_rows": int(len(test)), "n_dropped": int(n_all - len(result.problems)),
        "command": command or shlex.join(sys.argv), "skipped": skipped, "notes": notes,
    }
    context["hook_rule"] = hook_rule_table(test, model, device, meta, ks)
    if meta.get("dataset_sha256") and meta.get("dataset_sha256") == context["dataset_sha256"] and split == "all":
        notes.append("this is the model's training dataset and split=all: numbers include training problems.")
    return write_report(result, out_dir, context)


# --------------------------------------------------------------------------- compare


def load_metrics(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A metrics document from a dict, a ``metrics.json`` path, or a report folder holding one."""
    where = "metrics"
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        path = where = Path(source)
        if path.is_dir():
            path = path / "metrics.json"
        if not path.exists():
            raise EvaluationError(f"{path}: no such metrics file")
        try:
            doc = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EvaluationError(f"{path}: not a metrics.json document ({exc})") from None
        where = path
    rows = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"ranker", "k", "slice_kind", "slice"} <= set(r)
                                             for r in rows):
        raise EvaluationError(f"{where}: not a metrics document (no 'metrics' list of ranker/k/slice rows)")
    doc.setdefault("context", {})
    if not isinstance(doc["context"], dict):
        raise EvaluationError(f"{where}: not a metrics document ('context' is not an object)")
    return doc


def compare(a: str | Path | Mapping[str, Any], b: str | Path | Mapping[str, Any], labels: Sequence[str] = ("A", "B"),
            ks: Sequence[int] = (1, 5), slice_kind: str = "all") -> tuple[pd.DataFrame, str]:
    """Two evaluations side by side (two models, or one model on two datasets).

    Each run's main model is shown as ``model`` so two models line up in one row; baselines line
    up by name. Returns the full joined table (every metric, k and slice, ``<metric>_<label>`` and
    ``<metric>_delta`` = B - A) and a markdown summary for ``slice_kind`` and ``ks``.
    """
    if len(labels) != 2 or labels[0] == labels[1]:
        raise EvaluationError(f"compare needs two distinct labels, got {list(labels)}")
    docs = [load_metrics(a), load_metrics(b)]
    frames = []
    for doc, label in zip(docs, labels):
        frame = pd.DataFrame(doc["metrics"])
        main = doc["context"].get("main")
        if main is not None:
            frame["ranker"] = frame["ranker"].where(frame["ranker"] != main, "model")
        frames.append(frame.set_index(["ranker", "k", "slice_kind", "slice"]))
    value_cols = [c for c in ("oracle", "p5", "hit", "n") if c in frames[0].columns and c in frames[1].columns]
    joined = frames[0][value_cols].add_suffix(f"_{labels[0]}").join(frames[1][value_cols].add_suffix(f"_{labels[1]}"), how="outer")
    for c in ("oracle", "p5", "hit"):
        if c in value_cols:
            joined[f"{c}_delta"] = joined[f"{c}_{labels[1]}"] - joined[f"{c}_{labels[0]}"]
    joined = joined.reset_index()
    order = list(dict.fromkeys(["model"] + [r for f in frames for r in f.index.get_level_values(0)]))
    joined["_r"] = joined["ranker"].map({r: i for i, r in enumerate(order)})
    joined = joined.sort_values(["_r", "k", "slice_kind", "slice"], kind="stable").drop(columns="_r").reset_index(drop=True)

    md = [f"## Comparison: {labels[0]} vs {labels[1]}", ""]
    facts = []
    for key in ("model_name", "dataset", "dataset_sha256", "gpu", "torch", "split", "n_problems"):
        va, vb = (d["context"].get(key, "n/a") for d in docs)
        facts.append([key, f"`{va}`", f"`{vb}`", "" if va == vb else "differs"])
    md += [markdown_table(["", labels[0], labels[1], ""], facts), ""]
    sel = joined[(joined.slice_kind == slice_kind) & joined.k.isin(list(ks))]
    header = ["ranker"] + [f"{m}@{k}" for k in ks for m in ("oracle", "hit")]
    body = []
    for r in dict.fromkeys(sel.ranker):
        cells = []
        for k in ks:
            row = sel[(sel.ranker == r) & (sel.k == k)]
            for m in ("oracle", "hit"):
                va, vb = (row[f"{m}_{lab}"].iloc[0] if len(row) else np.nan for lab in labels)
                delta = row[f"{m}_delta"].iloc[0] if len(row) else np.nan
                cells.append(f"{_fmt(va)} → {_fmt(vb)}" + (f" ({delta:+.3f})" if np.isfinite(delta) else ""))
        body.append([f"`{r}`"] + cells)
    md += [f"Slice: {slice_kind}; cells are {labels[0]} → {labels[1]} (difference). Each run's own model is listed as `model`.",
           "", markdown_table(header, body), ""]
    return joined, "\n".join(md)
