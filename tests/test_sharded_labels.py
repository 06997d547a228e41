"""Label collections split over processes on one GPU (``--shard I/N``, ``--join``): every problem in exactly one
shard, the parts joined into one file only when they come from one GPU and stack with no problem twice, and the
timing held under the GPU lock so parallel shards take turns."""

from __future__ import annotations

import fcntl

import pandas as pd
import pytest

from collectors import gemv, gemv_blocks, timing
from collectors.programs import harness
from collectors.selection import Shard
from predictor.offline.gemv_eval import read_labels

ENV = {"gpu": "NVIDIA H200", "cc": "9.0", "torch": "2.11.0+cu130", "triton": "3.6.0"}


def _part(path, problem_ids, **env):
    rows = [{"problem_id": pid, "candidate": c, "time_us": float(i + 1), "status": "ok", **ENV, **env}
            for i, pid in enumerate(problem_ids) for c in ("aten/plain", "gemv/X1_R2048_w4")]
    gemv.write(pd.DataFrame(rows), path, {**ENV, **env}, gemv_blocks.KIND)
    return path


def test_every_problem_of_the_corpus_is_in_exactly_one_shard():
    ids = [gemv.problem_id(dict(p, op=gemv_blocks.problem_op(p))) for p in gemv_blocks.corpus()]
    owners = [[i for i in range(8) if Shard(i, 8).owns(pid)] for pid in ids]
    assert all(len(o) == 1 for o in owners)
    assert len({o[0] for o in owners}) == 8  # no shard left empty on this corpus


def test_join_writes_the_parts_as_one_labels_file(tmp_path):
    a = _part(tmp_path / "s0.parquet", ["00aa", "00bb"])
    b = _part(tmp_path / "s1.parquet", ["00cc"])
    out = tmp_path / "all.parquet"
    assert gemv_blocks.main(["--join", str(a), str(b), "--out", str(out)]) == 0
    joined = read_labels(str(out), gemv_blocks.KIND)
    assert sorted(set(joined["problem_id"])) == ["00aa", "00bb", "00cc"]
    assert len(joined) == 6
    assert joined.attrs["metadata"]["gpu"] == "NVIDIA H200"


def test_join_refuses_parts_of_another_gpu(tmp_path, capsys):
    a = _part(tmp_path / "s0.parquet", ["00aa"])
    b = _part(tmp_path / "s1.parquet", ["00cc"], gpu="NVIDIA H100 80GB HBM3")
    out = tmp_path / "all.parquet"
    assert gemv_blocks.main(["--join", str(a), str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "s1.parquet" in err and "H100" in err
    assert not out.exists()


def test_join_refuses_a_problem_in_two_parts(tmp_path, capsys):
    a = _part(tmp_path / "s0.parquet", ["00aa", "00bb"])
    b = _part(tmp_path / "s1.parquet", ["00bb"])
    assert gemv_blocks.main(["--join", str(a), str(b), "--out", str(tmp_path / "all.parquet")]) == 2
    assert "00bb" in capsys.readouterr().err


def test_join_refuses_a_file_of_another_kind(tmp_path, capsys):
    other = tmp_path / "other.parquet"
    gemv.write(pd.DataFrame([{"problem_id": "00aa", **ENV}]), other, ENV, "gemv_labels")
    a = _part(tmp_path / "s0.parquet", ["00bb"])
    assert gemv_blocks.main(["--join", str(a), str(other), "--out", str(tmp_path / "all.parquet")]) == 2
    assert "other.parquet" in capsys.readouterr().err


def test_a_bad_shard_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gemv_blocks.main(["--shard", "8/8", "--out", str(tmp_path / "x.parquet")])
    assert "need 0 <= i < n" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_round_robin_timing_holds_the_gpu_lock(tmp_path, monkeypatch):
    lock = tmp_path / "gpu.lock"
    monkeypatch.setenv(harness.GPU_LOCK_ENV, str(lock))
    seen = {}

    def timed(fns, flush, reps, use_graph):
        with open(lock, "a") as other:  # another process's hold: refused while this one times
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen["locked"] = False
            except BlockingIOError:
                seen["locked"] = True
        return "times", "method"

    monkeypatch.setattr(timing, "_time_round_robin", timed)
    assert timing.time_round_robin([lambda: None], flush=lambda: None, reps=1) == ("times", "method")
    assert seen == {"locked": True}
    with open(lock, "a") as after:  # released once the timing is done
        fcntl.flock(after, fcntl.LOCK_EX | fcntl.LOCK_NB)


FAKE_WORKER = '''
import sys
import pandas as pd
from collectors import gemv
from collectors.selection import Shard
from predictor.offline.gemv_eval import read_labels

ENV = {"gpu": "NVIDIA H200", "cc": "9.0", "torch": "2.11.0+cu130", "triton": "3.6.0"}
KIND = "gemv_block_labels"
ATEN_KEY = "aten/plain"
IDS = ["00aa", "00bb", "00cc", "00dd", "00ee"]


def work(collector, part, shard, seconds, lock, interleave_by):
    """Label this shard's problems not yet in its part, as collectors.gemv.collect would (time 99: measured here)."""
    mine = Shard(*shard)
    done = read_labels(part, KIND) if __import__("os").path.exists(part) else pd.DataFrame(columns=["problem_id"])
    new = [{"problem_id": pid, "candidate": "aten/plain", "time_us": 99.0, "status": "ok", **ENV}
           for pid in IDS if mine.owns(pid) and pid not in set(done["problem_id"])]
    gemv.write(pd.concat([done, pd.DataFrame(new)], ignore_index=True), part, ENV, KIND)
    sys.exit(3 if shard == (1, 3) else 0)
'''


def test_parallel_collection_seeds_each_part_and_joins_them(tmp_path, monkeypatch):
    from collectors import parallel_labels

    (tmp_path / "fake_collector.py").write_text(FAKE_WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned processes get the parent's sys.path
    import fake_collector

    labels = _part(tmp_path / "gemv_blocks.parquet", ["00aa"])  # a serial run labelled one problem (time 1.0)
    status = parallel_labels.collect_in_parallel("fake_collector", labels, 3, worker=fake_collector.work, poll_s=0.1)
    assert status == 3  # shard 1's exit status, reported after its parts were joined
    joined = read_labels(str(labels), gemv_blocks.KIND)
    assert sorted(set(joined["problem_id"])) == fake_collector.IDS
    first = joined[joined["problem_id"] == "00aa"]
    assert set(first["time_us"]) == {1.0}  # seeded into its part, not measured again
    assert len(joined[joined["problem_id"] != "00aa"]) == 4
    # resumed with another number of processes: nothing is measured twice, nothing lost
    assert parallel_labels.collect_in_parallel("fake_collector", labels, 2, worker=fake_collector.work,
                                               poll_s=0.1) == 0
    again = read_labels(str(labels), gemv_blocks.KIND)
    assert again.sort_values(["problem_id", "candidate"]).reset_index(drop=True).equals(
        joined.sort_values(["problem_id", "candidate"]).reset_index(drop=True))
