"""Which model folder the hook uses for this GPU, searched under ``artifacts.roots.model_roots``
(``$GEMM_PREDICTOR_MODELS``, then the package's own models). Runtime code: reads metadata only (no model is parsed
here)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

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

    Without ``roots``, a validated local model for this exact GPU (``local_models``: refit here from the label
    store) comes before the shipped one."""
    if roots is None and region is None:
        from .local_models import find_local_model

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
