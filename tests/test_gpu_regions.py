"""On a GPU: ``predictor.compile`` ranks a token-mixing layer (an MLP over 196 tokens: N or K = 196, rows not 16-byte
aligned) with the short-unaligned region model where one ships for this GPU, and the step matches eager."""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.core.device import DeviceInfo
from predictor.core.regions import SHORT_UNALIGNED
from predictor.runtime.choices import installed
from predictor.runtime.choices.discovery import find_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class TokenMixing(torch.nn.Module):
    """MLP-Mixer's token MLP: LayerNorm, then an MLP over the token axis (196 -> 384 -> 196)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(768)
        self.fc1, self.fc2 = torch.nn.Linear(196, 384), torch.nn.Linear(384, 196)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x).transpose(1, 2)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(y))).transpose(1, 2)


def test_token_mixing_gemms_are_ranked_by_the_region_model():
    torch._dynamo.reset()
    device = DeviceInfo.from_torch()
    model = TokenMixing().cuda().half().eval()
    x = torch.randn(32, 196, 768, device="cuda", dtype=torch.float16)
    try:
        with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
            expected = model(x)
            out = predictor.compile(model)(x)
        stats = predictor.stats()
    finally:
        while installed._STACK:
            predictor.uninstall()
        torch._dynamo.reset()
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    assert stats["fallbacks"] == {}
    # predictor.compile takes a region model of the same architecture where this GPU has none (allow_similar_gpu)
    if find_model(device, region=SHORT_UNALIGNED, allow_similar=True) is None:
        assert stats["region_scored"] == 0  # no region model for this GPU: the main model ranks them
    else:  # fc2 (N = 196); fc1's K = 196 is padded to 200 (runtime.pad_k), which takes it out of the region
        assert stats["region_scored"] == 1
