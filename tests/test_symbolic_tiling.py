"""A dynamic graph's pointwise kernel tiled in 2-D only where 1-D would divide its index by a symbolic size: the rule,
and Inductor's own Triton codegen choosing the tiling (for a CPU tensor, ``cpu_backend="triton"``: the kernel is
written, not run)."""

import pytest
import sympy
import torch

from predictor.runtime.lowerings import symbolic_tiling
from predictor.runtime.lowerings.tables import wrapped_attribute

from cpu_triton_codegen import written

pytest.importorskip("triton")

S, T = sympy.Symbol("s0", positive=True, integer=True), sympy.Symbol("s1", positive=True, integer=True)


def test_a_symbolic_inner_dimension_is_a_division_a_static_one_is_not():
    assert symbolic_tiling.divides_by_symbol({"y": S, "x": S, "r0_": 1})
    assert symbolic_tiling.divides_by_symbol({"z": 4, "y": 32, "x": T, "r0_": 1})
    assert not symbolic_tiling.divides_by_symbol({"y": S, "x": 2048, "r0_": 1})  # rows x a static width
    assert not symbolic_tiling.divides_by_symbol({"x": S * S, "r0_": 1})  # one dimension: nothing to divide
    assert symbolic_tiling.one_dimensional({"x": S, "r0_": 1})
    assert not symbolic_tiling.one_dimensional({"y": S, "x": S, "r0_": 1})


class _Scheduling:
    """Inductor's two tiling helpers, answering as told."""

    def __init__(self, candidates, compatible=True, error=None):
        self.candidates, self.compatible, self.error = candidates, compatible, error

    def get_nd_tilings(self, node_schedule, numel, reduction_numel):
        if self.error:
            raise self.error
        return self.candidates

    def tiling_is_compatible(self, node_schedule, numel, reduction_numel, tiling):
        return self.compatible


def test_only_a_one_dimensional_pointwise_kernel_with_a_symbolic_count_is_retiled(monkeypatch):
    monkeypatch.setattr(symbolic_tiling, "may_divide_by_symbol", lambda node_schedule: True)
    two_d = {"y": S, "x": S, "r0_": 1}
    one_d = {"x": S * S, "r0_": 1}
    choose = symbolic_tiling.tiling_without_division
    assert choose(_Scheduling([two_d]), [], S * S, 1, one_d) == two_d
    assert choose(_Scheduling([{"y": S, "x": 64, "r0_": 1}, two_d]), [], S * S, 1, one_d) == two_d
    assert choose(_Scheduling([two_d]), [], S * S, 64, {"x": S * S, "r0_": 64}) is None  # a reduction
    assert choose(_Scheduling([two_d]), [], 4096, 1, {"x": 4096, "r0_": 1}) is None  # static: a constant divisor
    assert choose(_Scheduling([two_d]), [], S * S, 1, two_d) is None  # Inductor tiled it already
    assert choose(_Scheduling([two_d], compatible=False), [], S * S, 1, one_d) is None
    assert choose(_Scheduling([{"y": S, "x": 64, "r0_": 1}]), [], S * 64, 1, {"x": S * 64, "r0_": 1}) is None
    assert choose(_Scheduling([], error=RuntimeError("another torch")), [], S * S, 1, one_d) is None


def test_a_division_or_modulo_by_a_symbol_or_a_symbolic_inner_range_may_divide():
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    i = sympy.Symbol("x0", integer=True, nonnegative=True)
    may = symbolic_tiling.divides_by_symbol_in
    assert may([S, S], [i])  # tokens x tokens: flattened, the row is index // s0
    assert may([S * S], [FloorDiv(i, S)])
    assert may([S * S], [ModularIndexing(i, 1, S)])
    assert not may([S, 2048], [i + 2048 * FloorDiv(i, 2048)])  # rows of a static width
    assert not may([S * 2048], [ModularIndexing(i, 1, 2048), FloorDiv(i, 64) * S])  # a symbol as a factor only
    assert not may([S], [i])


def _tilings_written(fn, *inputs, retile: bool) -> list[dict]:
    """The tilings Inductor's Triton codegen gives ``fn``'s kernels, compiled for CPU tensors with the first input's
    first dimension dynamic."""
    from torch._inductor.codegen.simd import SIMDScheduling

    retiling = (wrapped_attribute(SIMDScheduling, "get_tiling_and_scores", symbolic_tiling.wrap, "test_retile")
                if retile else None)
    return [tiling for tiling, _ in written(fn, *inputs, during=retiling).kernels]


def _mask(x):
    """A prefill's causal mask over its tokens (a dynamic size), each position compared with its row."""
    i = torch.arange(x.shape[0], device=x.device)
    return torch.where(i[None, :] <= i[:, None], 0.0, -1e4) + x[:, None]


def _scaled_rows(x, w):
    return x[:, None] * w[None, :]


def test_inductor_tiles_the_mask_in_two_dimensions_and_leaves_rows_of_a_static_width_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(37)
    tokens = [t for t in _tilings_written(_mask, x, retile=True) if t]
    assert tokens and all(set(t) == {"y", "x"} for t in tokens), tokens
    assert all(t["x"].free_symbols and t["y"].free_symbols for t in tokens)
    assert [set(t) for t in _tilings_written(_mask, x, retile=False) if t] == [{"x"}]  # Inductor's own: 1-D
    rows = [t for t in _tilings_written(_scaled_rows, torch.randn(37), torch.randn(64), retile=True) if t]
    assert rows and all(set(t) == {"x"} for t in rows), rows


def test_inductors_candidates_are_asked_for_only_where_a_kernel_may_divide_by_a_symbol(tmp_path, monkeypatch):
    """They cost up to 0.2 s a call, asked at every fusion Inductor weighs (module docstring)."""
    from torch._inductor.codegen.simd import SIMDScheduling

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    calls = []
    original = SIMDScheduling.get_nd_tilings.__func__

    def counted(cls, *args, **kwargs):
        calls.append(cls)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(SIMDScheduling, "get_nd_tilings", classmethod(counted))
    assert [set(t) for t in _tilings_written(_scaled_rows, torch.randn(37), torch.randn(64), retile=True) if t]
    assert not calls  # rows x a static width: nothing to ask
    assert {"y", "x"} in [set(t) for t in _tilings_written(_mask, torch.randn(37), retile=True) if t]
    assert calls


def test_the_classmethod_is_wrapped_for_subclasses_and_restored():
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch._inductor.codegen.triton import TritonScheduling

    before = vars(SIMDScheduling)["get_tiling_and_scores"]
    with wrapped_attribute(SIMDScheduling, "get_tiling_and_scores", symbolic_tiling.wrap, "test_retile"):
        assert TritonScheduling.get_tiling_and_scores.__self__ is TritonScheduling  # still bound to the subclass
        assert getattr(TritonScheduling.get_tiling_and_scores.__func__, "test_retile", False)
        with wrapped_attribute(SIMDScheduling, "get_tiling_and_scores", symbolic_tiling.wrap, "test_retile"):
            inner = vars(SIMDScheduling)["get_tiling_and_scores"]
        assert vars(SIMDScheduling)["get_tiling_and_scores"] is inner  # a nested wrap leaves the outer one
    assert vars(SIMDScheduling)["get_tiling_and_scores"] is before
