"""GEMV block labels -> the runtime's block table, and its held-out oracle@1 beside the baselines.

    gemm-predictor gemv-fit datasets/nvidia-h100/gemv_blocks.parquet --out models/gemv-blocks/nvidia-h100.json

The table (``predictor.runtime.gemv_blocks``) holds, per labelled problem, the block config that won and whether
the reduction with it beat cuBLAS; at compile time a GEMV takes the choice of the nearest labelled problem (same
number of fused GEMVs, log2 distance in n and k; for fused pairs the config that does best over the three nearest,
``gemv_blocks.NEIGHBOURS``). Evaluated leaving one model group (``family_tag``) out: the
table is built from the other groups and the held-out problems are scored. oracle@1 per problem = the fastest
measured candidate / the time of the chosen one, geomean over problems. Baselines: ``cublas-only`` (plain
``torch.compile``), ``reduction-default`` (the reduction form under Inductor's default blocks on every GEMV) and
``max-n-rule`` (the reduction with default blocks up to n = 6144, cuBLAS above: the rule without a table).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.offline.gemv_eval import read_labels
from predictor.runtime.gemv_blocks import GemvKernel, nearest, pooled_config

KIND = "gemv_block_labels"
ATEN, DEFAULT = "aten/plain", "gemv/reduction"
OLD_MAX_N = 6144


def problems(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: its fields, ``aten_us``, ``default_us``, the best block config and its time, and
    ``times`` (candidate -> us)."""
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (pid, _), group in ok.groupby(["problem_id", "family_tag"], sort=False):  # one shape may serve two models
        times = dict(zip(group["candidate"], group["time_us"]))
        blocks = {c.removeprefix("gemv/"): t for c, t in times.items() if c.startswith("gemv/X")}
        if not blocks or ATEN not in times:
            continue
        first = group.iloc[0]
        best = min(blocks, key=blocks.get)
        rows.append({"problem_id": pid, "family_tag": first["family_tag"], "n": int(first["n"]),
                     "k": int(first["k"]), "dtype": first["dtype"], "weights": int(first["weights"]),
                     "aten_us": times[ATEN], "default_us": times.get(DEFAULT, np.nan), "config": best,
                     "config_us": blocks[best], "times": times})
    return pd.DataFrame(rows)


def table_rows(probs: pd.DataFrame) -> list[dict[str, Any]]:
    """The runtime table's rows: problem, winning config, whether it beat cuBLAS."""
    return [{"n": int(r.n), "k": int(r.k), "dtype": r.dtype, "weights": int(r.weights), "family_tag": r.family_tag,
             "config": r.config, "config_us": round(float(r.config_us), 3), "aten_us": round(float(r.aten_us), 3),
             "reduction_wins": bool(r.config_us < r.aten_us),
             "times": {c.removeprefix("gemv/"): round(float(t), 3)
                       for c, t in r.times.items() if c.startswith("gemv/X")}}
            for r in probs.itertuples()]


def _chosen_time(problem: Any, table: list[dict[str, Any]], count: int | None) -> float:
    kernel = GemvKernel(problem.n, problem.k, problem.dtype, problem.weights)
    row = nearest(kernel, table)
    if row is None:
        return problem.default_us
    if problem.weights == 1 and not row["reduction_wins"]:
        return problem.aten_us
    name = pooled_config(kernel, table, count)
    # a config the held-out problem did not time (too big for it) falls back to Inductor's default blocks
    return problem.times.get(f"gemv/{name}", problem.default_us)


def evaluate(probs: pd.DataFrame) -> pd.DataFrame:
    """oracle@1 per strategy (leave one model group out for the table), per weights count and overall."""
    records = []
    for family, held in probs.groupby("family_tag"):
        table = table_rows(probs[probs["family_tag"] != family])
        for p in held.itertuples():
            best = min(p.times.values())
            old_rule = p.default_us if (p.weights == 2 or p.n <= OLD_MAX_N) else p.aten_us
            records.append({"weights": p.weights, "table (held out)": best / _chosen_time(p, table, None),
                            "nearest only (held out)": best / _chosen_time(p, table, 1),
                            "pool of 3 (held out)": best / _chosen_time(p, table, 3),
                            "cublas-only": best / p.aten_us, "reduction-default": best / p.default_us,
                            "max-n-rule": best / old_rule})
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
