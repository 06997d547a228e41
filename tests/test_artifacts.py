"""Model folders: round trips give identical scores; corrupt, tampered, foreign and stale ones are refused."""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import replace

import numpy as np
import pytest
from predictor.testing.synthetic import METADATA, synthetic_dataset

from predictor.artifacts.model_folder import CARD_FILE, METADATA_FILE, ModelError, load_model, read_metadata, save_model
from predictor.core.device import DeviceInfo
from predictor.core.features import FEATURE_NAMES
from predictor.offline.train import train
from predictor.rankers import make_ranker
from predictor.artifacts.schema import write_dataset
from predictor.spaces import FROZEN

DEVICE = DeviceInfo.from_metadata(METADATA)


@pytest.fixture(scope="module")
def rows():
    return synthetic_dataset(60, seed=1)


@pytest.fixture(scope="module")
def models(rows, tmp_path_factory):
    """One saved folder per model format: LightGBM text (lgbm), plain JSON state (tree, random)."""
    root = tmp_path_factory.mktemp("models")
    saved = {}
    for name, params in (("lgbm", {"n_estimators": 15}), ("tree", {}), ("random", {"seed": 3})):
        ranker = make_ranker(name, **params).fit(rows, DEVICE)
        folder = save_model(ranker, root / name, {"device": DEVICE.to_dict(), "space": "default", "name": name})
        saved[name] = (ranker, folder)
    return saved


