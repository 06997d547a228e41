"""GEMV block labels -> the runtime's block table, and its held-out oracle@1 beside the baselines.

    gemm-predictor gemv-fit datasets/nvidia-h100/gemv_blocks.parquet --out models/gemv-blocks/nvidia-h100.json

The table (``predictor.runtime.lowerings.gemv_blocks``) holds each labelled problem's block-config times; at compile time a
GEMV kernel takes the config that did best on the nearest labelled problems (same number of fused GEMVs, an
activation ahead or not, nearest number of vector loads -- the work fused ahead --, log2 distance in n and k; one
problem for a plain single GEMV, three otherwise: ``gemv_blocks.neighbours``). Which
GEMVs become reductions at all is ``gemv.runtime_rule``: every column-major GEMV where the table has labels of work
fused ahead, else the width rule. Evaluated leaving one model group
(``family_tag``) out: the table is built from the other groups and the held-out problems are scored. oracle@1 per
problem = the fastest measured candidate / the time of the chosen one, geomean over problems.

Columns: ``table (held out)``, what ``predictor.compile`` runs (``runtime_rule``, table blocks); ``table at every
width``, the reduction with table blocks for every GEMV, and the same blind to the work fused ahead (``forms
ignored``: every kernel matched as if it loaded the vector alone), choosing from the nearest problem only or from the
three nearest (what ``neighbours`` was chosen on), and the same without the partial-block term (``K tail ignored``:
``gemv_blocks.K_TAIL_EXPONENT`` 0); baselines ``cublas-only`` (plain ``torch.compile``),
``reduction-default`` (the reduction under Inductor's default blocks everywhere) and ``max-n-rule`` (the width rule
with default blocks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.artifacts.atomic import check_output_file, claim_output, write_text
from predictor.offline.gemv_eval import read_labels
from predictor.runtime.lowerings.gemv import takes_reduction, takes_reduction_by_table
from predictor.runtime.lowerings.gemv_table import K_TAIL_EXPONENT, MIN_K, GemvKernel, parse_table, ranked_configs

KIND = "gemv_block_labels"
ATEN, DEFAULT = "aten/plain", "gemv/reduction"


def problems(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: its fields, ``aten_us``, ``default_us``, the winning block ``config`` and ``times``
    (candidate -> us). Labels collected before forms were named (no ``form``/``vector_loads``) are the plain GEMV
    (``mm-x1``) and the pair (``mm-x2``), which load the vector alone; labels without ``activation_ahead`` have one
    ahead exactly in the ``silu_mul`` form (``predictor.runtime.lowerings.gemv_blocks.count_activations_ahead``)."""
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (pid, _), group in ok.groupby(["problem_id", "family_tag"], sort=False):  # one shape may serve two models
        times = dict(zip(group["candidate"], group["time_us"]))
        blocks = {c.removeprefix("gemv/"): t for c, t in times.items() if c.startswith("gemv/X")}
        if not blocks or ATEN not in times:
            continue
        first = group.iloc[0]
        form = first.get("form")
        loads, activation = first.get("vector_loads"), first.get("activation_ahead")
        rows.append({"problem_id": pid, "family_tag": first["family_tag"], "n": int(first["n"]),
                     "k": int(first["k"]), "dtype": first["dtype"], "weights": int(first["weights"]),
                     "form": form if isinstance(form, str) else {"mm-x1": "plain", "mm-x2": "pair"}[first["op"]],
                     "vector_loads": 1 if pd.isna(loads) else int(loads),
                     "activation_ahead": form == "silu_mul" if pd.isna(activation) else bool(activation),
                     "aten_us": times[ATEN], "default_us": times.get(DEFAULT, np.nan),
                     "config": min(blocks, key=blocks.get), "times": times})
    return pd.DataFrame(rows)


