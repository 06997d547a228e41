"""The hook's runtime path: LightGBM models score with numpy (``load_runtime_model``), exactly as LightGBM does,
with the checks of ``load_model``, and the runtime imports neither LightGBM, scikit-learn, scipy nor matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from predictor.testing.synthetic import METADATA, synthetic_dataset

from predictor.artifacts.model_folder import METADATA_FILE, ModelError, load_model, load_runtime_model, read_metadata, save_model
from predictor.core.device import DeviceInfo
from predictor.artifacts.model_check import TEXT_FOREST_SIGNS, TextForestRanker
from predictor.rankers import make_ranker
from predictor.rankers.lgbm import LGBMRankerModel, LGBMRegressorModel
from predictor.rankers.tree import TreeRanker
from predictor.artifacts.schema import read_dataset

ROOT = Path(__file__).resolve().parents[1]
DEVICE = DeviceInfo.from_metadata(METADATA)
SHIPPED = ("h200-default-lgbm-all", "h200-exhaustive-lgbm-all")
DATASETS = {"default": ("datasets/nvidia-h200/default.parquet", 200), "exhaustive": ("datasets/nvidia-h200/exhaustive.parquet", 6)}
OFFLINE_ONLY = ("sklearn", "scipy", "lightgbm", "matplotlib", "pandas", "pyarrow")


@pytest.fixture(scope="module")
def slices() -> dict:
    """The first problems (by id) of each H200 dataset: every candidate of each."""
    out = {}
    for space, (path, n) in DATASETS.items():
        rows = read_dataset(ROOT / path)
        first = sorted(rows["problem_id"].unique())[:n]
        out[space] = rows[rows["problem_id"].isin(first)].reset_index(drop=True)
    return out


@pytest.mark.parametrize("model, space", [(m, s) for m in SHIPPED for s in DATASETS])
def test_shipped_runtime_scores_equal_lightgbm(model, space, slices):
    folder = ROOT / "models" / model
    device = DeviceInfo.from_metadata(read_metadata(folder))
    lgbm, meta = load_model(folder, expect_device=device)
    runtime, runtime_meta = load_runtime_model(folder, expect_device=device)
    assert isinstance(lgbm, LGBMRankerModel) and isinstance(runtime, TextForestRanker)
    assert runtime_meta == meta and runtime.name == lgbm.name
    rows = slices[space]
    np.testing.assert_allclose(runtime.score(rows, device), lgbm.score(rows, device), rtol=0, atol=1e-9)
    assert runtime.score(rows.iloc[:0], device).shape == (0,)


def test_signs_match_the_lightgbm_rankers():
    assert TEXT_FOREST_SIGNS == {cls.name: cls._sign for cls in (LGBMRankerModel, LGBMRegressorModel)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    rows = synthetic_dataset(40, seed=11)
    root = tmp_path_factory.mktemp("runtime")
    out = {"rows": rows}
    for name, params in (("lgbm_rank", {"n_estimators": 20}), ("lgbm_reg", {"n_estimators": 20}), ("tree", {})):
        ranker = make_ranker(name, **params).fit(rows, DEVICE)
        out[name] = (ranker, save_model(ranker, root / name, {"device": DEVICE.to_dict(), "space": "default", "name": name}))
    return out


@pytest.mark.parametrize("name", ["lgbm_rank", "lgbm_reg"])
def test_runtime_scores_equal_the_saved_ranker(name, saved):
    ranker, folder = saved[name]
    runtime, _ = load_runtime_model(folder, expect_device=DEVICE)
    assert isinstance(runtime, TextForestRanker) and runtime.sign == type(ranker)._sign
    np.testing.assert_allclose(runtime.score(saved["rows"], DEVICE), ranker.score(saved["rows"], DEVICE),
                               rtol=0, atol=1e-9)


def test_other_rankers_load_through_load_model(saved):
    ranker, folder = saved["tree"]
    runtime, _ = load_runtime_model(folder, expect_device=DEVICE)
    assert isinstance(runtime, TreeRanker)
    np.testing.assert_array_equal(runtime.score(saved["rows"], DEVICE), ranker.score(saved["rows"], DEVICE))


def test_the_exhaustive_space_scores_with_numpy_too():
    """LightGBM is installed here, yet the exhaustive space's pruner (2400 choices a GEMM) scores with numpy, which
    is no slower than LightGBM's predictor, and loading it imports no offline library."""
    folder = ROOT / "models" / "h200-exhaustive-lgbm-all"
    code = ("from predictor.artifacts.model_folder import read_metadata\n"
            "from predictor.core.device import DeviceInfo\n"
            "from predictor.runtime.choices.pruner import GemmPruner, HookSettings\n"
            f"folder = {str(folder)!r}\n"
            "device = DeviceInfo.from_metadata(read_metadata(folder))\n"
            "pruner = GemmPruner(HookSettings(model=folder, space='exhaustive', device=device)).load()\n"
            "assert pruner.disabled is None and type(pruner.ranker).__name__ == 'TextForestRanker', pruner.ranker\n")
    assert _imported_offline(code) == []


