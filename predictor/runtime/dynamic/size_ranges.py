"""One compile for every size: a GEMM with a symbolic M gets one kernel per range of M, dispatched on the actual M.

Why: under ``torch.compile(dynamic=True)`` Inductor lowers each GEMM once, for one size hint (the first M seen),
and that one choice runs at every M served -- plain's cuBLAS adapts per call, one Triton config does not, so the
hook keeps cuBLAS there and adds nothing over plain (docs/DYNAMIC.md). Inductor's own per-size mechanism,
``config.multi_kernel_hints``, benchmarks every candidate at every hint, needs max-autotune, and cannot keep cuBLAS
as an arm (docs/DYNAMIC.md says where in its source).

How: while ``size_ranges()`` is active, Inductor's ``mm``/``addmm`` decomposition turns a GEMM whose M is symbolic
(K and N static) into a chain of ``torch.cond`` on M -- ``M <= 16``, ``<= 64``, ``<= 256``, above -- whose branches
call one custom op per range (``gemm_predictor::mm_r{i}``). Each op's lowering is Inductor's own ``tuned_mm`` /
``tuned_addmm`` with the range marked (``range_m``): the hook then ranks the candidates at the range's
representative M (``problem_from_inputs``) and keeps one, a Triton config or cuBLAS, so nothing is benchmarked.
Above the last bound M is plain's: cuBLAS. Inductor emits the chain as host-side ``if`` on the size (no device sync).

What it costs: no epilogue fusion across the ``cond`` (a cuBLAS GEMM has none either), and Inductor runs a graph with
a ``cond`` without CUDA graph trees (a caller's own capture, or the serving benchmark's replay, still captures the
branch taken). Opt-in: ``predictor.compile(model, dynamic=True, size_ranges=True)``.

The branches take only tensors: the chain is built by calling the ``cond`` op itself (``_cond``), whose make_fx
trace keeps the bounds as constants.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any, Callable

from ..compile_state import judged_at, static_int
from ..lowerings.tables import decomposition_tables, wrapped_entries

BOUNDS = (16, 64, 256)  # ranges of M: 2-16, 17-64, 65-256, and above 256 (plain's cuBLAS)
LIBRARY = "gemm_predictor"
PLAIN = 0  # range_m() above the last bound: plain's choice


def representatives(bounds: Sequence[int] = BOUNDS) -> tuple[int, ...]:
    """The M each range is judged at: the geometric middle of its ends (2-16 -> 6, 17-64 -> 33, 65-256 -> 129)."""
    lows = (2, *(b + 1 for b in bounds[:-1]))
    return tuple(round(math.sqrt(lo * hi)) for lo, hi in zip(lows, bounds))


REPRESENTATIVE = representatives()


@functools.cache
def _ops() -> Any:
    """Define the per-range ops and their lowerings, once per process."""
    import torch
    from torch._inductor import config
    from torch._inductor.kernel.mm import tuned_addmm, tuned_mm
    from torch._inductor.lowering import register_lowering

    library = torch.library.Library(LIBRARY, "FRAGMENT")
    ranges = len(BOUNDS) + 1
    for i in range(ranges):
        library.define(f"mm_r{i}(Tensor a, Tensor b) -> Tensor")
        library.define(f"addmm_r{i}(Tensor bias, Tensor a, Tensor b) -> Tensor")
        library.impl(f"mm_r{i}", lambda a, b: torch.mm(a, b), "CompositeExplicitAutograd")
        library.impl(f"addmm_r{i}", lambda bias, a, b: torch.addmm(bias, a, b), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{LIBRARY}::mm_r{i}", lambda a, b: a.new_empty(a.shape[0], b.shape[1]),
                                    lib=library)
        torch.library.register_fake(f"{LIBRARY}::addmm_r{i}",
                                    lambda bias, a, b: a.new_empty(a.shape[0], b.shape[1]), lib=library)
        m = REPRESENTATIVE[i] if i < len(BOUNDS) else PLAIN

        def lower(tuned: Callable[..., Any], *args: Any, _m: int = m) -> Any:
            with judged_at(_m):
                if _m == PLAIN:  # plain's choice: Inductor's GEMM lowering with no Triton candidate
                    with config.patch(max_autotune=False, max_autotune_gemm=False):
                        return tuned(*args)
                return tuned(*args)

        ops = getattr(torch.ops, LIBRARY)
        register_lowering(getattr(ops, f"mm_r{i}").default)(functools.partial(lower, tuned_mm))
        register_lowering(getattr(ops, f"addmm_r{i}").default)(functools.partial(lower, tuned_addmm))
    return library


# --- the branches --------------------------------------------------------------------------------------------

def _cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], operands: tuple[Any, ...]) -> Any:
    """The ``cond`` higher-order op itself (branches return a tuple of tensors, as the op requires): inside
    Inductor's decomposition (a make_fx trace) it traces both branches in place. (``torch.cond`` would re-trace them
    through Dynamo, which lifts the static sizes K and N as operands that Inductor's post-grad fake-tensor update
    then rejects.)"""
    from torch._higher_order_ops.cond import cond_op

    return cond_op(pred, true_fn, false_fn, operands)


def _chain(op: str, first: int = 0) -> Callable[..., tuple[Any]]:
    """The branch for ranges ``first`` and above of ``op`` (``mm``: operands ``(a, b)``; ``addmm``:
    ``(bias, a, b)``): the range's own op when it is the last, else a ``cond`` on M against its bound."""
    import torch

    own = getattr(getattr(torch.ops, LIBRARY), f"{op}_r{first}").default
    if first == len(BOUNDS):
        return lambda *operands: (own(*operands),)
    rest = _chain(op, first + 1)
    return lambda *operands: _cond(operands[-2].shape[0] <= BOUNDS[first], lambda *x: (own(*x),), rest, operands)