def table_rows(probs: pd.DataFrame) -> list[dict[str, Any]]:
    """The runtime table's rows: the problem (and the model it comes from) and its block-config times."""
    return [{"n": int(r.n), "k": int(r.k), "dtype": r.dtype, "weights": int(r.weights),
             "vector_loads": int(r.vector_loads), "activation_ahead": bool(r.activation_ahead), "form": r.form,
             "family_tag": r.family_tag,
             # the GEMV alone under cuBLAS, comparable with its block configs only where nothing is fused ahead
             **({"cublas_us": round(float(r.aten_us), 3)} if r.form == "plain" else {}),
             "times": {c.removeprefix("gemv/"): round(float(t), 3)
                       for c, t in r.times.items() if c.startswith("gemv/X")}}
            for r in probs.itertuples()]


def _chosen_time(problem: Any, table: list[dict[str, Any]], count: int | None = None,
                 every_width: bool = False, blind: bool = False, k_tail_exponent: float = K_TAIL_EXPONENT) -> float:
    """The held-out problem's time under the table's choice (``blind``: as if nothing were fused ahead of the GEMV,
    the table before forms). NaN where that choice's time was not measured on a footing comparable with the block
    configs (cuBLAS or the default blocks of a function with work fused ahead)."""
    whole = problem.form == "plain"  # only there do cuBLAS and the default time the GEMV kernel alone
    if not (every_width or takes_reduction_by_table(problem.n, problem.k, problem.dtype, "col", table)):
        return problem.aten_us if whole else np.nan
    kernel = GemvKernel(problem.n, problem.k, problem.dtype, problem.weights,
                        1 if blind else problem.vector_loads, False if blind else problem.activation_ahead)
    ranked = ranked_configs(kernel, table, count, k_tail_exponent)
    # no labelled config that fits, or one the held-out problem did not time: Inductor's default blocks
    fallback = problem.default_us if whole else np.nan
    return problem.times.get(f"gemv/{ranked[0]}", fallback) if ranked else fallback


def evaluate(probs: pd.DataFrame) -> pd.DataFrame:
    """oracle@1 per strategy (leave one model group out for the table), per form and overall. For a plain GEMV
    every candidate times the GEMV alone and the best is over all of them; with work fused ahead (or a pair)
    ``aten/plain`` and ``gemv/reduction`` time the whole function, so there the best is over the block configs and
    the baselines are not scored."""
    records = []
    for family, held in probs.groupby("family_tag"):
        table = table_rows(probs[probs["family_tag"] != family])
        for p in held.itertuples():
            whole = p.form == "plain"
            best = _best_time(p)
            width_rule = p.default_us if takes_reduction(p.n, p.k, p.dtype, "col") else p.aten_us
            records.append({"form": p.form, "short": p.k < MIN_K, "table (held out)": best / _chosen_time(p, table),
                            "table at every width": best / _chosen_time(p, table, every_width=True),
                            "forms ignored": best / _chosen_time(p, table, every_width=True, blind=True),
                            "K tail ignored": best / _chosen_time(p, table, every_width=True, k_tail_exponent=0.0),
                            "nearest only": best / _chosen_time(p, table, 1, every_width=True),
                            "pool of 3": best / _chosen_time(p, table, 3, every_width=True),
                            "cublas-only": best / p.aten_us if whole else np.nan,
                            "reduction-default": best / p.default_us if whole else np.nan,
                            "max-n-rule": best / width_rule if whole else np.nan})
    return _by_form(pd.DataFrame(records))


def _best_time(problem: Any) -> float:
    """The fastest measured candidate of a problem: every candidate for a plain GEMV, else the block configs alone
    (there ``aten/plain`` and ``gemv/reduction`` time the whole function, not the GEMV kernel)."""
    return min(t for c, t in problem.times.items() if problem.form == "plain" or c.startswith("gemv/X"))


def _by_form(scores: pd.DataFrame) -> pd.DataFrame:
    """Geomean of every strategy column of per-problem ``scores`` (columns ``form``, ``short`` and one per
    strategy) per form, per kind of K where both occur, and overall."""
    strategies = [c for c in scores.columns if c not in ("form", "short")]

    def geomean(frame: pd.DataFrame) -> pd.Series:
        return np.exp(np.log(frame[strategies]).mean())

    out = {f"{form} ({len(g)})": geomean(g) for form, g in scores.groupby("form", sort=False)}
    for short, label in ((False, "K > 1024, looped"), (True, "K <= 1024, one persistent block")):
        part = scores[scores["short"] == short]
        if len(part) and len(part) < len(scores):
            out[f"{label} ({len(part)})"] = geomean(part)
    out[f"all ({len(scores)})"] = geomean(scores)
    return pd.DataFrame(out).T


