"""Screening (exhaustive collection): slow candidates keep one sample, near-best ones get every repetition.

measure_problem runs on the CPU here with fake runners and a fake timer: each fake kernel 'takes' a fixed time.
"""

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import collectors.runners as runners
import collectors.timing as timing
from collectors.bulk import measure_problem
from collectors.store import PartWriter
from predictor.core.candidate import Candidate
from predictor.core.problem import Problem

sys.path.insert(0, str(Path(__file__).parent))
from predictor.testing.synthetic import METADATA, synthetic_dataset  # noqa: E402

KERNEL_US = [10.0, 12.0, 29.0, 31.0, 100.0]  # with screen=3: the first three are within 3x of the fastest


@pytest.fixture
def fake_gpu(monkeypatch):
    launches = {}
    timed_sets = []

    def make_runner(p, c, ops, num_sms):
        idx = c.block_m  # the candidate's index rides in block_m

        def run():
            launches[idx] = launches.get(idx, 0) + 1
        run.us = KERNEL_US[idx]
        return run

    def time_round_robin(fns, flush, reps=10, use_graph=True):
        timed_sets.append((len(fns), reps))
        for fn in fns:
            for _ in range(reps):
                fn()  # a timed launch is a launch
        return np.array([[fn.us] * reps for fn in fns]), "fake"

    ops = types.SimpleNamespace(out=torch.zeros(2), reference=torch.zeros(2))
    monkeypatch.setattr(runners, "make_operands", lambda p, device, seed: ops)
    monkeypatch.setattr(runners, "make_runner", make_runner)
    monkeypatch.setattr(runners, "relative_error", lambda out, ref: 0.0)
    monkeypatch.setattr(timing, "time_round_robin", time_round_robin)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return launches, timed_sets


CANDS = [Candidate("triton_mm", i, 64, 32, 3, 4, 8) for i in range(len(KERNEL_US))]
PROBLEM = Problem("mm", 128, 128, 128, "float16")


def test_screening_gives_full_reps_only_to_near_best_candidates(fake_gpu):
    launches, timed_sets = fake_gpu
    results = measure_problem(PROBLEM, CANDS, None, None, 132, reps=10, seed=0, screen=3.0)
    assert [r["reps"] for r in results] == [10, 10, 10, 1, 1]
    assert [r["time_us"] for r in results] == KERNEL_US  # the slow ones keep their (single) measured time
    assert np.isnan(results[3]["time_us_iqr"]) and results[0]["time_us_iqr"] == 0.0
    assert timed_sets == [(5, 1), (3, 10)]  # one screening launch for all, the full timing for the three
    assert launches == {0: 12, 1: 12, 2: 12, 3: 2, 4: 2}  # check + screen (+10 timed) each


def test_without_screening_every_candidate_is_timed_fully(fake_gpu):
    launches, timed_sets = fake_gpu
    results = measure_problem(PROBLEM, CANDS, None, None, 132, reps=10, seed=0)
    assert all(r["reps"] == 10 for r in results)
    assert timed_sets == [(5, 10)]
    assert set(launches.values()) == {12}  # check + warm-up + 10 timed


def test_part_writer_flushes_by_rows_as_well_as_problems(tmp_path):
    problems = [g.to_dict("records") for _, g in synthetic_dataset(n_problems=2).groupby("problem_id")]
    writer = PartWriter(tmp_path, "part", METADATA, every=50, every_rows=len(problems[0]) + 1)
    writer.add_problem(problems[0])
    assert not list(tmp_path.glob("*.parquet"))
    writer.add_problem(problems[1])  # rows enough: written although only 2 of 50 problems
    assert len(list(tmp_path.glob("*.parquet"))) == 1


def test_collect_refuses_a_screen_factor_that_would_cut_near_best_candidates(tmp_path, capsys):
    from collectors.cli import main

    assert main(["collect", "--out", str(tmp_path / "parts"), "--screen", "1.2"]) != 0
    assert "gemm-predictor: error: --screen 1.2: must be 0" in capsys.readouterr().err  # the CLI's own error line
    assert not (tmp_path / "parts").exists()  # refused before anything was created