def _copy(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / folder.name
    out.mkdir()
    for f in folder.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    return out


@pytest.mark.parametrize("change, needle", [
    (lambda folder: (folder / "model.lgbm.txt").write_text((folder / "model.lgbm.txt").read_text() + "\n"),
     "does not match the metadata"),
    (lambda folder: _edit(folder, artifact_version=99), "artifact version 99"),
    (lambda folder: _edit(folder, schema_version=-1), "dataset schema -1"),
    (lambda folder: _edit(folder, feature_names=["x"]), "model uses 1 features"),
    (lambda folder: _edit(folder, device={**DEVICE.to_dict(), "gpu": "Other GPU", "cc": "8.0"}), "trained for Other GPU"),
    (lambda folder: _edit(folder, model_file="model.joblib"), "unknown model file"),
    (lambda folder: _edit(folder, ranker="lgbm_rank"), "no ranker section"),
])
def test_runtime_refusals_are_one_line(change, needle, saved, tmp_path):
    folder = _copy(saved["lgbm_rank"][1], tmp_path)
    change(folder)
    with pytest.raises(ModelError, match=needle) as info:
        load_runtime_model(folder, expect_device=DEVICE)
    assert "\n" not in str(info.value)


def _edit(folder: Path, **changes) -> None:
    meta = json.loads((folder / METADATA_FILE).read_text())
    meta.update(changes)
    (folder / METADATA_FILE).write_text(json.dumps(meta))


def test_unparsable_model_file_is_one_line(saved, tmp_path):
    import hashlib

    folder = _copy(saved["lgbm_rank"][1], tmp_path)
    data = b"feature_names=a b\n\nTree=0\nnum_leaves=2\n"  # a valid sha256, not a model this library can use
    (folder / "model.lgbm.txt").write_bytes(data)
    _edit(folder, model_sha256=hashlib.sha256(data).hexdigest())
    with pytest.raises(ModelError, match=r"model.lgbm.txt: not a LightGBM text model") as info:
        load_runtime_model(folder, expect_device=DEVICE)
    assert "\n" not in str(info.value)


def _imported_offline(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; the offline libraries it left in ``sys.modules``."""
    code += f"\nimport sys\nprint(sorted(m for m in {OFFLINE_ONLY!r} if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.parametrize("module", ["predictor", "predictor.runtime.install", "predictor.runtime.compile",
                                    "predictor.runtime.choices.pruner"])
def test_hook_modules_import_nothing_offline(module):
    """The import direction, one entry point per fresh interpreter: none of the offline libraries, pandas and
    pyarrow included (together a quarter of a second of every compile's start)."""
    assert _imported_offline(f"import {module}") == []


def test_runtime_imports_nothing_offline():
    """The hook loads a model and prunes a list (features, scores, policy) without the offline libraries."""
    code = (
        "import predictor, predictor.artifacts.lgbm_text, predictor.core.features\n"
        "from predictor.runtime import compile\nfrom predictor.runtime.choices import policy\nfrom predictor.runtime.choices.pruner import GemmPruner, HookSettings\n"
        "from predictor.artifacts.model_folder import read_metadata\n"
        "from predictor.core.candidate import Candidate, to_template_kwargs\n"
        "from predictor.core.device import DeviceInfo\n"
        "from predictor.core.problem import Problem\n"
        "from predictor.testing.fakes import mm_inputs\n"
        "from types import SimpleNamespace as NS\n"
        "import torch\n"
        f"folder = {str(ROOT / 'models' / 'h200-default-lgbm-all')!r}\n"
        "device = DeviceInfo.from_metadata(read_metadata(folder))\n"
        "pruner = GemmPruner(HookSettings(model=folder, device=device, top_k=2)).load()\n"
        "assert pruner.disabled is None and type(pruner.ranker).__name__ == 'TextForestRanker', pruner.disabled\n"
        "cands = [Candidate('aten', aten_op='mm')] + [Candidate('triton_mm', 64 * i, 64, 32, 3, 4, 8) for i in (1, 2, 4)]\n"
        "choices = [NS(template=NS(uid=uid), params=NS(to_kwargs=lambda kw=kw: kw))\n"
        "           for uid, kw in map(to_template_kwargs, cands)]\n"
        "kept = pruner.filter(choices, mm_inputs(512, 768, 3072, torch.float16), 'mm')\n"
        "assert 1 <= len(kept) < len(choices) and not pruner.stats()['fallbacks'], pruner.stats()\n"
    )
    assert _imported_offline(code) == []
