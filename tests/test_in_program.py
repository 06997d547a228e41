"""The in-program agreement harness (collectors/in_program/collect.py) on CPU: the policy's runner-up, the hook's
decision observer on stand-in Inductor objects, flipping one table entry, the figure, and the runner end to end on
tiny-mlp (on a CPU no GEMM reaches the decide policy: the record and base runs and resumption are what run)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from predictor.testing.synthetic import METADATA

from collectors.in_program import agreement as agreement_module
from collectors.in_program import collect as in_program
from collectors.in_program import decisions
from predictor.core.device import DeviceInfo
from predictor.runtime.compile import recommended_settings
from predictor.runtime.choices.pruner import GemmPruner
from predictor.runtime.choices.policy import decide_one, runner_up
from predictor.testing import fakes

DEVICE = DeviceInfo.from_metadata(METADATA)
REPO = Path(__file__).resolve().parents[1]


def test_runner_up_is_the_other_side_of_the_decision():
    scores, is_aten = np.array([1.0, 0.5, 4.0, 2.0]), [True, False, False, False]
    assert decide_one(scores, is_aten, True, 2.0) == 2 and runner_up(scores, is_aten, 2) == (0, 3.0)
    assert decide_one(scores, is_aten, True, 3.5) == 0 and runner_up(scores, is_aten, 0) == (2, 3.0)
    assert runner_up(np.array([1.0, 2.0]), [True, True], 1) == (None, None)
    assert runner_up(np.array([1.0, 2.0]), [False, False], 1) == (None, None)


class FakeKeyer:
    def make_lookup_key(self, kernel_inputs, op_name, include_device=False):
        if kernel_inputs.device_type != "cuda":
            return None
        return f"GPU+{kernel_inputs.shape}+{op_name}"


class ScoreRanker:
    """aten scores ``aten``; the Triton configs score by position (the last is the favourite, 3.0)."""

    name = "fixed"

    def __init__(self, aten: float) -> None:
        self.aten = aten

    def score(self, rows, device):
        return np.where(rows["family"] == "aten", self.aten, np.arange(len(rows), dtype=float))


def inputs(m, n, k, device_type="cuda"):
    x = fakes.mm_inputs(m, n, k, torch.float16)
    x.shape, x.device_type = (m, n, k), device_type
    return x


def mm_choices():
    tiles = [(64, 64, 32, 3, 4), (128, 64, 32, 4, 8), (128, 128, 64, 3, 8)]
    return [fakes.ktc("aten::mm")] + [
        fakes.ktc("triton::mm", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_stages=s, num_warps=w, GROUP_M=8)
        for bm, bn, bk, s, w in tiles]


def pruner(aten_score):
    settings = dataclasses.replace(recommended_settings(), device=DEVICE)
    return GemmPruner(settings, ranker=ScoreRanker(aten_score), metadata={"device": DEVICE.to_dict()})


def test_the_observer_records_each_decision_and_its_runner_up(caplog):
    choices = mm_choices()
    log_ = decisions.AlternativeLog(FakeKeyer())
    p = pruner(aten_score=0.5)  # Triton favourite 3.0 leads cuBLAS by 2.5 >= the gap: the hook takes it
    p.decision_observer = log_
    assert p.filter(choices, inputs(512, 768, 3072), "mm") == [choices[-1]]
    assert p.filter(choices, inputs(512, 768, 3072), "mm") == [choices[-1]]  # the same key again: counted
    p.ranker = ScoreRanker(6.0)  # cuBLAS scored 3.0 above the favourite (> the 2.5 margin): it stays, the favourite is the runner-up
    p._scores.clear()
    assert p.filter(choices, inputs(64, 768, 3072), "mm") == [choices[0]]
    p.filter(choices, inputs(8, 8, 8, "cpu"), "mm")  # decided (settings.device set), but keyless: not a row
    assert dict(log_.skipped) == {"no_key": 1}
    rows = log_.finish(DEVICE)
    triton_kw = choices[-1].params.to_kwargs()
    assert [(r["key"], r["count"], r["chosen_side"], r["gap"]) for r in rows] == [
        ("GPU+(512, 768, 3072)+mm", 2, "triton", 2.5), ("GPU+(64, 768, 3072)+mm", 1, "cublas", -3.0)]
    assert rows[0]["chosen"] == {"template_id": "triton::mm", **triton_kw}
    assert rows[0]["alternative"] == {"template_id": "aten::mm"}
    assert rows[1]["chosen"] == {"template_id": "aten::mm"}
    assert rows[1]["alternative"] == {"template_id": "triton::mm", **triton_kw}
    assert rows[0]["ideal_us"] > rows[1]["ideal_us"] > 0 and rows[0]["dims"] == {"b": 1, "m": 512, "n": 768, "k": 3072}

    def broken(*_):
        raise RuntimeError("boom")

    p.decision_observer = broken
    with caplog.at_level(logging.WARNING, logger="predictor.runtime.choices"):
        assert p.filter(choices, inputs(64, 768, 3072), "mm") == [choices[0]]  # the decision stands
        assert p.filter(choices, inputs(32, 768, 3072), "mm") == [choices[0]]
    assert [m for m in caplog.messages if "boom" in m] == [
        "gemm-predictor: observing the decision for mm failed (RuntimeError: boom)"]


def _rows():
    return [{"key": "k1", "alternative": {"template_id": "aten::mm"}, "ideal_us": 5.0},
            {"key": "k2", "alternative": None, "ideal_us": 50.0},
            {"key": "k3", "alternative": {"template_id": "triton::mm", "BLOCK_M": 64}, "ideal_us": 20.0},
            {"key": "k4", "alternative": {"template_id": "aten::mm"}, "ideal_us": None}]


def test_selection_flip_and_plan():
    rows = _rows()
    assert decisions.select(rows, 8) == [2, 0, 3] and decisions.select(rows, 2) == [2, 0]
    table = {"k1": [{"template_id": "triton::mm", "BLOCK_M": 128}], "k3": [{"template_id": "aten::mm"}],
             "other": [{"template_id": "aten::mm"}]}
    flipped = decisions.flipped_table(table, rows[2])
    assert flipped == {**table, "k3": [{"template_id": "triton::mm", "BLOCK_M": 64}]}
    assert table["k3"] == [{"template_id": "aten::mm"}]  # untouched
    flipped["k3"][0]["BLOCK_M"] = 1
    assert rows[2]["alternative"]["BLOCK_M"] == 64
    with pytest.raises(ValueError, match="not in the table"):
        decisions.flipped_table(table, rows[3])
    assert in_program.plan(None, 8, 3) == ["record"]
    assert in_program.plan({"rows": rows}, 2, 2) == ["base:0", "base:1", "flip:2", "flip:0"]


def test_agreement_and_its_table():
    rows = [{**r, "problem": r["key"], "op_name": "mm", "count": 1, "gap": 1.0, "chosen_side": "cublas"}
            for r in _rows()]
    rec = lambda run, ms, status="ok": {"model": "m", "run": run, "step_ms": ms, "status": status}  # noqa: E731
    records = [rec("record", 1.0), rec("base:0", 1.00), rec("base:1", 1.004), rec("base:2", 0.998),
               rec("flip:0", 1.02), rec("flip:2", 0.95), rec("flip:3", 0.995), rec("flip:1", None, "error")]
    s = agreement_module.agreement(records, {"m": {"rows": rows}})
    assert s["n"] == 3 and s["agreement"] == pytest.approx(2 / 3)
    assert s["noise"]["m"] == pytest.approx(0.006)
    by = {g["problem"]: g for g in s["gemms"]}
    assert by["k1"]["agrees"] and by["k1"]["beyond_noise"] and by["k1"]["hook_ms"] == 1.0
    assert not by["k3"]["agrees"] and by["k3"]["alternative"] == "triton::mm"
    assert by["k4"]["agrees"] and not by["k4"]["beyond_noise"]  # 0.5% faster: inside 1% and inside the noise
    md = agreement_module.markdown(s, {"gpu": "NVIDIA H100", "torch": "2.11", "triton": "3.6"})
    assert "66.7% of 3 GEMMs" in md and "NVIDIA H100" in md and md.count("| NO |") == 1


def test_runner_end_to_end_on_cpu_and_resumes(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    cmd = [sys.executable, "-m", "collectors.in_program.collect", "--models", "tiny-mlp", "--out", str(tmp_path),
           "--noise-repeats", "2", "--repeats", "3", "--lanes", "2"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads((tmp_path / "results.json").read_text())
    assert records[0]["run"] == "record"  # the table's run comes before the runs that read it
    assert sorted((r["run"], r["status"]) for r in records) == [("base:0", "ok"), ("base:1", "ok"), ("record", "ok")]
    assert all(r["torch"] == torch.__version__ and "triton" in r and "gpu" in r for r in records)
    doc = json.loads((tmp_path / "tables" / "tiny-mlp.json").read_text())
    assert doc["rows"] == [] and doc["table"] == {}  # CPU GEMMs: no lookup key, not decided
    assert records[1]["lookup_hits"] == 0 and records[0]["hook_stats"]["gemms_seen"] >= 2  # empty table: misses
    summary = json.loads((tmp_path / "agreement.json").read_text())
    assert summary["n"] == 0 and summary["agreement"] is None and (tmp_path / "agreement.md").exists()
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0 and "record" not in again.stdout.split("agreement:")[0]  # nothing rerun
    assert json.loads((tmp_path / "results.json").read_text()) == records


def _lock_is_free(lock_path) -> bool:
    """Whether another lane (another open file) could take the GPU lock now."""
    import fcntl

    with open(lock_path, "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def test_timing_lock_is_exclusive_across_open_files(tmp_path, monkeypatch):
    import fcntl

    from collectors.programs.harness import GPU_LOCK_ENV, timing_lock

    lock_path = tmp_path / "gpu.lock"
    monkeypatch.setenv(GPU_LOCK_ENV, str(lock_path))
    with timing_lock(), open(lock_path, "a") as other:  # another run's descriptor cannot take it meanwhile
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock_path, "a") as other:  # released on exit
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    monkeypatch.delenv(GPU_LOCK_ENV)
    with timing_lock() as held:  # unset: nothing to lock
        assert held.file is None


def test_inductor_benchmarks_take_turns_with_other_lanes_timings(tmp_path, monkeypatch):
    """Under ``benchmarks_take_turns`` an autotuning benchmark holds the GPU lock (another lane cannot time
    meanwhile), a timing that benchmarks inside it locks once, and the benchmarker is restored on exit."""
    from torch._inductor.runtime.benchmarking import benchmarker

    from benchmarks.zoo.worker import benchmarks_take_turns
    from collectors.programs.harness import GPU_LOCK_ENV, timing_lock

    lock_path = tmp_path / "gpu.lock"
    monkeypatch.setenv(GPU_LOCK_ENV, str(lock_path))
    held = []

    def other_lane_can_time() -> bool:
        return _lock_is_free(lock_path)

    monkeypatch.setattr(type(benchmarker), "benchmark_gpu", lambda self, fn, **kw: held.append(other_lane_can_time()))
    with benchmarks_take_turns():
        benchmarker.benchmark_gpu(lambda: None)
        with timing_lock():  # a timed step that benchmarks: the nested hold does not wait on itself
            benchmarker.benchmark_gpu(lambda: None)
        assert other_lane_can_time()
    assert held == [False, False]
    assert "benchmark_gpu" not in vars(benchmarker)  # the class's method again
    benchmarker.benchmark_gpu(lambda: None)
    assert held[-1] is True


def test_a_paired_record_stands_for_base_and_flip_runs():
    from collectors.in_program.agreement import agreement, paired_as_runs

    row = {"problem": "p", "op_name": "mm", "count": 1, "ideal_us": 3.0, "gap": -1.0, "chosen_side": "cublas",
           "alternative": {"template_id": "triton::mm"}}
    base = [0.99, 1.0, 1.01, 1.0, 1.0]
    paired = {"model": "m", "run": "paired", "status": "ok", "step_ms": 1.0,
              "variants": {"base": {"step_ms": 1.0, "round_ms": base},
                           # flip:0 is 5% faster in every round; a slow round (1.2) moves it with the base
                           "flip:0": {"step_ms": 0.95, "round_ms": [0.95 * b for b in base], "misses": 0},
                           # 0.5% slower but for one odd round: the median ratio holds, the quartiles too
                           "flip:1": {"step_ms": 1.2, "round_ms": [1.005 * b for b in base[:4]] + [1.2], "misses": 0},
                           # flips around the base by +-4%: too noisy to tell 1%
                           "flip:2": {"step_ms": 1.0, "round_ms": [b * f for b, f in zip(base, (0.96, 1.04, 0.96,
                                                                                             1.04, 1.0))]}}}
    runs = paired_as_runs(paired)
    assert [r["run"] for r in runs] == ["base:0", "base:1", "base:2", "base:3", "base:4", "flip:0", "flip:1", "flip:2"]
    stale = {"model": "m", "run": "base:0", "status": "ok", "step_ms": 5.0}  # a separate-process run: superseded
    summary = agreement([stale, paired], {"m": {"rows": [row, {**row, "gap": 0.5}, row]}})
    assert summary["noise"]["m"] == pytest.approx(0.02)
    first, second, third = summary["gemms"]
    assert first["hook_ms"] == 1.0 and first["alternative_ms"] == pytest.approx(0.95)
    assert not first["agrees"] and first["beyond_noise"] and first["resolved"]
    assert second["alternative_ms"] == pytest.approx(1.005) and second["agrees"] and not second["beyond_noise"]
    assert second["ratio_iqr"] == pytest.approx(0.0, abs=1e-9) and second["resolved"]
    assert third["ratio_iqr"] == pytest.approx(0.08) and not third["resolved"]
    assert summary["agreement"] == 0.5 and summary["n"] == 2 and summary["unresolved"] == 1


def test_batched_step_time_is_the_mean_of_back_to_back_calls():
    import time

    import torch

    from collectors.programs.step import batched_step_ms

    calls = []
    ms = batched_step_ms(lambda: (calls.append(1), time.sleep(0.002)), 5, torch.device("cpu"))
    assert len(calls) == 5 and 2.0 <= ms < 10.0



def test_a_runs_model_build_and_eager_reference_take_turns_with_other_lanes(tmp_path, monkeypatch):
    """Building the model and its eager reference run on the GPU outside any compile: they hold the lock, so they
    never overlap another lane's timing or autotuning benchmark; the compile after them does not hold it."""
    import dataclasses

    import torch

    from benchmarks.zoo import modes, worker
    from collectors.programs import harness, models, step

    lock_path = tmp_path / "gpu.lock"
    monkeypatch.setenv(harness.GPU_LOCK_ENV, str(lock_path))
    seen = {}

    def other_lane_can_time() -> bool:
        return _lock_is_free(lock_path)

    tiny = models.get("tiny-mlp")

    def build(device):
        seen["build"] = other_lane_can_time()
        return tiny.build(device)

    def compile_(self, module):
        seen["compile"] = other_lane_can_time()
        return module  # eager: the step runs as built

    monkeypatch.setattr(modes.Mode, "compile", compile_)
    record = dict.fromkeys(worker.RECORD_KEYS)
    step.measure(record, dataclasses.replace(tiny, build=build), modes.parse_mode("plain"), 3, torch.device("cpu"))
    assert seen == {"build": False, "compile": True}
    assert record["step_ms"] > 0 and record["correct"] is True


