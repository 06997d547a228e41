"""Which model folder the hook uses for this GPU: ``$GEMM_PREDICTOR_MODELS``, then the package's own models.

The shipped models are the checkout's top-level ``models/`` folder; a wheel carries them as the package data
``predictor/models`` (``setup.py``), found through ``importlib.resources``. Runtime code: reads metadata only
(no model is parsed here).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ...artifacts.model_folder import METADATA_FILE, read_metadata
from ...artifacts.atomic import TABLE_BYTES, InputError, read_json
from ...core.device import DeviceInfo

log = logging.getLogger(__name__)
_skipped: set[str] = set()  # folders already warned about: one warning each per process

MODELS_ENV = "GEMM_PREDICTOR_MODELS"  # extra model roots (os.pathsep-separated), searched first
PREFERRED_SUFFIX = "-lgbm-all"  # the shipped default: LambdaRank refit on every labelled row


def model_roots() -> list[Path]:
    """Where ``install(model=None)`` looks for model folders: ``$GEMM_PREDICTOR_MODELS`` first, then the
    package's own ``models/`` folder. Never the working directory: a ``./models`` there is whatever the current
    folder holds (a download, another user's checkout), and a model is a file we act on; pass
    ``install(model=path)`` or set ``$GEMM_PREDICTOR_MODELS`` to use models from anywhere else."""
    extra = [Path(p) for p in os.environ.get(MODELS_ENV, "").split(os.pathsep) if p]
    return [*extra, *shipped_roots()]


def shipped_roots() -> list[Path]:
    """The shipped models: ``predictor/models`` of an installed wheel, else the ``models/`` folder of the
    checkout this package runs from (recognised by its ``pyproject.toml``, so an installed package never
    looks at whatever ``models`` folder sits beside it in site-packages)."""
    packaged = resources.files("predictor").joinpath("models")  # setup.py maps models/ to predictor.models
    if isinstance(packaged, Path) and packaged.is_dir():  # a zipped package cannot be globbed: not supported
        return [packaged]
    checkout = Path(__file__).resolve().parents[3]  # predictor/runtime/choices/discovery.py
    return [checkout / "models"] if (checkout / "pyproject.toml").is_file() else []


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


def table_path(gpu_name: str, roots: Sequence[Path], capability: str | None = None, *, folder: str,
               skip: Path | None = None) -> Path | None:
    """``<root>/<folder>/<gpu slug>.json`` for the first root that has one (a per-GPU table: ``gemv-blocks``,
    ``few-rows``); else, given ``capability``
    ("9.0"), a table made on another GPU of that architecture (an H100 takes the H200's: the same SM, the blocks
    that win are bandwidth-bound alike). ``skip``: a table not to return (to find a sibling of it)."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    tables = [t for root in roots for t in sorted((Path(root) / folder).glob("*.json")) if t != skip]
    for candidate in tables if slug else ():
        if slug.startswith(candidate.stem):  # "nvidia-h100-80gb-hbm3" uses nvidia-h100.json
            return candidate
    for candidate in tables if capability else ():
        try:  # a FIFO or an oversized file here is skipped (and warned about by the table's reader if chosen)
            if str(read_json(candidate, TABLE_BYTES, f"{folder} table").get("cc")) == capability:
                return candidate
        except (InputError, AttributeError):  # AttributeError: JSON that is not an object
            continue
    return None


def for_this_gpu(table: Any, empty: Any) -> Any:
    """``table(gpu name, capability, model roots)`` for the current CUDA GPU (a per-GPU table's reader: GEMV blocks,
    few rows); ``empty`` without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return empty
    capability = ".".join(map(str, torch.cuda.get_device_capability()))
    return table(torch.cuda.get_device_name(), capability, tuple(str(r) for r in model_roots()))
