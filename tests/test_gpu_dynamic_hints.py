"""On a GPU: a dynamic graph compiled by ``predictor.compile`` sizes its pointwise kernels for large sizes (hint
floor) and launches 1-D ones with the block of each call's size, while plain ``torch.compile`` sizes them for the first
size it saw; reductions keep the first size's hints under both; outputs right at every size."""

from __future__ import annotations

import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import predictor
from predictor.runtime.dynamic.dynamic_hints import hint_floor

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class GatedMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(256, 1024, bias=False)
        self.gate = torch.nn.Linear(256, 1024, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.gate(x)) * self.up(x)


def _generated_code(compile_fn, model, x) -> str:
    """The code Inductor writes for ``model`` compiled by ``compile_fn`` with x's first dimension dynamic."""
    torch._dynamo.reset()
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(compile_fn(model), x)
    return code


class NormedGate(torch.nn.Module):
    """A decoder's RMSNorm (a reduction over 256 per row) before a gated MLP (pointwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.RMSNorm(256)
        self.mlp = GatedMLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


def _hints(code: str) -> tuple[list[int], list[tuple[int, int]]]:
    """(each pointwise kernel's x hint, each reduction kernel's (x, r0_) hints) in generated code."""
    pointwise = [int(n) for n in re.findall(r"size_hints=\{'x': (\d+)\}", code)]
    reductions = [(int(x), int(r)) for x, r in re.findall(r"size_hints=\{'x': (\d+), 'r0_': (\d+)\}", code)]
    assert pointwise and reductions, "a pointwise and a reduction kernel expected in the generated code"
    return pointwise, reductions


def test_pointwise_kernels_of_a_dynamic_graph_are_sized_for_large_sizes_and_reductions_keep_theirs():
    from predictor.runtime.choices import installed

    torch.manual_seed(0)
    model = NormedGate().cuda().to(torch.bfloat16).eval()
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    try:
        plain_code = _generated_code(lambda m: torch.compile(m, dynamic=True), model, x.clone())
        our_code = _generated_code(lambda m: predictor.compile(m, dynamic=True, cudagraphs=False), model, x.clone())
        plain, ours = _hints(plain_code), _hints(our_code)
        # the gated MLP's 1-D pointwise kernel picks its block per launch (pointwise_by_size); plain's has one
        assert "@_pointwise_by_size(" in our_code and "@_pointwise_by_size(" not in plain_code
        assert max(plain[0]) <= 2 * 1024  # the first size seen: 2 rows of 1024
        assert min(ours[0]) >= hint_floor() * 1024
        assert ours[1] == plain[1] and max(h for h, _ in ours[1]) < hint_floor()  # a norm's rows: the first size's

        torch._dynamo.reset()
        compiled = predictor.compile(model, dynamic=True, cudagraphs=False)
        with torch.no_grad():
            for rows in (2, 3, 64, 1000):  # 2048 to 1024000 elements: each of the three blocks
                xi = torch.randn(rows, 256, device="cuda", dtype=torch.bfloat16)
                ref = model(xi).float()
                assert ((compiled(xi).float() - ref).norm() / ref.norm()).item() < 2e-2, rows
    finally:
        while installed._STACK:
            predictor.uninstall()
        torch._dynamo.reset()


class Reversed(torch.nn.Module):
    """A vector reversed over its symbolic length: each element's source is ``ks0 - 1 - index`` (the length a size
    argument) in a 1-D kernel (a kernel dividing by a symbolic size would be tiled 2-D instead, ``symbolic_tiling``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(0) * 2


def test_size_arguments_of_a_dynamic_graphs_kernels_run_32_bit_with_outputs_right_at_every_size():
    from predictor.runtime.choices import installed

    model = Reversed()
    x = torch.randn(24, device="cuda", dtype=torch.bfloat16)
    try:
        code = _generated_code(lambda m: predictor.compile(m, dynamic=True, cudagraphs=False), model, x.clone())
        kernel = code[code.index("@_pointwise_by_size("):]
        assert "'ks0': 'i64'" in kernel[:kernel.index("@triton.jit")]  # Inductor's 64-bit size, narrowed at launch
        torch._dynamo.reset()
        compiled = predictor.compile(model, dynamic=True, cudagraphs=False)
        with torch.no_grad():
            for tokens in (3, 100, 1000, 4097):
                xi = torch.randn(tokens * 8, device="cuda", dtype=torch.bfloat16)
                torch.testing.assert_close(compiled(xi), model(xi))
    finally:
        while installed._STACK:
            predictor.uninstall()
        torch._dynamo.reset()


class CausalMask(torch.nn.Module):
    """A prefill's additive causal mask over its tokens (the dynamic size), added to scores of the same shape."""

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        i = torch.arange(scores.shape[-1], device=scores.device)
        return scores + torch.where(i[None, :] <= i[:, None], 0.0, float("-inf")).to(scores.dtype)


def _mask_code(compile_fn) -> str:
    scores = torch.randn(100, 100, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    torch._dynamo.mark_dynamic(scores, 0)
    torch._dynamo.mark_dynamic(scores, 1)
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        _, (code, *_) = run_and_get_code(compile_fn(CausalMask()), scores)
    return code


def test_a_tokens_by_tokens_mask_is_tiled_in_two_dimensions_without_a_symbolic_division():
    """Plain writes the mask 1-D, recovering each position by a division by the token count; predictor.compile writes
    it 2-D (``symbolic_tiling``): no ``// ks`` in the kernel; outputs equal eager's at sizes on either side."""
    plain = _mask_code(torch.compile)
    ours = _mask_code(lambda m: predictor.compile(m, dynamic=True))
    assert re.search(r"xindex // ks\d", plain), "plain's 1-D mask divides by the token count"
    assert "ynumel" in ours and not re.search(r"index // ks\d", ours)
    torch._dynamo.reset()
    compiled = predictor.compile(CausalMask(), dynamic=True)
    for tokens in (7, 100, 333, 1024):
        s = torch.randn(tokens, tokens, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            torch.testing.assert_close(compiled(s), CausalMask()(s))
