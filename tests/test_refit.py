"""gemm-predictor refit (predictor.offline.refit) and discovery's preference for a validated local model."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import predictor
from predictor.artifacts.model_folder import load_runtime_model, read_metadata
from predictor.cli import main
from predictor.core.device import DeviceInfo
from predictor.artifacts.label_store import part_paths, shard_of, write_part
from predictor.offline.refit import RefitRefused, fold_rows, fold_stores, refit
from predictor.offline.train import train
from predictor.runtime.choices import discovery
from predictor.artifacts.schema import COLUMNS, read_dataset, write_dataset
from predictor.testing.synthetic import DEVICE as DEVICE_DICT, METADATA, synthetic_dataset

DEVICE = DeviceInfo.from_metadata({"device": DEVICE_DICT})
GPU, CC = DEVICE.gpu, DEVICE.cc


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A 'shipped' model: LambdaRank on a synthetic dataset, its held-out groups recorded, in a models root."""
    root = tmp_path_factory.mktemp("shipped")
    data = root / "default.parquet"
    write_dataset(synthetic_dataset(120, seed=1, groups=8), data, METADATA)
    train(data, "lgbm_rank", root / "models" / "syn-lgbm-all", params={"n_estimators": 60, "num_leaves": 15},
          progress=False, refit_all=True)
    return root / "models" / "syn-lgbm-all"


def store_rows(seed: int, misleading: bool = False, problems: int = 40):
    rows = synthetic_dataset(problems, seed=seed, groups=4)
    rows = rows[rows["status"] == "ok"].copy()
    if misleading:  # the slowest candidate of each problem labelled the fastest, and so on
        best = rows.groupby("problem_id")["time_us"].transform("min")
        worst = rows.groupby("problem_id")["time_us"].transform("max")
        rows["time_us"] = best + worst - rows["time_us"]
    rows["collector"] = "inductor-feedback"
    rows["family_tag"] = "feedback"
    rows["reps"] = 1
    rows["time_us_iqr"] = np.nan
    return rows


def write_store(folder: Path, rows, gpu: str = GPU, cc: str = CC, parts: int = 3) -> None:
    ids = sorted(rows["problem_id"].unique())
    for i in range(parts):
        chunk = rows[rows["problem_id"].isin(ids[i::parts])]
        columns = {c: pa.array(chunk[c].tolist(), type={"string": pa.string(), "int64": pa.int64(),
                                                         "float64": pa.float64()}[t]) for c, t in COLUMNS.items()}
        write_part(folder, columns, {"gpu": gpu, "cc": cc, "torch": "2.13.0", "triton": "3.6.0",
                                     "device": DEVICE_DICT})


def test_fold_takes_the_median_drops_cache_replays_and_weights_shard_counts():
    rows = store_rows(3, problems=2)
    one = rows[rows["candidate"] == "aten/mm"].iloc[:1]
    again = one.assign(time_us=one["time_us"] * 2)
    replay = one.copy()  # the same floats: a replay of Inductor's autotune cache
    folded = fold_rows(__import__("pandas").concat([one, again, again.assign(time_us=again["time_us"] * 1.5), replay]))
    assert len(folded) == 1 and folded.iloc[0]["reps"] == 3
    assert folded.iloc[0]["time_us"] == pytest.approx(float(one["time_us"].iloc[0]) * 2)
    # folds of folds: a median from 5 observations outweighs one from 1
    heavy = one.assign(reps=5)
    light = one.assign(reps=1, time_us=one["time_us"] * 3)
    refolded = fold_rows(__import__("pandas").concat([heavy, light]))
    assert refolded.iloc[0]["time_us"] == pytest.approx(float(one["time_us"].iloc[0]))
    assert refolded.iloc[0]["reps"] == 6


def test_refit_learns_the_store_and_is_validated(base, tmp_path, monkeypatch):
    store = tmp_path / "store"
    write_store(store, store_rows(7))
    monkeypatch.setenv(discovery.LOCAL_MODELS_ENV, str(tmp_path / "local"))
    meta = refit([store], base_model=base)
    section = meta["refit"]
    v = section["validation"]
    assert v["refit_oracle@1"] >= v["base_oracle@1"] - 0.005 and section["validated"] is True
    assert v["store_oracle@1_refit"] >= v["store_oracle@1_base"]
    assert section["base_model_sha256"] == read_metadata(base)["model_sha256"]
    assert [p["sha256"] for p in section["parts"]] and len(section["parts"]) == 3
    assert section["seconds"] < 60
    folder = tmp_path / "local" / "syn-lgbm-all-local"
    ranker, loaded = load_runtime_model(folder, expect_device=DEVICE)  # checksum, metadata, card
    assert (folder / "MODEL_CARD.md").is_file() and loaded["refit"]["refit_from"] == str(base)


