"""Metrics on hand-made data (answers worked out in comments), the random expectation, the report, errors,
and the AutoHeuristic baseline against torch's own code path."""

from __future__ import annotations

import itertools
import json
import math
import sys
import types

import numpy as np
import pandas as pd
import pytest

from predictor.core.candidate import Candidate
from predictor.core.device import DeviceInfo
from predictor.offline import evaluate as ev
from predictor.offline.evaluate import (EvaluationError, compare, evaluate, evaluate_rankers, per_problem_fraction,
                                random_expectation, run_evaluation, summarise, write_report)
from predictor.core.problem import Problem
from predictor.rankers.base import top_k
from predictor.artifacts.schema import SCHEMA_VERSION, write_dataset
from predictor.testing.synthetic import METADATA, synthetic_dataset

DEVICE = DeviceInfo.from_metadata(METADATA)


# --------------------------------------------------------------------------- a hand-made dataset

def _row(problem: Problem, cand: Candidate, time: float | None, tag: str = "llm:x:qkv:fwd") -> dict:
    return {**problem.to_dict(), "family_tag": tag, **cand.to_dict(), "time_us": np.nan if time is None else time,
            "time_us_iqr": 0.0, "reps": 10, "status": "ok" if time is not None else "resources", "collector": "bulk",
            "gpu": "Synthetic GPU", "cc": "9.0", "torch": "2.11.0", "triton": "3.6.0", "schema_version": SCHEMA_VERSION}


A = Candidate("aten", aten_op="mm")
B = Candidate("triton_mm", 64, 64, 32, 3, 4, 8)
C = Candidate("triton_mm", 128, 128, 32, 3, 8, 8)
P1 = Problem("mm", 64, 64, 64, "float16")
P2 = Problem("mm", 128, 128, 128, "bfloat16")
P3 = Problem("mm", 4096, 4096, 4096, "float16")
P4 = Problem("mm", 32, 32, 32, "float32")


@pytest.fixture
def hand() -> tuple[pd.DataFrame, np.ndarray]:
    """Three evaluated problems x three candidates (+ one all-failed problem) and a ranker's scores.

    P1: a=10, b=20, c=40 us;    ranker order b, c, a -> k=1: 10/20 = 0.5, k=2: min(20, 40) -> 0.5, k=3: 1
    P2: a=8,  b=4,  c=failed;   ranker order c, b, a -> k=1: only a failed row -> 0, k=2: 4/4 = 1, k=3: 1
    P3: a=3,  b=6,  c=12;       ranker order a, b, c -> 1 for every k
    P4: all failed              -> no best time, dropped
    """
    rows = pd.DataFrame([
        _row(P1, A, 10.0), _row(P1, B, 20.0), _row(P1, C, 40.0),
        _row(P2, A, 8.0), _row(P2, B, 4.0), _row(P2, C, None),
        _row(P3, A, 3.0, "random"), _row(P3, B, 6.0, "random"), _row(P3, C, 12.0, "random"),
        _row(P4, A, None), _row(P4, B, None), _row(P4, C, None),
    ])
    scores = np.array([1, 3, 2,   1, 2, 3,   3, 2, 1,   1, 2, 3], dtype=float)
    return rows, scores


def test_per_problem_fraction_by_hand(hand):
    rows, scores = hand
    f1 = per_problem_fraction(rows, scores, 1)
    assert set(f1.index) == {P1.problem_id, P2.problem_id, P3.problem_id}  # P4 dropped
    assert f1[P1.problem_id] == pytest.approx(0.5)
    assert f1[P2.problem_id] == 0.0  # the failed row chosen alone counts as infinitely slow
    assert f1[P3.problem_id] == 1.0
    f2 = per_problem_fraction(rows, scores, 2)
    assert f2.to_dict() == pytest.approx({P1.problem_id: 0.5, P2.problem_id: 1.0, P3.problem_id: 1.0})
    f3 = per_problem_fraction(rows, scores, 3)
    assert (f3 == 1.0).all()
    assert (per_problem_fraction(rows, scores, 50) == 1.0).all()  # k beyond the candidates = all of them


