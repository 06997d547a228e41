"""On a GPU: ``predictor.compile`` keeps exactly one choice per GEMM, so Inductor benchmarks nothing, and the
compiled model (forward and backward) matches eager. A GEMM op the hook does not know gets the aten choice alone.
"""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.runtime.choices import installed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture
def feedback():
    """Every autotune benchmark Inductor runs, as (name, number of timed choices)."""
    from torch._inductor import select_algorithm

    benchmarked: list[tuple[str, int]] = []
    select_algorithm.add_feedback_saver(lambda timings, name, *rest: benchmarked.append((name, len(timings))))
    torch._dynamo.reset()
    yield benchmarked
    select_algorithm.clear_feedback_savers()
    torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


def test_compile_decides_every_gemm_without_benchmarking(feedback):
    """A training graph under CUDA graph trees, with gradients accumulated over three backwards without zeroing
    (what fails under mode="max-autotune", pytorch/pytorch#169545): outputs and gradients match eager."""
    from torch._inductor import config
    from torch._inductor.utils import fresh_cache

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    mlp = mlp.to(torch.bfloat16)
    x = torch.randn(8, 256, 1024, device="cuda", dtype=torch.bfloat16)
    reference = mlp(x).detach()
    for _ in range(3):
        mlp(x).float().sum().backward()
    reference_grads = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad(set_to_none=True)
    outputs = []
    with fresh_cache(), config.patch(fx_graph_cache=False, autotune_local_cache=False):
        compiled = predictor.compile(mlp)
        for _ in range(3):  # CUDA graph trees record on a later call; their outputs are reused: copy them
            out = compiled(x)
            outputs.append(out.detach().clone())
            out.float().sum().backward()
        torch.cuda.synchronize()
    for i, got in enumerate(outputs):
        torch.testing.assert_close(got, reference, rtol=5e-2, atol=5e-2, msg=lambda m, i=i: f"call {i}: {m}")
    for got, want in zip((p.grad for p in mlp.parameters()), reference_grads):
        torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=1.0)
    stats = predictor.stats()
    assert stats["gemms_seen"] >= 5, stats  # 2 forward + 3 backward GEMMs (x needs no gradient)
    assert stats["kept_total"] == stats["gemms_seen"], stats  # one choice each
    assert feedback == [], feedback  # nothing benchmarked


def test_unknown_gemm_op_gets_the_aten_choice_alone(feedback):
    from torch._inductor import config
    from torch._inductor.utils import fresh_cache

    a = torch.randn(64, 128, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 256, 512, device="cuda", dtype=torch.float16)
    c = torch.randn(64, 128, 512, device="cuda", dtype=torch.float16)
    with fresh_cache(), config.patch(fx_graph_cache=False, autotune_local_cache=False):
        compiled = predictor.compile(lambda c, a, b: torch.baddbmm(c, a, b), cudagraphs=False)
        out = compiled(c, a, b)
    torch.testing.assert_close(out, torch.baddbmm(c, a, b), rtol=2e-2, atol=2e-1)
    stats = predictor.stats()
    assert stats["fallbacks"].get("unknown_op", 0) >= 1 and stats["kept_total"] == stats["gemms_seen"], stats
    assert feedback == [], feedback


def test_one_by_one_convolutions_run_on_cudnn_as_under_plain_compile(feedback):
    """resnet-style bottleneck, fp16, channels last (what Inductor's layout optimisation picks for a CNN): under
    ``max_autotune_gemm`` alone the 1x1 convolutions become GEMMs; under ``predictor.compile`` they stay cuDNN
    convolutions, as under plain ``torch.compile`` (conv_lowering.py), and no GEMM reaches the hook."""
    from torch._inductor.utils import fresh_cache, run_and_get_code

    from predictor.runtime.compile import RECOMMENDED_OPTIONS

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(256, 64, 1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1),
                                torch.nn.ReLU(), torch.nn.Conv2d(64, 256, 1)).cuda().half().eval()
    x = torch.randn(8, 256, 28, 28, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)

    def gemms_and_convolutions(compile_fn):
        torch._dynamo.reset()
        with fresh_cache(), torch.no_grad():
            out, code = run_and_get_code(compile_fn(block), x)
            torch.testing.assert_close(out, block(x), atol=2e-2, rtol=2e-2)
        src = "\n".join(code)
        return (src.count("extern_kernels.mm(") + src.count("extern_kernels.addmm(") + src.count("triton_tem_"),
                src.count("convolution("))

    gemms, _ = gemms_and_convolutions(lambda m: torch.compile(m, options=RECOMMENDED_OPTIONS))
    assert gemms >= 2  # the options alone: the two 1x1 convolutions as GEMMs
    plain, hooked = gemms_and_convolutions(torch.compile), gemms_and_convolutions(predictor.compile)
    assert plain == hooked and plain[0] == 0 and plain[1] >= 3
    assert predictor.stats()["gemms_seen"] == 0


