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