def test_summarise_by_hand(hand):
    rows, scores = hand
    s1 = summarise(per_problem_fraction(rows, scores, 1))
    # fractions [0.5, 0, 1]: geomean floors 0 at 1e-3 -> (0.5 * 0.001 * 1) ** (1/3) = 0.0793700526
    assert s1["oracle"] == pytest.approx(0.0005 ** (1 / 3))
    # p5, linear interpolation on sorted [0, 0.5, 1]: position 0.05 * (3 - 1) = 0.1 -> 0 + 0.1 * 0.5 = 0.05
    assert s1["p5"] == pytest.approx(0.05)
    assert s1["hit"] == pytest.approx(1 / 3)  # only P3 has its true best at the top
    assert s1["n"] == 3 and s1["failed"] == pytest.approx(1 / 3)
    s2 = summarise(per_problem_fraction(rows, scores, 2))
    # fractions [0.5, 1, 1]: geomean 0.5 ** (1/3) = 0.7937; p5: 0.5 + 0.1 * (1 - 0.5) = 0.55; hit 2/3
    assert s2["oracle"] == pytest.approx(0.5 ** (1 / 3))
    assert s2["p5"] == pytest.approx(0.55)
    assert s2["hit"] == pytest.approx(2 / 3)
    assert s2["failed"] == 0.0
    empty = summarise(pd.Series([], dtype=float))
    assert empty["n"] == 0 and math.isnan(empty["oracle"])


def test_random_expectation_by_hand(hand):
    rows, _ = hand
    r1 = random_expectation(rows, 1)
    # P1, k=1: each candidate with p=1/3 -> fractions 1, 0.5, 0.25 -> exp(E log f) = (0.125) ** (1/3) = 0.5; hit 1/3
    assert r1.loc[P1.problem_id, "fraction"] == pytest.approx(0.5)
    assert r1.loc[P1.problem_id, "hit"] == pytest.approx(1 / 3)
    # P2, k=1: fractions 0.5 (a), 1 (b), 0 -> floor 1e-3 (failed c) -> (0.0005) ** (1/3)
    assert r1.loc[P2.problem_id, "fraction"] == pytest.approx(0.0005 ** (1 / 3))
    r2 = random_expectation(rows, 2)
    # P1, k=2: subsets {a,b}=1, {a,c}=1, {b,c}=0.5 -> 0.5 ** (1/3); hit = 2/3
    assert r2.loc[P1.problem_id, "fraction"] == pytest.approx(0.5 ** (1 / 3))
    assert r2.loc[P1.problem_id, "hit"] == pytest.approx(2 / 3)
    assert P4.problem_id not in r2.index
    assert (random_expectation(rows, 3)["fraction"] == 1.0).all()


def test_random_expectation_matches_enumeration():
    """Exact against all k-subsets, with ties at the best and a failed row."""
    times = [5.0, 5.0, 7.0, None, 20.0, 6.0]
    p = Problem("mm", 256, 256, 256, "float16")
    cands = [Candidate("triton_mm", 16 * (i + 1), 64, 32, 3, 4, 8) for i in range(len(times))]
    rows = pd.DataFrame([_row(p, c, t) for c, t in zip(cands, times)])
    true = np.array([np.inf if t is None else t for t in times])
    for k in range(1, len(times) + 1):
        subsets = list(itertools.combinations(range(len(times)), k))
        fr = [5.0 / true[list(s)].min() for s in subsets]
        expected = math.exp(np.mean([math.log(max(f, ev.FAILED_FLOOR)) for f in fr]))
        expected_hit = np.mean([f == 1.0 for f in fr])
        got = random_expectation(rows, k).iloc[0]
        assert got["fraction"] == pytest.approx(expected, rel=1e-12)
        assert got["hit"] == pytest.approx(expected_hit, rel=1e-12)