def test_the_time_a_run_waits_for_the_lock_is_counted(tmp_path, monkeypatch):
    """Waiting for another lane's turn adds to ``_HELD["waited"]`` (a compile's share is taken out of its compile
    time); an uncontended hold adds next to nothing."""
    import fcntl
    import threading
    import time

    from collectors.programs import harness

    lock_path = tmp_path / "gpu.lock"
    monkeypatch.setenv(harness.GPU_LOCK_ENV, str(lock_path))
    monkeypatch.setitem(harness._HELD, "waited", 0.0)
    monkeypatch.setenv(harness.WAITED_FILE_ENV, str(tmp_path / "waited_s"))  # what the runner reads
    with harness.timing_lock():
        pass
    assert harness._HELD["waited"] < 0.1
    other = open(lock_path, "a")
    fcntl.flock(other, fcntl.LOCK_EX)  # another lane is timing
    threading.Timer(0.3, lambda: (fcntl.flock(other, fcntl.LOCK_UN), other.close())).start()
    t0 = time.perf_counter()
    with harness.timing_lock():
        pass
    assert 0.25 <= harness._HELD["waited"] <= time.perf_counter() - t0 + 0.01
    assert abs(harness.waited_seconds(tmp_path / "waited_s") - harness._HELD["waited"]) < 0.01
    assert harness.waited_seconds(tmp_path / "missing") == 0.0
