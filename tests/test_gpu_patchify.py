"""On a GPU: ``predictor.compile`` runs a ViT stem (a 16x16 patch embedding of an RGB image) as a GEMM, forward and
backward, with eager's results; plain ``torch.compile`` keeps the cuDNN convolution."""

from __future__ import annotations

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import predictor
from predictor.runtime.choices import installed
from predictor.runtime.lowerings import patchify

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class Stem(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 384, 16, stride=16)
        self.norm = torch.nn.LayerNorm(384)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x).flatten(2).transpose(1, 2))


def _convolution_calls(code: list[str]) -> list[str]:
    lines = [line for line in "\n".join(code).splitlines() if not line.strip().startswith("#")]
    return [line for line in lines if "convolution" in line and "_fused_" not in line]


@pytest.fixture
def fresh():
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


def test_a_vit_stem_runs_as_a_gemm_with_eagers_outputs(fresh):
    torch.manual_seed(0)
    model = Stem().cuda().half().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda", dtype=torch.half)
    before = patchify.patch_gemm_count()
    with torch.no_grad():
        expected = model(x)
        got, code = run_and_get_code(predictor.compile(model, cudagraphs=False), x)
        torch._dynamo.reset()
        _, plain_code = run_and_get_code(torch.compile(model), x)
    assert patchify.patch_gemm_count() == before + 1
    assert _convolution_calls(code) == []
    assert _convolution_calls(plain_code)  # plain keeps cuDNN's convolution
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)


def test_a_training_step_gives_eagers_gradients_without_a_convolution(fresh):
    torch.manual_seed(0)
    model = Stem().cuda()
    reference = Stem().cuda()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(4, 3, 224, 224, device="cuda")
    compiled = predictor.compile(model, cudagraphs=False)
    before = patchify.patch_gemm_count()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            compiled(x).float().square().mean().backward()
    _, code = run_and_get_code(step)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        reference(x).float().square().mean().backward()
    assert code and patchify.patch_gemm_count() > before  # compiled, with the stem as a GEMM
    assert _convolution_calls(code) == []
    for name in ("conv.weight", "conv.bias"):
        got, expected = dict(model.named_parameters())[name].grad, dict(reference.named_parameters())[name].grad
        assert torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0) > 0.999


def test_a_dynamic_compile_keeps_the_gemm_at_every_batch(fresh):
    torch.manual_seed(0)
    model = Stem().cuda().half().eval()
    compiled = predictor.compile(model, cudagraphs=False, dynamic=True)
    before = patchify.patch_gemm_count()
    with torch.no_grad():
        for batch in (2, 5, 16):
            x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half)
            torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)
    assert patchify.patch_gemm_count() > before