def test_ties_follow_top_k_row_order():
    rows = synthetic_dataset(20, seed=3)
    scores = (rows.index.to_numpy() % 3).astype(float)  # heavy ties
    times = rows["time_us"].where(rows["status"] == "ok", np.inf)
    for k in (1, 2, 5):
        chosen = top_k(rows, scores, k)
        expected = times.groupby(rows["problem_id"]).min() / times.loc[chosen.index].groupby(chosen["problem_id"]).min()
        got = per_problem_fraction(rows, scores, k)
        pd.testing.assert_series_equal(got.sort_index(), expected.sort_index().rename("fraction"), check_names=False,
                                       check_index_type=False)


# --------------------------------------------------------------------------- evaluate_rankers and the report

class ByTime:
    """Test double: knows the true times (an oracle)."""
    name = "by_time"

    def fit(self, rows, device):
        return self

    def score(self, rows, device):
        return -rows["time_us"].fillna(1e12).to_numpy()


class ByInductorRank:
    name = "inductor_order"

    def fit(self, rows, device):
        return self

    def score(self, rows, device):
        return -rows["inductor_rank"].to_numpy(dtype=float)


class Applies(ByInductorRank):
    """A ranker that says it only ranks aten rows (exercises the 'applies' slice)."""
    name = "aten_first"

    def score(self, rows, device):
        return (rows["family"] == "aten").to_numpy(dtype=float)

    def applies(self, rows, device):
        return (rows["family"] == "aten").to_numpy() & (rows["dtype"] == "float16").to_numpy()


def test_evaluate_rankers_table(hand):
    rows, scores = hand

    class Fixed:
        name = "fixed"

        def score(self, r, device):
            return scores

    table = evaluate_rankers(rows, {"fixed": Fixed(), "random": None}, DEVICE, ks=(1, 2))
    assert list(table.columns) == list(ev.METRIC_COLUMNS)
    row = table[(table.ranker == "fixed") & (table.k == 1) & (table.slice_kind == "all")].iloc[0]
    assert row.oracle == pytest.approx(0.0005 ** (1 / 3)) and row.hit == pytest.approx(1 / 3) and row.n == 3
    # slices: dtype, family_tag prefix ("llm" for P1/P2, "random" for P3), size band, op
    fam = table[(table.ranker == "fixed") & (table.k == 1) & (table.slice_kind == "family")].set_index("slice")
    assert fam.loc["llm", "n"] == 2 and fam.loc["random", "n"] == 1
    assert fam.loc["llm", "hit"] == 0.0 and fam.loc["random", "hit"] == 1.0
    size = table[(table.ranker == "fixed") & (table.k == 1) & (table.slice_kind == "size")].set_index("slice")
    # log2(64^3) = 18, log2(128^3) = 21 -> small; log2(4096^3) = 36 -> large
    assert size.loc["small", "n"] == 2 and size.loc["large", "n"] == 1
    # random: mean over problems of the exact expectations: P1 0.5, P2 0.0005^(1/3), P3 (1 * 0.5 * 0.25)^(1/3) = 0.5
    rnd = table[(table.ranker == "random") & (table.k == 1) & (table.slice_kind == "all")].iloc[0]
    assert rnd.oracle == pytest.approx((0.5 * 0.0005 ** (1 / 3) * 0.5) ** (1 / 3))
    assert rnd.hit == pytest.approx(1 / 3)


