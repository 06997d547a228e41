"""Which model folder the hook uses for this GPU: a validated local model (refit here from the label store), then
those under ``artifacts.roots.model_roots`` (``$GEMM_PREDICTOR_MODELS``, then the package's own models). Runtime code:
reads metadata only (no model is parsed here).

Local models: what ``gemm-predictor refit`` made on this machine (``predictor/offline/refit.py``), under
``$GEMM_PREDICTOR_LOCAL_MODELS`` or ``~/.cache/gemm-predictor/models``. One comes before the shipped model only when it
is for this exact GPU (name and capability; never a similar one: its labels were measured here), for the space asked,
passed the refit's validation, and was validated against the model that ships now (a package upgrade that changes the
shipped model makes it stale until refit again)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...artifacts.cache_dir import folder_in_cache
from ...artifacts.metadata import METADATA_FILE, read_metadata
from ...artifacts.roots import MODELS_ENV, model_roots, shipped_roots
from ...core.device import DeviceInfo

log = logging.getLogger(__name__)
_skipped: set[str] = set()  # folders already warned about: one warning each per process

PREFERRED_SUFFIX = "-lgbm-all"  # the shipped default: LambdaRank refit on every labelled row


def find_model(device: DeviceInfo, space: str = "default", roots: Sequence[Path] | None = None,
               allow_similar: bool = False, region: str | None = None) -> Path | None:
    """The model folder made for ``device`` (same GPU name and capability): one for ``space`` first, then
    a ``*-lgbm-all`` folder, then the earliest root, then by name. With ``allow_similar``, a model made for
    another GPU of the same architecture (``DeviceInfo.same_architecture``) is taken when no exact one
    exists. ``region``: a model of that region (metadata ``region``, ``predictor.core.regions``); None, the default,
    only models of every problem. None when no folder fits.

    Without ``roots``, a validated local model for this exact GPU (refit here from the label
    store) comes before the shipped one."""
    if roots is None and region is None:
        shipped = find_model(device, space, model_roots(), allow_similar, region)
        local = find_local_model(device, space, shipped)
        return local if local is not None else shipped
    ranked = []
    for root_index, root in enumerate(model_roots() if roots is None else roots):
        try:
            found = sorted(Path(root).glob(f"*/{METADATA_FILE}"))
        except OSError as exc:
            log.warning("gemm-predictor: skipping model root %s (%s)", root, exc)
            continue
        for meta_path in found:
            folder = meta_path.parent
            try:
                meta = read_metadata(folder)
                trained_for = DeviceInfo.from_metadata(meta)
                space_name = meta.get("space", "default")
                if meta.get("region") != region:
                    continue
            except Exception as exc:  # noqa: BLE001 -- one junk folder (any error, RecursionError too) must not break
                # every compile: it is skipped, named once
                _skip_once(folder, exc)
                continue
            exact = trained_for.same_gpu(device)
            if exact or (allow_similar and trained_for.same_architecture(device)):
                ranked.append((not exact, space_name != space,
                               not folder.name.endswith(PREFERRED_SUFFIX), root_index, folder.name, folder))
    return min(ranked)[-1] if ranked else None


def _skip_once(folder: Path, exc: BaseException) -> None:
    key = str(folder)
    if key not in _skipped:
        _skipped.add(key)
        text = (str(exc).strip().splitlines() or [""])[0][:160]
        log.warning("gemm-predictor: skipping %s, not a usable model folder (%s: %s)", folder, type(exc).__name__, text)


def _this_gpu() -> DeviceInfo | None:
    import torch

    return DeviceInfo.from_torch() if torch.cuda.is_available() else None


__all__ = ["MODELS_ENV", "PREFERRED_SUFFIX", "find_model", "model_roots", "shipped_roots"]


# --- local models ------------------------------------------------------------------------------------------------

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
                _once(f"unvalidated:{folder}", "skipping local model %s: it did not pass the refit's validation",
                      folder)
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
