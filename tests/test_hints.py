"""Hint-bucket selection (predictor.runtime.dynamic.hints) and its evaluation (predictor.offline.hint_eval) on hand-made
scores and a hand-made M-sweep (no GPU)."""

import math

import numpy as np
import pandas as pd
import pytest
from predictor.testing.synthetic import METADATA

from predictor.core.candidate import parse_key
from predictor.core.device import DeviceInfo
from predictor.offline.hint_eval import evaluate_hint_choice, hint_set_fraction
from predictor.core.problem import Problem
from predictor.runtime.choices.hint_buckets import best_hint_set, runtime_sizes

DEVICE = DeviceInfo.from_metadata(METADATA)


def test_runtime_sizes_span_the_range_geometrically():
    sizes = runtime_sizes(1, 16384)
    assert sizes[0] == 1 and sizes[-1] == 16384 and len(sizes) == 28  # 29 points, two round to the same int
    assert all(b / a < 1.5 for a, b in zip(sizes[8:], sizes[9:]))
    with pytest.raises(ValueError):
        runtime_sizes(0, 10)


def test_a_hint_is_added_only_where_its_kernel_wins():
    hints = [16, 256, 4096]
    one_kernel_everywhere = np.array([[1.0, 1.0, 1.0]] * 4)
    assert best_hint_set(one_kernel_everywhere, hints) == [16]  # ties: the smallest hint, no second kernel
    # kernel of 16 wins the small sizes, kernel of 4096 the large ones, 256's never
    split = np.array([[3.0, 2.0, 0.0], [3.0, 2.5, 1.0], [0.0, 1.0, 3.0], [0.0, 1.5, 3.0]])
    assert best_hint_set(split, hints) == [16, 4096]
    assert best_hint_set(split, hints, max_hints=1) == [256]  # mean regret 1.25, tied with 4096: the smaller
    assert best_hint_set(split, hints, min_gain=10.0) == [256]
    with pytest.raises(ValueError):
        best_hint_set(split, [16, 256])


def test_hint_set_fraction_never_guesses_an_untimed_kernel():
    times = pd.DataFrame({"a": [1.0, 2.0, 8.0], "b": [np.nan, 3.0, 4.0]}, index=[1, 64, 4096])
    assert list(hint_set_fraction(times, [1, 4096])) == [1.0, 1.0, 1.0]
    assert list(hint_set_fraction(times, [1])) == [1.0, 1.0, 0.5]
    f = hint_set_fraction(times, [4096])
    assert math.isnan(f.loc[1]) and f.loc[64] == 2.0 / 3.0 and f.loc[4096] == 1.0
    assert hint_set_fraction(times, [7]).isna().all()


class TableRanker:
    """Knows the true times (score = -time): the selection logic, not the model, is under test."""

    def __init__(self, table):
        self.table = table

    def score(self, rows, device):
        keys = [parse_key(c).key if isinstance(c, str) else None for c in rows.get("candidate", [None] * len(rows))]
        if keys[0] is None:  # rows built from Candidate fields (kernel_scores)
            from predictor.core.candidate import Candidate, CANDIDATE_FIELDS

            keys = [Candidate(**{f: r[f] for f in CANDIDATE_FIELDS if pd.notna(r[f])}).key for _, r in rows.iterrows()]
        return np.array([-self.table[(int(m), k)] for m, k in zip(rows["m"], keys)])


def test_evaluate_hint_choice_on_a_sweep_where_the_winner_changes_at_256():
    small, large = "triton_mm/32x64x32/s4/w4/g8", "triton_mm/128x128x64/s3/w8/g8"
    sizes = [1, 16, 32, 64, 128, 256, 1024, 4096, 16384]
    table, rows = {}, []
    for m in sizes:
        t_small, t_large = (1.0, 2.0) if m < 256 else (4.0 * m / 256, 1.0 * m / 256)
        for key, t in ((small, t_small), (large, t_large)):
            table[(m, key)] = t
            rows.append({**Problem("mm", m, 4096, 4096, "float16").to_dict(), **parse_key(key).to_dict(),
                         "candidate": key, "time_us": t, "status": "ok", "family_tag": "msweep:4096x4096"})
    result = evaluate_hint_choice(pd.DataFrame(rows), TableRanker(table), DEVICE)
    row = result.iloc[0]
    assert row["winners"] == 2 and len(row["predicted hints"]) == 2
    assert row["predicted geomean"] == 1.0 and row["predicted worst"] == 1.0
    assert row["fixed hints"] == [64, 256, 4096] and row["fixed geomean"] == 1.0
    assert row["best single geomean"] < 1.0
    # the ceiling: true times, every subset of <= 3 grid hints; here one small and one large hint reach 1.0
    assert row["hindsight geomean"] == 1.0 and len(row["hindsight hints"]) == 2
    assert min(row["hindsight hints"]) < 256 <= max(row["hindsight hints"])