def test_report_files(tmp_path):
    rows = synthetic_dataset(30, seed=1)
    result = evaluate(rows, {"by_time": ByTime(), "inductor_order": ByInductorRank(), "aten_first": Applies(),
                             "random": None}, DEVICE)
    by_time = result.metrics[(result.metrics.ranker == "by_time") & (result.metrics.slice_kind == "all")]
    assert (by_time.oracle == 1.0).all() and (by_time.hit == 1.0).all()
    applies = result.metrics[(result.metrics.slice_kind == "applies") & (result.metrics.k == 1)]
    assert set(applies.slice) == {"aten_first"}
    assert (applies.n == int((rows.drop_duplicates("problem_id").dtype == "float16").sum())).all()
    context = {"main": "by_time", "gpu": "Synthetic GPU", "dataset_sha256": "abc", "command": "gemm-predictor evaluate x"}
    doc = write_report(result, tmp_path, context)
    for name in ("report.md", "metrics.json", "oracle_at_k.png", "fraction_vs_size.png", "family_confusion.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    loaded = json.loads((tmp_path / "metrics.json").read_text())
    assert loaded == json.loads(json.dumps(doc))
    assert set(loaded) == {"context", "metrics"}
    assert set(loaded["metrics"][0]) >= {"ranker", "k", "slice_kind", "slice", "oracle", "p5", "hit", "n"}
    assert loaded["context"]["n_problems"] == 30 and loaded["context"]["dataset_sha256"] == "abc"
    report = (tmp_path / "report.md").read_text()
    assert "| `by_time` | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 | 30 |" in report
    assert "gemm-predictor evaluate x" in report and "expectation" in report


def test_compare(tmp_path):
    rows = synthetic_dataset(24, seed=2)
    a = write_report(evaluate(rows, {"m1": ByInductorRank(), "random": None}, DEVICE, ks=(1, 5)), tmp_path / "a", {"main": "m1"})
    b = write_report(evaluate(rows, {"m2": ByTime(), "random": None}, DEVICE, ks=(1, 5)), tmp_path / "b", {"main": "m2"})
    table, md = compare(tmp_path / "a", b, labels=("old", "new"))
    row = table[(table.ranker == "model") & (table.k == 1) & (table.slice_kind == "all")].iloc[0]
    assert row.oracle_new == 1.0 and row.oracle_delta == pytest.approx(1.0 - row.oracle_old)
    rnd = table[(table.ranker == "random") & (table.slice_kind == "all")]
    assert (rnd.oracle_delta.abs() < 1e-12).all()  # same data, same expectation
    assert "old" in md and "`model`" in md and "`random`" in md
    with pytest.raises(EvaluationError):
        compare(a, b, labels=("x", "x"))
    with pytest.raises(EvaluationError):
        compare(tmp_path / "missing", b)


# --------------------------------------------------------------------------- errors and run_evaluation

def test_bad_k_and_scores(hand):
    rows, scores = hand
    for ks in ((0,), (1, -2), (), (1.5,)):
        with pytest.raises(EvaluationError, match="k"):
            evaluate_rankers(rows, {"random": None}, DEVICE, ks=ks)
    with pytest.raises(EvaluationError, match="scores"):
        per_problem_fraction(rows, scores[:-1], 1)
    failed = rows.assign(status="timeout", time_us=np.nan)
    with pytest.raises(EvaluationError, match="ok row"):
        evaluate_rankers(failed, {"random": None}, DEVICE)


@pytest.fixture
def fake_artifacts(monkeypatch):
    """predictor.artifacts.model_folder.load_model stand-in: folders hold a meta.json; the model ranks by inductor order."""
    module = types.ModuleType("predictor.artifacts.model_folder")

    def load_model(folder):
        meta = json.loads((folder / "meta.json").read_text())
        return ByInductorRank(), meta

    module.load_model = load_model
    monkeypatch.setitem(sys.modules, "predictor.artifacts.model_folder", module)

    def make_baseline(name):
        if name == "random":
            return ev._ExpectedRandom()
        if name == "aten_only":
            return Applies()
        raise ValueError(f"unknown ranker {name!r}")

    monkeypatch.setattr(ev, "_make_baseline", make_baseline)


def _model(tmp_path, **meta):
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text(json.dumps({"name": "m", "space": "default", "split_seed": 0,
                                                  "test_fraction": 0.25, "device": METADATA["device"], **meta}))
    return folder


def test_run_evaluation(tmp_path, fake_artifacts):
    data = write_dataset(synthetic_dataset(40, seed=4), tmp_path / "d.parquet", METADATA)
    doc = run_evaluation(_model(tmp_path), data, tmp_path / "out", ks=(1, 5), command="gemm-predictor evaluate m")
    ctx = doc["context"]
    assert ctx["main"] == "m" and ctx["split"] == "test" and len(ctx["dataset_sha256"]) == 64
    assert 0 < ctx["n_problems"] < 40  # the held-out groups only
    assert {"m", "random", "aten_only"} <= {r["ranker"] for r in doc["metrics"]}
    assert any("roofline" in s for s in ctx["skipped"])  # the fake registry does not know it: noted, not hidden
    assert (tmp_path / "out" / "report.md").read_text().count("not evaluated:") >= 1
    full = run_evaluation(_model(tmp_path), data, tmp_path / "out_all", ks=(1,), split="all")
    assert full["context"]["n_problems"] == 40


def test_run_evaluation_errors(tmp_path, fake_artifacts):
    data = write_dataset(synthetic_dataset(20, seed=5), tmp_path / "d.parquet", METADATA)
    with pytest.raises(EvaluationError, match="space 'exhaustive'"):
        run_evaluation(_model(tmp_path, space="exhaustive"), data, tmp_path / "o")
    with pytest.raises(EvaluationError, match="k"):
        run_evaluation(_model(tmp_path), data, tmp_path / "o", ks=(0, 1))
    broken = synthetic_dataset(20, seed=5).drop(columns=["time_us"])
    broken.to_parquet(tmp_path / "broken.parquet")
    with pytest.raises(EvaluationError, match="missing columns time_us"):
        run_evaluation(_model(tmp_path), tmp_path / "broken.parquet", tmp_path / "o")
    no_ok = synthetic_dataset(20, seed=5).assign(status="timeout", time_us=np.nan)
    no_ok = write_dataset(no_ok, tmp_path / "no_ok.parquet", METADATA)
    with pytest.raises(EvaluationError, match="no rows with status ok"):
        run_evaluation(_model(tmp_path), no_ok, tmp_path / "o")
    other_space = write_dataset(synthetic_dataset(20, seed=5).assign(space="exhaustive"), tmp_path / "ex.parquet", METADATA)
    with pytest.raises(EvaluationError, match="no rows of space 'default'"):
        run_evaluation(_model(tmp_path), other_space, tmp_path / "o")
    with pytest.raises(EvaluationError, match="split"):
        run_evaluation(_model(tmp_path), data, tmp_path / "o", split="train")


# --------------------------------------------------------------------------- the AutoHeuristic baseline

def test_autoheuristic_matches_torch():
    pytest.importorskip("torch")
    from predictor.rankers import autoheuristic as ah

    try:
        ah._load_tree()
    except ah.AutoHeuristicUnavailable:
        pytest.skip("this torch does not ship MMRankingH100")
    from torch._inductor.autoheuristic.autoheuristic_utils import AHMetadata
    from torch._inductor.autoheuristic.learned_heuristic_controller import LearnedHeuristicController

    assert ah.choice_name(pd.Series(B.to_dict())) == "type=triton_BLOCK-M=64_BLOCK-K=32_BLOCK-N=64_numstages=3_numwarps=4"
    assert ah.choice_name(pd.Series(A.to_dict())) == "extern_mm"
    assert ah.choice_name(pd.Series(Candidate("decompose_k", k_split=4).to_dict())) is None
    assert ah.operand_strides(8, 16, 32, "col", "col") == ((1, 8), (1, 32))

    tree = ah._load_tree()
    ranker = ah.AutoHeuristicRanker().fit(pd.DataFrame(), DEVICE)
    # every config the tree knows, for a few shapes and layouts: our order must start with torch's kept list
    configs = [c for c in tree.choices if c != "extern_mm"]
    cands = [A] + [Candidate("triton_mm", int(f["M"]), int(f["N"]), int(f["K"]), int(f["s"]), int(f["w"]), 8)
                   for f in (dict(zip(("M", "K", "N", "s", "w"), [p.split("=")[1] for p in c.split("_")[1:]]))
                             for c in (c.replace("BLOCK-", "") for c in configs))]
    cands.append(Candidate("triton_mm", 256, 256, 64, 3, 8, 8))  # not in the tree: unranked
    for m, n, k, la, lb in ((2048, 2048, 2048, "row", "row"), (8, 4096, 4096, "row", "col"), (77, 768, 3072, "col", "row"),
                            (17, 31, 45, "row", "row")):
        p = Problem("mm", m, n, k, "float16", layout_a=la, layout_b=lb)
        rows = pd.DataFrame([_row(p, c, 1.0) for c in cands])
        scores = ranker.score(rows, DEVICE)
        assert scores[-1] == ah.UNRANKED_SCORE
        names = [ah.choice_name(r) for r in rows.itertuples()]
        ours = [names[i] for i in np.argsort(-scores, kind="stable") if scores[i] > ah.UNRANKED_SCORE]
        meta = AHMetadata(232448, (9, 0), names[:-1], "mm")
        context = ah.build_context(m, n, k, "float16", la, lb)
        theirs = LearnedHeuristicController(meta, context).get_decisions_ranked(10)
        if "extern_mm" not in theirs:
            theirs.append("extern_mm")
        assert len(theirs) >= 2 and ours[: len(theirs)] == theirs
    # torch consults the tree only for mm on a 232448 B / cc 9.0 device
    bmm = pd.DataFrame([_row(Problem("bmm", 64, 64, 64, "float16", b=2), c, 1.0) for c in cands[:3]])
    assert (ranker.score(bmm, DEVICE) == ah.UNRANKED_SCORE).all()
    other = DeviceInfo(**{**METADATA["device"], "cc": "8.0", "smem_per_block": 166912})
    assert (ranker.score(rows, other) == ah.UNRANKED_SCORE).all()
    assert ah.AutoHeuristicRanker(check_device=False).applies(rows, other).any()


def test_pruning_rule_by_hand(hand):
    """The hook's rule on the hand-made problems (scores: P1 b=3 c=2 a=1; P2 c=3 b=2 a=1; P3 a=3 b=2 c=1).

    k=2, margin 0.5, keep_aten: P1 keeps b (c is 1 below) + aten a -> min(20, 10) = 10 -> 1.0, 2 kept;
    P2 keeps c (failed; b is 1 below) + aten a -> 8 -> 4/8 = 0.5, 2 kept; P3 keeps a only -> 1.0, 1 kept.
    Without keep_aten: P1 0.5 (b alone), P2 0 (only the failed c), P3 1.0; all single.
    """
    rows, scores = hand
    r = ev.pruning_rule_summary(rows, scores, k=2, margin=0.5, keep_aten=True)
    assert r["oracle"] == pytest.approx(0.5 ** (1 / 3))
    assert r["kept_mean"] == pytest.approx(5 / 3) and r["single"] == pytest.approx(1 / 3)
    r = ev.pruning_rule_summary(rows, scores, k=2, margin=0.5, keep_aten=False)
    assert r["kept_mean"] == 1.0 and r["single"] == 1.0 and r["failed"] == pytest.approx(1 / 3)
    # no margin = plain top-k (+aten): P1 b,c + a -> 1.0; P2 c,b + a -> 1.0; P3 a,b -> 1.0
    r = ev.pruning_rule_summary(rows, scores, k=2, margin=None, keep_aten=True)
    assert r["oracle"] == 1.0 and r["kept_mean"] == pytest.approx(8 / 3)
