"""Where model folders and per-GPU tables are found: ``$GEMM_PREDICTOR_MODELS``, then the package's own models.

The shipped models are the checkout's top-level ``models/`` folder; a wheel carries them as the package data
``predictor/models`` (``setup.py``), found through ``importlib.resources``. A per-GPU table (``gemv-blocks``,
``few-rows``) lives in a folder of its own under a root.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .reading import TABLE_BYTES, InputError, read_json

log = logging.getLogger(__name__)
MODELS_ENV = "GEMM_PREDICTOR_MODELS"  # extra model roots (os.pathsep-separated), searched first


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
    checkout = Path(__file__).resolve().parents[2]  # predictor/artifacts/roots.py
    return [checkout / "models"] if (checkout / "pyproject.toml").is_file() else []


def gpu_slug(gpu_name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``: how per-GPU files and folders are named (a table
    named for a prefix of the slug, ``nvidia-h100.json``, serves every GPU whose slug starts with it)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def table_path(gpu_name: str, roots: Sequence[Path], capability: str | None = None, *, folder: str,
               skip: Path | None = None) -> Path | None:
    """``<root>/<folder>/<gpu slug>.json`` for the first root that has one (a per-GPU table: ``gemv-blocks``,
    ``few-rows``); else, given ``capability``
    ("9.0"), a table made on another GPU of that architecture (an H100 takes the H200's: the same SM, the blocks
    that win are bandwidth-bound alike). ``skip``: a table not to return (to find a sibling of it)."""
    slug = gpu_slug(gpu_name)
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


def made_for(path: Path, gpu_name: str) -> bool:
    """Whether the per-GPU table ``path`` is this GPU's own (``table_path``'s name match), not one borrowed from
    another GPU of the same architecture."""
    slug = gpu_slug(gpu_name)
    return bool(slug) and slug.startswith(path.stem)


def for_this_gpu(table: Any, empty: Any, allow_similar: bool = True) -> Any:
    """``table(gpu name, capability, model roots)`` for the current CUDA GPU (a per-GPU table's reader: GEMV blocks,
    few rows, grouped GEMMs); ``empty`` without a GPU. Without ``allow_similar`` the capability is left out (""),
    so only a table made for this GPU is found: nothing per-GPU is read from another GPU's file."""
    import torch

    if not torch.cuda.is_available():
        return empty
    capability = ".".join(map(str, torch.cuda.get_device_capability())) if allow_similar else ""
    return table(torch.cuda.get_device_name(), capability, tuple(str(r) for r in model_roots()))


# which file decided each per-GPU table kind, per allow_similar_gpu setting (``predictor.stats()`` says it)
_DECIDED: dict[tuple[str, bool], str] = {}


def note_table(folder: str, capability: str, path: Path | None, gpu_name: str, what: str, serves: str,
               plain: str) -> None:
    """Record which file a table reader took for ``folder`` (this GPU's own, one borrowed from another GPU of the
    same architecture, or none: plain's choices) and say a borrowed or missing one in one line. ``what`` names the
    table, ``serves`` the GEMMs it decides, ``plain`` what they keep without it; ``capability`` "" means borrowing
    was not allowed. A reader calls this once per process and setting (its table is cached)."""
    if path is None:
        text = "none (plain torch.compile's choices)"
        log.warning("gemm-predictor: no %s table for %s%s; %s keep plain torch.compile's %s (gemm-predictor "
                    "calibrate --only %s makes one)", what, gpu_name,
                    "" if capability else " (allow_similar_gpu=False: no other GPU's)", serves, plain, folder)
    elif made_for(path, gpu_name):
        text = f"{path} (this GPU's)"
    else:
        text = f"{path} (borrowed from another GPU of cc {capability}: allow_similar_gpu)"
        log.warning("gemm-predictor: no %s table for %s; %s use %s, made on another GPU of its architecture "
                    "(allow_similar_gpu=False refuses)", what, gpu_name, serves, path)
    _DECIDED[(folder, bool(capability))] = text


def tables_decided(allow_similar: bool) -> dict[str, str]:
    """folder -> which file decided that kind of table in this process, under ``allow_similar`` (``note_table``)."""
    return {folder: text for (folder, similar), text in sorted(_DECIDED.items()) if similar == allow_similar}
