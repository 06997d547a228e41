"""torchao's quantized linears as plain modules: the zoo's quantized LLMs without torchao (not installable on the
GPU machine). Each class reproduces one torchao recipe's calls, layouts and rounding, so Inductor sees the GEMMs a
torchao user's model gives it. Mirrored from pytorch/ao 0.19 (the file and function named in each docstring).

Which Linears: every ``nn.Linear`` under the decoder layers (``model.model.layers``); ``lm_head`` and the
embeddings stay as they are. That is what ``from_pretrained(..., quantization_config=TorchAoConfig(...))`` does
(transformers' ``get_keys_to_not_convert`` skips the output embedding and tied weights) and what torchtitan's float8
filter does (``output``); torchao's own ``quantize_`` default filter (``_is_linear``) would convert ``lm_head`` too.

Not reproduced: ``recommended_inductor_config_setter`` (torchao sets coordinate-descent tuning and
``force_fuse_int_mm_with_mul`` when a config is applied); the zoo's modes own Inductor's settings. The fp8 paths
take torchao's "torch" kernel choice (``KernelPreference.AUTO`` without the mslk package, as on a machine without
torchao's optional kernels).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


# ---- int8 dynamic activation, int8 weight (torchao Int8DynamicActivationInt8WeightConfig, version 2) ----

def int8_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row of the last dim: (int8 data, fp32 scale of shape (..., 1)).

    torchao ``Int8Tensor.from_hp`` -> ``choose_qparams_affine`` (SYMMETRIC, PerRow, scale_dtype fp32, eps = fp32 eps)
    and ``quantize_affine``: scale = amax / ((127 - -128) / 2) = amax / 127.5 computed in the input's dtype, then
    cast to fp32; q = clamp(round(t * (1 / scale)), -128, 127) (zero point 0)."""
    amax = t.abs().amax(dim=-1, keepdim=True)  # = torchao's max(-min(amin, 0), max(amax, 0))
    scale = (amax / 127.5).clamp(min=torch.finfo(torch.float32).eps).to(torch.float32)
    return torch.clamp(torch.round(t * (1.0 / scale)), -128, 127).to(torch.int8), scale


