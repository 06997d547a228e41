"""The numpy reader of LightGBM text models scores exactly as LightGBM does (shipped models and a fresh fit with
NaN features), and refuses what it does not support with one line naming the file."""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from predictor.artifacts import text_forest
from predictor.artifacts.model_check import load_text_forest, parse_text_forest
from predictor.testing.model_text import with_tree_sizes

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


def _missing_value_models(tmp_path, rows: int, seed: int):
    """Rows with NaNs and zeros, and LightGBM models trained on them with and without ``zero_as_missing``, saved as
    text: yields (X, booster, path)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 4))
    X[rng.random(X.shape) < 0.2] = np.nan
    X[rng.random(X.shape) < 0.1] = 0.0
    y = np.nan_to_num(X[:, 0]) * 2 + np.isnan(X[:, 1]) - (X[:, 2] == 0)
    for zero_as_missing in (False, True):
        booster = lgb.train({"objective": "regression", "verbose": -1, "num_leaves": 7,
                             "zero_as_missing": zero_as_missing, "min_data_in_leaf": 5}, lgb.Dataset(X, y), 20)
        path = tmp_path / f"m{zero_as_missing}.txt"
        booster.save_model(str(path))
        yield X, booster, path


def test_missing_values_follow_lightgbm(tmp_path):
    for X, booster, path in _missing_value_models(tmp_path, 400, seed=1):
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
    for key, change, needle in (("left_child", lambda v: "0 " + v.split(" ", 1)[1], "not a tree"),
                                ("right_child", lambda v: "99 " + v.split(" ", 1)[1], "does not have"),
                                ("split_feature", lambda v: "999 " + v.split(" ", 1)[1], "does not have")):
        bad = tree0.replace(f"{key}={fields[key]}", f"{key}={change(fields[key])}")
        path = tmp_path / f"{key}.txt"
        path.write_text(with_tree_sizes(f"{head}\nTree=0\n{bad}\nTree=1\n{tail}"))
        with pytest.raises(ValueError, match=needle):
            load_text_forest(path)


@pytest.mark.parametrize("specialise", [True, False])
@pytest.mark.parametrize("space", ["default", "exhaustive"])
def test_hook_feature_matrices_score_as_lightgbm(space, specialise, monkeypatch):
    """The hook's float32 matrices (problem columns constant: the specialised walk for the big lists, float32
    thresholds) score as LightGBM does on float64, for the lists ``benchmarks/hook_overhead.py`` times."""
    from predictor.artifacts.model_folder import read_metadata
    from predictor.core.device import DeviceInfo
    from predictor.core.runtime_features import runtime_feature_matrix
    from predictor.core.problem import Problem
    from predictor.spaces import enumerate_space

    monkeypatch.setattr(text_forest, "_SPECIALISE_PAIRS", 0 if specialise else 1 << 62)
    path = MODELS / "h200-default-lgbm-all" / "model.lgbm.txt"
    forest, booster = load_text_forest(path), lgb.Booster(model_file=str(path))
    device = DeviceInfo.from_metadata(read_metadata(path.parent))
    for m, n, k, dtype in ((333, 1111, 2222, "float16"), (32, 28672, 4096, "bfloat16"), (1, 4096, 4096, "float16")):
        problem = Problem("mm", m, n, k, dtype)
        cands = list(enumerate_space(problem, space, device, tma=True))
        X = runtime_feature_matrix(problem, cands, [None] * len(cands), device)
        assert X.dtype == np.float32
        X = X[:, :len(forest.feature_names)]  # the model reads the features of its time (a prefix; a view)
        expected = booster.predict(X.astype(np.float64))
        np.testing.assert_allclose(forest.predict(X), expected, rtol=0, atol=1e-9)
        np.testing.assert_allclose(forest.predict(X[:1]), expected[:1], rtol=0, atol=1e-9)  # everything constant


def test_float32_features_at_the_thresholds_split_as_float64():
    """A float32 value on either side of a float64 threshold goes the way LightGBM sends it."""
    path = MODELS / "h200-default-lgbm-all" / "model.lgbm.txt"
    forest, booster = load_text_forest(path), lgb.Booster(model_file=str(path))
    split = forest.threshold < np.inf
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(300):
        slot = rng.choice(np.flatnonzero(split), size=forest.feature.max() + 1)
        near = forest.threshold[slot].astype(np.float32)
        near = np.nextafter(near, np.float32(rng.choice([-np.inf, np.inf]))) if rng.random() < 0.5 else near
        row = rng.uniform(-2, 16, len(forest.feature_names)).astype(np.float32)
        row[forest.feature[slot]] = near
        rows.append(row)
    X = np.array(rows, dtype=np.float32)
    np.testing.assert_allclose(forest.predict(X), booster.predict(X.astype(np.float64)), rtol=0, atol=1e-9)


def test_constant_columns_with_missing_values_follow_lightgbm(tmp_path, monkeypatch):
    """The specialised walk (constant columns decided once) keeps LightGBM's missing-value rules."""
    monkeypatch.setattr(text_forest, "_SPECIALISE_PAIRS", 0)
    for X, booster, path in _missing_value_models(tmp_path, 1500, seed=4):
        forest = load_text_forest(path)
        for column, value in ((0, 0.0), (2, 0.0), (1, 0.5), (2, -1.0)):
            Xc = X.copy()
            Xc[:, column] = value
            np.testing.assert_allclose(forest.predict(Xc), booster.predict(Xc), atol=1e-9)
            np.testing.assert_allclose(forest.predict(Xc.astype(np.float32)),
                                       booster.predict(Xc.astype(np.float32).astype(np.float64)), atol=1e-9)


