"""A model folder read as the hook reads it: one consistent version of ``metadata.json`` and the model file, every
check made before anything is parsed (versions, feature names, field types, the GPU, the model file's sha256), and a
LightGBM model as a ``TextForestRanker`` that scores with numpy. Every refusal is a one-line ``ModelError``.

Why apart from ``model_folder`` (saving, and loading the fit side's ranker objects): the hook's path imports neither
LightGBM, scikit-learn nor the ranker registry.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .reading import MODEL_BYTES, InputError, MissingInput, read_regular
from ..core.device import DeviceInfo
from ..core.feature_names import model_feature_count
from ..core.features import feature_matrix
from .lgbm_text import ModelTextError, check_model_text
from .metadata import ModelError, _one_line, _read_metadata, read_metadata
from .dataset_rules import SCHEMA_VERSION, device_fault
from .text_forest import TextForest, forest_of

if TYPE_CHECKING:
    import pandas as pd

ARTIFACT_VERSION = 1
LGBM_FILE = "model.lgbm.txt"
STATE_FILE = "model.json"
MODEL_FILES = (LGBM_FILE, STATE_FILE)


# metadata fields the library reads, and the JSON types they must have (absent is fine)
_NUMBER = (int, float)
_META_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "space": (str,), "split_seed": (int,), "test_fraction": _NUMBER, "refit_all": (bool,),
    "dataset_sha256": (str, type(None)), "dataset": (dict,), "datasets": (list,), "split": (dict,),
    "pruning": (dict, type(None)), "problem_ranges": (dict,), "metrics": (dict,), "libraries": (dict,),
    "torch_version": (str,), "space_fingerprint": (str, type(None)),
}
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", dict: "an object",
               list: "a list", type(None): "null"}


def _check_types(meta: dict[str, Any], where: str) -> None:
    """Refuse metadata fields of the wrong JSON type with one line (they would fail later, deep in a consumer)."""
    for key, kinds in _META_TYPES.items():
        value = meta.get(key)
        if key in meta and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
            expected = "a number" if kinds == _NUMBER else " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise ModelError(f"{where}: metadata {key!r} is {value!r:.40}, not {expected}")
    groups = meta.get("split", {}).get("test_groups")
    if groups is not None and not (isinstance(groups, list) and all(isinstance(g, str) for g in groups)):
        raise ModelError(f"{where}: metadata split.test_groups must be a list of group names")
    pruning = meta.get("pruning") or {}
    margin = pruning.get("margin")
    # a NaN margin keeps nothing within it and a negative one drops every Triton choice: both prune to cuBLAS alone
    if margin is not None and (not _is_number(margin) or not math.isfinite(margin) or margin < 0):
        raise ModelError(f"{where}: metadata pruning.margin is {margin!r:.40}, not a finite number >= 0 or null")
    top_k = pruning.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ModelError(f"{where}: metadata pruning.top_k is {top_k!r:.40}, not an integer >= 1")
    ranges = meta.get("problem_ranges", {})
    for key in ("b", "m", "n", "k"):
        pair = ranges.get(key)
        if key in ranges and not (isinstance(pair, list) and len(pair) == 2
                                  and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                                  and 1 <= pair[0] <= pair[1]):
            raise ModelError(f"{where}: metadata problem_ranges.{key} is {pair!r:.40}, not [low, high] with "
                             "1 <= low <= high")
    for key in ("ops", "dtypes", "kinds"):
        names = ranges.get(key)
        if key in ranges and not (isinstance(names, list) and all(isinstance(v, str) for v in names)):
            raise ModelError(f"{where}: metadata problem_ranges.{key} is {names!r:.40}, not a list of names")


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


def check_device(device: DeviceInfo, where: str) -> None:
    """The device numbers of a model's metadata are plausible (``dataset_rules.device_fault``), else ModelError."""
    fault = device_fault(device)
    if fault:
        raise ModelError(f"{where}: {fault}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _checked_metadata(folder: Path, expect_device: DeviceInfo | None,
                      meta: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(metadata, ranker section)`` after every check that needs no model file: versions, features, types, GPU.
    ``meta``: the folder's metadata already read (else it is read here)."""
    meta = read_metadata(folder) if meta is None else meta
    where = str(folder)
    if meta.get("artifact_version") != ARTIFACT_VERSION:
        raise ModelError(f"{where}: artifact version {meta.get('artifact_version')!r}, this library reads {ARTIFACT_VERSION}")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(f"{where}: trained on dataset schema {meta.get('schema_version')!r}, "
                         f"this library reads {SCHEMA_VERSION}; retrain it")
    names = meta.get("feature_names")
    if not isinstance(names, list):
        raise ModelError(f"{where}: metadata has no feature_names list")
    try:
        model_feature_count(names)
    except ValueError as exc:
        raise ModelError(f"{where}: {exc}") from None
    _check_types(meta, where)
    try:
        device = DeviceInfo.from_metadata(meta)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{where}: {_one_line(exc)}") from None
    check_device(device, where)
    if expect_device is not None and not device.same_gpu(expect_device):
        raise ModelError(f"{where}: model was trained for {device.gpu} (cc {device.cc}); "
                         f"this device is {expect_device.gpu} (cc {expect_device.cc})")
    spec = meta.get("ranker")
    if not isinstance(spec, dict) or not isinstance(spec.get("params", {}), dict):
        raise ModelError(f"{where}: metadata has no ranker section")
    return meta, spec


def _verified_model_file(folder: Path, meta: dict[str, Any]) -> tuple[str, bytes]:
    """``(model file name, its bytes)`` once the bytes match the metadata's sha256; nothing is parsed before."""
    model_file = meta.get("model_file")
    if model_file not in MODEL_FILES:
        raise ModelError(f"{folder}: unknown model file {model_file!r}; this library reads {' or '.join(MODEL_FILES)} "
                         "(never a pickle)")
    path = folder / model_file
    try:
        payload = read_regular(path, MODEL_BYTES, "model file")
    except MissingInput:
        raise ModelError(f"{path}: unreadable (no such file)") from None
    except InputError as exc:  # a FIFO, a device, a folder, a file over the cap
        raise ModelError(str(exc)) from None
    digest = _sha256(payload)
    if digest != meta.get("model_sha256"):
        raise ModelError(f"{path}: sha256 {digest[:12]}... does not match the metadata's "
                         f"{str(meta.get('model_sha256'))[:12]}...; the file is corrupt or was changed")
    return model_file, payload


_PAIR_READS = 5  # reads of (metadata, model file) before a mismatch is taken for a corrupt folder
_PAIR_PAUSE_S = 0.01  # the pause before the n-th read again is n times this (0.1 s in all on a corrupt folder)


def _checked_pair(folder: Path, expect_device: DeviceInfo | None) -> tuple[dict[str, Any], dict[str, Any], str, bytes]:
    """``(metadata, ranker section, model file name, its bytes)`` of one version of the folder, every check passed.

    ``train`` swaps a whole new folder in while others may be loading it: a reader can take the metadata of one
    version and the model file of the next (a sha256 mismatch that is no corruption), and a folder swapped twice
    during one read shows the first metadata again (so "the same metadata read twice" proves nothing). A mismatch,
    or a model file gone, is therefore read again after a short pause, ``_PAIR_READS`` times: a swap takes
    milliseconds, a corrupt folder stays corrupt on every read."""
    for attempt in range(_PAIR_READS):
        meta, spec = _checked_metadata(folder, expect_device, _read_metadata(folder)[1])
        try:
            model_file, payload = _verified_model_file(folder, meta)
            return meta, spec, model_file, payload
        except ModelError:
            if attempt == _PAIR_READS - 1:
                raise
            time.sleep(_PAIR_PAUSE_S * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def load_text_model(folder: str | Path, expect_device: DeviceInfo | None = None,
                    otherwise: Callable[[Path, DeviceInfo | None], tuple[Any, dict[str, Any]]] | None = None):
    """``(ranker, metadata)`` for the hook: every check of the folder, and for a LightGBM model a
    ``TextForestRanker`` that scores with numpy, same scores, without importing LightGBM, scikit-learn or scipy
    (over a second at every compile's start). Another ranker (the decision tree, the baselines) loads through
    ``otherwise`` (``model_folder.load_model``, which builds the fit side's ranker objects); without it such a folder
    is refused in one line. Even where LightGBM is installed its predictor is not used: it is slower on one CPU
    thread (2400 choices: ~17 ms against the compiled walker's ~1.3 ms and the numpy walk's ~15 ms)."""
    folder = Path(folder)
    meta, spec, model_file, payload = _checked_pair(folder, expect_device)
    from ..spaces.configs import warn_if_space_changed  # reads the installed torch's lists: the hook's loader only

    warn_if_space_changed(meta, str(folder))
    name = spec.get("name")
    if meta.get("model_file") != LGBM_FILE or name not in TEXT_FOREST_SIGNS:
        if otherwise is None:
            raise ModelError(f"{folder}: a {name!r} model; the hook reads LightGBM text models here "
                             f"({', '.join(TEXT_FOREST_SIGNS)}), load it with predictor.artifacts.model_folder.load_model")
        return otherwise(folder, expect_device)
    try:
        ranker = TextForestRanker(name, parse_text_forest(payload, folder / model_file), feature_matrix)
    except ModelTextError as exc:  # names the file and the first bad field already
        raise ModelError(str(exc)) from None
    except Exception as exc:  # a file this reader cannot parse, as one line
        raise ModelError(f"{folder / model_file}: cannot load ({_one_line(exc)})") from None
    return ranker, meta


def load_text_forest(path: str | Path) -> TextForest:
    """Parse ``model.lgbm.txt``; a ModelTextError naming the file for anything this reader does not support."""
    try:
        payload = read_regular(path, MODEL_BYTES, "model file")
    except InputError as exc:
        raise ModelTextError(str(exc)) from None
    return parse_text_forest(payload, path)


def parse_text_forest(text: str | bytes, path: str | Path = "<text>") -> TextForest:
    """The forest of a LightGBM text model, checked by ``check_model_text`` (``path`` only names it in errors)."""
    return forest_of(*check_model_text(text, path))


# The sign that turns each LightGBM ranker's raw prediction into "higher = faster", as its ``_sign`` in
# predictor.rankers.lgbm (a test checks they agree): LambdaRank scores as is, the regressor predicts log2 slowdown.
TEXT_FOREST_SIGNS = {"lgbm_rank": 1.0, "lgbm_reg": -1.0}


class TextForestRanker:
    """A saved LightGBM ranker (``lgbm_rank`` or ``lgbm_reg``) that scores without LightGBM: the hook's runtime
    ranker (``load_text_model``). Same scores as the LightGBM ranker it was saved from. ``features``: how rows
    become a feature matrix (``core.features.feature_matrix``)."""

    def __init__(self, name: str, forest: TextForest,
                 features: Callable[[pd.DataFrame, DeviceInfo], np.ndarray] = feature_matrix) -> None:
        if name not in TEXT_FOREST_SIGNS:
            raise ValueError(f"ranker {name!r} is not a LightGBM ranker; known: {', '.join(TEXT_FOREST_SIGNS)}")
        self.n_features = model_feature_count(forest.feature_names)  # a prefix of FEATURE_NAMES (older models)
        self.name = name
        self.forest = forest
        self.sign = TEXT_FOREST_SIGNS[name]
        self._features = features

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        """One score per row, higher = predicted faster."""
        if len(rows) == 0:
            return np.zeros(0)
        return self.score_features(self._features(rows, device))

    def score_features(self, X: np.ndarray) -> np.ndarray:
        """``score`` from a feature matrix already built (the hook's ``runtime_features.runtime_feature_matrix``)."""
        if len(X) == 0:
            return np.zeros(0)
        return self.sign * self.forest.predict(X[:, :self.n_features])
