"""What the hook reads of Inductor's kernel inputs and ``KernelTemplateChoice`` objects, as plain Python.

The hook only calls ``get_size``/``get_stride``/``get_dtype``/``get_name`` on nodes, ``nodes()``/``mat1mat2()``/
``out_dtype()`` on kernel inputs, and ``template.uid``/``params.to_kwargs()`` on choices; these stand-ins provide
exactly that, so pruning and export logic run on a CPU without compiling anything.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class FakeNode:
    """An IR node: sizes, strides and dtype as Inductor reports them."""

    def __init__(self, size, stride, dtype: Any) -> None:
        self.size, self.stride, self.dtype = tuple(size), tuple(stride), dtype

    def get_size(self):
        return self.size

    def get_stride(self):
        return self.stride

    def get_dtype(self):
        return self.dtype

    def get_name(self) -> str:
        return "arg0_1"  # graph input names repeat across graphs: the hook must not rely on them alone


class FakeInputs:
    """``MMKernelInputs``: the two operands (and an optional bias first), the output dtype, the device type."""

    device_type = "cuda"

    def __init__(self, a: FakeNode, b: FakeNode, out_dtype: Any = None, bias: FakeNode | None = None) -> None:
        self.a, self.b, self.bias, self._out = a, b, bias, out_dtype

    def nodes(self):
        return [n for n in (self.bias, self.a, self.b) if n is not None]

    def mat1mat2(self):
        return self.a, self.b

    def out_dtype(self):
        return self._out or self.a.get_dtype()


def mm_inputs(m: int, n: int, k: int, dtype: Any) -> FakeInputs:
    """Row-major A (m x k) times row-major B (k x n)."""
    return FakeInputs(FakeNode((m, k), (k, 1), dtype), FakeNode((k, n), (n, 1), dtype))


def ktc(uid: str, **kwargs: Any) -> SimpleNamespace:
    """A ``KernelTemplateChoice`` of template ``uid`` with these config kwargs."""
    return SimpleNamespace(template=SimpleNamespace(uid=uid, src_hash=None),
                           params=SimpleNamespace(to_kwargs=lambda: dict(kwargs),
                                                  to_serializeable_dict=lambda: dict(kwargs)))


class FakeScaledInputs(FakeInputs):
    """``MMKernelInputs`` of ``tuned_scaled_mm``: nodes A, B, scale_a, scale_b (no bias first), out dtype given."""

    def __init__(self, a: FakeNode, b: FakeNode, scale_a: FakeNode, scale_b: FakeNode, out_dtype: Any) -> None:
        super().__init__(a, b, out_dtype)
        self.scale_a, self.scale_b = scale_a, scale_b

    def nodes(self):
        return [self.a, self.b, self.scale_a, self.scale_b]


def scaled_mm_inputs(m: int, n: int, k: int, scales: str, dtype: Any, out_dtype: Any, scale_dtype: Any) -> FakeScaledInputs:
    """fp8 ``_scaled_mm(x, w.t(), scale_a, scale_b)``: A row-major, B column-major; ``scales`` is ``tensorwise``
    (0-d scales), ``rowwise`` ((M, 1) and (1, N)) or ``blockwise`` ((M, K/128) and (K/128, N/128))."""
    shapes = {"tensorwise": ((), ()), "rowwise": ((m, 1), (1, n)),
              "blockwise": ((m, k // 128), (k // 128, n // 128))}[scales]
    nodes = [FakeNode(s, tuple(1 for _ in s) if len(s) < 2 else (s[1], 1), scale_dtype) for s in shapes]
    return FakeScaledInputs(FakeNode((m, k), (k, 1), dtype), FakeNode((k, n), (1, k), dtype), *nodes, out_dtype)