def int8_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int8 x int8 -> int32 as torchao's ``safe_int_mm`` (quantize_/workflows/int8/kernels.py) runs it.

    Compiled: ``out_dtype(aten.mm, int32, a, b)``, which Inductor decomposes to ``aten._int_mm(a, b)`` with ``b`` as
    given (here column-major), for every M. Eager on CUDA: cuBLAS ``_int_mm`` refuses M <= 16 ("self.size(0) needs
    to be greater than 16"); safe_int_mm catches that and falls back to an fp32 matmul cast to int32, which this
    takes directly. (Eager safe_int_mm also copies a non-contiguous ``b`` to row-major first; the int32 result is the
    same, so eager here keeps the compiled layout.) Eager on CPU: ``_int_scaled_matmul_cpu`` calls ``torch._int_mm``.
    """
    if a.is_cuda and a.shape[0] <= 16 and not torch.compiler.is_compiling():
        return torch.matmul(a.float(), b.float()).to(torch.int32)
    return torch._int_mm(a, b)


class Int8DynamicLinear(nn.Module):
    """y = linear(x, W) with int8 weight (per output channel, quantized once) and int8 per-token activations.

    torchao ``Int8Tensor``'s ``aten.linear`` (quantize_/workflows/int8/int8_tensor.py) with
    ``_int_scaled_matmul``: ``(_int_mm(x_q, W_q.t()) * x_scale).to(out)`` then ``* w_scale`` (fp32), ``+ bias``,
    ``.to(out)``. W_q is stored (N, K) int8 contiguous, so the GEMM's B = W_q.t() is column-major."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.in_features % 8 or linear.out_features % 8:  # else safe_int_mm leaves cuBLAS for a CPU matmul
            raise ValueError(f"int8 needs in/out features divisible by 8, got {tuple(linear.weight.shape)}")
        qweight, scale = int8_rowwise(linear.weight.detach())
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", qweight.contiguous())  # (N, K) int8
        self.register_buffer("weight_scale", scale)  # (N, 1) fp32
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = int8_rowwise(x)
        y = (int8_mm(xq.reshape(-1, self.in_features), self.qweight.t()) * x_scale.reshape(-1, 1)).to(x.dtype)
        y = (y * self.weight_scale.flatten()).reshape(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)

    def dequantized_weight(self) -> torch.Tensor:
        """W_q * w_scale in fp32 (the tests' reference)."""
        return self.qweight.float() * self.weight_scale


# ---- fp8 dynamic activation, fp8 weight, per row (torchao Float8DynamicActivationFloat8WeightConfig(PerRow())) ----

def float8_rowwise(t: torch.Tensor, dtype: torch.dtype = E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 per row of the last dim: (fp8 data, fp32 scale (..., 1)). torchao ``_choose_scale_float8`` (scale =
    amax / fp8 max in the input's dtype, then fp32; no epsilon) and ``_quantize_affine_float8`` (fp32 divide,
    saturate, cast)."""
    fmax = torch.finfo(dtype).max
    scale = (t.abs().amax(dim=-1, keepdim=True) / fmax).to(torch.float32)
    return (t.to(torch.float32) / scale).clamp(min=-fmax, max=fmax).to(dtype), scale


class Float8RowwiseLinear(nn.Module):
    """y = linear(x, W) with e4m3 weight (per output row, quantized once) and e4m3 per-token activations.

    torchao ``Float8Tensor``'s ``aten.linear`` -> ``_float8_addmm_impl`` (quantize_/workflows/float8/float8_tensor.py)
    -> ``addmm_float8_unwrapped_inference`` (float8/inference.py): ``torch._scaled_mm(x_q, W_q.t(), scale_a=(M, 1),
    scale_b=(1, N), bias=bias, out_dtype=x.dtype, use_fast_accum=True)`` (the config's default Float8MMConfig);
    W_q (N, K) contiguous, so B is column-major. torchao requires bf16 weights for PerRow."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.weight.dtype != torch.bfloat16:
            raise ValueError(f"fp8 rowwise needs bf16 weights (as torchao's PerRow), got {linear.weight.dtype}")
        if linear.in_features % 16 or linear.out_features % 16:  # torchao's _fp8_mm_compat skips such layers
            raise ValueError(f"fp8 needs in/out features divisible by 16, got {tuple(linear.weight.shape)}")
        qweight, scale = float8_rowwise(linear.weight.detach())
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", qweight.contiguous())  # (N, K) e4m3
        self.register_buffer("weight_scale", scale)  # (N, 1) fp32
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = float8_rowwise(x)
        y = torch._scaled_mm(xq.reshape(-1, self.in_features), self.qweight.t(), scale_a=x_scale.reshape(-1, 1),
                             scale_b=self.weight_scale.t(), bias=self.bias, out_dtype=x.dtype, use_fast_accum=True)
        return y.reshape(*x.shape[:-1], self.out_features)

    def dequantized_weight(self) -> torch.Tensor:
        return self.qweight.float() * self.weight_scale


# ---- fp8 training, tensorwise (torchao convert_to_float8_training, default Float8LinearConfig) ----

def float8_tensorwise(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 data, fp32 0-dim scale) with data = sat(t * scale), scale = fp8 max / max(amax, 1e-12) in fp64 then
    fp32: torchao float8/float8_utils.py ``tensor_to_amax``, ``amax_to_scale``, ``to_fp8_saturated``."""
    fmax = torch.finfo(dtype).max
    scale = (fmax / torch.clamp(t.abs().max().to(torch.float64), min=1e-12)).to(torch.float32)
    return (t.to(torch.float32) * scale).clamp(min=-fmax, max=fmax).to(dtype), scale


def _is_row_major(t: torch.Tensor) -> bool:
    return t.stride(0) > t.stride(1)  # torchao float8_utils.is_row_major


def scaled_mm_tensorwise(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                         out_dtype: torch.dtype, use_fast_accum: bool) -> torch.Tensor:
    """torchao float8/float8_ops.py ``preprocess_addmm`` (A made row-major, B column-major, by copies) and
    ``addmm_float8_unwrapped`` (``_scaled_mm`` with the reciprocal scales)."""
    if not _is_row_major(a):
        a = a.contiguous()
    if _is_row_major(b):
        b = b.t().contiguous().t()
    return torch._scaled_mm(a, b, scale_a=a_scale.reciprocal(), scale_b=b_scale.reciprocal(), out_dtype=out_dtype,
                            use_fast_accum=use_fast_accum)


class _Float8Matmul(torch.autograd.Function):
    """torchao float8/float8_linear.py ``matmul_with_hp_or_float8_args`` with the default config: forward
    e4m3 x e4m3 (fast accumulation), grad_input e5m2 x e4m3, grad_weight e5m2 x e4m3 (no fast accumulation);
    high-precision tensors are saved and cast again in backward, as torchao does."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:  # w_t: (K, N), the weight's .t()
        ctx.save_for_backward(x, w_t)
        xq, xs = float8_tensorwise(x, E4M3)
        wq, ws = float8_tensorwise(w_t, E4M3)
        y = scaled_mm_tensorwise(xq.reshape(-1, x.shape[-1]), xs, wq, ws, x.dtype, use_fast_accum=True)
        return y.reshape(*x.shape[:-1], w_t.shape[1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w_t = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        gq, gs = float8_tensorwise(g, E5M2)  # torchao casts it twice (dim0, dim1): tensorwise, the same values
        wq, ws = float8_tensorwise(w_t, E4M3)
        grad_x = scaled_mm_tensorwise(gq, gs, wq.t(), ws, grad.dtype, use_fast_accum=False)
        xq, xs = float8_tensorwise(x.reshape(-1, x.shape[-1]), E4M3)
        grad_w = scaled_mm_tensorwise(gq.t(), gs, xq, xs, grad.dtype, use_fast_accum=False)  # (N, K)
        return grad_x.reshape(x.shape), grad_w.t()


class Float8TrainingLinear(nn.Module):
    """torchao ``Float8Linear.forward`` (float8/float8_linear.py): the matmul above on the weight's transpose, then
    ``+ bias`` in high precision. Trains its own high-precision weight."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.in_features % 16 or linear.out_features % 16:
            raise ValueError(f"fp8 needs in/out features divisible by 16, got {tuple(linear.weight.shape)}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _Float8Matmul.apply(x, self.weight.t())
        return y if self.bias is None else y + self.bias.to(y.dtype)


SCHEMES: dict[str, Callable[[nn.Linear], nn.Module]] = {
    "w8a8": Int8DynamicLinear, "fp8-rowwise": Float8RowwiseLinear, "fp8-train": Float8TrainingLinear}


def quantize_linears(module: nn.Module, scheme: str) -> int:
    """Replace every ``nn.Linear`` inside ``module`` by the scheme's module; returns how many were replaced."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown quantization scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    targets = [(name, m) for name, m in module.named_modules() if isinstance(m, nn.Linear)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(module.get_submodule(parent_name) if parent_name else module, child, SCHEMES[scheme](linear))
    return len(targets)
