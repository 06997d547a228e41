"""The Ranker role: score the candidates of problems; higher score = predicted faster."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from ..core.device import DeviceInfo


@runtime_checkable
class Ranker(Protocol):
    """sklearn-style: hyper-parameters in ``__init__``, learned state ends with ``_``.

    ``rows`` are dataset rows (problem fields + candidate fields; labels only needed by ``fit``).
    ``score`` must work on the rows of many problems at once and return one float per row;
    ranking happens within each ``problem_id``.
    """

    name: str

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "Ranker": ...

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray: ...


def top_k(rows: pd.DataFrame, scores: np.ndarray, k: int) -> pd.DataFrame:
    """The k best-scored rows of each problem (ties broken by the row order, so results are deterministic)."""
    ranked = rows.assign(_score=np.asarray(scores, dtype=float), _order=np.arange(len(rows)))
    ranked = ranked.sort_values(["problem_id", "_score", "_order"], ascending=[True, False, True], kind="stable")
    return ranked.groupby("problem_id", sort=False).head(k).drop(columns=["_order"])
