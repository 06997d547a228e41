"""A lowering is one module and one registry entry (docs/ARCHITECTURE.md, "Adding a lowering"): registered, it
takes effect in a CPU compile through ``predictor.compile`` and changes the cache-key digest."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

import example_lowering
import predictor
from predictor.runtime import compile, registry
from predictor.runtime.choices.settings import HookSettings


@pytest.fixture()
def registered(monkeypatch):
    """The registry with the example appended: the one line a new lowering adds to ``LOWERINGS``."""
    monkeypatch.setattr(registry, "LOWERINGS", [*registry.LOWERINGS, example_lowering.LOWERING])
    example_lowering.SEEN.clear()
    yield example_lowering.LOWERING
    torch._dynamo.reset()
    predictor.uninstall()


def test_a_registered_lowering_takes_effect_in_a_cpu_compile(registered, no_compile_caches):
    torch._dynamo.reset()
    a, b = torch.randn(6, 10), torch.randn(10, 3)
    out = predictor.compile(lambda x, y: (x @ y).relu(), cudagraphs=False)(a, b)
    torch.testing.assert_close(out, (a @ b).relu())
    assert (6, 10, 3) in example_lowering.SEEN


def test_an_unregistered_lowering_is_never_entered(monkeypatch, no_compile_caches):
    example_lowering.SEEN.clear()
    torch._dynamo.reset()
    a, b = torch.randn(5, 7), torch.randn(7, 2)
    predictor.compile(lambda x, y: (x @ y).relu(), cudagraphs=False)(a, b)
    predictor.uninstall()
    assert example_lowering.SEEN == []


def test_a_registered_lowering_changes_the_cache_key(monkeypatch):
    pruner = compile.pruner_for(HookSettings())  # the pruner predictor.compile makes for these settings
    before_digest, before_uuid, before_pickle = registry.digest(), pruner.uuid(), pickle.dumps(pruner)
    monkeypatch.setattr(registry, "LOWERINGS", [*registry.LOWERINGS, example_lowering.LOWERING])
    assert registry.digest() != before_digest
    assert pruner.uuid() != before_uuid  # torch 2.13's key
    assert pickle.dumps(pruner) != before_pickle  # torch 2.11's key
    # and its share: a changed table or rule behind it changes the digest again
    changed = dataclasses.replace(example_lowering.LOWERING, cache_key=lambda: "another table")
    monkeypatch.setattr(registry, "LOWERINGS", [*registry.LOWERINGS[:-1], changed])
    assert registry.digest() not in (before_digest,)
    assert registry.digest() != registry.digest([*registry.LOWERINGS[:-1], example_lowering.LOWERING])


def test_a_lowering_names_only_flags_that_exist():
    with pytest.raises(ValueError, match="reads unknown flag"):
        registry.Lowering("bad", "nothing", "trace", lambda f: None, __name__, reads=("no_such_flag",))
    with pytest.raises(ValueError, match="unknown stage"):
        registry.Lowering("bad", "nothing", "codegen", lambda f: None, __name__)


def test_every_registered_lowering_is_a_module_of_the_runtime():
    names = [lw.name for lw in registry.LOWERINGS]
    assert len(names) == len(set(names))
    for lw in registry.LOWERINGS:
        assert lw.module.startswith(("predictor.runtime.lowerings.", "predictor.runtime.dynamic.")), lw.name
        assert len(registry.source_digest(lw.module)) == 16
