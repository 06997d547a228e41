"""GEMV labels -> the GEMV rule's threshold and its held-out oracle@1 beside the baselines.

    gemm-predictor gemv-eval datasets/nvidia-h200/gemv.parquet

The rule (``predictor.runtime.lowerings.gemv.takes_reduction``) takes the reduction form for a one-row GEMM whose weight is
column-major (``F.linear``'s) with at most ``max_n`` outputs. ``max_n`` is fitted here: leave one model group out
(``family_tag``), fit on the rest (the largest n that minimises the geomean time of the chosen lowering), score the
held-out group. oracle@1 per problem = best time among the measured lowerings / time of the chosen one, geomean.
Baselines: ``cublas-only`` (plain torch.compile), ``reduction-always`` (Inductor's decomposition with its default
reduction heuristic on every GEMV) and ``coordinate-descent`` (the searched reduction, where it was measured).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ATEN, RED, CDT = "aten/gemv", "gemv/reduction", "gemv/reduction-cdt"
# the label files read_labels reads: collectors/gemv.py, grouped_mm.py, gemv_blocks.py, few_rows.py
KINDS = ("gemv_labels", "grouped_mm_labels", "gemv_block_labels", "few_rows_labels")


def read_labels(path: str, kind: str = "gemv_labels") -> pd.DataFrame:
    """A GEMV or grouped-GEMM label file, checksums verified; a one-line ``DatasetError`` naming the file when it is
    corrupt or of another kind."""
    from predictor.artifacts.schema import DatasetError, read_parquet

    table, meta = read_parquet(path, what=kind.replace("_", " "))
    if meta.get("kind") != kind:
        raise DatasetError(f"{path}: not {kind} (metadata kind {meta.get('kind')!r})")
    frame = table.to_pandas()
    frame.attrs["metadata"] = meta
    return frame


def wide(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: its fields and the time of each candidate (NaN where not measured or not ok)."""
    ok = frame[frame["status"] == "ok"]
    keys = ["problem_id", "family_tag", "n", "k", "dtype", "layout_b"]
    return ok.pivot_table(index=keys, columns="candidate", values="time_us").reset_index()


def chosen_time(w: pd.DataFrame, max_n: float) -> pd.Series:
    """Time of the rule's choice with threshold ``max_n``."""
    take = (w["layout_b"] == "col") & (w["n"] <= max_n)
    return w[RED].where(take, w[ATEN])


def fit_max_n(w: pd.DataFrame) -> float:
    """The threshold minimising the geomean chosen time over ``w`` (ties: the largest)."""
    candidates = sorted({0.0, *w["n"].astype(float)})
    costs = [np.log(chosen_time(w, t)).mean() for t in candidates]
    best = min(costs)
    return max(t for t, c in zip(candidates, costs) if c <= best + 1e-12)


def evaluate(frame: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """(per-method oracle@1 table over held-out groups, threshold fitted on all groups)."""
    w = wide(frame)
    best = w[[ATEN, RED]].min(axis=1)
    held = pd.Series(index=w.index, dtype=float)
    for group in w["family_tag"].unique():
        train, test = w["family_tag"] != group, w["family_tag"] == group
        held[test] = chosen_time(w[test], fit_max_n(w[train]))
    methods = {"rule (held out by model)": held, "cublas-only": w[ATEN], "reduction-always": w[RED]}
    rows = []
    for name, t in methods.items():
        frac = best / t
        rows.append({"method": name, "problems": len(w), "oracle@1": float(np.exp(np.log(frac).mean())),
                     "p5": float(frac.quantile(0.05)), "hit@1": float((frac >= 0.999).mean())})
    has_cdt = w[CDT].notna() if CDT in w else pd.Series(False, index=w.index)
    if has_cdt.any():  # on the problems where the search ran: how far the searched reduction beats both
        sub = w[has_cdt]
        best3 = sub[[ATEN, RED, CDT]].min(axis=1)
        for name, t in {"rule (held out)": held[has_cdt], "cublas-only": sub[ATEN], "coordinate-descent": sub[CDT]}.items():
            frac = best3 / t
            rows.append({"method": f"{name}, vs the searched reduction too", "problems": int(has_cdt.sum()),
                         "oracle@1": float(np.exp(np.log(frac).mean())), "p5": float(frac.quantile(0.05)),
                         "hit@1": float((frac >= 0.999).mean())})
    return pd.DataFrame(rows), fit_max_n(w)


def markdown(table: pd.DataFrame, max_n: float) -> str:
    """``evaluate``'s table as markdown, and the threshold fitted on every group."""
    lines = ["| method | problems | oracle@1 | p5 | hit@1 |", "|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['problems']} | {r['oracle@1']:.3f} | {r['p5']:.3f} | {r['hit@1']:.3f} |"
              for r in table.to_dict("records")]
    return "\n".join(lines) + f"\n\nthreshold fitted on every group: max_n = {max_n:.0f}"