def test_suggest_hints_with_the_shipped_model():
    from pathlib import Path

    from predictor.artifacts.model_folder import read_metadata
    from predictor.runtime.dynamic.hints import HINT_GRID, suggest_hints

    shipped = Path(__file__).resolve().parents[1] / "models" / "h200-default-lgbm-all"
    h200 = DeviceInfo.from_metadata(read_metadata(shipped))
    gemms = [Problem("mm", 1, 4096, 4096, "bfloat16", layout_b="col"), Problem("mm", 1, 896, 4864, "bfloat16")]
    each = [suggest_hints([g], model=str(shipped), device=h200) for g in gemms]
    assert all(1 <= len(h) <= 3 and set(h) <= set(HINT_GRID) for h in each)
    assert suggest_hints(gemms, model=str(shipped), device=h200) == sorted(set(each[0]) | set(each[1]))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        suggest_hints(gemms)  # CPU: nothing to rank for


def test_cublas_is_never_a_hints_kernel_nor_its_oracle():
    """Multi-kernel dispatches among the hints' Triton kernels only: a sweep where cuBLAS wins every size must
    still ask which Triton kernels to compile (it once looked like 'one hint is perfect', 0.33x on the GPU)."""
    small, large, aten = "triton_mm/32x64x32/s4/w4/g8", "triton_mm/128x128x64/s3/w8/g8", "aten/mm"
    sizes = [1, 16, 32, 64, 128, 256, 1024, 4096, 16384]
    table, rows = {}, []
    for m in sizes:
        t_small, t_large = (1.0, 2.0) if m < 256 else (4.0 * m / 256, 1.0 * m / 256)
        for key, t in ((small, t_small), (large, t_large), (aten, 0.5 * min(t_small, t_large))):
            table[(m, key)] = t
            rows.append({**Problem("mm", m, 4096, 4096, "float16").to_dict(), **parse_key(key).to_dict(),
                         "candidate": key, "time_us": t, "status": "ok", "family_tag": "msweep:4096x4096"})
    row = evaluate_hint_choice(pd.DataFrame(rows), TableRanker(table), DEVICE).iloc[0]
    assert row["winners"] == 2  # the two Triton kernels; cuBLAS, 2x faster everywhere, is not counted
    assert len(row["predicted hints"]) == 2 and row["predicted geomean"] == 1.0


def test_kernel_set_ceiling_equals_brute_force_over_every_subset():
    """The ceiling over any <= 3 kernels (what no hint predictor can beat) matches an exhaustive search,
    untimed (NaN) cells included."""
    import itertools

    from predictor.offline.hint_eval import geomean_known, kernel_set_ceiling

    rng = np.random.default_rng(3)
    times = pd.DataFrame(rng.uniform(1.0, 3.0, size=(12, 9)), index=[2 ** i for i in range(12)],
                         columns=[f"k{j}" for j in range(9)])
    times.iloc[:4, :3] = np.nan  # big-tile kernels Inductor does not offer at small M
    oracle = times.min(axis=1)
    brute = max(((geomean_known(oracle / times[list(c)].min(axis=1)), list(c))
                 for r in (1, 2, 3) for c in itertools.combinations(times.columns, r)), key=lambda t: t[0])
    geomean, worst, kernels = kernel_set_ceiling(times, 3)
    assert geomean == pytest.approx(brute[0]) and sorted(kernels) == sorted(brute[1])
    assert worst == pytest.approx(float((oracle / times[kernels].min(axis=1)).min()))
    # one kernel that is best everywhere reaches 1.0 alone
    times["star"] = times.min(axis=1) * 0.5
    assert kernel_set_ceiling(times, 3)[:2] == (pytest.approx(1.0), pytest.approx(1.0))
