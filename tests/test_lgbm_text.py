"""The numpy reader of LightGBM text models scores exactly as LightGBM does (shipped models and a fresh fit with
NaN features), and refuses what it does not support with one line naming the file."""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from predictor.lgbm_text import load_text_forest

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.mark.parametrize("name", ["h200-default-lgbm-all", "h200-exhaustive-lgbm-all"])
def test_shipped_models_score_as_lightgbm(name):
    path = MODELS / name / "model.lgbm.txt"
    forest = load_text_forest(path)
    booster = lgb.Booster(model_file=str(path))
    rng = np.random.default_rng(0)
    lo, hi = np.zeros(booster.num_feature()), np.full(booster.num_feature(), 16.0)
    X = rng.uniform(lo - 2, hi, size=(500, booster.num_feature()))
    X[rng.random(X.shape) < 0.3] = 0.0  # many one-hot / zero features, as real rows have
    np.testing.assert_allclose(forest.predict(X), booster.predict(X), rtol=0, atol=1e-9)


def test_missing_values_follow_lightgbm(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 4))
    X[rng.random(X.shape) < 0.2] = np.nan
    X[rng.random(X.shape) < 0.1] = 0.0
    y = np.nan_to_num(X[:, 0]) * 2 + np.isnan(X[:, 1]) - (X[:, 2] == 0)
    for zero_as_missing in (False, True):
        booster = lgb.train({"objective": "regression", "verbose": -1, "num_leaves": 7,
                             "zero_as_missing": zero_as_missing, "min_data_in_leaf": 5}, lgb.Dataset(X, y), 20)
        path = tmp_path / f"m{zero_as_missing}.txt"
        booster.save_model(str(path))
        np.testing.assert_allclose(load_text_forest(path).predict(X), booster.predict(X), atol=1e-9)


def test_unsupported_or_broken_files_are_refused(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("not a model\n")
    with pytest.raises(ValueError, match="bad.txt"):
        load_text_forest(bad)
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.integers(0, 5, 300), rng.normal(size=300)])
    booster = lgb.train({"objective": "regression", "verbose": -1, "min_data_in_leaf": 5},
                        lgb.Dataset(X, X[:, 0] * 3.0, categorical_feature=[0]), 5)
    cat = tmp_path / "cat.txt"
    booster.save_model(str(cat))
    with pytest.raises(ValueError, match="categorical"):
        load_text_forest(cat)
    with pytest.raises(ValueError, match="feature matrix"):
        load_text_forest(MODELS / "h200-default-lgbm-all" / "model.lgbm.txt").predict(np.zeros((3, 2)))


def test_malformed_trees_are_refused(tmp_path):
    text = (MODELS / "h200-default-lgbm-all" / "model.lgbm.txt").read_text()
    head, _, rest = text.partition("\nTree=0\n")
    tree0, _, tail = rest.partition("\nTree=1\n")
    fields = dict(line.split("=", 1) for line in tree0.splitlines() if "=" in line)
    for key, change, needle in (("left_child", lambda v: "0 " + v.split(" ", 1)[1], "cycle"),
                                ("right_child", lambda v: "99 " + v.split(" ", 1)[1], "does not have"),
                                ("split_feature", lambda v: "999 " + v.split(" ", 1)[1], "does not have")):
        bad = tree0.replace(f"{key}={fields[key]}", f"{key}={change(fields[key])}")
        path = tmp_path / f"{key}.txt"
        path.write_text(f"{head}\nTree=0\n{bad}\nTree=1\n{tail}")
        with pytest.raises(ValueError, match=needle):
            load_text_forest(path)
