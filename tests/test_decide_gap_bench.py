"""benchmarks/decide_gap.py: the decide policy's oracle per score-gap threshold, from per-problem rows (CPU)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from benchmarks import decide_gap
from predictor.offline.metrics import decision_sides


def _rows() -> pd.DataFrame:
    # problem 1 (M=4): the favourite Triton kernel leads cuBLAS by 1.0 and runs 2x faster;
    # problem 2 (M=64): it trails by 1.0 and runs 2x slower
    return pd.DataFrame([
        {"problem_id": 1, "m": 4, "family": "aten", "score": 0.0, "time_us": 10.0, "dtype": "bfloat16", "op": "mm",
         "layout_b": "col"},
        {"problem_id": 1, "m": 4, "family": "triton_mm", "score": 1.0, "time_us": 5.0, "dtype": "bfloat16",
         "op": "mm", "layout_b": "col"},
        {"problem_id": 2, "m": 64, "family": "aten", "score": 1.0, "time_us": 10.0, "dtype": "bfloat16", "op": "mm",
         "layout_b": "col"},
        {"problem_id": 2, "m": 64, "family": "triton_mm", "score": 0.0, "time_us": 20.0, "dtype": "bfloat16",
         "op": "mm", "layout_b": "col"}])


def test_the_policy_takes_the_favourite_only_where_it_leads_by_the_threshold():
    p = decision_sides(_rows()).set_index("problem_id")
    assert p.loc[1, "gap"] == 1.0 and p.loc[2, "gap"] == -1.0 and list(p.m) == [4, 64]
    t = decide_gap.table(p.reset_index()).set_index("gap >=")
    assert t.loc[0.0, "triton picks"] == 1 and math.isclose(t.loc[0.0, "policy oracle"], 1.0)
    assert math.isclose(t.loc[-2.0, "policy oracle"], math.sqrt(0.5), rel_tol=1e-3)  # also takes problem 2's slower kernel
    assert math.isclose(t.loc[float("inf"), "policy oracle"], math.sqrt(0.5), rel_tol=1e-3)  # cuBLAS alone loses problem 1


@pytest.mark.parametrize("text", ["16-2", "2", "a-b"])
def test_a_bad_m_range_is_a_one_line_error(text, capsys):
    with pytest.raises(SystemExit):
        decide_gap.main(["--m-range", text])
    err = capsys.readouterr().err.strip().splitlines()
    assert f"--m-range {text!r}" in err[-1]


def test_in_program_decisions_are_counted_per_gap_band():
    rows = pd.DataFrame([
        {"m": 8, "dtype": "bfloat16", "gap": -1.0, "triton_gain": 0.05, "resolved": True},
        {"m": 8, "dtype": "float16", "gap": -2.0, "triton_gain": -0.01, "resolved": True},
        {"m": 8, "dtype": "bfloat16", "gap": -3.0, "triton_gain": -0.10, "resolved": True},
        {"m": 8, "dtype": "bfloat16", "gap": 0.5, "triton_gain": 0.02, "resolved": False},  # unresolved: left out
        {"m": 8, "dtype": "float32", "gap": -1.0, "triton_gain": -0.50, "resolved": True},  # fp32: its own floor
        {"m": 64, "dtype": "bfloat16", "gap": 1.0, "triton_gain": 0.03, "resolved": True}])
    t = decide_gap.in_program_table(rows, (2, 16)).set_index("gap")
    assert list(t.decisions) == [1, 2, 0]
    assert t.loc["[-2.5, 0)", "triton_faster"] == 1 and math.isclose(t.loc["[-2.5, 0)", "mean_gain"], 0.02)
    assert t.loc["[-inf, -2.5)", "mean_gain"] == -0.1
    assert decide_gap.in_program_table(rows).set_index("gap").loc["[0, inf)", "decisions"] == 1  # every M
