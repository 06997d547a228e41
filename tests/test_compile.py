"""``predictor.compile`` on the CPU: which graphs get CUDA graph trees, the options it passes to Inductor, and its
one-line refusals. (On a GPU: tests/test_gpu_compile.py.)"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

import predictor
from predictor.runtime import compile
from predictor.runtime.choices import installed


@pytest.fixture
def recorded():
    """Replace Inductor's compile_fx with a recorder of its config patches that runs the graph eagerly."""
    seen: list[dict] = []

    def fake_compile_fx(gm, example_inputs, config_patches=None, **kwargs):
        seen.append(dict(config_patches or {}))
        return gm.forward

    # mock.patch, not monkeypatch: torch's modules are undone by a setattr, never pytest 9.2's delattr
    with mock.patch("torch._inductor.compile_fx.compile_fx", fake_compile_fx):
        torch._dynamo.reset()
        yield seen
        torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))


@pytest.mark.parametrize(("cudagraphs", "grad", "trees"), [(None, True, True), (None, False, True),
                                                          ("training", True, True), ("training", False, False),
                                                          (False, True, False), (True, False, True)])
def test_cuda_graph_trees_on_every_graph_by_default(recorded, cudagraphs, grad, trees):
    """As called (a user's own loop), inference graphs need the trees as much as training graphs do."""
    model, x = _mlp(), torch.randn(4, 8)
    kwargs = {} if cudagraphs is None else {"cudagraphs": cudagraphs}
    compiled = predictor.compile(model, **kwargs)
    with torch.set_grad_enabled(grad):
        out = compiled(x)
    torch.testing.assert_close(out, model(x))
    assert bool(compiled._forward_pre_hooks) == (trees and grad)  # the gradient guard only where it is needed
    assert len(recorded) == 1
    patches = recorded[0]
    assert patches["triton.cudagraphs"] is trees
    for key, value in compile.RECOMMENDED_OPTIONS.items():
        assert patches[key] == value


def test_the_backend_is_torch_compiles_own_inductor_wrapper():
    """Dynamo treats it as Inductor (cache keys, dynamo.reset clearing the CUDA graph trees, CUPTI settings)."""
    backend = compile._inductor_backend(dict(compile.RECOMMENDED_OPTIONS), True)
    assert isinstance(backend, torch._TorchCompileInductorWrapper) and backend.compiler_name == "inductor"
    assert backend.config["max_autotune_gemm"] is True


def test_user_options_win_and_bad_arguments_are_refused_in_one_line(recorded):
    model, x = _mlp(), torch.randn(4, 8)
    with torch.no_grad():
        predictor.compile(model, options={"max_autotune_gemm": False, "triton.cudagraphs": True})(x)
    assert recorded[-1]["max_autotune_gemm"] is False and recorded[-1]["triton.cudagraphs"] is True
    predictor.uninstall()
    for kwargs, words in (({"mode": "max-autotune"}, "not mode="), ({"backend": "eager"}, "not backend="),
                          ({"cudagraphs": "yes"}, "cudagraphs must be"), ({"cudagraphs": "auto"}, "cudagraphs must be"),
                          ({"tune": 0}, "tune must be"), ({"tune": True}, "tune must be"),
                          ({"options": {"no_such_option": 1}}, "no_such_option")):
        with pytest.raises(ValueError, match=words) as info:
            predictor.compile(model, **kwargs)
        assert "\n" not in str(info.value)
    assert not installed._STACK  # a refused call installs no hook


def test_compiling_twice_with_the_same_settings_shares_one_hook(recorded):
    predictor.compile(_mlp())
    predictor.compile(_mlp())
    assert len(installed._STACK) == 1 and installed._STACK[-1].pruner.settings == compile.recommended_settings()


