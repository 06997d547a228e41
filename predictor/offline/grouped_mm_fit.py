"""Grouped-GEMM labels -> one Triton config per band of routed rows per expert, and its held-out oracle@1.

    gemm-predictor grouped-fit datasets/nvidia-h100/grouped_mm.parquet

Per band of routed rows per expert, rounded down (``EDGES``: 0, i.e. fewer routed rows than experts; 1-16;
17-160; above), the config with the best geomean of ``best time / its time`` over the band's problems. A config
Inductor does not offer for a problem (its own pruning by rows per expert) counts at aten's speed there, as the
runtime then lowers as plain. Evaluated leaving one MoE decoder (``family_tag``) out: the band's config is chosen
on the other decoders and scored on the held-out one. Printed beside aten alone (plain ``torch.compile``) and the
runtime's shipped bands (``predictor.runtime.lowerings.grouped_mm.BANDS``).

The runtime's decode band (below one row per expert) is not this fit's: there the labels time a few experts'
weights that stay in L2 across Inductor's repeated runs, and in whole decode steps the fitted config lost to the
one shipped (docs/DESIGN.md; finding 67).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.offline.gemv_eval import read_labels
from predictor.runtime.lowerings.grouped_mm import config_for

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


def per_problem(table: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: its band, the speed of the band's config fit without its decoder (``held out``) and
    on every problem (``in sample``), of the shipped bands' config (``shipped``) and of aten."""
    bands = pd.Series(band_of(meta["rows_per_expert"]), index=meta.index)
    fitted = fit(table, meta)
    rows = []
    for pid, band in bands.items():
        members = bands.index[bands == band]
        others = members[meta.loc[members, "family_tag"] != meta.at[pid, "family_tag"]]
        held = best_config(table, others) if len(others) else ATEN
        shipped = _shipped_key(config_for(int(meta.at[pid, "rows_per_expert"])))
        rows.append({"problem_id": pid, "band": int(band), "held out": _speed(table, pid, held),
                     "in sample": _speed(table, pid, fitted[int(band)]), "shipped": _speed(table, pid, shipped),
                     "aten": _speed(table, pid, ATEN)})
    return pd.DataFrame(rows)


def evaluate(table: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """Per band and over all: problems, the fitted config and the geomean speeds of ``per_problem``."""
    scores = per_problem(table, meta)
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


def run(dataset: str) -> str:
    """The report ``gemm-predictor grouped-fit`` prints."""
    table, meta = speeds(read_labels(dataset, KIND))
    result = evaluate(table, meta)
    return (f"{dataset}: {len(meta)} problems of {meta['family_tag'].nunique()} MoE decoders; geomean of the best "
            f"config's time / the chosen one's\n" + result.to_string(float_format=lambda v: f"{v:.3f}"))
