"""The zoo's quantized LLMs (collectors/programs/quant.py) on CPU: each quantized linear against a dequantized fp32
reference, the GEMM calls' layouts (int8 ``_int_mm`` and fp8 ``_scaled_mm`` with B column-major, as torchao runs
them), the fp8 training backward, and every registry entry built at tiny widths. The GPU test at the end checks the
layouts give the same numbers on CUDA (cuBLAS), where torchao's eager path copies B to row-major first."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from collectors.programs import models, quant, step
from collectors.programs.harness import one_line

QUANT_MODELS = {"llama-w8a8-prefill": "w8a8", "llama-w8a8-decode": "w8a8", "qwen2-w8a8-decode": "w8a8",
                "llama-fp8-prefill": "fp8-rowwise", "qwen2-fp8-prefill": "fp8-rowwise", "llama-fp8-train": "fp8-train"}
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
# The quantized math is exact up to fp32 accumulation order and bf16 roundings of the output (and, for int8, of the
# x-scaled intermediate, as torchao rounds it): bf16's eps is 7.8e-3, so a relative error (norm) of 1e-2 against the
# dequantized reference admits those roundings and nothing else (a wrong scale or layout is off by far more).
REL_TOL = 1e-2


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return step.errors(out, ref)[1]


def _scaled_mm_on_cpu() -> str | None:
    """None if ``torch._scaled_mm`` runs on this CPU (torch 2.13 does), else why not."""
    try:
        a = torch.ones(16, 16).to(quant.E4M3)
        torch._scaled_mm(a, a.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        return f"torch._scaled_mm does not run on CPU in torch {torch.__version__}: {one_line(exc)}"
    return None


needs_cpu_fp8 = pytest.mark.skipif(_scaled_mm_on_cpu() is not None, reason=str(_scaled_mm_on_cpu()))


class GemmCalls(TorchDispatchMode):
    """Records each ``_int_mm`` / ``_scaled_mm`` call's operands (dtype, shape, stride) and keyword arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ("_int_mm", "_scaled_mm"):  # operands as (dtype, shape, stride); the rest by name (defaults absent)
            info = [(a.dtype, tuple(a.shape), a.stride()) for a in args[:2]]
            named = {arg.name: value for arg, value in zip(func._schema.arguments[2:], args[2:])}
            self.calls.append((name, info, {**named, **kwargs}))
        return func(*args, **kwargs)


def _linear(k: int, n: int, bias: bool) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(k, n, bias=bias).to(torch.bfloat16)


def _x(*shape: int) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(*shape).to(torch.bfloat16)


@pytest.mark.parametrize("bias", [False, True])
def test_int8_linear_matches_dequantized_reference(bias):
    linear = _linear(64, 48, bias)
    q = quant.Int8DynamicLinear(linear)
    assert q.qweight.dtype == torch.int8 and q.qweight.shape == (48, 64) and q.qweight.is_contiguous()
    assert q.weight_scale.dtype == torch.float32 and q.weight_scale.shape == (48, 1)
    x = _x(2, 17, 64)
    with GemmCalls() as rec:
        y = q(x)
    assert y.dtype == torch.bfloat16 and y.shape == (2, 17, 48)
    # one _int_mm: A (34, 64) int8 row-major, B = W_q.t() (64, 48) int8 column-major (stride (1, 64))
    assert rec.calls == [("_int_mm", [(torch.int8, (34, 64), (64, 1)), (torch.int8, (64, 48), (1, 64))], {})]
    xq, xs = quant.int8_rowwise(x)
    assert xq.dtype == torch.int8 and xs.shape == (2, 17, 1) and xq.abs().max() >= 127  # the row max is used
    ref = (xq.float() * xs) @ q.dequantized_weight().t() + (linear.bias.float() if bias else 0)
    assert _rel(y, ref) < REL_TOL
    # and the quantization itself is sane: close to the unquantized linear (int8 noise is ~1%)
    assert _rel(y, linear.float()(x.float())) < 5e-2


