"""On a GPU: a grouped GEMM (a mixture-of-experts layer) lowers with the band's one Triton config where it routes
over few experts, and as aten's grouped GEMM for a decode step over many experts; both compute the product."""

from __future__ import annotations

import re

import pytest
import torch

from predictor.runtime.lowerings import grouped_mm

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0) or not hasattr(torch, "_grouped_mm"),
    reason="needs a CUDA GPU of compute capability 9.0 or newer and torch._grouped_mm")]


def _grouped(x, w, offs):
    return torch._grouped_mm(x, w, offs=offs)


def _run(rows: int, experts: int):
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x = torch.randn(rows, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, 2048, 1536, device="cuda", dtype=torch.bfloat16) / 45
    ends = torch.linspace(0, rows, experts + 1, device="cuda")[1:].round().to(torch.int32)  # rows spread over experts
    compiled = torch.compile(_grouped, dynamic=False)
    with (config.patch(force_disable_caches=True, max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"),
          grouped_mm.grouped_mm_decided(grouped_mm.rule_for_this_gpu())):
        out, code = run_and_get_code(compiled, x, w, ends)
    ref = _grouped(x, w, ends).float()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2
    return "\n".join(code)


def test_decode_over_few_experts_runs_the_bands_triton_config():
    code = _run(rows=2, experts=8)  # a token's top 2 of 8 experts
    assert "triton_tem_" in code and re.search(r"BLOCK_K\s*:\s*tl\.constexpr\s*=\s*256", code)


def test_decode_over_many_experts_runs_atens_grouped_gemm():
    code = _run(rows=8, experts=2 * grouped_mm.rule_for_this_gpu().max_decode_experts)  # a token's top 8 of 128 experts
    assert "triton_tem_" not in code and "_grouped_mm" in code
