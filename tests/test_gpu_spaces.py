"""On a GPU: the list Inductor really builds under max-autotune equals predictor.spaces.enumerate_space.

A logging InductorChoices subclass records every KernelTemplateChoice Inductor hands to
``_finalize_template_configs`` and returns only the aten choice, so nothing is compiled or benchmarked
(the test takes seconds, not the minutes a real max-autotune would).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from predictor.core.candidate import from_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.spaces import enumerate_space

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (op, m, n, k, dtype, layout_a, layout_b, tma, space)
CASES = [
    ("mm", 128, 128, 128, "float16", "row", "row", False, "default"),
    ("mm", 333, 1111, 2222, "float16", "row", "row", False, "default"),
    ("mm", 2048, 2048, 2048, "bfloat16", "row", "row", False, "default"),
    ("mm", 77, 768, 3072, "float16", "row", "row", False, "default"),
    ("mm", 1000, 3000, 257, "float32", "row", "row", False, "default"),
    ("mm", 17, 31, 45, "float16", "row", "row", False, "default"),
    ("mm", 8192, 8192, 64, "bfloat16", "row", "row", False, "default"),
    ("mm", 16, 16, 32768, "float16", "row", "row", False, "default"),  # decompose-K only
    ("mm", 3, 7, 1000, "float16", "row", "row", False, "default"),  # decompose-K, odd splits
    ("mm", 128, 128, 6144, "float16", "row", "row", False, "default"),  # decompose-K and Triton (32 <= K/M < 64)
    ("mm", 512, 1280, 5120, "float32", "row", "row", False, "default"),
    ("mm", 256, 11008, 4096, "float16", "row", "col", False, "default"),
    ("mm", 4096, 1024, 512, "bfloat16", "col", "row", False, "default"),
    ("mm", 2048, 2048, 2048, "float16", "row", "row", True, "default"),
    ("mm", 8, 4096, 4096, "bfloat16", "row", "row", True, "default"),
    ("mm", 256, 11008, 4096, "float16", "row", "col", True, "default"),  # TMA with a transposed B
    ("mm", 1024, 1000, 1024, "float16", "col", "row", True, "default"),  # TMA with a transposed A
    ("mm", 1000, 1024, 1024, "float16", "col", "row", True, "default"),  # col A: M*2 = 2000 bytes, 16-byte aligned
    ("mm", 333, 1024, 1024, "float16", "col", "row", True, "default"),  # col A, M not aligned: no TMA
    ("mm", 96, 4096, 4096, "float32", "row", "row", True, "default"),
    ("mm", 333, 1111, 2222, "float16", "row", "row", True, "exhaustive"),
    ("mm", 128, 128, 6144, "float16", "row", "row", True, "exhaustive"),  # all decompose-K splits
    ("addmm", 64, 4096, 4096, "float16", "row", "row", True, "default"),
    ("addmm", 333, 1111, 2222, "bfloat16", "row", "row", False, "default"),
    ("bmm", 256, 512, 1024, "bfloat16", "row", "row", False, "default"),
    ("bmm", 16, 16, 32768, "float16", "row", "row", False, "default"),
    ("int_mm", 32, 4096, 4096, "int8", "row", "row", False, "default"),
    ("int_mm", 128, 128, 128, "int8", "row", "row", False, "default"),
]
BATCH = 4


def _operands(op: str, m: int, n: int, k: int, dtype: str, la: str, lb: str) -> tuple[torch.Tensor, ...]:
    """Dense operands whose layouts match Problem's: ``col`` = transpose of a contiguous tensor."""
    dt = getattr(torch, dtype)
    if dt == torch.int8:
        return (torch.randint(-3, 3, (m, k), device="cuda", dtype=dt),
                torch.randint(-3, 3, (k, n), device="cuda", dtype=dt))
    batch = (BATCH,) if op == "bmm" else ()
    a = torch.randn(batch + ((k, m) if la == "col" else (m, k)), device="cuda", dtype=dt)
    b = torch.randn(batch + ((n, k) if lb == "col" else (k, n)), device="cuda", dtype=dt)
    return (a.transpose(-1, -2) if la == "col" else a), (b.transpose(-1, -2) if lb == "col" else b)


def _layout(stride: list[str], fallback: str) -> str:
    """``col`` when the row dim is the contiguous one; (1, 1) strides (a size-1 dim) keep the requested layout."""
    row_stride, inner_stride = int(stride[-2]), int(stride[-1])
    if row_stride == 1 and inner_stride == 1:
        return fallback
    return "row" if inner_stride == 1 else "col"


def _reset_choices_handler() -> None:
    """Inductor caches the choices object per thread; drop it so a new inductor_choices_class takes effect."""
    from torch._inductor import virtualized

    key = virtualized._choices._key
    if hasattr(virtualized.threadlocal, key):
        delattr(virtualized.threadlocal, key)


