"""Patch-embedding convolutions as the GEMM they are (``runtime.patchify``) and the table helper that installs the
decomposition (``table_patch.added_entries``), on the CPU. (On a GPU: the zoo, ``python -m benchmarks.zoo.run``.)"""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.runtime.choices import installed
from predictor.runtime.lowerings import patchify
from predictor.runtime.lowerings.tables import added_entries, decomposition_tables

aten = torch.ops.aten


def _conv(x, weight, bias, kernel):
    spatial = x.dim() - 2
    return aten.convolution(x, weight, bias, list(kernel), [0] * spatial, [1] * spatial, False, [0] * spatial, 1)


def _gemm(x, weight, bias):
    kernel = list(weight.shape[2:])
    return patchify.as_gemm(x, weight, bias, kernel, [s // k for s, k in zip(x.shape[2:], kernel)])


def _strides(t):
    """Strides of the dimensions longer than 1 (a size-1 dimension's stride addresses nothing)."""
    return [stride for size, stride in zip(t.shape, t.stride()) if size > 1]


def _f64(*shape, channels_last=False):
    t = torch.randn(*shape, dtype=torch.float64)
    if channels_last:
        t = t.to(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    return t


@pytest.mark.parametrize(("x_shape", "w_shape", "bias", "channels_last"), [
    ((2, 3, 32, 32), (16, 3, 8, 8), True, False),  # a ViT stem in small
    ((2, 3, 30, 34), (5, 3, 4, 4), True, False),  # sizes not divisible by the kernel: the conv drops the rest
    ((3, 5, 64), (7, 5, 8), True, False),  # 1-D
    ((2, 3, 4, 16, 12), (6, 3, 2, 4, 4), True, False),  # 3-D tubelet
    ((2, 3, 32, 32), (16, 3, 8, 8), True, True),  # channels-last input: a channels-last output
    ((2, 3, 32, 32), (16, 3, 8, 8), False, False),  # no bias: mm
    ((2, 3, 32, 32), (16, 3, 8, 8), False, True),
    ((1, 3, 8, 8), (4, 3, 8, 8), True, False),  # one patch
], ids=["2d-bias", "2d-remainder", "1d", "3d-tubelet", "channels-last", "no-bias", "channels-last-no-bias",
        "one-patch"])
def test_the_gemm_form_equals_the_convolution_with_its_strides(x_shape, w_shape, bias, channels_last):
    torch.manual_seed(0)
    x, weight = _f64(*x_shape, channels_last=channels_last), _f64(*w_shape)
    b = _f64(w_shape[0]) if bias else None
    expected, got = _conv(x, weight, b, w_shape[2:]), _gemm(x, weight, b)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert _strides(got) == _strides(expected)
    if channels_last:
        assert got.is_contiguous(memory_format=torch.channels_last) and not got.is_contiguous()


def test_a_channels_last_weight_gives_a_channels_last_output_as_the_convolution_does():
    torch.manual_seed(0)
    x, weight = _f64(2, 3, 16, 16), _f64(8, 3, 4, 4, channels_last=True)
    expected, got = _conv(x, weight, None, (4, 4)), _gemm(x, weight, None)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert got.stride() == expected.stride() and expected.is_contiguous(memory_format=torch.channels_last)


def test_a_channels_last_input_with_a_remainder_keeps_a_channels_last_output():
    torch.manual_seed(0)
    x, weight = _f64(2, 3, 30, 34, channels_last=True), _f64(5, 3, 4, 4)
    expected, got = _conv(x, weight, None, (4, 4)), _gemm(x, weight, None)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert expected.is_contiguous(memory_format=torch.channels_last)
    assert got.stride() == expected.stride()


def _shape(x_shape=(2, 3, 32, 32), w_shape=(16, 3, 8, 8), stride=None, padding=None, dilation=None,
           transposed=False, groups=1, dtype=torch.float32, device="meta"):
    spatial = len(x_shape) - 2
    x = torch.empty(x_shape, dtype=dtype, device=device)
    weight = torch.empty(w_shape, dtype=dtype, device=device)
    stride = list(w_shape[2:]) if stride is None else stride
    return patchify.patch_shape(x, weight, stride, padding or [0] * spatial, dilation or [1] * spatial, transposed,
                                [0] * spatial, groups)


@pytest.fixture
def tf32():
    """float32 matmuls allowed to use TF32 (the rule takes float32 only then), restored afterwards."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture
def on_cpu(monkeypatch, tf32):
    """The rule's device list with the CPU in it, so that what a case refuses is the case itself."""
    monkeypatch.setattr(patchify, "DEVICES", ("cuda", "cpu", "meta"))


def test_float32_is_taken_only_where_matmuls_may_use_tf32(monkeypatch):
    monkeypatch.setattr(patchify, "DEVICES", ("cuda", "cpu", "meta"))
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert _shape() is None
        assert _shape(dtype=torch.bfloat16) == ([8, 8], [4, 4])
        torch.set_float32_matmul_precision("high")
        assert _shape() == ([8, 8], [4, 4])
    finally:
        torch.set_float32_matmul_precision(before)


def test_a_patch_embedding_is_taken_with_its_kernel_and_output_sizes(on_cpu):
    assert _shape() == ([8, 8], [4, 4])
    assert _shape(device="cpu") == ([8, 8], [4, 4])
    assert _shape((2, 3, 30, 34), (5, 3, 4, 4)) == ([4, 4], [7, 8])
    assert _shape((2, 3, 64), (5, 3, 8)) == ([8], [8])
    assert _shape((2, 3, 4, 16, 12), (6, 3, 2, 4, 4)) == ([2, 4, 4], [2, 4, 3])
    assert _shape(dtype=torch.bfloat16) == ([8, 8], [4, 4])


@pytest.mark.parametrize("case", [
    {"padding": [1, 1]},
    {"stride": [4, 4]},
    {"stride": [8, 4]},
    {"dilation": [2, 2]},
    {"w_shape": (16, 1, 8, 8), "groups": 3, "x_shape": (2, 3, 32, 32)},
    {"w_shape": (16, 2, 8, 8), "groups": 2, "x_shape": (2, 4, 32, 32)},
    {"transposed": True},
    {"x_shape": (2, 8, 32, 32), "w_shape": (16, 8, 8, 8)},  # aligned channels stay on cuDNN
    {"x_shape": (2, 96, 56, 56), "w_shape": (192, 96, 2, 2)},  # a ConvNeXt downsampling layer
    {"x_shape": (2, 3, 32, 32), "w_shape": (16, 3, 1, 1)},  # a pointwise (1x1) convolution
    {"dtype": torch.float64},
    {"x_shape": (2, 3, 4, 4)},  # smaller than one patch
], ids=["padding", "stride-half", "stride-mixed", "dilation", "groups-3", "groups-2", "transposed", "channels-8",
        "channels-96", "1x1", "float64", "no-patch"])
def test_other_convolutions_are_left_alone(on_cpu, case):
    assert _shape(**case) is None


def test_a_cpu_convolution_is_left_alone_by_default():
    assert "cpu" not in patchify.DEVICES
    assert _shape(device="cpu") is None


def test_a_convolution_the_rule_refuses_decomposes_to_not_implemented(on_cpu):
    x, weight = torch.randn(1, 8, 16, 16), torch.randn(4, 8, 1, 1)
    before = patchify.patch_gemm_count()
    assert patchify.convolution_as_gemm(x, weight, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1) is NotImplemented
    args = ([8, 8], [0, 0], [1, 1], False, [0, 0], 1)
    assert patchify.patch_gemm_count() == before
    x = torch.randn(1, 3, 16, 16)
    out = patchify.convolution_as_gemm(x, torch.randn(4, 3, 8, 8), None, *args)
    assert out.shape == (1, 4, 2, 2) and patchify.patch_gemm_count() == before + 1


# ---- added_entries ----------------------------------------------------------------------------------------------


def _new(x):
    return NotImplemented if x < 0 else ("new", x)


def _old(x):
    return ("old", x)


def test_an_absent_key_is_added_and_removed_on_exit():
    first, second = {"other": _old}, {}
    with added_entries([first, second], {"conv": _new}, "test_marker"):
        for table in (first, second):
            assert table["conv"](2) == ("new", 2)
            assert table["conv"](-1) is NotImplemented  # nothing to fall back on
            assert getattr(table["conv"], "test_marker") is True
    assert first == {"other": _old} and second == {}


def test_an_absent_key_is_removed_also_when_the_body_raises():
    table = {}
    with pytest.raises(RuntimeError, match="compile failed"):
        with added_entries([table], {"conv": _new}, "test_marker"):
            assert "conv" in table
            raise RuntimeError("compile failed")
    assert table == {}


def test_a_present_key_falls_back_to_the_original_which_is_restored_on_exit():
    table = {"conv": _old}
    with added_entries([table], {"conv": _new}, "test_marker"):
        assert table["conv"] is not _old
        assert table["conv"](3) == ("new", 3)
        assert table["conv"](-3) == ("old", -3)  # the new one returned NotImplemented
    assert table["conv"] is _old
    with pytest.raises(ValueError):
        with added_entries([table], {"conv": _new}, "test_marker"):
            raise ValueError
    assert table["conv"] is _old and not hasattr(_old, "test_marker")


def test_nested_use_with_the_same_marker_adds_once():
    calls = []

    def counted(x):
        calls.append(x)
        return _new(x)

    for table in ({}, {"conv": _old}):
        original = table.get("conv")
        with added_entries([table], {"conv": counted}, "test_marker"):
            outer = table["conv"]
            with added_entries([table], {"conv": counted}, "test_marker"):
                assert table["conv"] is outer
                calls.clear()
                assert table["conv"](1) == ("new", 1) and calls == [1]  # not wrapped twice
            assert table["conv"] is outer
        assert table.get("conv") is original


def test_patchify_adds_its_decomposition_to_inductors_tables_only_while_active():
    from torch._inductor import decomposition

    key = aten.convolution.default
    before = [dict(table) for table in decomposition_tables()]
    with patchify.patchify_as_gemm(False):
        assert [dict(table) for table in decomposition_tables()] == before
    with pytest.raises(RuntimeError):
        with patchify.patchify_as_gemm():
            for table in decomposition_tables():
                assert getattr(table[key], "predictor_patchify", False)
            assert getattr(decomposition.select_decomp_table()[key], "predictor_patchify", False)
            raise RuntimeError
    assert [dict(table) for table in decomposition_tables()] == before


# ---- predictor.compile, end to end on the CPU ---------------------------------------------------------------------


class _Stem(torch.nn.Module):
    def __init__(self, channels: int = 3, kernel: int = 8):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 32, kernel, stride=kernel)
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.proj(self.conv(x).flatten(2).transpose(1, 2))


@pytest.fixture
def compile_on_cpu(monkeypatch, tf32, no_compile_caches):
    """The rule on for CPU tensors, no compile caches (a cached graph is not traced again), and the hook uninstalled
    and Dynamo reset afterwards."""
    monkeypatch.setattr(patchify, "DEVICES", ("cuda", "cpu"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    while installed._STACK:  # predictor.compile's hook stays for the compiled model's later graphs
        predictor.uninstall()


def _compiled_run(module, x, **kwargs):
    """(output, patch GEMMs traced, GEMM calls and convolution calls in the generated code)."""
    from torch._inductor.utils import run_and_get_code

    before = patchify.patch_gemm_count()
    with torch.no_grad():
        out, code = run_and_get_code(predictor.compile(module, cudagraphs=False, **kwargs), x)
    src = "\n".join(code)
    # torch 2.11 also offers aten::bias_addmm for the broadcast bias, and the hook's aten fallback keeps it
    gemms = sum(src.count(f"extern_kernels.{op}(") for op in ("mm", "addmm", "bias_addmm"))
    return out, patchify.patch_gemm_count() - before, gemms, src.count("extern_kernels.convolution(")


@pytest.mark.parametrize(("kwargs", "taken"), [({}, True), ({"patchify": True}, True), ({"patchify": False}, False)])
def test_compiled_stem_runs_as_a_gemm_only_when_asked_and_matches_eager(compile_on_cpu, kwargs, taken):
    torch.manual_seed(0)
    module, x = _Stem().eval(), torch.randn(2, 3, 32, 32)
    out, traced, gemms, convolutions = _compiled_run(module, x, **kwargs)
    with torch.no_grad():
        torch.testing.assert_close(out, module(x), rtol=1e-4, atol=1e-4)
    # the projection is a GEMM either way; the stem is one more GEMM in place of the convolution
    assert (traced, gemms, convolutions) == ((1, 2, 0) if taken else (0, 1, 1))


def test_a_compiled_pointwise_convolution_stays_a_convolution(compile_on_cpu):
    torch.manual_seed(0)
    module, x = _Stem(channels=8, kernel=1).eval(), torch.randn(2, 8, 4, 4)
    out, traced, gemms, convolutions = _compiled_run(module, x)
    with torch.no_grad():
        torch.testing.assert_close(out, module(x), rtol=1e-4, atol=1e-4)
    assert (traced, gemms, convolutions) == (0, 1, 1)


def test_a_training_step_gives_eagers_gradients(compile_on_cpu):
    torch.manual_seed(0)
    module = _Stem()
    reference = _Stem()
    reference.load_state_dict(module.state_dict())
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = patchify.patch_gemm_count()
    compiled = predictor.compile(module, cudagraphs=False)
    compiled(x).square().sum().backward()
    assert patchify.patch_gemm_count() > before
    reference(x_ref).square().sum().backward()
    torch.testing.assert_close(module.conv.weight.grad, reference.conv.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(module.conv.bias.grad, reference.conv.bias.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)


def test_a_cached_compile_follows_the_patchify_setting(monkeypatch, tf32):
    from torch._inductor.utils import fresh_cache

    monkeypatch.setattr(patchify, "DEVICES", ("cuda", "cpu"))
    torch.manual_seed(0)
    module, x = _Stem().eval(), torch.randn(2, 3, 32, 32)
    torch._dynamo.reset()
    try:
        with torch._functorch.config.patch(enable_autograd_cache=True), fresh_cache():
            assert _compiled_run(module, x, patchify=True)[3] == 0
            torch._dynamo.reset()
            assert _compiled_run(module, x, patchify=False)[3] == 1
    finally:
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_patchify_that_is_not_a_bool_is_refused_in_one_line(value):
    hooks = list(installed._STACK)
    with pytest.raises(ValueError, match="patchify must be True or False") as info:
        predictor.compile(_Stem(), patchify=value)
    assert "\n" not in str(info.value)
    assert installed._STACK == hooks  # refused before any hook is installed


@pytest.mark.parametrize(("x_shape", "w_shape", "channels_last"), [
    ((2, 3, 32, 32), (16, 3, 16, 16), False),
    ((2, 3, 30, 34), (8, 3, 4, 4), False),  # a remainder the convolution drops: its gradient is zero
    ((1, 3, 9), (5, 3, 4), False),
    ((2, 3, 4, 8, 9), (6, 3, 2, 4, 4), False),
    ((2, 3, 30, 32), (16, 3, 8, 8), True),
], ids=["2d", "remainder", "1d", "3d", "channels-last"])
def test_the_backward_as_gemms_equals_convolution_backward(x_shape, w_shape, channels_last):
    torch.manual_seed(0)
    x, weight = _f64(*x_shape, channels_last=channels_last), _f64(*w_shape)
    kernel = list(w_shape[2:])
    out = _conv(x, weight, None, kernel)
    grad = torch.randn_like(out)
    spatial = len(kernel)
    expected = aten.convolution_backward(grad, x, weight, [w_shape[0]], kernel, [0] * spatial, [1] * spatial, False,
                                         [0] * spatial, 1, [True, True, True])
    outputs = [s // k for s, k in zip(x_shape[2:], kernel)]
    got = patchify.backward_as_gemm(grad, x, weight, kernel, outputs, [True, True, True])
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    assert got[0].stride() == expected[0].stride()
    assert patchify.backward_as_gemm(grad, x, weight, kernel, outputs, [False, True, False])[::2] == (None, None)


def test_a_compiled_training_step_has_no_convolution_left(compile_on_cpu):
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    module, x = _Stem(), torch.randn(2, 3, 32, 32)
    compiled = predictor.compile(module, cudagraphs=False)

    def step():
        compiled(x).square().sum().backward()
    _, code = run_and_get_code(step)
    lines = [line for line in "\n".join(code).splitlines() if not line.strip().startswith("#")]
    # only fused kernels named after the ops they replaced: no convolution call, forward or backward
    calls = [line for line in lines if "convolution" in line and "_fused_" not in line]
    assert calls == []
    assert any("_fused_convolution_backward" in line for line in lines)  # the backward was traced, as GEMMs


def test_a_dynamic_compile_runs_every_batch_and_image_size_as_a_gemm(compile_on_cpu):
    """``dynamic=True``: symbolic batch and image sizes (the GEMM's M symbolic), a remainder the convolution drops at
    some sizes, eager's outputs and gradients at each."""
    torch.manual_seed(0)
    module = _Stem()
    reference = _Stem()
    reference.load_state_dict(module.state_dict())
    compiled = predictor.compile(module, cudagraphs=False, dynamic=True)
    before = patchify.patch_gemm_count()
    for batch, size in ((2, 32), (3, 36), (4, 44)):
        x = torch.randn(batch, 3, size, size, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out = compiled(x)
        expected = reference(x_ref)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        out.square().sum().backward()
        expected.square().sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(module.conv.weight.grad, reference.conv.weight.grad, rtol=1e-4, atol=1e-3)
        module.zero_grad()
        reference.zero_grad()
    assert patchify.patch_gemm_count() > before


def test_one_dynamic_graph_serves_image_sizes_with_and_without_a_remainder(compile_on_cpu):
    """No guard on whether an image size divides by the kernel: one graph for every size (a crop's contiguity
    guarded it, one graph per pattern)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    module = _Stem().eval()
    compiled = predictor.compile(module, cudagraphs=False, dynamic=True)
    before = counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for size in (32, 36, 40, 29, 45):
            x = torch.randn(2, 3, size, size + 3)
            torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    assert counters["stats"]["unique_graphs"] - before == 1


def test_float32_stays_a_convolution_where_cudnn_may_not_use_tf32(on_cpu, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert _shape() is None
    assert _shape(dtype=torch.float16) == ([8, 8], [4, 4])


def test_a_one_channel_channels_last_input_keeps_eagers_strides():
    torch.manual_seed(0)
    x, weight = _f64(2, 1, 16, 16, channels_last=True), _f64(4, 1, 4, 4)
    expected, got = _conv(x, weight, None, (4, 4)), _gemm(x, weight, None)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert got.stride() == expected.stride()


def test_the_hooks_cache_keys_carry_the_decompositions_source(monkeypatch):
    """AOTAutograd's cache hashes torch's source, not this package's: a changed decomposition must change the hook's
    keys (torch 2.13's uuid, torch 2.11's pickle of the config value)."""
    import pickle

    from predictor.runtime import compile, registry
    from predictor.runtime.choices.settings import HookSettings

    pruner = compile.pruner_for(HookSettings())  # the pruner predictor.compile makes for these settings
    assert registry.digest() in pickle.dumps(pruner).decode("latin-1")
    before = pruner.uuid()
    monkeypatch.setattr(registry, "digest", lambda lowerings=None, allow_similar_gpu=True: "another-rule")
    assert pruner.uuid() != before
    assert b"another-rule" in pickle.dumps(pruner)


def test_the_decompositions_digest_covers_the_rules_that_pick_kernels(monkeypatch):
    """A changed decision rule (the pruner, the filter, policy or split addmm source) or a changed decomposition
    (patchify's source) changes the digest, so a graph lowered under the older rule is not reused from Inductor's
    cache."""
    from pathlib import Path

    from predictor.runtime import compile, registry
    from predictor.runtime.choices.pruner import choices_digest
    from predictor.runtime.choices.settings import HookSettings

    pruner = compile.pruner_for(HookSettings())
    before = pruner.cache_digest()
    original = Path.read_bytes
    for name in ("policy.py", "split_addmm.py", "pruner.py", "filtering.py", "patchify.py"):
        monkeypatch.setattr(Path, "read_bytes", lambda self, n=name: original(self) + (b"#" if self.name == n else b""))
        choices_digest.cache_clear()
        registry.source_digest.cache_clear()
        assert pruner.cache_digest() != before, name
    monkeypatch.setattr(Path, "read_bytes", original)
    choices_digest.cache_clear()
    registry.source_digest.cache_clear()
    assert pruner.cache_digest() == before
