"""The label store (predictor.artifacts.label_store) and the feedback recorder (predictor.runtime.choices.feedback) on a CPU."""

from __future__ import annotations

import json
import logging
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from predictor.artifacts import label_store
from predictor.artifacts.label_store import part_paths, read_store, shard_of
from predictor.runtime.choices.feedback import LabelRecorder
from predictor.artifacts.schema import read_dataset, validate_frame
from predictor.testing.fakes import FakeNode

GPU, CC = "Test GPU", "9.0"


class Choice:
    """What the recorder reads of a ChoiceCaller (hashable by identity, as Inductor's are)."""

    def __init__(self, name: str, description: str = "") -> None:
        self.name, self.description = name, description


choice = Choice


TRITON = [choice("triton_mm_1", "BLOCK_K=32, BLOCK_M=64, BLOCK_N=64, GROUP_M=8, num_stages=3, num_warps=4"),
          choice("triton_mm_2", "BLOCK_K=64, BLOCK_M=128, BLOCK_N=128, GROUP_M=8, num_stages=4, num_warps=8"),
          choice("extern_kernels.mm")]


def benchmark(recorder: LabelRecorder, m: int, n: int = 256, k: int = 512, scale: float = 1.0, op: str = "mm") -> None:
    """One feedback-saver call as Inductor makes it: timings (ms) per ChoiceCaller, the op, the input nodes."""
    import torch

    nodes = [FakeNode((m, k), (k, 1), torch.float16), FakeNode((k, n), (n, 1), torch.float16)]
    timings = {c: (0.010 + 0.002 * i) * scale for i, c in enumerate(TRITON)}
    recorder(timings, op, nodes, TRITON, lambda: {}, {})


def recorder(store: Path) -> LabelRecorder:
    return LabelRecorder(store, GPU, CC, device={"gpu": GPU, "cc": CC}, cuda_only=False)


def test_benchmarks_become_contract_rows_in_verified_parts(tmp_path):
    rec = recorder(tmp_path / "store")
    for m in (64, 128, 256):
        benchmark(rec, m)
    benchmark(rec, 64)  # Inductor replaying its autotune cache: the same floats again, not a new measurement
    benchmark(rec, 64, op="scaled_mm")  # not an op the recorder reads
    rec.flush()
    stats = rec.stats()
    assert stats["benchmarks"] == 5 and stats["replayed"] == 1 and stats["skipped_op"] == 1 and stats["rows"] == 9
    read = read_store(tmp_path / "store")
    assert len(read.tables) == 1 and not read.skipped
    frame = validate_frame(read.tables[0].to_pandas(), "part")
    assert set(frame["collector"]) == {"inductor-feedback"} and set(frame["gpu"]) == {GPU}
    assert sorted(frame["candidate"].unique()) == ["aten/mm", "triton_mm/128x128x64/s4/w8/g8",
                                                   "triton_mm/64x64x32/s3/w4/g8"]
    one = frame[(frame.m == 128) & (frame.candidate == "aten/mm")].iloc[0]
    assert (one["n"], one["k"], one["dtype"], one["time_us"]) == (256, 512, "float16", pytest.approx(14.0))
    # a part is a dataset of its own, readable by the project's loader
    assert len(read_dataset(part_paths(tmp_path / "store")[0])) == 9


def test_the_same_gemm_measured_again_goes_to_a_new_part(tmp_path):
    rec = recorder(tmp_path)
    benchmark(rec, 64)
    benchmark(rec, 64, scale=1.1)  # a true re-measurement (other process, caches off)
    rec.flush()
    assert len(part_paths(tmp_path)) == 2


def _write_parts(store: str, count: int) -> None:
    rec = LabelRecorder(store, GPU, CC, cuda_only=False)
    for i in range(count):
        benchmark(rec, 16 * (i + 1), scale=1.0 + 0.01 * i)
        rec.flush()


def test_several_processes_append_at_once_and_every_part_reads_back(tmp_path):
    store = tmp_path / "store"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_parts, args=(str(store), 3)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    read = read_store(store)
    assert len(read.parts) == 12 and not read.skipped
    assert sum(t.num_rows for t in read.tables) == 36
    assert not [p for p in store.iterdir() if p.name.startswith(".")]  # no staging leftovers


