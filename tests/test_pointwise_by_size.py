"""A dynamic graph's 1-D pointwise kernels: the block Inductor's heuristic gives each launch's element count
(``predictor.runtime.lowerings.pointwise_by_size``), the rewrite of the generated source, and the launch dispatch."""

from __future__ import annotations

import inspect
import pickle
import sys
from types import SimpleNamespace

import pytest
import sympy

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from torch._inductor.runtime import triton_heuristics  # noqa: E402
from torch._inductor.runtime.hints import DeviceProperties  # noqa: E402

from predictor.runtime.dynamic import dynamic_hints  # noqa: E402
from predictor.runtime.lowerings import pointwise_by_size  # noqa: E402
from predictor.runtime.lowerings.pointwise_by_size import BLOCKS, block_for, by_size_source  # noqa: E402

H100 = DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536,
                        max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32)


def _meta(signature: dict[str, str]) -> tuple[dict, dict]:
    triton_meta = {"signature": signature, "device": H100, "constants": {}, "configs": []}
    inductor_meta = {"grid_type": "Grid1D", "kernel_name": "copy", "mutated_arg_names": [], "optimize_mem": True,
                     "autotune_pointwise": False}
    return triton_meta, inductor_meta


DYNAMIC = {"in_ptr0": "*bf16", "out_ptr0": "*bf16", "xnumel": "i32", "XBLOCK": "constexpr"}


@triton.jit
def copy(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex, xindex < xnumel), xindex < xnumel)


@pytest.mark.skipif("return_configs" not in inspect.signature(triton_heuristics.pointwise).parameters,
                    reason="this torch's pointwise heuristic does not return its configs")
@pytest.mark.parametrize("numel", [256, 300, 8192, 32768, 40000, 65536, 70000, 1 << 20, 1 << 26])
def test_the_block_is_the_one_inductor_gives_a_kernel_hinted_at_that_size(numel):
    triton_meta, inductor_meta = _meta(DYNAMIC)
    hint = 1 << (numel - 1).bit_length()
    (config,) = triton_heuristics.pointwise({"x": hint}, triton_meta, filename="k.py", inductor_meta=inductor_meta,
                                            return_configs=True)
    assert block_for(numel) == config.kwargs["XBLOCK"]


def test_a_few_elements_take_the_smallest_block():
    assert block_for(1) == block_for(64) == BLOCKS[0]


def _source(size_hints: str, signature: str, heuristic: str = "pointwise") -> str:
    """A generated kernel module's head, as Inductor writes it."""
    return ("import triton\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\n\n"
            f"@triton_heuristics.{heuristic}(\n    size_hints={size_hints}, \n    filename=__file__,\n"
            f"    triton_meta={{'signature': {signature}, 'constants': {{}}}},\n    min_elem_per_thread=0\n)\n"
            "@triton.jit\ndef kernel(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    pass\n")


DYNAMIC_SIGNATURE = "{'in_ptr0': '*bf16', 'out_ptr0': '*bf16', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}"
STATIC_SIGNATURE = "{'in_ptr0': '*bf16', 'out_ptr0': '*bf16', 'XBLOCK': 'constexpr'}"


def test_only_a_1d_pointwise_kernel_with_a_symbolic_element_count_is_rewritten():
    dynamic = _source("{'x': 16777216}", DYNAMIC_SIGNATURE)
    new = by_size_source(dynamic)
    assert "@_pointwise_by_size(\n    size_hints={'x': 16777216}" in new
    assert "@triton_heuristics.pointwise(" not in new
    from torch._inductor.wrapper_benchmark import get_kernel_category_by_source_code

    assert get_kernel_category_by_source_code(new) == "pointwise"  # Inductor still names it triton_poi_...
    for unchanged in (_source("{'x': 8192}", STATIC_SIGNATURE),  # a static count is a constant of the kernel
                      _source("{'y': 64, 'x': 16777216}", DYNAMIC_SIGNATURE.replace("'xnumel'", "'ynumel': 'i32', "
                                                                                          "'xnumel'")),
                      _source("{'x': 16777216, 'r0_': 256}", DYNAMIC_SIGNATURE, heuristic="reduction")):
        assert by_size_source(unchanged) == unchanged