@pytest.mark.parametrize("cudagraphs", [True, False])
def test_accumulated_gradients_get_memory_of_their_own_before_each_forward(recorded, cudagraphs):
    """Under CUDA graph trees a gradient autograd took over from a backward's output would be overwritten by the
    next forward's replay; the compiled module moves it into its own memory once, then accumulates in place."""
    model, x = _mlp(), torch.randn(4, 8)
    compiled = predictor.compile(model, cudagraphs=cudagraphs)
    compiled(x).sum().backward()  # .grad was None: autograd keeps the backward's output tensor
    taken_over = [p.grad for p in model.parameters()]
    compiled(x).sum().backward()
    moved = [p.grad for p in model.parameters()]
    if cudagraphs is False:  # no trees: nothing to guard, nothing copied
        assert all(a is b for a, b in zip(taken_over, moved))
        return
    assert all(a is not b for a, b in zip(taken_over, moved))
    compiled(x).sum().backward()
    assert all(a is b for a, b in zip(moved, (p.grad for p in model.parameters())))  # accumulated in place
    reference = _mlp()
    for _ in range(3):
        reference(x).sum().backward()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad)
    model.zero_grad(set_to_none=True)
    compiled(x)  # the usual loop: nothing to move
    assert all(p.grad is None for p in model.parameters())


def test_gradient_guard_does_not_rely_on_the_first_parameter(recorded):
    """The first parameter may get no gradient (a head unused in this forward, a frozen embedding, one unfrozen
    later): the others' accumulated gradients must still get memory of their own."""

    class WithUnusedHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(8, 2)  # registered first, never used
            self.body = _mlp()

        def forward(self, x):
            return self.body(x)

    model, x = WithUnusedHead(), torch.randn(4, 8)
    compiled = predictor.compile(model)
    compiled(x).sum().backward()
    taken_over = [p.grad for p in model.body.parameters()]
    compiled(x)
    assert all(p.grad is not g for p, g in zip(model.body.parameters(), taken_over))

    frozen_first = _mlp()
    for p in frozen_first[0].parameters():
        p.requires_grad_(False)
    compiled = predictor.compile(frozen_first)
    compiled(x).sum().backward()  # the first call takes the parameter list; then the first layer is unfrozen
    for p in frozen_first[0].parameters():
        p.requires_grad_(True)
    frozen_first.zero_grad(set_to_none=True)
    compiled(x).sum().backward()
    taken_over = [p.grad for p in frozen_first.parameters()]
    compiled(x)
    assert all(p.grad is not g for p, g in zip(frozen_first.parameters(), taken_over))


def _gemms_and_convolutions(compile_fn) -> tuple[int, int]:
    """Extern GEMM and convolution calls in the code Inductor generates for a 1x1 + 3x3 convolution stack, run on
    a channels-last input (the layout under which max_autotune_gemm turns 1x1 convolutions into GEMMs)."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 3, padding=1))
    x = torch.randn(2, 16, 6, 6).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    with torch.no_grad():
        out, code = run_and_get_code(compile_fn(module.eval()), x)
        torch.testing.assert_close(out, module(x), atol=1e-4, rtol=1e-4)
    src = "\n".join(code)
    # torch 2.11 also offers aten::bias_addmm for the broadcast bias, and the hook's aten fallback keeps it
    gemms = sum(src.count(f"extern_kernels.{op}(") for op in ("mm", "addmm", "bias_addmm"))
    return gemms, src.count("convolution(")


def test_one_by_one_convolutions_stay_convolutions_as_under_plain_compile():
    from predictor.runtime.compile import RECOMMENDED_OPTIONS
    from torch._inductor import lowering

    before = dict(lowering.lowerings)
    try:
        # the options alone turn the 1x1 convolution into a GEMM: what predictor.compile undoes
        assert _gemms_and_convolutions(lambda m: torch.compile(m, options=RECOMMENDED_OPTIONS)) == (1, 1)
        assert _gemms_and_convolutions(torch.compile) == (0, 2)
        assert _gemms_and_convolutions(predictor.compile) == (0, 2)
        # a user who asks for the conversion keeps it
        assert _gemms_and_convolutions(lambda m: predictor.compile(m, options={"conv_1x1_as_mm": True})) == (1, 1)
        assert lowering.lowerings == before  # the lowering table is restored after each compile
    finally:
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()


def test_a_backward_compiled_at_its_first_call_is_lowered_under_the_patches(monkeypatch, no_compile_caches):
    """AOTAutograd compiles a backward at its first call, after predictor.compile's own call has returned: its
    lowering must still see convolutions as plain and grouped GEMMs decided (else a mixture-of-experts training step
    benchmarks ~40 configs per grouped GEMM of its backward), and Inductor's table is back afterwards."""
    from torch._inductor import lowering
    from torch._inductor.graph import GraphLowering

    aten = torch.ops.aten
    seen: list[tuple[bool, bool, bool]] = []
    original = GraphLowering.run

    def spy(self, *args):  # each graph's lowering, forward or backward
        seen.append((self.is_backward,
                     getattr(lowering.lowerings[aten.convolution.default], "predictor_plain_convolution", False),
                     getattr(lowering.lowerings[aten._grouped_mm.default], "predictor_grouped", False)))
        return original(self, *args)

    monkeypatch.setattr(GraphLowering, "run", spy)
    torch._dynamo.reset()
    try:
        model = _mlp()
        compiled = predictor.compile(model, cudagraphs=False)
        loss = compiled(torch.randn(4, 8)).sum()  # torch 2.13 lowers the backward only below, at its first call
        loss.backward()
        assert sorted(backward for backward, _, _ in seen) == [False, True]
        assert all(plain and grouped for _, plain, grouped in seen)
        assert not getattr(lowering.lowerings[aten.convolution.default], "predictor_plain_convolution", False)
        assert model[0].weight.grad is not None
    finally:
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()


