"""A trained model is a folder ``models/<name>/``: the model file, ``metadata.json`` and ``MODEL_CARD.md``.

The model file is LightGBM's text format for LightGBM rankers (readable, not version-bound) and, for the
others, their learned state as plain JSON data (``model.json``: the decision tree's arrays; nothing for the
baselines). Never a pickle: unpickling runs code from the file, whatever checksum sits beside it. ``metadata.json`` records what the model needs and promises: schema version, ranker
name and hyper-parameters, the ordered feature names, the candidate space, the dataset (path and
sha256), held-out metrics, library versions, the device it was trained for and the model file's sha256.

``load_model`` checks everything it can before it trusts the folder: the sha256 of the model file is
verified before anything is parsed, a feature list or schema from another version of this
library is refused, and so is a model made for another GPU. Every file is read through ``predictor.artifacts.atomic``'s
reader (a regular file under its size cap: a FIFO or ``/dev/zero`` in the folder is refused at once), and the
metadata and model file are read as one version of the folder even while ``train`` swaps a new one in. A new
model is loaded back before it replaces an old one. Every refusal is a one-line ``ModelError``.
``load_runtime_model``, the hook's loader, makes the same checks and scores a LightGBM model with numpy
(``predictor.artifacts.lgbm_text``): the hook's path imports neither LightGBM, scikit-learn nor scipy.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import platform
import time
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import (METADATA_BYTES, MODEL, MODEL_BYTES, InputError, MissingInput, check_output_folder, parse_json,
                     read_regular, staged_folder)
from ..core.device import DeviceInfo
from ..core.features import FEATURE_NAMES, model_feature_count
from .lgbm_text import TEXT_FOREST_SIGNS, ModelTextError, TextForestRanker, check_model_text, parse_text_forest
from .schema import SCHEMA_VERSION, device_fault

log = logging.getLogger(__name__)

ARTIFACT_VERSION = 1
METADATA_FILE = "metadata.json"
CARD_FILE = "MODEL_CARD.md"
LGBM_FILE = "model.lgbm.txt"
STATE_FILE = "model.json"
STATE_FORMAT = "gemm-predictor/ranker-state/1"
MODEL_FILES = (LGBM_FILE, STATE_FILE)
_LIBRARIES = ("gemm-predictor", "lightgbm", "scikit-learn", "numpy", "pandas", "pyarrow")


class ModelError(ValueError):
    """A model folder that cannot be used here: missing, corrupt, tampered with, or made for something else."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _jsonable(value: Any) -> Any:
    """Plain JSON types for metadata (numpy scalars/arrays, paths); NaN/inf become null (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"metadata value {value!r} of type {type(value).__name__} is not JSON-serialisable")


def _params(ranker) -> dict[str, Any]:
    """Hyper-parameters: sklearn's ``get_params`` or, for a plain class, its ``__init__`` arguments."""
    if hasattr(ranker, "get_params"):
        return ranker.get_params()
    names = [p for p in inspect.signature(type(ranker).__init__).parameters if p != "self"]
    return {name: getattr(ranker, name) for name in names if hasattr(ranker, name)}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _serialise(ranker) -> tuple[str, bytes]:
    booster = getattr(ranker, "booster_", None)
    if booster is not None:
        return LGBM_FILE, booster.model_to_string().encode()
    if not hasattr(ranker, "state_json"):
        raise ModelError(f"ranker {ranker.name!r} ({type(ranker).__name__}) has no pickle-free saved form (state_json)")
    doc = {"format": STATE_FORMAT, "ranker": ranker.name, "state": ranker.state_json()}
    return STATE_FILE, (json.dumps(_jsonable(doc), separators=(",", ":"), allow_nan=False) + "\n").encode()


def _deserialise(ranker, model_file: str, payload: bytes, path: Path):
    """The ranker with its learned state from the model file's bytes (already checked against the sha256)."""
    if model_file == LGBM_FILE:
        if not hasattr(ranker, "_set_booster"):
            raise TypeError(f"ranker {ranker.name!r} does not take a LightGBM model")
        # LightGBM's native parser trusts the text (a cut file, a short list or an index out of range crashes the
        # process or loops forever): only text our own parser has checked in full reaches it
        check_model_text(payload, path)
        import lightgbm as lgb

        return ranker._set_booster(lgb.Booster(model_str=payload.decode("ascii")))
    doc = json.loads(payload.decode())
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise ValueError(f"not a {STATE_FORMAT} document")
    if doc.get("ranker") != ranker.name:
        raise ValueError(f"file holds a {doc.get('ranker')!r} model, metadata says {ranker.name!r}")
    if not hasattr(ranker, "load_state_json"):
        raise TypeError(f"ranker {ranker.name!r} does not take a {STATE_FILE}")
    return ranker.load_state_json(doc.get("state"))


