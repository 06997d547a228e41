"""The folder says the room (issue 18): ``predictor/runtime`` is what the hook needs at compile time,
``predictor/offline`` trains, calibrates and evaluates, the top level is the core both use. Offline may import
runtime and core, never the reverse; and no module grows past 500 lines."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "predictor"
# never imported at import time by runtime or core modules: the offline room, GPU collection, and the
# libraries that cost a compile's start (pandas alone is a quarter of a second)
FORBIDDEN = ("predictor.offline", "collectors", "matplotlib", "sklearn", "scipy", "pandas", "pyarrow", "lightgbm")
# core modules that may: rankers/ is the fit side (the sklearn estimator API over scikit-learn and LightGBM;
# the hook scores with predictor.artifacts.lgbm_text and never imports it), testing/synthetic builds DataFrames
EXEMPT = ("predictor.rankers", "predictor.testing.synthetic")
MAX_LINES = 500


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_and_core() -> list[str]:
    modules = [_module(p) for p in sorted(PACKAGE.rglob("*.py"))]
    return [m for m in modules if not m.startswith("predictor.offline")
            and not any(m == e or m.startswith(e + ".") for e in EXEMPT)]


def test_the_rooms_exist():
    rooms = {name: {p.stem for p in (PACKAGE / name).glob("*.py")} - {"__init__"}
             for name in ("runtime", "runtime/choices", "runtime/lowerings", "runtime/dynamic", "offline", "core",
                          "artifacts")}
    assert {"compile", "backend", "install", "registry", "compile_state"} <= rooms["runtime"]
    assert {"pruner", "policy", "settings", "discovery", "inductor"} <= rooms["runtime/choices"]
    assert {"gemv", "gemv_blocks", "few_rows", "patchify", "pad_k", "grouped_mm", "conv", "addmm_bias", "base",
            "tables"} <= rooms["runtime/lowerings"]
    assert {"size_ranges", "hints", "dynamic_hints"} <= rooms["runtime/dynamic"]
    assert {"train", "evaluate", "calibrate_fit", "report", "export"} <= rooms["offline"]
    assert {"problem", "candidate", "device", "features", "feature_names", "runtime_features", "regions"} <= rooms["core"]
    assert {"model_folder", "model_check", "metadata", "roots", "lgbm_text", "text_forest", "compiled_walk", "atomic",
            "schema"} <= rooms["artifacts"]
    assert (PACKAGE / "artifacts" / "tree_walk.c").is_file()
    # the root holds the package's face and the CLI only
    assert {p.stem for p in PACKAGE.glob("*.py")} == {"__init__", "cli"}
    names = [n for room in rooms.values() for n in room]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []  # one home per module name


def test_runtime_and_core_import_nothing_offline_at_import_time():
    """One fresh interpreter per module: what importing it leaves in ``sys.modules``."""
    def imported(module: str) -> tuple[str, list[str]]:
        code = (f"import sys, json, {module}\n"
                f"print(json.dumps(sorted({{f for f in {FORBIDDEN!r} for n in sys.modules "
                f"if n == f or n.startswith(f + '.')}})))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return module, json.loads(out.stdout.strip().splitlines()[-1])

    modules = _runtime_and_core()
    assert "predictor.runtime.choices.pruner" in modules and "predictor.core.features" in modules
    with ThreadPoolExecutor(4) as pool:
        offenders = {m: found for m, found in pool.map(imported, modules) if found}
    assert offenders == {}


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, anywhere in it (at import time or inside a function), as absolute names."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("path", sorted((PACKAGE / "runtime").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE / "runtime")))
def test_runtime_never_imports_offline_even_lazily(path):
    bad = [m for m in _imports(path) if m.split(".")[0] == "collectors" or m.startswith("predictor.offline")]
    assert bad == []


def test_the_package_never_imports_collectors():
    """``predictor/`` runs without the GPU collection code (the CLI adds its subcommands by name, if present)."""
    bad = {_module(p): m for p in PACKAGE.rglob("*.py") for m in _imports(p) if m.split(".")[0] == "collectors"}
    assert bad == {}


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
