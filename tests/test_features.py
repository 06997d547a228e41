"""Features: hand-checked values for one problem, neutral values for non-Triton rows, batch invariance."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from predictor.testing.synthetic import METADATA, synthetic_dataset

from predictor.core.candidate import Candidate
from predictor.core.device import DeviceInfo
from predictor.core.features import FEATURE_NAMES, compute_features, feature_matrix
from predictor.core.problem import Problem
from predictor.artifacts.schema import validate_frame

DEVICE = DeviceInfo.from_metadata(METADATA)  # 132 SMs, 232448 B smem, 4000 GB/s, fp16 600 TFLOP/s


def rows_for(problem: Problem, cands: list[Candidate]) -> pd.DataFrame:
    return pd.DataFrame([{**problem.to_dict(), **c.to_dict()} for c in cands])


@pytest.fixture(scope="module")
def one_problem() -> pd.DataFrame:
    p = Problem("mm", 333, 1111, 2222, "float16", layout_b="col")
    cands = [Candidate("triton_mm", 128, 64, 32, 3, 4, 8), Candidate("aten", aten_op="mm"),
             Candidate("decompose_k", k_split=4), Candidate("triton_tma", 64, 256, 64, 4, 8, 8)]
    return compute_features(rows_for(p, cands), DEVICE)


def test_names_and_frame(one_problem):
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert list(one_problem.columns) == FEATURE_NAMES
    assert (one_problem.dtypes == np.float32).all()
    assert np.isfinite(one_problem.to_numpy()).all()


def test_tile_features_by_hand(one_problem):
    f = one_problem.iloc[0]  # 333 x 1111 x 2222 fp16, tile 128 x 64 x 32, 3 stages, 4 warps
    assert f.log2_m == pytest.approx(math.log2(333))
    assert f.dtype_float16 == 1 and f.layout_b_col == 1 and f.layout_a_col == 0 and f.op_mm == 1
    assert f.family_triton_mm == 1 and f.family_aten == 0
    # tiles: ceil(333/128) = 3, ceil(1111/64) = 18, ceil(2222/32) = 70 K iterations, 2222 % 32 != 0
    assert f.log2_tiles_m == pytest.approx(math.log2(3)) and f.log2_tiles_n == pytest.approx(math.log2(18))
    assert f.k_iters == 70 and f.even_k == 0
    # quantisation: 333 of 384 rows useful; the last M tile holds 77 of 128 rows, the last N tile 23 of 64
    assert f.eff_m == pytest.approx(333 / 384) and f.eff_n == pytest.approx(1111 / 1152)
    assert f.last_tile_m == pytest.approx(77 / 128) and f.last_tile_n == pytest.approx(23 / 64)
    assert f.last_tile_k == pytest.approx(14 / 32)
    assert f.pad_eff == pytest.approx(333 / 384 * 1111 / 1152 * 2222 / 2240, rel=1e-5)
    # 54 CTAs on 132 SMs: under half of one wave
    assert f.log2_ctas == pytest.approx(math.log2(54))
    assert f.waves == pytest.approx(54 / 132) and f.waves_ceil == 1 and f.wave_eff == pytest.approx(54 / 132)
    # shared memory: (128*32 + 32*64) * 2 B = 12 KiB a stage, 3 stages of 232448 B
    assert f.smem_stage_kb == 12 and f.smem_frac == pytest.approx(3 * 12288 / 232448) and f.smem_fits == 1
    assert f.acc_regs == 128 * 64 / (32 * 4)
    assert f.num_stages == 3 and f.num_warps == 4 and f.group_m == 8 and f.k_split == 0
    # roofline: one wave of a 128 x 64 x 2240 tile at 600/132 TFLOP/s per SM = 8.07 us
    one_cta_us = 2 * 128 * 64 * 2240 / (600e12 / 132) * 1e6
    assert 2 ** f.log2_roofline_us == pytest.approx(one_cta_us, rel=1e-4)
    ideal_us = max(2 * 333 * 1111 * 2222 / 600e12, (333 * 2222 + 2222 * 1111 + 333 * 1111) * 2 / 4000e9) * 1e6
    assert 2 ** f.log2_ideal_us == pytest.approx(ideal_us, rel=1e-4)
    assert f.roofline_ratio_log2 == pytest.approx(math.log2(one_cta_us / ideal_us), rel=1e-4)


def test_non_triton_rows_are_neutral(one_problem):
    aten, dk = one_problem.iloc[1], one_problem.iloc[2]
    for f in (aten, dk):
        assert f.log2_block_m == 0 and f.k_iters == 0 and f.waves == 0 and f.acc_regs == 0 and f.num_stages == 0
        assert f.eff_m == 1 and f.pad_eff == 1 and f.wave_eff == 1 and f.even_k == 1 and f.smem_fits == 1
    assert aten.family_aten == 1 and aten.aten_mm == 1 and aten.k_split == 0 and aten.roofline_ratio_log2 == 0
    assert dk.family_decompose_k == 1 and dk.k_split == 4
    assert dk.log2_k_per_split == pytest.approx(math.log2(2222 / 4))
    # partial sums: 4 fp32 slabs of 333 x 1111 written and read back
    assert 2 ** dk.log2_dk_extra_bytes == pytest.approx(1 + 2 * 4 * 333 * 1111 * 4, rel=1e-5)


def test_tma_and_batch():
    p = Problem("bmm", 256, 256, 512, "bfloat16", b=4)
    f = compute_features(rows_for(p, [Candidate("triton_tma", 64, 256, 64, 4, 8, 8)]), DEVICE).iloc[0]
    assert f.family_triton_tma == 1 and f.op_bmm == 1 and f.dtype_bfloat16 == 1 and f.log2_b == 2
    assert f.log2_ctas == pytest.approx(math.log2(4 * 4 * 1)) and f.even_k == 1
    assert f.m_aligned16 == 1 and f.k_aligned16 == 1


def test_batch_invariance_and_string_storage():
    """A row's features do not depend on what else is in the batch, nor on how pandas stores strings."""
    rows = validate_frame(synthetic_dataset(20, seed=3))
    together = feature_matrix(rows, DEVICE)
    alone = np.concatenate([feature_matrix(g, DEVICE) for _, g in rows.groupby("problem_id", sort=False)])
    order = np.concatenate([g.index.to_numpy() for _, g in rows.groupby("problem_id", sort=False)])
    np.testing.assert_array_equal(together[rows.index.get_indexer(order)], alone)
    as_object = rows.astype({c: object for c in rows.columns if pd.api.types.is_string_dtype(rows[c])})
    np.testing.assert_array_equal(feature_matrix(as_object, DEVICE), together)
    shuffled = rows.sample(frac=1.0, random_state=0)
    np.testing.assert_array_equal(feature_matrix(shuffled, DEVICE), together[rows.index.get_indexer(shuffled.index)])


def test_empty_missing_and_unknown():
    rows = validate_frame(synthetic_dataset(3))
    assert feature_matrix(rows.iloc[:0], DEVICE).shape == (0, len(FEATURE_NAMES))
    with pytest.raises(ValueError, match="lack the columns block_k"):
        feature_matrix(rows.drop(columns=["block_k"]), DEVICE)
    bad = rows.astype({"dtype": object})
    bad.loc[bad.index[0], "dtype"] = "float8"
    with pytest.raises(ValueError, match="float8"):
        feature_matrix(bad, DEVICE)


def test_device_without_measurements_still_gives_finite_features():
    bare = DeviceInfo(gpu="x", cc="9.0", sm_count=132, smem_per_block=232448, l2_bytes=0, mem_bandwidth_gbs=0.0)
    assert np.isfinite(feature_matrix(synthetic_dataset(5), bare)).all()
