"""A region model against the GPU's main model, on problems neither saw: the policy oracle of each, per decide gap.

    gemm-predictor region-eval --main models/h100-default-lgbm-all \
        --dataset datasets/nvidia-h100/default.parquet datasets/nvidia-h100/token_mixing.parquet

Each problem group of the region (``family_tag``'s model, or a random block) is held out in turn: a region model
(``lgbm_rank``, the shipped hyper-parameters) is fitted on the region's rows of every other group and decides the
held-out group's problems. The main model decides them too; it was fitted on every problem of the first dataset
(the corpus), so only the groups of the other datasets are unseen by it; the table says which groups are which.
Per problem: the best time / the time of the kernel the decide policy keeps at each gap (the policy oracle,
``metrics.decided_fraction``), and cuBLAS alone; geometric means per group kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..artifacts.model_folder import load_model
from ..core.device import DeviceInfo
from ..rankers import make_ranker
from ..core.regions import rows_in_region
from ..artifacts.schema import read_dataset
from .metrics import decided_fraction, decision_sides
from .split import groups_of
from .train import load_training_rows

GAPS = (-2.5, -1.0, 0.0, 1.0)


def decisions(ranker, device: DeviceInfo, rows: pd.DataFrame, gaps: Sequence[float] = GAPS) -> pd.DataFrame:
    """Per problem of ``rows`` (ok rows, indexed by ``problem_id``): the policy oracle at each gap (``gap g``:
    ``metrics.decided_fraction``) and cuBLAS alone (``cublas``)."""
    ok = rows[rows["status"] == "ok"]
    sides = decision_sides(ok.assign(score=np.asarray(ranker.score(ok, device), dtype=float))).set_index("problem_id")
    out = pd.DataFrame({f"gap {gap:g}": decided_fraction(sides, gap) for gap in gaps}, index=sides.index)
    aten_best = ok[ok["family"].astype(str) == "aten"].groupby("problem_id")["time_us"].min()
    return out.assign(cublas=sides["best_us"] / aten_best.reindex(sides.index))


def evaluate(main_model: str | Path, datasets: Sequence[str | Path], region: str) -> pd.DataFrame:
    """Per held-out problem: the main and the held-out region model's policy oracle at each gap (columns
    ``main gap g`` / ``region gap g``), ``cublas``, its ``group`` and whether the main model saw it (``seen``)."""
    main, meta = load_model(main_model)
    device = DeviceInfo.from_metadata(meta)
    rows, _, _ = load_training_rows([Path(d) for d in datasets])
    rows = rows[rows_in_region(region, rows)].reset_index(drop=True)
    seen_ids = set(read_dataset(datasets[0])["problem_id"])
    rows["group"] = groups_of(rows).to_numpy()
    held = []
    for group in sorted(rows["group"].unique()):
        test = rows[rows["group"] == group]
        fitted = make_ranker("lgbm_rank", seed=0).fit(rows[rows["group"] != group].drop(columns="group"), device)
        by_main = decisions(main, device, test).add_prefix("main ")
        by_region = decisions(fitted, device, test).add_prefix("region ")
        both = by_main.join(by_region.drop(columns="region cublas")).rename(columns={"main cublas": "cublas"})
        held.append(both.assign(group=group))
    out = pd.concat(held).reset_index()
    out["seen"] = out["problem_id"].isin(seen_ids)
    return out


def markdown(table: pd.DataFrame) -> str:
    """Geometric means per part: problems the main model never saw, those it was fitted on."""
    columns = [c for c in table.columns if c.startswith(("main gap", "region gap"))] + ["cublas"]
    lines = ["| problems | n | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    parts = (("unseen by the main model", table[~table["seen"]]), ("in the main model's fit", table[table["seen"]]),
             ("all", table))
    for label, part in parts:
        if part.empty:
            continue
        means = np.exp(np.log(part[columns].astype(float)).mean())
        lines.append(f"| {label} | {len(part)} | " + " | ".join(f"{means[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)
