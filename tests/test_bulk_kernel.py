"""The bulk Triton kernel computes the right GEMM for tiny shapes, on the CPU through Triton's interpreter."""

import pytest
from interpreter import run_interpreted

pytest.importorskip("triton")

CASES = [
    # even K, row/row
    {"problem": {"op": "mm", "m": 16, "n": 32, "k": 32, "dtype": "float32"}, "tile": [16, 16, 16, 1, 4, 8]},
    # ragged M/N/K (masks, EVEN_K False), B transposed as F.linear gives it
    {"problem": {"op": "mm", "m": 19, "n": 23, "k": 37, "dtype": "float32", "layout_b": "col"}, "tile": [16, 16, 16, 1, 4, 8]},
    # A transposed (weight gradient), fp16
    {"problem": {"op": "mm", "m": 17, "n": 16, "k": 48, "dtype": "float16", "layout_a": "col"}, "tile": [16, 16, 32, 1, 4, 2]},
    # addmm epilogue and bmm batch axis
    {"problem": {"op": "addmm", "m": 16, "n": 20, "k": 16, "dtype": "float32"}, "tile": [16, 16, 16, 1, 4, 8]},
    {"problem": {"op": "bmm", "b": 3, "m": 9, "n": 16, "k": 24, "dtype": "float32"}, "tile": [16, 16, 16, 1, 4, 8]},
    # int8 -> int32, exact
    {"problem": {"op": "int_mm", "m": 32, "n": 16, "k": 32, "dtype": "int8"}, "tile": [16, 16, 16, 1, 4, 8]},
]


def test_bulk_kernel_matches_matmul_under_interpreter():
    errors = run_interpreted("interpret_kernel_check.py", CASES)
    tolerances = {"float32": 1e-5, "float16": 2e-3, "int8": 0.0}
    assert len(errors) == len(CASES), errors
    for case, err in zip(CASES, errors):
        assert err <= tolerances[case["problem"]["dtype"]], (case, err)
