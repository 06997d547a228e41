"""Nothing a user points us at is lost, and no output is ever half-written (issue 17).

``train --out``, ``evaluate --out`` and ``merge DEST`` check their output before any work, refuse a folder or file
that is not one of ours with one line, write beside the target and swap it in whole, and leave nothing behind on
failure. Two runs into one output: the second fails at once with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from predictor.testing.synthetic import METADATA, synthetic_dataset

import predictor.artifacts.model_folder
import predictor.offline.evaluate
import predictor.offline.report
import predictor.offline.train
from collectors.store import merge_parts
from predictor.artifacts import atomic
from predictor.artifacts.model_folder import load_model
from collectors.cli import main  # the whole CLI, collection subcommands included
from predictor.artifacts.schema import read_dataset, write_dataset

TRAIN = ["train", "--ranker", "roofline"]  # nothing to fit: fast, and writes a complete model folder


@pytest.fixture()
def dataset(tmp_path) -> Path:
    return write_dataset(synthetic_dataset(24, seed=2, groups=4), tmp_path / "data" / "syn.parquet", METADATA)


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    code = main([str(a) for a in argv])
    err = [line for line in capsys.readouterr().err.splitlines() if "gemm-predictor: error:" in line]
    return code, err


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(folder.rglob("*"))}


def no_work(monkeypatch):
    """Make any training or evaluation work fail loudly: a refusal must come before it."""
    def boom(*args, **kwargs):
        raise AssertionError("the work started before the output was checked")
    monkeypatch.setattr(predictor.offline.train, "load_training_rows", boom)
    monkeypatch.setattr(predictor.artifacts.model_folder, "load_model", boom)


def test_train_never_empties_a_folder_that_is_not_a_model_folder(tmp_path, dataset, capsys, monkeypatch):
    mine = tmp_path / "work" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("precious")
    (mine / "metadata.json").write_text('{"something": "else"}')  # a metadata.json, but not ours
    before = listing(tmp_path / "work")
    no_work(monkeypatch)
    for out in (mine, tmp_path / "work" / "mine" / "..", mine / "notes.txt"):  # a folder, a '..' path, a file
        code, err = run_cli([*TRAIN, "--dataset", dataset, "--out", out], capsys)
        assert code != 0 and len(err) == 1, err
        assert "not a model folder" in err[0] or "is a file, not a folder" in err[0] or "not one we write" in err[0]
    assert listing(tmp_path / "work") == before  # untouched, and no hidden leftovers beside it


def test_output_paths_are_checked_before_the_work(tmp_path, dataset, capsys, monkeypatch):
    (tmp_path / "afile").write_text("x")
    no_work(monkeypatch)
    cases = [(tmp_path / "afile" / "m", "is a file, not a folder"), ("/", "filesystem root")]
    for out, needle in cases:
        for command in ([*TRAIN, "--dataset", dataset, "--out", out], ["evaluate", "--out", out]):
            code, err = run_cli(command, capsys)
            assert code != 0 and len(err) == 1 and needle in err[0], (command, err)
    real_access = os.access  # a read-only parent (simulated: the tests may run as root, who may write anywhere)
    monkeypatch.setattr(atomic.os, "access", lambda p, mode: False if Path(p) == tmp_path / "ro" else real_access(p, mode))
    (tmp_path / "ro").mkdir()
    for command in ([*TRAIN, "--dataset", dataset, "--out", tmp_path / "ro" / "new" / "m"],
                    ["evaluate", "--out", tmp_path / "ro" / "report"]):
        code, err = run_cli(command, capsys)
        assert code != 0 and len(err) == 1 and "permission denied" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "data", "ro"] and not any((tmp_path / "ro").iterdir())


def test_missing_parents_are_made_and_removed_again_on_failure(tmp_path, dataset, capsys, monkeypatch):
    out = tmp_path / "a" / "b" / "m"
    code, err = run_cli([*TRAIN, "--dataset", dataset, "--out", out], capsys)
    assert code == 0 and load_model(out)[0].name == "roofline"
    monkeypatch.setattr(predictor.artifacts.model_folder, "model_card", lambda meta: (_ for _ in ()).throw(KeyboardInterrupt()))
    # interrupted while saving (Ctrl-C: one line, exit 130): nothing of it is left
    assert main([*TRAIN, "--dataset", str(dataset), "--out", str(tmp_path / "x" / "y" / "m")]) == 130
    assert not (tmp_path / "x").exists()
    before = listing(tmp_path / "a")
    # interrupted while replacing: the old model stays, whole
    assert main([*TRAIN, "--dataset", str(dataset), "--out", str(out)]) == 130
    assert listing(tmp_path / "a") == before


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_model_folder_is_replaced_whole_and_notes_are_kept(tmp_path, dataset, capsys, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    out = tmp_path / "models" / "m"
    assert run_cli([*TRAIN, "--dataset", dataset, "--out", out], capsys)[0] == 0
    (out / "NOTES.md").write_text("why this model")  # not ours: carried into the new folder
    first = json.loads((out / "metadata.json").read_text())
    assert run_cli(["train", "--ranker", "tree", "--dataset", dataset, "--out", out], capsys)[0] == 0
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["ranker"]["name"] == "tree" != first["ranker"]["name"] and (out / "NOTES.md").read_text() == "why this model"
    assert sorted(p.name for p in out.iterdir()) == ["MODEL_CARD.md", "NOTES.md", "metadata.json", "model.json"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no .tmp, .old or .lock beside it


def test_a_second_train_into_the_same_folder_fails_at_once(tmp_path, dataset):
    out = tmp_path / "m"
    command = [sys.executable, "-m", "predictor.cli", *TRAIN, "--dataset", str(dataset), "--out", str(out)]
    with atomic.claim_output(out):  # another run holds it (this process, for the test)
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if "gemm-predictor: error:" in line]
    assert done.returncode != 0 and len(errors) == 1 and "another run is writing it now" in errors[0]
    assert "Traceback" not in done.stderr and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # the lock file went with the claim
    # two at once: whoever comes second fails with that line; never both silently, never a broken folder
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert any(code == 0 for code, _ in results)
    for code, stderr in results:
        assert code == 0 or ("another run is writing it now" in stderr and "Traceback" not in stderr)
    assert load_model(out)[0].name == "roofline"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "m"]


def test_claims_are_exclusive_between_threads_of_processes(tmp_path):
    """The lock is the kernel's (flock): a claim from another process fails while one is held, then succeeds."""
    out = tmp_path / "o"
    code = ("import sys; from predictor.artifacts.atomic import claim_output\n"
            "try:\n    cm = claim_output(sys.argv[1]); cm.__enter__()\nexcept ValueError as e:\n    print(e); sys.exit(3)\n")
    held = threading.Event()
    with atomic.claim_output(out):
        held.set()
        assert subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True).returncode == 3
    assert subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True).returncode == 0
    assert held.is_set() and not any(p.name.endswith(".lock") for p in tmp_path.iterdir())


