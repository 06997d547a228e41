"""The hook's numpy features (``runtime_feature_matrix``) equal the offline DataFrame path (``feature_matrix``) bit
for bit: on every list Inductor recorded, with multi-kernel hints, and on the H200 dataset's own rows (arrow-backed
columns, the path training and evaluation take). The shipped models were trained on the offline values, so any
difference would change the hook's rankings."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from predictor.testing.synthetic import METADATA

from predictor.core import runtime_features
from predictor.core.candidate import CANDIDATE_FIELDS, Candidate, from_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.features import feature_matrix, ranker_rows
from predictor.core.runtime_features import runtime_feature_matrix
from predictor.core.problem import Problem, problem_from_row
from predictor.artifacts.schema import read_dataset

ROOT = Path(__file__).resolve().parents[1]
RECORDING = json.loads((ROOT / "tests" / "data" / "inductor_choices_h200_torch211.json").read_text())
DEVICE = DeviceInfo.from_metadata(METADATA)


def _recorded_lists() -> list[tuple[Problem, list[Candidate], list[int | None]]]:
    """Each recorded lowering as (problem, candidates, hints); sizes from the recorded inputs (addmm: bias first)."""
    out = []
    for case in RECORDING["cases"]:
        for record in case.get("records", []):
            (a_size, b_size) = record["shapes"][-2:]
            m = int(a_size[-2]) if a_size[-2].isdigit() else 2048  # the dynamic-M (hints) case: any size hint
            problem = Problem(case["op"], m=m, n=int(b_size[-1]), k=int(a_size[-1]),
                              dtype=case["dtype"].removeprefix("torch."),
                              b=int(a_size[0]) if case["op"] == "bmm" else 1, layout_a=case.get("la", "row"), layout_b=case.get("lb", "row"))
            cands = [from_template_kwargs(ch["uid"], ch["kw"]) for ch in record["choices"]]
            out.append((problem, cands, [ch["kw"].get("hint_override") for ch in record["choices"]]))
    return out


RECORDED = _recorded_lists()


def _assert_same(problem: Problem, cands: list[Candidate], hints: list[int | None], device: DeviceInfo) -> None:
    offline = feature_matrix(ranker_rows(problem, cands, hints), device)
    runtime = runtime_feature_matrix(problem, cands, hints, device)
    assert runtime.dtype == offline.dtype == np.float32 and runtime.shape == offline.shape
    assert np.array_equal(runtime, offline), f"{problem}: features differ"


def test_recorded_lists_are_many():
    assert len(RECORDED) >= 100 and max(len(c) for _, c, _ in RECORDED) >= 1401
    assert any(h is not None for _, _, hints in RECORDED for h in hints)  # the multi-kernel hints case


@pytest.mark.parametrize("device_name", ["synthetic", "no measurements"])
def test_recorded_inductor_lists(device_name):
    """Every recorded list; also with a device lacking peaks and bandwidth (the features' fallback constants)."""
    device = DEVICE if device_name == "synthetic" else DeviceInfo(gpu="x", cc="9.0", sm_count=132, smem_per_block=232448,
                                                                  l2_bytes=0, mem_bandwidth_gbs=0.0)
    for problem, cands, hints in RECORDED:
        _assert_same(problem, cands, hints, device)


def test_hints_subsets_and_odd_lists():
    """Hints on some choices (M an array), hints all equal (M one value again), one choice, one family."""
    rng = random.Random(0)
    for problem, cands, _ in RECORDED[::7]:
        mixed = [rng.choice([None, 1, 64, 4096, 8192]) for _ in cands]
        _assert_same(problem, cands, mixed, DEVICE)
        _assert_same(problem, cands, [256] * len(cands), DEVICE)
        _assert_same(problem, cands[:1], [None], DEVICE)
        tiles = [c for c in cands if c.family == "triton_mm"]
        if tiles:
            _assert_same(problem, tiles, [None] * len(tiles), DEVICE)
    assert runtime_feature_matrix(RECORDED[0][0], [], [], DEVICE).shape == feature_matrix(
        ranker_rows(RECORDED[0][0], [], []), DEVICE).shape


def test_dataset_rows():
    """The H200 dataset's rows as training reads them (arrow-backed strings) against the runtime path, per problem."""
    rows = read_dataset(ROOT / "datasets" / "nvidia-h200" / "default.parquet")
    chosen = sorted(rows["problem_id"].unique())[::40]
    rows = rows[rows["problem_id"].isin(chosen)]
    assert len(chosen) >= 50
    for _, group in rows.groupby("problem_id", sort=False):
        problem = problem_from_row(next(group.itertuples()))
        cands = [Candidate(**{f: (str(v) if f in ("family", "aten_op") else int(v)) for f, v in zip(
            CANDIDATE_FIELDS, values, strict=True)}) for values in group[list(CANDIDATE_FIELDS)].itertuples(index=False)]
        offline = feature_matrix(group.reset_index(drop=True), DEVICE)
        assert np.array_equal(runtime_feature_matrix(problem, cands, [None] * len(cands), DEVICE), offline), problem


def test_a_list_seen_before_is_reused_for_other_problems(monkeypatch):
    """The hook shares Candidates between GEMMs and ``runtime_feature_matrix`` keeps each list's candidate columns
    (by the Candidates' identity): a list reused for other problems, sizes and hints still gives the offline
    features; equal but distinct Candidates, or another order, are another list; the cache stays bounded."""
    monkeypatch.setattr(runtime_features, "_LISTS", {})
    problem, cands, hints = max(RECORDED, key=lambda r: len({c.family for c in r[1]}))
    for other in (problem, replace(problem, m=7, n=300), replace(problem, k=4096, dtype="bfloat16")):
        _assert_same(other, cands, hints, DEVICE)
        _assert_same(other, cands, [64] * len(cands), DEVICE)
    assert len(runtime_features._LISTS) == 1
    _assert_same(problem, [replace(c) for c in cands], hints, DEVICE)  # equal, not the same objects
    _assert_same(problem, cands[::-1], hints[::-1], DEVICE)
    assert len(runtime_features._LISTS) == 3
    for problem, cands, hints in RECORDED[:runtime_features._LISTS_SIZE + 5]:
        _assert_same(problem, cands, hints, DEVICE)
    assert len(runtime_features._LISTS) <= runtime_features._LISTS_SIZE
