"""On a GPU: a dynamic graph compiled by ``predictor.compile`` sizes its pointwise kernels for large sizes (hint
floor), while plain ``torch.compile`` sizes them for the first size it saw; outputs right at every size."""

from __future__ import annotations

import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import predictor
from predictor.runtime.dynamic_hints import hint_floor

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class GatedMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(256, 1024, bias=False)
        self.gate = torch.nn.Linear(256, 1024, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.gate(x)) * self.up(x)


def _pointwise_hints(compile_fn, model, x) -> list[int]:
    torch._dynamo.reset()
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(compile_fn(model), x)
    found = [int(n) for n in re.findall(r"size_hints=\{'x': (\d+)\}", code)]
    assert found, "no pointwise kernel in the generated code"
    return found


def test_pointwise_kernels_of_a_dynamic_graph_are_sized_for_large_sizes():
    from predictor.runtime import installing

    torch.manual_seed(0)
    model = GatedMLP().cuda().to(torch.bfloat16).eval()
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    try:
        plain = _pointwise_hints(lambda m: torch.compile(m, dynamic=True), model, x.clone())
        ours = _pointwise_hints(lambda m: predictor.compile(m, dynamic=True, cudagraphs=False), model, x.clone())
        assert max(plain) <= 2 * 1024  # the first size seen: 2 rows of 1024
        assert min(ours) >= hint_floor() * 1024

        torch._dynamo.reset()
        compiled = predictor.compile(model, dynamic=True, cudagraphs=False)
        with torch.no_grad():
            for rows in (2, 3, 64, 1000):
                xi = torch.randn(rows, 256, device="cuda", dtype=torch.bfloat16)
                ref = model(xi).float()
                assert ((compiled(xi).float() - ref).norm() / ref.norm()).item() < 2e-2, rows
    finally:
        while installing._STACK:
            predictor.uninstall()
        torch._dynamo.reset()


class NormedGate(torch.nn.Module):
    """A decoder's RMSNorm (a reduction over 256 per row) before a gated MLP (pointwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.RMSNorm(256)
        self.mlp = GatedMLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


def _reduction_hints(compile_fn, model, x) -> list[tuple[int, int]]:
    torch._dynamo.reset()
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(compile_fn(model), x)
    found = [(int(x), int(r)) for x, r in re.findall(r"size_hints=\{'x': (\d+), 'r0_': (\d+)\}", code)]
    assert found, "no reduction kernel in the generated code"
    return found


def test_reduction_kernels_of_a_dynamic_graph_keep_the_first_sizes_hints():
    from predictor.runtime import installing

    torch.manual_seed(0)
    model = NormedGate().cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    try:
        plain = _reduction_hints(lambda m: torch.compile(m, dynamic=True), model, x.clone())
        ours = _reduction_hints(lambda m: predictor.compile(m, dynamic=True, cudagraphs=False), model, x.clone())
        assert ours == plain and max(h for h, _ in ours) < hint_floor()
    finally:
        while installing._STACK:
            predictor.uninstall()
        torch._dynamo.reset()
