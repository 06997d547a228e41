"""Files and caches that cannot hurt (issue 33): every probe of the issue, as a careful attacker and a clumsy user
would try it on a CPU machine. A model file is refused by our own parser before LightGBM's native one sees it (which
crashes or hangs on a cut file, a short list or an index out of range); the compiled walker never loads a library
another user could have planted, and rebuilds a bad one; a junk model folder, an implausible dataset or metadata,
or NaN scores give one line, never a crash, a hang or a report."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from predictor.testing.model_text import with_tree_sizes
from predictor.testing.synthetic import METADATA, synthetic_dataset

from predictor.artifacts import compiled_walk, roots
from predictor.artifacts.model_folder import METADATA_FILE, ModelError, load_model, load_runtime_model, read_metadata, save_model
from predictor.cli import main
from predictor.core.device import DeviceInfo
from predictor.artifacts.lgbm_text import ModelTextError
from predictor.artifacts.model_check import load_text_forest, parse_text_forest
from predictor.offline import metrics as offline_metrics
from predictor.offline import shipped
from predictor.core.problem import problem_id
from predictor.rankers import make_ranker
from predictor.runtime.choices import discovery
from predictor.runtime.choices.pruner import GemmPruner, HookSettings
from predictor.artifacts.schema import FOOTER_DIGEST, DatasetError, read_dataset, write_dataset, write_parquet

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "h200-default-lgbm-all"
DEVICE = DeviceInfo.from_metadata(METADATA)
H200 = DeviceInfo.from_metadata(read_metadata(SHIPPED))


# --- model files ----------------------------------------------------------------------------------------------

def _edit_first(key: str, change):
    """An edit of the first ``key=`` line of the text (tree 0's), its value passed through ``change``."""
    def edit(text: str) -> str:
        line = re.search(rf"^{key}=(.*)$", text, re.M)
        return text[:line.start(1)] + change(line.group(1)) + text[line.end(1):]
    return edit


def _first(value: str) -> str:
    return value.split(" ", 1)[1]


def _no_tree_sizes(edit):
    return lambda text: re.sub(r"^tree_sizes=.*\n", "", edit(text), count=1, flags=re.M)


# name -> (edit of the text, recompute tree_sizes as LightGBM would, what the one line must name)
BAD_MODELS = {
    "cut in half": (lambda t: t[:len(t) // 2], False, r"tree_sizes"),
    "nan leaf": (_edit_first("leaf_value", lambda v: "nan " + _first(v)), True, r"Tree=0 leaf_value: value 0 \('nan'\) is not a finite number"),
    "inf leaf": (_edit_first("leaf_value", lambda v: "inf " + _first(v)), True, r"Tree=0 leaf_value: value 0 \('inf'\) is not a finite number"),
    "threshold abc": (_edit_first("threshold", lambda v: "abc " + _first(v)), True, r"Tree=0 threshold: value 0 \('abc'\) is not a finite"),
    "nan threshold": (_edit_first("threshold", lambda v: "nan " + _first(v)), True, r"Tree=0 threshold: value 0 \('nan'\)"),
    "split_feature 9999": (_edit_first("split_feature", lambda v: "9999 " + _first(v)), True,
                           r"Tree=0 split_feature: .*feature it does not have"),
    "num_leaves -5": (_edit_first("num_leaves", lambda v: "-5"), True, r"Tree=0 num_leaves: -5 is not in"),
    "short leaf list": (_edit_first("leaf_value", lambda v: v.rsplit(" ", 1)[0]), True,
                        r"Tree=0 leaf_value: 30 values, num_leaves=31"),
    "short child list": (_edit_first("left_child", lambda v: v.rsplit(" ", 1)[0]), True,
                         r"Tree=0 left_child: 29 values"),
    "left_child 900000, no tree_sizes": (_no_tree_sizes(_edit_first("left_child", lambda v: "900000 " + _first(v))),
                                         False, r"header tree_sizes: missing"),
    "left_child 900000": (_edit_first("left_child", lambda v: "900000 " + _first(v)), True,
                          r"Tree=0 left_child: .*node or leaf it does not have"),
    "nan leaf, no tree_sizes": (_no_tree_sizes(_edit_first("leaf_value", lambda v: "nan " + _first(v))), False,
                                r"header tree_sizes: missing"),
    "a tree in a cycle": (_edit_first("right_child", lambda v: "0 " + _first(v)), True, r"Tree=0 .*not a tree"),
}


def bad_model(folder: Path, name: str) -> Path:
    """A copy of the shipped model with ``name``'s edit, its ``model_sha256`` recomputed (whoever hands over a file
    hands over its checksum)."""
    edit, resize, _ = BAD_MODELS[name]
    shutil.copytree(SHIPPED, folder)
    text = edit((SHIPPED / "model.lgbm.txt").read_text())
    text = with_tree_sizes(text) if resize else text
    (folder / "model.lgbm.txt").write_text(text)
    meta = json.loads((folder / METADATA_FILE).read_text())
    meta["model_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (folder / METADATA_FILE).write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize("name", list(BAD_MODELS))
def test_a_bad_model_file_is_refused_by_every_loader_with_one_line(tmp_path, name):
    """Rows 1, 2, 8, 9: the offline loader (LightGBM behind it), the hook's loader and the numpy parser each refuse
    with one line naming the file and the first bad field."""
    folder = bad_model(tmp_path / "m", name)
    needle = BAD_MODELS[name][2]
    for load in (load_model, load_runtime_model):
        with pytest.raises(ModelError, match=needle) as info:
            load(folder)
        assert str(info.value).startswith(str(folder / "model.lgbm.txt")) and "\n" not in str(info.value)
    with pytest.raises(ModelTextError, match=needle):
        load_text_forest(folder / "model.lgbm.txt")


def test_the_shipped_models_pass_the_checks_and_score_as_before():
    """The checks refuse nothing LightGBM writes: every shipped model, and a one-leaf tree (its lists empty)."""
    for path in sorted((ROOT / "models").glob("*/model.lgbm.txt")):
        load_text_forest(path)
    import lightgbm as lgb

    X = np.random.default_rng(0).normal(size=(50, 3))
    booster = lgb.train({"objective": "regression", "verbose": -1}, lgb.Dataset(X, np.ones(50)), 2)
    np.testing.assert_allclose(parse_text_forest(booster.model_to_string()).predict(X), booster.predict(X))


_PROBE = textwrap.dedent("""
    import json, sys
    from predictor.cli import main
    codes = {}
    for name, argv in json.loads(sys.argv[1]).items():
        codes[name] = main(argv)
    print(json.dumps(codes))
""")


def _synthetic_dataset_file(tmp_path: Path) -> Path:
    return write_dataset(synthetic_dataset(12, seed=1), tmp_path / "syn.parquet", METADATA)


def test_cli_probes_exit_2_never_a_signal_or_a_hang(tmp_path):
    """Rows 1, 2, 8 through the CLI, in a child process (a crash there is a signal, a hang the timeout): every bad
    model as ``evaluate --model`` and as ``--compare-model``; exit 2 and one line each; no lock file left."""
    dataset = _synthetic_dataset_file(tmp_path)
    probes = {}
    for i, name in enumerate(BAD_MODELS):
        folder = bad_model(tmp_path / f"bad{i}", name)
        probes[f"{name} (model)"] = ["evaluate", "--model", str(folder), "--dataset", str(dataset),
                                     "--out", str(tmp_path / "reports" / f"m{i}")]
        probes[f"{name} (compare)"] = ["evaluate", "--model", str(SHIPPED), "--dataset", str(dataset), "--split",
                                       "all", "--compare-model", str(folder), "--out", str(tmp_path / "reports" / f"c{i}")]
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(probes)], capture_output=True, text=True,
                         cwd=ROOT, timeout=240)
    assert out.returncode == 0, f"the CLI died ({out.returncode}): {out.stderr[-2000:]}"
    codes = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == {name: 2 for name in probes}
    errors = [line for line in out.stderr.splitlines() if line.startswith("gemm-predictor: error:")]
    assert len(errors) == len(probes)
    for i, name in enumerate(BAD_MODELS):  # each names the file and the field, twice (as model, as compare model)
        mine = [e for e in errors if f"/bad{i}/model.lgbm.txt" in e]
        assert len(mine) == 2 and all(re.search(BAD_MODELS[name][2], e) for e in mine), (name, mine)
    assert [p for p in tmp_path.rglob("*") if "lock" in p.name] == []  # a crash once left the output's lock


@pytest.mark.parametrize("name", ["cut in half", "left_child 900000, no tree_sizes", "nan leaf, no tree_sizes"])
def test_the_gemm_predictor_command_exits_2_within_seconds(tmp_path, name):
    """The real entry point (``python -m predictor.cli``), for the crash, the hang and the NaN report of the issue."""
    folder = bad_model(tmp_path / "bad", name)
    out = subprocess.run([sys.executable, "-m", "predictor.cli", "evaluate", "--model", str(folder), "--dataset",
                          str(_synthetic_dataset_file(tmp_path)), "--out", str(tmp_path / "report")],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2, out.stderr[-2000:]
    assert re.search(BAD_MODELS[name][2], out.stderr) and str(folder / "model.lgbm.txt") in out.stderr
    assert not (tmp_path / "report").exists() and not list(tmp_path.glob("*lock*"))


def test_the_hook_takes_plain_choices_with_one_warning_for_a_bad_model(tmp_path, caplog):
    """Row 9 in the hook: a refused model disables pruning with one warning naming the file and field; every GEMM
    then gets what plain torch.compile runs."""
    folder = bad_model(tmp_path / "bad", "short leaf list")
    with caplog.at_level(logging.WARNING, logger="predictor.runtime.choices.pruner"):
        pruner = GemmPruner(HookSettings(model=str(folder), top_k=2, device=H200)).load()
        pruner.load()
    assert pruner.disabled == "no_model" and pruner.ranker is None
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and r.name == "predictor.runtime.choices.pruner"]
    assert len(warnings) == 1 and "Tree=0 leaf_value: 30 values" in warnings[0] and str(folder) in warnings[0]


def test_lightgbm_never_sees_text_the_parser_refused(tmp_path, monkeypatch):
    """The order, not just the outcome: with LightGBM's Booster replaced by a recorder, a refused file never
    reaches it, and a good one does, after the check."""
    import lightgbm as lgb

    seen = []

    class Recorder(lgb.Booster):
        def __init__(self, *args, **kwargs):
            seen.append(kwargs.get("model_str", "")[:4])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(lgb, "Booster", Recorder)
    with pytest.raises(ModelError):
        load_model(bad_model(tmp_path / "bad", "short child list"))
    assert seen == []
    load_model(SHIPPED)
    assert seen == ["tree"]


# --- the compiled walker's cache --------------------------------------------------------------------------------

@pytest.fixture
def walker(fresh_walker):
    return fresh_walker



def _compile(tmp_path: Path, source: str, name: str) -> bytes:
    c = tmp_path / f"{name}.c"
    c.write_text(source)
    so = tmp_path / f"{name}.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True,
                   capture_output=True)
    return so.read_bytes()


def _planted(tmp_path: Path, marker: Path, with_walker: bool = True) -> bytes:
    """A library that writes ``marker`` as soon as it is loaded (its constructor runs inside the loading process),
    with the walker's two functions or without them."""
    functions = "int gp_prepare(void *f) { return 0; }\nint gp_predict(void) { return 0; }\n" if with_walker else ""
    return _compile(tmp_path, textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        {functions}
    """), "planted" + ("" if with_walker else "-bare"))


def _plant(folder: Path, data: bytes, digest: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)  # this user's own cache (whatever the umask)
    path = compiled_walk.library_path(compiled_walk._compiler(), folder)
    path.write_bytes(data)
    if digest:  # the name and the digest are both computable: an attacker writes both
        (folder / (path.name + compiled_walk.DIGEST_SUFFIX)).write_text(hashlib.sha256(data).hexdigest())
    return path


def _scores(forest, X):
    object.__setattr__(forest, "_compiled", False)
    try:
        return forest.predict(X)
    finally:
        object.__setattr__(forest, "_compiled", None)


@pytest.fixture(scope="module")
def forest():
    return load_text_forest(SHIPPED / "model.lgbm.txt")


def _rows(forest, n=40):
    return np.random.default_rng(3).uniform(0, 8, (n, len(forest.feature_names))).astype(np.float32)


def test_a_library_planted_in_a_world_writable_cache_is_never_loaded(walker, tmp_path, forest, caplog):
    """Row 3: another local user's library in a shared, world-writable cache folder (name and digest computed) is
    refused; the walker is built in a private folder of this process and scores as numpy does."""
    marker = tmp_path / "planted-code-ran"
    planted = _plant(walker, _planted(tmp_path, marker))
    walker.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="predictor.artifacts.compiled_walk"):
        lib = compiled_walk.library(wait=True)
    assert not marker.exists(), "the planted library's code ran in this process"
    assert lib is not None and compiled_walk._private is not None
    assert any("writable by group or others" in r.getMessage() for r in caplog.records)
    X = _rows(forest)
    compiled = forest.compiled(wait=True)
    assert compiled and compiled.predict(X) is not None
    np.testing.assert_array_equal(compiled.predict(X), _scores(forest, X))
    assert planted.read_bytes() == _planted(tmp_path, marker)  # theirs is left alone, and unused


def test_a_library_owned_by_another_user_is_never_loaded(walker, tmp_path, forest, monkeypatch, caplog):
    """Row 3, the owner: tests run as root, so "owned by someone else" is simulated by this process reporting
    another uid (``os.getuid``, the ownership check's source): the folder and the library (root's) are then not
    this user's. Nothing of it is loaded; numpy scores."""
    marker = tmp_path / "planted-code-ran"
    _plant(walker, _planted(tmp_path, marker))
    walker.chmod(0o700)
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    with caplog.at_level(logging.WARNING, logger="predictor.artifacts.compiled_walk"):
        compiled_walk.library(wait=True)
        X = _rows(forest)
        scores = forest.predict(X)
    assert not marker.exists(), "the planted library's code ran in this process"
    assert any("owned by uid" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(scores, _scores(forest, X))


@pytest.mark.parametrize("digest", [True, False])
def test_a_cached_library_without_the_walker_is_rebuilt_once(walker, tmp_path, forest, digest, caplog):
    """Row 4: a valid ELF without ``gp_prepare`` (with a matching digest, or none) is not an AttributeError
    escaping into every GEMM: it is replaced by a fresh build, which then scores. Without a matching digest it is
    not even loaded (its constructor never runs)."""
    marker = tmp_path / "bare-ran"
    path = _plant(walker, _planted(tmp_path, marker, with_walker=False), digest=digest)
    with caplog.at_level(logging.WARNING, logger="predictor.artifacts.compiled_walk"):
        lib = compiled_walk.library(wait=True)
    assert lib is not None and hasattr(lib, "gp_prepare")
    assert marker.exists() is digest  # loaded only when its digest matched, and then refused for what it lacks
    assert any("rebuilding it" in r.getMessage() for r in caplog.records)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == (
        walker / (path.name + compiled_walk.DIGEST_SUFFIX)).read_text().strip()
    X = _rows(forest)
    np.testing.assert_array_equal(forest.compiled(wait=True).predict(X), _scores(forest, X))


def test_a_cached_library_of_random_bytes_is_rebuilt(walker, tmp_path, forest):
    """Row 5: random bytes are rebuilt (once), so later processes load the compiled walker again."""
    path = _plant(walker, np.random.default_rng(0).bytes(4096))
    assert compiled_walk.library(wait=True) is not None
    compiled_walk.reset()  # the next process: loads the rebuilt library at once
    assert compiled_walk.library() is not None and compiled_walk._builder is None
    assert path.read_bytes()[:4] == b"\x7fELF"


def test_the_cache_folder_is_made_private_and_the_library_is_not_writable_by_others(walker):
    assert compiled_walk.library(wait=True) is not None
    assert walker.stat().st_mode & 0o777 == 0o700
    (library,) = walker.glob("tree_walk-*.so")
    assert library.stat().st_mode & 0o022 == 0


def test_any_failure_in_the_walker_falls_back_to_numpy(walker, forest, monkeypatch):
    """Whatever the loader raises, the forest scores (numpy) instead of failing every GEMM."""
    def broken(wait=False):
        raise AttributeError("gp_prepare")

    monkeypatch.setattr(compiled_walk, "library", broken)
    X = _rows(forest)
    assert forest.compiled() is False
    np.testing.assert_array_equal(forest.predict(X), _scores(forest, X))


# --- model discovery --------------------------------------------------------------------------------------------

def test_a_junk_model_folder_is_skipped_with_one_warning(tmp_path, monkeypatch, caplog):
    """Row 6: a metadata.json of 200,000 nested '[' (RecursionError in json) in one folder under
    $GEMM_PREDICTOR_MODELS: the hook still finds the good model beside it; one warning names the junk folder."""
    root = tmp_path / "models"
    save_model(make_ranker("tree").fit(synthetic_dataset(20, seed=3), DEVICE), root / "syn-tree",
               {"device": DEVICE.to_dict(), "space": "default", "name": "syn-tree"})
    (root / "junk").mkdir()
    (root / "junk" / METADATA_FILE).write_text("[" * 200_000)
    monkeypatch.setenv(discovery.MODELS_ENV, str(root))
    monkeypatch.setattr(discovery, "_skipped", set())
    with caplog.at_level(logging.WARNING):
        assert discovery.find_model(DEVICE) == root / "syn-tree"
        assert discovery.find_model(DEVICE) == root / "syn-tree"
        pruner = GemmPruner(HookSettings(model=None, top_k=2, device=DEVICE), load=load_runtime_model).load()
    assert pruner.disabled is None and pruner.model_path == root / "syn-tree"
    junk = [r.getMessage() for r in caplog.records if "junk" in r.getMessage()]
    assert len(junk) == 1 and "RecursionError" in junk[0] and "unreadable" in junk[0], junk


# --- metadata ---------------------------------------------------------------------------------------------------

def _meta_copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "m"
    shutil.copytree(SHIPPED, folder)
    meta = json.loads((folder / METADATA_FILE).read_text())
    edit(meta)
    (folder / METADATA_FILE).write_text(json.dumps(meta))  # NaN is written as NaN: what json reads back
    return folder


def _set(path: str, value):
    def edit(meta):
        *parents, last = path.split(".")
        node = meta
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


@pytest.mark.parametrize("path, value, needle", [
    ("device.mem_bandwidth_gbs", float("nan"), "device.mem_bandwidth_gbs is nan"),
    ("device.mem_bandwidth_gbs", 0, "device.mem_bandwidth_gbs is 0"),
    ("device.mem_bandwidth_gbs", -5.0, "device.mem_bandwidth_gbs is -5.0"),
    ("device.sm_count", 0, "device.sm_count is 0"),
    ("device.peak_tflops.float16", 0, "device.peak_tflops.float16 is 0"),
    ("device.peak_tflops.float16", float("inf"), "device.peak_tflops.float16 is inf"),
    ("pruning.margin", float("nan"), "pruning.margin is nan"),
    ("pruning.margin", -100, "pruning.margin is -100"),
    ("problem_ranges.m", [-8, 50176], r"problem_ranges.m is \[-8, 50176\]"),
    ("problem_ranges.m", [9, 1], r"problem_ranges.m is \[9, 1\]"),
    ("problem_ranges.m", "big", "problem_ranges.m is 'big'"),
    ("problem_ranges.ops", [1, 2], r"problem_ranges.ops is \[1, 2\]"),
])
def test_implausible_device_and_pruning_metadata_is_refused(tmp_path, path, value, needle):
    """Row 10: every loader refuses with one line naming the field (NaN bandwidth once flipped a decision, a bad
    margin pruned to cuBLAS alone)."""
    folder = _meta_copy(tmp_path, _set(path, value))
    for load in (load_model, load_runtime_model):
        with pytest.raises(ModelError, match=needle) as info:
            load(folder)
        assert str(info.value).startswith(str(folder)) and "\n" not in str(info.value)


# --- offline scores ---------------------------------------------------------------------------------------------

def test_nan_scores_refuse_the_model_and_write_no_report(tmp_path, monkeypatch):
    """Row 8's other half: a model that scores NaN (its loader let something through: simulated by its ranker's
    ``score``) is refused with one line naming its folder; no report is written under its name."""
    from predictor.offline.evaluate import run_evaluation
    from predictor.rankers.tree import TreeRanker

    rows = synthetic_dataset(20, seed=3)
    folder = save_model(make_ranker("tree").fit(rows, DEVICE), tmp_path / "tree",
                        {"device": DEVICE.to_dict(), "space": "default", "name": "tree"})
    dataset = write_dataset(rows, tmp_path / "d.parquet", METADATA)
    real_score = TreeRanker.score
    monkeypatch.setattr(TreeRanker, "score", lambda self, r, d: np.where(np.arange(len(r)) % 7, real_score(self, r, d),
                                                                          np.nan))
    code = main(["evaluate", "--model", str(folder), "--dataset", str(dataset), "--split", "all",
                 "--out", str(tmp_path / "report")])
    assert code == 2 and not (tmp_path / "report").exists()
    with pytest.raises(offline_metrics.EvaluationError, match=rf"{folder}: model refused: .*scores are not finite"):
        run_evaluation(folder, dataset, tmp_path / "report2", split="all")
    assert not (tmp_path / "report2").exists()
    monkeypatch.setattr(TreeRanker, "score", real_score)  # the same model, finite: a report
    assert main(["evaluate", "--model", str(folder), "--dataset", str(dataset), "--split", "all",
                 "--out", str(tmp_path / "report")]) == 0


def test_finite_scores_refuses_nan_and_inf():
    assert offline_metrics.finite_scores([1.0, 2.0], "r").tolist() == [1.0, 2.0]
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(offline_metrics.NonFiniteScores, match="ranker r: 1 of 2 scores"):
            offline_metrics.finite_scores([1.0, bad], "r")


# --- datasets ---------------------------------------------------------------------------------------------------

def test_one_dataset_given_twice_is_refused(tmp_path):
    """Row 7: ``train --dataset small.parquet small.parquet`` once trained on every row twice."""
    small = write_dataset(synthetic_dataset(10, seed=2), tmp_path / "small.parquet", METADATA)
    code = main(["train", "--ranker", "tree", "--dataset", str(small), str(small), "--out", str(tmp_path / "m")])
    assert code == 2 and not (tmp_path / "m").exists()
    from predictor.offline.train import load_training_rows

    with pytest.raises(DatasetError, match="duplicate problem x candidate rows"):
        load_training_rows([small, small])
    copy = tmp_path / "copy.parquet"
    shutil.copy(small, copy)
    with pytest.raises(DatasetError, match="duplicate problem x candidate rows"):
        load_training_rows([small, copy])


def _with_problem_id(df: pd.DataFrame) -> pd.DataFrame:
    from predictor.core.problem import PROBLEM_FIELDS

    df["problem_id"] = [problem_id(*row) for row in df[list(PROBLEM_FIELDS)].itertuples(index=False)]
    return df


def _bad_rows(edit) -> pd.DataFrame:
    df = synthetic_dataset(4, seed=5)
    edit(df)
    return _with_problem_id(df)


def _set_rows(column, value, where=None):
    def edit(df):
        mask = slice(None) if where is None else where(df)
        df.loc[mask, column] = value
    return edit


@pytest.mark.parametrize("name, edit, needle", [
    ("m = 0", _set_rows("m", 0), "m 0 at row 0"),
    ("m = -8", _set_rows("m", -8), "m -8 at row 0"),
    ("block_m = 0 on Triton rows", _set_rows("block_m", 0, lambda df: df["family"].str.startswith("triton")),
     "a Triton candidate's blocks"),
    ("block_m disagrees with the key", _set_rows("block_m", 512, lambda df: df["family"] == "triton_mm"),
     "its fields make"),
    ("time_us 1e300", _set_rows("time_us", 1e300, lambda df: df["status"] == "ok"), "time_us 1e\\+300"),
    ("negative reps", _set_rows("reps", -3), "reps -3"),
])
def test_implausible_dataset_rows_are_refused(tmp_path, name, edit, needle):
    """Row 11: rows no measurement produces, written as a file of ours (footer digest and all, problem ids
    recomputed), are refused on read with one line naming the file and field."""
    rows = _bad_rows(edit)
    path = tmp_path / "bad.parquet"
    table = pa.Table.from_pandas(rows, preserve_index=False)
    meta = {**(table.schema.metadata or {}), **{k.encode(): json.dumps(v).encode() for k, v in METADATA.items()}}
    write_parquet(table.replace_schema_metadata(meta), path)  # bypasses write_dataset's own checks
    with pytest.raises(DatasetError, match=needle) as info:
        read_dataset(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
    with pytest.raises(DatasetError, match=needle):
        write_dataset(rows, tmp_path / "never.parquet", METADATA)


def test_a_dataset_of_ours_without_its_digest_is_refused_and_a_flipped_byte_never_passes(tmp_path):
    """Row 11's file: our metadata without ``footer_sha256`` (rewritten by another tool, page checksums gone too)
    is refused; so is that file with one byte of a label flipped, which nothing else would notice."""
    good = write_dataset(synthetic_dataset(4, seed=3), tmp_path / "good.parquet", METADATA)
    table = pq.read_table(good)
    kept = {k: v for k, v in table.schema.metadata.items() if k != FOOTER_DIGEST.encode()}
    stripped = tmp_path / "stripped.parquet"
    pq.write_table(table.replace_schema_metadata(kept), stripped, compression="none")
    with pytest.raises(DatasetError, match=f"carries no {FOOTER_DIGEST}"):
        read_dataset(stripped)
    data = bytearray(stripped.read_bytes())
    times = np.asarray(table.column("time_us").to_numpy(zero_copy_only=False), dtype=np.float64)
    first = np.float64(times[~np.isnan(times)][0]).tobytes()
    at = bytes(data).find(first)
    assert at > 0
    data[at + 6] ^= 0x01  # a label changes by a few percent, nothing else
    flipped = tmp_path / "flipped.parquet"
    flipped.write_bytes(bytes(data))
    assert not np.array_equal(pq.read_table(flipped).column("time_us").to_numpy(zero_copy_only=False), times)
    with pytest.raises(DatasetError, match=f"carries no {FOOTER_DIGEST}"):
        read_dataset(flipped)


def test_files_without_our_metadata_are_still_read(tmp_path):
    """Another tool's file (no metadata of ours) is validated by its rows alone, as before."""
    path = tmp_path / "other.parquet"
    pq.write_table(pa.Table.from_pandas(synthetic_dataset(4, seed=3), preserve_index=False), path)
    assert len(read_dataset(path)) > 0


# --- shipped models ---------------------------------------------------------------------------------------------

def test_training_over_a_shipped_model_needs_force(tmp_path, monkeypatch):
    """Row 12: ``train --out models/<shipped>`` is refused (exit 2, the model untouched); with ``--force`` it is
    replaced. The forced write goes to a stand-in shipped root, never the checkout's own models/."""
    small = write_dataset(synthetic_dataset(10, seed=2), tmp_path / "small.parquet", METADATA)
    before = (SHIPPED / "model.lgbm.txt").read_bytes()
    code = main(["train", "--ranker", "tree", "--dataset", str(small), "--out", str(SHIPPED)])
    assert code == 2 and (SHIPPED / "model.lgbm.txt").read_bytes() == before
    assert shipped.shipped_model(SHIPPED) is not None and shipped.shipped_model(tmp_path) is None

    stand_in = tmp_path / "models"
    shutil.copytree(SHIPPED, stand_in / SHIPPED.name)
    monkeypatch.setattr(roots, "shipped_roots", lambda: [stand_in])
    target = stand_in / SHIPPED.name
    assert main(["train", "--ranker", "tree", "--dataset", str(small), "--out", str(target)]) == 2
    assert (target / "model.lgbm.txt").exists()
    assert main(["train", "--ranker", "tree", "--dataset", str(small), "--out", str(target), "--force"]) == 0
    assert read_metadata(target)["model_file"] == "model.json"
    # a new folder beside the shipped ones would ship with the next wheel and be found by the hook: --force too
    assert main(["train", "--ranker", "tree", "--dataset", str(small), "--out", str(stand_in / "mine")]) == 2
    assert not (stand_in / "mine").exists()