def test_torn_tampered_and_foreign_parts_are_skipped_in_one_line_each(tmp_path, caplog):
    store = tmp_path / "store"
    rec = recorder(store)
    for m in (32, 64, 96, 128):
        benchmark(rec, m, scale=1 + m / 1000)
        rec.flush()
    torn, tampered, unsigned, good = part_paths(store)
    torn.write_bytes(torn.read_bytes()[:-100])
    data = bytearray(tampered.read_bytes())
    data[200] ^= 0xFF
    tampered.write_bytes(bytes(data))
    unsigned.with_name(unsigned.name + ".sha256").unlink()
    foreign = LabelRecorder(store, "Other GPU", "8.0", cuda_only=False)
    benchmark(foreign, 64)
    foreign.flush()
    with caplog.at_level(logging.WARNING, logger="predictor.artifacts.label_store"):
        read = read_store(store, gpu=GPU, cc=CC)
    assert [p["path"] for p in read.parts] == [str(good)]
    reasons = dict(read.skipped)
    assert "does not match its sidecar" in reasons[str(torn)]
    assert "does not match its sidecar" in reasons[str(tampered)]
    assert "no " in reasons[str(unsigned)] and "sidecar" in reasons[str(unsigned)]
    assert any("Other GPU" in why for why in reasons.values())
    assert len([r for r in caplog.records if "skipping label part" in r.getMessage()]) == 4
    assert all("\n" not in r.getMessage() for r in caplog.records)


