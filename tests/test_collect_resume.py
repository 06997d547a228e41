"""Kill the collector mid-run and restart it: no problem lost, none duplicated (fake timer, no GPU)."""

import sys
from pathlib import Path

import pandas as pd
import pytest

from collectors.bulk import collect_loop
from collectors.selection import Shard, select_problems
from collectors.store import PartWriter, finished_problem_ids, merge_parts
from predictor.core.candidate import Candidate
from predictor.core.problem import Problem
from predictor.artifacts.schema import SCHEMA_VERSION, DatasetError, read_dataset

sys.path.insert(0, str(Path(__file__).parent))
from predictor.testing.synthetic import METADATA  # noqa: E402

ENV = {"collector": "bulk", "gpu": "Synthetic GPU", "cc": "9.0", "torch": "2.11.0", "triton": "3.6.0",
       "schema_version": SCHEMA_VERSION}
CANDS = [Candidate("aten", aten_op="mm"), Candidate("triton_mm", 64, 64, 32, 3, 4, 8)]


def corpus(tmp_path: Path, n: int = 23) -> Path:
    rows = [{**Problem("mm", 16 + i, 32, 64, "float16").to_dict(), "family_tag": f"random"} for i in range(n)]
    path = tmp_path / "corpus.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


class Killed(Exception):
    pass


def fake_measure(kill_after: int | None):
    calls = {"n": 0}

    def measure(p, cands):
        calls["n"] += 1
        if kill_after is not None and calls["n"] > kill_after:
            raise Killed()
        return [{"status": "ok", "time_us": float(p.m + i), "time_us_iqr": 0.1, "reps": 10} for i, _ in enumerate(cands)]

    return measure


def run(tmp_path, corpus_path, kill_after=None, every=5):
    out = tmp_path / "parts"
    todo = select_problems(str(corpus_path), Shard(0, 1), str(out), None, None)
    writer = PartWriter(out, "part-s0of1-g0", METADATA, every=every)
    return collect_loop(todo, lambda p: CANDS, fake_measure(kill_after), writer, ENV)


def test_kill_and_restart_loses_and_duplicates_nothing(tmp_path):
    path = corpus(tmp_path)
    with pytest.raises(Killed):
        run(tmp_path, path, kill_after=12)
    done_after_kill = finished_problem_ids(tmp_path / "parts")
    assert len(done_after_kill) == 12  # finished problems were flushed on the way down
    # a crash that leaves a half-written temporary file must not count as finished
    (tmp_path / "parts" / "part-s0of1-g0-00099.parquet.tmp").write_bytes(b"garbage")
    run(tmp_path, path)
    merged = merge_parts(tmp_path / "parts", tmp_path / "merged.parquet")
    assert merged.problem_id.nunique() == 23
    assert len(merged) == 23 * len(CANDS)
    assert not merged.duplicated(["problem_id", "candidate"]).any()
    # a third run finds nothing to do
    assert run(tmp_path, path) == 0


def test_shards_partition_the_corpus(tmp_path):
    path = corpus(tmp_path, n=40)
    ids = [set(select_problems(str(path), Shard(i, 3), str(tmp_path / "none"), None, None).problem_id) for i in range(3)]
    assert sum(map(len, ids)) == 40 and len(set.union(*ids)) == 40


def test_bad_shard_and_corrupt_part_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="--shard"):
        Shard.parse("3/2")
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "part-x-00000.parquet").write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="part-x-00000.parquet"):
        finished_problem_ids(folder)
    with pytest.raises(DatasetError, match="not a readable parquet"):
        read_dataset(folder / "part-x-00000.parquet")


def test_resume_from_a_committed_dataset(tmp_path):
    from collectors.bulk import seed_from_dataset
    from predictor.artifacts.schema import write_dataset
    from predictor.testing.synthetic import synthetic_dataset

    dataset = write_dataset(synthetic_dataset(6), tmp_path / "committed.parquet", METADATA)
    out = tmp_path / "parts"
    assert seed_from_dataset(dataset, out, METADATA["gpu"], METADATA["cc"]) == 6
    assert finished_problem_ids(out) == set(read_dataset(dataset).problem_id)
    assert (out / "run.json").exists() and (out / "device.json").exists()
    # new parts written with the seeded metadata merge with the old rows into one dataset
    merged = merge_parts(out, tmp_path / "merged.parquet")
    assert merged.problem_id.nunique() == 6 and merged.attrs["metadata"]["gpu"] == METADATA["gpu"]
    with pytest.raises(ValueError, match="measured on Synthetic GPU"):
        seed_from_dataset(dataset, tmp_path / "other", "NVIDIA H100 80GB HBM3", "9.0")


def test_a_problem_that_cannot_be_set_up_is_skipped_not_written_and_retried_later(tmp_path):
    path = corpus(tmp_path, n=6)
    out = tmp_path / "parts"
    inner = fake_measure(None)
    measure = lambda p, cands: None if p.m == 18 else inner(p, cands)  # what collect_worker's guard returns
    todo = select_problems(str(path), Shard(0, 1), str(out), None, None)
    assert collect_loop(todo, lambda p: CANDS, measure, PartWriter(out, "part-s0of1-g0", METADATA), ENV) == 5 * len(CANDS)
    left = select_problems(str(path), Shard(0, 1), str(out), None, None)
    assert list(left.m) == [18]  # not marked finished, so a later run tries it again


def _array_task(tmp_path: Path, corpus_path: Path, index: int, count: int, kill_after: int | None = None) -> int:
    """One Slurm array task as docs/FLEET.md runs it: ``--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`` into
    the one shared parts folder (part names carry the shard, so tasks never write the same file)."""
    out = tmp_path / "parts"
    todo = select_problems(str(corpus_path), Shard(index, count), str(out), None, None)
    writer = PartWriter(out, f"part-s{index}of{count}-g0", METADATA, every=3)
    return collect_loop(todo, lambda p: CANDS, fake_measure(kill_after), writer, ENV)


def test_a_job_array_over_shards_merges_into_the_single_machine_dataset(tmp_path):
    path = corpus(tmp_path, n=31)
    with pytest.raises(Killed):  # task 1 is preempted part-way; Slurm requeues it
        _array_task(tmp_path, path, 1, 4, kill_after=4)
    for index in range(4):
        _array_task(tmp_path, path, index, 4)
    fleet = merge_parts(tmp_path / "parts", tmp_path / "fleet.parquet")
    single_dir = tmp_path / "single"
    single_dir.mkdir()
    single = run(single_dir, path)
    assert single == 31 * len(CANDS)  # rows written
    alone = merge_parts(single_dir / "parts", tmp_path / "single.parquet")
    key = ["problem_id", "candidate"]
    assert not fleet.duplicated(key).any() and fleet.problem_id.nunique() == 31
    pd.testing.assert_frame_equal(fleet.sort_values(key).reset_index(drop=True)[alone.columns],
                                  alone.sort_values(key).reset_index(drop=True))
