"""What several rooms of the runtime read of the compile in progress, kept below them all so that none imports
another for it: whether a size is a constant, the next power of two of one, whether float32 matmuls may run as
TF32, and which range of a symbolic M is being lowered (set by ``dynamic.size_ranges``, read by the choice filter).

Torch is imported inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_RANGE: contextvars.ContextVar[int | None] = contextvars.ContextVar("predictor_size_range", default=None)
_SEEN: list[int] = []  # range_m() of every lowering done in a range (tests and the serving records read it)


def static_one(size: Any) -> bool:
    """Whether ``size`` is known to be 1 without a guard on a symbolic size."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(size == 1))


def static_int(size: Any) -> int | None:
    """``size`` as an int when it is a constant; None when symbolic (``int()`` of a SymInt would specialise the
    graph on its current value: a prefill's token count marked dynamic then fails Dynamo's constraint check)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    return int(size) if is_concrete_int(size) else None


def pow2_ceil(v: int) -> int:
    """The smallest power of two at least ``v`` (1 for ``v`` <= 1)."""
    return 1 << max(0, (int(v) - 1).bit_length())


def tf32_enabled() -> bool:
    """Whether float32 matmuls may run as TF32. ``torch.get_float32_matmul_precision`` raises once the
    per-backend API (``torch.backends.cuda.matmul.fp32_precision``, torch >= 2.9) was used; that one is read
    then, and TF32 is assumed when neither can be read (cuBLAS, plain's choice, is kept)."""
    import torch

    try:
        return torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:
        try:
            return torch.backends.cuda.matmul.fp32_precision == "tf32"
        except Exception:  # noqa: BLE001 -- unreadable: treat as TF32 on
            return True


def range_m() -> int | None:
    """While a range's GEMM is lowered (``dynamic.size_ranges``): its representative M (``size_ranges.PLAIN``, 0,
    above the last bound); else None."""
    return _RANGE.get()


@contextlib.contextmanager
def judged_at(m: int) -> Iterator[None]:
    """While active, ``range_m()`` is ``m``: the GEMM lowered now is one range's (recorded in ``lowered_ranges``)."""
    token = _RANGE.set(m)
    _SEEN.append(m)
    try:
        yield
    finally:
        _RANGE.reset(token)


def lowered_ranges() -> list[int]:
    """range_m() of every GEMM lowered in a range in this process, in order."""
    return list(_SEEN)
