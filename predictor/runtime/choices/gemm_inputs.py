"""Reading a GEMM off Inductor's lowering: the :class:`~predictor.core.problem.Problem` from the kernel inputs, the
operands' identity, dynamic sizes, and what the GEMM's output feeds in the FX graph.

Torch is imported inside the functions that need it (the graph's size hints, the FX node being lowered).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.problem import DTYPE_BYTES, Problem
from ..compile_state import range_m


def _hints(exprs: Sequence[Any]) -> tuple[int, ...]:
    """Concrete sizes: static ones directly, symbolic ones through the graph's size hints (the
    method is ``optimization_hints`` in torch 2.13 and ``size_hints`` in 2.11)."""
    try:
        return tuple(int(x) for x in exprs)
    except TypeError:
        pass
    from torch._inductor import config
    from torch._inductor.virtualized import V

    sizevars = V.graph.sizevars
    if hasattr(sizevars, "optimization_hints"):
        return tuple(int(x) for x in sizevars.optimization_hints(exprs))
    return tuple(int(x) for x in sizevars.size_hints(exprs, fallback=config.unbacked_symint_fallback))


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _low_bit(nbytes: int) -> int:
    return 16 if nbytes == 0 else min(16, nbytes & -nbytes)


def _offset_bytes(node: Any, itemsize: int) -> int:
    """The operand's storage offset in bytes, 0 when unknown or symbolic (aligned allocations are the norm)."""
    try:
        return int(node.get_layout().offset) * itemsize
    except Exception:  # noqa: BLE001 -- a fake node, a symbolic offset: not worth failing over
        return 0


def _layout(size: tuple[int, ...], stride: tuple[int, ...]) -> str:
    """``col`` when the operand's inner dimension is not the contiguous one (it is a transpose)."""
    return "row" if size[-1] == 1 or stride[-1] == 1 else "col"


def _symbolic_sizes(kernel_inputs: Any) -> bool:
    """Whether a GEMM operand has a symbolic size (dynamic shapes). The hook then decides for one size hint,
    while the kernel runs at every size: cuBLAS adapts to each call, one Triton config does not, so the decide
    policy keeps cuBLAS there."""
    try:
        nodes = kernel_inputs.mat1mat2() if hasattr(kernel_inputs, "mat1mat2") else list(kernel_inputs.nodes())[-2:]
        for node in nodes:
            [int(x) for x in node.get_size()]
    except TypeError:
        return True
    except Exception:  # noqa: BLE001 -- unreadable: not a reason to change the decision
        return False
    return False


def one_kernel_fits(kernel_inputs: Any) -> bool:
    """Whether one Triton config chosen now runs only at the sizes it was judged at: static sizes, or one range of a
    symbolic M (``size_ranges``; above the last range, ``range_m()`` is PLAIN, 0: plain's cuBLAS)."""
    return bool(range_m()) or not _symbolic_sizes(kernel_inputs)


def _operands_key(nodes: list[Any]) -> tuple | None:
    """The two matrix operands of a GEMM as names, sizes and strides: what ties a ``_finalize_template_configs``
    call to the ChoiceCallers of the same GEMM in Inductor's preprocessing step (names alone repeat across
    graphs). None when they cannot be read."""
    try:
        return tuple((str(n.get_name()), tuple(map(str, n.get_size())), tuple(map(str, n.get_stride())))
                     for n in nodes[-2:]) if len(nodes) >= 2 else None
    except Exception:  # noqa: BLE001 -- an unreadable node only means no match
        return None