def test_a_misleading_store_is_refused_naming_both_figures(base, tmp_path, monkeypatch):
    store = tmp_path / "store"
    write_store(store, store_rows(7, misleading=True, problems=80))
    monkeypatch.setenv(discovery.LOCAL_MODELS_ENV, str(tmp_path / "local"))
    with pytest.raises(RefitRefused, match=r"held-out oracle@1 0\.\d{4} against the base model syn-lgbm-all's "
                                            r"0\.\d{4}") as caught:
        refit([store], base_model=base, weight=50.0)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "local").exists()  # nothing written


def test_parts_of_another_gpu_are_not_folded(base, tmp_path):
    store = tmp_path / "store"
    write_store(store, store_rows(7), parts=2)
    write_store(store, store_rows(8), gpu="Other GPU", cc="8.0", parts=1)
    rows, summary = fold_stores([store], gpu=GPU, cc=CC)
    assert len(summary["parts"]) == 2 and len(summary["skipped"]) == 1
    assert set(rows["gpu"]) == {GPU}


def test_a_fleet_folds_shards_then_merges_them_into_the_same_rows(tmp_path, capsys):
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    write_store(a, store_rows(7), parts=4)
    write_store(b, store_rows(8), parts=4)
    shared = tmp_path / "shared"  # the fleet's shared folder: every machine's parts
    shared.mkdir()
    for part in [*part_paths(a), *part_paths(b)]:
        for f in (part, part.with_name(part.name + ".sha256")):
            (shared / f.name).write_bytes(f.read_bytes())
    shards = 3
    outs = []
    for i in range(shards):
        out = tmp_path / f"fold-{i}.parquet"
        assert main(["refit", "--store", str(shared), "--shard", f"{i}/{shards}", "--fold-out", str(out)]) == 0
        assert out.exists() == any(shard_of(p.name, shards) == i for p in part_paths(shared))  # empty: no file
        if out.exists():
            outs.append(out)
    assert main(["refit", *sum((["--folded", str(o)] for o in outs), []), "--fold-out",
                 str(tmp_path / "fleet.parquet")]) == 0
    assert main(["refit", "--store", str(a), "--store", str(b), "--fold-out", str(tmp_path / "direct.parquet")]) == 0
    fleet, direct = read_dataset(tmp_path / "fleet.parquet"), read_dataset(tmp_path / "direct.parquet")
    key = ["problem_id", "candidate"]
    assert fleet.sort_values(key)[[*key, "time_us"]].reset_index(drop=True).equals(
        direct.sort_values(key)[[*key, "time_us"]].reset_index(drop=True))
    assert len(fleet.attrs["metadata"]["label_parts"]) == 8
    assert main(["refit", "--store", str(a), "--shard", "0/2"]) == 2  # a shard without --fold-out: refused


# ------------------------------------------------------------------------------------------- discovery

@pytest.fixture()
def local_model(base, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(discovery.MODELS_ENV, str(base.parent))
    monkeypatch.setenv(discovery.LOCAL_MODELS_ENV, str(tmp_path / "local"))
    write_store(tmp_path / "store", store_rows(7))
    refit([tmp_path / "store"], base_model=base)
    return tmp_path / "local" / "syn-lgbm-all-local"


def _edit(folder: Path, **refit_changes) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["refit"].update(refit_changes)
    (folder / "metadata.json").write_text(json.dumps(meta))


def test_discovery_prefers_a_validated_local_model_for_this_gpu(base, local_model, caplog):
    assert discovery.find_model(DEVICE) == local_model
    assert discovery.find_model(DEVICE, roots=[base.parent]) == base  # explicit roots: as before
    # a GPU of the same architecture takes the shipped model it is allowed, never this GPU's local one
    sibling = replace(DEVICE, gpu="Sibling GPU")
    assert discovery.find_model(sibling, allow_similar=True) == base
    with caplog.at_level(logging.INFO):
        with predictor.pruning(_device=DEVICE) as pruner:
            assert pruner.model_path == local_model and pruner.disabled is None
            assert predictor.stats()["model"] == str(local_model)
    assert any("GEMM choices" in r.getMessage() and str(local_model) in r.getMessage() for r in caplog.records)


def test_an_unvalidated_or_stale_local_model_is_not_taken(base, local_model):
    _edit(local_model, validated=False)
    assert discovery.find_model(DEVICE) == base
    _edit(local_model, validated=True, base_model_sha256="0" * 64)  # refit from a model that no longer ships
    assert discovery.find_model(DEVICE) == base
    _edit(local_model, base_model_sha256=read_metadata(base)["model_sha256"])
    assert discovery.find_model(DEVICE) == local_model


def test_a_local_model_for_another_gpu_is_never_taken(base, local_model):
    meta = json.loads((local_model / "metadata.json").read_text())
    meta["device"]["gpu"] = "Other GPU"
    (local_model / "metadata.json").write_text(json.dumps(meta))
    assert discovery.find_model(DEVICE) == base
    assert discovery.find_model(replace(DEVICE, gpu="Other GPU")) == local_model  # where it was made: taken
