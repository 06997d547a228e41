"""Every shipped model still ranks exactly as it did when it was trained.

``tests/data/shipped_rankings.json`` was recorded with the loader of the time (the tree model was then a joblib
pickle) before the models were re-saved in the pickle-free format (issue 17); each model's ranking of a fixed
slice of its dataset must be unchanged. Re-record only on purpose: ``python tests/test_shipped_models.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.artifacts.model_folder import load_model
from predictor.core.device import DeviceInfo
from predictor.artifacts.schema import read_dataset

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "data" / "shipped_rankings.json"
SLICES = {"default": ("datasets/nvidia-h200/default.parquet", 150), "exhaustive": ("datasets/nvidia-h200/exhaustive.parquet", 12)}
TOP = 5


def shipped_models() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "models").glob("*/metadata.json"))


def ranking_slice(space: str) -> pd.DataFrame:
    """The first problems (by id) of the model's dataset, in file order."""
    path, n = SLICES[space]
    rows = read_dataset(ROOT / path)
    first = sorted(rows["problem_id"].unique())[:n]
    return rows[rows["problem_id"].isin(first)].reset_index(drop=True)


def rankings(folder: Path, cache: dict) -> dict:
    model, meta = load_model(folder)
    space = meta.get("space", "default")
    if space not in cache:
        cache[space] = ranking_slice(space)
    rows = cache[space]
    ranked = rows.assign(_score=model.score(rows, DeviceInfo.from_metadata(meta)), _order=np.arange(len(rows)))
    ranked = ranked.sort_values(["problem_id", "_score", "_order"], ascending=[True, False, True], kind="stable")
    order = ranked.groupby("problem_id", sort=True)["candidate"].apply(list)
    full = "\n".join(f"{pid}:{','.join(cands)}" for pid, cands in order.items())
    return {"space": space, "problems": len(order), "rows": len(rows),
            "ranking_sha256": hashlib.sha256(full.encode()).hexdigest(),
            "top": {pid: cands[:TOP] for pid, cands in order.items()}}


def record() -> None:
    cache: dict = {}
    doc = {folder.name: rankings(folder, cache) for folder in shipped_models()}
    FIXTURE.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    print(f"recorded {', '.join(doc)} to {FIXTURE}")


@pytest.fixture(scope="module")
def slices() -> dict:
    return {}


@pytest.mark.skipif(not FIXTURE.exists() or not (ROOT / "models").is_dir(), reason="no shipped models")
@pytest.mark.parametrize("name", sorted(json.loads(FIXTURE.read_text())) if FIXTURE.exists() else [])
def test_shipped_model_ranks_as_recorded(name, slices):
    recorded = json.loads(FIXTURE.read_text())[name]
    now = rankings(ROOT / "models" / name, slices)
    assert now["rows"] == recorded["rows"] and now["problems"] == recorded["problems"]
    assert now["top"] == recorded["top"]
    assert now["ranking_sha256"] == recorded["ranking_sha256"]


def test_every_shipped_model_is_recorded():
    assert sorted(p.name for p in shipped_models()) == sorted(json.loads(FIXTURE.read_text()))


if __name__ == "__main__":
    record()
    sys.exit(0)
