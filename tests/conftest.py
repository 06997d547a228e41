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
