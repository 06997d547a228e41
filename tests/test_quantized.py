"""Quantized GEMMs on the CPU (issue 16): fp8 ``_scaled_mm`` and int8 ``_int_mm`` with B column-major.

The expected spaces mirror torch 2.13's ``kernel/mm.py`` ``tuned_scaled_mm`` / ``tuned_int_mm`` and
``template_heuristics/triton.py`` (read from the installed torch 2.13.0+cpu; no GPU recording of a scaled_mm list
exists yet: ``tests/test_gpu_spaces_quant.py`` compares with live Inductor on a GPU).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from collectors import corpus as C
from collectors.corpus_quant import QUANT_M, build_quant_corpus
from predictor.core.candidate import Candidate, from_choice_caller, from_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.runtime.choices.pruner import GemmPruner, HookSettings
from predictor.spaces import enumerate_space
from predictor.spaces.configs import FROZEN
from predictor.testing.fakes import ktc, scaled_mm_inputs

from cpu_scaled_mm import NO_CPU_ROWWISE, cpu_scaled_mm_takes_row_scales

ROOT = Path(__file__).resolve().parents[1]
H200 = DeviceInfo("NVIDIA H200", "9.0", 132, 232448, 60 << 20, 4800.0)
A100 = DeviceInfo("NVIDIA A100", "8.0", 108, 166912, 40 << 20, 1500.0)
MIRRORS = "2.13"  # the torch release whose lists and rules these expectations were derived from
FP8 = "float8_e4m3fn"
LOGGER = "predictor.runtime.choices.pruner"


def scaled(op: str, m: int, n: int, k: int) -> Problem:
    return Problem(op, m, n, k, FP8, layout_b="col")


def keys(problem: Problem, **kw) -> list[str]:
    return [c.key for c in enumerate_space(problem, kw.pop("space", "default"), kw.pop("device", H200), **kw)]


# ---------------------------------------------------------------------------------------------
# Problem
# ---------------------------------------------------------------------------------------------

def test_fp8_problems_and_their_rules():
    p = scaled("scaled_mm_rowwise", 16, 4096, 4096)
    assert p.out_dtype == "bfloat16" and p.dtype_bytes == 1
    with pytest.raises(ValueError, match="fp8 goes with"):
        Problem("mm", 16, 16, 16, FP8)
    with pytest.raises(ValueError, match="fp8 goes with"):
        Problem("scaled_mm_tensorwise", 16, 16, 16, "bfloat16")
    with pytest.raises(ValueError, match="int8 goes with"):
        Problem("scaled_mm_tensorwise", 16, 16, 16, "int8")
    assert p.problem_id != scaled("scaled_mm_tensorwise", 16, 4096, 4096).problem_id


def test_committed_problem_ids_are_unchanged():
    """The vocabularies grew; every committed corpus_v1 problem still hashes to its recorded id."""
    from predictor.core.problem import problem_from_row

    df = C.load_corpus(ROOT / "datasets" / "corpus" / "corpus_v1.parquet")
    assert all(problem_from_row(r).problem_id == r.problem_id for r in df.itertuples(index=False))


# ---------------------------------------------------------------------------------------------
# Spaces
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mnk", [(32, 4096, 4096), (17, 14336, 4096), (2048, 1024, 4096), (333, 3072, 768)])
def test_int_mm_b_col_gets_the_same_list_as_b_row(mnk):
    """tuned_int_mm reads no strides: torchao's `_int_mm(x, w.t())` is offered what B row-major is."""
    row, col = (Problem("int_mm", *mnk, "int8", layout_b=lb) for lb in ("row", "col"))
    assert keys(col) == keys(row) and keys(col)[0] == "aten/_int_mm" and len(keys(col)) > 5


def test_scaled_mm_large_shape_is_aten_then_tma_then_mm_with_torch_lists():
    """At 4096^3 no block is scaled down and none deduplicates: the lists verbatim, TMA template first."""
    lists = FROZEN[MIRRORS]
    for op in ("scaled_mm_tensorwise", "scaled_mm_rowwise"):
        got = enumerate_space(scaled(op, 4096, 4096, 4096), "default", H200, torch_version=MIRRORS)
        assert got[0] == Candidate("aten", aten_op="_scaled_mm")
        tma = [c for c in got if c.family == "triton_tma"]
        mm = [c for c in got if c.family == "triton_mm"]
        assert got == [got[0], *tma, *mm]
        assert [(c.block_m, c.block_n, c.block_k, c.num_stages, c.num_warps) for c in tma] == list(
            lists.scaled_persistent_mm)
        assert [(c.block_m, c.block_n, c.block_k, c.num_stages, c.num_warps) for c in mm] == list(lists.scaled_mm)
        assert len(got) == 1 + 13 + 105


