"""Local models: the models ``gemm-predictor refit`` made on this machine from its label store
(``predictor/offline/refit.py``), under ``$GEMM_PREDICTOR_LOCAL_MODELS`` or ``~/.cache/gemm-predictor/models``.

Discovery takes one before the shipped model only when it is for this exact GPU (name and capability; never a
similar one: its labels were measured here), for the space asked, passed the refit's validation, and was validated
against the model that ships now (a package upgrade that changes the shipped model makes it stale until refit
again). Runtime code: reads metadata only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ...artifacts.cache_dir import folder_in_cache
from ...artifacts.model_folder import METADATA_FILE, read_metadata
from ...core.device import DeviceInfo

log = logging.getLogger(__name__)

LOCAL_MODELS_ENV = "GEMM_PREDICTOR_LOCAL_MODELS"
REFIT_KEY = "refit"  # the metadata section refit writes
_said: set[str] = set()


def local_models_root() -> Path:
    return folder_in_cache(LOCAL_MODELS_ENV, "models")


def _once(key: str, message: str, *args: Any) -> None:
    if key not in _said:
        _said.add(key)
        log.info("gemm-predictor: " + message, *args)


def find_local_model(device: DeviceInfo, space: str, shipped: Path | None, root: Path | None = None) -> Path | None:
    """The newest validated local model for ``device`` and ``space`` whose base is ``shipped`` (the shipped model
    discovery would take; None: no shipped model, any validated base is fine); None when none fits."""
    root = local_models_root() if root is None else root
    try:
        found = sorted(root.glob(f"*/{METADATA_FILE}"))
    except OSError:
        return None
    shipped_sha = None
    if shipped is not None:
        try:
            shipped_sha = read_metadata(shipped).get("model_sha256")
        except Exception:  # noqa: BLE001 -- an unreadable shipped model is discovery's concern, not ours
            shipped_sha = None
    ranked = []
    for meta_path in found:
        folder = meta_path.parent
        try:
            meta = read_metadata(folder)
            refit = meta.get(REFIT_KEY)
            if not isinstance(refit, dict) or meta.get("region") is not None:
                continue
            if not DeviceInfo.from_metadata(meta).same_gpu(device) or meta.get("space", "default") != space:
                continue  # another GPU's labels: never taken
            if refit.get("validated") is not True:
                _once(f"unvalidated:{folder}", "skipping local model %s: it did not pass the refit's validation", folder)
                continue
            if shipped_sha is not None and refit.get("base_model_sha256") != shipped_sha:
                _once(f"stale:{folder}", "skipping local model %s: refit from another shipped model than %s "
                      "(run gemm-predictor refit again)", folder, shipped)
                continue
            ranked.append((str(meta.get("created_utc", "")), folder.name, folder))
        except Exception as exc:  # noqa: BLE001 -- one junk folder must not break a compile
            _once(f"junk:{folder}", "skipping %s, not a usable local model (%s)", folder, type(exc).__name__)
            continue
    return max(ranked)[-1] if ranked else None