def _forests(tmp_path):
    """LightGBM models over 5 features as (name, forest, expected scores of X): stumps (shallower than the level
    the walk first drops pairs at), deep trees, one one-leaf tree (a constant target), and the deep trees with a
    one-leaf tree appended to their text (expected: LightGBM's scores + its leaf)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 5))
    X[rng.random(X.shape) < 0.2] = 0.0
    y = np.sin(X[:, 0] * 3) + X[:, 1] * X[:, 2] + (X[:, 3] > 0.5)
    out = []
    for name, params, target in (("stumps", {"num_leaves": 2}, y), ("deep", {"num_leaves": 63}, y),
                                 ("one leaf", {}, np.ones(len(y)))):
        booster = lgb.train({"objective": "regression", "verbose": -1, "min_data_in_leaf": 3, **params},
                            lgb.Dataset(X, target), 30)
        path = tmp_path / f"{name}.txt"
        booster.save_model(str(path))
        out.append((name, load_text_forest(path), lambda Z, b=booster: b.predict(Z)))
    deep = (tmp_path / "deep.txt").read_text()
    leaf = "Tree=30\nnum_leaves=1\nnum_cat=0\nleaf_value=0.25\nis_linear=0\nshrinkage=1\n\n\n"
    out.append(("deep + one leaf",
                parse_text_forest(with_tree_sizes(deep.replace("end of trees", leaf + "end of trees"))),
                lambda Z, f=out[1][2]: f(Z) + 0.25))
    return X, out


@pytest.mark.parametrize("specialise", [True, False])
def test_any_depth_and_row_count_scores_as_lightgbm(tmp_path, specialise, monkeypatch):
    """The walk (every pair at its root at level 0, pairs at their leaf dropped from ``_FIRST_DROP`` on, rows in
    chunks) on forests shallower and deeper than that, with one-leaf trees, for row counts around the chunk size,
    in float64 and in the hook's float32; with the forest specialised to constant columns and without."""
    monkeypatch.setattr(text_forest, "_SPECIALISE_PAIRS", 0 if specialise else 1 << 62)
    X, forests = _forests(tmp_path)
    assert max(f.depth for _, f, _ in forests) > text_forest._FIRST_DROP >= min(f.depth for _, f, _ in forests)
    chunk = text_forest._CHUNK_ROWS
    for name, forest, expected in forests:
        for rows in (1, 3, chunk - 1, chunk, chunk + 1, 3 * chunk + 7):
            Z = X[:rows].copy()
            Z[:, 4] = 0.5  # one constant column: what specialising decides once
            np.testing.assert_allclose(forest.predict(Z), expected(Z), rtol=0, atol=1e-9, err_msg=f"{name}, {rows}")
            Z32 = Z.astype(np.float32)
            np.testing.assert_allclose(forest.predict(Z32), expected(Z32.astype(np.float64)), rtol=0, atol=1e-9,
                                       err_msg=f"{name}, {rows} float32")