def test_the_rewritten_source_runs_with_this_heuristic_or_inductors_without_the_package():
    namespace = {"triton_heuristics": triton_heuristics}
    prelude = pointwise_by_size._IMPORT
    exec(prelude, namespace)  # noqa: S102 - the lines the rewrite adds to a generated kernel
    assert namespace["_pointwise_by_size"] is pointwise_by_size.pointwise
    saved = sys.modules.get("predictor.runtime.lowerings.pointwise_by_size")
    sys.modules["predictor.runtime.lowerings.pointwise_by_size"] = None  # a compile worker that cannot import the package
    try:
        namespace = {"triton_heuristics": triton_heuristics}
        exec(prelude, namespace)  # noqa: S102
        assert namespace["_pointwise_by_size"] is triton_heuristics.pointwise
    finally:
        sys.modules["predictor.runtime.lowerings.pointwise_by_size"] = saved


def test_the_autotuner_has_one_config_per_block_and_pickles_by_name():
    triton_meta, inductor_meta = _meta(DYNAMIC)
    tuner = pointwise_by_size.pointwise({"x": 1 << 24}, triton_meta, filename="k.py", inductor_meta=inductor_meta)(copy)
    assert type(tuner).__name__ == "BySizeAutotuner"
    assert [c.kwargs["XBLOCK"] for c in tuner.configs] == list(BLOCKS)
    assert pickle.loads(pickle.dumps(type(tuner))) is type(tuner)  # a compile worker sends its kernels back


def test_a_kernel_without_a_symbolic_count_or_with_two_dimensions_keeps_inductors_heuristic():
    static = {k: v for k, v in DYNAMIC.items() if k != "xnumel"}
    for size_hints, signature in (({"x": 8192}, static), ({"y": 64, "x": 1024}, {**DYNAMIC, "ynumel": "i32"})):
        triton_meta, inductor_meta = _meta(signature)
        tuner = pointwise_by_size.pointwise(size_hints, triton_meta, filename="k.py", inductor_meta=inductor_meta)
        assert type(tuner(copy)).__name__ == "CachingAutotuner"


@pytest.mark.parametrize("flag", ["max_autotune_pointwise", "coordinate_descent_tuning"])
def test_a_kernel_inductor_is_asked_to_tune_keeps_inductors_heuristic(flag):
    triton_meta, inductor_meta = _meta(DYNAMIC)
    tuner = pointwise_by_size.pointwise({"x": 1 << 24}, triton_meta, filename="k.py",
                                        inductor_meta={**inductor_meta, flag: True})(copy)
    assert type(tuner).__name__ == "CachingAutotuner"


def test_each_launch_runs_the_launcher_of_its_element_count_without_benchmarking():
    triton_meta, inductor_meta = _meta(DYNAMIC)
    tuner = pointwise_by_size.pointwise({"x": 1 << 24}, triton_meta, filename="k.py", inductor_meta=inductor_meta)(copy)
    launched = []

    class Launcher:
        def __init__(self, block):
            self.config = SimpleNamespace(kwargs={"XBLOCK": block})

        def __call__(self, *args, stream):
            launched.append((self.config.kwargs["XBLOCK"], args[2]))

    tuner.launchers = [Launcher(block) for block in BLOCKS]
    for numel in (2 * 4096, 16 * 4096, 256 * 4096, 3 * 4096):
        tuner.run("in", "out", numel, stream=0)
    assert launched == [(256, 8192), (512, 65536), (1024, 1048576), (256, 12288)]
    assert len(tuner.launchers) == len(BLOCKS)  # no autotune down to one config


