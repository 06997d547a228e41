"""Fixtures shared by several test files."""

import pytest


@pytest.fixture
def fresh_walker(monkeypatch, tmp_path):
    """The walker module as in a new process, its cache under ``tmp_path``; reset again afterwards."""
    from predictor.artifacts import compiled_walk

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(compiled_walk.WALK_ENV, raising=False)
    compiled_walk.reset()
    yield tmp_path / "cache" / "gemm-predictor"
    compiled_walk.reset()


@pytest.fixture
def no_compile_caches():
    """Inductor's FX graph cache and AOTAutograd's cache off for one test (a cached graph is not lowered again).

    Through the configs' own ``patch``: pytest's monkeypatch undoes a setattr on them with a ``delattr`` (pytest 9.2),
    which torch's config module takes as the option's removal, and every later compile in that process fails."""
    import torch

    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        yield
