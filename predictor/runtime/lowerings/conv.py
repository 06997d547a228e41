"""Convolutions (and scaled grouped GEMMs) lowered as plain ``torch.compile`` lowers them, under
``predictor.compile``'s GEMM setting.

Why: with ``max_autotune_gemm`` on (which ``predictor.compile`` needs so that Inductor builds the Triton GEMM
candidates the hook picks from), Inductor also turns every channels-last 1x1 convolution into a GEMM
(``torch/_inductor/kernel/conv.py``, ``convert_1x1_conv_to_mm``), so a CNN runs cuBLAS GEMMs and extra layout
kernels where plain ``torch.compile`` runs cuDNN, and runs slower (docs/DESIGN.md; findings 37 and 39). The hook cannot
rank convolutions, so they stay on cuDNN exactly as plain has them; ``conv_1x1_as_mm=True`` or ``max_autotune=True``
keeps the conversion.

Scaled grouped GEMMs (fp8 experts) likewise: with ``max_autotune_gemm`` on, Inductor benchmarks ~40 Triton configs
each, outside the choices the hook sees, and no labels cover them yet (``grouped_mm`` decides the unscaled ones).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

from .tables import wrapped_entries


def _plain(lower: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(lower)
    def lower_as_plain(*args: Any, **kwargs: Any) -> Any:
        from torch._inductor import config

        if config.conv_1x1_as_mm or not config.max_autotune_gemm:
            return lower(*args, **kwargs)
        with config.patch(max_autotune_gemm=False):
            return lower(*args, **kwargs)
    return lower_as_plain


def _plain_ops() -> list[Any]:
    """The ops lowered as plain: convolution, and the scaled grouped GEMM where this torch has it."""
    import torch

    aten = torch.ops.aten
    ops = [aten.convolution, aten.convolution.default]
    for name in ("_scaled_grouped_mm",):
        packet = getattr(aten, name, None)
        if packet is not None:
            ops += [packet, packet.default]
    return ops


def convolutions_as_plain() -> contextlib.AbstractContextManager[None]:
    """While active, Inductor lowers ``aten.convolution`` and scaled grouped GEMMs with ``max_autotune_gemm`` off (the
    lowering table's entries are restored on exit, also on an error)."""
    from torch._inductor import lowering

    return wrapped_entries([lowering.lowerings], _plain_ops(), lambda _key, lower: _plain(lower),
                           "predictor_plain_convolution")