def test_the_dynamic_graph_codegen_writes_pointwise_kernels_by_size_and_reductions_as_they_were():
    from torch._inductor.codegen.triton import TritonKernel
    from torch._inductor.sizevars import SizeVarAllocator
    from torch._inductor.virtualized import V
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    sizevars = SizeVarAllocator(ShapeEnv())
    pointwise_source = _source("{'x': 16777216}", DYNAMIC_SIGNATURE)
    wrapped = dynamic_hints._codegen_with_large_hints(lambda self, name=None: pointwise_source)
    pointwise, reduction = object.__new__(TritonKernel), object.__new__(TritonKernel)
    pointwise.numels, reduction.numels = {"x": sympy.Integer(8), "r0_": sympy.S.One}, {"x": 8, "r0_": 256}
    with V.set_graph_handler(SimpleNamespace(sizevars=sizevars)):
        assert "@_pointwise_by_size(" in wrapped(pointwise)
        assert wrapped(reduction) == pointwise_source  # a reduction's source is never rewritten


WITH_SIZE = {"in_ptr0": "*bf16", "out_ptr0": "*bf16", "ks0": "i64", "xnumel": "i32", "XBLOCK": "constexpr"}


@triton.jit
def rows(in_ptr0, out_ptr0, ks0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex // ks0, xindex < xnumel), xindex < xnumel)


def test_size_arguments_are_32_bit_only_where_the_kernel_indexes_in_32_bits_and_multiplies_no_two():
    body = "x1 = xindex // ks0\n    x0 = xindex % ks1\n    tmp0 = tl.load(in_ptr0 + (x0 + ks1*x1))"
    signature, names = pointwise_by_size.narrowed_signature({**WITH_SIZE, "ks1": "i64", "seed": "i64"}, body)
    assert names == ("ks0", "ks1") and signature["ks0"] == signature["ks1"] == "i32"
    assert signature["seed"] == "i64" and signature["in_ptr0"] == "*bf16"  # not a size: as Inductor wrote it
    wide = {**WITH_SIZE, "xnumel": "i64"}  # a kernel Inductor indexes in 64 bits keeps 64-bit sizes
    assert pointwise_by_size.narrowed_signature(wide, body) == (wide, ())
    mean = {**WITH_SIZE, "ks1": "i64"}  # a product of two sizes may pass 2**31 where each fits
    assert pointwise_by_size.narrowed_signature(mean, "tmp1 = (ks0*ks1).to(tl.float32)") == (mean, ())
    assert pointwise_by_size.narrowed_signature(WITH_SIZE, None) == (WITH_SIZE, ())  # no source to read


def test_a_kernel_compiles_its_size_arguments_32_bit_and_each_launch_checks_they_fit():
    triton_meta, inductor_meta = _meta(WITH_SIZE)
    tuner = pointwise_by_size.pointwise({"x": 1 << 24}, triton_meta, filename="k.py", inductor_meta=inductor_meta)(rows)
    assert tuner.triton_meta["signature"]["ks0"] == "i32" and tuner.narrowed == ("ks0",)
    assert triton_meta["signature"]["ks0"] == "i64"  # Inductor's own meta is not changed in place
    old = tuner.prepare_for_pickle()  # a compile worker sends its kernels back, the launch check with them
    back = pickle.loads(pickle.dumps(tuner))
    tuner.restore_after_unpickle(old)
    assert back.narrowed == ("ks0",) and back.triton_meta["signature"]["ks0"] == "i32"
    launched = []

    class Launcher:
        def __init__(self, block):
            self.config = SimpleNamespace(kwargs={"XBLOCK": block})

        def __call__(self, *args, stream):
            launched.append(args[2])

    tuner.launchers = [Launcher(block) for block in BLOCKS]
    tuner.run("in", "out", 2048, 2048 * 8, stream=0)
    assert launched == [2048]
    with pytest.raises(OverflowError, match="size argument ks0 = 2147483648 exceeds the 32 bits"):
        tuner.run("in", "out", 1 << 31, 2048, stream=0)
    assert launched == [2048]  # nothing launched with a size that does not fit