def save_model(ranker, folder: str | Path, metadata: dict[str, Any]) -> Path:
    """Write ``ranker`` (fitted) with ``metadata`` (must hold the ``device`` section) to ``folder``.

    The caller's metadata (dataset, space, metrics, ...) is kept; this adds schema/artifact versions,
    the ranker's name and hyper-parameters, the feature names, library versions and the model sha256.
    ``folder`` must be new, empty or a model folder (``predictor.artifacts.atomic``); it is written next to its final
    place and swapped in whole, so a crash leaves the old model."""
    folder = check_output_folder(folder, MODEL)
    if hasattr(ranker, "__sklearn_is_fitted__") and not ranker.__sklearn_is_fitted__():
        raise ModelError(f"{folder}: ranker {ranker.name!r} is not fitted; call fit first")
    try:
        device = DeviceInfo.from_metadata(metadata)
    except ValueError as exc:
        raise ModelError(f"{folder}: {exc}") from None
    check_device(device, str(folder))
    model_file, payload = _serialise(ranker)
    meta = {
        **metadata,
        "artifact_version": ARTIFACT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "ranker": {"name": ranker.name, "class": type(ranker).__name__, "params": _params(ranker)},
        "feature_names": list(FEATURE_NAMES),
        "space": metadata.get("space", "default"),
        "device": device.to_dict(),
        "libraries": library_versions(),
        "created_utc": metadata.get("created_utc") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model_file": model_file,
        "model_sha256": _sha256(payload),
    }
    meta = _jsonable(meta)
    text = json.dumps(meta, indent=2) + "\n"

    with staged_folder(folder, MODEL) as tmp:
        (tmp / model_file).write_bytes(payload)
        (tmp / CARD_FILE).write_text(model_card(meta))
        (tmp / METADATA_FILE).write_text(text)
        # the new folder loads as every reader will load it, before it replaces anything: a model the loaders
        # refuse (implausible device numbers, a forest over the caps) never takes the place of a good one
        try:
            load_model(tmp)
            if model_file == LGBM_FILE and ranker.name in TEXT_FOREST_SIGNS:
                parse_text_forest(payload, tmp / model_file)
        except (ModelError, ModelTextError) as exc:
            why = str(exc).replace(str(tmp), str(folder))  # the staging folder's name means nothing to the user
            raise ModelError(f"{folder}: the new model would not load, so it was not written ({why})") from None
    log.info("saved %s model to %s (sha256 %s)", ranker.name, folder, meta["model_sha256"][:12])
    return folder


