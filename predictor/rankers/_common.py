"""What the rankers share: the labels they learn from, and the sklearn-style fitted check."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

# LambdaRank relevance: RELEVANCE_LEVELS for a candidate as fast as the problem's best, one level less
# per 1/LEVELS_PER_DOUBLING of a doubling in time (~7 % slower per level), 0 from 2**(30/10) = 8x slower.
RELEVANCE_LEVELS = 30
LEVELS_PER_DOUBLING = 10


class RankerBase(BaseEstimator):
    """sklearn conventions: hyper-parameters only in ``__init__``, learned state ends with ``_``
    (which ``get_params`` and the artifact metadata rely on). ``name`` is the registry name."""

    name: str = ""

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"{type(self).__name__} ranker {self.name!r} is not fitted; call fit first")

    def __sklearn_is_fitted__(self) -> bool:
        return any(k.endswith("_") and not k.startswith("_") for k in vars(self))


class StatelessRanker(RankerBase):
    """A ranker with nothing to learn: ``fit`` only checks its arguments; ``score`` works unfitted."""

    def fit(self, rows: pd.DataFrame, device) -> "StatelessRanker":
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return True

    # the saved form (predictor.artifacts.model_folder): nothing learned, so an empty object; the parameters live in metadata
    def state_json(self) -> dict:
        return {}

    def load_state_json(self, state) -> "StatelessRanker":
        if state != {}:
            raise ValueError(f"ranker {self.name!r} learns nothing; its saved state must be {{}}")
        return self


def ok_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a ranker may learn from: status ``ok`` with a positive, finite time."""
    if "time_us" not in rows.columns:
        raise ValueError("fitting needs the label column 'time_us'")
    time_us = rows["time_us"].to_numpy(dtype=float, na_value=np.nan)
    keep = np.isfinite(time_us) & (time_us > 0)
    if "status" in rows.columns:
        keep &= (rows["status"] == "ok").to_numpy(dtype=bool, na_value=False)
    ok = rows[keep]
    if ok.empty:
        raise ValueError("no rows with status 'ok' and a positive time_us to fit on")
    return ok


def training_rows(rows: pd.DataFrame, learn_failures: bool = False) -> tuple[pd.DataFrame, np.ndarray]:
    """(rows to fit on, their log2(time / best)). By default only ``ok`` rows; with ``learn_failures`` the
    failed rows of problems that have an ok row are kept too, labelled infinitely slow (each ranker maps
    that to its worst label), so a ranker can learn which candidates do not run."""
    ok = ok_rows(rows)
    if not learn_failures:
        return ok, log2_time_ratio(ok)
    failed = (rows["status"] != "ok").to_numpy(dtype=bool, na_value=True)
    failed = rows[failed & rows["problem_id"].isin(ok["problem_id"]).to_numpy()]
    both = pd.concat([ok, failed])
    ratio = np.concatenate([log2_time_ratio(ok), np.full(len(failed), np.inf)])
    return both, ratio


def log2_time_ratio(rows: pd.DataFrame) -> np.ndarray:
    """log2(time / the best time of the row's problem) >= 0, over the given (ok) rows."""
    time = rows["time_us"].to_numpy(dtype=np.float64)
    best = rows.groupby("problem_id", sort=False)["time_us"].transform("min").to_numpy(dtype=np.float64)
    return np.log2(time / best)


def relevance(log2_ratio: np.ndarray, levels: int = RELEVANCE_LEVELS, per_doubling: int = LEVELS_PER_DOUBLING) -> np.ndarray:
    """Integer LambdaRank labels: ``levels`` for the best, minus ``per_doubling`` per doubling of time, floored at 0."""
    return np.clip(levels - np.rint(np.asarray(log2_ratio) * per_doubling), 0, levels).astype(np.int32)


def fraction_gains(levels: int = RELEVANCE_LEVELS, per_doubling: int = LEVELS_PER_DOUBLING) -> list[float]:
    """Label gains equal to the speed fraction best/time of each relevance level, 2**((level - levels) / per_doubling).

    With these gains NDCG@1 of a problem is (up to the rounding of levels) the fraction of the best
    speed its top pick reaches: the per-problem quantity behind oracle@1."""
    return [float(2.0 ** ((level - levels) / per_doubling)) for level in range(levels + 1)]
