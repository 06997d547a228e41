"""Benchmarks run as modules of the ``benchmarks`` package (``python -m benchmarks.<name>``): none patches
``sys.path`` or imports from ``tests/``, and each docstring gives the module command (issue 18)."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_benchmarks_run_as_modules_without_path_patches():
    scripts = sorted(p for p in BENCHMARKS.rglob("*.py") if p.name != "__init__.py")
    assert scripts
    for path in scripts:
        text = path.read_text()
        assert "sys.path.insert" not in text and "sys.path.append" not in text, path
        assert not re.search(r"^\s*from (tests\.)?synthetic import", text, re.M), path
        assert "python benchmarks/" not in text, f"{path}: give the command as python -m benchmarks.{path.stem}"


def test_benchmarks_hold_only_what_a_user_reruns():
    """At most 8 top-level scripts beside the zoo and serving packages, and none over 400 lines anywhere in
    benchmarks/ or collectors/ (a bigger one is two modules)."""
    top = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top
    assert {p.name for p in BENCHMARKS.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {"zoo", "serving"}
    for path in [*BENCHMARKS.rglob("*.py"), *(BENCHMARKS.parent / "collectors").rglob("*.py")]:
        assert len(path.read_text().splitlines()) <= 400, path
