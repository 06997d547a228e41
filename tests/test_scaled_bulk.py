"""The bulk collector's fp8 ``_scaled_mm`` kernels (issue 16) on the CPU: candidate -> kernel parameters, the
precompile key, the refusal of problems no runner can set up, and the kernels' numbers under Triton's interpreter.
``tests/test_gpu_bulk_scaled.py`` runs them for real on a GPU."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

pytest.importorskip("triton")

from collectors import kernels  # noqa: E402 -- after the importorskip
from collectors import runners as R  # noqa: E402
from collectors.bulk_compile import compile_key  # noqa: E402
from collectors.selection import refuse_unsupported  # noqa: E402
from predictor.core.candidate import Candidate  # noqa: E402
from predictor.core.problem import Problem  # noqa: E402
from interpreter import run_interpreted  # noqa: E402

from cpu_scaled_mm import cpu_scaled_mm_takes_row_scales  # noqa: E402

FP8 = "float8_e4m3fn"
MM = Candidate("triton_mm", 32, 64, 128, 4, 4, 8)
TMA = Candidate("triton_tma", 64, 128, 128, 3, 8, 8)


def scaled(op: str, m: int, n: int, k: int) -> Problem:
    return Problem(op, m, n, k, FP8, layout_b="col")


class Recorder:
    """Stands in for a @triton.jit kernel: records ``kernel[grid](*args, **meta)`` instead of launching."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getitem__(self, grid):
        return lambda *args, **meta: self.calls.append((grid, args, meta))


@pytest.fixture
def recorded(monkeypatch):
    mm, tma = Recorder(), Recorder()
    monkeypatch.setattr(kernels, "scaled_mm_kernel", mm)
    monkeypatch.setattr(kernels, "scaled_persistent_tma_kernel", tma)
    return mm, tma


def test_triton_mm_candidate_becomes_the_mm_template_launch(recorded):
    mm, _ = recorded
    p = scaled("scaled_mm_rowwise", 100, 192, 320)  # K % 128 != 0: EVEN_K off
    ops = R.make_operands(p, torch.device("cpu"))
    R.make_runner(p, MM, ops, num_sms=132)()
    (grid, args, meta), = mm.calls
    assert grid == (4 * 3,)  # cdiv(100, 32) * cdiv(192, 64) programs, GROUP_M swizzled inside
    a, b, out, sa, sb, m, n, k, *strides = args
    assert (a, b, out, sa, sb) == (ops.a, ops.b, ops.out, ops.scale_a, ops.scale_b) and (m, n, k) == (100, 192, 320)
    assert strides == [320, 1, 1, 320, 192, 1]  # A row-major, B column-major (the transposed weight), C row-major
    assert {key: meta[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps", "GROUP_M")} == dict(
        BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, num_stages=4, num_warps=4, GROUP_M=8)
    assert meta["EVEN_K"] is False and meta["USE_FAST_ACCUM"] is True and meta["ALLOW_TF32"] is False
    assert meta["SCALE_A_PER_ROW"] and meta["SCALE_B_PER_COL"]
    assert (meta["A_CONTIGUOUS_M"], meta["B_CONTIGUOUS_N"]) == (True, True)  # M >= BLOCK_M, N >= BLOCK_N


def test_tma_candidate_becomes_the_persistent_epilogue_scaling_launch(recorded):
    _, tma = recorded
    p = scaled("scaled_mm_tensorwise", 64, 256, 128)
    ops = R.make_operands(p, torch.device("cpu"))
    R.make_runner(p, TMA, ops, num_sms=132)()
    (grid, args, meta), = tma.calls
    assert grid == (2,)  # persistent: min(SMs, tiles) programs, here the 1 x 2 tiles of 64x128
    assert args[:5] == (ops.a, ops.b, ops.out, ops.scale_a, ops.scale_b)
    assert args[5:] == (64, 256, 128, 128, 128, 256)  # M, N, K, A's row stride, B's column stride (= K), C's row
    assert (meta["SCALE_RECIPE_A"], meta["SCALE_RECIPE_B"], meta["NUM_SMS"]) == (0, 0, 132)
    assert meta["USE_FAST_ACCUM"] is True and (meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]) == (64, 128, 128)
    assert (meta["num_stages"], meta["num_warps"], meta["GROUP_M"]) == (3, 8, 8)
    rowwise = scaled("scaled_mm_rowwise", 256, 512, 32)  # 4 x 4 tiles on 3 SMs: 3 programs loop over them
    R.make_runner(rowwise, TMA, R.make_operands(rowwise, torch.device("cpu")), num_sms=3)()
    grid, _, meta = tma.calls[1]
    assert grid == (3,) and (meta["SCALE_RECIPE_A"], meta["SCALE_RECIPE_B"]) == (1, 1)


