"""Baseline rankers with nothing to learn: evaluation yardsticks and test doubles at once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.device import DeviceInfo
from ..core.features import FEATURE_NAMES, feature_matrix
from ._common import StatelessRanker

_ROOFLINE = FEATURE_NAMES.index("log2_roofline_us")


def _inductor_rank(rows: pd.DataFrame, who: str) -> np.ndarray:
    """Inductor's list position per row (0 = first offered); missing positions go last."""
    if "inductor_rank" not in rows.columns:
        raise ValueError(f"{who} needs the 'inductor_rank' column (Inductor's list order); these rows lack it")
    rank = rows["inductor_rank"].to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(rank).any():
        rank = np.where(np.isnan(rank), np.nanmax(rank, initial=0.0) + 1.0, rank)
    return rank


class RooflineRanker(StatelessRanker):
    """Analytic: minus the roofline time estimate of the features (padded tiles, waves, decompose-K traffic)."""

    name = "roofline"

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        if len(rows) == 0:
            return np.zeros(0)
        return -feature_matrix(rows, device)[:, _ROOFLINE].astype(np.float64)


class InductorOrderRanker(StatelessRanker):
    """Inductor's own list order (the ``inductor_rank`` column): what truncating its list to k would keep."""

    name = "inductor_order"

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        return -_inductor_rank(rows, self.name)


class AtenOnlyRanker(StatelessRanker):
    """aten (cuBLAS) first — plain ``torch.compile`` without max-autotune — then Inductor's order."""

    name = "aten_only"

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        rank = _inductor_rank(rows, self.name)
        is_aten = (rows["family"] == "aten").to_numpy(dtype=bool, na_value=False)
        return np.where(is_aten, 1.0, 0.0) * (rank.max(initial=0.0) + 2.0) - rank


class RandomRanker(StatelessRanker):
    """Uniform random scores, seeded. A row's score depends only on (seed, problem_id, candidate), not on
    which other rows are scored with it, so subsets and reorderings rank consistently."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        if len(rows) == 0:
            return np.zeros(0)
        key = f"{int(self.seed) & 0xFFFFFFFFFFFFFFFF:016x}"  # hash_array wants a 16-character key
        if {"problem_id", "candidate"} <= set(rows.columns):
            h = pd.util.hash_array(rows["problem_id"].to_numpy(dtype=object), hash_key=key)
            h = h * np.uint64(0x9E3779B97F4A7C15) ^ pd.util.hash_array(rows["candidate"].to_numpy(dtype=object), hash_key=key)
            return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        return np.random.default_rng(self.seed).random(len(rows))
