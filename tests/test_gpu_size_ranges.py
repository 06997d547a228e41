"""On a GPU: ``predictor.compile(model, dynamic=True, size_ranges=True)`` gives each symbolic-M GEMM one kernel per
range of M, chosen by the hook with nothing benchmarked, and the right output at every size, in one graph."""

from __future__ import annotations

import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import predictor
from predictor.runtime import compile_state
from predictor.runtime.dynamic import size_ranges as sr

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_one_dynamic_compile_serves_every_range_with_the_right_output():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 5632, bias=False), torch.nn.SiLU(),
                                torch.nn.Linear(5632, 2048)).cuda().to(torch.bfloat16).eval()
    seen = len(compile_state.lowered_ranges())
    try:
        compiled = predictor.compile(model, dynamic=True, size_ranges=True, cudagraphs=False)
        with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
            _, (code, *_) = run_and_get_code(compiled, torch.randn(100, 2048, device="cuda", dtype=torch.bfloat16))
            assert compile_state.lowered_ranges()[seen:] == [6, 33, 129, sr.PLAIN] * 2
            assert sorted({int(b) for b in re.findall(r"if s\d+ <= (\d+):", code)}) == [16, 64, 256]
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            for m in (2, 16, 17, 64, 65, 256, 257, 1024):
                x = torch.randn(m, 2048, device="cuda", dtype=torch.bfloat16)
                ref = torch.nn.functional.linear(torch.nn.functional.silu(x.float() @ model[0].weight.float().t()),
                                                 model[2].weight.float(), model[2].bias.float())
                out = compiled(x).float()
                assert ((out - ref).norm() / ref.norm()).item() < 2e-2, m
            assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
        stats = predictor.stats()
        assert stats["gemms_seen"] >= 6  # the three ranges of both GEMMs went through the hook
    finally:
        predictor.uninstall()
