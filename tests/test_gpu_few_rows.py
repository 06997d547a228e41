"""On a GPU: the few-rows kernel multiplies right at every row count, odd widths and reductions, with and without a
bias; and ``predictor.compile(model, dynamic=True)`` runs a decoder MLP's GEMMs through it at 2-16 rows and cuBLAS
above, in one graph, under CUDA graph trees too."""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.runtime.lowerings import few_rows as fr

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("n, k, bias", [(2048, 2048, False), (4544, 4544, True), (1000, 777, True),
                                        (50257, 768, False)])
def test_the_kernel_matches_the_fp32_product_at_every_row_count(n, k, bias):
    from predictor.runtime.lowerings.few_rows_kernel import few_rows_linear

    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    for config in (fr.GRID[0], fr.parse_config_name("N64_K128_w2_s3")):
        for m in (1, 2, 7, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = x.float() @ w.float().t() + (b.float() if bias else 0)
            out = few_rows_linear(x, w, b, fr.ROWS, config["BLOCK_N"], config["BLOCK_K"], config["num_warps"],
                                  config["num_stages"])
            assert out.shape == (m, n) and _rel(out, ref) < 1e-2, (m, config)


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_a_dynamic_compile_serves_few_rows_by_the_kernel_and_more_by_cublas(cudagraphs):
    if not fr.table_for_this_gpu():
        pytest.skip(f"no few-rows table for {torch.cuda.get_device_name()}")
    table = fr.table_for_this_gpu()
    # an MLP whose up projection is a weight this GPU's table takes (which ones it takes is the GPU's labels' call)
    n, k = next(((p["n"], p["k"]) for p in table if fr.choose(p["n"], p["k"], table) is not None), (None, None))
    if n is None:
        pytest.skip(f"the few-rows table for {torch.cuda.get_device_name()} takes no labelled weight")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False), torch.nn.SiLU(),
                                torch.nn.Linear(n, k)).cuda().to(torch.bfloat16).eval()
    taken = sum(fr.choose(a, b, table) is not None for a, b in ((n, k), (k, n)))
    count = fr.few_rows_count()
    try:
        compiled = predictor.compile(model, dynamic=True, cudagraphs=cudagraphs)
        with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
            compiled(torch.randn(5, k, device="cuda", dtype=torch.bfloat16))
            assert fr.few_rows_count() == count + taken
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            for m in (2, 3, 16, 17, 64, 1000):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                ref = torch.nn.functional.linear(torch.nn.functional.silu(x.float() @ model[0].weight.float().t()),
                                                 model[2].weight.float(), model[2].bias.float())
                assert _rel(compiled(x).clone(), ref) < 2e-2, m
            assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompile
    finally:
        predictor.uninstall()


def test_a_kernel_compiled_ahead_is_the_one_the_call_runs():
    from predictor.runtime.lowerings.few_rows_kernel import _few_rows_kernel, few_rows_linear, warm

    config = fr.parse_config_name("N32_K128_w4_s4")
    args = (fr.ROWS, config["BLOCK_N"], config["BLOCK_K"], config["num_warps"], config["num_stages"])
    warm(torch.bfloat16, 3072, 1536, True, *args, device=0)
    compiled = sum(len(cache[0]) for cache in _few_rows_kernel.device_caches.values())
    x = torch.randn(5, 1536, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3072, 1536, device="cuda", dtype=torch.bfloat16)
    few_rows_linear(x, w, torch.randn(3072, device="cuda", dtype=torch.bfloat16), *args)
    assert sum(len(cache[0]) for cache in _few_rows_kernel.device_caches.values()) == compiled
