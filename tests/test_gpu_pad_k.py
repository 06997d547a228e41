"""On a GPU: ``predictor.compile`` pads a token MLP's 196-long reduction (``runtime.pad_k``) and matches eager."""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.runtime.choices import installed
from predictor.runtime.lowerings import pad_k

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_token_mlp_runs_padded_with_eagers_result(dtype):
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(196, 384), torch.nn.GELU(), torch.nn.Linear(384, 196))
    model = model.cuda().to(dtype).eval()
    x = torch.randn(24576, 196, device="cuda", dtype=dtype)
    before = pad_k.padded_k_count()
    try:
        with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
            expected = model(x)
            out = predictor.compile(model)(x)
    finally:
        while installed._STACK:
            predictor.uninstall()
        torch._dynamo.reset()
    assert pad_k.padded_k_count() - before == 1  # the first layer (K = 196); the second's K = 384 is aligned
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
