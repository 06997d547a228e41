"""On a GPU: the bulk collector times fp8 ``_scaled_mm`` problems of ``quant_v1`` (issue 16) over their whole default
space (aten, the persistent TMA epilogue-scaling template, triton::mm with the scaling epilogue), and its Triton
kernels compute what aten's ``_scaled_mm`` computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from collectors.bulk import collect
from collectors.selection import load_problems
from collectors.runners import FP8_FAST_ACCUM, REL_TOLERANCE, make_operands, make_runner, relative_error
from predictor.core.device import DeviceInfo
from predictor.core.problem import problem_from_row
from predictor.artifacts.schema import read_dataset
from predictor.spaces import enumerate_space

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

QUANT = Path(__file__).resolve().parents[1] / "datasets" / "corpus" / "quant_v1.parquet"
# rowwise decode (M = 1: a (1, 1) scale_a), rowwise prefill with ragged M, tensorwise with small N and M = 17
PICKS = [("scaled_mm_rowwise", 1, 2560, 2048), ("scaled_mm_rowwise", 333, 2304, 768),
         ("scaled_mm_tensorwise", 17, 256, 2048)]


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    corpus = load_problems(QUANT)
    ids = []
    for op, m, n, k in PICKS:
        rows = corpus[(corpus.op == op) & (corpus.m == m) & (corpus.n == n) & (corpus.k == k)]
        assert len(rows) == 1, (op, m, n, k)
        ids.append(rows.problem_id.iloc[0])
    out = tmp_path_factory.mktemp("f8")
    collect(str(QUANT), str(out), order=ids)
    return read_dataset(out), corpus.set_index("problem_id").loc[ids].reset_index()


def _spaces(problems):
    device = DeviceInfo.from_torch(0)
    for row in problems.itertuples(index=False):
        p = problem_from_row(row)
        yield p, enumerate_space(p, "default", device, tma=True), device


@pytest.mark.timeout(1200)
def test_every_fp8_candidate_gets_a_time_or_a_labelled_failure(collected):
    df, problems = collected
    assert set(df.problem_id) == set(problems.problem_id)
    for p, space, _ in _spaces(problems):
        rows = df[df.problem_id == p.problem_id].sort_values("inductor_rank")
        assert list(rows.candidate) == [c.key for c in space]  # every candidate of the space, in Inductor's order
        ok = rows[rows.status == "ok"]
        assert np.isfinite(ok.time_us).all() and (ok.time_us > 0).all() and (ok.reps >= 10).all()
        # the only acceptable failure is a config that does not fit the GPU (shared memory): never a wrong result,
        # never a kernel that fails to build for another reason
        failed = rows[rows.status != "ok"]
        assert set(failed.status) <= {"resources"}, failed[["candidate", "status"]].to_string()
        families = set(ok.family)
        assert "aten" in families and "triton_mm" in families, p
        if any(c.family == "triton_tma" for c in space):
            assert "triton_tma" in families, p


@pytest.mark.timeout(1200)
def test_triton_scaled_kernels_agree_with_aten_scaled_mm(collected):
    """Every Triton candidate the collector labelled ok against the fp32 reference also matches aten's own
    ``_scaled_mm`` (both with fast accumulation, both bf16 out) within the collector's tolerance."""
    import triton

    df, problems = collected
    dev = torch.device("cuda")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    checked = 0
    for p, space, device in _spaces(problems):
        status = dict(zip(df[df.problem_id == p.problem_id].candidate, df[df.problem_id == p.problem_id].status))
        ops = make_operands(p, dev, seed=0)
        aten = torch._scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, out_dtype=ops.out.dtype,
                                use_fast_accum=FP8_FAST_ACCUM)
        tolerance = REL_TOLERANCE[p.dtype] * max(1.0, p.k / 4096)
        for c in space:
            if not c.is_triton or status[c.key] != "ok":
                continue
            ops.out.fill_(float("nan"))
            make_runner(p, c, ops, device.sm_count)()
            torch.cuda.synchronize()
            err = relative_error(ops.out, aten)
            assert err <= tolerance, (p.problem_id, c.key, err)
            checked += 1
    assert checked >= 100  # 67 + 118 + 109 Triton candidates on an H100, less any that did not fit


def test_precompile_builds_the_scaled_binaries_without_error(collected):
    """The background compiler's warm-up (compile_key -> _warm_one) must describe the launched kernels: a mismatch
    would not fail the collection, only compile every binary twice, so check it here."""
    from collectors.bulk_compile import _warm_one, compile_key

    df, problems = collected
    warmed = 0
    for p, space, device in _spaces(problems):
        ok = set(df[(df.problem_id == p.problem_id) & (df.status == "ok")].candidate)
        for c in space:
            if c.is_triton and c.key in ok:
                assert _warm_one(compile_key(p, c), device.sm_count) is None, (p.problem_id, c.key)
                warmed += 1
    assert warmed >= 100, warmed
