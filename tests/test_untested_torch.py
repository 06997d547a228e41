"""A torch newer than every tested release gets one warning line and plain torch.compile's choices, never a kernel
chosen through lists or lowerings nobody checked on that release."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch

from predictor.core.candidate import to_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem
from predictor.artifacts.metadata import read_metadata
from predictor.runtime.choices.pruner import GemmPruner, HookSettings
from predictor.spaces import FROZEN, configs, enumerate_space
from predictor.spaces.configs import newest_tested, untested_torch
from predictor.testing import fakes

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "h200-default-lgbm-all"
PROBLEM = Problem("mm", 512, 768, 3072, "float16")
DEVICE = DeviceInfo.from_metadata(read_metadata(SHIPPED))


def fake_choices(problem: Problem) -> list:
    """Inductor-like KernelTemplateChoices for the space the shipped model was trained on (aten first)."""
    out = []
    for c in enumerate_space(problem, "default", DEVICE):
        uid, kwargs = to_template_kwargs(c, None)
        out.append(fakes.ktc(uid, **kwargs))
    return out


def mm_inputs(m: int, n: int, k: int):
    return fakes.mm_inputs(m, n, k, torch.float16)


@contextlib.contextmanager
def _reporting_a_newer_torch() -> Iterator[str]:
    """The installed torch reporting a release one minor past the newest tested one; no warning given yet."""
    major, minor = (int(p) for p in newest_tested().split("."))
    with mock.patch.object(torch, "__version__", f"{major}.{minor + 1}.0+cu130"), \
            mock.patch.object(configs, "_warned", set()):
        yield torch.__version__


@pytest.fixture
def newer_torch():
    with _reporting_a_newer_torch() as version:
        yield version


def test_only_a_release_past_every_frozen_copy_is_untested():
    newest = newest_tested()
    assert newest == max(FROZEN, key=lambda v: tuple(map(int, v.split("."))))
    assert untested_torch(f"{newest}.7+cpu") is None and untested_torch("2.11.0") is None
    major, minor = (int(p) for p in newest.split("."))
    line = untested_torch(f"{major}.{minor + 1}.0")
    assert line is not None and "\n" not in line and f"torch {major}.{minor + 1}.0 is newer" in line
    assert "plain torch.compile's choice" in line and newest in line
    assert untested_torch(f"{major + 1}.0.0") is not None


def _shipped_pruner() -> GemmPruner:
    return GemmPruner(HookSettings(model=str(SHIPPED), top_k=5, device=DEVICE))


def test_the_tested_torch_prunes_with_the_shipped_model():
    p = _shipped_pruner().load()
    assert p.disabled is None
    choices = fake_choices(PROBLEM)
    assert len(p.filter(choices, mm_inputs(512, 768, 3072), "mm")) < len(choices)


def test_a_newer_torch_gets_plains_choice_and_one_line(newer_torch, caplog):
    choices = fake_choices(PROBLEM)
    with caplog.at_level(logging.WARNING):
        p = _shipped_pruner().load()
        kept = [p.filter(choices, mm_inputs(512, 768, 3072), "mm") for _ in range(3)]
        second = _shipped_pruner().load()  # another hook in the same process: no second line
    assert p.disabled == "untested_torch" and second.disabled == "untested_torch"
    assert all(k == [choices[0]] for k in kept) and choices[0].template.uid == "aten::mm"  # aten alone, as plain
    assert p.stats()["fallbacks"] == {"untested_torch": 3}
    lines = [r.getMessage() for r in caplog.records if "newer than every torch" in r.getMessage()]
    assert lines == [f"gemm-predictor: {untested_torch(newer_torch)}"]


@pytest.mark.parametrize("newer", [False, True])
def test_a_newer_torch_compiles_without_the_rewrites(monkeypatch, no_compile_caches, caplog, newer):
    """The short-K padding (made to act on CPU float64 here) is one of the rewrites of what Inductor sees: on a
    tested torch the compile pads, on a newer one it multiplies as plain does, output unchanged."""
    import predictor
    from predictor.runtime.lowerings import pad_k
    from predictor.runtime.choices import installed

    stack = contextlib.ExitStack()
    if newer:
        stack.enter_context(_reporting_a_newer_torch())

    monkeypatch.setattr(pad_k, "DEVICES", ("cpu",))
    monkeypatch.setattr(pad_k, "DTYPES", ("float64",))
    monkeypatch.setattr(pad_k, "MIN_MNK", 0)
    torch.manual_seed(0)
    module, x = torch.nn.Linear(13, 24).double().eval(), torch.randn(8, 13, dtype=torch.float64)
    before = pad_k.padded_k_count()
    torch._dynamo.reset()
    try:
        with torch.no_grad(), caplog.at_level(logging.WARNING):
            torch.testing.assert_close(predictor.compile(module, cudagraphs=False)(x), module(x))
    finally:
        torch._dynamo.reset()
        while installed._STACK:
            predictor.uninstall()
        stack.close()
    assert pad_k.padded_k_count() - before == (0 if newer else 1)
    assert sum("newer than every torch" in r.getMessage() for r in caplog.records) == (1 if newer else 0)
