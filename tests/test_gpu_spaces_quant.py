"""On a GPU: Inductor's own list for fp8 ``_scaled_mm`` (tensorwise, rowwise) and int8 ``_int_mm`` with B
column-major equals predictor.spaces.enumerate_space, as ``tests/test_gpu_spaces.py`` checks mm (same recorder:
nothing is compiled or benchmarked). The CPU expectations (tests/test_quantized.py) were derived from torch 2.13's
source; this test is what checks them against the torch the GPU machine runs (2.11 there).
"""

from __future__ import annotations

import pytest
import torch
from test_gpu_spaces import _compile_and_record, _layout, recorder  # noqa: F401 -- the fixture, shared

from collectors.runners import FP8_FAST_ACCUM, make_operands
from predictor.core.candidate import from_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.spaces import enumerate_space

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (op, m, n, k, tma, space): A row-major, B column-major, as torchao and F.linear-style weights run them
CASES = [
    ("int_mm", 32, 4096, 4096, False, "default"),
    ("int_mm", 17, 14336, 4096, False, "default"),
    ("int_mm", 2048, 1024, 4096, False, "default"),
    ("int_mm", 333, 3072, 768, False, "exhaustive"),
    ("scaled_mm_rowwise", 1, 4096, 4096, True, "default"),
    ("scaled_mm_rowwise", 16, 4096, 4096, True, "default"),
    ("scaled_mm_rowwise", 64, 14336, 4096, True, "default"),
    ("scaled_mm_rowwise", 2048, 4096, 4096, True, "default"),
    ("scaled_mm_rowwise", 333, 1024, 4096, False, "default"),
    ("scaled_mm_rowwise", 128, 4096, 1024, True, "exhaustive"),
    ("scaled_mm_tensorwise", 32, 4096, 4096, True, "default"),
    ("scaled_mm_tensorwise", 4096, 11008, 4096, True, "default"),
    ("scaled_mm_tensorwise", 8, 2048, 2048, False, "default"),
]


def _fn(op: str):
    if op == "int_mm":
        return torch._int_mm
    return lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=FP8_FAST_ACCUM)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_inductor_list_equals_space(case: tuple, recorder: list) -> None:  # noqa: F811 -- the imported fixture
    op, m, n, k, tma, space = case
    dtype = "int8" if op == "int_mm" else "float8_e4m3fn"
    problem = Problem(op, m, n, k, dtype, layout_b="col")
    ops = make_operands(problem, torch.device("cuda"))
    args = (ops.a, ops.b) if op == "int_mm" else (ops.a, ops.b, ops.scale_a, ops.scale_b)
    patch = {"triton.enable_persistent_tma_matmul": tma, "max_autotune_gemm_search_space": space.upper()}
    records = _compile_and_record(recorder, _fn(op), args, patch)
    assert len(records) == 1, f"expected one GEMM lowering, got {[r['op'] for r in records]}"
    record = records[0]
    assert record["op"] == ("int_mm" if op == "int_mm" else "scaled_mm")
    (mat1, mat2), (stride1, stride2) = record["shapes"][:2], record["strides"][:2]  # scales follow the operands
    assert (int(mat1[0]), int(mat2[1]), int(mat1[1])) == (m, n, k)
    assert (_layout(stride1, "row"), _layout(stride2, "col")) == ("row", "col")
    expected = [from_template_kwargs(uid, kw).key for uid, kw in record["choices"]]
    got = [c.key for c in enumerate_space(problem, space, DeviceInfo.from_torch(), tma=tma)]
    assert got == expected