def compare(cut: pd.DataFrame, full: pd.DataFrame) -> pd.DataFrame:
    """A table fitted from ``cut`` (a calibration's share of the corpus: another collection) against one fitted
    from ``full``, both timed on ``full``'s labels: for each model group of ``full``, each table is built without
    that group (in ``cut`` too) and scores the group's problems. oracle@1 per form and overall, and their ratio
    (the cut table's speed as a share of the full one's)."""
    records = []
    for family, held in full.groupby("family_tag"):
        tables = {"cut": table_rows(cut[cut["family_tag"] != family]),
                  "full": table_rows(full[full["family_tag"] != family])}
        for p in held.itertuples():
            records.append({"form": p.form, "short": p.k < MIN_K,
                            **{name: _best_time(p) / _chosen_time(p, table) for name, table in tables.items()}})
    out = _by_form(pd.DataFrame(records))
    out["cut / full"] = out["cut"] / out["full"]
    return out


def run_compare(cut: str, full: str) -> str:
    """The report of ``compare`` for two label files of one GPU (refused when their GPUs differ)."""
    frames = {name: read_labels(path, KIND) for name, path in (("cut", cut), ("full", full))}
    gpus = {name: f.attrs["metadata"].get("gpu") for name, f in frames.items()}
    if gpus["cut"] != gpus["full"]:
        raise ValueError(f"{cut} was measured on {gpus['cut']}, {full} on {gpus['full']}: compare one GPU's labels")
    probs = {name: problems(f) for name, f in frames.items()}
    return "\n".join([f"GEMV blocks on {gpus['full']}: the table of {cut} ({len(probs['cut'])} problems) against "
                      f"the table of {full} ({len(probs['full'])}), each model held out, timed on the latter's labels",
                      "", _markdown(compare(probs["cut"], probs["full"]))])


def _markdown(scores: pd.DataFrame) -> str:
    head = ["problems", *scores.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [f"| {index} | " + " | ".join(f"{v:.3f}" for v in row) + " |" for index, row in scores.iterrows()]
    return "\n".join(lines)


def write_table(probs: pd.DataFrame, path: Path, metadata: dict[str, Any], dataset: str) -> None:
    payload = {"what": "GEMV reduction blocks per labelled problem (predictor.runtime.lowerings.gemv_blocks)",
               "dataset": dataset, **{k: metadata.get(k) for k in ("gpu", "cc", "torch", "triton")},
               "problems": table_rows(probs)}
    text = json.dumps(payload, indent=1) + "\n"
    parse_table(text.encode(), path)  # what the runtime will read, before it replaces anything
    write_text(path, text)  # a unique staged file beside it, renamed over it (predictor.artifacts.atomic)


def run(dataset: str, out: str | None) -> str:
    """The markdown report (and the table written to ``out`` when given: checked and claimed before any work)."""
    if out:
        out = check_output_file(out)
        with claim_output(out):
            return _run(dataset, out)
    return _run(dataset, None)


def _run(dataset: str, out: Path | None) -> str:
    frame = read_labels(dataset, KIND)
    probs = problems(frame)
    if probs.empty:
        raise ValueError(f"{dataset}: no problem has both cuBLAS and block-config timings")
    if out:
        write_table(probs, out, frame.attrs["metadata"], dataset)
    meta = frame.attrs["metadata"]
    lines = [f"GEMV blocks: {len(probs)} problems, {meta.get('gpu')}, torch {meta.get('torch')}",
             "", "oracle@1 (geomean; 1.0 = always the fastest measured candidate):", "",
             _markdown(evaluate(probs)), "",
             "winning configs: " + ", ".join(f"{c} x{n}" for c, n in probs["config"].value_counts().items())]
    return "\n".join(lines)
