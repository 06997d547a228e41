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
The reading and every check are ``model_check``'s (the hook's path, which imports no ranker library);
``load_runtime_model`` is its loader with ``load_model`` for the rankers it cannot score with numpy.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import platform
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import MODEL, check_output_folder, staged_folder
from ..core.device import DeviceInfo
from ..core.feature_names import FEATURE_NAMES
from .lgbm_text import ModelTextError, check_model_text
from .metadata import METADATA_FILE, ModelError, _one_line, read_metadata
from .model_check import (ARTIFACT_VERSION, LGBM_FILE, STATE_FILE, TEXT_FOREST_SIGNS, _checked_pair,
                          _sha256, check_device, load_text_model, parse_text_forest)
from .schema import SCHEMA_VERSION

log = logging.getLogger(__name__)

CARD_FILE = "MODEL_CARD.md"
STATE_FORMAT = "gemm-predictor/ranker-state/1"
_LIBRARIES = ("gemm-predictor", "lightgbm", "scikit-learn", "numpy", "pandas", "pyarrow")
__all__ = ["CARD_FILE", "METADATA_FILE", "LGBM_FILE", "ModelError", "load_model", "load_runtime_model",
           "read_metadata", "save_model", "model_card", "library_versions"]


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
    """``(ranker, metadata)`` as the hook loads them (``model_check.load_text_model``): a LightGBM model as a numpy
    forest, any other ranker through ``load_model``."""
    return load_text_model(folder, expect_device, otherwise=load_model)


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
        *([f"Region model: it ranks only the GEMMs of region `{meta['region']}` (`predictor/regions.py`), which the "
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
