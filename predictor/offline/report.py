"""The evaluation report: ``metrics.json``, ``report.md`` with its tables and plots, and ``compare`` of two reports."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..artifacts.atomic import REPORT, check_output_folder, staged_folder

from ..artifacts.reading import DOCUMENT_BYTES, InputError, read_json
from .metrics import FAILED_FLOOR, HEADLINE, METRIC_COLUMNS, SIZE_BANDS, EvaluationError, EvaluationResult
from .plots import plot_family_confusion, plot_fraction_vs_size, plot_oracle_curves

logger = logging.getLogger(__name__)


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
    beside ``out_dir`` and swapped in (``predictor.artifacts.atomic``): an interrupted run never mixes new and old files.
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
        if not os.path.lexists(path):
            raise EvaluationError(f"{path}: no such metrics file")
        try:  # a regular file under the cap (a FIFO would wait forever), parsed as JSON
            doc = read_json(path, DOCUMENT_BYTES, "metrics.json document")
        except InputError as exc:
            raise EvaluationError(str(exc)) from None
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
