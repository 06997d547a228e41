"""GEMV block labels -> the runtime's block table, and its held-out oracle@1 beside the baselines.

    gemm-predictor gemv-fit datasets/nvidia-h100/gemv_blocks.parquet --out models/gemv-blocks/nvidia-h100.json

The table (``predictor.runtime.gemv_blocks``) holds each labelled problem's block-config times; at compile time a
GEMV kernel takes the config that did best on the nearest labelled problems (same number of fused GEMVs, log2
distance in n and k; one problem for a single GEMV, three for a fused pair: ``gemv_blocks.NEIGHBOURS``). Which
GEMVs become reductions at all is the width rule (``gemv.takes_reduction``). Evaluated leaving one model group
(``family_tag``) out: the table is built from the other groups and the held-out problems are scored. oracle@1 per
problem = the fastest measured candidate / the time of the chosen one, geomean over problems.

Columns: ``table (held out)``, what ``predictor.compile`` runs (the width rule, table blocks); ``table at every
width``, the reduction with table blocks for every GEMV, and the same choosing from the nearest problem only or
from the three nearest (what ``NEIGHBOURS`` was chosen on); baselines ``cublas-only`` (plain ``torch.compile``),
``reduction-default`` (the reduction under Inductor's default blocks everywhere) and ``max-n-rule`` (the width rule
with default blocks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.offline.gemv_eval import read_labels
from predictor.runtime.gemv import takes_reduction
from predictor.runtime.gemv_blocks import GemvKernel, ranked_configs

KIND = "gemv_block_labels"
ATEN, DEFAULT = "aten/plain", "gemv/reduction"


def problems(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: its fields, ``aten_us``, ``default_us``, the winning block ``config`` and ``times``
    (candidate -> us)."""
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (pid, _), group in ok.groupby(["problem_id", "family_tag"], sort=False):  # one shape may serve two models
        times = dict(zip(group["candidate"], group["time_us"]))
        blocks = {c.removeprefix("gemv/"): t for c, t in times.items() if c.startswith("gemv/X")}
        if not blocks or ATEN not in times:
            continue
        first = group.iloc[0]
        rows.append({"problem_id": pid, "family_tag": first["family_tag"], "n": int(first["n"]),
                     "k": int(first["k"]), "dtype": first["dtype"], "weights": int(first["weights"]),
                     "aten_us": times[ATEN], "default_us": times.get(DEFAULT, np.nan),
                     "config": min(blocks, key=blocks.get), "times": times})
    return pd.DataFrame(rows)


def table_rows(probs: pd.DataFrame) -> list[dict[str, Any]]:
    """The runtime table's rows: the problem (and the model it comes from) and its block-config times."""
    return [{"n": int(r.n), "k": int(r.k), "dtype": r.dtype, "weights": int(r.weights), "family_tag": r.family_tag,
             "times": {c.removeprefix("gemv/"): round(float(t), 3)
                       for c, t in r.times.items() if c.startswith("gemv/X")}}
            for r in probs.itertuples()]


def _chosen_time(problem: Any, table: list[dict[str, Any]], count: int | None = None,
                 every_width: bool = False) -> float:
    if not every_width and not takes_reduction(problem.n, problem.k, problem.dtype, "col"):
        return problem.aten_us
    ranked = ranked_configs(GemvKernel(problem.n, problem.k, problem.dtype, problem.weights), table, count)
    # no labelled config that fits, or one the held-out problem did not time: Inductor's default blocks
    return problem.times.get(f"gemv/{ranked[0]}", problem.default_us) if ranked else problem.default_us


def evaluate(probs: pd.DataFrame) -> pd.DataFrame:
    """oracle@1 per strategy (leave one model group out for the table), per weights count and overall."""
    records = []
    for family, held in probs.groupby("family_tag"):
        table = table_rows(probs[probs["family_tag"] != family])
        for p in held.itertuples():
            best = min(p.times.values())
            width_rule = p.default_us if takes_reduction(p.n, p.k, p.dtype, "col") else p.aten_us
            records.append({"weights": p.weights, "table (held out)": best / _chosen_time(p, table),
                            "table at every width": best / _chosen_time(p, table, every_width=True),
                            "nearest only": best / _chosen_time(p, table, 1, every_width=True),
                            "pool of 3": best / _chosen_time(p, table, 3, every_width=True),
                            "cublas-only": best / p.aten_us, "reduction-default": best / p.default_us,
                            "max-n-rule": best / width_rule})
    scores = pd.DataFrame(records)
    strategies = [c for c in scores.columns if c != "weights"]

    def geomean(frame: pd.DataFrame) -> pd.Series:
        return np.exp(np.log(frame[strategies]).mean())

    out = {f"{w} GEMV{'s fused' if w > 1 else ''} ({len(g)})": geomean(g) for w, g in scores.groupby("weights")}
    out[f"all ({len(scores)})"] = geomean(scores)
    return pd.DataFrame(out).T


def _markdown(scores: pd.DataFrame) -> str:
    head = ["problems", *scores.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [f"| {index} | " + " | ".join(f"{v:.3f}" for v in row) + " |" for index, row in scores.iterrows()]
    return "\n".join(lines)


def write_table(probs: pd.DataFrame, path: Path, metadata: dict[str, Any], dataset: str) -> None:
    payload = {"what": "GEMV reduction blocks per labelled problem (predictor.runtime.gemv_blocks)",
               "dataset": dataset, **{k: metadata.get(k) for k in ("gpu", "cc", "torch", "triton")},
               "problems": table_rows(probs)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)


def run(dataset: str, out: str | None) -> str:
    """The markdown report (and the table written to ``out`` when given)."""
    frame = read_labels(dataset, KIND)
    probs = problems(frame)
    if probs.empty:
        raise ValueError(f"{dataset}: no problem has both cuBLAS and block-config timings")
    if out:
        write_table(probs, Path(out), frame.attrs["metadata"], dataset)
    meta = frame.attrs["metadata"]
    lines = [f"GEMV blocks: {len(probs)} problems, {meta.get('gpu')}, torch {meta.get('torch')}",
             "", "oracle@1 (geomean; 1.0 = always the fastest measured candidate):", "",
             _markdown(evaluate(probs)), "",
             "winning configs: " + ", ".join(f"{c} x{n}" for c, n in probs["config"].value_counts().items())]
    return "\n".join(lines)