def mm_by_range(a: Any, b: Any) -> Any:
    """``a @ b`` as the chain of ranges."""
    return _chain("mm")(a, b)[0]


def addmm_by_range(bias: Any, a: Any, b: Any) -> Any:
    """``bias + a @ b`` as the chain of ranges."""
    return _chain("addmm")(bias, a, b)[0]


# --- the decomposition -------------------------------------------------------------------------------------------

DTYPES = ("float16", "bfloat16", "float32")


def takes_ranges(a: Any, b: Any, devices: Sequence[str]) -> bool:
    """A 2-D GEMM on ``devices`` whose M is symbolic and whose K and N are static, in a floating dtype."""
    return (a.device.type in devices and a.dim() == 2 and b.dim() == 2 and a.dtype == b.dtype
            and str(a.dtype).removeprefix("torch.") in DTYPES
            and static_int(a.shape[0]) is None and static_int(a.shape[1]) is not None
            and static_int(b.shape[1]) is not None)


_COUNTS = {"gemms_by_range": 0}


def range_count() -> int:
    """GEMMs traced into the chain of ranges in this process."""
    return _COUNTS["gemms_by_range"]


@contextlib.contextmanager
def size_ranges(devices: Sequence[str] = ("cuda",)) -> Iterator[None]:
    """While active, Inductor's ``mm``/``addmm`` decompositions turn every GEMM ``takes_ranges`` accepts into the
    chain of ranges, and leave the others to the decomposition they had. Restored on exit, also on an error."""
    import torch

    _ops()
    aten = torch.ops.aten
    devices = tuple(devices)

    def wrap(op: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        if op is aten.mm.default:
            @functools.wraps(original)
            def mm(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
                if not args and not kwargs and takes_ranges(a, b, devices):
                    _COUNTS["gemms_by_range"] += 1
                    return mm_by_range(a, b)
                return original(a, b, *args, **kwargs)
            return mm

        @functools.wraps(original)
        def addmm(bias: Any, a: Any, b: Any, *args: Any, beta: Any = 1, alpha: Any = 1, **kwargs: Any) -> Any:
            if not args and not kwargs and beta == 1 and alpha == 1 and takes_ranges(a, b, devices):
                _COUNTS["gemms_by_range"] += 1
                return addmm_by_range(bias, a, b)
            return original(bias, a, b, *args, beta=beta, alpha=alpha, **kwargs)
        return addmm

    with wrapped_entries(decomposition_tables(), [aten.mm.default, aten.addmm.default], wrap, "predictor_size_ranges"):
        yield
