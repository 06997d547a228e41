"""Nothing in a model file runs: no pickle anywhere, model discovery never looks in the working directory, and
the decision tree is saved as plain arrays that predict exactly as sklearn does (issue 17)."""

from __future__ import annotations

import builtins
import hashlib
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor, export_text
from predictor.testing.synthetic import METADATA, synthetic_dataset

import predictor
from predictor.artifacts.model_folder import METADATA_FILE, ModelError, load_model, read_metadata, save_model
from predictor.cli import main
from predictor.core.device import DeviceInfo
from predictor.core.features import FEATURE_NAMES, feature_matrix
from predictor.rankers import make_ranker
from predictor.rankers.tree import TreeArrays
from predictor.runtime.choices import discovery
from predictor.runtime.choices.discovery import find_model, model_roots

DEVICE = DeviceInfo.from_metadata(METADATA)
PACKAGE = Path(__file__).resolve().parents[1]


class _Payload:
    """Unpickling this creates ``marker``: what a hostile model.joblib would do (it could run anything)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return builtins.open, (str(self.marker), "w")


def payload(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker))


def test_the_payload_is_real(tmp_path):
    pickle.loads(payload(tmp_path / "ran"))  # what any pickle-based loader would do with the planted file
    assert (tmp_path / "ran").exists()


def test_no_pickle_loading_in_the_package():
    pattern = re.compile(r"^\s*(import (pickle|joblib|dill|cloudpickle)|from (pickle|joblib) import)|"
                         r"(pickle|joblib|dill)\.loads?\(|torch\.load\(|allow_pickle\s*=\s*True", re.M)
    offenders = [f"{path.relative_to(PACKAGE)}: {m.group(0).strip()}"
                 for package in ("predictor", "collectors") for path in sorted((PACKAGE / package).rglob("*.py"))
                 for m in pattern.finditer(path.read_text())]
    assert offenders == []
    assert "joblib" not in (PACKAGE / "pyproject.toml").read_text()


@pytest.fixture()
def planted(tmp_path):
    """A real synthetic model folder whose model file is replaced by a pickle payload, with its sha256 recomputed
    in the metadata (as an attacker who can write the folder would): one folder per model file name."""
    rows = synthetic_dataset(20, seed=3)
    real = save_model(make_ranker("tree").fit(rows, DEVICE), tmp_path / "real",
                      {"device": DEVICE.to_dict(), "space": "default", "name": "real"})
    marker = tmp_path / "payload-ran"
    folders = []
    for model_file in ("model.joblib", "model.json", "model.lgbm.txt"):
        folder = tmp_path / "models" / f"evil-{model_file.split('.')[1]}-lgbm-all"
        folder.mkdir(parents=True)
        data = payload(marker)
        (folder / model_file).write_bytes(data)
        meta = read_metadata(real)
        meta.update(model_file=model_file, model_sha256=hashlib.sha256(data).hexdigest(), name=folder.name)
        (folder / METADATA_FILE).write_text(json.dumps(meta))
        folders.append(folder)
    return folders, marker


def test_planted_payload_never_runs(planted, tmp_path, monkeypatch, capsys):
    folders, marker = planted
    monkeypatch.delenv(discovery.MODELS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # the payloads sit in ./models, made for exactly this GPU

    assert all(root.resolve() != (tmp_path / "models").resolve() for root in model_roots())
    assert find_model(DEVICE) is None  # ./models is never searched
    with predictor.pruning(_device=DEVICE) as pruner:  # (it may take a shipped model of the same architecture)
        assert pruner.model_path is None or tmp_path not in Path(pruner.model_path).resolve().parents

    for folder in folders:  # explicit paths: refused with one line, before anything of the file is interpreted
        with pytest.raises(ModelError) as info:
            load_model(folder, expect_device=DEVICE)
        assert "\n" not in str(info.value) and str(folder) in str(info.value)
        code = main(["evaluate", "--model", str(folder), "--out", str(tmp_path / "report")])
        err = [line for line in capsys.readouterr().err.splitlines() if "gemm-predictor: error:" in line]
        assert code != 0 and len(err) == 1 and folder.name in err[0]
        with predictor.pruning(model=folder, _device=DEVICE) as pruner:  # the hook: warns and passes through
            assert pruner.disabled is not None
    assert "unknown model file 'model.joblib'" in str(pytest.raises(ModelError, load_model, folders[0]).value)
    assert not marker.exists()
    assert not (tmp_path / "report").exists()


def test_tree_is_saved_as_plain_arrays(tmp_path):
    rows = synthetic_dataset(40, seed=5)
    ranker = make_ranker("tree", max_depth=6).fit(rows, DEVICE)
    folder = save_model(ranker, tmp_path / "tree", {"device": DEVICE.to_dict(), "space": "default", "name": "t"})
    doc = json.loads((folder / "model.json").read_text())
    assert doc["format"] == "gemm-predictor/ranker-state/1" and doc["ranker"] == "tree"
    assert set(doc["state"]["tree"]) == {"n_features", "left", "right", "feature", "threshold", "missing_left", "value"}
    loaded, _ = load_model(folder)
    np.testing.assert_array_equal(loaded.score(rows, DEVICE), ranker.score(rows, DEVICE))
    assert loaded.export_rules() == ranker.export_rules()


def test_tree_arrays_predict_and_print_as_sklearn():
    rows = synthetic_dataset(60, seed=6)
    X = feature_matrix(rows, DEVICE)
    y = np.log1p(rows["time_us"].fillna(1e4).to_numpy())
    sk = DecisionTreeRegressor(max_depth=12, min_samples_leaf=3, random_state=0).fit(X, y)
    tree = TreeArrays.from_sklearn(sk)
    probe = X.copy()
    probe[::3, 0] = np.nan  # missing values go where sklearn sends them
    probe[1::5] += np.random.default_rng(0).normal(0, 0.5, probe[1::5].shape)
    np.testing.assert_array_equal(tree.predict(probe), sk.predict(probe))
    np.testing.assert_array_equal(TreeArrays.from_json(json.loads(json.dumps(tree.to_json()))).predict(probe), sk.predict(probe))
    assert tree.export_text(FEATURE_NAMES) == export_text(sk, feature_names=FEATURE_NAMES, decimals=3)


@pytest.mark.parametrize("change, needle", [
    (lambda t: t.update(left=t["left"][:-1]), "different lengths"),
    (lambda t: t["left"].__setitem__(0, 0), "children are not later nodes"),  # a cycle: would never reach a leaf
    (lambda t: t["feature"].__setitem__(0, 999), "feature outside"),
    (lambda t: t["value"].__setitem__(0, "__import__('os')"), "other than numbers"),
    (lambda t: t.update(n_features="66"), "integer n_features"),
    (lambda t: t.pop("threshold"), "lists"),
])
def test_malformed_tree_state_refused(change, needle, tmp_path):
    rows = synthetic_dataset(20, seed=7)
    folder = save_model(make_ranker("tree").fit(rows, DEVICE), tmp_path / "t",
                        {"device": DEVICE.to_dict(), "space": "default", "name": "t"})
    doc = json.loads((folder / "model.json").read_text())
    change(doc["state"]["tree"])
    data = json.dumps(doc).encode()
    (folder / "model.json").write_bytes(data)
    meta = read_metadata(folder)
    meta["model_sha256"] = hashlib.sha256(data).hexdigest()
    (folder / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ModelError, match=needle) as info:
        load_model(folder)
    assert "\n" not in str(info.value)
