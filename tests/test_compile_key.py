"""The precompile key must describe exactly the binary the timing run launches (else every problem recompiles)."""

import itertools

import pytest
import torch

from collectors.bulk_compile import _int_class, compile_key
from collectors.runners import contiguity_hints, make_operands
from predictor.core.candidate import Candidate
from predictor.core.problem import Problem

TILE = Candidate("triton_mm", 64, 32, 32, 3, 4, 8)


@pytest.mark.parametrize("op, la, lb, m, n, k", [
    (op, la, lb, m, n, k)
    for op, (la, lb), (m, n, k) in itertools.product(
        ("mm", "addmm", "bmm"), (("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")),
        ((48, 40, 64), (17, 33, 20), (128, 16, 1), (1, 96, 48)))
    if not (op != "mm" and k == 1)
])
def test_key_matches_the_launched_strides_and_hints(op, la, lb, m, n, k):
    p = Problem(op, m, n, k, "float16", b=3 if op == "bmm" else 1, layout_a=la, layout_b=lb)
    ops = make_operands(p, torch.device("cpu"))
    a, b, out = ops.a, ops.b, ops.out
    inner = (lambda t: t.stride()[-2:])
    (sam, sak), (sbk, sbn) = inner(a), inner(b)
    key = compile_key(p, TILE)
    # the non-unit strides of A and B and the output row stride, as Triton specialises them
    assert key[12] == _int_class(sam if sak == 1 else sak)
    assert key[13] == _int_class(sbk if sbn == 1 else sbn)
    assert key[14] == _int_class(out.stride(-2))
    if op == "bmm":
        assert key[15:18] == (_int_class(a.stride(0)), _int_class(b.stride(0)), _int_class(out.stride(0)))
    assert key[11] == (k % TILE.block_k == 0)
    assert key[18:20] == contiguity_hints(m, n, k, sam, sak, sbk, sbn, TILE.block_m, TILE.block_n)


def test_non_triton_candidates_need_no_binary():
    p = Problem("mm", 64, 64, 64, "float16")
    assert compile_key(p, Candidate("aten", aten_op="mm")) is None
    assert compile_key(p, Candidate("decompose_k", k_split=4)) is None


def test_background_compiler_wait_counts_failures_and_shows_progress(capsys):
    """``wait`` blocks on each key's compile and counts the failed ones; with ``desc`` it draws a progress bar
    (several GPUs compile everything before timing, which takes minutes on a new GPU)."""
    from concurrent.futures import Future

    from collectors.bulk_compile import BackgroundCompiler

    def done(result):
        f = Future()
        f.set_result(result)
        return f

    compiler = BackgroundCompiler.__new__(BackgroundCompiler)  # no process pool: futures already finished
    compiler.futures = {("a",): done(None), ("b",): done("OutOfResources: shared memory"), ("c",): done(None)}
    compiler.failed = 0
    compiler.wait([("a",), ("b",), ("unknown",)])
    assert compiler.failed == 1
    compiler.wait([("a",), ("b",), ("c",)], desc="compile")
    assert compiler.failed == 2
    assert "compile" in capsys.readouterr().err