def test_scaled_mm_decode_scales_blocks_to_m():
    """M=16 (decode): every BLOCK_M becomes 16, warps clamp to BLOCK_M*BLOCK_N/256 (derived by hand)."""
    got = keys(scaled("scaled_mm_rowwise", 16, 4096, 4096))
    tma = [k for k in got if k.startswith("triton_tma/")]
    assert tma == [f"triton_tma/{t}/g8" for t in (
        "16x128x64/s3/w8", "16x128x128/s3/w8", "16x128x128/s4/w8", "16x128x128/s4/w4", "16x128x128/s3/w4",
        "16x128x128/s5/w4", "16x128x128/s5/w8", "16x128x128/s6/w8", "16x128x64/s4/w8", "16x32x256/s5/w2",
        "16x256x128/s3/w8", "16x128x256/s4/w4", "16x256x128/s4/w4")]
    mm = [k for k in got if k.startswith("triton_mm/")]
    assert mm[:3] == ["triton_mm/16x256x32/s3/w8/g8", "triton_mm/16x128x32/s3/w8/g8", "triton_mm/16x64x32/s4/w4/g8"]
    assert len(mm) == len(set(mm)) and all(k.split("/")[1].startswith("16x") for k in mm)


def test_rowwise_and_tensorwise_get_the_same_templates():
    """Both are "epilogue scaling" types in tuned_scaled_mm: the same templates and configs."""
    for m in (1, 16, 64, 333, 4096):
        assert keys(scaled("scaled_mm_rowwise", m, 4096, 1024)) == keys(scaled("scaled_mm_tensorwise", m, 4096, 1024))


def test_scaled_mm_rules(monkeypatch):
    p = scaled("scaled_mm_rowwise", 64, 4096, 4096)
    assert not any(k.startswith("triton_tma") for k in keys(p, tma=False))
    assert not any(k.startswith("triton_tma") for k in keys(p, device=A100))  # TMA needs cc >= 9.0
    assert any(k.startswith("triton_mm") for k in keys(p, device=A100))
    # K = 16: no triton::mm (ScaledMMConfigMixin._valid) and no TMA (fp8 inner dim < 32): aten alone
    assert keys(scaled("scaled_mm_rowwise", 64, 4096, 16)) == ["aten/_scaled_mm"]
    small = DeviceInfo("small", "8.6", 28, 101376, 4 << 20, 400.0)
    assert keys(p, device=small) == ["aten/_scaled_mm"]
    # EXHAUSTIVE: the exhaustive list, the TMA part without 2 warps or BLOCK_K 16 (filtered before scaling)
    ex = enumerate_space(scaled("scaled_mm_rowwise", 4096, 4096, 4096), "exhaustive", H200)
    tma = [c for c in ex if c.family == "triton_tma"]
    # warps 2 only where the finalize step clamps a tile of 512 elements (Inductor filters before it clamps)
    assert tma and all(c.block_k >= 32 and (c.num_warps != 2 or c.block_m * c.block_n == 512) for c in tma)
    # and triton::mm without BLOCK_K 16 either (CUDAScaledMMTemplateConfigHeuristic filters it before scaling)
    assert not any(c.block_k == 16 for c in ex if c.family == "triton_mm")
    # a release whose frozen copy has no scaled-mm lists, and that is not the installed one (read live), is refused
    monkeypatch.setitem(FROZEN, "2.9", dataclasses.replace(FROZEN["2.11"], torch="2.9", scaled_mm=None,
                                                           scaled_persistent_mm=None))
    with pytest.raises(ValueError, match="scaled-mm config lists are unknown"):
        enumerate_space(p, "default", H200, torch_version="2.9")
    with pytest.raises(NotImplementedError):
        enumerate_space(p, "default", H200, prune_shared_mem=True)


def test_scaled_mm_exhaustive_matches_what_inductor_211_listed_on_an_h100():
    """tests/test_gpu_spaces_quant.py on an H100 (torch 2.11): Inductor listed 1601 choices for this case, the
    triton::mm part starting at 16x16x32 right after the 660 TMA ones (the space then had 1836: BLOCK_K 16 too)."""
    h100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 232448, 50 << 20, 3350.0)
    got = keys(scaled("scaled_mm_rowwise", 128, 4096, 1024), space="exhaustive", device=h100)
    assert len(got) == 1601
    assert got[0] == "aten/_scaled_mm" and all(k.startswith("triton_tma/") for k in got[1:661])
    assert got[661] == "triton_mm/16x16x32/s1/w1/g8" and all(k.startswith("triton_mm/") for k in got[661:])


