"""Short unaligned reductions padded to a multiple of 8 (``runtime.pad_k``), on the CPU: which GEMMs the rule takes,
that the padded product is the product, and ``predictor.compile``'s ``pad_k`` switch. (On a GPU: the
zoo, ``python -m benchmarks.zoo.run``.)"""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.runtime.choices import installed
from predictor.runtime.lowerings import pad_k

aten = torch.ops.aten


def _meta(*shape, dtype=torch.float16, device="meta"):
    return torch.empty(*shape, dtype=dtype, device=device)


@pytest.fixture
def anywhere(monkeypatch):
    """The rule's device list with the CPU and meta in it, so that what a case refuses is the case itself."""
    monkeypatch.setattr(pad_k, "DEVICES", ("cuda", "cpu", "meta"))


@pytest.mark.parametrize(("m", "k", "n", "dtype", "expected"), [
    (24576, 196, 384, torch.float16, 200),    # MLP-Mixer-B/16's first token layer
    (12288, 225, 225, torch.bfloat16, 232),   # ResMLP-24's token projection at 240 px
    (8192, 588, 1024, torch.float16, 592),    # a patch-14 stem (3 x 14 x 14)
    (24576, 192, 384, torch.float16, None),   # aligned
    (24576, 1030, 384, torch.float16, None),  # unaligned but long: the tail is a small share
    (24576, 196, 384, torch.float32, None),   # never measured in float32
    (1, 196, 50000, torch.float16, None),     # one row: a GEMV (runtime.gemv)
    (64, 196, 384, torch.float16, None),      # under 2**27 multiply-adds
])
def test_the_rule_takes_short_unaligned_reductions_of_large_gemms(anywhere, m, k, n, dtype, expected):
    assert pad_k.padded_k(_meta(m, k, dtype=dtype), _meta(k, n, dtype=dtype)) == expected


def test_the_rule_needs_a_gpu_by_default_and_two_matrices():
    assert pad_k.padded_k(_meta(24576, 196, device="cpu"), _meta(196, 384, device="cpu")) is None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pad_k, "DEVICES", ("meta",))
        assert pad_k.padded_k(_meta(2, 24576, 196), _meta(196, 384)) is None  # batched: bmm is not padded


@pytest.fixture
def small(monkeypatch):
    """Small float64 CPU GEMMs taken by the rule, for exact comparisons."""
    monkeypatch.setattr(pad_k, "DEVICES", ("cpu",))
    monkeypatch.setattr(pad_k, "DTYPES", ("float64", "float32"))
    monkeypatch.setattr(pad_k, "MIN_MNK", 0)


def test_the_padded_product_is_the_product(small):
    torch.manual_seed(0)
    a, b = torch.randn(10, 13, dtype=torch.float64), torch.randn(13, 7, dtype=torch.float64)
    bias = torch.randn(7, dtype=torch.float64)
    before = pad_k.padded_k_count()
    torch.testing.assert_close(pad_k.mm_padded(a, b), a @ b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(pad_k.addmm_padded(bias, a, b, beta=0.5, alpha=2.0),
                               torch.addmm(bias, a, b, beta=0.5, alpha=2.0), rtol=1e-12, atol=1e-12)
    assert pad_k.padded_k_count() == before + 2
    aligned = torch.randn(16, 7, dtype=torch.float64)
    assert pad_k.mm_padded(torch.randn(10, 16, dtype=torch.float64), aligned) is NotImplemented


@pytest.fixture
def compile_on_cpu(small, monkeypatch, no_compile_caches):
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


class TokenMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(13, 24), torch.nn.Linear(24, 13)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x.transpose(1, 2)))).transpose(1, 2)


@pytest.mark.parametrize(("kwargs", "padded"), [({}, 1), ({"pad_k": False}, 0)])
def test_a_compiled_token_mlp_pads_its_short_reduction_only_when_asked(compile_on_cpu, kwargs, padded):
    torch.manual_seed(0)
    module, x = TokenMLP().eval(), torch.randn(4, 13, 32)
    before = pad_k.padded_k_count()
    with torch.no_grad():
        out = predictor.compile(module, cudagraphs=False, **kwargs)(x)
        torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-5)
    assert pad_k.padded_k_count() - before == padded  # fc1 (K = 13); fc2's K = 24 is aligned


def test_a_training_step_gives_eagers_gradients(compile_on_cpu):
    torch.manual_seed(0)
    module, reference = TokenMLP(), TokenMLP()
    reference.load_state_dict(module.state_dict())
    x = torch.randn(4, 13, 32)
    before = pad_k.padded_k_count()
    predictor.compile(module, cudagraphs=False)(x).square().sum().backward()
    reference(x).square().sum().backward()
    assert pad_k.padded_k_count() > before
    for got, expected in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("value", [None, "yes", 1])
def test_a_pad_k_that_is_not_a_bool_is_refused_in_one_line(value):
    with pytest.raises(ValueError, match=f"pad_k must be True or False, got {value!r}"):
        predictor.compile(torch.nn.Linear(4, 4), pad_k=value)
    assert not installed._STACK
