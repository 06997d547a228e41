"""A dynamic graph's kernel hints: symbols raised to the floor while Inductor writes a kernel, nothing else."""

from types import SimpleNamespace

import pytest
import sympy
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from predictor.runtime.dynamic import dynamic_hints
from predictor.runtime.dynamic.dynamic_hints import dynamic_kernel_hints, hint_floor, large_size_hints


def _sizevars(*hints: int):
    from torch._dynamo.source import ConstantSource
    from torch._inductor.sizevars import SizeVarAllocator

    env = ShapeEnv()
    symbols = [env.create_symbol(h, source=ConstantSource(f"s{i}")) for i, h in enumerate(hints)]
    return SizeVarAllocator(env), symbols


def _hint(sizevars, expr):
    name = next(n for n in dynamic_hints.HINT_METHODS if hasattr(sizevars, n))
    return int(getattr(sizevars, name)(expr))


def test_a_small_symbol_is_hinted_at_the_floor_while_active():
    sizevars, (batch,) = _sizevars(2)
    assert _hint(sizevars, batch * 2048) == 2 * 2048
    with large_size_hints(sizevars, 8192):
        assert _hint(sizevars, batch * 2048) == 8192 * 2048
        assert _hint(sizevars, batch * 2048 + 7) == 8192 * 2048 + 7
    assert _hint(sizevars, batch * 2048) == 2 * 2048  # the instance's own methods are back


def test_static_sizes_and_large_symbols_keep_their_hints():
    sizevars, (small, large) = _sizevars(3, 20000)
    with large_size_hints(sizevars, 8192):
        assert _hint(sizevars, 4096) == 4096
        assert _hint(sizevars, large * 4) == 80000
        assert _hint(sizevars, small * large) == 8192 * 20000


def test_the_floor_is_inductors_hint_for_an_unknown_size():
    from torch._inductor import config

    with config.patch(unbacked_symint_fallback=4096):
        assert hint_floor() == 4096
    assert hint_floor() == config.unbacked_symint_fallback


def _symbolic_size():
    from torch._dynamo.source import ConstantSource

    env = ShapeEnv()
    return env.create_symintnode(env.create_symbol(2, source=ConstantSource("rows")), hint=2)


def test_only_a_graph_with_a_symbolic_size_is_dynamic():
    from predictor.runtime.dynamic.dynamic_hints import is_dynamic

    assert is_dynamic([torch.randn(2, 3), _symbolic_size()])
    assert not is_dynamic([torch.randn(2, 3), 4])
    assert not is_dynamic(None)


def test_codegen_is_wrapped_only_for_a_dynamic_graph_while_active_and_once_when_nested():
    from torch._inductor import config
    from torch._inductor.codegen.triton import TritonKernel

    original, autotune = TritonKernel.codegen_kernel, config.triton.autotune_pointwise
    with dynamic_kernel_hints([torch.randn(2, 3)]):
        assert TritonKernel.codegen_kernel is original
        assert config.triton.autotune_pointwise == autotune
    with dynamic_kernel_hints([_symbolic_size()]):
        wrapped = TritonKernel.codegen_kernel
        assert wrapped is not original
        assert config.triton.autotune_pointwise is False  # the heuristic's one config, no coin-toss benchmark
        with dynamic_kernel_hints([_symbolic_size()]):
            assert TritonKernel.codegen_kernel is wrapped
    assert TritonKernel.codegen_kernel is original
    assert config.triton.autotune_pointwise == autotune


def test_the_wrapped_codegen_sees_floored_hints_and_restores_them_on_error():
    from torch._inductor.codegen.triton import TritonKernel
    from torch._inductor.virtualized import V

    sizevars, (batch,) = _sizevars(2)
    seen = []
    graph = SimpleNamespace(sizevars=sizevars)  # what the wrapper reads of the graph being lowered

    def fake_codegen(self, name=None):
        seen.append(_hint(V.graph.sizevars, batch * 64))
        raise RuntimeError("codegen failed")

    wrapped = dynamic_hints._codegen_with_large_hints(fake_codegen)
    with V.set_graph_handler(graph), pytest.raises(RuntimeError, match="codegen failed"):
        wrapped(object.__new__(TritonKernel))
    assert seen == [hint_floor() * 64]
    assert _hint(sizevars, batch * 64) == 128


def test_a_reduction_kernel_is_written_with_its_own_hints():
    from torch._inductor.codegen.triton import TritonKernel
    from torch._inductor.virtualized import V

    sizevars, (rows,) = _sizevars(64)
    seen = []
    graph = SimpleNamespace(sizevars=sizevars)  # what the wrapper reads of the graph being lowered
    wrapped = dynamic_hints._codegen_with_large_hints(lambda self, name=None: seen.append(_hint(V.graph.sizevars, rows)))
    pointwise, reduction = object.__new__(TritonKernel), object.__new__(TritonKernel)
    # as Inductor tiles them: a pointwise kernel has a reduction range of one element
    pointwise.numels, reduction.numels = {"x": rows * 4, "r0_": sympy.S.One}, {"x": rows * 4, "r0_": sympy.Integer(256)}
    with V.set_graph_handler(graph):
        wrapped(pointwise)
        wrapped(reduction)
    assert seen == [hint_floor(), 64]  # a norm's few rows keep the first size's hint
    assert dynamic_hints.reduces(reduction) and not dynamic_hints.reduces(pointwise)


def test_the_hint_floor_is_in_the_hooks_cache_key():
    from torch._inductor import config

    from predictor.runtime import compile
    from predictor.runtime.choices.settings import HookSettings

    pruner = compile.pruner_for(HookSettings(model=None))  # the pruner predictor.compile makes, with its lowerings
    first = pruner.uuid()
    with config.patch(unbacked_symint_fallback=1024):
        assert pruner.uuid() != first


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="no torch.compile")
def test_a_dynamic_graph_compiles_and_matches_eager_under_the_hints():
    import predictor


    from predictor.runtime.choices import installed

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    try:
        compiled = predictor.compile(model, dynamic=True, cudagraphs=False)
        with torch.no_grad():
            for rows in (2, 5, 300):
                x = torch.randn(rows, 16)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    finally:
        while installed._STACK:  # predictor.compile's hook stays for the compiled model's later graphs
            predictor.uninstall()
        torch._dynamo.reset()


def test_codegen_outside_a_graph_runs_as_inductors_own():
    from torch._inductor.codegen.triton import TritonKernel

    wrapped = dynamic_hints._codegen_with_large_hints(lambda self, name=None: ("code", name))
    assert wrapped(object.__new__(TritonKernel), "k") == ("code", "k")
