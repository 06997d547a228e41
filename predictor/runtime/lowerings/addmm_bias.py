"""An ``addmm`` whose bias Inductor's tuned lowering cannot take, lowered as plain ``torch.compile`` lowers it.

Why: ``predictor.compile`` turns ``max_autotune_gemm`` on (so that Inductor builds the Triton candidates the hook
picks from), and under it ``tuned_addmm`` reads the bias's first stride (``inp.get_stride()[0]``, for cuBLASLt's
bias epilogue): a 0-d bias (``torch.addmm(torch.randn(()), a, b)``) raises an IndexError there and the compile
fails, where plain ``torch.compile`` never reaches that line and runs cuBLAS. Such a GEMM is lowered with
``max_autotune`` and ``max_autotune_gemm`` off: aten's addmm, exactly plain's choice. A bias of 1 or 2 dimensions
(every ``nn.Linear``) is lowered as before.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

from .tables import wrapped_entries

MIN_BIAS_DIMS = 1  # tuned_addmm's autotuning path indexes the bias's first stride
MAX_BIAS_DIMS = 2  # addmm broadcasts its bias to the (M, N) output


def takes_plain(bias: Any) -> bool:
    """Whether ``bias`` (an Inductor IR node, or anything with ``get_size``) is one the tuned lowering mishandles:
    fewer than ``MIN_BIAS_DIMS`` or more than ``MAX_BIAS_DIMS`` dimensions."""
    try:
        dims = len(bias.get_size())
    except Exception:  # noqa: BLE001 -- not a tensor node (a scalar): plain's lowering takes it too
        return True
    return not MIN_BIAS_DIMS <= dims <= MAX_BIAS_DIMS


def _plain_for_odd_bias(lower: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(lower)
    def addmm(bias: Any, *args: Any, **kwargs: Any) -> Any:
        if not takes_plain(bias):
            return lower(bias, *args, **kwargs)
        from torch._inductor import config

        with config.patch(max_autotune=False, max_autotune_gemm=False):
            return lower(bias, *args, **kwargs)
    return addmm


def odd_bias_as_plain() -> contextlib.AbstractContextManager[None]:
    """While active, Inductor lowers an ``aten.addmm`` of a bias ``takes_plain`` takes with max-autotune off (the
    lowering table's entries are restored on exit, also on an error)."""
    import torch
    from torch._inductor import lowering

    aten = torch.ops.aten
    return wrapped_entries([lowering.lowerings], [aten.addmm, aten.addmm.default],
                           lambda _key, lower: _plain_for_odd_bias(lower), "predictor_addmm_bias")