def _decoder_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2048, 5632), torch.nn.SiLU(),
                               torch.nn.Linear(5632, 2048)).cuda().to(torch.bfloat16).eval()


def test_inference_runs_under_cuda_graph_trees_and_inside_a_callers_capture(feedback):
    """As called: an inference graph runs under CUDA graph trees (no launch per kernel). Inside the caller's own
    torch.cuda.graph capture the same compiled model runs its kernels without the trees, so the caller's graph
    captures them and its replays compute the right thing for new inputs."""
    mlp = _decoder_mlp()
    x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        reference = mlp(x)
        compiled = predictor.compile(mlp)
        for _ in range(3):
            out = compiled(x).clone()
        from collectors.programs.step import cudagraph_trees_used
        assert cudagraph_trees_used(torch.cuda.current_device())
        torch.testing.assert_close(out, reference, rtol=5e-2, atol=5e-2)
        static_x = x.clone()
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            compiled(static_x)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            static_out = compiled(static_x)
        new_x = torch.randn_like(x)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_out, mlp(new_x), rtol=5e-2, atol=5e-2)


def test_batch_one_gemv_runs_as_a_fused_reduction_without_cublas(feedback):
    """M=1 (batch-1 decode): the GEMV rule lowers both Linears to Triton reductions (no cuBLAS kernel in the step),
    nothing is benchmarked, and the result matches eager."""
    from predictor.runtime.lowerings.gemv import gemv_count
    from torch.profiler import ProfilerActivity, profile

    mlp = _decoder_mlp()
    x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16)
    before = gemv_count()
    with torch.no_grad():
        compiled = predictor.compile(mlp, cudagraphs=False)
        out = compiled(x)
        torch.testing.assert_close(out, mlp(x), rtol=5e-2, atol=5e-2)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            compiled(x)
            torch.cuda.synchronize()
    names = [e.name.lower() for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert gemv_count() - before == 2
    assert names and not any(k in n for n in names for k in ("gemv", "gemm", "nvjet", "cublas")), names
    assert not feedback


def test_named_backend_compiles_like_predictor_compile(feedback):
    """torch.compile(backend="gemm_predictor", mode="reduce-overhead"), as transformers' generate passes it."""
    from predictor.runtime.backend import register

    register()
    mlp = _decoder_mlp()
    x = torch.randn(4, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = torch.compile(mlp, backend="gemm_predictor", mode="reduce-overhead")
        for _ in range(3):
            out = compiled(x).clone()
        torch.testing.assert_close(out, mlp(x), rtol=5e-2, atol=5e-2)
    stats = predictor.stats()
    assert stats["gemms_seen"] == 2 and stats["kept_total"] == 2, stats
    assert not feedback


def test_the_feedback_saver_sees_a_benchmark(feedback):
    """The positive control of the "nothing benchmarked" checks here: without the hook, max-autotune's GEMM benchmark
    reaches the feedback saver with its many choices."""
    from torch._inductor import config
    from torch._inductor.utils import fresh_cache

    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
    with fresh_cache(), config.patch(fx_graph_cache=False, autotune_local_cache=False):
        out = torch.compile(lambda x, y: x @ y, options={"max_autotune_gemm": True,
                                                         "max_autotune_gemm_backends": "ATEN,TRITON"})(a, b)
    torch.testing.assert_close(out, a @ b, rtol=2e-2, atol=2e-1)
    assert len(feedback) == 1 and feedback[0][1] > 3, feedback


def test_tune_benchmarks_only_the_decided_kind():
    """predictor.compile(tune=3) with every GEMM decided for Triton (a gap no score misses): each GEMM's benchmark
    holds at most 3 choices and no cuBLAS one, and the output matches eager."""
    from torch._inductor import config, select_algorithm
    from torch._inductor.utils import fresh_cache

    benchmarked: list[list[bool]] = []
    select_algorithm.add_feedback_saver(lambda timings, *rest: benchmarked.append(
        [isinstance(c, select_algorithm.ExternKernelCaller) for c in timings]))
    torch._dynamo.reset()
    try:
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
        mlp = mlp.cuda().to(torch.bfloat16)
        x = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad(), fresh_cache(), config.patch(fx_graph_cache=False, autotune_local_cache=False):
            out = predictor.compile(mlp, tune=3, decide_gap=-1e9, cudagraphs=False)(x)
            torch.testing.assert_close(out, mlp(x), rtol=5e-2, atol=5e-2)
        stats = predictor.stats()
        assert stats["gemms_seen"] >= 2 and stats["kept_total"] <= 3 * stats["gemms_seen"], stats
        assert len(benchmarked) == 2, benchmarked  # both GEMMs (512 rows: no floor on the gap)
        assert all(1 < len(kinds) <= 3 and not any(kinds) for kinds in benchmarked), benchmarked
    finally:
        select_algorithm.clear_feedback_savers()
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()
