"""The hint-set bookkeeping of benchmarks/hint_sweep_analysis.py on a hand-made sweep (no GPU)."""

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import hint_sweep_analysis  # noqa: E402


def test_hint_kernels_are_timed_at_every_runtime_size_without_interpolation():
    # kernel "a" wins small M, "b" wins large M; "b" was never timed at M=1
    times = pd.DataFrame({"a": [1.0, 2.0, 8.0], "b": [np.nan, 3.0, 4.0]}, index=[1, 64, 4096])
    hint_set_fraction = hint_sweep_analysis.hint_set_fraction
    f = hint_set_fraction(times, [1, 4096])  # kernels chosen at M=1 ("a") and M=4096 ("b")
    assert list(f) == [1.0, 1.0, 1.0]
    f = hint_set_fraction(times, [1])  # "a" alone: 4/8 of the oracle at M=4096
    assert list(f) == [1.0, 1.0, 0.5]
    f = hint_set_fraction(times, [4096])  # "b" alone: not timed at M=1 -> unknown there, not guessed
    assert math.isnan(f.loc[1]) and f.loc[64] == 2.0 / 3.0 and f.loc[4096] == 1.0
    assert hint_set_fraction(times, [7]).isna().all()  # a hint outside the sweep selects nothing
