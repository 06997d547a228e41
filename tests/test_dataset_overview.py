"""benchmarks/dataset_overview.py on a synthetic dataset: winner shares add up and match the labels."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
import dataset_overview  # noqa: E402
from predictor.testing.synthetic import METADATA, synthetic_dataset  # noqa: E402


def test_winner_shares_match_the_fastest_candidate_per_problem(tmp_path, monkeypatch):
    rows = synthetic_dataset(60, seed=1)
    problems = dataset_overview.per_problem(rows)
    assert len(problems) == rows["problem_id"].nunique()
    ok = rows[rows["status"] == "ok"]
    some = problems.index[0]
    sub = ok[ok["problem_id"] == some]
    assert problems.loc[some, "winner"] == sub.loc[sub["time_us"].idxmin(), "family"]
    aten = sub[sub["family"] == "aten"]["time_us"].min()
    triton = sub[sub["family"] == "triton_mm"]["time_us"].min()
    assert problems.loc[some, "triton_over_aten"] == pytest.approx(triton / aten)
    table = dataset_overview.winner_table(problems)
    assert np.allclose(table.drop(columns="problems").sum(axis=1), 1.0)
    assert table["problems"].sum() == len(problems)

    from predictor.artifacts.schema import write_dataset

    data = tmp_path / "d.parquet"
    write_dataset(rows, data, METADATA)
    monkeypatch.setattr(sys, "argv", ["dataset_overview.py", "--dataset", str(data), "--out", str(tmp_path / "o")])
    dataset_overview.main()
    assert (tmp_path / "o" / "overview.png").stat().st_size > 0
    assert f"{len(problems)} problems" in (tmp_path / "o" / "overview.md").read_text()
