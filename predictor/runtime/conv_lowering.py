"""Convolutions lowered as plain ``torch.compile`` lowers them, under ``predictor.compile``'s GEMM setting.

Why: with ``max_autotune_gemm`` on (which ``predictor.compile`` needs so that Inductor builds the Triton GEMM
candidates the hook picks from), Inductor also turns every channels-last 1x1 convolution into a GEMM
(``torch/_inductor/kernel/conv.py``, ``convert_1x1_conv_to_mm``): a CNN then runs cuBLAS GEMMs and extra layout
kernels where plain ``torch.compile`` runs cuDNN. Measured on an H100 (the gap -2.5 runs, resnet50 fp16 batch 32): 140
kernels against plain's 131 and 0.963x plain's step, the convolutions being the only difference (0.958x on an
H200 in the first H200 zoo runs). The hook cannot rank convolutions, so they are left to cuDNN exactly as plain has them; a user
who asks for the conversion (``conv_1x1_as_mm=True``) or for full max-autotune (``max_autotune=True``) keeps it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, Callable


def _plain(lower: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(lower)
    def lower_as_plain(*args: Any, **kwargs: Any) -> Any:
        from torch._inductor import config

        if config.conv_1x1_as_mm or not config.max_autotune_gemm:
            return lower(*args, **kwargs)
        with config.patch(max_autotune_gemm=False):
            return lower(*args, **kwargs)
    lower_as_plain.predictor_plain_convolution = True  # type: ignore[attr-defined]
    return lower_as_plain


@contextlib.contextmanager
def convolutions_as_plain() -> Iterator[None]:
    """While active, Inductor lowers ``aten.convolution`` with ``max_autotune_gemm`` off (the lowering table's
    entries are restored on exit, also on an error)."""
    import torch
    from torch._inductor import lowering

    conv = torch.ops.aten.convolution
    originals = {key: lowering.lowerings[key] for key in (conv, conv.default) if key in lowering.lowerings}
    for key, lower in originals.items():
        if not getattr(lower, "predictor_plain_convolution", False):  # nested compiles wrap once
            lowering.lowerings[key] = _plain(lower)
    try:
        yield
    finally:
        lowering.lowerings.update(originals)
