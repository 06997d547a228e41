"""predictor.spaces against the choice lists Inductor 2.11 really built on an H200 (CPU only, fast).

The oracle (tests/data/inductor_choices_h200_torch211.json) was recorded with a logging
InductorChoices subclass (scratch/probe.py): for each GEMM, every KernelTemplateChoice in the order
Inductor passed them to ``_finalize_template_configs``.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from predictor.core.candidate import Candidate, from_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.spaces import (
    SPACES,
    _smem_bytes,
    enumerate_space,
    k_splits,
    space_frame,
    tma_compatible,
    use_decompose_k,
)

DATA = Path(__file__).parent / "data" / "inductor_choices_h200_torch211.json"
RECORDING = json.loads(DATA.read_text())
INFO = RECORDING["info"]
RECORDED_WITH = "2.11"  # the recording's torch: replays use that release's config lists, whatever torch runs them
H200 = DeviceInfo(gpu="NVIDIA H200", cc="9.0", sm_count=INFO["sms"], smem_per_block=INFO["smem_optin"],
                  l2_bytes=INFO["l2"], mem_bandwidth_gbs=4800.0)
STATIC_CASES = [c for c in RECORDING["cases"] if "error" not in c and not c.get("hints")]
HINTS_CASE = next(c for c in RECORDING["cases"] if c.get("hints"))


def _case_id(case: dict) -> str:
    return (f"{case['op']}-{case['m']}x{case['n']}x{case['k']}-{case['dtype'].replace('torch.', '')}"
            f"-{case['la']}{case['lb']}-tma{int(case['tma'])}-{case.get('space', 'default')}")


def _layout(size: list[str], stride: list[str], fallback: str) -> str:
    """``col`` when the row dim (second to last) is the contiguous one; size-1 dims make both strides 1."""
    row_stride, inner_stride = int(stride[-2]), int(stride[-1])
    if row_stride == 1 and inner_stride == 1:
        return fallback
    if inner_stride == 1:
        return "row"
    assert row_stride == 1, f"not a dense layout: size {size}, stride {stride}"
    return "col"


def _problem(case: dict) -> Problem:
    """The GEMM as Inductor lowered it: sizes and layouts from the recorded inputs.

    The recorded inputs are used rather than the case's m/n/k/la/lb because Inductor's pad_mm pass
    (benchmark-driven, upstream of the lowering) padded some inputs before tuned_mm saw them, e.g.
    4096x50257x768 fp16 -> N=50264, and a padded operand comes out contiguous (a ``col`` B became
    ``row``). The space is a function of what tuned_mm sees. Where a size-1 dim makes the strides
    ambiguous ((1, 1) for an M=1 ``col`` A) the case's layout is kept.
    """
    record = case["records"][0]
    (a_size, b_size), (a_stride, b_stride) = record["shapes"][-2:], record["strides"][-2:]  # addmm: bias first
    return Problem(case["op"], m=int(a_size[-2]), n=int(b_size[-1]), k=int(a_size[-1]),
                   dtype=case["dtype"].removeprefix("torch."), b=int(a_size[0]) if case["op"] == "bmm" else 1,
                   layout_a=_layout(a_size, a_stride, case["la"]), layout_b=_layout(b_size, b_stride, case["lb"]))


def _recorded_keys(choices: list[dict]) -> list[str]:
    return [from_template_kwargs(ch["uid"], ch["kw"]).key for ch in choices]


@pytest.mark.parametrize("case", STATIC_CASES, ids=_case_id)
def test_space_equals_inductor_list(case: dict) -> None:
    assert len(case["records"]) == 1, "one GEMM lowering per recorded case"
    expected = _recorded_keys(case["records"][0]["choices"])
    got = [c.key for c in enumerate_space(_problem(case), case.get("space", "default"), H200, tma=case["tma"],
                                          torch_version=RECORDED_WITH)]
    assert got == expected


def test_oracle_covers_every_family_and_both_spaces() -> None:
    families = {from_template_kwargs(ch["uid"], ch["kw"]).family
                for case in STATIC_CASES for ch in case["records"][0]["choices"]}
    assert families == {"aten", "triton_mm", "triton_tma", "decompose_k"}
    sizes = sorted(len(c["records"][0]["choices"]) for c in STATIC_CASES if c.get("space") == "exhaustive")
    assert sizes == [371, 1401]


def test_padding_only_grows_dims_to_aligned_sizes() -> None:
    """Where the recorded shape differs from the requested one, pad_mm rounded it up to a multiple of 8."""
    padded = []
    for case in STATIC_CASES:
        p = _problem(case)
        m = case["m"]
        for asked, seen in ((m, p.m), (case["n"], p.n), (case["k"], p.k)):
            assert seen >= asked
            if seen != asked:
                assert seen % 8 == 0 and seen - asked < 8
                padded.append(_case_id(case))
    assert padded, "the recording includes padded GEMMs; the docstring of _problem depends on that"
    # A padded operand is a fresh contiguous tensor: the F.linear-style (col) B of this case became row.
    case = next(c for c in STATIC_CASES if (c["m"], c["n"], c["dtype"], c["lb"]) == (4096, 50257, "torch.float16", "col"))
    assert (_problem(case).n, _problem(case).layout_b) == (50264, "row")
    # Unpadded, 4096x50257x768 fp16 would not be TMA-eligible (50257 * 2 bytes is not 16-byte aligned).
    assert not tma_compatible(Problem("mm", 4096, 50257, 768, "float16"))
    assert tma_compatible(Problem("mm", 4096, 50264, 768, "float16"))


def test_every_recorded_choice_maps_to_a_candidate() -> None:
    uids = set()
    for case in RECORDING["cases"]:
        for record in case.get("records", []):
            for ch in record["choices"]:
                cand = from_template_kwargs(ch["uid"], ch["kw"])
                assert isinstance(cand, Candidate)
                uids.add(ch["uid"])
    assert {"aten::mm", "aten::addmm", "aten::bias_addmm", "aten::bmm", "aten::_int_mm", "triton::mm",
            "triton::bmm", "triton::mm_persistent_tma", "decompose_k"} <= uids


def test_multi_kernel_hint_groups() -> None:
    """Dynamic M (hint 300) with multi_kernel_hints [64, 256, 4096]: one config group per hint."""
    groups: dict[object, list[str]] = {}
    for ch in HINTS_CASE["records"][0]["choices"]:
        groups.setdefault(ch["kw"].get("hint_override"), []).append(from_template_kwargs(ch["uid"], ch["kw"]).key)
    assert set(groups) == {None, 64, 256, 4096}
    problem = Problem("mm", 300, HINTS_CASE["n"], HINTS_CASE["k"], "float16")
    # The probe left enable_persistent_tma_matmul at its default (off).
    assert groups[None] == [c.key for c in enumerate_space(problem, "default", H200, tma=False,
                                                           torch_version=RECORDED_WITH)]
    for hint in (64, 256, 4096):
        got = [c.key for c in enumerate_space(problem, "default", H200, tma=False, hint=hint,
                                              torch_version=RECORDED_WITH)]
        assert got[0] == "aten/mm"  # aten is listed once, with the None group
        assert groups[hint] == got[1:]


@pytest.mark.parametrize("space", ["DEFAULT", "fast", ""])
def test_unknown_space_raises(space: str) -> None:
    problem = Problem("mm", 128, 128, 128, "float16")
    with pytest.raises(ValueError, match=repr(space)):
        enumerate_space(problem, space, H200)
    with pytest.raises(ValueError, match=repr(space)):
        space_frame([problem], space, H200)


def test_device_is_required() -> None:
    with pytest.raises(TypeError, match="device"):
        enumerate_space(Problem("mm", 128, 128, 128, "float16"))


def test_small_gpu_gets_aten_only() -> None:
    small = DeviceInfo("small", "8.6", sm_count=28, smem_per_block=101376, l2_bytes=4 << 20, mem_bandwidth_gbs=400.0)
    assert [c.key for c in enumerate_space(Problem("mm", 2048, 2048, 2048, "float16"), "default", small)] == ["aten/mm"]


def test_out_dtype_mm_gets_aten_mm_dtype_only() -> None:
    problem = Problem("mm", 2048, 2048, 2048, "float16", out_dtype="float32")
    assert [c.key for c in enumerate_space(problem, "default", H200)] == ["aten/mm_dtype"]


def test_tma_needs_hopper_and_blackwell_is_refused() -> None:
    problem = Problem("mm", 2048, 2048, 2048, "float16")
    ampere = DeviceInfo("A100", "8.0", 108, 166912, 40 << 20, 1500.0)
    assert not any(c.family == "triton_tma" for c in enumerate_space(problem, "default", ampere, tma=True))
    blackwell = DeviceInfo("B200", "10.0", 148, 232448, 126 << 20, 7000.0)
    with pytest.raises(NotImplementedError, match="tma=False"):
        enumerate_space(problem, "default", blackwell, tma=True)
    assert enumerate_space(problem, "default", blackwell, tma=False)


def test_tma_alignment_rules() -> None:
    assert tma_compatible(Problem("mm", 333, 1024, 1024, "float16"))  # M only matters when A is col
    assert not tma_compatible(Problem("mm", 333, 1024, 1024, "float16", layout_a="col"))
    assert not tma_compatible(Problem("mm", 1024, 1024, 1028, "float16", layout_b="col"))  # K*2 % 16 != 0
    assert tma_compatible(Problem("mm", 1024, 1024, 1028, "float32", layout_b="col"))  # K*4 % 16 == 0
    assert not tma_compatible(Problem("mm", 1, 1024, 1024, "float16", layout_a="col"))  # size-1 inner dim
    assert not tma_compatible(Problem("mm", 1024, 1024, 1024, "float16", align=8))  # known misalignment
    assert not tma_compatible(Problem("mm", 64, 1024, 1024, "float16", layout_a="col"), dynamic_m=True)


def test_decompose_k_rules() -> None:
    assert k_splits(3, 7, 1000) == (2, 4, 5)
    assert k_splits(16, 16, 32768) == (2, 4, 8, 16, 32, 64, 128, 256)
    assert use_decompose_k(16, 16, 512) and not use_decompose_k(16, 17, 512)
    # 32 <= K/max(M,N) < 64: decompose-K *and* Triton configs, decompose-K listed first (tuned_mm order).
    keys = [c.key for c in enumerate_space(Problem("mm", 128, 128, 6144, "float16"), "default", H200)]
    assert keys[0] == "aten/mm" and keys[1].startswith("decompose_k/")
    first_triton = next(i for i, key in enumerate(keys) if key.startswith("triton_mm/"))
    assert all(key.startswith("decompose_k/") for key in keys[1:first_triton])
    # K >= 64*max(M,N): no Triton configs, in EXHAUSTIVE too (Inductor's case-sensitive check).
    for space in SPACES:
        fams = {c.family for c in enumerate_space(Problem("mm", 16, 16, 32768, "float16"), space, H200)}
        assert fams == {"aten", "decompose_k"}
    # bmm, addmm and int_mm never get decompose-K.
    for op, dtype in (("bmm", "float16"), ("addmm", "float16"), ("int_mm", "int8")):
        fams = {c.family for c in enumerate_space(Problem(op, 32, 32, 32768, dtype), "default", H200)}
        assert "decompose_k" not in fams


def test_shared_memory_pruning_uses_device_limit() -> None:
    problem = Problem("mm", 4096, 4096, 4096, "float16")
    full = enumerate_space(problem, "default", H200, tma=True)
    pruned = enumerate_space(problem, "default", H200, tma=True, prune_shared_mem=True)
    assert set(pruned) < set(full)
    for cand in pruned:
        if cand.is_triton:
            conversion = problem.dtype_bytes if cand.family == "triton_tma" else 0
            cfg = (cand.block_m, cand.block_n, cand.block_k, cand.num_stages, cand.num_warps)
            assert _smem_bytes(cfg, problem.dtype_bytes, conversion) <= H200.smem_per_block
    smaller = DeviceInfo("smaller", "9.0", 132, 100_000, H200.l2_bytes, 4800.0)
    assert len(enumerate_space(problem, "default", smaller, tma=True, prune_shared_mem=True)) < len(pruned)


def test_exhaustive_prunes_register_spills() -> None:
    keys = {c.key for c in enumerate_space(Problem("mm", 4096, 4096, 4096, "float16"), "exhaustive", H200, tma=False)}
    assert "triton_mm/256x256x64/s3/w8/g8" not in keys  # 256*256/(8*32) = 256 accumulator registers > 255
    assert "triton_mm/128x256x64/s3/w8/g8" in keys


def test_space_frame_rows_and_ranks() -> None:
    problems = list(dict.fromkeys(_problem(c) for c in STATIC_CASES[:24]))  # distinct problems
    assert len(problems) > 10
    frame = space_frame(problems, "default", H200, tma=True)
    expected = [c.key for p in problems for c in enumerate_space(p, "default", H200, tma=True)]
    assert frame["candidate"].tolist() == expected
    assert {"problem_id", "candidate", "inductor_rank", "family", "block_m", "m", "layout_b"} <= set(frame.columns)
    for _, group in frame.groupby("problem_id", sort=False):
        assert group["inductor_rank"].tolist() == list(range(len(group)))
    assert frame.loc[frame["inductor_rank"] == 0, "family"].eq("aten").all()
    assert space_frame([], "default", H200).empty


def test_space_frame_is_fast() -> None:
    problems = [Problem(op, 1 + (i * 37) % 9000, 1 + (i * 101) % 12000, 1 + (i * 53) % 30000,
                        "int8" if op == "int_mm" else ("float16", "bfloat16", "float32")[i % 3],
                        b=4 if op == "bmm" else 1, layout_a=("row", "col")[i % 2], layout_b=("row", "col")[i // 2 % 2])
                for i, op in zip(range(1000), itertools.cycle(("mm", "mm", "addmm", "bmm", "int_mm")))]
    start = time.perf_counter()
    frame = space_frame(problems, "default", H200, tma=True)
    elapsed = time.perf_counter() - start
    assert frame["problem_id"].nunique() == 1000
    assert elapsed < 2.0, f"space_frame of 1000 problems took {elapsed:.2f}s"
