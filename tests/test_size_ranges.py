"""One compile for every size (``predictor.runtime.dynamic.size_ranges``) on the CPU: a symbolic-M GEMM becomes a chain of
ranges dispatched on the actual M, each range lowered once and judged at its own M, outputs right at every size.
(On a GPU, with the hook choosing each range's kernel: tests/test_gpu_size_ranges.py.)"""

from __future__ import annotations

import re
from collections import Counter

import pytest
import sympy
import torch
from torch._inductor.utils import run_and_get_code

import predictor
from predictor.runtime.choices import gemm_inputs
from predictor.runtime import compile_state
from predictor.runtime.dynamic import size_ranges as sr
from predictor.testing.fakes import FakeInputs, FakeNode


def test_each_range_is_judged_at_its_geometric_middle():
    assert sr.BOUNDS == (16, 64, 256) and sr.REPRESENTATIVE == (6, 33, 129)
    assert sr.representatives((8, 1024)) == (4, 96)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16, bias=False)).eval()


def test_a_symbolic_m_gemm_runs_the_kernel_of_its_range_and_plain_above_the_last():
    torch._dynamo.reset()
    model, seen = _mlp(), len(compile_state.lowered_ranges())
    compiled = torch.compile(model, dynamic=True)
    with torch.no_grad(), sr.size_ranges(devices=("cpu",)), torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(compiled, torch.randn(300, 64))
    # addmm and mm, each lowered once per range: the three ranges at their M and plain's (0). The order of the
    # lowerings is Inductor's (torch 2.14 lowers the chain's branches from the last), so it is not compared.
    assert Counter(compile_state.lowered_ranges()[seen:]) == {6: 2, 33: 2, 129: 2, sr.PLAIN: 2}
    # host-side tests of the size: `if s0 <= 16:` (torch 2.11-2.13), `buf0_selector = int(s0 <= 16)` (2.14)
    bounds = sorted({int(b) for b in re.findall(r"(?:\bif |\bint\()s\d+ <= (\d+)\b", code)})
    assert bounds == [16, 64, 256]
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for m in (2, 16, 17, 64, 65, 256, 257, 1000):  # every range, its edges, and beyond the last
            x = torch.randn(m, 64)
            torch.testing.assert_close(compiled(x), model(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompile across the sizes


def test_static_sizes_and_other_devices_keep_their_gemms():
    torch._dynamo.reset()
    model, count = _mlp(), sr.range_count()
    with torch.no_grad(), sr.size_ranges(devices=("cpu",)), torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(torch.compile(model, dynamic=False), torch.randn(300, 64))
    assert sr.range_count() == count and " <= 16" not in code
    torch._dynamo.reset()
    with torch.no_grad(), sr.size_ranges(), torch._inductor.config.patch(force_disable_caches=True):  # CUDA only
        _, (code, *_) = run_and_get_code(torch.compile(model, dynamic=True), torch.randn(300, 64))
    assert sr.range_count() == count and " <= 16" not in code


def test_the_decompositions_are_restored_on_exit_and_on_an_error():
    from torch._inductor import decomposition

    before = decomposition.decompositions[torch.ops.aten.mm.default]
    with pytest.raises(RuntimeError, match="boom"):
        with sr.size_ranges(devices=("cpu",)):
            assert decomposition.decompositions[torch.ops.aten.mm.default] is not before
            raise RuntimeError("boom")
    assert decomposition.decompositions[torch.ops.aten.mm.default] is before


def test_the_hook_judges_a_ranged_gemm_at_the_ranges_m_not_the_graphs_hint(monkeypatch):
    s0 = sympy.Symbol("s0", positive=True, integer=True)
    hints = {s0: 300}
    monkeypatch.setattr(gemm_inputs, "_hints",
                        lambda exprs: tuple(int(hints.get(e, e)) if isinstance(e, sympy.Expr) else int(e)
                                            for e in exprs))
    bf16 = torch.bfloat16
    inputs = FakeInputs(FakeNode((s0, 4096), (4096, 1), bf16), FakeNode((4096, 1024), (1, 4096), bf16))
    assert gemm_inputs.problem_from_inputs(inputs, "mm").m == 300  # outside a range: the graph's hint
    with compile_state.judged_at(33):
        assert gemm_inputs.problem_from_inputs(inputs, "mm").m == 33
    with compile_state.judged_at(sr.PLAIN):  # above the last range: plain's lowering, the hint as before
        assert gemm_inputs.problem_from_inputs(inputs, "mm").m == 300
    static = FakeInputs(FakeNode((8, 4096), (4096, 1), bf16), FakeNode((4096, 1024), (1, 4096), bf16))
    with compile_state.judged_at(33):
        assert gemm_inputs.problem_from_inputs(static, "mm").m == 8  # a static M is never replaced


def test_size_ranges_must_be_a_bool():
    with pytest.raises(ValueError, match="size_ranges must be True or False"):
        predictor.compile(torch.nn.Linear(4, 4), dynamic=True, size_ranges="yes")


def test_offline_evaluation_scores_plain_per_size_and_ranges_on_the_shipped_sweeps():
    from pathlib import Path

    from predictor.artifacts.model_folder import load_model
    from predictor.core.device import DeviceInfo
    from predictor.offline import size_range_eval
    from predictor.artifacts.schema import read_dataset

    root = Path(__file__).resolve().parents[1]
    model, meta = load_model(root / "models" / "h100-default-lgbm")
    rows = read_dataset(root / "datasets" / "nvidia-h100" / "default.parquet")
    table = size_range_eval.evaluate(rows, model, DeviceInfo.from_metadata(meta), meta,
                                     bound_sets=[sr.BOUNDS, (8, 32, 128)])
    assert len(table) == 6 and (table["sizes"] >= 30).all()
    summary = size_range_eval.summary(table).set_index("strategy")
    fractions = summary["geomean over families"]
    assert set(fractions.index) == {"plain", "per size", "ranges 16,64,256", "ranges 8,32,128",
                                    "best per range 16,64,256", "best per range 8,32,128"}
    assert ((fractions > 0.9) & (fractions <= 1.0)).all()
    # what the labels say (docs/DYNAMIC.md): cuBLAS at every M is within 1% of the per-M best on these sweeps
    decided = fractions[["per size", "ranges 16,64,256", "ranges 8,32,128"]]
    assert fractions["plain"] > 0.99 and fractions["plain"] >= decided.max()


def test_bounds_learned_with_each_family_held_out_and_the_hindsight_ceiling():
    from pathlib import Path

    from predictor.artifacts.model_folder import load_model
    from predictor.core.device import DeviceInfo
    from predictor.offline import size_range_eval
    from predictor.artifacts.schema import read_dataset

    root = Path(__file__).resolve().parents[1]
    model, meta = load_model(root / "models" / "h100-default-lgbm")
    rows = read_dataset(root / "datasets" / "nvidia-h100" / "default.parquet")
    grid = size_range_eval.bound_candidates((8, 64, 512), most=2)
    assert grid == [(8,), (64,), (512,), (8, 64), (8, 512), (64, 512)]
    table = size_range_eval.evaluate(rows, model, DeviceInfo.from_metadata(meta), meta, bound_sets=[sr.BOUNDS],
                                     learn_from=grid)
    assert not any(c.startswith("ranges 8,64") for c in table.columns)  # the grid is learned from, not shown
    shown = {"plain", "ranges 16,64,256", *(f"ranges {','.join(map(str, b))}" for b in grid)}
    assert set(table["learned"]) <= shown
    summary = size_range_eval.summary(table).set_index("strategy")["geomean over families"]
    ceiling = summary["best per range 16,64,256"]
    assert summary["plain"] - 0.01 < ceiling <= 1.0  # with hindsight a kernel per range wins little over cuBLAS
    assert 0.9 < summary["learned bounds"] <= ceiling


def test_learned_bounds_pick_what_won_on_the_other_families():
    import pandas as pd

    from predictor.offline.size_range_eval import learned_bounds

    table = pd.DataFrame({"plain geomean": [0.99, 0.98, 0.97], "ranges 8 geomean": [1.0, 1.0, 0.5]})
    fraction, learned = learned_bounds(table)
    # held out 0 or 1: family 2's 0.5 sinks "ranges 8" on the others; held out 2: "ranges 8" led on 0 and 1
    assert list(learned) == ["plain", "plain", "ranges 8"]
    assert fraction.round(3).tolist() == [0.99, 0.98, 0.5]  # scored on the held-out family, not on the others
    table.loc[2, "ranges 8 geomean"] = float("nan")  # not timed there: never learned from that family
    fraction, learned = learned_bounds(table)
    assert list(learned)[:2] == ["plain", "plain"]