def refused(folder, match: str, **kwargs) -> str:
    with pytest.raises(ModelError, match=match) as info:
        load_model(folder, **kwargs)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def edit_metadata(folder, **changes) -> None:
    meta = json.loads((folder / METADATA_FILE).read_text())
    meta.update(changes)
    (folder / METADATA_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize("name", ["lgbm", "tree", "random"])
def test_round_trip_scores_identical(name, models, rows):
    ranker, folder = models[name]
    loaded, meta = load_model(folder, expect_device=DEVICE)
    assert type(loaded) is type(ranker) and loaded.get_params() == ranker.get_params()
    np.testing.assert_array_equal(loaded.score(rows, DEVICE), ranker.score(rows, DEVICE))
    assert meta["feature_names"] == FEATURE_NAMES and meta["ranker"]["name"] == ranker.name
    assert meta["device"]["gpu"] == DEVICE.gpu and meta["device"]["cc"] == DEVICE.cc
    assert len(meta["model_sha256"]) == 64 and meta["libraries"]["lightgbm"] and meta["schema_version"] == 1
    assert DeviceInfo.from_metadata(meta) == DEVICE
    assert DEVICE.gpu in (folder / CARD_FILE).read_text()


def test_lgbm_model_is_text(models):
    _, folder = models["lgbm"]
    text = (folder / read_metadata(folder)["model_file"]).read_text()
    assert text.startswith("tree\n") and "feature_names=log2_m log2_n" in text


@pytest.mark.parametrize("name", ["lgbm", "tree"])
def test_corrupt_model_file_refused(name, models, tmp_path):
    _, folder = models[name]
    copy = tmp_path / name
    copy.mkdir()
    for f in folder.iterdir():
        copy.joinpath(f.name).write_bytes(f.read_bytes())
    model_file = copy / read_metadata(copy)["model_file"]
    model_file.write_bytes(model_file.read_bytes()[:-40] + b"garbage")
    refused(copy, "sha256 .* does not match")
    model_file.unlink()
    refused(copy, "unreadable")


def test_tampered_sha_refused(models, tmp_path):
    folder = copy_of(models["tree"][1], tmp_path)
    edit_metadata(folder, model_sha256="0" * 64)
    refused(folder, "sha256 .* does not match the metadata's 000000000000")


def test_foreign_gpu_refused(models):
    _, folder = models["lgbm"]
    message = refused(folder, "trained for Synthetic GPU", expect_device=replace(DEVICE, gpu="NVIDIA H100 80GB HBM3"))
    assert "this device is NVIDIA H100 80GB HBM3" in message
    refused(folder, r"cc 9.0\); this device is Synthetic GPU \(cc 10.0\)", expect_device=replace(DEVICE, cc="10.0"))
    load_model(folder, expect_device=replace(DEVICE, sm_count=114))  # same name + capability: accepted


def test_feature_and_schema_mismatch_refused(models, tmp_path):
    folder = copy_of(models["lgbm"][1], tmp_path)
    edit_metadata(folder, feature_names=FEATURE_NAMES[:3] + ["old_feature"] + FEATURE_NAMES[4:])
    refused(folder, r"differ from #3 \('old_feature' vs 'log2_b'\); retrain it")
    edit_metadata(folder, feature_names=FEATURE_NAMES + ["future_feature"])  # a newer library's model
    refused(folder, rf"model uses {len(FEATURE_NAMES) + 1} features.*\('future_feature' vs '\(end\)'\)")
    edit_metadata(folder, feature_names=FEATURE_NAMES, schema_version=99)
    refused(folder, "dataset schema 99, this library reads 1")


def test_unreadable_folders_refused(models, tmp_path):
    refused(tmp_path / "nothing", "no model here")
    folder = copy_of(models["tree"][1], tmp_path)
    (folder / METADATA_FILE).write_text("{ not json")
    refused(folder, "metadata.json: unreadable")
    folder = copy_of(models["tree"][1], tmp_path / "b")
    edit_metadata(folder, ranker={"name": "xgb", "params": {}})
    refused(folder, "unknown ranker 'xgb'")
    folder = copy_of(models["lgbm"][1], tmp_path / "c")
    edit_metadata(folder, model_file="../../etc/passwd")
    refused(folder, "unknown model file")


def test_unfitted_or_deviceless_save_refused(tmp_path, rows):
    with pytest.raises(ModelError, match="not fitted"):
        save_model(make_ranker("lgbm"), tmp_path / "m", {"device": DEVICE.to_dict()})
    with pytest.raises(ModelError, match="no 'device' section"):
        save_model(make_ranker("tree").fit(rows, DEVICE), tmp_path / "m", {})


def test_train_end_to_end(tmp_path):
    dataset = write_dataset(synthetic_dataset(80, seed=2, groups=8), tmp_path / "syn.parquet", METADATA)
    meta = train(dataset, "lgbm", tmp_path / "models" / "lgbm", params={"n_estimators": 15}, progress=False)
    assert meta["ranker"]["name"] == "lgbm_rank" and meta["refit_all"] is False
    assert meta["dataset"]["sha256"] and meta["dataset"]["problems"] == 80
    # the space the data was collected in: the dataset's torch and its config lists' fingerprint
    assert (meta["torch_version"], meta["space_fingerprint"]) == ("2.11.0", FROZEN["2.11"].fingerprint)
    heldout = meta["metrics"]["heldout"]
    assert {"lgbm_rank", "random", "roofline", "inductor_order", "aten_only"} <= set(heldout)
    assert all(f"{m}@{k}" in heldout["lgbm_rank"] for m in ("oracle", "p5", "hit") for k in (1, 2, 3, 5, 8, 10))
    assert heldout["lgbm_rank"]["hit@1"] > heldout["random"]["hit@1"]
    ranker, loaded = load_model(tmp_path / "models" / "lgbm", expect_device=DEVICE)
    assert loaded["model_sha256"] == meta["model_sha256"]
    # the hook's margin is calibrated on the held-out split and meets its own criterion
    pruning = meta["pruning"]
    assert pruning["margin"] is None or pruning["margin"] in (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    chosen, plain = pruning["chosen"], pruning["plain"]
    assert chosen["oracle"] >= plain["oracle"] - 0.005 and chosen["kept_mean"] <= plain["kept_mean"]
    assert meta["problem_ranges"]["ops"] == ["mm"] and meta["problem_ranges"]["m"][0] >= 1

    refit = train(dataset, "tree", tmp_path / "models" / "tree", refit_all=True, progress=False)
    assert refit["refit_all"] is True and refit["fitted_on"] == "all rows"
    assert refit["metrics"]["heldout"]["tree"]["problems"] == meta["metrics"]["heldout"]["lgbm_rank"]["problems"]


def test_train_checks_space_and_baseline_rankers(tmp_path):
    rows = synthetic_dataset(40, seed=4, groups=4).assign(space="exhaustive")
    dataset = write_dataset(rows, tmp_path / "exhaustive.parquet", METADATA)
    with pytest.raises(ValueError, match="no rows of space 'default'"):
        train(dataset, "lgbm", tmp_path / "m", progress=False)
    meta = train(dataset, "roofline", tmp_path / "roofline", space="exhaustive", progress=False)
    assert meta["space"] == "exhaustive" and meta["model_file"] == "model.json"
    assert load_model(tmp_path / "roofline")[0].name == "roofline"


def copy_of(folder, dest):
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / folder.name
    target.mkdir()
    for f in folder.iterdir():
        target.joinpath(f.name).write_bytes(f.read_bytes())
    return target


def test_a_model_of_the_features_before_fp8_reads_its_prefix():
    """The library appends features (fp8 dtypes and ops); a model trained before reads the leading columns."""
    from predictor.core.feature_names import model_feature_count

    shipped = json.loads((Path(__file__).resolve().parents[1] / "models" / "h200-default-lgbm" / METADATA_FILE).read_text())
    assert len(shipped["feature_names"]) < len(FEATURE_NAMES)  # trained before the fp8 features
    assert model_feature_count(shipped["feature_names"]) == len(shipped["feature_names"])
    assert model_feature_count(FEATURE_NAMES) == len(FEATURE_NAMES)
    with pytest.raises(ValueError, match="differ from #0"):
        model_feature_count(["log2_n", *FEATURE_NAMES[1:]])
    with pytest.raises(ValueError, match="model uses 0 features"):
        model_feature_count([])
