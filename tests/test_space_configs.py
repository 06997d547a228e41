"""Spaces follow the installed torch (issue 18): its config lists against the frozen copy for its release, the
fallbacks, the fingerprint in model metadata and the one warning when the installed torch's lists differ."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from unittest import mock

import pytest
import torch
from predictor.testing.synthetic import METADATA, synthetic_dataset

from predictor.artifacts.model_folder import load_runtime_model, read_metadata, save_model
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.rankers import make_ranker
from predictor.spaces import FROZEN, configs, enumerate_space
from predictor.spaces.configs import (
    FINGERPRINT_KEY,
    TORCH_KEY,
    frozen_configs,
    installed_configs,
    read_installed,
    release,
    space_metadata,
    warn_if_space_changed,
)

ROOT = Path(__file__).resolve().parents[1]
H200 = DeviceInfo.from_metadata(METADATA)
LOGGER = "predictor.spaces.configs"


@pytest.fixture()
def fresh():
    """No cached installed lists and no warnings given yet: each test sees its own."""
    installed_configs.cache_clear()
    with mock.patch.object(configs, "_warned", set()):
        yield
    installed_configs.cache_clear()


def test_frozen_copy_of_the_installed_release_equals_what_torch_lists() -> None:
    here = release(torch.__version__)
    assert here in FROZEN, f"torch {torch.__version__} has no frozen copy in predictor.spaces.configs.FROZEN; add one"
    live = read_installed()
    assert live.source == "installed torch"
    for name in ("mm", "int8_mm", "persistent_mm", "exhaustive", "group_m", "scaled_mm", "scaled_persistent_mm"):
        assert getattr(live, name) == getattr(FROZEN[here], name), name
    assert live.fingerprint == FROZEN[here].fingerprint


def test_2_13_adds_one_mm_config_to_2_11() -> None:
    old, new = FROZEN["2.11"], FROZEN["2.13"]
    assert (len(old.mm), len(new.mm)) == (20, 21) and new.mm[:20] == old.mm and new.mm[20] == (128, 256, 64, 4, 8)
    assert (old.int8_mm, old.persistent_mm, old.exhaustive) == (new.int8_mm, new.persistent_mm, new.exhaustive)
    assert old.fingerprint != new.fingerprint and old.fingerprint.startswith("sha256:")


def test_enumerate_space_uses_the_installed_lists_unless_told() -> None:
    problem = Problem("mm", 4096, 4096, 4096, "float16")
    triton = lambda version: [c for c in enumerate_space(problem, "default", H200, tma=False, torch_version=version)
                              if c.family == "triton_mm"]  # noqa: E731
    assert len(triton(None)) == len(installed_configs().mm)
    assert len(triton("2.11")) == 20 and len(triton("2.13")) == 21


def test_unknown_releases_fall_back_to_the_nearest_frozen_copy(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert frozen_configs("2.12.1") is FROZEN["2.12"]  # a copy of its own: no warning
        assert frozen_configs("2.99.0+cu130") is FROZEN["2.14"]
        assert frozen_configs("2.5") is FROZEN["2.11"]
    assert len(caplog.records) == 2 and "no frozen Inductor config lists for torch 2.99" in caplog.records[0].message
    assert frozen_configs("2.13.0+cpu") is FROZEN["2.13"]
    with pytest.raises(ValueError, match="not of the form"):
        frozen_configs("nightly")


def test_a_torch_whose_heuristics_moved_gets_the_frozen_copy(fresh, caplog) -> None:
    def moved():
        raise AttributeError("module 'torch._inductor.template_heuristics.triton' has no attribute 'X'")

    with mock.patch.object(configs, "read_installed", moved), caplog.at_level(logging.WARNING, logger=LOGGER):
        got = installed_configs()
    assert got == frozen_configs(torch.__version__) and got.source == "frozen"
    assert "cannot read the installed torch" in caplog.text and "AttributeError" in caplog.text


def test_lists_a_candidate_cannot_describe_are_refused(monkeypatch) -> None:
    from torch._inductor.template_heuristics import triton as th

    odd = th.GemmConfig(64, 64, 32, 2, 4, group_m=4)
    with pytest.raises(ValueError, match="GROUP_M 8"):
        configs._as_configs([odd], "mm_configs")


def test_space_metadata_records_the_data_torch() -> None:
    assert space_metadata("2.11.0") == {TORCH_KEY: "2.11.0", FINGERPRINT_KEY: FROZEN["2.11"].fingerprint}
    assert space_metadata(None) == {TORCH_KEY: torch.__version__, FINGERPRINT_KEY: installed_configs().fingerprint}
    assert space_metadata("2.7.0") == {TORCH_KEY: "2.7.0", FINGERPRINT_KEY: None}  # nobody checked its lists


def test_shipped_models_record_torch_2_11_space() -> None:
    folders = sorted(p.parent for p in (ROOT / "models").glob("*/metadata.json"))
    assert folders
    for folder in folders:
        meta = read_metadata(folder)
        assert meta[TORCH_KEY] == meta["dataset"]["torch"] == "2.11.0"
        assert meta[FINGERPRINT_KEY] == FROZEN["2.11"].fingerprint
        assert FROZEN["2.11"].fingerprint in (folder / "MODEL_CARD.md").read_text()


def test_warns_once_when_the_installed_space_differs(fresh, caplog) -> None:
    theirs = {TORCH_KEY: "2.11.0", FINGERPRINT_KEY: "sha256:0000000000000000"}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert warn_if_space_changed(theirs, "m1") and warn_if_space_changed(theirs, "m1")
        assert warn_if_space_changed(theirs, "m2")  # another model: its own warning
        assert not warn_if_space_changed({FINGERPRINT_KEY: installed_configs().fingerprint}, "m3")
        assert not warn_if_space_changed({}, "m4")  # a model from before fingerprints: nothing to compare
    assert [r.message.split(" ")[0] for r in caplog.records] == ["m1", "m2"]
    assert "trained on torch 2.11.0's GEMM configs" in caplog.records[0].message


def test_the_hook_loader_warns_on_a_model_of_another_space(fresh, tmp_path, caplog) -> None:
    rows = synthetic_dataset(20, seed=3)
    ranker = make_ranker("lgbm_rank", n_estimators=5).fit(rows, H200)
    base = {"device": H200.to_dict(), "space": "default"}
    same = save_model(ranker, tmp_path / "same", {**base, **space_metadata(None)})
    other = save_model(ranker, tmp_path / "other", {**base, TORCH_KEY: "2.11.0",
                                                    FINGERPRINT_KEY: "sha256:0000000000000000"})
    assert json.loads((same / "metadata.json").read_text())[FINGERPRINT_KEY] == installed_configs().fingerprint
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_runtime_model(same, expect_device=H200)
        assert not caplog.records
        for _ in range(3):
            load_runtime_model(other, expect_device=H200)
    assert len(caplog.records) == 1 and str(other) in caplog.records[0].message