# ---------------------------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------------------------

CFG = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, num_stages=4, num_warps=4, GROUP_M=8, EVEN_K=True,
           USE_FAST_ACCUM=True, SCALE_RECIPE_A=1, SCALE_RECIPE_B=1)


def test_scaled_mm_templates_map_to_candidates():
    assert from_template_kwargs("aten::_scaled_mm", {"out_dtype": torch.bfloat16}).key == "aten/_scaled_mm"
    for uid in ("triton::scaled_mm_device_tma_epilogue_scaling", "triton::scaled_mm_device_tma"):
        assert from_template_kwargs(uid, CFG).key == "triton_tma/64x128x128/s4/w4/g8"
    for uid in ("triton::mm", "triton::scaled_mm"):
        assert from_template_kwargs(uid, CFG).key == "triton_mm/64x128x128/s4/w4/g8"
    with pytest.raises(ValueError, match="unknown Inductor template"):  # blockwise scales: not modelled
        from_template_kwargs("triton::scaled_mm_device_tma_main_loop_scaling", CFG)
    desc = "BLOCK_K=128, BLOCK_M=64, BLOCK_N=128, EVEN_K=True, GROUP_M=8, USE_FAST_ACCUM=True, num_stages=4, num_warps=4"
    assert from_choice_caller("triton_scaled_mm_device_tma_epilogue_scaling_7", desc).key == "triton_tma/64x128x128/s4/w4/g8"
    assert from_choice_caller("triton_mm_3", desc).key == "triton_mm/64x128x128/s4/w4/g8"
    assert from_choice_caller("_scaled_mm", "").key == "aten/_scaled_mm"


# ---------------------------------------------------------------------------------------------
# The hook
# ---------------------------------------------------------------------------------------------

UIDS = {"aten": "aten::_scaled_mm", "triton_tma": "triton::scaled_mm_device_tma_epilogue_scaling",
        "triton_mm": "triton::mm"}


def scaled_choices(problem: Problem) -> list:
    """Inductor-like choices of tuned_scaled_mm (torch 2.13 uids) for the space spaces reproduces."""
    out = []
    for c in enumerate_space(problem, "default", H200):
        kw = {} if c.family == "aten" else dict(CFG, BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
                                                num_stages=c.num_stages, num_warps=c.num_warps)
        out.append(ktc(UIDS[c.family], **kw))
    return out


class LastBest:
    name = "last"

    def score(self, rows, device):
        return np.arange(len(rows), dtype=float)


def _pruner(kinds=None, **settings) -> GemmPruner:
    meta = {"device": H200.to_dict(), "model_sha256": "abc"}
    if kinds is not None:
        meta["problem_ranges"] = {"kinds": kinds}
    return GemmPruner(HookSettings(**settings), ranker=LastBest(), metadata=meta)


def _inputs(m, n, k, scales="rowwise"):
    return scaled_mm_inputs(m, n, k, scales, torch.float8_e4m3fn, torch.bfloat16, torch.float32)


@pytest.mark.parametrize("policy", ["prune", "decide"])
def test_untrained_scaled_mm_gets_the_aten_choice_alone_with_one_warning(policy, caplog):
    """No model lists an fp8 kind yet: whatever its metadata (no kinds recorded = "trusted everywhere" for the
    other ops), scaled_mm keeps plain torch.compile's choice, never ~100 choices at full max-autotune cost."""
    choices = scaled_choices(scaled("scaled_mm_rowwise", 32, 4096, 4096))
    assert len(choices) > 50
    for kinds in (None, ["mm/float16/row/row", "int_mm/int8/row/col"]):
        p = _pruner(kinds, top_k=3, policy=policy)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            caplog.clear()
            assert p.filter(choices, _inputs(32, 4096, 4096), "scaled_mm") == [choices[0]]
            assert p.filter(choices, _inputs(32, 4096, 4096), "scaled_mm") == [choices[0]]
        assert len(caplog.records) == 1 and "scaled_mm_rowwise/float8_e4m3fn/row/col" in caplog.messages[0]
        assert p.stats()["fallbacks"] == {"untrained_kind": 2}
    full = _pruner(None, top_k=3, fallback="full")
    assert full.filter(choices, _inputs(32, 4096, 4096), "scaled_mm") is choices


