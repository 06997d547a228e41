"""On a GPU: a GEMV kernel Inductor generates gets the chosen blocks as a ``fixed_config`` (single and fused pair),
computes the right product, and every other kernel keeps Inductor's heuristic."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from predictor.runtime.lowerings import gemv_blocks, gemv_table
from predictor.runtime.lowerings.gemv import gemv_as_reduction

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

X8 = gemv_table.parse_config_name("X8_R256_w8")


def _compiled_code(fn, *args, choose):
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    seen: list[gemv_table.GemvKernel] = []

    def record(kernel):
        seen.append(kernel)
        return choose(kernel)

    compiled = torch.compile(fn, dynamic=False)
    with (torch._inductor.config.patch(force_disable_caches=True), gemv_as_reduction(rule=lambda *problem: True),
          gemv_blocks.gemv_blocks(record)):
        out, code = run_and_get_code(compiled, *args)
    return out, "\n".join(code), seen


def test_single_gemv_kernel_takes_the_chosen_blocks():
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3000, 4096, device="cuda", dtype=torch.bfloat16) / 64
    out, code, seen = _compiled_code(lambda a, b: F.linear(a, b), x, w, choose=lambda kernel: [X8])
    assert seen == [gemv_table.GemvKernel(3000, 4096, "bfloat16", 1)]
    assert "triton_heuristics.fixed_config" in code and "'XBLOCK': 8" in code and "'R0_BLOCK': 256" in code
    ref = x.float() @ w.float().t()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2


@pytest.mark.parametrize("config", ["X8_R0_w4", "X1_R0_w2"])
def test_a_short_k_gemv_is_one_persistent_kernel_that_takes_rows_and_warps(config):
    x = torch.randn(1, 960, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(49152, 960, device="cuda", dtype=torch.bfloat16) / 31
    chosen = gemv_table.parse_config_name(config)
    out, code, seen = _compiled_code(lambda a, b: F.linear(a, b), x, w, choose=lambda kernel: [chosen])
    assert seen == [gemv_table.GemvKernel(49152, 960, "bfloat16", 1)]
    assert "triton_heuristics.fixed_config" in code and f"'XBLOCK': {chosen['XBLOCK']}" in code
    assert "'R0_BLOCK'" not in code.split("fixed_config", 1)[1].split(")", 1)[0]  # the kernel defines it itself
    ref = x.float() @ w.float().t()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2


def test_fused_gate_up_kernel_is_one_kernel_of_two_gemvs():
    x = torch.randn(1, 2048, device="cuda", dtype=torch.float16)
    g, u = (torch.randn(5632, 2048, device="cuda", dtype=torch.float16) / 45 for _ in range(2))
    out, code, seen = _compiled_code(lambda a, b, c: F.silu(F.linear(a, b)) * F.linear(a, c), x, g, u,
                                     choose=lambda kernel: [X8])
    assert seen == [gemv_table.GemvKernel(5632, 2048, "float16", 2)]
    assert code.count("triton_heuristics.fixed_config") == 1
    ref = F.silu(x.float() @ g.float().t()) * (x.float() @ u.float().t())
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2


def test_gemv_fused_with_the_norm_ahead_of_it_computes_the_right_product():
    x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(32000, 2048, device="cuda", dtype=torch.bfloat16) / 45

    def rms_then_head(a, b):
        return F.linear(a * torch.rsqrt(a.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(a.dtype), b)

    out, code, seen = _compiled_code(rms_then_head, x, w, choose=lambda kernel: [X8])
    # given the blocks, or left to Inductor; the norm's scaling ahead is loads, no activation
    assert all((k.n, k.k, k.weights, k.activation_ahead) == (32000, 2048, 1, False) for k in seen)
    assert len(seen) <= 1 and bool(seen) == ("fixed_config" in code), (seen, code.count("fixed_config"))
    ref = rms_then_head(x.float(), w.float())
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2


def test_work_fused_ahead_of_the_gemv_is_counted_in_its_vector_loads():
    g, u = (torch.randn(1, 5632, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(2048, 5632, device="cuda", dtype=torch.bfloat16) / 75
    out, code, seen = _compiled_code(lambda a, b, c: F.linear(F.silu(a) * b, c), g, u, w, choose=lambda kernel: [X8])
    assert seen == [gemv_table.GemvKernel(2048, 5632, "bfloat16", 1, vector_loads=2, activation_ahead=True)]
    ref = (F.silu(g.float()) * u.float()) @ w.float().t()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2


def test_other_reductions_keep_inductors_heuristic():
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    out, code, seen = _compiled_code(lambda a: a.float().pow(2).mean(-1), x, choose=lambda kernel: [X8])
    assert seen == [] and "fixed_config" not in code
    torch.testing.assert_close(out, x.float().pow(2).mean(-1))


def test_a_prefill_with_its_token_count_marked_dynamic_compiles_once_under_predictor_compile():
    """A rotary embedding's GEMM is (positions, 1) x (1, tokens) and the vocabulary head one row: with the token
    count marked dynamic, one graph serves every length (the GEMV rule must not specialise the width)."""
    import predictor

    torch._dynamo.reset()
    torch.manual_seed(0)
    freq = torch.randn(1, 32, 1, device="cuda")
    one = torch.randn(1, 1, device="cuda")
    head = torch.randn(512, 64, device="cuda", dtype=torch.bfloat16)

    def prefill(pos, h):
        angles = (freq @ pos[:, None, :]).transpose(1, 2)  # (1, tokens, 32), as Llama writes it
        scale = (one @ pos)[..., None]  # (1, 1) x (1, tokens): one row of a symbolic width
        last = (h * (angles.cos().repeat(1, 1, 2) * scale).to(h.dtype))[:, -1, :]
        return F.linear(last, head)  # the head: one row

    torch._dynamo.utils.counters.clear()  # the graphs of the tests before are counted there too
    compiled = predictor.compile(prefill, dynamic=True, cudagraphs=False)
    try:
        with torch.no_grad():
            for tokens in (48, 100, 333):
                pos = torch.arange(tokens, device="cuda", dtype=torch.float32)[None].clone()
                h = torch.randn(1, tokens, 64, device="cuda", dtype=torch.bfloat16)
                torch._dynamo.mark_dynamic(pos, 1)
                torch._dynamo.mark_dynamic(h, 1)
                out, ref = compiled(pos, h).float(), prefill(pos, h).float()
                assert ((out - ref).norm() / ref.norm()).item() < 2e-2, tokens
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    finally:
        predictor.uninstall()


def test_predictor_compile_decides_a_short_k_head_from_this_gpus_own_labels():
    """A small decoder's vocabulary head after its norm (49152 x 960): the reduction with persistent blocks where
    this GPU's own labels say it beats cuBLAS (the H100's), else the width rule sends it to the ranker."""
    import predictor

    torch._dynamo.reset()
    h = torch.randn(1, 960, device="cuda", dtype=torch.bfloat16)
    scale = 1 + 0.1 * torch.randn(960, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(49152, 960, device="cuda", dtype=torch.bfloat16) / 31

    def norm_then_head(a, s, b):
        return F.linear(s * (a.float() * torch.rsqrt(a.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(a.dtype), b)

    kernel = gemv_table.GemvKernel(49152, 960, "bfloat16")
    reduced = gemv_table.reduction_beats_cublas(kernel, gemv_table.table_for_this_gpu())
    before = len(gemv_blocks.fixed_count()["gemv_kernels"])  # the decisions of this process so far
    compiled = predictor.compile(norm_then_head, cudagraphs=False)
    try:
        with torch.no_grad():
            out = compiled(h, scale, w)
        heads = [k for k in gemv_blocks.fixed_count()["gemv_kernels"][before:] if k.startswith("49152x960 ")]
        if reduced:
            assert heads and all("_R0_" in k for k in heads), heads
        else:
            assert not heads and predictor.stats()["gemms_seen"] >= 1  # the head reached the hook as a GEMM
        ref = norm_then_head(h.float(), scale.float(), w.float())
        assert ((out.float() - ref).norm() / ref.norm()).item() < 2e-2
    finally:
        predictor.uninstall()
        torch._dynamo.reset()