def test_int8_scales_follow_torchao():
    """scale = amax / 127.5 in the input dtype (choose_qparams_affine SYMMETRIC), round half to even, clamp."""
    t = torch.tensor([[2.55, -1.0, 0.0, 0.01]], dtype=torch.bfloat16)
    q, s = quant.int8_rowwise(t)
    expected_scale = (t.abs().amax() / 127.5).float()
    assert s.item() == expected_scale.item()
    assert q.tolist() == torch.clamp(torch.round(t * (1.0 / s)), -128, 127).to(torch.int8).tolist()
    assert q[0, 0].item() == 127  # 2.55 / scale rounds to 128 (127.5 in exact arithmetic) and is clamped
    zero, zs = quant.int8_rowwise(torch.zeros(1, 8, dtype=torch.bfloat16))
    assert zs.item() == pytest.approx(torch.finfo(torch.float32).eps, rel=1e-2) and zero.abs().max() == 0


@needs_cpu_fp8
@pytest.mark.parametrize("bias", [False, True])
def test_fp8_rowwise_linear_matches_dequantized_reference(bias):
    linear = _linear(64, 48, bias)
    q = quant.Float8RowwiseLinear(linear)
    assert q.qweight.dtype == quant.E4M3 and q.qweight.shape == (48, 64) and q.qweight.is_contiguous()
    x = _x(2, 17, 64)
    with GemmCalls() as rec:
        y = q(x)
    assert y.dtype == torch.bfloat16 and y.shape == (2, 17, 48)
    [(name, operands, kwargs)] = rec.calls
    assert name == "_scaled_mm"
    assert operands[:2] == [(quant.E4M3, (34, 64), (64, 1)), (quant.E4M3, (64, 48), (1, 64))]
    assert kwargs["scale_a"].shape == (34, 1) and kwargs["scale_b"].shape == (1, 48)
    assert kwargs["scale_a"].dtype == kwargs["scale_b"].dtype == torch.float32
    assert kwargs["use_fast_accum"] is True and kwargs["out_dtype"] == torch.bfloat16
    assert (kwargs.get("bias") is not None) == bias
    xq, xs = quant.float8_rowwise(x)
    ref = (xq.float() * xs) @ q.dequantized_weight().t() + (linear.bias.float() if bias else 0)
    assert _rel(y, ref) < REL_TOL
    assert _rel(y, linear.float()(x.float())) < 1e-1  # e4m3 has 3 mantissa bits: a few % noise


@needs_cpu_fp8
def test_fp8_training_linear_forward_and_backward():
    linear = _linear(64, 48, bias=False)
    q = quant.Float8TrainingLinear(linear)
    x = _x(2, 16, 64).requires_grad_()
    with GemmCalls() as rec:
        y = q(x)
        grad = _x(2, 16, 48) * 1e-3
        y.backward(grad)
    e4, e5 = quant.E4M3, quant.E5M2
    # forward e4m3 x e4m3 (fast accumulation); grad_input e5m2 x e4m3 and grad_weight e5m2 x e4m3 (no fast
    # accumulation); A row-major and B column-major in all three, 0-dim fp32 scales (tensorwise)
    assert [(c[1][0][0], c[1][1][0], c[2].get("use_fast_accum", False)) for c in rec.calls] == [
        (e4, e4, True), (e5, e4, False), (e5, e4, False)]
    assert [(c[1][0][1:], c[1][1][1:]) for c in rec.calls] == [
        (((32, 64), (64, 1)), ((64, 48), (1, 64))),  # forward: x (M, K) @ W.t() (K, N)
        (((32, 48), (48, 1)), ((48, 64), (1, 48))),  # grad_x: g (M, N) @ W (N, K), W copied column-major
        (((48, 32), (32, 1)), ((32, 64), (1, 32))),  # grad_w: g.t() (N, M) @ x (M, K), both copied
    ]
    assert all(c[2]["scale_a"].dim() == 0 and c[2]["scale_b"].dim() == 0 for c in rec.calls)
    xq, xs = quant.float8_tensorwise(x.detach(), e4)
    wq, ws = quant.float8_tensorwise(linear.weight.detach().t(), e4)
    gq, gs = quant.float8_tensorwise(grad.reshape(-1, 48), e5)
    x_dq, w_dq, g_dq = xq.float() / xs, wq.float() / ws, gq.float() / gs
    assert _rel(y, x_dq @ w_dq) < REL_TOL
    assert _rel(x.grad, (g_dq @ w_dq.t()).reshape(x.shape)) < REL_TOL
    assert _rel(linear.weight.grad, g_dq.t() @ x_dq.reshape(-1, 64)) < REL_TOL
    assert linear.weight.grad.dtype == torch.bfloat16 and q.weight is linear.weight