def test_scale_constexprs_follow_inductors_loaders_and_recipes():
    """A (1, 1) scale is one value to the mm template's epilogue, rowwise or not; the TMA template takes the pair's
    ScalingType."""
    row, one_row, tensor = (scaled("scaled_mm_rowwise", 64, 256, 128), scaled("scaled_mm_rowwise", 1, 256, 128),
                            scaled("scaled_mm_tensorwise", 64, 256, 128))
    assert R.scaled_constexprs(row, "triton_mm") == dict(SCALE_A_PER_ROW=True, SCALE_B_PER_COL=True, USE_FAST_ACCUM=True)
    assert R.scaled_constexprs(one_row, "triton_mm")["SCALE_A_PER_ROW"] is False
    assert not any(R.scaled_constexprs(tensor, "triton_mm")[k] for k in ("SCALE_A_PER_ROW", "SCALE_B_PER_COL"))
    assert R.scaled_constexprs(one_row, "triton_tma") == dict(SCALE_RECIPE_A=1, SCALE_RECIPE_B=1, USE_FAST_ACCUM=True)
    assert R.scaled_constexprs(tensor, "triton_tma")["SCALE_RECIPE_A"] == 0


def test_the_tma_runner_refuses_layouts_the_template_cannot_read():
    p = scaled("scaled_mm_rowwise", 64, 256, 128)
    ops = R.make_operands(p, torch.device("cpu"))
    ops.b = ops.b.contiguous()  # B row-major: not what _scaled_mm (or the template's [N, K] descriptor) takes
    with pytest.raises(ValueError, match="B column-major"):
        R.make_runner(p, TMA, ops, num_sms=132)


def test_precompile_key_separates_what_changes_the_binary():
    base = compile_key(scaled("scaled_mm_rowwise", 64, 256, 1024), MM)
    assert base[:11] == ("triton_mm", "scaled_mm_rowwise", FP8, "row", "col", 32, 64, 128, 8, 4, 4)
    assert dict(base[20]) == dict(out_dtype="bfloat16", SCALE_A_PER_ROW=True, SCALE_B_PER_COL=True, USE_FAST_ACCUM=True)
    # another M with the same specialisation shares the binary; M == 1 (a (1, 1) scale_a) and tensorwise do not
    assert compile_key(scaled("scaled_mm_rowwise", 48, 256, 1024), MM) == base
    assert compile_key(scaled("scaled_mm_rowwise", 1, 256, 1024), MM) != base
    assert compile_key(scaled("scaled_mm_tensorwise", 64, 256, 1024), MM) != base
    assert compile_key(scaled("scaled_mm_rowwise", 64, 256, 1040), MM)[11] is False  # EVEN_K
    tma = compile_key(scaled("scaled_mm_rowwise", 64, 256, 1024), TMA)
    assert dict(tma[20]) == dict(out_dtype="bfloat16", SCALE_RECIPE_A=1, SCALE_RECIPE_B=1, USE_FAST_ACCUM=True)
    assert len(compile_key(Problem("mm", 64, 256, 1024, "float16"), MM)) == 20  # other ops' keys are unchanged