def test_tune_installs_the_tune_policy(recorded):
    """tune=K installs policy "tune" with top K and the default's gap (what it keeps: test_hook.py,
    test_tune_benchmarks_only_the_decided_kind); the default installs "decide", one kernel per GEMM."""
    default, tuned = compile.recommended_settings(), compile.recommended_settings(tune=3)
    assert (default.policy, default.top_k, default.keep_aten) == ("decide", 1, False)
    assert (tuned.policy, tuned.top_k, tuned.keep_aten) == ("tune", 3, False)
    assert tuned.decide_gap == default.decide_gap
    predictor.compile(_mlp(), tune=3)
    assert installed._STACK[-1].pruner.settings == tuned


def test_capture_aware_cudagraphify_runs_the_plain_kernels_inside_a_callers_capture(monkeypatch):
    """Outside a capture the trees run; inside the caller's torch.cuda.graph capture the plain kernels do (so the
    caller's graph captures them). Inductor's cudagraphify is restored afterwards."""
    from torch._inductor import compile_fx

    calls: list[str] = []
    original = compile_fx.cudagraphify
    monkeypatch.setattr(compile_fx, "cudagraphify", lambda model, *a, **k: (lambda inputs: calls.append("trees")))
    patched = compile_fx.cudagraphify
    with compile._capture_aware_cudagraphify():
        run = compile_fx.cudagraphify(lambda inputs: calls.append("plain"), (), device_index=0)
        with compile._capture_aware_cudagraphify():  # nested compiles wrap once
            assert compile_fx.cudagraphify is not patched
    assert compile_fx.cudagraphify is patched and patched is not original
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    run([])
    capturing[0] = True
    run([])
    assert calls == ["trees", "plain"]


def test_named_backend_refuses_an_unknown_mode_and_installs_the_hook(recorded):
    """torch.compile(model, backend="gemm_predictor", mode=...) as transformers' generate passes it."""
    from predictor.runtime.backend import MODES, gemm_predictor, register

    register()
    model, x = _mlp(), torch.randn(4, 8)
    with torch.no_grad():
        out = torch.compile(model, backend="gemm_predictor", mode="reduce-overhead")(x)
    torch.testing.assert_close(out, model(x))
    assert recorded[-1]["triton.cudagraphs"] is True and recorded[-1]["max_autotune_gemm"] is True
    assert installed._STACK[-1].pruner.settings == compile.recommended_settings()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend="gemm_predictor", mode="max-autotune-no-cudagraphs")(x)
    assert recorded[-1]["triton.cudagraphs"] is False
    assert installed._STACK[-1].pruner.settings == compile.recommended_settings(tune=MODES["max-autotune"]["tune"])
    with pytest.raises(ValueError, match="unknown mode 'fastest'"):
        gemm_predictor(None, [], mode="fastest")