def test_quantize_linears_and_refusals():
    block = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Sequential(nn.Linear(32, 16))).to(torch.bfloat16)
    assert quant.quantize_linears(block, "w8a8") == 2
    assert isinstance(block[0], quant.Int8DynamicLinear) and isinstance(block[2][0], quant.Int8DynamicLinear)
    with pytest.raises(ValueError, match="unknown quantization scheme 'int4'.*w8a8"):
        quant.quantize_linears(block, "int4")
    with pytest.raises(ValueError, match="bf16 weights"):
        quant.Float8RowwiseLinear(nn.Linear(32, 32))
    with pytest.raises(ValueError, match="divisible by 16"):
        quant.Float8RowwiseLinear(nn.Linear(32, 24).to(torch.bfloat16))
    with pytest.raises(ValueError, match="divisible by 8"):
        quant.Int8DynamicLinear(nn.Linear(30, 32))


def test_registry_entries():
    for name, scheme in QUANT_MODELS.items():
        zm = models.get(name)
        assert zm.dtype == "bfloat16" and zm.compute_dtype in step.TOLERANCE and name in models.names()
        assert zm.kind == ("train" if scheme == "fp8-train" else "infer")
        assert zm.family == ("train" if scheme == "fp8-train" else "llm-quant")


@pytest.mark.parametrize("name", list(QUANT_MODELS))
def test_quantized_models_build_tiny(name):
    pytest.importorskip("transformers")
    scheme = QUANT_MODELS[name]
    if scheme.startswith("fp8") and _scaled_mm_on_cpu():
        pytest.skip(_scaled_mm_on_cpu())
    module, inputs, kind = models.get(name).build(torch.device("cpu"), **TINY)
    hf = module.model
    # the decoder layers' 7 Linears each (q, k, v, o, gate, up, down) are replaced; lm_head stays a bf16 Linear
    replaced = [m for m in hf.modules() if isinstance(m, tuple(quant.SCHEMES.values()))]
    assert len(replaced) == 7 * hf.config.num_hidden_layers and all(isinstance(m, quant.SCHEMES[scheme])
                                                                    for m in replaced)
    assert type(hf.lm_head) is nn.Linear and hf.lm_head.weight.dtype == torch.bfloat16
    assert not any(type(m) is nn.Linear for m in hf.model.layers.modules())
    if kind == "loss":
        loss = module(*inputs)
        loss.backward()
        assert loss.dim() == 0 and torch.isfinite(loss)
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in hf.model.layers.parameters())
    else:
        module.eval()
        with torch.no_grad():
            out = module(*inputs)
        assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
        assert out.shape[0] == inputs[0].shape[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_layouts_agree():
    """On cuBLAS: _int_mm with B column-major (the compiled path, and ours) equals B row-major (torchao's eager copy)
    and the exact int64 product; M <= 16 takes the fp32 fallback; rowwise _scaled_mm with bias matches the
    dequantized reference."""
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randint(-128, 128, (32, 2048), dtype=torch.int8, device=dev)
    w = torch.randint(-128, 128, (256, 2048), dtype=torch.int8, device=dev)
    exact = (a.cpu().long() @ w.cpu().long().t()).to(torch.int32).to(dev)  # CUDA has no int64 matmul
    assert torch.equal(torch._int_mm(a, w.t()), exact) and torch.equal(torch._int_mm(a, w.t().contiguous()), exact)
    for m, bias in [(32, False), (8, True)]:
        linear = _linear(2048, 256, bias).to(dev)
        x = _x(m, 2048).to(dev)
        q = quant.Int8DynamicLinear(linear)
        xq, xs = quant.int8_rowwise(x)
        ref = (xq.float() * xs) @ q.dequantized_weight().t() + (linear.bias.float() if bias else 0)
        assert _rel(q(x), ref) < REL_TOL
        f = quant.Float8RowwiseLinear(linear)
        xq, xs = quant.float8_rowwise(x)
        ref = (xq.float() * xs) @ f.dequantized_weight().t() + (linear.bias.float() if bias else 0)
        assert _rel(f(x), ref) < REL_TOL
