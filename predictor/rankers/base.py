"""The Ranker role: score the candidates of problems; higher score = predicted faster."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from ..device import DeviceInfo


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


def keep_best(scores: np.ndarray, k: int, margin: float | None = None) -> np.ndarray:
    """Indices of the candidates one problem keeps: the k best scores (ties in the given order), minus any
    more than ``margin`` below the favourite. The hook and the offline evaluation share this rule."""
    scores = np.asarray(scores, dtype=float)
    order = np.argsort(-scores, kind="stable")
    chosen = order[:k]
    if margin is not None and len(order):
        chosen = chosen[scores[chosen] >= scores[order[0]] - margin]
    return chosen


def with_aten_fallback(kept: np.ndarray, scores: np.ndarray, is_aten: np.ndarray) -> np.ndarray:
    """``kept`` plus the best-scored aten candidate when none is kept (cuBLAS as the safe fallback)."""
    is_aten = np.asarray(is_aten, dtype=bool)
    if not is_aten.any() or is_aten[kept].any():
        return kept
    aten = np.flatnonzero(is_aten)
    best = aten[np.argsort(-np.asarray(scores, dtype=float)[aten], kind="stable")[0]]
    return np.append(kept, best)