def test_a_sidecar_rewritten_to_match_a_changed_part_is_caught_by_the_page_checksums(tmp_path):
    rec = recorder(tmp_path)
    benchmark(rec, 64)
    rec.flush()
    part = part_paths(tmp_path)[0]
    data = bytearray(part.read_bytes())
    data[len(data) // 3] ^= 0x01
    part.write_bytes(bytes(data))
    digest, size = label_store._sha256_file(part)
    side = part.with_name(part.name + ".sha256")
    side.write_text(json.dumps({**json.loads(side.read_text()), "sha256": digest, "bytes": size}))
    read = read_store(tmp_path)
    assert not read.parts and len(read.skipped) == 1


def test_the_cap_refuses_new_parts_and_keeps_the_old_ones(tmp_path, monkeypatch, caplog):
    rec = recorder(tmp_path)
    benchmark(rec, 64)
    rec.flush()
    first = part_paths(tmp_path)
    used = sum(p.stat().st_size for p in tmp_path.iterdir())
    monkeypatch.setenv(label_store.CAP_ENV, str((used + 100) / (1 << 20)))
    with caplog.at_level(logging.INFO, logger="predictor.runtime.choices.feedback"):
        for m in (128, 256):
            benchmark(rec, m)
            rec.flush()
    assert part_paths(tmp_path) == first  # nothing dropped, nothing added
    assert len([r for r in caplog.records if "cap" in r.getMessage()]) == 1
    assert rec.stats().get("parts", 0) == 1


def test_recording_errors_are_logged_once_and_never_raise(tmp_path, caplog):
    rec = recorder(tmp_path)
    with caplog.at_level(logging.WARNING, logger="predictor.runtime.choices.feedback"):
        for _ in range(3):
            rec({TRITON[0]: 0.01}, "mm", [object(), object()], TRITON[:1])  # nodes without sizes
    assert rec.stats()["errors"] == 3
    assert len([r for r in caplog.records if "recording a benchmark" in r.getMessage()]) == 1


def test_sharding_is_disjoint_complete_and_stable():
    names = [label_store.new_part_name() for _ in range(400)]
    shards = [[n for n in names if shard_of(n, 7) == i] for i in range(7)]
    assert sorted(sum(shards, [])) == sorted(names)
    assert all(len(s) > 20 for s in shards)  # spread, not all in one
    assert shard_of("labels-a-1-x.parquet", 7) == shard_of("/elsewhere/labels-a-1-x.parquet", 7)
    # the same answer in another interpreter (Python's own hash() is salted per process)
    code = "from predictor.artifacts.label_store import shard_of; print([shard_of(n, 7) for n in %r])" % names[:20]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [shard_of(n, 7) for n in names[:20]]
    with pytest.raises(ValueError, match="shards"):
        shard_of("x", 0)
    # read_store's shard selection is exactly this function
    assert sorted(shards[3]) == sorted(n for n in names if shard_of(n, 7) == 3)


def test_the_default_store_is_per_user_and_per_gpu(monkeypatch, tmp_path):
    monkeypatch.delenv(label_store.LABELS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert label_store.default_store("NVIDIA H200") == tmp_path / "gemm-predictor" / "labels" / "nvidia-h200"
    monkeypatch.setenv(label_store.LABELS_ENV, str(tmp_path / "shared"))
    assert label_store.default_store("NVIDIA H100 80GB HBM3") == tmp_path / "shared" / "nvidia-h100-80gb-hbm3"


# ------------------------------------------------------------------------------------------- predictor.compile

@pytest.fixture()
def pretend_gpu(monkeypatch):
    """This CPU recorded as a GPU (its benchmarks are CPU timings: only what reaches the store is checked)."""
    from predictor.runtime.choices import feedback

    monkeypatch.setattr(feedback, "this_device", lambda: (GPU, CC))
    yield
    predictor_uninstall_all()


def predictor_uninstall_all() -> None:
    import predictor
    from predictor.runtime.choices.installed import _STACK

    while _STACK:
        predictor.uninstall()


def test_only_the_tuned_mode_records_and_record_false_opts_out(pretend_gpu, tmp_path):
    import torch

    import predictor
    from predictor.runtime.choices.installed import _STACK

    fn = torch.nn.Linear(8, 8)
    predictor.compile(fn, tune=2, label_store=tmp_path / "a")
    recorder_a = _STACK[-1].pruner.label_recorder
    assert recorder_a is not None and recorder_a.store == tmp_path / "a"
    predictor.compile(fn, tune=2, record=False)
    assert _STACK[-1].pruner.label_recorder is None
    predictor.compile(fn)  # the default mode benchmarks nothing: nothing to record
    assert _STACK[-1].pruner.label_recorder is None
    with pytest.raises(ValueError, match="record"):
        predictor.compile(fn, tune=2, record="yes")


def test_inductors_feedback_savers_reach_the_tuned_hooks_recorder(pretend_gpu, tmp_path):
    """The saver registered with Inductor defers to the installed pruner's recorder: called as Inductor's
    ``AlgorithmSelectorCache`` calls its savers, rows reach the store given to ``predictor.compile``. (On a CPU no GEMM
    of ``predictor.compile`` is benchmarked: without a GPU the hook ranks nothing and keeps aten alone.)"""
    import torch
    from torch._inductor import select_algorithm

    import predictor
    from predictor.runtime.choices.installed import _STACK

    predictor.compile(torch.nn.Linear(8, 8), tune=2, label_store=tmp_path)
    recorder_ = _STACK[-1].pruner.label_recorder
    recorder_.cuda_only = False  # CPU nodes stand in for CUDA ones here
    nodes = [FakeNode((64, 512), (512, 1), torch.float16), FakeNode((512, 256), (256, 1), torch.float16)]
    savers = select_algorithm.get_algorithm_selector_cache().feedback_saver_fns
    for save in savers:
        save({c: 0.01 * (i + 1) for i, c in enumerate(TRITON)}, "mm", nodes, TRITON, lambda: {}, {})
    recorder_.flush()
    assert sum(t.num_rows for t in read_store(tmp_path).tables) == 3
    assert predictor.stats()["labels"]["rows"] >= 3
    predictor.compile(torch.nn.Linear(8, 8), tune=2, record=False)
    for save in savers:
        save({c: 0.02 for c in TRITON}, "mm", nodes, TRITON, lambda: {}, {})
    recorder_.flush()
    assert sum(t.num_rows for t in read_store(tmp_path).tables) == 3  # opted out: nothing more
