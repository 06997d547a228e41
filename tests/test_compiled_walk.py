"""The compiled tree walker (``predictor/artifacts/tree_walk.c``) scores exactly as the numpy walk, bit for bit, on every
layout and size the hook can hand it; it is compiled once and cached; and without a working compiler, or when
told not to, ``TextForest`` walks in numpy with the same scores."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from predictor.artifacts import compiled_walk
from predictor.artifacts.model_check import load_text_forest, parse_text_forest
from predictor.testing.model_text import with_tree_sizes

MODELS = Path(__file__).resolve().parents[1] / "models"
ROWS = (1, 2, 31, 63, 64, 65, 130, 700)  # around the walker's chunk (64 rows) and vector blocks



def _numpy_scores(forest, X: np.ndarray) -> np.ndarray:
    """The numpy walk alone (a forest whose compiled view is switched off)."""
    object.__setattr__(forest, "_compiled", False)
    try:
        return forest.predict(X)
    finally:
        object.__setattr__(forest, "_compiled", None)


def _compiled_scores(forest, X: np.ndarray) -> np.ndarray:
    compiled = forest.compiled(wait=True)
    assert compiled, "no compiled walker on this machine"
    scores = compiled.predict(X)
    assert scores is not None
    return scores


def _rows(n: int, features: int, seed: int) -> np.ndarray:
    """float32 rows as the hook's: many zeros, columns in a narrow range (splits outside it send every row one
    way), columns constant over the rows (the problem's), and NaNs."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 16, size=(n, features)).astype(np.float32)
    X[rng.random(X.shape) < 0.3] = 0.0
    narrow = rng.random(features) < 0.3
    X[:, narrow] = rng.uniform(-2, 16, narrow.sum()) + rng.uniform(0, 0.5, (n, narrow.sum()))
    constant = rng.random(features) < 0.4
    X[:, constant] = X[0, constant]  # the problem's own columns
    X[rng.random(X.shape) < 0.02] = np.nan
    return X


@pytest.mark.parametrize("name", ["h200-default-lgbm-all", "h100-default-lgbm-all"])
def test_shipped_models_score_as_the_numpy_walk(name):
    forest = load_text_forest(MODELS / name / "model.lgbm.txt")
    width = len(forest.feature_names)
    for seed, n in enumerate(ROWS):
        X = _rows(n, width + 5, seed)  # wider than the model: the hook passes a view of the first columns
        for view in (X[:, :width], np.asfortranarray(X)[:, :width], np.ascontiguousarray(X[:, :width])):
            np.testing.assert_array_equal(_compiled_scores(forest, view), _numpy_scores(forest, view), f"{n} rows")


def test_hook_matrices_score_as_the_numpy_walk():
    """The hook's own column-major matrices, for the lists ``benchmarks/hook_overhead.py`` times."""
    from predictor.artifacts.model_folder import read_metadata
    from predictor.core.device import DeviceInfo
    from predictor.core.runtime_features import runtime_feature_matrix
    from predictor.core.problem import Problem
    from predictor.spaces import enumerate_space

    folder = MODELS / "h100-default-lgbm-all"
    forest, device = load_text_forest(folder / "model.lgbm.txt"), DeviceInfo.from_metadata(read_metadata(folder))
    for space in ("default", "exhaustive"):
        for m, n, k in ((333, 1111, 2222), (32, 28672, 4096)):
            problem = Problem("mm", m, n, k, "float16")
            cands = list(enumerate_space(problem, space, device, tma=True))
            X = runtime_feature_matrix(problem, cands, [None] * len(cands), device)[:, :len(forest.feature_names)]
            np.testing.assert_array_equal(_compiled_scores(forest, X), _numpy_scores(forest, X))


def _trained(tmp_path: Path, num_leaves: int, rounds: int = 20) -> Path:
    rng = np.random.default_rng(num_leaves)
    X = rng.normal(size=(3000, 6))
    y = np.sin(X[:, 0] * 3) + X[:, 1] * X[:, 2] + (X[:, 3] > 0.5) + 0.1 * rng.normal(size=len(X))
    booster = lgb.train({"objective": "regression", "verbose": -1, "num_leaves": num_leaves, "min_data_in_leaf": 2},
                        lgb.Dataset(X, y), rounds)
    path = tmp_path / f"leaves{num_leaves}.txt"
    booster.save_model(str(path))
    return path


@pytest.mark.parametrize("num_leaves", [2, 32, 33, 64])
def test_any_tree_size_up_to_64_leaves_scores_as_the_numpy_walk(tmp_path, num_leaves):
    """Stumps, trees filling 32-bit leaf masks, trees needing the second half of a 64-bit mask; a one-leaf tree."""
    text = _trained(tmp_path, num_leaves).read_text()
    leaf = "Tree=20\nnum_leaves=1\nnum_cat=0\nleaf_value=0.25\nis_linear=0\nshrinkage=1\n\n\n"
    for forest in (parse_text_forest(text), parse_text_forest(with_tree_sizes(text.replace("end of trees", leaf + "end of trees")))):
        assert forest.width - forest.split_nodes == num_leaves
        for seed, n in enumerate(ROWS):
            X = _rows(n, 6, seed)
            np.testing.assert_array_equal(_compiled_scores(forest, X), _numpy_scores(forest, X), f"{n} rows")


def test_the_walker_without_avx2_scores_as_the_numpy_walk(fresh_walker, monkeypatch, tmp_path):
    """The plain 128-bit vector path (every x86-64 and ARM CPU), built with the AVX2 copy left out."""
    monkeypatch.setattr(compiled_walk, "FLAGS", (*compiled_walk.FLAGS, "-DGP_NO_AVX2"))
    forests = [load_text_forest(MODELS / "h200-default-lgbm-all" / "model.lgbm.txt"),
               load_text_forest(_trained(tmp_path, 64))]
    for forest in forests:
        for seed, n in enumerate(ROWS):
            X = _rows(n, len(forest.feature_names), seed)
            np.testing.assert_array_equal(_compiled_scores(forest, X), _numpy_scores(forest, X), f"{n} rows")


def test_trees_over_64_leaves_are_walked_in_numpy(tmp_path):
    forest = load_text_forest(_trained(tmp_path, 100, rounds=3))
    assert forest.width - forest.split_nodes > compiled_walk.MAX_LEAVES
    assert forest.compiled(wait=True) is False
    X = _rows(50, 6, 0)
    np.testing.assert_array_equal(forest.predict(X), _numpy_scores(forest, X))


def test_compiled_once_in_the_background_then_loaded_from_the_cache(fresh_walker):
    forest = load_text_forest(MODELS / "h200-default-lgbm-all" / "model.lgbm.txt")
    X = _rows(40, len(forest.feature_names), 1)
    expected = _numpy_scores(forest, X)
    # a fresh machine: the first predict starts the compile and scores in numpy meanwhile, without waiting
    np.testing.assert_array_equal(forest.predict(X), expected)
    assert forest._compiled is None and compiled_walk._builder is not None
    assert compiled_walk.library(wait=True) is not None
    np.testing.assert_array_equal(forest.predict(X), expected)
    assert forest._compiled, "the compiled walker was not used once built"
    (built,) = fresh_walker.glob("tree_walk-*.so")
    assert not list(fresh_walker.glob("*.tmp*")), "a temporary file was left behind"
    stamp = built.stat().st_mtime_ns
    compiled_walk.reset()  # as a new process: loads the cached library at once, compiles nothing
    again = load_text_forest(MODELS / "h200-default-lgbm-all" / "model.lgbm.txt")
    np.testing.assert_array_equal(again.predict(X), expected)
    assert again._compiled and compiled_walk._builder is None
    assert built.stat().st_mtime_ns == stamp and sorted(p.name for p in fresh_walker.iterdir()) == [built.name, built.name + ".sha256"]


@pytest.mark.parametrize("how", ["no compiler", "compiler fails", "numpy forced"])
def test_without_a_working_compiler_the_numpy_walk_scores(fresh_walker, monkeypatch, caplog, how):
    if how == "no compiler":
        monkeypatch.setenv("CC", "/nonexistent/cc")
    elif how == "compiler fails":
        monkeypatch.setenv("CC", "false")
    else:
        monkeypatch.setenv(compiled_walk.WALK_ENV, "numpy")
    forest = load_text_forest(MODELS / "h200-default-lgbm-all" / "model.lgbm.txt")
    X = _rows(100, len(forest.feature_names), 2)
    with caplog.at_level(logging.INFO, logger="predictor.artifacts.compiled_walk"):
        first = forest.predict(X)  # (a failing compile runs in the background: numpy meanwhile)
        assert compiled_walk.library(wait=True) is None and compiled_walk.unavailable()
        scores = forest.predict(X)
    assert forest._compiled is False
    np.testing.assert_array_equal(first, scores)
    np.testing.assert_array_equal(scores, _numpy_scores(forest, X))
    assert not fresh_walker.exists() or not list(fresh_walker.glob("*.so"))
    if how == "compiler fails":
        assert any(r.levelno == logging.WARNING and "numpy" in r.getMessage() for r in caplog.records)


def test_the_walker_source_ships_beside_its_loader():
    assert compiled_walk.SOURCE.is_file() and os.access(compiled_walk.SOURCE, os.R_OK)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_the_build_leaves_a_working_child(fresh_walker, monkeypatch, tmp_path):
    slow = tmp_path / "slow-cc"  # a compiler that takes a second and fails: the build is still running at the fork
    slow.write_text("#!/bin/sh\nsleep 1\nexit 1\n")
    slow.chmod(0o755)
    monkeypatch.setenv("CC", str(slow))
    assert compiled_walk.library() is None and compiled_walk._builder.is_alive()
    with compiled_walk._lock:  # held at the fork, as a build finishing in the parent would hold it
        pid = os.fork()
        if pid == 0:  # the child: no build thread; asking again must neither hang nor crash
            signal.alarm(20)  # a hang fails the test instead of stalling it
            os._exit(0 if compiled_walk.library(wait=True) is None and compiled_walk.unavailable() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert compiled_walk.library(wait=True) is None and compiled_walk.unavailable()


def test_the_walker_caches_under_the_one_per_user_cache_folder(monkeypatch, tmp_path):
    from predictor.artifacts import cache_dir, compiled_walk

    for value in (None, str(tmp_path)):
        if value is None:
            monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert compiled_walk.cache_dir() == cache_dir.cache_dir()
