"""A patch-embedding convolution (kernel equal to stride, no padding: ViT, DeiT, CLIP, Mixer, Swin and ConvNeXt
stems) as the GEMM it is, so the model decides it like every other GEMM.

Why: such a convolution cuts the image into non-overlapping patches and multiplies each by the weight, so it is one
GEMM of (batch x patches) rows by (channels x kernel area) columns. cuDNN runs it as a convolution, and on a
3-channel image the channels are first padded to 8 (and an NCHW image converted to NHWC): on the H100 a batch-32
ViT-S/16 stem took 225 us under plain ``torch.compile`` and 23 us as the GEMM (docs/DESIGN.md; finding 72).
Every stock mode lowers it the same way (Inductor keeps convolutions on cuDNN), so a stem GEMM wins over all of them.

As a decomposition (applied while AOTAutograd traces, as Inductor's own ``mm`` decomposition is): ``unfold`` and a
permute gather the patches (one pointwise copy Inductor can fuse with what produced the image), ``mm``/``addmm``
multiplies, and the result is viewed back to the convolution's shape with its strides (channels-last when the
input or the weight was, contiguous otherwise). Autograd records the convolution before the decomposition runs, so
a training graph's ``convolution_backward`` of such a convolution is decomposed into GEMMs too.

Which ones: ``takes_gemm``, from the GPU measurement in finding 72 (``python -m benchmarks.patchify_bench``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from ..compile_state import static_int, tf32_enabled
from .tables import added_entries, decomposition_tables

DEVICES = ("cuda",)
DTYPES = ("float16", "bfloat16", "float32")
ALIGN = 8  # cuDNN's tensor-core convolutions want channels in multiples of 8 (16 bytes of fp16)


def takes_gemm(channels: int, kernel: list[int], dtype: str, tf32: bool = True) -> bool:
    """Whether a patch-embedding convolution runs as a GEMM: input channels cuDNN must pad (not a multiple of
    ``ALIGN``: an RGB image, a 3-channel video or waveform) and a kernel larger than 1x1; float32 only where matmuls
    may use TF32 (``tf32``), as cuDNN's convolutions do by default and as it was measured. On the H100 such stems ran
    1.7-15x faster as the GEMM alone, and six vision models 1.02-2.06x faster than with cuDNN stems. Aligned
    channels (ConvNeXt's 2x2 downsampling layers) ran 1.1-1.6x faster alone, yet ConvNeXt-T's step went from 7%
    faster than plain (stem only) to 1% slower with them converted: the patch gather fused into the LayerNorm
    ahead of it and slowed that kernel more than the GEMM saved (finding 72)."""
    return dtype in DTYPES and (dtype != "float32" or tf32) and channels % ALIGN != 0 and math.prod(kernel) > 1


def patch_shape(x: Any, weight: Any, stride: Any, padding: Any, dilation: Any, transposed: bool,
                output_padding: Any, groups: int) -> tuple[list[int], list[Any]] | None:
    """(kernel sizes, output sizes) when the convolution is a patch embedding that this rule takes, else None. The
    kernel, stride, padding and channels must be constants; the batch and image sizes may be symbolic (``dynamic=True``:
    the output sizes are then symbolic too, and the GEMM's M with them)."""
    spatial = x.dim() - 2
    if transposed or groups != 1 or spatial < 1 or weight.dim() != x.dim() or x.device.type not in DEVICES:
        return None
    if x.dtype != weight.dtype or any(static_int(p) != 0 for p in padding) or any(static_int(d) != 1
                                                                                  for d in dilation):
        return None
    kernel = [static_int(k) for k in weight.shape[2:]]
    channels = static_int(weight.shape[1])  # the input's, with one group (a weight's sizes are constants)
    if None in kernel or channels is None or [static_int(s) for s in stride] != kernel:
        return None
    if not takes_gemm(channels, kernel, str(x.dtype).removeprefix("torch."), _tf32_allowed()):
        return None
    outputs = [size // k for size, k in zip(x.shape[2:], kernel)]
    # an image smaller than one patch: the convolution's own error, not an empty GEMM (a guard where symbolic)
    return (kernel, outputs) if all(bool(o >= 1) for o in outputs) else None


def _channels_last(t: Any) -> bool:
    """Whether ``t``'s strides read as channels-last, as eager's convolution decides its output's layout
    (``suggest_memory_format``: also for one channel, where both layouts are contiguous)."""
    import torch
    from torch._prims_common import suggest_memory_format

    return t.dim() in (4, 5) and suggest_memory_format(t) in (torch.channels_last, torch.channels_last_3d)


def _tf32_allowed() -> bool:
    """float32 runs as TF32 both where eager runs the convolution (cuDNN) and where this runs the GEMM (cuBLAS):
    otherwise the GEMM form would change the precision or run a full-precision GEMM that was never measured."""
    import torch

    matmul = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")  # torch >= 2.9's per-backend setting
    try:
        conv = bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:  # the per-backend API was used: read that one
        conv = getattr(torch.backends.cudnn.conv, "fp32_precision", "tf32") != "ieee"
    return conv and matmul != "ieee" and (matmul == "tf32" or tf32_enabled())


def as_gemm(x: Any, weight: Any, bias: Any, kernel: list[int], outputs: list[int]) -> Any:
    """The patch-embedding convolution of ``x`` (N, C, *sizes) by ``weight`` (O, C, *kernel) as one GEMM."""
    import torch

    spatial = len(kernel)
    # a convolution's output is channels-last when its input or weight is, contiguous otherwise
    keep_channels_last = _channels_last(x) or _channels_last(weight)
    patches = _patch_rows(x, kernel)
    flat_weight = weight.reshape(weight.shape[0], -1).t()
    out = torch.mm(patches, flat_weight) if bias is None else torch.addmm(bias, patches, flat_weight)
    out = out.reshape([x.shape[0], *outputs, weight.shape[0]]).permute([0, spatial + 1, *range(1, spatial + 1)])
    return out if keep_channels_last else out.contiguous()


def _known_equal(a: Any, b: Any) -> bool:
    """``a == b`` for sure, without a guard on symbolic sizes (where unsure the caller pads: a no-op when they are
    equal)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def _patch_rows(x: Any, kernel: list[int]) -> Any:
    """(N * patches, C * kernel area): ``x``'s patches, a row each, in the weight's order (C, k1, k2, ...). ``unfold``
    drops a remainder the convolution drops, as a view: no crop, whose contiguity would guard each image size's
    divisibility and compile a graph per pattern under ``dynamic=True``."""
    spatial = len(kernel)
    for i, k in enumerate(kernel):
        x = x.unfold(2 + i, k, k)  # (N, C, o1, ..., k1, ...): the window dimension goes last
    # (N, C, o1, o2, ..., k1, k2, ...) -> (N, o1, o2, ..., C, k1, k2, ...)
    order = [0, *range(2, 2 + spatial), 1, *range(2 + spatial, 2 + 2 * spatial)]
    return x.permute(order).reshape(-1, x.shape[1] * math.prod(kernel))


def _output_rows(grad_output: Any) -> Any:
    """(N * patches, O): a convolution output's gradient, a row per patch."""
    spatial = grad_output.dim() - 2
    return grad_output.permute([0, *range(2, 2 + spatial), 1]).reshape(-1, grad_output.shape[1])


def backward_as_gemm(grad_output: Any, x: Any, weight: Any, kernel: list[int], outputs: list[int],
                     output_mask: list[bool]) -> tuple[Any, Any, Any]:
    """``convolution_backward`` of a patch embedding as GEMMs: the weight's gradient is the output gradient's rows
    times the patches, the input's is the rows times the weight folded back into the image (zeros where the
    convolution dropped a remainder), the bias's the rows' sum."""
    import torch

    rows = _output_rows(grad_output)
    grad_x = grad_weight = grad_bias = None
    if output_mask[0]:
        spatial = len(kernel)
        patches = torch.mm(rows, weight.reshape(weight.shape[0], -1))
        split = [x.shape[0]] + outputs + [x.shape[1]] + kernel
        order = [0, spatial + 1] + [d for i in range(spatial) for d in (1 + i, spatial + 2 + i)]
        grad_x = patches.reshape(split).permute(order).reshape([x.shape[0], x.shape[1],
                                                                *(o * k for o, k in zip(outputs, kernel))])
        remainder = [x.shape[2 + i] - o * k for i, (o, k) in enumerate(zip(outputs, kernel))]
        if not all(_known_equal(r, 0) for r in remainder):
            grad_x = torch.constant_pad_nd(grad_x, [d for r in reversed(remainder) for d in (0, r)])
        memory_format = torch.contiguous_format
        if _channels_last(x):
            memory_format = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        grad_x = grad_x.contiguous(memory_format=memory_format)
    if output_mask[1]:
        grad_weight = torch.mm(rows.t(), _patch_rows(x, kernel)).reshape(weight.shape)
    if output_mask[2]:
        grad_bias = rows.sum(0)
    return grad_x, grad_weight, grad_bias


_COUNTS = {"patch_gemms": 0}


def patch_gemm_count() -> int:
    """Convolutions traced into the GEMM form in this process (the zoo's records report it)."""
    return _COUNTS["patch_gemms"]


def convolution_as_gemm(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
                        transposed: bool, output_padding: Any, groups: int) -> Any:
    """A decomposition of ``aten.convolution``: the GEMM form where ``patch_shape`` takes it, else
    ``NotImplemented`` (the tracer then records the convolution as it is)."""
    shape = patch_shape(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    if shape is None:
        return NotImplemented
    _COUNTS["patch_gemms"] += 1
    return as_gemm(x, weight, bias, *shape)


def convolution_backward_as_gemm(grad_output: Any, x: Any, weight: Any, bias_sizes: Any, stride: Any, padding: Any,
                                 dilation: Any, transposed: bool, output_padding: Any, groups: int,
                                 output_mask: list[bool]) -> Any:
    """A decomposition of ``aten.convolution_backward``: GEMMs where ``patch_shape`` takes the convolution (a
    training step's stem: its weight gradient on cuDNN pads the channels as the forward does), else
    ``NotImplemented``."""
    shape = patch_shape(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    if shape is None:
        return NotImplemented
    return backward_as_gemm(grad_output, x, weight, *shape, list(output_mask))


@contextlib.contextmanager
def patchify_as_gemm(enabled: bool = True) -> Iterator[None]:
    """While active (and ``enabled``), Inductor's decomposition tables turn each patch-embedding convolution that
    ``takes_gemm`` takes into the GEMM form; the tables are restored on exit, also on an error."""
    import torch

    if not enabled:
        yield
        return
    aten = torch.ops.aten
    entries = {aten.convolution.default: convolution_as_gemm,
               aten.convolution_backward.default: convolution_backward_as_gemm}
    with added_entries(decomposition_tables(), entries, "predictor_patchify"):
        yield