def test_an_interrupted_evaluation_leaves_the_old_report_whole(tmp_path, capsys, monkeypatch):
    from predictor.offline.evaluate import evaluate, write_report
    from test_evaluate import ByInductorRank, ByTime
    from predictor.testing.synthetic import DEVICE as DEV

    rows = synthetic_dataset(12, seed=3)
    device = predictor.offline.evaluate.DeviceInfo(**DEV)
    out = tmp_path / "report"
    write_report(evaluate(rows, {"a": ByInductorRank(), "random": None}, device, ks=(1, 5)), out, {"main": "a"})
    (out / "triton_only.md").write_text("a table another script wrote here")
    before = listing(out)
    monkeypatch.setattr(predictor.offline.report, "_report_markdown", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # after the new plots and metrics.json were written, before report.md
        write_report(evaluate(rows, {"b": ByTime(), "random": None}, device, ks=(1, 5)), out, {"main": "b"})
    assert listing(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    monkeypatch.undo()
    write_report(evaluate(rows, {"b": ByTime(), "random": None}, device, ks=(1, 5)), out, {"main": "b"})
    assert json.loads((out / "metrics.json").read_text())["context"]["main"] == "b"
    assert (out / "triton_only.md").read_text() == "a table another script wrote here"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("x")
    with pytest.raises(ValueError, match="not a report folder"):
        write_report(evaluate(rows, {"b": ByTime()}, device, ks=(1,)), tmp_path / "other", {"main": "b"})
    assert listing(tmp_path / "other") == {"thesis.tex": b"x"}


def test_merge_checks_its_destination_first(tmp_path, capsys):
    parts = tmp_path / "parts"
    write_dataset(synthetic_dataset(6, seed=1), parts / "part-s0of1-g0-00000.parquet", METADATA)
    (tmp_path / "dest_dir").mkdir()
    (tmp_path / "notes.txt").write_text("not a dataset")
    before = listing(tmp_path)
    for dest, needle in ((tmp_path / "dest_dir", "is a folder"), (tmp_path / "notes.txt", "not a dataset file"),
                         (tmp_path / "notes.txt" / "x.parquet", "is a file, not a folder")):
        code, err = run_cli(["merge", parts, dest], capsys)
        assert code != 0 and len(err) == 1 and needle in err[0], err
    assert listing(tmp_path) == before  # no empty.tmp, nothing written
    merged = tmp_path / "merged.parquet"
    assert run_cli(["merge", parts, merged], capsys)[0] == 0
    assert run_cli(["merge", parts, merged], capsys)[0] == 0  # a dataset file of ours is replaced
    assert len(read_dataset(merged)) == len(synthetic_dataset(6, seed=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest_dir", "merged.parquet", "notes.txt", "parts"]


def test_a_failed_dataset_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    def broken(table, where, **kwargs):
        Path(where).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_dataset(synthetic_dataset(4), tmp_path / "new" / "d.parquet", METADATA)
    assert not (tmp_path / "new").exists()


def test_merge_parts_refuses_before_reading(tmp_path):
    with pytest.raises(ValueError, match="not a folder of parts"):
        merge_parts(tmp_path / "missing", tmp_path / "m.parquet")
    assert list(tmp_path.iterdir()) == []
