"""The region models the hook uses beside the GPU's main model (``predictor.core.regions``): each ranks one region's GEMMs.

Found like the main model (``discovery.find_model`` with ``region=``), for the same GPU; loaded once per pruner.
A region model that cannot be loaded leaves that region to the main model, with one warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...artifacts.model_folder import load_runtime_model, read_metadata
from ...core.device import DeviceInfo
from ...core.regions import REGIONS, region_of
from .discovery import find_model


@dataclass(frozen=True)
class RegionModel:
    region: str  # a name of predictor.core.regions.REGIONS
    ranker: Any
    metadata: dict[str, Any]
    device: DeviceInfo  # the GPU it was trained for: its features are computed with this device's peaks
    folder: Path


def load_region_models(device: DeviceInfo, space: str, allow_similar: bool,
                       warn: Callable[[str, str], None]) -> dict[str, RegionModel]:
    """region -> its model, for every region with a model for ``device`` (``warn(key, message)`` on a bad one)."""
    found: dict[str, RegionModel] = {}
    for region in REGIONS:
        folder = find_model(device, space, allow_similar=allow_similar, region=region)
        if folder is None:
            continue
        try:
            trained_for = DeviceInfo.from_metadata(read_metadata(folder))
            similar = not trained_for.same_gpu(device)
            ranker, metadata = load_runtime_model(folder, expect_device=None if similar else device)
        except Exception as exc:  # noqa: BLE001 -- the main model still ranks the region: never break a compile
            warn(f"region_model:{region}", f"{folder}: cannot load ({type(exc).__name__}: {exc}); the main model "
                 f"ranks the {region} GEMMs")
            continue
        found[region] = RegionModel(region, ranker, metadata, DeviceInfo.from_metadata(metadata), folder)
    return found


def model_for(models: dict[str, RegionModel], problem: Any) -> RegionModel | None:
    """The region model that ranks ``problem``, or None (the main model ranks it)."""
    return models.get(region_of(problem)) if models else None
