"""A wheel built from the repo carries the shipped models, and the package installed from it prunes (issue 18).

Builds the wheel (no build isolation: no network), installs it into a fresh venv and runs the hook there on
recorded Inductor choice lists, from a temporary working directory so the checkout is not importable. The venv
sees this interpreter's site-packages (torch, numpy) through a plain path in a ``.pth`` file: unlike
``--system-site-packages`` that does not run the ``.pth`` files there, one of which may be an editable install
of a checkout that would shadow the wheel. About 15 s on the CPU machine.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "data" / "inductor_choices_h200_torch211.json"
MAX_WHEEL_BYTES = 5 * 2**20  # the models are ~3.6 MB unpacked; the datasets alone would push it past this
MODEL_FILES = {"metadata.json", "MODEL_CARD.md"}

# Runs in the venv and in the checkout: which package and model it finds, and which recorded choices it keeps.
PROBE = r'''
import json, sys
from pathlib import Path
import torch
import predictor
from predictor.core.device import DeviceInfo
from predictor.runtime.choices import discovery
from predictor.testing.fakes import FakeInputs, FakeNode, ktc

recording = json.loads(Path(sys.argv[1]).read_text())
info = recording["info"]
h200 = DeviceInfo(gpu="NVIDIA H200", cc="9.0", sm_count=info["sms"], smem_per_block=info["smem_optin"],
                  l2_bytes=info["l2"], mem_bandwidth_gbs=4800.0)
found = discovery.find_model(h200)
kept = {}
with predictor.pruning(_device=h200) as pruner:
    for i, case in enumerate(recording["cases"]):
        if "error" in case or case.get("hints") or case["op"] != "mm" or case.get("space", "default") != "default":
            continue
        record = case["records"][0]
        dtype = getattr(torch, case["dtype"].removeprefix("torch."))
        a, b = (FakeNode([int(s) for s in size], [int(s) for s in stride], dtype)
                for size, stride in zip(record["shapes"], record["strides"]))
        choices = [ktc(ch["uid"], **ch["kw"]) for ch in record["choices"]]
        out = pruner.filter(choices, FakeInputs(a, b), "mm")
        kept[i] = [choices.index(c) for c in out]
    model = str(pruner.model_path)
print(json.dumps({"file": predictor.__file__, "roots": [str(r) for r in discovery.model_roots()],
                  "found": str(found), "model": model, "kept": kept}))
'''


def _run(python: Path | str, cwd: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([str(python), "-c", PROBE, str(RECORDING)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Not copied to the build: an in-tree build reuses ./build, whose stale files (a module since moved) would ride
# along, and the datasets are no package data.
_NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "reports",
                                     "datasets", "*.whl")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools", minversion="68")
    source, dist = tmp_path_factory.mktemp("source") / "repo", tmp_path_factory.mktemp("dist")
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(dist)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = dist.glob("gemm_predictor-*.whl")
    return built


def test_wheel_carries_the_models_and_not_the_datasets(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in (ROOT / "models").iterdir() if (p / "metadata.json").is_file())
    assert shipped, "no shipped models in the checkout"
    for name in shipped:
        packaged = {n.rsplit("/", 1)[-1] for n in names if n.startswith(f"predictor/models/{name}/")}
        assert MODEL_FILES <= packaged and packaged & {"model.lgbm.txt", "model.json"}, (name, packaged)
    assert not [n for n in names if n.startswith("datasets/") or n.endswith(".parquet")]
    modules = [n for n in names if n.endswith(".py")]
    assert "predictor/runtime/choices/pruner.py" in modules and [n for n in modules if not (ROOT / n).is_file()] == []
    assert "predictor/artifacts/tree_walk.c" in names  # the compiled walker's source (predictor.artifacts.compiled_walk)
    tables = sorted(p.name for p in (ROOT / "models" / "gemv-blocks").glob("*.json"))
    assert tables and all(f"predictor/models/gemv-blocks/{t}" in names for t in tables)  # GEMV block tables
    assert wheel.stat().st_size < MAX_WHEEL_BYTES, f"wheel is {wheel.stat().st_size / 2**20:.1f} MiB"


def test_installed_wheel_finds_a_shipped_model_and_prunes(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    host = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]]) if Path(p).is_dir()]
    (purelib / "host-site-packages.pth").write_text("".join(f"{p}\n" for p in host))  # paths only: no code runs
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                           "-q", str(wheel)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GEMM_PREDICTOR_MODELS", "PYTHONHOME")}
    work = tmp_path / "elsewhere"
    work.mkdir()
    installed = _run(python, work, env)
    assert Path(installed["file"]).resolve().is_relative_to(venv.resolve()), installed["file"]
    assert [Path(r).resolve() for r in installed["roots"]] == [(purelib / "predictor" / "models").resolve()]
    assert Path(installed["model"]).resolve().is_relative_to(venv.resolve())
    assert Path(installed["model"]).name == "h200-default-lgbm-all" == Path(installed["found"]).name
    kept = list(installed["kept"].values())
    assert len(kept) > 50 and all(len(k) < 10 for k in kept)  # recorded lists of 21-30 choices: pruned
    assert any(len(k) > 1 for k in kept) and any(k == [0] for k in kept)  # Triton kept for some, cuBLAS alone for others

    # the same decisions as the checkout's package on the same recorded lists
    checkout = _run(sys.executable, ROOT, {**env, "PYTHONPATH": str(ROOT)})
    assert Path(checkout["file"]).resolve().is_relative_to(ROOT)
    assert installed["kept"] == checkout["kept"]
