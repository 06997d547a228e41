"""The architecture sweep's own bookkeeping (its compiles are what tests/test_dynamic_architectures.py checks):
families resumed from the results file are not run again, an unknown family is refused before any work, and the
table counts each status."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from benchmarks import architecture_sweep as sweep  # noqa: E402 -- needs transformers


def test_the_families_are_transformers_causal_lms():
    names = sweep.families()
    assert {"llama", "gpt2", "mixtral", "qwen3_moe"} <= set(names)


def test_a_rerun_runs_only_the_families_not_yet_in_the_results(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep.json"
    ran = []
    monkeypatch.setattr(sweep, "decide_gemvs_as", lambda gpu: None)
    monkeypatch.setattr(sweep, "in_child", lambda f, gpu, timeout: ran.append(f) or {"family": f, "status": "ok",
                                                                                      "max_abs_err": 1e-7})
    assert sweep.main(["--out", str(out), "--families", "llama,gpt2"]) == 0
    assert sweep.main(["--out", str(out), "--families", "llama,gpt2,mixtral"]) == 0
    assert ran == ["llama", "gpt2", "mixtral"]
    records = json.loads(out.read_text())["records"]
    assert [r["family"] for r in records] == ["llama", "gpt2", "mixtral"]
    assert "3 ok, 0 mismatch" in capsys.readouterr().out.splitlines()[-1]


def test_an_unknown_family_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sweep.main(["--out", str(tmp_path / "s.json"), "--families", "llama,not_a_model"])
    assert "not_a_model" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_the_table_counts_each_status():
    text = sweep.table([{"family": "a", "status": "ok", "max_abs_err": 1e-7},
                        {"family": "b", "status": "not_built", "error": "ValueError: widths"},
                        {"family": "c", "status": "mismatch", "max_abs_err": 0.5}])
    assert "| b | not_built (ValueError: widths) |" in text
    assert text.splitlines()[-1] == "1 ok, 1 mismatch, 0 compile_error, 0 crashed, 0 timeout, 1 not_built"


def _fake_python(tmp_path, body):
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_a_family_whose_process_dies_is_recorded_as_crashed(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep.sys, "executable", _fake_python(tmp_path, "echo 'Killed: out of memory' >&2; exit 137"))
    record = sweep.in_child("blt", "NVIDIA H100 80GB HBM3", timeout=30)
    assert record == {"family": "blt", "status": "crashed", "error": "exit status 137: Killed: out of memory"}


def test_a_family_that_hangs_is_stopped_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep.sys, "executable", _fake_python(tmp_path, "sleep 30"))
    record = sweep.in_child("blt", "NVIDIA H100 80GB HBM3", timeout=0.5)
    assert record["status"] == "timeout"