def test_unsupported_scaled_problems_are_refused_in_one_line():
    rows = [dict(problem_id="aaa", op="scaled_mm_rowwise", dtype=FP8, layout_a="row", layout_b="col"),
            dict(problem_id="bbb", op="mm", dtype="float16", layout_a="col", layout_b="row")]
    refuse_unsupported(pd.DataFrame(rows), "corpus.parquet")  # torchao's layout, and non-fp8 problems: fine
    rows.append(dict(problem_id="ccc", op="scaled_mm_tensorwise", dtype=FP8, layout_a="row", layout_b="row"))
    with pytest.raises(ValueError, match=r"1 selected scaled_mm problems .* \(first: ccc, float8_e4m3fn row/row\)") as e:
        refuse_unsupported(pd.DataFrame(rows), "corpus.parquet")
    assert "\n" not in str(e.value)
    e5m2 = [dict(problem_id="ddd", op="scaled_mm_rowwise", dtype="float8_e5m2", layout_a="row", layout_b="col")]
    with pytest.raises(ValueError, match="first: ddd"):
        refuse_unsupported(pd.DataFrame(e5m2), "corpus.parquet")


def test_scaled_epilogue_arithmetic_is_what_the_reference_computes():
    """What the kernels compute, in torch: the fp32 accumulator of the fp8 values times (scale_a * scale_b) broadcast
    over rows and columns, cast to bf16 once, equals the dequantised reference the collector checks against."""
    for op in ("scaled_mm_rowwise", "scaled_mm_tensorwise"):
        p = scaled(op, 33, 48, 96)
        ops = R.make_operands(p, torch.device("cpu"))
        acc = ops.a.float() @ ops.b.float()
        epilogue = (acc * (ops.scale_a * ops.scale_b)).to(torch.bfloat16)
        assert R.relative_error(epilogue, ops.reference) <= 4e-3  # bf16 rounding alone
        assert R.relative_error(acc.to(torch.bfloat16), ops.reference) > 0.5  # the scales matter: not a no-op


CASES = [
    # triton::mm + scaling epilogue: rowwise over several tiles, EVEN_K off (96 % 64), GROUP_M swizzle
    {"problem": {"op": "scaled_mm_rowwise", "m": 33, "n": 48, "k": 96}, "family": "triton_mm", "tile": [32, 16, 64, 1, 4, 8]},
    {"problem": {"op": "scaled_mm_rowwise", "m": 33, "n": 48, "k": 96}, "family": "triton_mm", "tile": [16, 32, 32, 2, 4, 2]},
    # rowwise with M = 1: scale_a is (1, 1)
    {"problem": {"op": "scaled_mm_rowwise", "m": 1, "n": 32, "k": 64}, "family": "triton_mm", "tile": [16, 16, 32, 1, 2, 8]},
    {"problem": {"op": "scaled_mm_tensorwise", "m": 17, "n": 64, "k": 128}, "family": "triton_mm", "tile": [16, 32, 64, 1, 4, 8]},
    # persistent TMA: more tiles than programs (6 tiles on 4 SMs), ragged M and N, K over several steps
    {"problem": {"op": "scaled_mm_rowwise", "m": 33, "n": 48, "k": 96}, "family": "triton_tma", "tile": [16, 32, 32, 1, 4, 8]},
    {"problem": {"op": "scaled_mm_tensorwise", "m": 40, "n": 80, "k": 64}, "family": "triton_tma", "tile": [32, 32, 32, 1, 4, 8], "num_sms": 2},
    {"problem": {"op": "scaled_mm_rowwise", "m": 1, "n": 32, "k": 64}, "family": "triton_tma", "tile": [16, 32, 32, 1, 4, 8]},
]


def test_scaled_kernels_match_torch_under_interpreter():
    # every kernel is checked against the fp32 reference; against the CPU _scaled_mm too where it takes the scales
    rowwise = cpu_scaled_mm_takes_row_scales()
    cases = [{**case, "aten": rowwise or case["problem"]["op"] != "scaled_mm_rowwise"} for case in CASES]
    errors = run_interpreted("interpret_scaled_check.py", cases)
    assert len(errors) == len(cases)
    for case, err in zip(cases, errors):
        # bf16 output rounding (~2**-9 relative) is all that separates them on the CPU
        assert err["reference"] <= 5e-3, (case, err)
        assert (err["aten"] <= 1e-2) if case["aten"] else err["aten"] is None, (case, err)
