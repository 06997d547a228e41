"""The torch.compile hook on the CPU: the choice filter on stand-in KernelTemplateChoices, install/uninstall
bookkeeping, and real max-autotune compiles (CPU Inductor calls ``_finalize_template_configs`` with op
``mm`` and the single template ``aten::mm``, so the plumbing runs for real)."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import shutil
import statistics
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from predictor.testing.synthetic import METADATA, synthetic_dataset

import predictor
from predictor.artifacts.model_folder import LGBM_FILE, read_metadata, save_model
from predictor.core.candidate import to_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.rankers import make_ranker
from predictor.runtime.choices import discovery, filtering, gemm_inputs
from predictor.runtime.choices.pruner import SLOW_FILTER_MS
from predictor.runtime.choices import installed
from predictor.runtime.choices.discovery import find_model
from predictor.runtime.choices.gemm_inputs import problem_from_inputs
from predictor.runtime.choices import filtering
from predictor.runtime.choices.pruner import GemmPruner, HookSettings
from predictor.spaces import enumerate_space
from predictor.testing import fakes
from predictor.testing.fakes import FakeInputs, ktc

DEVICE = DeviceInfo.from_metadata(METADATA)
SHIPPED = Path(__file__).resolve().parents[1] / "models" / "h200-default-lgbm-all"
LOGGER = "predictor.runtime.choices.pruner"


# ---------------------------------------------------------------------------------------------
# Stand-ins for Inductor's objects
# ---------------------------------------------------------------------------------------------

def FakeNode(size, stride, dtype=torch.float16):  # noqa: N802 -- the shared stand-in, fp16 by default here
    return fakes.FakeNode(size, stride, dtype)


def mm_inputs(m: int, n: int, k: int, dtype=torch.float16) -> FakeInputs:
    return fakes.mm_inputs(m, n, k, dtype)

def fake_choices(problem: Problem, hint: int | None = None) -> list:
    """Inductor-like KernelTemplateChoices for the space ``predictor.spaces`` reproduces."""
    out = []
    for c in enumerate_space(problem, "default", DEVICE, hint=hint):
        uid, kwargs = to_template_kwargs(c, hint)
        out.append(ktc(uid, **kwargs))
    return out


class PositionRanker:
    """Scores a row by its position (later = better), or by a given per-row array; records the rows."""

    name = "position"

    def __init__(self, scores=None):
        self.scores, self.rows = scores, []

    def score(self, rows, device):
        self.rows.append(rows)
        return np.arange(len(rows), dtype=float) if self.scores is None else np.asarray(self.scores, dtype=float)


class RaisingRanker:
    name = "raising"

    def score(self, rows, device):
        raise RuntimeError("model exploded")


def pruner(ranker=None, metadata=None, **settings) -> GemmPruner:
    """A pruner over a stand-in ranker; ``fallback="full"`` unless given, so pass-through tests see the whole list."""
    settings.setdefault("fallback", "full")
    return GemmPruner(HookSettings(**settings), ranker=ranker or PositionRanker(),
                      metadata=metadata or {"device": DEVICE.to_dict(), "model_sha256": "abc"})


PROBLEM = Problem("mm", 512, 768, 3072, "float16")


# ---------------------------------------------------------------------------------------------
# (a) the filter
# ---------------------------------------------------------------------------------------------

def test_keeps_top_k_plus_aten_in_inductor_order():
    choices = fake_choices(PROBLEM)
    assert len(choices) > 20 and choices[0].template.uid == "aten::mm"
    kept = pruner(top_k=3).filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert kept == [choices[0], *choices[-3:]]  # aten first (kept), then the three best, in Inductor's order


def test_top_1_without_aten_leaves_exactly_one():
    choices = fake_choices(PROBLEM)
    p = pruner(top_k=1, keep_aten=False)
    assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") == [choices[-1]]
    stats = p.stats()
    assert 0 < stats.pop("filter_ms_median") <= stats.pop("filter_ms_max")
    assert stats == {"gemms_seen": 1, "pruned": 1, "passed_through": 0, "kept_total": 1,
                     "considered_total": len(choices), "overridden": 0, "hints_considered": 0, "hints_kept": 0,
                     "cutlass_considered": 0, "cutlass_kept": 0, "epilogue_templates_added": 0, "region_scored": 0,
                     "fallbacks": {}}


def test_aten_in_the_top_k_is_not_added_twice():
    choices = fake_choices(PROBLEM)
    scores = np.zeros(len(choices))
    scores[0], scores[5] = 10.0, 9.0
    kept = pruner(PositionRanker(scores), top_k=2, aten_alone_below_us=None).filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert kept == [choices[0], choices[5]]


def test_addmm_keeps_the_best_aten_choice_only():
    problem = Problem("addmm", 512, 768, 3072, "float16", layout_b="col")
    choices = fake_choices(problem)
    assert [c.template.uid for c in choices[:2]] == ["aten::bias_addmm", "aten::addmm"]
    inputs = FakeInputs(FakeNode((512, 3072), (3072, 1)), FakeNode((3072, 768), (1, 3072)), bias=FakeNode((768,), (1,)))
    scores = np.arange(len(choices), dtype=float)
    scores[1] = -1.0  # aten::addmm worst, aten::bias_addmm second worst
    kept = pruner(PositionRanker(scores), top_k=2).filter(choices, inputs, "addmm")
    assert kept == [choices[0], *choices[-2:]]


def test_small_lists_are_not_scored():
    ranker = PositionRanker()
    choices = fake_choices(PROBLEM)[:4]
    assert pruner(ranker, top_k=5).filter(choices, mm_inputs(512, 768, 3072), "mm") == choices
    assert ranker.rows == []


def test_ranker_error_passes_through_with_one_warning(caplog):
    choices = fake_choices(PROBLEM)
    p = pruner(RaisingRanker(), top_k=2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "model exploded" in warnings[0].getMessage()
    assert p.stats()["fallbacks"] == {"error": 3} and p.stats()["passed_through"] == 3


def test_unknown_template_and_op_pass_through(caplog):
    choices = [*fake_choices(PROBLEM), ktc("triton::blackwell_ws_persistent_device_tma", BLOCK_M=128)]
    p = pruner(top_k=2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
        other = fake_choices(PROBLEM)
        assert p.filter(other, mm_inputs(512, 768, 3072), "baddbmm") is other  # fallback "full": the whole list
    assert p.stats()["fallbacks"] == {"unknown_template": 1, "unknown_op": 1}
    assert len(caplog.records) == 2 and "blackwell" in caplog.records[0].getMessage()


def test_bad_scores_and_empty_lists():
    choices = fake_choices(PROBLEM)
    p = pruner(PositionRanker(np.full(len(choices), np.nan)), top_k=2)
    assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
    assert p.filter([], mm_inputs(512, 768, 3072), "mm") == []
    assert p.stats()["fallbacks"] == {"error": 1} and p.stats()["gemms_seen"] == 2


def test_non_cuda_gemms_are_left_alone():
    choices = fake_choices(PROBLEM)
    inputs = mm_inputs(512, 768, 3072)
    inputs.device_type = "cpu"
    p = GemmPruner(HookSettings(top_k=2), ranker=PositionRanker(), metadata={"device": DEVICE.to_dict()})
    assert p.filter(choices, inputs, "mm") is choices and p.stats()["fallbacks"] == {"not_cuda": 1}  # whatever the fallback


def test_multi_kernel_hints_keep_top_k_per_group_scored_with_the_hint():
    dynamic = Problem("mm", 300, 768, 3072, "float16")
    choices = fake_choices(dynamic)[:1]  # aten, no hint
    groups = {None: fake_choices(dynamic)[1:], 64: fake_choices(dynamic, 64)[1:], 4096: fake_choices(dynamic, 4096)[1:]}
    for members in groups.values():
        choices += members
    ranker = PositionRanker()
    kept = pruner(ranker, top_k=2).filter(choices, mm_inputs(300, 768, 3072), "mm")
    expected = [choices[0], *groups[None][-2:], *groups[64][-2:], *groups[4096][-2:]]
    assert kept == expected
    m = ranker.rows[0]["m"].to_numpy()
    assert m[0] == 300 and set(m[1:len(groups[None]) + 1]) == {300} and set(m[-len(groups[4096]):]) == {4096}


def test_low_confidence_widens_to_2k():
    choices = fake_choices(PROBLEM)
    flat = pruner(PositionRanker(np.zeros(len(choices))), top_k=2, keep_aten=False, min_confidence=0.5)
    assert flat.filter(choices, mm_inputs(512, 768, 3072), "mm") == choices[:4]
    assert flat.stats()["fallbacks"] == {"low_confidence": 1}
    sure = pruner(PositionRanker(np.arange(len(choices)) * 1.0), top_k=2, keep_aten=False, min_confidence=0.5)
    assert sure.filter(choices, mm_inputs(512, 768, 3072), "mm") == choices[-2:]


def test_out_of_training_range_passes_through():
    choices = fake_choices(PROBLEM)
    meta = {"device": DEVICE.to_dict(), "problem_ranges": {"m": [1, 256], "n": [1, 1 << 20], "k": [1, 1 << 20]}}
    p = pruner(metadata=meta, top_k=2, min_confidence=0.0)
    assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
    assert p.stats()["fallbacks"] == {"out_of_distribution": 1}
    inside = pruner(metadata=meta, top_k=2, min_confidence=0.0)
    smaller = fake_choices(Problem("mm", 200, 768, 3072, "float16"))
    assert len(inside.filter(smaller, mm_inputs(200, 768, 3072), "mm")) == 3


def test_unseen_dtype_passes_through_even_without_min_confidence():
    choices = fake_choices(PROBLEM)  # float16
    meta = {"device": DEVICE.to_dict(), "problem_ranges": {"m": [1, 64], "ops": ["mm"], "dtypes": ["bfloat16"]}}
    p = pruner(metadata=meta, top_k=2)
    assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
    assert p.stats()["fallbacks"] == {"out_of_distribution": 1}
    # sizes outside the range alone do not pass through unless min_confidence asks for care
    meta["problem_ranges"]["dtypes"] = ["float16"]
    assert len(pruner(metadata=meta, top_k=2).filter(choices, mm_inputs(512, 768, 3072), "mm")) == 3


def test_margin_keeps_only_what_the_model_cannot_tell_apart():
    choices = fake_choices(PROBLEM)  # PositionRanker: the last choice scores highest, one unit per step
    kept = pruner(top_k=5, margin=1.5).filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert kept == [choices[0], *choices[-2:]]  # scores n-1 and n-2 are within 1.5; aten kept as the fallback
    # the confidence check (gap #1 - #6 = 5 >= 0) must not replace the pruning margin
    sure = pruner(top_k=5, margin=1.5, min_confidence=0.0).filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert sure == kept
    # "auto" takes the calibrated margin from the model metadata; without one it keeps all k
    meta = {"device": DEVICE.to_dict(), "model_sha256": "abc", "pruning": {"margin": 0.5}}
    assert pruner(metadata=meta, top_k=5).filter(choices, mm_inputs(512, 768, 3072), "mm") == [choices[0], choices[-1]]
    assert len(pruner(top_k=5).filter(choices, mm_inputs(512, 768, 3072), "mm")) == 6
    with pytest.raises(ValueError, match="margin"):
        HookSettings(margin=-1.0)


def test_int_mm_is_pruned_like_mm():
    """torch 2.11 routes _int_mm through _finalize_template_configs as op "int_mm" (aten::_int_mm + triton::mm)."""
    problem = Problem("int_mm", 128, 3072, 2048, "int8")
    choices = fake_choices(problem)
    assert choices[0].template.uid == "aten::_int_mm"
    inputs = FakeInputs(FakeNode((128, 2048), (2048, 1), torch.int8), FakeNode((2048, 3072), (3072, 1), torch.int8),
                        out_dtype=torch.int32)
    ranker = PositionRanker()
    kept = pruner(ranker=ranker, top_k=2, margin=None).filter(choices, inputs, "int_mm")
    assert kept == [choices[0], *choices[-2:]]
    rows = ranker.rows[-1]
    assert set(rows["op"]) == {"int_mm"} and set(rows["dtype"]) == {"int8"} and set(rows["out_dtype"]) == {"int32"}


def test_float32_with_tf32_passes_through():
    problem = Problem("mm", 512, 768, 3072, "float32")
    choices = fake_choices(problem)
    inputs = FakeInputs(FakeNode((512, 3072), (3072, 1), torch.float32), FakeNode((3072, 768), (768, 1), torch.float32))
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        p = pruner(top_k=2)
        assert p.filter(choices, inputs, "mm") is choices and p.stats()["fallbacks"] == {"tf32": 1}
        torch.set_float32_matmul_precision("highest")
        assert len(pruner(top_k=2, margin=None).filter(choices, inputs, "mm")) == 3
    finally:
        torch.set_float32_matmul_precision(previous)


def test_problem_from_inputs():
    a_t = FakeNode((512, 3072), (1, 512))  # A stored transposed
    b_t = FakeNode((3072, 768), (1, 3072))  # B = weight.t() as in F.linear
    assert problem_from_inputs(FakeInputs(a_t, b_t), "mm") == Problem(
        "mm", 512, 768, 3072, "float16", layout_a="col", layout_b="col", align=16)
    odd = FakeInputs(FakeNode((100, 77), (77, 1), torch.bfloat16), FakeNode((77, 50), (50, 1), torch.bfloat16))
    assert problem_from_inputs(odd, "mm").align == 2  # 77 * 2 bytes
    batched = FakeInputs(FakeNode((4, 64, 32), (2048, 32, 1)), FakeNode((4, 32, 16), (512, 16, 1)))
    assert problem_from_inputs(batched, "bmm") == Problem("bmm", 64, 16, 32, "float16", b=4, align=16)
    int8 = FakeInputs(FakeNode((64, 32), (32, 1), torch.int8), FakeNode((32, 64), (64, 1), torch.int8), torch.int32)
    assert problem_from_inputs(int8, "int_mm") == Problem("int_mm", 64, 64, 32, "int8", out_dtype="int32", align=16)
    with pytest.raises(ValueError, match="not a"):
        problem_from_inputs(batched, "mm")


def test_uuid_depends_on_model_k_space_and_options():
    base = pruner(top_k=5)
    assert base.uuid() == pruner(top_k=5).uuid()
    others = [pruner(top_k=3), pruner(top_k=5, space="exhaustive"), pruner(top_k=5, keep_aten=False),
              pruner(top_k=5, min_confidence=0.2),
              pruner(metadata={"device": DEVICE.to_dict(), "model_sha256": "def"}, top_k=5)]
    assert len({base.uuid(), *(p.uuid() for p in others)}) == 1 + len(others)


def test_settings_are_validated():
    for bad in ({"top_k": 0}, {"space": "huge"}, {"min_confidence": -1.0}, {"hints": "all"}):
        with pytest.raises(ValueError):
            HookSettings(**bad)
    HookSettings(hints="predict")
    with pytest.raises(ValueError, match="hints"):
        HookSettings(hints="guess")


# ---------------------------------------------------------------------------------------------
# Models: the synthetic one, finding one, overhead
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model_root(tmp_path_factory) -> Path:
    """``<root>/syn-lgbm`` and ``<root>/syn-lgbm-all`` for the synthetic GPU, ``<root>/other`` for another one."""
    root = tmp_path_factory.mktemp("models")
    rows = synthetic_dataset(30, seed=2)
    ranker = make_ranker("lgbm", n_estimators=10).fit(rows, DEVICE)
    for name in ("syn-lgbm", "syn-lgbm-all"):
        save_model(ranker, root / name, {"device": DEVICE.to_dict(), "space": "default", "name": name})
    other = replace(DEVICE, gpu="Other GPU")
    save_model(ranker, root / "other", {"device": other.to_dict(), "space": "default", "name": "other"})
    return root


def test_find_model_prefers_lgbm_all_for_this_gpu(model_root, monkeypatch):
    assert find_model(DEVICE, roots=[model_root]) == model_root / "syn-lgbm-all"
    assert find_model(replace(DEVICE, cc="8.0"), roots=[model_root]) is None
    # a GPU of the same architecture without its own model: only with allow_similar, exact names first
    sibling = replace(DEVICE, gpu="Sibling GPU")
    assert find_model(sibling, roots=[model_root]) is None
    assert find_model(sibling, roots=[model_root], allow_similar=True) == model_root / "syn-lgbm-all"
    assert find_model(replace(DEVICE, gpu="Other GPU"), roots=[model_root], allow_similar=True) == model_root / "other"
    monkeypatch.setenv(discovery.MODELS_ENV, str(model_root))
    assert find_model(replace(DEVICE, gpu="Other GPU")) == model_root / "other"
    with predictor.pruning(_device=DEVICE) as p:
        assert p.model_path == model_root / "syn-lgbm-all" and p.disabled is None


def test_model_for_another_gpu_passes_through_with_one_warning(model_root, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        p = GemmPruner(HookSettings(model=str(model_root / "other"), top_k=2, device=DEVICE,
                                    allow_similar_gpu=False, fallback="full")).load()
        choices = fake_choices(PROBLEM)
        assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
        assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") is choices
    assert p.disabled == "no_model" and len(caplog.records) == 1 and "Other GPU" in caplog.records[0].getMessage()
    assert p.stats()["fallbacks"] == {"no_model": 2}


def test_model_for_a_gpu_of_the_same_architecture_is_used_with_one_warning(model_root, caplog):
    choices = fake_choices(PROBLEM)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        p = GemmPruner(HookSettings(model=str(model_root / "other"), top_k=2, device=DEVICE, margin=None)).load()
        assert len(p.filter(choices, mm_inputs(512, 768, 3072), "mm")) == 3
    assert p.disabled is None and len(caplog.records) == 1 and "same cc 9.0" in caplog.records[0].getMessage()
    assert p.model.borrowed_from == "Other GPU"  # predictor.stats()["tables"]["ranker"] says so
    own = GemmPruner(HookSettings(model=str(model_root / "syn-lgbm-all"), device=DEVICE)).load()
    assert own.model.borrowed_from is None
    # another architecture (fewer SMs, e.g. an H100 PCIe) is still refused
    smaller = dataclasses.replace(DEVICE, gpu="Small GPU", sm_count=114)
    q = GemmPruner(HookSettings(model=str(model_root / "other"), top_k=2, device=smaller)).load()
    # refused: the GEMM gets what plain torch.compile runs (the aten choice alone), not stock max-autotune
    assert q.disabled == "no_model" and q.filter(choices, mm_inputs(512, 768, 3072), "mm") == [choices[0]]
    assert choices[0].template.uid == "aten::mm"


def test_filter_overhead_with_a_real_model(model_root):
    """~30 choices through features + LightGBM: the budget is well under 5 ms per GEMM."""
    if (SHIPPED / "metadata.json").is_file():
        shipped = DeviceInfo.from_metadata(read_metadata(SHIPPED))
        p = GemmPruner(HookSettings(model=str(SHIPPED), top_k=5, device=shipped)).load()
    else:
        p = GemmPruner(HookSettings(model=str(model_root / "syn-lgbm-all"), top_k=5, device=DEVICE)).load()
    assert p.disabled is None
    choices, inputs = fake_choices(PROBLEM), mm_inputs(512, 768, 3072)
    assert 25 <= len(choices) <= 35
    for _ in range(5):
        p.filter(choices, inputs, "mm")
    times = []
    for _ in range(50):
        start = time.perf_counter()
        kept = p.filter(choices, inputs, "mm")
        times.append(time.perf_counter() - start)
    median_ms = statistics.median(times) * 1e3
    print(f"filter: {len(choices)} choices -> {len(kept)} in {median_ms:.2f} ms (median of 50)")
    assert 1 <= len(kept) <= 6 and median_ms < 5.0


# ---------------------------------------------------------------------------------------------
# (b) install / uninstall
# ---------------------------------------------------------------------------------------------

def _cached_choices():
    from torch._inductor import virtualized

    return getattr(virtualized.threadlocal, virtualized._choices._key, None)


def test_install_and_uninstall_restore_config_and_reset_the_cache(model_root):
    from torch._inductor import config
    from torch._inductor.virtualized import V

    def previous():  # a user's own factory
        from torch._inductor.choices import InductorChoices
        return InductorChoices()

    with config.patch(inductor_choices_class=previous, max_autotune_gemm_search_space="DEFAULT"):
        stale = V.choices  # cached per thread
        assert _cached_choices() is stale
        p = predictor.install(model_root / "syn-lgbm", top_k=2, space="exhaustive", _device=DEVICE)
        try:
            assert config.inductor_choices_class is p and config.max_autotune_gemm_search_space == "EXHAUSTIVE"
            assert _cached_choices() is None
            assert V.choices.pruner is p and V.choices.uuid() == p.uuid()
            with predictor.pruning(model_root / "syn-lgbm", top_k=1, _device=DEVICE) as inner:
                assert config.inductor_choices_class is inner and V.choices.pruner is inner
            assert config.inductor_choices_class is p and V.choices.pruner is p
        finally:
            predictor.uninstall()
        assert config.inductor_choices_class is previous and config.max_autotune_gemm_search_space == "DEFAULT"
        assert _cached_choices() is None and type(V.choices).__name__ == "InductorChoices"
        predictor.uninstall()  # nothing installed: a no-op
        assert config.inductor_choices_class is previous
    assert predictor.stats()["gemms_seen"] == 0  # the most recent pruner (inner) saw nothing


def test_pruner_pickles_as_its_settings_and_keys_the_cache(model_root):
    from torch._inductor import config

    with predictor.pruning(model_root / "syn-lgbm", top_k=2, _device=DEVICE) as p:
        assert pickle.loads(pickle.dumps(p)) is p  # a config snapshot restores the installed pruner
        assert pickle.dumps(p) != pickle.dumps(GemmPruner(replace(p.settings, top_k=3)))
        if "inductor_choices_class" in getattr(config, "_cache_config_factory_keys", []):  # torch >= 2.13
            assert config.save_config_portable()["inductor_choices_class"] == p.uuid()
    restored = pickle.loads(pickle.dumps(p))  # another process: same settings, model loaded on first use
    assert restored is not p and restored.load().uuid() == p.uuid()


# ---------------------------------------------------------------------------------------------
# (c), (d) real max-autotune compiles on the CPU
# ---------------------------------------------------------------------------------------------

# The aten choices CPU Inductor offers per op under max-autotune. torch 2.13 offers addmm's aten choice with the 1-D
# bias in a call of its own, then an empty Triton call; torch 2.11 one call with aten::bias_addmm (offered for a
# broadcast bias: the 1-D-bias cuBLAS call plain torch.compile makes) before aten::addmm.
CPU_ATEN = {"mm": {"aten::mm"}, "addmm": {"aten::addmm", "aten::bias_addmm"}}


def _compile_and_check(spy: GemmPruner | None = None) -> list[tuple]:
    """Compile a small model with two matmuls (a plain one, a linear layer) under max-autotune and
    compare with eager; returns what the pruner's filter saw and kept (op, template uids, Problem, kept uids)."""
    seen: list[tuple] = []
    if spy is not None:
        real = spy.filter

        def recording(choices, kernel_inputs, op_name):
            kept = real(choices, kernel_inputs, op_name)
            seen.append((op_name, [c.template.uid for c in choices], problem_from_inputs(kernel_inputs, op_name),
                         [c.template.uid for c in kept]))
            return kept

        spy.filter = recording
    torch._dynamo.reset()
    w1, w2, bias = torch.randn(48, 32), torch.randn(16, 32), torch.randn(16)
    x = torch.randn(40, 48)

    def model(x):
        return torch.nn.functional.linear((x @ w1).relu(), w2, bias)

    from torch._inductor import config

    with config.patch(fx_graph_cache=False, max_autotune_gemm_backends="ATEN"):
        out = torch.compile(model, mode="max-autotune-no-cudagraphs")(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
    return seen


def test_compile_with_a_model_for_this_device(model_root):
    with predictor.pruning(model_root / "syn-lgbm-all", top_k=1, keep_aten=False, _device=DEVICE) as p:
        seen = _compile_and_check(p)
    assert p.disabled is None
    # CPU Inductor offers only aten choices (CPU_ATEN); the problems read off the IR nodes:
    assert seen and all(op in CPU_ATEN and set(uids) <= CPU_ATEN[op] for op, uids, _, _ in seen)
    assert ("mm", ["aten::mm"], Problem("mm", 40, 32, 48, "float32", align=16), ["aten::mm"]) in seen
    addmm = [(uids, problem) for op, uids, problem, _ in seen if op == "addmm" and uids]
    assert addmm and all(problem == Problem("addmm", 40, 16, 32, "float32", layout_b="col", align=16)
                         for _, problem in addmm)
    # top_k=1: one choice of each list, from that list
    assert all(len(kept) == min(len(uids), 1) and set(kept) <= set(uids) for _, uids, _, kept in seen)
    s = predictor.stats()
    assert s["gemms_seen"] == len(seen) and s["fallbacks"] == {}
    assert s["kept_total"] == sum(len(kept) for *_, kept in seen)
    assert s["considered_total"] == sum(len(uids) for _, uids, _, _ in seen)


def test_compile_with_dynamic_shapes_reads_size_hints():
    """Symbolic sizes go through the graph's size hints; a bmm with a transposed B reads as ``col``."""
    p = GemmPruner(HookSettings(top_k=1, device=DEVICE), ranker=PositionRanker(), metadata={"device": DEVICE.to_dict()})
    seen = []
    real = p.filter

    def recording(choices, kernel_inputs, op_name):
        seen.append(problem_from_inputs(kernel_inputs, op_name))
        return real(choices, kernel_inputs, op_name)

    p.filter = recording
    from torch._inductor import config

    a, b = torch.randn(40, 48), torch.randn(48, 32)
    ba, bb = torch.randn(3, 40, 48), torch.randn(3, 32, 48).transpose(1, 2)
    torch._dynamo.reset()
    try:
        with config.patch(inductor_choices_class=p, fx_graph_cache=False, max_autotune_gemm_backends="ATEN"):
            installed._drop_cached_choices()
            mm = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs", dynamic=True)
            torch.testing.assert_close(mm(a, b), a @ b)
            bmm = torch.compile(torch.bmm, mode="max-autotune-no-cudagraphs")
            torch.testing.assert_close(bmm(ba, bb), torch.bmm(ba, bb))
    finally:
        installed._drop_cached_choices()
        torch._dynamo.reset()
    assert Problem("mm", 40, 32, 48, "float32", align=16) in seen
    assert Problem("bmm", 40, 32, 48, "float32", b=3, layout_b="col", align=16) in seen


def test_compile_with_the_shipped_gpu_model_on_cpu_passes_through(caplog):
    model = SHIPPED if SHIPPED.is_dir() else "models/does-not-exist"
    with caplog.at_level(logging.WARNING, logger=LOGGER), predictor.pruning(model, top_k=1) as p:
        seen = _compile_and_check(p)
    if not torch.cuda.is_available():
        assert p.disabled == "no_gpu"  # a missing GPU is not reported as a missing model
        assert len([r for r in caplog.records if r.name == LOGGER]) == 1
        # fallback="aten": each GEMM keeps its first aten choice alone (CPU Inductor offers nothing else)
        assert all(kept == uids[:1] for _, uids, _, kept in seen)
    # never a model's pick: the whole list (a CPU GEMM is not the hook's to judge) or the aten fallback
    assert seen and all(kept in (uids, uids[:1]) for _, uids, _, kept in seen)
    s = predictor.stats()
    assert s["gemms_seen"] == len(seen) and s["kept_total"] == sum(len(kept) for *_, kept in seen)


def test_compile_with_a_broken_model_passes_through(model_root, tmp_path, caplog):
    broken = tmp_path / "broken"
    shutil.copytree(model_root / "syn-lgbm-all", broken)
    path = broken / LGBM_FILE
    path.write_text(path.read_text()[:-100] + "garbage")
    with caplog.at_level(logging.WARNING, logger=LOGGER), predictor.pruning(broken, top_k=1, _device=DEVICE) as p:
        seen = _compile_and_check(p)
    assert p.disabled == "no_model"
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1 and "sha256" in messages[0]
    # fallback="aten": each GEMM keeps its first aten choice alone (CPU Inductor offers nothing else)
    assert seen and all(kept == uids[:1] for _, uids, _, kept in seen)
    s = p.stats()
    assert s["gemms_seen"] >= 2 and s["fallbacks"]["no_model"] >= 2
    assert s["kept_total"] == sum(len(kept) for *_, kept in seen) == sum(bool(uids) for _, uids, _, _ in seen)


def test_a_favoured_aten_stays_alone_on_small_gemms_only():
    """Inductor's benchmark overstates cuBLAS on small GEMMs, so a favoured aten is not put up against Triton."""
    from predictor.core.features import ideal_time_us

    def aten_first(problem):
        choices = fake_choices(problem)
        scores = np.arange(len(choices), dtype=float)
        scores[0] = len(choices) + 0.5  # aten (Inductor lists it first) is the favourite, by less than the margin
        return choices, PositionRanker(scores)

    small, large = PROBLEM, Problem("mm", 8192, 8192, 8192, "float16")
    assert ideal_time_us(1, 512, 768, 3072, "float16", "float16", DEVICE) < 100 < ideal_time_us(
        1, 8192, 8192, 8192, "float16", "float16", DEVICE)
    choices, ranker = aten_first(small)
    assert pruner(ranker=ranker, top_k=3, margin=None).filter(choices, mm_inputs(512, 768, 3072), "mm") == [choices[0]]
    kept = pruner(ranker=ranker, top_k=3, margin=None, aten_alone_below_us=None).filter(
        choices, mm_inputs(512, 768, 3072), "mm")
    assert kept == [choices[0], *choices[-2:]]
    choices, ranker = aten_first(large)
    assert len(pruner(ranker=ranker, top_k=3, margin=None).filter(choices, mm_inputs(8192, 8192, 8192), "mm")) == 3
    # the setting is part of the FX-graph-cache key, and validated
    assert pruner(top_k=3).uuid() != pruner(top_k=3, aten_alone_below_us=None).uuid()
    with pytest.raises(ValueError, match="aten_alone_below_us"):
        HookSettings(aten_alone_below_us=-1.0)


def test_install_reaches_threads_that_compiled_before(model_root):
    """A backward pass is compiled in autograd's device thread, which caches its InductorChoices on first use;
    install() must reach such a thread too, not only the one it is called from."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as other_thread:
        other_thread.submit(_compile_and_check).result()  # caches Inductor's default choices handler there
        with predictor.pruning(model_root / "syn-lgbm-all", top_k=1, keep_aten=False, _device=DEVICE) as p:
            other_thread.submit(_compile_and_check).result()
        assert p.stats()["gemms_seen"] >= 2
        seen_before = p.stats()["gemms_seen"]
        other_thread.submit(_compile_and_check).result()  # after uninstall: the default handler again
        assert p.stats()["gemms_seen"] == seen_before


def test_override_gap_replaces_a_benchmark_pick_the_model_is_sure_is_wrong():
    """torch >= 2.13 asks InductorChoices.override_best_choice after benchmarking; the pruner answers with the
    model's favourite when Inductor's pick scores more than override_gap below it."""
    choices = fake_choices(PROBLEM)
    scores = np.zeros(len(choices))
    scores[0], scores[-1], scores[-2] = 9.0, 5.0, 4.0  # aten favoured, two Triton configs behind it
    p = pruner(PositionRanker(scores), top_k=3, margin=None, aten_alone_below_us=None, override_gap=2.0)
    kept = p.filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert kept == [choices[0], choices[-2], choices[-1]]

    class Caller:  # what override_best_choice reads of a ChoiceCaller (hashable, like Inductor's)
        def __init__(self, name: str, description: str) -> None:
            self.name, self.description = name, description

    def caller(ktc_):  # a ChoiceCaller as Inductor builds it from a KernelTemplateChoice
        if ktc_.template.uid.startswith("aten::"):
            return Caller(ktc_.template.uid.split("::")[1], "")
        kw = ktc_.params.to_kwargs()
        if ktc_.template.uid == "decompose_k":
            return Caller(f"decompose_k_mm_{kw['k_split']}_split", "")
        name = "triton_mm_persistent_tma_7" if "tma" in ktc_.template.uid else "triton_mm_7"
        return Caller(name, ", ".join(f"{k}={v}" for k, v in kw.items()))

    aten, t1, t2 = (caller(c) for c in kept)
    timings = {aten: 0.030, t1: 0.020, t2: 0.025}  # Inductor's benchmark overstates cuBLAS: t1 looks best
    assert p.pick(t1, timings) is aten and p.stats()["overridden"] == 1
    assert p.pick(t2, {aten: 0.030, t1: 0.020, t2: 0.010}) is aten  # 9 - 5 > 2 as well
    # within the gap, unknown choices, a failed favourite, or the option off: Inductor's pick stands
    close = pruner(PositionRanker(scores), top_k=3, margin=None, aten_alone_below_us=None, override_gap=6.0)
    close.filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert close.pick(t1, timings) is t1
    assert p.pick(t1, {aten: float("inf"), t1: 0.020, t2: 0.025}) is t1
    stranger = Caller("triton_mm_9", "BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_stages=1, num_warps=1")
    assert p.pick(t1, {aten: 0.03, t1: 0.02, stranger: 0.01}) is t1
    off = pruner(PositionRanker(scores), top_k=3, margin=None, aten_alone_below_us=None)
    off.filter(choices, mm_inputs(512, 768, 3072), "mm")
    assert off.pick(t1, timings) is t1 and off.stats()["overridden"] == 0
    assert p.uuid() != off.uuid()
    with pytest.raises(ValueError, match="override_gap"):
        HookSettings(override_gap=float("nan"))


def test_a_slow_filter_warns_once_and_still_prunes(caplog):
    class SlowRanker(PositionRanker):
        def score(self, rows, device):
            time.sleep((SLOW_FILTER_MS + 10) / 1e3)
            return super().score(rows, device)

    choices = fake_choices(PROBLEM)
    p = pruner(SlowRanker(), top_k=2, margin=None)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            assert len(p.filter(choices, mm_inputs(512, 768, 3072), "mm")) == 3
    slow = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert len(slow) == 1 and "ms per GEMM" in slow[0]
    assert p.stats()["filter_ms_max"] > SLOW_FILTER_MS


class BlockRanker(PositionRanker):
    """Prefers BLOCK_M close to M (clipped to 16..128): small-M and large-M kernels differ; aten scores low."""

    def __init__(self, depends_on_m: bool = True):
        super().__init__()
        self.depends_on_m = depends_on_m

    def score(self, rows, device):
        self.rows.append(rows)
        target = np.log2(np.clip(rows["m"].to_numpy(dtype=float), 16, 128)) if self.depends_on_m else 7.0
        bm = np.log2(rows["block_m"].fillna(1).to_numpy(dtype=float).clip(min=1))
        return np.where(rows["family"] == "aten", -10.0, -np.abs(bm - target))


def hinted_choices(hints):
    dynamic = Problem("mm", 300, 768, 3072, "float16")
    choices = fake_choices(dynamic)[:1]  # aten, no hint
    groups = {None: fake_choices(dynamic)[1:], **{h: fake_choices(dynamic, h)[1:] for h in hints}}
    for members in groups.values():
        choices += members
    return choices, groups


def test_predicted_hints_leave_the_other_hints_their_favourite_alone():
    choices, groups = hinted_choices([64, 4096])
    p = pruner(BlockRanker(depends_on_m=False), top_k=2, margin=None, hints="predict")
    kept = {id(c) for c in p.filter(choices, mm_inputs(300, 768, 3072), "mm")}
    # the ranker prefers BLOCK_M 128 at every size and only the 4096 group offers it (Inductor scales the
    # configs of the 64 group down to BLOCK_M <= 64): 4096 is autotuned (top 2); 64 keeps one kernel, because
    # Inductor's scheduler needs a Triton kernel for every hint
    assert len(kept & set(map(id, groups[4096]))) == 2 and len(kept & set(map(id, groups[64]))) == 1
    assert len(kept & set(map(id, groups[None]))) == 2
    assert p.stats()["hints_considered"] == 2 and p.stats()["hints_kept"] == 1
    every = {id(c) for c in pruner(BlockRanker(depends_on_m=False), top_k=2, margin=None).filter(
        choices, mm_inputs(300, 768, 3072), "mm")}
    assert len(every & set(map(id, groups[64]))) == 2


def test_predicted_hints_keep_each_hint_whose_kernel_wins_somewhere():
    choices, groups = hinted_choices([16, 64, 4096])
    p = pruner(BlockRanker(depends_on_m=True), top_k=2, margin=None, hints="predict")
    kept = {id(c) for c in p.filter(choices, mm_inputs(300, 768, 3072), "mm")}
    assert [len(kept & set(map(id, groups[h]))) for h in (16, 64, 4096)] == [2, 2, 2]  # each wins somewhere
    assert p.stats()["hints_kept"] == 3
    assert pruner(top_k=1, hints="predict").uuid() != pruner(top_k=1).uuid()


def test_training_step_compiles_with_the_hook_and_its_backward_gemms_are_seen(model_root):
    """fwd + bwd of a linear block under max-autotune on CPU: the backward's GEMMs reach the filter too, and the
    gradients match eager."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    x = torch.randn(40, 48, requires_grad=True)

    def step(module, inp):
        out = module(inp)
        out.square().mean().backward()
        return out

    ref = step(block, x)
    ref_grads = [p.grad.clone() for p in block.parameters()] + [x.grad.clone()]
    for p in block.parameters():
        p.grad = None
    x.grad = None
    from torch._inductor import config

    with predictor.pruning(model_root / "syn-lgbm-all", top_k=1, _device=DEVICE) as p, \
            config.patch(fx_graph_cache=False, max_autotune_gemm_backends="ATEN"):
        out = step(torch.compile(block, mode="max-autotune-no-cudagraphs"), x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    grads = [q.grad for q in block.parameters()] + [x.grad]
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # forward: 2 addmm; backward: grad of input and weight of each linear (mm) -> at least 6 GEMMs seen
    assert p.stats()["gemms_seen"] >= 6 and p.stats()["fallbacks"] == {}
    torch._dynamo.reset()


def test_cutlass_choices_are_cut_to_the_best_kernels_in_inductors_preprocessing_step(model_root):
    from torch._inductor import select_algorithm

    class Caller:
        def __init__(self, name, description="", size=(4096, 4096)):
            self.name, self.description, self.layout = name, description, SimpleNamespace(size=list(size))

    def cutlass(tile: str, swizzle: int) -> Caller:
        desc = f"cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_{tile}_1x1x1_0_tnn_align8_warpspecialized_epi_nosmem"
        return Caller(f"cutlass_{tile}", f"{desc} swizzle={swizzle}")

    choices = [Caller("mm"), Caller("triton_mm_1", "BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_stages=3, num_warps=4")]
    choices += [cutlass(t, s) for t in ("64x64x64", "128x128x64", "256x128x64") for s in (1, 2, 4, 8)]
    with predictor.pruning(model_root / "syn-lgbm-all", top_k=2, cutlass_top_k=1, _device=DEVICE) as p:
        assert installed._preprocess_with_installed in select_algorithm.get_algorithm_selector_cache().preprocessing_fns
        kept = installed._preprocess_with_installed(choices)
    # aten and Triton untouched; one CUTLASS kernel left, with all four swizzles (they share its compile)
    assert kept[:2] == choices[:2] and len(kept) == 6 and len({c.name for c in kept[2:]}) == 1
    assert p.stats()["cutlass_considered"] == 3 and p.stats()["cutlass_kept"] == 1
    assert installed._preprocess_with_installed(choices) == choices  # nothing installed: a no-op
    with predictor.pruning(model_root / "syn-lgbm-all", _device=DEVICE):
        assert installed._preprocess_with_installed(choices) == choices  # cutlass_top_k=None: untouched
    for policy in ("decide", "tune"):  # the decision saw no CUTLASS kernel: none is benchmarked beside it
        with predictor.pruning(model_root / "syn-lgbm-all", policy=policy, _device=DEVICE):
            assert installed._preprocess_with_installed(choices) == choices[:2]
    with pytest.raises(ValueError, match="cutlass_top_k"):
        HookSettings(cutlass_top_k=0)


# ---------------------------------------------------------------------------------------------
# epilogue templates: a GEMM feeding a pointwise op keeps a Triton template for Inductor's fusion benchmark
# ---------------------------------------------------------------------------------------------

def _graph_of(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args).graph


def _mm_nodes(graph):
    return [n for n in graph.nodes if getattr(n.target, "overloadpacket", None) in (torch.ops.aten.mm, torch.ops.aten.addmm)]


def test_output_feeds_pointwise_reads_the_fx_users_through_views():
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    assert filtering.output_feeds_pointwise(_mm_nodes(_graph_of(lambda x, y: torch.nn.functional.gelu(x @ y), a, b))[0])
    assert filtering.output_feeds_pointwise(_mm_nodes(_graph_of(lambda x, y: (x @ y).view(2, 24) + 1, a, b))[0])
    assert not filtering.output_feeds_pointwise(_mm_nodes(_graph_of(lambda x, y: x @ y, a, b))[0])
    assert not filtering.output_feeds_pointwise(_mm_nodes(_graph_of(lambda x, y: (x @ y).sum(0), a, b))[0])
    assert not filtering.output_feeds_pointwise(None)


def test_output_consumers_names_the_ops_behind_views():
    from predictor.runtime.choices.gemm_inputs import output_consumers

    a, b = torch.randn(8, 4), torch.randn(4, 6)
    assert output_consumers(_mm_nodes(_graph_of(lambda x, y: torch.nn.functional.gelu(x @ y), a, b))[0]) == ["aten.gelu"]

    def two_users(x, y):
        z = x @ y
        return z.view(2, 24) + 1, z.sum()

    assert sorted(output_consumers(_mm_nodes(_graph_of(two_users, a, b))[0])) == ["aten.add", "aten.sum"]
    assert output_consumers(_mm_nodes(_graph_of(lambda x, y: x @ y, a, b))[0]) == ["output"]
    assert output_consumers(None) == []


def test_a_gemm_with_an_epilogue_keeps_its_best_triton_template_beside_a_favoured_aten(monkeypatch):
    from predictor.core.candidate import from_template_kwargs

    problem = Problem("mm", 8192, 8192, 8192, "float16")
    choices = fake_choices(problem)
    families = [from_template_kwargs(c.template.uid, c.params.to_kwargs()).family for c in choices]
    scores = np.arange(len(choices), dtype=float)
    scores[0] = 100.0  # aten (listed first) is the clear favourite
    best_mm = max((i for i, f in enumerate(families) if f == "triton_mm"), key=lambda i: scores[i])
    inputs = mm_inputs(8192, 8192, 8192)
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    with_gelu = _mm_nodes(_graph_of(lambda x, y: torch.nn.functional.gelu(x @ y), a, b))[0]
    bare = _mm_nodes(_graph_of(lambda x, y: x @ y, a, b))[0]

    monkeypatch.setattr(filtering, "_lowering_node", lambda: with_gelu)
    p = pruner(ranker=PositionRanker(scores), top_k=1, epilogue_templates=1)
    assert p.filter(choices, inputs, "mm") == [choices[0], choices[best_mm]]
    assert p.stats()["epilogue_templates_added"] == 1
    assert pruner(ranker=PositionRanker(scores), top_k=1).filter(choices, inputs, "mm") == [choices[0]]  # default off
    monkeypatch.setattr(filtering, "_lowering_node", lambda: bare)
    assert pruner(ranker=PositionRanker(scores), top_k=1, epilogue_templates=1).filter(choices, inputs, "mm") == [
        choices[0]]
    # a kept template already serves: nothing is added
    monkeypatch.setattr(filtering, "_lowering_node", lambda: with_gelu)
    scores2 = scores.copy()
    scores2[best_mm] = 99.0
    assert pruner(ranker=PositionRanker(scores2), top_k=2, margin=None, epilogue_templates=1).filter(
        choices, inputs, "mm") == [choices[0], choices[best_mm]]
    with pytest.raises(ValueError, match="epilogue_templates"):
        HookSettings(epilogue_templates=-1)
    assert pruner(top_k=1).uuid() != pruner(top_k=1, epilogue_templates=1).uuid()


def test_the_lowering_node_is_seen_during_a_real_compile(model_root):
    """Under a real Inductor compile the filter sees the GEMM's FX node: the first linear feeds GELU (an
    epilogue), the last one's output leaves the graph (none)."""
    torch._dynamo.reset()
    block = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    seen = []
    from torch._inductor import config

    with predictor.pruning(model_root / "syn-lgbm-all", top_k=1, _device=DEVICE) as p, \
            config.patch(fx_graph_cache=False, max_autotune_gemm_backends="ATEN"):
        real = p.filter

        def recording(choices, kernel_inputs, op_name):
            seen.append((op_name, filtering.output_feeds_pointwise(filtering._lowering_node())))
            return real(choices, kernel_inputs, op_name)

        p.filter = recording
        torch.compile(block, mode="max-autotune-no-cudagraphs")(torch.randn(40, 48))
    torch._dynamo.reset()
    assert ("addmm", True) in seen and ("addmm", False) in seen


def test_a_gemm_cut_to_cublas_alone_loses_its_cutlass_choices_too():
    """CUTLASS choices reach Inductor's preprocessing step after the filter: where the filter kept cuBLAS alone
    (small GEMM, favoured aten), any CUTLASS kernel left beside it would win Inductor's biased benchmark."""
    def aten_first(problem):
        choices = fake_choices(problem)
        scores = np.arange(len(choices), dtype=float)
        scores[0] = len(choices) + 0.5
        return choices, PositionRanker(scores)

    def callers(inputs):
        desc = "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_{}_1x1x1_0_tnn_align8_warpspecialized_epi_nosmem"
        out = [SimpleNamespace(name="mm", description="", input_nodes=inputs.nodes())]
        out += [SimpleNamespace(name=f"cutlass_{t}", description=desc.format(t) + f" swizzle={s}",
                                input_nodes=inputs.nodes(), layout=SimpleNamespace(size=[4096, 4096]))
                for t in ("64x64x64", "128x128x64") for s in (1, 2)]
        return out

    small, large = mm_inputs(512, 768, 3072), mm_inputs(8192, 8192, 8192)
    p = pruner(top_k=3, margin=None, cutlass_top_k=1)
    choices, p.ranker = aten_first(PROBLEM)
    assert p.filter(choices, small, "mm") == [choices[0]]
    assert [c.name for c in p.preprocess(callers(small))] == ["mm"]
    choices, p.ranker = aten_first(Problem("mm", 8192, 8192, 8192, "float16"))
    assert len(p.filter(choices, large, "mm")) == 3  # not small: Triton configs kept, and one CUTLASS kernel
    assert [c.name for c in p.preprocess(callers(large))] == ["mm", "cutlass_128x128x64", "cutlass_128x128x64"]
    # another GEMM with the same operand names but other sizes is not mistaken for the small one
    other = mm_inputs(512, 768, 3072 * 2)
    assert len({c.name for c in p.preprocess(callers(other))}) == 2
    # without the aten-alone rule nothing is remembered and CUTLASS is cut to the top kernel only
    q = pruner(top_k=3, margin=None, cutlass_top_k=1, aten_alone_below_us=None)
    choices, q.ranker = aten_first(PROBLEM)
    q.filter(choices, small, "mm")
    assert len(q.preprocess(callers(small))) == 3


# ---------------------------------------------------------------------------------------------
# The fallback (what a GEMM the hook cannot rank keeps) and the "decide" policy
# ---------------------------------------------------------------------------------------------

def test_unknown_op_keeps_the_aten_choice_alone_by_default_and_everything_on_request(caplog):
    """An op the hook does not know (``scaled_mm``, ``baddbmm``) gets plain torch.compile's choice, with one warning;
    ``fallback="full"`` opts into stock max-autotune."""
    scaled = [ktc("aten::_scaled_mm"), ktc("triton::scaled_mm_device_tma", BLOCK_M=128),
              ktc("triton::mm", BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_stages=3, num_warps=4, GROUP_M=8)]
    p = GemmPruner(HookSettings(top_k=2), ranker=PositionRanker(), metadata={"device": DEVICE.to_dict()})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert p.filter(scaled, mm_inputs(512, 768, 3072), "scaled_mm") == [scaled[0]]
        assert p.filter(scaled, mm_inputs(512, 768, 3072), "scaled_mm") == [scaled[0]]
    assert len(caplog.records) == 1 and "scaled_mm" in caplog.records[0].getMessage()
    assert "aten/cuBLAS choice alone" in caplog.records[0].getMessage()
    assert p.stats()["fallbacks"] == {"unknown_op": 2}
    full = GemmPruner(HookSettings(top_k=2, fallback="full"), ranker=PositionRanker(),
                      metadata={"device": DEVICE.to_dict()})
    assert full.filter(scaled, mm_inputs(512, 768, 3072), "scaled_mm") is scaled
    # a list without any aten choice has nothing safer to fall back to: it is kept whole
    no_aten = scaled[1:]
    assert p.filter(no_aten, mm_inputs(512, 768, 3072), "scaled_mm") is no_aten


def test_settings_refuse_an_unknown_policy_or_fallback():
    with pytest.raises(ValueError, match="policy"):
        HookSettings(policy="vote")
    assert HookSettings(policy="tune").policy == "tune"
    with pytest.raises(ValueError, match="fallback"):
        HookSettings(fallback="cublas")
    with pytest.raises(ValueError, match="decide_gap"):
        HookSettings(decide_gap=float("nan"))


def _scores_favouring(choices, favourite: int, gap: float) -> np.ndarray:
    """Scores where ``choices[favourite]`` leads the aten choice (index 0) by ``gap`` and everything else trails."""
    scores = np.zeros(len(choices))
    scores[favourite] = gap
    return scores


def test_decide_keeps_exactly_one_choice_triton_only_past_the_gap():
    choices = fake_choices(PROBLEM)
    assert choices[0].template.uid == "aten::mm" and len(choices) > 5
    inputs = mm_inputs(512, 768, 3072)
    # the favourite leads aten by more than the gap: it alone, no benchmark
    confident = pruner(PositionRanker(_scores_favouring(choices, 3, 2.5)), policy="decide", decide_gap=2.0)
    assert confident.filter(choices, inputs, "mm") == [choices[3]]
    # by less: cuBLAS alone (plain torch.compile's choice)
    unsure = pruner(PositionRanker(_scores_favouring(choices, 3, 1.5)), policy="decide", decide_gap=2.0)
    assert unsure.filter(choices, inputs, "mm") == [choices[0]]
    # aten favoured by more than the default margin (DECIDE_MIN_GAP = -2.5): aten alone
    scores = np.zeros(len(choices))
    scores[0], scores[4] = 3.0, 0.4
    assert pruner(PositionRanker(scores), policy="decide").filter(choices, inputs, "mm") == [choices[0]]
    # by less: the best Triton candidate (a near tie goes to the kernel that can take the epilogue)
    scores[0] = 1.0
    assert pruner(PositionRanker(scores), policy="decide").filter(choices, inputs, "mm") == [choices[4]]
    assert pruner(PositionRanker(scores), policy="decide", decide_gap=0.0).filter(choices, inputs, "mm") == [choices[0]]
    assert confident.stats()["kept_total"] == 1 and confident.stats()["pruned"] == 1


def test_tune_benchmarks_only_the_decided_kind():
    """policy "tune" (predictor.compile(tune=K)): where the decision is cuBLAS, cuBLAS alone (nothing to benchmark);
    where it is a Triton kernel, the model's K best non-aten candidates, cuBLAS left out, in Inductor's order."""
    choices = fake_choices(PROBLEM)
    inputs = mm_inputs(512, 768, 3072)
    scores = np.arange(len(choices), dtype=float) / 10.0  # later choices score higher; aten (index 0) lowest
    triton = pruner(PositionRanker(scores), policy="tune", top_k=3, decide_gap=0.0)
    assert triton.filter(choices, inputs, "mm") == choices[-3:]
    scores[0] = 10.0  # cuBLAS leads the favourite Triton kernel by more than any gap: cuBLAS alone
    assert pruner(PositionRanker(scores), policy="tune", top_k=3).filter(choices, inputs, "mm") == [choices[0]]
    scores[0] = 1.0  # within the default gap (-2.5): the decision is Triton, so cuBLAS is not benchmarked beside it
    kept = pruner(PositionRanker(scores), policy="tune", top_k=2).filter(choices, inputs, "mm")
    assert kept == choices[-2:] and choices[0] not in kept
    assert triton.stats()["kept_total"] == 3
    # the same decision under "decide" keeps the favourite alone, whatever top_k says
    assert pruner(PositionRanker(scores), policy="decide", top_k=3).filter(choices, inputs, "mm") == [choices[-1]]


def test_decide_trusts_triton_only_for_kinds_the_model_was_trained_on():
    """int8 labels are all B row-major; real int8 code runs B column-major (cuBLAS's fast path): a Triton pick
    for an untrained kind is not taken over cuBLAS, however confident the model is."""
    problem = Problem("int_mm", 512, 768, 3072, "int8", out_dtype="int32", layout_b="col")
    choices = fake_choices(problem)
    assert choices[0].template.uid == "aten::_int_mm"
    inputs = FakeInputs(FakeNode((512, 3072), (3072, 1), torch.int8), FakeNode((3072, 768), (1, 3072), torch.int8),
                        out_dtype=torch.int32)
    meta = {"device": DEVICE.to_dict(), "model_sha256": "abc",
            "problem_ranges": {"kinds": ["int_mm/int8/row/row", "mm/float16/row/row"]}}
    ranker = PositionRanker(_scores_favouring(choices, 2, 5.0))
    p = pruner(ranker, metadata=meta, policy="decide")
    assert p.filter(choices, inputs, "int_mm") == [choices[0]]
    meta["problem_ranges"]["kinds"].append("int_mm/int8/row/col")
    assert pruner(ranker, metadata=meta, policy="decide").filter(choices, inputs, "int_mm") == [choices[2]]


class FamilyRanker:
    """Scores aten rows 0 and every other row ``other`` (the last non-aten row ``other + 0.5``)."""

    name = "family"

    def __init__(self, other: float):
        self.other = other

    def score(self, rows, device):
        scores = np.where(rows["family"].to_numpy() == "aten", 0.0, self.other)
        non_aten = np.flatnonzero(rows["family"].to_numpy() != "aten")
        if len(non_aten):
            scores[non_aten[-1]] += 0.5
        return scores


def test_decide_keeps_one_choice_across_a_split_addmm_lowering():
    """torch >= 2.13 lowers addmm in three calls for the same operands: the aten choices (1-D bias), a contiguous-bias
    subgraph, the Triton templates. The aten call keeps one aten choice; the later calls keep nothing unless the
    model's Triton favourite beats cuBLAS (scored as a virtual aten candidate) by the decide gap (2.0 here)."""
    problem = Problem("addmm", 512, 768, 3072, "float16")
    a, b = FakeNode((512, 3072), (3072, 1)), FakeNode((3072, 768), (768, 1))
    aten_call = [ktc("aten::addmm"), ktc("aten::bias_addmm")]
    subgraph_call = [ktc("contiguous_addmm")]
    triton_call = [c for c in fake_choices(problem) if not c.template.uid.startswith("aten::")]
    bias_1d, bias_2d = FakeNode((768,), (1,)), FakeNode((512, 768), (0, 1))

    def lower(p):
        return [p.filter(aten_call, FakeInputs(a, b, bias=bias_1d), "addmm"),
                p.filter(subgraph_call, FakeInputs(a, b, bias=bias_2d), "addmm"),
                p.filter(triton_call, FakeInputs(a, b, bias=bias_2d), "addmm")]

    unsure = pruner(FamilyRanker(1.0), policy="decide", fallback="aten", decide_gap=2.0)
    kept = lower(unsure)
    assert len(kept[0]) == 1 and kept[1] == [] and kept[2] == []  # cuBLAS alone, nothing benchmarked
    sure = pruner(FamilyRanker(3.0), policy="decide", fallback="aten", decide_gap=2.0)
    kept = lower(sure)
    assert len(kept[0]) == 1 and kept[1] == [] and kept[2] == [triton_call[-1]]
    # a Triton-only list that does not follow an aten call for the same operands is not dropped
    other = pruner(FamilyRanker(1.0), policy="decide", fallback="aten", decide_gap=2.0)
    lone = other.filter(triton_call, FakeInputs(a, b, bias=bias_2d), "addmm")
    assert len(lone) == 1
    # tune=K: the same decision; where it is Triton, the model's top K of the Triton call (cuBLAS from the aten call)
    tuned = lower(pruner(FamilyRanker(3.0), policy="tune", top_k=2, fallback="aten", decide_gap=2.0))
    assert len(tuned[0]) == 1 and tuned[1] == [] and len(tuned[2]) == 2 and triton_call[-1] in tuned[2]
    assert lower(pruner(FamilyRanker(1.0), policy="tune", top_k=2, fallback="aten", decide_gap=2.0))[1:] == [[], []]
    # Inductor then hands the three calls' ChoiceCallers to its preprocessing step together: where the decision was
    # Triton, the aten call's cuBLAS choice is dropped there, so nothing (decide) or only Triton (tune) is benchmarked
    class ExternKernelCaller:  # named as Inductor's extern (aten) ChoiceCaller class
        input_nodes = (bias_1d, a, b)

    class TritonTemplateCaller:
        input_nodes = (bias_2d, a, b)

    callers = [ExternKernelCaller(), TritonTemplateCaller()]
    lower(sure)
    assert sure.preprocess(callers) == callers[1:]
    assert sure.preprocess(callers) == callers  # once: the next GEMM with these operands is decided afresh
    lower(unsure)
    assert unsure.preprocess(callers) == callers  # decided cuBLAS: it stays
    # torch 2.11's single call (aten and Triton together) is decided as before
    together = pruner(FamilyRanker(1.0), policy="decide", fallback="aten", decide_gap=2.0)
    assert together.filter(aten_call + triton_call, FakeInputs(a, b, bias=bias_2d), "addmm") in ([aten_call[0]],
                                                                                                  [aten_call[1]])


class SymbolicSize:
    """A size Inductor cannot turn into an int (a dynamic dimension); the graph's size hint is 512."""

    def __int__(self):
        raise TypeError("symbolic")


def test_decide_keeps_cublas_for_dynamic_shapes(monkeypatch):
    """One Triton config is chosen for one size hint but runs at every size; cuBLAS adapts to each call."""
    choices = fake_choices(PROBLEM)
    scores = np.zeros(len(choices))
    scores[3] = 5.0
    monkeypatch.setattr(gemm_inputs, "_hints", lambda exprs: tuple(512 if isinstance(x, SymbolicSize) else x for x in exprs))
    dynamic = FakeInputs(FakeNode((SymbolicSize(), 3072), (3072, 1)), FakeNode((3072, 768), (768, 1)))
    p = pruner(PositionRanker(scores), policy="decide")
    assert p.filter(choices, dynamic, "mm") == [choices[0]]
    assert p.filter(choices, mm_inputs(512, 768, 3072), "mm") == [choices[3]]


def test_a_failing_later_addmm_call_keeps_nothing_rather_than_every_triton_kernel(monkeypatch):
    """The aten choice of a split addmm was kept in the first call; an error in a later call must not fall back
    to that call's whole Triton list (no aten choice in it), which Inductor would then benchmark (full autotune)."""
    problem = Problem("addmm", 512, 768, 3072, "float16")
    a, b = FakeNode((512, 3072), (3072, 1)), FakeNode((3072, 768), (768, 1))
    triton_call = [c for c in fake_choices(problem) if not c.template.uid.startswith("aten::")]
    p = pruner(FamilyRanker(3.0), policy="decide", fallback="aten")
    assert len(p.filter([ktc("aten::addmm"), ktc("aten::bias_addmm")], FakeInputs(a, b, bias=FakeNode((768,), (1,))),
                        "addmm")) == 1
    p.ranker = RaisingRanker()
    p._scores.clear()
    assert p.filter(triton_call, FakeInputs(a, b, bias=FakeNode((512, 768), (0, 1))), "addmm") == []
    assert p.stats()["fallbacks"] == {"error": 1}


def test_a_later_addmm_call_keeps_cublas_for_float32_under_tf32(monkeypatch):
    """The split-addmm path applies the aten call's gates: float32 with TF32 on was never measured."""
    problem = Problem("addmm", 512, 768, 3072, "float32")
    a, b = FakeNode((512, 3072), (3072, 1), torch.float32), FakeNode((3072, 768), (768, 1), torch.float32)
    bias_1d, bias_2d = FakeNode((768,), (1,), torch.float32), FakeNode((512, 768), (0, 1), torch.float32)
    triton_call = [c for c in fake_choices(problem) if not c.template.uid.startswith("aten::")]
    monkeypatch.setattr(filtering, "tf32_enabled", lambda: False)
    from predictor.runtime.choices import split_addmm
    for tf32, expected in ((False, [triton_call[-1]]), (True, [])):
        monkeypatch.setattr(split_addmm, "tf32_enabled", lambda tf32=tf32: tf32)
        p = pruner(FamilyRanker(3.0), policy="decide", fallback="aten")
        p.filter([ktc("aten::addmm"), ktc("aten::bias_addmm")], FakeInputs(a, b, bias=bias_1d), "addmm")
        assert p.filter(triton_call, FakeInputs(a, b, bias=bias_2d), "addmm") == expected


def test_a_later_addmm_call_takes_the_same_gap_floors_as_the_aten_call(monkeypatch):
    """The split-addmm path decides with ``policy.decide_gap_for``, as one call does: a float32 Triton favourite half
    a point behind cuBLAS passes the default gap (-2.5) but not float32's floor (0.0)."""
    from predictor.runtime.choices import split_addmm
    from predictor.runtime.choices.policy import FLOAT32_GAP

    monkeypatch.setattr(split_addmm, "tf32_enabled", lambda: False)
    monkeypatch.setattr(filtering, "tf32_enabled", lambda: False)
    for dtype, expected in ((torch.float16, 1), (torch.float32, 0)):
        problem = Problem("addmm", 512, 768, 3072, str(dtype).removeprefix("torch."))
        a, b = FakeNode((512, 3072), (3072, 1), dtype), FakeNode((3072, 768), (768, 1), dtype)
        triton_call = [c for c in fake_choices(problem) if not c.template.uid.startswith("aten::")]
        p = pruner(FamilyRanker(-1.0), policy="decide", fallback="aten")  # the favourite scores -0.5
        assert FLOAT32_GAP > -0.5 > p.settings.decide_gap
        p.filter([ktc("aten::addmm"), ktc("aten::bias_addmm")], FakeInputs(a, b, bias=FakeNode((768,), (1,), dtype)),
                 "addmm")
        kept = p.filter(triton_call, FakeInputs(a, b, bias=FakeNode((512, 768), (0, 1), dtype)), "addmm")
        assert len(kept) == expected, dtype


def test_tf32_read_through_the_per_backend_precision_api():
    """torch >= 2.9's ``torch.backends.cuda.matmul.fp32_precision`` makes ``get_float32_matmul_precision`` raise."""
    import subprocess
    import sys

    code = ("import torch; torch.backends.cuda.matmul.fp32_precision = 'tf32'; "
            "from predictor.runtime.compile_state import tf32_enabled; print(tf32_enabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_split_addmm_is_tied_to_the_node_being_lowered(monkeypatch):
    """Operand names, sizes and strides repeat across graphs: a Triton-only addmm list of another lowering (the model
    compiled again with aten GEMMs off) must not be taken for the later part of an earlier aten call, which would
    leave Inductor no choice at all (NoValidChoicesError)."""
    from predictor.runtime.choices import split_addmm

    problem = Problem("addmm", 512, 768, 3072, "float16")
    a, b = FakeNode((512, 3072), (3072, 1)), FakeNode((3072, 768), (768, 1))
    triton_call = [c for c in fake_choices(problem) if not c.template.uid.startswith("aten::")]
    class Node:  # an FX node stand-in (weak-referenceable, as torch.fx.Node is)
        name = "addmm"

    first, second = Node(), Node()
    p = pruner(FamilyRanker(1.0), policy="decide", fallback="aten", decide_gap=2.0)
    monkeypatch.setattr(split_addmm, "_lowering_node", lambda: first)
    p.filter([ktc("aten::addmm"), ktc("aten::bias_addmm")], FakeInputs(a, b, bias=FakeNode((768,), (1,))), "addmm")
    assert p.filter(triton_call, FakeInputs(a, b, bias=FakeNode((512, 768), (0, 1))), "addmm") == []  # same lowering
    monkeypatch.setattr(split_addmm, "_lowering_node", lambda: second)
    assert len(p.filter(triton_call, FakeInputs(a, b, bias=FakeNode((512, 768), (0, 1))), "addmm")) == 1


def test_quantized_gemms_never_take_triton_behind_cublas():
    from predictor.runtime.choices.policy import DECIDE_MIN_GAP, decide_gap_for

    def problem(op: str, m: int = 512, k: int = 4096) -> Problem:
        dtype = {"int_mm": "int8", "scaled_mm_rowwise": "float8_e4m3fn", "scaled_mm_tensorwise": "float8_e4m3fn"}
        return Problem(op, m, 1024, k, dtype.get(op, "bfloat16"))

    assert DECIDE_MIN_GAP < 0  # fp16/bf16: a near tie goes to Triton (measured in whole steps)
    assert decide_gap_for(problem("mm"), DECIDE_MIN_GAP) == DECIDE_MIN_GAP == decide_gap_for(problem("bmm"), DECIDE_MIN_GAP)
    for op in ("int_mm", "scaled_mm_rowwise", "scaled_mm_tensorwise"):
        assert decide_gap_for(problem(op), DECIDE_MIN_GAP) == 0.0 and decide_gap_for(problem(op), 2.0) == 2.0


def test_float32_gemms_take_triton_only_where_the_model_favours_it():
    from predictor.runtime.choices.policy import DECIDE_MIN_GAP, FLOAT32_GAP, decide_gap_for, decide_one

    fp32 = Problem("mm", 8, 3072, 768, "float32")
    assert decide_gap_for(fp32, DECIDE_MIN_GAP) == FLOAT32_GAP == 0.0
    assert decide_gap_for(fp32, 1.5) == 1.5  # a stricter gap given by the user stays
    assert decide_gap_for(Problem("mm", 8, 3072, 768, "bfloat16"), DECIDE_MIN_GAP) == DECIDE_MIN_GAP
    # attention's fp32 bmm keeps the margin (in whole steps Triton fused the softmax's work and won)
    assert decide_gap_for(Problem("bmm", 128, 128, 64, "float32", b=12), DECIDE_MIN_GAP) == DECIDE_MIN_GAP
    trailing = np.array([2.0, 1.0])  # Triton 1.0 behind cuBLAS: a near tie, taken for bf16, not for fp32
    assert decide_one(trailing, [True, False], True, decide_gap_for(fp32, DECIDE_MIN_GAP)) == 0
    assert decide_one(trailing, [True, False], True, DECIDE_MIN_GAP) == 1


def test_the_float32_floor_keeps_cublas_where_the_labels_say_triton_trails_it():
    """On the shipped H200 labels' held-out fp32 problems the floor lifts the decide policy's oracle (gap -2.5 picks
    Triton favourites that trail cuBLAS in score and run slower than it)."""
    from predictor.offline.metrics import decision_sides
    from predictor.artifacts.model_folder import load_model
    from predictor.core.device import DeviceInfo
    from predictor.offline.split import in_groups, recorded_test_groups
    from predictor.runtime.choices.policy import DECIDE_MIN_GAP, FLOAT32_GAP
    from predictor.artifacts.schema import read_dataset

    root = Path(__file__).resolve().parents[1]
    ranker, meta = load_model(root / "models" / "h200-default-lgbm")
    rows = read_dataset(root / "datasets" / "nvidia-h200" / "default.parquet")
    rows = rows[(rows.dtype == "float32") & in_groups(rows, recorded_test_groups(meta)) & (rows.status == "ok")]
    rows = rows.reset_index(drop=True)
    rows["score"] = ranker.score(rows, DeviceInfo.from_metadata(meta))
    p = decision_sides(rows)

    def oracle(gap: float) -> float:
        return float(np.exp(np.log(p.best_us / np.where(p.gap >= gap, p.time_us, p.time_us_aten)).mean()))

    assert len(p) > 100 and oracle(FLOAT32_GAP) > oracle(DECIDE_MIN_GAP) + 0.02


def test_few_rows_with_a_long_k_keep_cublas_unless_triton_clearly_leads():
    from predictor.runtime.choices.policy import SMALL_M_LONG_K_GAP, decide_gap_for, decide_one

    decode_down = Problem("mm", 8, 2048, 5632, "bfloat16")  # a decode step's down projection: cuBLAS splits K
    assert decide_gap_for(decode_down, -1.5) == SMALL_M_LONG_K_GAP == 2.0
    assert decide_gap_for(Problem("mm", 257, 2048, 5632, "bfloat16"), -1.5) == -1.5  # enough rows
    assert decide_gap_for(Problem("mm", 8, 2048, 3072, "bfloat16"), -1.5) == -1.5  # K not long
    assert decide_gap_for(decode_down, 3.0) == 3.0  # a stricter gap given by the user stays
    scores, is_aten = np.array([1.0, 2.0]), [True, False]  # Triton ahead by 1.0: taken, except at a long K
    assert decide_one(scores, is_aten, True, decide_gap_for(Problem("mm", 8, 2048, 2048, "bfloat16"), -1.5)) == 1
    assert decide_one(scores, is_aten, True, decide_gap_for(decode_down, -1.5)) == 0
    assert decide_one(np.array([1.0, 3.5]), is_aten, True, decide_gap_for(decode_down, -1.5)) == 1
