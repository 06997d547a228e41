"""The GEMV decision path on the CPU: the rule, the decomposition it installs in Inductor's table (restored after),
and the rule's threshold as the shipped labels fit it. (On a GPU: tests/test_gpu_compile.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from predictor.offline import gemv_eval
from predictor.runtime.lowerings import gemv

LABELS = Path(__file__).resolve().parents[1] / "datasets" / "nvidia-h200" / "gemv.parquet"


@pytest.mark.parametrize(("n", "k", "dtype", "layout", "expected"), [
    (2048, 2048, "bfloat16", "col", True), (6144, 4096, "float16", "col", True), (4096, 4096, "float32", "col", True),
    (6145, 4096, "bfloat16", "col", False), (32000, 2048, "bfloat16", "col", False),  # vocabulary heads
    (768, 768, "float16", "row", False), (2048, 2048, "int8", "col", False)])
def test_rule_takes_column_major_weights_up_to_max_n(n, k, dtype, layout, expected):
    assert gemv.takes_reduction(n, k, dtype, layout) is expected


@pytest.fixture
def cpu_counts(monkeypatch):
    monkeypatch.setattr(gemv, "DEVICES", ("cpu", "cuda"))  # the same decisions on CPU tensors
    return gemv.gemv_count()


def test_one_row_gemm_becomes_the_reduction_and_others_keep_the_original(cpu_counts):
    """x @ w.t() with one row and a column-major weight: the reduction form (same values); two rows, a row-major
    weight or a vocabulary-wide weight: the original decomposition (here: a marker)."""
    original = lambda a, b: "original"  # noqa: E731
    mm = gemv._mm(original)
    w = torch.randn(64, 32)
    x = torch.randn(1, 32)
    torch.testing.assert_close(mm(x, w.t()), x @ w.t())
    assert gemv.gemv_count() == cpu_counts + 1
    assert mm(torch.randn(2, 32), w.t()) == "original"
    assert mm(x, w.t().contiguous()) == "original"  # row-major B
    wide = torch.randn(gemv.MAX_N + 1, 8)
    assert mm(torch.randn(1, 8), wide.t()) == "original"
    bias = torch.randn(64)
    addmm = gemv._addmm(lambda *a, **k: "original")
    torch.testing.assert_close(addmm(bias, x, w.t(), beta=0.5, alpha=2.0), 0.5 * bias + 2.0 * (x @ w.t()))
    assert gemv.gemv_count() == cpu_counts + 2


def test_the_decomposition_table_is_restored_also_after_an_error():
    from torch._inductor import decomposition

    aten = torch.ops.aten
    tables = [decomposition.decompositions, decomposition.fast_random_decomps()]
    before = [(t.get(aten.mm.default), t.get(aten.addmm.default)) for t in tables]
    with pytest.raises(RuntimeError):
        with gemv.gemv_as_reduction(gemv.takes_reduction):
            assert all(getattr(t[aten.mm.default], "predictor_gemv", False) for t in tables)
            with gemv.gemv_as_reduction(gemv.takes_reduction):  # nested: wraps once
                assert not getattr(tables[0][aten.mm.default].__wrapped__, "predictor_gemv", False)
            raise RuntimeError("compile failed")
    assert [(t.get(aten.mm.default), t.get(aten.addmm.default)) for t in tables] == before


def test_compiled_one_row_linear_matches_eager_on_the_cpu(cpu_counts):
    """Through Inductor (CPU): the decomposition is applied while compiling and the result is right."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(32, 16, bias=True)
    x = torch.randn(1, 32)
    with gemv.gemv_as_reduction(gemv.takes_reduction), torch.no_grad():
        out = torch.compile(lin, backend="aot_eager_decomp_partition")(x)
    torch.testing.assert_close(out, lin(x))
    assert gemv.gemv_count() == cpu_counts + 1  # the addmm of the one-row Linear
    torch._dynamo.reset()


def test_a_dynamic_batch_takes_the_reduction_in_its_batch_one_graph_only(cpu_counts):
    """Dynamo specialises a size of 1: under dynamic=True batch 1 is a graph of its own with M = 1, which takes the
    reduction; the one dynamic graph serves every other batch with the original GEMM."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(32, 16, bias=True)
    compiled = torch.compile(lin, backend="aot_eager_decomp_partition", dynamic=True)
    reductions = []
    with gemv.gemv_as_reduction(gemv.takes_reduction), torch.no_grad():
        for batch in (4, 1, 8, 1, 3):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(compiled(x), lin(x))
            reductions.append(gemv.gemv_count() - cpu_counts)
    assert reductions == [0, 1, 1, 1, 1]  # traced once, in the batch-1 graph; no other graph compiled it
    torch._dynamo.reset()


def test_shipped_labels_fit_the_rules_threshold_and_beat_cublas_only_held_out():
    table, max_n = gemv_eval.evaluate(gemv_eval.read_labels(LABELS))
    assert max_n == gemv.MAX_N  # the runtime constant is what the labels fit
    by = table.set_index("method")["oracle@1"]
    assert by["rule (held out by model)"] > by["cublas-only"] and by["rule (held out by model)"] > by["reduction-always"]


def test_evaluator_refuses_an_unreadable_file_in_one_line(tmp_path, capsys):
    from predictor.cli import main

    assert main(["gemv-eval", str(tmp_path / "missing.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.parquet" in err[0]


def test_evaluator_prints_the_table_and_the_threshold(capsys):
    from predictor.cli import main

    assert main(["gemv-eval", str(LABELS)]) == 0
    out = capsys.readouterr().out
    assert "| rule (held out by model) | 60 | 0.985 |" in out and f"max_n = {gemv.MAX_N}" in out


def test_a_symbolic_width_is_no_decision_and_does_not_specialise_the_graph(cpu_counts):
    """Llama's rotary embedding is ``(heads, 1) @ (1, tokens)``: in a prefill with the token count marked dynamic,
    N is symbolic. Reading it must not specialise the graph (Dynamo then refuses the compile); it is not a GEMV."""
    torch._dynamo.reset()
    freq = torch.randn(1, 1)  # one row: the decision reads N
    compiled = torch.compile(lambda pos: (freq @ pos).cos(), backend="aot_eager_decomp_partition", dynamic=True)
    with gemv.gemv_as_reduction(gemv.takes_reduction), torch.no_grad():
        for tokens in (64, 100):
            pos = torch.randn(1, tokens)
            torch._dynamo.mark_dynamic(pos, 1)
            torch.testing.assert_close(compiled(pos), (freq @ pos).cos())
    assert gemv.gemv_count() == cpu_counts  # N unknown: the original GEMM
    torch._dynamo.reset()


def test_resuming_labels_of_another_gpu_or_torch_is_refused():
    import pandas as pd

    from collectors.gemv import resume_mismatch

    env = {"gpu": "NVIDIA H200", "cc": "9.0", "torch": "2.11.0+cu130", "triton": "3.6.0"}
    done = pd.DataFrame({"gpu": ["NVIDIA H200"] * 2, "cc": ["9.0"] * 2, "torch": ["2.11.0+cu130"] * 2,
                         "triton": ["3.6.0"] * 2})
    assert resume_mismatch(done, env) is None and resume_mismatch(pd.DataFrame(), env) is None
    other = resume_mismatch(done, {**env, "gpu": "NVIDIA H100 80GB HBM3"})
    assert other == "on gpu 'NVIDIA H200', this machine has 'NVIDIA H100 80GB HBM3'"
    assert "torch" in resume_mismatch(done.assign(torch="2.13.0"), env)
