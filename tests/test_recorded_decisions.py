"""The hook decides as it did before issue 18's speed-ups (faster tree walk, features and list cache), and as
LightGBM's own predictor would make it decide.

``tests/data/recorded_decisions.json`` holds, for every list Inductor 2.11 recorded on the H200 (4 to 1401 choices),
each shipped model's kept choices under three settings and its five favourites with their scores, as the hook of
commit 0d75e2e (before the speed-ups) made them. Re-record only on purpose: ``python tests/test_recorded_decisions.py``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from predictor.artifacts.model_folder import load_model, load_runtime_model, read_metadata
from predictor.core.candidate import to_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.runtime.choices import policy
from predictor.runtime.choices.pruner import GemmPruner, HookSettings
from predictor.spaces import enumerate_space
from predictor.testing.fakes import FakeInputs, FakeNode, ktc, mm_inputs

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "data" / "inductor_choices_h200_torch211.json"
FIXTURE = ROOT / "tests" / "data" / "recorded_decisions.json"
SETTINGS = {"prune": {"top_k": 5}, "wide": {"top_k": 8, "margin": None, "min_confidence": 0.5},
            # the gap the fixture was recorded with (the default was 0.0 then): decisions, not the policy, are pinned
            "decide": {"policy": "decide", "decide_gap": 0.0}}
TOP = 5


def shipped_models() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "models").glob("*/metadata.json"))


def recorded_lists() -> list[tuple[str, list, FakeInputs]]:
    """Every recorded lowering as (op, KernelTemplateChoice stand-ins, kernel inputs); the dynamic M reads 2048."""
    out = []
    for case in json.loads(RECORDING.read_text())["cases"]:
        for record in case.get("records", []):
            nodes = [FakeNode([int(x) if x.isdigit() else 2048 for x in size], [int(x) for x in stride],
                              getattr(torch, dtype.removeprefix("torch.")))
                     for size, stride, dtype in zip(record["shapes"], record["strides"], record["dtypes"], strict=True)]
            out_dtype = torch.int32 if record["op"] == "int_mm" else None
            inputs = FakeInputs(*nodes[-2:], out_dtype=out_dtype, bias=nodes[0] if len(nodes) == 3 else None)
            out.append((record["op"], [ktc(ch["uid"], **ch["kw"]) for ch in record["choices"]], inputs))
    return out


def decisions(model: str, lists: list) -> list[dict]:
    """Per list: the kept choices (indices) under each of ``SETTINGS`` and the ``TOP`` best scores (index, score)."""
    folder = ROOT / "models" / model
    device = DeviceInfo.from_metadata(read_metadata(folder))
    # loaded as install() and predictor.compile load it (a LightGBM model as a numpy forest, a tree as itself)
    pruners = {name: GemmPruner(HookSettings(model=str(folder), device=device, **kw), load=load_runtime_model).load()
               for name, kw in SETTINGS.items()}
    out = []
    for op, choices, inputs in lists:
        entry = {}
        for name, pruner in pruners.items():
            kept = pruner.filter(choices, inputs, op)
            entry[name] = [next(i for i, c in enumerate(choices) if c is k) for k in kept]
        scores = next(iter(pruners["prune"]._scores.values()), None)  # None: passed through, never scored
        pruners["prune"]._scores.clear()
        if scores is not None:
            best = np.argsort(-scores, kind="stable")[:TOP]
            entry["top"] = [[int(i), round(float(scores[i]), 9)] for i in best]
        out.append(entry)
    return out


def record() -> None:
    lists = recorded_lists()
    FIXTURE.write_text(json.dumps({m: decisions(m, lists) for m in shipped_models()}, indent=0) + "\n")
    print(f"recorded {len(lists)} lists x {len(shipped_models())} models to {FIXTURE}")


@pytest.fixture(scope="module")
def lists() -> list:
    return recorded_lists()


@pytest.mark.skipif(not FIXTURE.exists(), reason="no recorded decisions")
@pytest.mark.parametrize("model", sorted(json.loads(FIXTURE.read_text())) if FIXTURE.exists() else [])
def test_recorded_lists_decide_as_before(model, lists, monkeypatch):
    # the floor for few rows with a long K (the gap -2.5 runs) came after the recording: off, as the gap is pinned
    monkeypatch.setattr(policy, "SMALL_M_LONG_K", (0, float("inf")))
    recorded = json.loads(FIXTURE.read_text())[model]
    now = decisions(model, lists)
    assert len(now) == len(recorded) == len(lists)
    for i, (before, after) in enumerate(zip(recorded, now, strict=True)):
        assert {name: before[name] for name in SETTINGS} == {name: after[name] for name in SETTINGS}, f"list {i}"
        assert ("top" in before) == ("top" in after), f"list {i}"
        if "top" in before:  # the same favourites, scores equal to rounding
            assert [j for j, _ in before["top"]] == [j for j, _ in after["top"]], f"list {i}"
            np.testing.assert_allclose([s for _, s in after["top"]], [s for _, s in before["top"]], atol=1e-8)


def test_every_shipped_model_is_recorded():
    assert sorted(json.loads(FIXTURE.read_text())) == shipped_models()


@pytest.mark.parametrize("model", ["h200-default-lgbm-all", "h100-default-lgbm-all"])
def test_random_lists_decide_as_with_lightgbm(model):
    """Random sublists (shuffled) of the default and exhaustive spaces for random problems: the hook's numpy scorer
    keeps and decides exactly what it keeps and decides with LightGBM's predictor in its place."""
    folder = ROOT / "models" / model
    device = DeviceInfo.from_metadata(read_metadata(folder))
    reference, meta = load_model(folder, expect_device=device)
    rng = random.Random(0)
    for trial in range(12):
        m, n, k = (rng.choice([1, 16, 100, 333, 1024, 4096, 7000]) for _ in range(3))
        problem = Problem("mm", m, n, k, rng.choice(["float16", "bfloat16"]))
        cands = list(enumerate_space(problem, "exhaustive" if trial % 3 == 0 else "default", device, tma=True))
        cands = rng.sample(cands, rng.randint(min(2, len(cands)), len(cands)))
        choices = [ktc(uid, **kw) for uid, kw in map(to_template_kwargs, cands)]
        inputs = mm_inputs(m, n, k, getattr(torch, problem.dtype))
        for kw in SETTINGS.values():
            settings = HookSettings(model=str(folder), device=device, **kw)
            fast = GemmPruner(settings, load=load_runtime_model).load()
            slow = GemmPruner(settings, ranker=reference, metadata=meta)
            kept = [list(map(id, pruner.filter(choices, inputs, "mm"))) for pruner in (fast, slow)]
            assert kept[0] == kept[1], (problem, len(cands), kw)


if __name__ == "__main__":
    record()
