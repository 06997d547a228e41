"""The region models the hook uses beside the GPU's main model (``predictor.core.regions``): each ranks one region's GEMMs.

Found like the main model (``discovery.find_model`` with ``region=``), for the same GPU, and loaded once per pruner
(``loading.load_region_models``); a region model that cannot be loaded leaves that region to the main model, with
one warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.device import DeviceInfo
from ...core.regions import region_of


@dataclass(frozen=True)
class RegionModel:
    region: str  # a name of predictor.core.regions.REGIONS
    ranker: Any
    metadata: dict[str, Any]
    device: DeviceInfo  # the GPU it was trained for: its features are computed with this device's peaks
    folder: Path


def model_for(models: dict[str, RegionModel], problem: Any) -> RegionModel | None:
    """The region model that ranks ``problem``, or None (the main model ranks it)."""
    return models.get(region_of(problem)) if models else None
