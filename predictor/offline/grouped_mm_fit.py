"""Grouped-GEMM labels -> one Triton config per band of routed rows per expert, and its held-out oracle@1.

    gemm-predictor grouped-fit datasets/nvidia-h100/grouped_mm.parquet

Per band of routed rows per expert, rounded down (``EDGES``: 0, i.e. fewer routed rows than experts; 1-16;
17-160; above), the config with the best geomean of ``best time / its time`` over the band's problems. A config
Inductor does not offer for a problem (its own pruning by rows per expert) counts at aten's speed there, as the
runtime then lowers as plain. Evaluated leaving one MoE decoder (``family_tag``) out: the band's config is chosen
on the other decoders and scored on the held-out one. Printed beside aten alone (plain ``torch.compile``) and the
shipped table of the labels' GPU (``models/grouped-mm/<gpu>.json``), where there is one.

    gemm-predictor grouped-fit LABELS --out models/grouped-mm/<gpu>.json [--decode-config 16,64,256,4,4]
                               [--max-decode-experts 64]

writes the runtime's table (``predictor.runtime.lowerings.grouped_mm``): the fitted config of every band, the decode
band's replaced by ``--decode-config`` where whole decode steps chose another. The H100's shipped decode band is not
this fit's: there the labels time a few experts' weights that stay in L2 across Inductor's repeated runs, and in
whole decode steps the fitted config lost to the one shipped (docs/DESIGN.md; finding 67); its many-experts bound
came from whole steps too (finding 78). A GPU calibrated without whole steps takes the fit's decode band and no bound.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.artifacts.atomic import check_output_file, write_text
from predictor.artifacts.roots import shipped_roots, table_path
from predictor.offline.gemv_eval import read_labels
from predictor.runtime.lowerings.grouped_mm import TABLE_FOLDER, GroupedRule, parse_table, read_table

KIND = "grouped_mm_labels"
EDGES = (0, 16, 160)  # largest routed rows per expert (rounded down) of each band but the last
ATEN = "aten"


def _config_key(row: pd.Series) -> str:
    if row["family"] == ATEN:
        return ATEN
    return ",".join(str(int(row[f])) for f in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps"))


def speeds(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(problem x config speed table: best time / the config's time, aten's speed where a config is not offered;
    one row per problem: ``family_tag``, ``b``, ``n``, ``k``, ``rows`` (A's rows), ``rows_per_expert`` (0: fewer
    routed rows than experts))."""
    ok = frame[frame["status"] == "ok"].copy()
    active = ok["active"] if "active" in ok else pd.Series(np.nan, index=ok.index)
    ok["rows"] = np.where(active.notna(), active, ok["b"] * ok["m"])
    ok["rows_per_expert"] = ok["rows"] // ok["b"]  # rounded down, as the runtime and Inductor's pruning count them
    ok["config"] = ok.apply(_config_key, axis=1)
    ok["speed"] = ok.groupby("problem_id")["time_us"].transform("min") / ok["time_us"]
    table = ok.pivot_table(index="problem_id", columns="config", values="speed", aggfunc="max")
    table = table.apply(lambda column: column.fillna(table[ATEN]))
    meta = ok.groupby("problem_id")[["family_tag", "b", "n", "k", "rows", "rows_per_expert"]].first()
    return table, meta


def band_name(band: int) -> str:
    if band == 0:
        return "0 (decode)"
    return f"{EDGES[band - 1] + 1}-{EDGES[band]}" if band < len(EDGES) else f"above {EDGES[-1]}"


def band_of(rows_per_expert: pd.Series) -> np.ndarray:
    return np.searchsorted(np.asarray(EDGES), rows_per_expert.to_numpy(), side="left")


def best_config(table: pd.DataFrame, problems: pd.Index) -> str:
    """The config with the best geomean speed over ``problems`` (first in column order on a tie)."""
    return str(np.log(table.loc[problems]).mean().idxmax())


def fit(table: pd.DataFrame, meta: pd.DataFrame) -> dict[int, str]:
    """Band -> its config, fit on every problem."""
    bands = pd.Series(band_of(meta["rows_per_expert"]), index=meta.index)
    return {int(b): best_config(table, members.index) for b, members in bands.groupby(bands)}