def test_trained_scaled_mm_kind_is_ranked_and_the_other_scale_kind_is_not():
    problem = scaled("scaled_mm_rowwise", 32, 4096, 4096)
    choices = scaled_choices(problem)
    p = _pruner(["scaled_mm_rowwise/float8_e4m3fn/row/col"], top_k=3, margin=None, aten_alone_below_us=None,
                epilogue_templates=0)
    kept = p.filter(choices, _inputs(32, 4096, 4096), "scaled_mm")
    assert kept == [choices[0], *choices[-3:]]  # top 3 (the last ones for this ranker) + aten
    # tensorwise scales are another kind: not trained, the fallback
    tensorwise = scaled_choices(scaled("scaled_mm_tensorwise", 32, 4096, 4096))
    assert p.filter(tensorwise, _inputs(32, 4096, 4096, "tensorwise"), "scaled_mm") == [tensorwise[0]]
    assert p.stats()["fallbacks"] == {"untrained_kind": 1}


def test_blockwise_scaled_mm_is_an_unknown_op():
    choices = scaled_choices(scaled("scaled_mm_rowwise", 256, 4096, 4096))
    p = _pruner(["scaled_mm_rowwise/float8_e4m3fn/row/col"], top_k=3)
    assert p.filter(choices, _inputs(256, 4096, 4096, "blockwise"), "scaled_mm") == [choices[0]]
    assert p.stats()["fallbacks"] == {"unknown_op": 1}


# ---------------------------------------------------------------------------------------------
# Corpus and collectors
# ---------------------------------------------------------------------------------------------

QUANT = ROOT / "datasets" / "corpus" / "quant_v1.parquet"


def test_quant_corpus_is_fresh_and_shaped_like_real_quantized_code():
    df = build_quant_corpus()
    committed = C.load_corpus(QUANT)
    assert C.corpus_sha256(df) == C.corpus_sha256(committed) == committed.attrs["metadata"]["corpus_sha256"]
    assert df["problem_id"].is_unique and set(df["layout_b"]) == {"col"} and set(df["layout_a"]) == {"row"}
    assert set(df["op"]) == {"int_mm", "scaled_mm_tensorwise", "scaled_mm_rowwise"}
    int8, fp8 = df[df["op"] == "int_mm"], df[df["op"] != "int_mm"]
    assert (int8["m"] > 16).all() and (int8["out_dtype"] == "int32").all()
    assert (fp8["k"] % 16 == 0).all() and (fp8["n"] % 16 == 0).all() and set(fp8["out_dtype"]) == {"bfloat16"}
    assert {1, 64, 4096} <= set(fp8["m"]) and set(QUANT_M) <= set(df["m"])  # (+ M / m_div for ViT heads)
    assert set(df["group"]) == {":".join(t.split(":")[:2]) for t in df["family_tag"]}  # model families
    v1 = C.load_corpus(ROOT / "datasets" / "corpus" / "corpus_v1.parquet")
    assert not set(df["problem_id"]) & set(v1["problem_id"])


@pytest.mark.parametrize("op", ["scaled_mm_rowwise", "scaled_mm_tensorwise"])
def test_fp8_operands_and_the_aten_runner(op):
    from collectors.runners import REL_TOLERANCE, make_operands, make_runner, relative_error

    p = scaled(op, 33, 64, 256)
    ops = make_operands(p, torch.device("cpu"))
    assert ops.a.dtype == torch.float8_e4m3fn and ops.b.stride() == (1, 256) and ops.out.dtype == torch.bfloat16
    assert ops.scale_a.shape == ((33, 1) if op.endswith("rowwise") else (1, 1))
    assert ops.scale_b.shape == ((1, 64) if op.endswith("rowwise") else (1, 1))
    # the Triton templates have bulk kernels now (tests/test_scaled_bulk.py); decompose-K is never offered for fp8
    with pytest.raises(NotImplementedError, match="no decompose_k candidate"):
        make_runner(p, Candidate("decompose_k", k_split=2), ops, 132)
    if op.endswith("rowwise") and not cpu_scaled_mm_takes_row_scales():
        pytest.skip(NO_CPU_ROWWISE)
    make_runner(p, Candidate("aten", aten_op="_scaled_mm"), ops, 132)()
    assert relative_error(ops.out, ops.reference) <= REL_TOLERANCE[p.dtype]


def test_bulk_collector_takes_fp8_problems(tmp_path):
    from collectors.selection import Shard, select_problems

    everything = select_problems(str(QUANT), Shard.parse("0/1"), str(tmp_path), None, None)
    assert set(everything["op"]) == {"int_mm", "scaled_mm_rowwise", "scaled_mm_tensorwise"}
    fp8 = select_problems(str(QUANT), Shard.parse("0/1"), str(tmp_path), "op != 'int_mm'", None)
    assert len(fp8) == 2 * 826 and set(fp8["layout_b"]) == {"col"}