def read_metadata(folder: str | Path) -> dict[str, Any]:
    """The folder's metadata.json, unchecked beyond being a JSON object."""
    path = Path(folder) / METADATA_FILE
    try:
        data = read_regular(path, METADATA_BYTES, METADATA_FILE)
    except MissingInput:
        raise ModelError(f"{folder}: no model here ({METADATA_FILE} missing)") from None
    except InputError as exc:  # a FIFO, a device, a folder, a file over the cap: named as such, never "missing"
        raise ModelError(str(exc)) from None
    try:
        meta = parse_json(data, path, "JSON document")
    except InputError as exc:  # bad JSON, deep nesting, an integer of thousands of digits
        raise ModelError(str(exc)) from None
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: not a JSON object")
    return meta


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
    """The device numbers of a model's metadata are plausible (``predictor.artifacts.schema.device_fault``), else ModelError."""
    fault = device_fault(device)
    if fault:
        raise ModelError(f"{where}: {fault}")


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
        meta, spec = _checked_metadata(folder, expect_device)
        try:
            model_file, payload = _verified_model_file(folder, meta)
            return meta, spec, model_file, payload
        except ModelError:
            if attempt == _PAIR_READS - 1:
                raise
            time.sleep(_PAIR_PAUSE_S * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def load_model(folder: str | Path, expect_device: DeviceInfo | None = None):
    """Load ``(ranker, metadata)`` from a model folder after checking it; see the module docstring.

    ``expect_device``: the GPU the model will rank for; a model trained on another GPU (name or compute
    capability) is refused. The ranker scores with ``DeviceInfo.from_metadata(metadata)``. This builds the
    trainable ranker (LightGBM, scikit-learn); the hook uses ``load_runtime_model``."""
    folder = Path(folder)
    meta, spec, model_file, payload = _checked_pair(folder, expect_device)

    from ..rankers import make_ranker

    try:
        ranker = make_ranker(spec.get("name"), **spec.get("params", {}))
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{folder}: {_one_line(exc)}") from None
    try:
        ranker = _deserialise(ranker, model_file, payload, folder / model_file)
    except ModelTextError as exc:  # names the file and the first bad field already
        raise ModelError(str(exc)) from None
    except Exception as exc:  # anything the model libraries raise on a bad file, as one line
        raise ModelError(f"{folder / model_file}: cannot load ({_one_line(exc)})") from None

    here = library_versions()
    trained = meta.get("libraries", {})
    differ = {k: (trained.get(k), here[k]) for k in ("lightgbm", "scikit-learn") if trained.get(k) != here[k]}
    if differ:
        log.warning("%s: trained with %s; running with %s", folder,
                    ", ".join(f"{k} {a}" for k, (a, _) in differ.items()), ", ".join(f"{k} {b}" for k, (_, b) in differ.items()))
    return ranker, meta


def load_runtime_model(folder: str | Path, expect_device: DeviceInfo | None = None):
    """``(ranker, metadata)`` for the hook: the checks of ``load_model``, and for a LightGBM model a
    ``TextForestRanker`` that scores with numpy, same scores, without importing LightGBM, scikit-learn or scipy
    (over a second at every compile's start). Other rankers (the decision tree, the baselines) load through
    ``load_model``, which imports the ranker registry only then. Even where LightGBM is installed its predictor
    is not used: it is slower on one CPU thread (2400 choices: ~17 ms against the compiled walker's ~1.3 ms and
    the numpy walk's ~15 ms)."""
    folder = Path(folder)
    meta, spec, model_file, payload = _checked_pair(folder, expect_device)
    from ..spaces.configs import warn_if_space_changed  # reads the installed torch's lists: the hook's loader only

    warn_if_space_changed(meta, str(folder))
    name = spec.get("name")
    if meta.get("model_file") != LGBM_FILE or name not in TEXT_FOREST_SIGNS:
        return load_model(folder, expect_device)
    try:
        ranker = TextForestRanker(name, parse_text_forest(payload, folder / model_file))
    except ModelTextError as exc:  # names the file and the first bad field already
        raise ModelError(str(exc)) from None
    except Exception as exc:  # a file this reader cannot parse, as one line
        raise ModelError(f"{folder / model_file}: cannot load ({_one_line(exc)})") from None
    return ranker, meta


def _metrics_table(metrics: dict[str, dict[str, float]], ks=(1, 2, 3, 5, 8, 10)) -> str:
    if not metrics:
        return "(none recorded)\n"
    header = "| ranker | " + " | ".join(f"oracle@{k}" for k in ks) + " | p5@1 | hit@1 |"
    lines = [header, "|" + "---|" * (len(ks) + 3)]
    for name, values in metrics.items():
        cells = [values.get(f"oracle@{k}") for k in ks] + [values.get("p5@1"), values.get("hit@1")]
        lines.append(f"| {name} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells) + " |")
    return "\n".join(lines) + "\n"


def _pruning_lines(meta: dict[str, Any]) -> list[str]:
    """The hook's calibrated margin and what it costs/saves on the held-out split (when training recorded it)."""
    pruning, ranges = meta.get("pruning"), meta.get("problem_ranges")
    lines = []
    if isinstance(pruning, dict):
        chosen, plain = pruning.get("chosen", {}), pruning.get("plain", {})
        lines += ["## Pruning in the hook (`margin='auto'`)",
                  f"- calibrated margin {pruning.get('margin')} (score units) at top_k={pruning.get('top_k')}, "
                  f"criterion: {pruning.get('criterion')}",
                  f"- held-out: oracle {chosen.get('oracle', float('nan')):.3f} with {chosen.get('kept_mean', float('nan')):.2f} "
                  f"choices kept on average ({100 * chosen.get('single', float('nan')):.0f}% of GEMMs left with one, "
                  f"i.e. not benchmarked) vs oracle {plain.get('oracle', float('nan')):.3f} with "
                  f"{plain.get('kept_mean', float('nan')):.2f} kept for the plain top {pruning.get('top_k')}", ""]
    if isinstance(ranges, dict):
        lines += [f"- trained on ops {ranges.get('ops')}, dtypes {ranges.get('dtypes')}; m {ranges.get('m')}, "
                  f"n {ranges.get('n')}, k {ranges.get('k')} (the hook gives other ops/dtypes cuBLAS alone, `fallback='aten'`)", ""]
    return lines


def model_card(meta: dict[str, Any]) -> str:
    """A short human-readable card from the metadata (what, trained on what, how good, where it applies)."""
    device = meta.get("device", {})
    dataset = meta.get("dataset", {})
    metrics = meta.get("metrics", {})
    ranker = meta.get("ranker", {})
    heldout = metrics.get("heldout", {})
    split = meta.get("split", {})
    sources = ", ".join(f"`{d.get('path')}`" for d in meta.get("datasets") or [])
    lines = [
        f"# Model card: {meta.get('name', ranker.get('name', 'model'))}",
        "",
        f"Ranks PyTorch Inductor GEMM candidates (space `{meta.get('space', 'default')}`); higher score = predicted "
        "faster. `predictor.compile` takes one candidate per GEMM from it; `predictor.install` prunes max-autotune's "
        "list to its top k.",
        *([f"Region model: it ranks only the GEMMs of region `{meta['region']}` (`predictor/core/regions.py`), which the "
           "hook scores with it beside the GPU's main model; it was trained and scored on that region's problems."]
          if meta.get("region") else []),
        "",
        "## Model",
        f"- ranker: `{ranker.get('name')}` ({ranker.get('class')}), "
        f"hyper-parameters `{json.dumps(ranker.get('params', {}), sort_keys=True)}`",
        f"- {len(meta.get('feature_names', []))} features (`predictor.core.features.FEATURE_NAMES`), "
        f"dataset schema {meta.get('schema_version')}",
        f"- model file `{meta.get('model_file')}`, sha256 `{meta.get('model_sha256')}`",
        f"- refit on all rows after evaluation: {bool(meta.get('refit_all', False))}",
        "",
        "## Trained on",
        *([f"- datasets {sources}: rows of space `{meta.get('space')}` where a problem has them, else its default rows"]
          if len(meta.get("datasets") or []) > 1 else []),
        f"- dataset `{dataset.get('path')}` (sha256 `{str(dataset.get('sha256'))[:16]}...`): "
        f"{dataset.get('problems', '?')} problems, {dataset.get('rows', '?')} rows, collectors {dataset.get('collectors', '?')}",
        f"- measured with torch {dataset.get('torch', '?')}, triton {dataset.get('triton', '?')}",
        *([f"- Inductor config lists of torch {meta.get('torch_version')} (space fingerprint "
           f"`{meta.get('space_fingerprint')}`; the hook warns when the installed torch's differ)"]
          if "space_fingerprint" in meta else []),
        (f"- split by problem group, the {len(split.get('test_groups') or [])} held-out groups of an earlier model "
         f"(`train --holdout-from`): {split.get('train_problems', '?')} train / {split.get('test_problems', '?')} "
         "held-out problems"
         if str(split.get("method", "")).endswith("split_by_named_groups") else
         f"- split by problem group, seed {split.get('seed', '?')}: {split.get('train_problems', '?')} train / "
         f"{split.get('test_problems', '?')} held-out problems"),
        "",
        "## Intended GPU",
        f"- {device.get('gpu')} (compute capability {device.get('cc')}), {device.get('sm_count')} SMs; "
        "`load_model` refuses any other GPU; the hook uses it on another GPU of the same architecture, with a "
        "warning, unless `allow_similar_gpu=False`.",
        "",
        "## Held-out metrics (fraction of the best time reached by the best of the top k; geometric mean)",
        _metrics_table(heldout),
        *_pruning_lines(meta),
        "## Limitations",
        "- Valid only for the GPU above and for the Inductor candidate lists of the torch/triton versions it "
        "was measured with; a new torch may offer candidates the model never saw.",
        "- Shapes far outside the training corpus (families, dtypes, sizes) are extrapolation; check the "
        "per-family metrics of `gemm-predictor evaluate` before relying on it there.",
        "- Labels are kernel times with a flushed L2; warm-L2 steady state can order small GEMMs differently.",
        "",
    ]
    return "\n".join(lines)