@pytest.fixture()
def recorder() -> Iterator[list[dict[str, Any]]]:
    from torch._inductor import config as inductor_config
    from torch._inductor.choices import InductorChoices

    records: list[dict[str, Any]] = []

    class RecordingChoices(InductorChoices):
        def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name,
                                       kwarg_overrides=None):
            allc = super()._finalize_template_configs(template_choices, kernel_inputs, templates, op_name,
                                                      kwarg_overrides)
            records.append({
                "op": op_name,
                "shapes": [[str(s) for s in node.get_size()] for node in kernel_inputs.nodes()],
                "strides": [[str(s) for s in node.get_stride()] for node in kernel_inputs.nodes()],
                "choices": [(c.template.uid, c.params.to_kwargs()) for c in allc],
            })
            aten = [c for c in allc if c.template.uid.startswith("aten")]
            return aten[:1] or allc[:1]  # one choice: Inductor skips benchmarking

    previous = inductor_config.inductor_choices_class
    inductor_config.inductor_choices_class = RecordingChoices
    _reset_choices_handler()
    try:
        yield records
    finally:
        inductor_config.inductor_choices_class = previous
        _reset_choices_handler()


def _compile_and_record(records: list, fn: Callable, args: tuple, patch: dict[str, Any]) -> list[dict[str, Any]]:
    from torch._inductor import config as inductor_config

    records.clear()
    torch._dynamo.reset()
    with inductor_config.patch({"max_autotune": True, "max_autotune_gemm": True, "force_disable_caches": True,
                                **patch}):
        torch.compile(fn, dynamic=False)(*args)
    return list(records)


def _fn(op: str, n: int, dtype: str) -> Callable:
    if op == "mm":
        return lambda a, b: a @ b
    if op == "addmm":
        bias = torch.randn(n, device="cuda", dtype=getattr(torch, dtype))
        return lambda a, b: torch.addmm(bias, a, b)
    if op == "bmm":
        return torch.bmm
    return torch._int_mm


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_inductor_list_equals_space(case: tuple, recorder: list) -> None:
    op, m, n, k, dtype, la, lb, tma, space = case
    patch = {"triton.enable_persistent_tma_matmul": tma,
             "max_autotune_gemm_search_space": space.upper()}
    records = _compile_and_record(recorder, _fn(op, n, dtype), _operands(op, m, n, k, dtype, la, lb), patch)
    assert len(records) == 1, f"expected one GEMM lowering, got {[r['op'] for r in records]}"
    record = records[0]
    # The space is a function of the GEMM Inductor lowered: pad_mm may have padded M/N/K first, and
    # a padded operand is a fresh contiguous tensor. Take sizes and layouts from what tuned_mm saw.
    (mat1, mat2), (stride1, stride2) = record["shapes"][-2:], record["strides"][-2:]  # addmm: bias first
    seen = (int(mat1[-2]), int(mat2[-1]), int(mat1[-1]))
    if seen != (m, n, k):
        log.info("Inductor padded %s to %s", (m, n, k), seen)
    problem = Problem(op, *seen, dtype=dtype, b=BATCH if op == "bmm" else 1,
                      layout_a=_layout(stride1, la), layout_b=_layout(stride2, lb))
    expected = [from_template_kwargs(uid, kw).key for uid, kw in record["choices"]]
    got = [c.key for c in enumerate_space(problem, space, DeviceInfo.from_torch(), tma=tma)]
    assert got == expected


def test_multi_kernel_hints(recorder: list) -> None:
    """Dynamic M with multi_kernel_hints: one config group per hint, each equal to enumerate_space(hint=h)."""
    from torch._inductor import config as inductor_config

    hints = [64, 256, 4096]
    a, b = _operands("mm", 300, 4096, 4096, "float16", "row", "row")
    torch._dynamo.mark_dynamic(a, 0)
    recorder.clear()
    torch._dynamo.reset()
    with inductor_config.patch({"max_autotune": True, "multi_kernel_hints": hints, "force_disable_caches": True,
                                "triton.enable_persistent_tma_matmul": False}):
        torch.compile(lambda x, y: x @ y)(a, b)
    assert len(recorder) == 1
    groups: dict[Any, list[str]] = {}
    for uid, kw in recorder[0]["choices"]:
        groups.setdefault(kw.get("hint_override"), []).append(from_template_kwargs(uid, kw).key)
    device = DeviceInfo.from_torch()
    problem = Problem("mm", 300, 4096, 4096, "float16")
    assert groups[None] == [c.key for c in enumerate_space(problem, "default", device, tma=False)]
    for hint in hints:
        keys = [c.key for c in enumerate_space(problem, "default", device, tma=False, hint=hint)]
        assert groups[hint] == keys[1:]  # aten is listed once, in the None group
