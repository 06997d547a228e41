"""Rankers: one conformance check over the registry, then what each promises."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
from predictor.testing.synthetic import METADATA, synthetic_dataset

from predictor.core.device import DeviceInfo
from predictor.offline.split import split_by_group
from predictor.offline.train import evaluate_ranker
from predictor.rankers import RANKERS, Ranker, make_ranker, top_k
from predictor.rankers._common import fraction_gains, relevance

DEVICE = DeviceInfo.from_metadata(METADATA)
LEARNED = ("lgbm", "lgbm_rank", "lgbm_reg", "tree")
OURS = [name for name in RANKERS if name != "autoheuristic"]  # autoheuristic (torch's tree): tests/test_evaluate.py
FAST = {"n_estimators": 20}  # enough trees to learn the synthetic data, quick to fit


def make(name: str, **params):
    return make_ranker(name, **({**FAST, **params} if name.startswith("lgbm") else params))


@pytest.fixture(scope="module")
def split():
    rows = synthetic_dataset(160, seed=0, groups=8)
    return split_by_group(rows, test_fraction=0.25, seed=0)


@pytest.fixture(scope="module")
def fitted(split):
    train, _ = split
    return {name: make(name).fit(train, DEVICE) for name in OURS}


@pytest.mark.parametrize("name", OURS)
def test_conformance(name, split, fitted):
    train, test = split
    ranker = fitted[name]
    assert isinstance(ranker, Ranker)
    assert ranker.name == name or RANKERS[name] is type(ranker)
    assert set(make_ranker(name).get_params()) == set(ranker.get_params())
    scores = ranker.score(test, DEVICE)  # test holds failed rows too: scoring works for any row
    assert scores.shape == (len(test),) and scores.dtype == np.float64 and np.isfinite(scores).all()
    assert ranker.score(test.iloc[:0], DEVICE).shape == (0,)
    np.testing.assert_array_equal(ranker.score(test, DEVICE), scores)


@pytest.mark.parametrize("name", LEARNED)
def test_unfitted_learned_ranker_refuses_to_score(name, split):
    with pytest.raises(NotFittedError, match="is not fitted; call fit first"):
        make(name).score(split[1], DEVICE)


@pytest.mark.parametrize("name", LEARNED)
def test_same_seed_same_ranking(name, split, fitted):
    train, test = split
    again = make(name).fit(train, DEVICE)
    np.testing.assert_array_equal(again.score(test, DEVICE), fitted[name].score(test, DEVICE))


@pytest.mark.parametrize("name", LEARNED)
def test_failed_rows_are_not_learned_from(name, split):
    train, _ = split
    assert (train["status"] != "ok").any() and train.loc[train.status != "ok", "time_us"].isna().all()
    only_failed = train[train["status"] != "ok"]
    with pytest.raises(ValueError, match="no rows with status 'ok'"):
        make(name).fit(only_failed, DEVICE)
    garbage = train.copy()
    garbage.loc[garbage.status != "ok", "time_us"] = 1e-9  # a failed row's time must not become a label
    a = make(name).fit(garbage, DEVICE).score(train, DEVICE)
    b = make(name).fit(train, DEVICE).score(train, DEVICE)
    np.testing.assert_array_equal(a, b)


def test_lgbm_beats_random_held_out(split, fitted):
    """Ranking quality on the candidates that ran (synthetic failures are random, so no ranker can learn them)."""
    _, test = split
    ran = test[test["status"] == "ok"]
    lgbm = evaluate_ranker(fitted["lgbm"], ran, DEVICE)
    rand = evaluate_ranker(fitted["random"], ran, DEVICE)  # the exact expectation
    assert lgbm["oracle@1"] > rand["oracle@1"] + 0.2, (lgbm, rand)
    assert lgbm["hit@1"] > rand["hit@1"] + 0.2 and lgbm["oracle@3"] > rand["oracle@3"]


@pytest.mark.parametrize("name", LEARNED)
def test_learn_failures_avoids_systematic_failures(name, split):
    """With ``learn_failures`` a candidate that never runs is learned as the slowest and never picked first."""
    train, test = split
    doomed = "triton_mm/16x64x128/s2/w4/g8"  # one of the fastest synthetic tiles on small problems

    def break_it(rows):
        rows = rows.copy()
        rows.loc[rows["candidate"] == doomed, ["status", "time_us"]] = ["compile_error", np.nan]
        return rows

    train, test = break_it(train), break_it(test)
    ranker = make(name, learn_failures=True).fit(train, DEVICE)
    picks = top_k(test, ranker.score(test, DEVICE), 1)
    assert (picks["candidate"] != doomed).all()
    # the synthetic data's other failures are random (2% of rows): no ranker can learn them, so only the doomed
    # candidate's share of failed picks must go, which the ok-only ranker keeps picking
    ok_only = make(name).fit(train, DEVICE)
    failed = evaluate_ranker(ranker, test, DEVICE)["failed@1"]
    assert failed < evaluate_ranker(ok_only, test, DEVICE)["failed@1"] and failed <= 0.1


def test_registry_errors():
    with pytest.raises(ValueError, match=r"unknown ranker 'xgb'; known rankers: lgbm, .*random"):
        make_ranker("xgb")
    with pytest.raises(ValueError, match="has no hyper-parameter n_trees"):
        make_ranker("lgbm", n_trees=5)
    with pytest.raises(ValueError, match="ranker 'autoheuristic' has no hyper-parameter seed; it takes: top_k"):
        make_ranker("autoheuristic", seed=1)
    with pytest.raises(ValueError, match="gain must be one of"):
        make_ranker("lgbm_rank", gain="linear", n_estimators=2).fit(synthetic_dataset(10), DEVICE)


def test_relevance_labels():
    assert relevance(np.array([0.0, np.log2(1.07), 1.0, 3.0, 10.0])).tolist() == [30, 29, 20, 0, 0]
    gains = fraction_gains()
    assert len(gains) == 31 and gains[30] == 1.0 and gains[20] == pytest.approx(0.5)


def test_inductor_order_and_aten_only(split):
    _, test = split
    with pytest.raises(ValueError, match="needs the 'inductor_rank' column"):
        make_ranker("inductor_order").score(test.drop(columns=["inductor_rank"]), DEVICE)
    first = top_k(test, make_ranker("inductor_order").score(test, DEVICE), 1)
    assert (first["inductor_rank"] == 0).all()
    first = top_k(test, make_ranker("aten_only").score(test, DEVICE), 2)
    assert (first.groupby("problem_id")["family"].first() == "aten").all()


def test_random_is_seeded_and_order_free(split):
    _, test = split
    a = make_ranker("random", seed=1).score(test, DEVICE)
    shuffled = test.sample(frac=1.0, random_state=0)
    b = pd.Series(make_ranker("random", seed=1).score(shuffled, DEVICE), index=shuffled.index)
    np.testing.assert_array_equal(a, b.loc[test.index].to_numpy())
    assert not np.array_equal(a, make_ranker("random", seed=2).score(test, DEVICE))
    assert ((a >= 0) & (a < 1)).all()


def test_tree_rules_are_readable(fitted):
    rules = fitted["tree"].export_rules()
    assert "|---" in rules and any(name in rules for name in ("log2_roofline_us", "waves", "log2_m", "eff_n"))
    with pytest.raises(NotFittedError):
        make_ranker("tree").export_rules()