def per_problem(table: pd.DataFrame, meta: pd.DataFrame, shipped_rule: GroupedRule | None = None) -> pd.DataFrame:
    """One row per problem: its band, the speed of the band's config fit without its decoder (``held out``) and
    on every problem (``in sample``), of the shipped table's config (``shipped``, aten without one) and of aten."""
    bands = pd.Series(band_of(meta["rows_per_expert"]), index=meta.index)
    fitted = fit(table, meta)
    rows = []
    for pid, band in bands.items():
        members = bands.index[bands == band]
        others = members[meta.loc[members, "family_tag"] != meta.at[pid, "family_tag"]]
        held = best_config(table, others) if len(others) else ATEN
        rows_per_expert = int(meta.at[pid, "rows_per_expert"])
        shipped = _shipped_key(None if shipped_rule is None else shipped_rule.config_for(rows_per_expert))
        rows.append({"problem_id": pid, "band": int(band), "held out": _speed(table, pid, held),
                     "in sample": _speed(table, pid, fitted[int(band)]), "shipped": _speed(table, pid, shipped),
                     "aten": _speed(table, pid, ATEN)})
    return pd.DataFrame(rows)


def evaluate(table: pd.DataFrame, meta: pd.DataFrame, shipped_rule: GroupedRule | None = None) -> pd.DataFrame:
    """Per band and over all: problems, the fitted config and the geomean speeds of ``per_problem``."""
    scores = per_problem(table, meta, shipped_rule)
    fitted = fit(table, meta)
    columns = ["held out", "in sample", "shipped", "aten"]
    out = np.exp(np.log(scores.set_index("band")[columns]).groupby(level=0).mean())
    out.insert(0, "fitted config", [fitted[b] for b in out.index])
    out.insert(0, "problems", scores.groupby("band").size())
    out.index = [band_name(b) for b in out.index]
    total = np.exp(np.log(scores[columns]).mean())
    out.loc["all"] = [len(scores), "", *total]
    out.index.name = "rows per expert"
    return out


def _shipped_key(config: tuple[int, ...] | None) -> str:
    return ATEN if config is None else ",".join(map(str, config))


def _speed(table: pd.DataFrame, pid: str, config: str) -> float:
    return float(table.at[pid, config]) if config in table.columns else float(table.at[pid, ATEN])


def shipped_rule_for(gpu: str | None) -> GroupedRule | None:
    """The shipped table of the labels' GPU (its own, never a sibling's), or None."""
    path = table_path(gpu or "", shipped_roots(), folder=TABLE_FOLDER)
    return None if path is None else read_table(path)


def table_document(fitted: dict[int, str], metadata: dict[str, Any], dataset: str, decode_config: str | None = None,
                   max_decode_experts: int | None = None) -> dict[str, Any]:
    """The runtime's table: each band's fitted config (the decode band's ``decode_config`` where given)."""
    if decode_config is not None:
        fitted = {**fitted, 0: decode_config}
    missing = [band_name(b) for b in range(len(EDGES) + 1) if b not in fitted]
    if missing:
        raise ValueError(f"{dataset}: no labels in the band(s) {', '.join(missing)}; every band needs a config")
    bands = []
    for band in range(len(EDGES) + 1):
        key = fitted[band]
        config = None if key == ATEN else [int(v) for v in key.split(",")]
        if config is None:
            raise ValueError(f"{dataset}: aten wins the band {band_name(band)}; the table holds Triton configs only")
        bands.append({"up_to_rows_per_expert": EDGES[band] if band < len(EDGES) else None, "config": config})
    return {"what": "one Triton config per band of routed rows per expert (predictor.runtime.lowerings.grouped_mm)",
            "dataset": dataset, **{k: metadata.get(k) for k in ("gpu", "cc", "torch", "triton")},
            "decode_band": "whole decode steps" if decode_config is not None else "fitted on the labels",
            "bands": bands, "max_decode_experts": max_decode_experts}


def write_table(document: dict[str, Any], out: Path) -> None:
    text = json.dumps(document, indent=1) + "\n"
    parse_table(text.encode(), out)  # what the runtime will read, before anything is replaced
    write_text(out, text)


def run(dataset: str, out: str | None = None, decode_config: str | None = None,
        max_decode_experts: int | None = None) -> str:
    """The report ``gemm-predictor grouped-fit`` prints (and the runtime's table written to ``out`` when given)."""
    if decode_config is not None and not re.fullmatch(r"\d+(,\d+){4}", decode_config):
        raise ValueError(f"--decode-config {decode_config!r}: expected BLOCK_M,BLOCK_N,BLOCK_K,num_stages,num_warps")
    if out:
        out = check_output_file(out)
    frame = read_labels(dataset, KIND)
    table, meta = speeds(frame)
    result = evaluate(table, meta, shipped_rule_for(frame.attrs["metadata"].get("gpu")))
    report = (f"{dataset}: {len(meta)} problems of {meta['family_tag'].nunique()} MoE decoders; geomean of the best "
              f"config's time / the chosen one's\n" + result.to_string(float_format=lambda v: f"{v:.3f}"))
    if out:
        write_table(table_document(fit(table, meta), frame.attrs["metadata"], dataset, decode_config,
                                   max_decode_experts), Path(out))
        report += f"\nwrote {out}"
    return report