def problem_from_inputs(kernel_inputs: Any, op: str) -> Problem:
    """The Problem as Inductor lowers it (a symbolic M at the graph's size hint, or at the representative M of the
    range being lowered: ``compile_state.range_m``). ``align`` follows ``collectors.corpus.alignment``: the largest
    power of two <= 16 bytes dividing every non-unit operand stride, the output strides and the bases."""
    if hasattr(kernel_inputs, "mat1mat2"):
        mat1, mat2 = kernel_inputs.mat1mat2()
    else:
        mat1, mat2 = list(kernel_inputs.nodes())[-2:]
    size_a, size_b = _hints(mat1.get_size()), _hints(mat2.get_size())
    stride_a, stride_b = _hints(mat1.get_stride()), _hints(mat2.get_stride())
    dtype = _dtype_name(mat1.get_dtype())
    out = getattr(kernel_inputs, "out_dtype", None)
    out_dtype = _dtype_name(out()) if callable(out) else ("int32" if dtype == "int8" else dtype)
    if len(size_a) != len(size_b) or len(size_a) not in (2, 3) or (len(size_a) == 3) != (op == "bmm"):
        raise ValueError(f"{op} operands of shapes {size_a} and {size_b} are not a (batched) GEMM")
    m, k = size_a[-2:]
    n = size_b[-1]
    judged_at = range_m()  # lowered for one range of a symbolic M (size_ranges): judged at the range's M, not the hint
    if judged_at and op != "bmm" and _symbolic_sizes(kernel_inputs):
        m = judged_at
    b = size_a[0] if op == "bmm" else 1
    itemsize, out_size = DTYPE_BYTES.get(dtype, 1), DTYPE_BYTES.get(out_dtype, 4)
    strides = [s * itemsize for size, stride in ((size_a, stride_a), (size_b, stride_b))
               for d, s in zip(size, stride, strict=True) if d > 1 and s != 1]
    strides += [n * out_size] + ([m * n * out_size] if b > 1 else [])
    strides += [_offset_bytes(mat1, itemsize), _offset_bytes(mat2, itemsize)]
    return Problem(op=op, b=b, m=m, n=n, k=k, dtype=dtype, out_dtype=out_dtype,
                   layout_a=_layout(size_a, stride_a), layout_b=_layout(size_b, stride_b),
                   align=min(_low_bit(abs(s)) for s in strides))


def scaled_op(kernel_inputs: Any) -> str | None:
    """Which of ``problem.SCALED_OPS`` an Inductor ``scaled_mm`` is, from its scale operands (inputs 2 and 3, as
    ``tuned_scaled_mm`` orders them): every scale of one element -> tensorwise; A's (M, 1) and B's (1, N) ->
    rowwise; anything else (blockwise, MX) -> None, a kind the hook does not know."""
    try:
        nodes = list(kernel_inputs.nodes())
        (m, k), (_, n) = (_hints(x.get_size()) for x in nodes[:2])
        size_a, size_b = (_hints(x.get_size()) for x in nodes[2:4])
    except Exception:  # noqa: BLE001 -- unreadable inputs: an unknown kind, never a broken compile
        return None
    if all(d == 1 for d in size_a + size_b):
        return "scaled_mm_tensorwise"
    if size_a == (m, 1) and size_b == (1, n):
        return "scaled_mm_rowwise"
    return None


# ops that only re-view a GEMM's output: an epilogue behind them still fuses into the template
_VIEW_OP_NAMES = {"view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "squeeze", "unsqueeze",
                  "alias"}


def _lowering_node() -> Any:
    """The FX node Inductor is lowering now (the GEMM whose choices are being filtered), or None."""
    try:
        from torch._inductor.virtualized import V

        return getattr(V.graph, "current_node", None)
    except Exception:  # no graph being lowered (e.g. a direct call in a test)
        return None


def _users_through_views(node: Any, depth: int = 3) -> Any:
    """The FX nodes ``node``'s output feeds, looking through views (``_VIEW_OP_NAMES``) up to ``depth`` deep."""
    if node is None or depth < 0:
        return
    for user in getattr(node, "users", ()):
        packet = getattr(getattr(user, "target", None), "overloadpacket", None)
        if getattr(packet, "__name__", "") in _VIEW_OP_NAMES:
            yield from _users_through_views(user, depth - 1)
        else:
            yield user


def output_feeds_pointwise(node: Any, depth: int = 3) -> bool:
    """Whether ``node``'s output reaches a pointwise op (directly or through views): an epilogue Inductor
    could fuse into a Triton template."""
    import torch

    return any(torch.Tag.pointwise in (getattr(getattr(user, "target", None), "tags", ()) or ())
               for user in _users_through_views(node, depth))


def output_consumers(node: Any, depth: int = 3) -> list[str]:
    """The ops ``node``'s output feeds, looking through views (``aten.gelu``, ``aten.add``, ``output``...): what
    an epilogue could fuse. Recorded beside each in-program decision, so that fusion effects can be studied."""
    names = []
    for user in _users_through_views(node, depth):
        name = getattr(getattr(getattr(user, "target", None), "overloadpacket", None), "__name__", "")
        names.append(f"aten.{name}" if name else str(getattr(user, "op", "?")))
    return names
