"""LightGBM rankers: LambdaRank over each problem's candidates, and a pointwise regressor on log time ratio.

Defaults are sized for the hook's latency budget: LightGBM's predictor costs ~20-25 ns per tree and
row on one thread, so 60 trees of 15 leaves score 1000 candidates in ~1.2 ms (+ ~0.5 ms features).
The shipped LambdaRank default is larger (250 trees of 31 leaves, chosen by group CV on the H200 data): still
well under a millisecond for the ~30 choices of Inductor's default list.

By default only rows with status ``ok`` are learned from. ``learn_failures=True`` also keeps the failed
rows of each problem, labelled as the slowest, so the ranker learns which candidates do not run (a
failed top-1 scores 0 in ``predictor.offline.evaluate``); on data whose failures are systematic it should be on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..core.device import DeviceInfo
from ..core.feature_names import FEATURE_NAMES, model_feature_count
from ..core.features import feature_matrix
from ._common import LEVELS_PER_DOUBLING, RELEVANCE_LEVELS, RankerBase, fraction_gains, relevance, training_rows

if TYPE_CHECKING:  # imported where a booster is fitted: the CLI's other commands run without LightGBM
    import lightgbm as lgb

GAINS = ("fraction", "exponential")


class _LGBMBase(RankerBase):
    """Shared fit/score plumbing; subclasses choose the estimator, its labels and the score's sign."""

    def __init__(self, n_estimators: int = 60, learning_rate: float = 0.1, num_leaves: int = 15, max_depth: int = -1,
                 min_child_samples: int = 20, subsample: float = 1.0, colsample_bytree: float = 1.0,
                 reg_lambda: float = 0.0, seed: int = 0, n_jobs: int = 1, learn_failures: bool = False) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.max_depth = max_depth
        self.min_child_samples = min_child_samples
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.seed = seed
        self.n_jobs = n_jobs
        self.learn_failures = learn_failures

    def _lgbm_params(self) -> dict:
        return dict(
            n_estimators=self.n_estimators, learning_rate=self.learning_rate, num_leaves=self.num_leaves,
            max_depth=self.max_depth, min_child_samples=self.min_child_samples, subsample=self.subsample,
            subsample_freq=1 if self.subsample < 1.0 else 0, colsample_bytree=self.colsample_bytree,
            reg_lambda=self.reg_lambda, random_state=self.seed, n_jobs=self.n_jobs,
            deterministic=True, force_col_wise=True, verbose=-1,
        )

    def _fit_booster(self, X: np.ndarray, log2_ratio: np.ndarray, rows: pd.DataFrame) -> lgb.Booster:
        raise NotImplementedError

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "_LGBMBase":
        """Fit on the ``ok`` rows (and, with ``learn_failures``, the failed ones as the slowest)."""
        fit_rows, log2_ratio = training_rows(rows, self.learn_failures)
        # group by problem: LightGBM's query groups are runs of consecutive rows
        order = np.argsort(fit_rows["problem_id"].to_numpy(dtype=object), kind="stable")
        fit_rows, log2_ratio = fit_rows.iloc[order], log2_ratio[order]
        return self.fit_features(feature_matrix(fit_rows, device), log2_ratio, fit_rows)

    def fit_features(self, X: np.ndarray, log2_ratio: np.ndarray, rows: pd.DataFrame) -> "_LGBMBase":
        """Fit on a feature matrix already built, with each row's log2(time / its problem's best) and the rows
        (their ``problem_id`` makes the query groups): how ``predictor.offline.calibrate_fit`` fits rows of two GPUs,
        each with its own device features."""
        order = np.argsort(rows["problem_id"].to_numpy(dtype=object), kind="stable")  # a no-op after fit's sort
        self.booster_ = self._fit_booster(np.ascontiguousarray(X[order]), log2_ratio[order], rows.iloc[order])
        self.feature_names_in_ = list(FEATURE_NAMES)
        self.n_features_in_ = len(FEATURE_NAMES)
        return self

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        if len(rows) == 0:
            self._check_fitted()
            return np.zeros(0)
        return self.score_features(feature_matrix(rows, device))

    def score_features(self, X: np.ndarray) -> np.ndarray:
        """``score`` from a feature matrix already built (the hook's ``features.runtime_feature_matrix``)."""
        self._check_fitted()
        if len(X) == 0:
            return np.zeros(0)
        raw = self.booster_.predict(X[:, :self.n_features_in_], num_threads=max(int(self.n_jobs), 1))
        return self._sign * np.asarray(raw, dtype=np.float64)

    def _set_booster(self, booster: lgb.Booster) -> "_LGBMBase":
        """Restore the fitted state from a saved booster (used by ``predictor.artifacts.model_folder``)."""
        count = model_feature_count(booster.feature_name())  # a prefix of FEATURE_NAMES (older models)
        self.booster_ = booster
        self.feature_names_in_ = list(FEATURE_NAMES[:count])
        self.n_features_in_ = count
        return self


class LGBMRankerModel(_LGBMBase):
    """LambdaRank, one query per problem.

    Labels: relevance = clip(30 - round(10 * log2(time / best)), 0, 30), an integer that drops one level
    per ~7 % of slowdown and reaches 0 at 8x the problem's best. ``gain="fraction"`` (default) gives
    level r the gain 2**((r - 30) / 10) ~= best / time, so NDCG@1 is the speed fraction of the top pick
    (what oracle@1 averages); ``"exponential"`` is LightGBM's 2**r - 1, which all but ignores
    everything below the few fastest.
    """

    name = "lgbm_rank"
    _sign = 1.0

    # 250 trees of 31 leaves: chosen by group CV on the training side only (benchmarks/tune_cv.py; 15 leaves
    # until the corpus was finished, when 31 leaves scored 0.9838 vs 0.9800 on the inner folds)
    def __init__(self, n_estimators: int = 250, learning_rate: float = 0.1, num_leaves: int = 31, max_depth: int = -1,
                 min_child_samples: int = 20, subsample: float = 1.0, colsample_bytree: float = 1.0,
                 reg_lambda: float = 0.0, seed: int = 0, n_jobs: int = 1, learn_failures: bool = False,
                 gain: str = "fraction", truncation_level: int = 30) -> None:
        super().__init__(n_estimators, learning_rate, num_leaves, max_depth, min_child_samples, subsample,
                         colsample_bytree, reg_lambda, seed, n_jobs, learn_failures)
        self.gain = gain
        self.truncation_level = truncation_level

    def _fit_booster(self, X: np.ndarray, log2_ratio: np.ndarray, rows: pd.DataFrame) -> lgb.Booster:
        if self.gain not in GAINS:
            raise ValueError(f"gain must be one of {', '.join(GAINS)}, got {self.gain!r}")
        labels = relevance(log2_ratio)
        _, group = np.unique(rows["problem_id"].to_numpy(dtype=object), return_counts=True)
        extra = {"label_gain": fraction_gains()} if self.gain == "fraction" else {}
        import lightgbm as lgb

        model = lgb.LGBMRanker(objective="lambdarank", lambdarank_truncation_level=self.truncation_level,
                               **extra, **self._lgbm_params())
        model.fit(X, labels, group=group, feature_name=list(FEATURE_NAMES))
        return model.booster_


class LGBMRegressorModel(_LGBMBase):
    """Pointwise L2 regression of log2(time / best), clipped at ``target_clip`` (16x slower by default,
    so hopeless candidates do not dominate the loss); score = -prediction."""

    name = "lgbm_reg"
    _sign = -1.0

    def __init__(self, n_estimators: int = 60, learning_rate: float = 0.1, num_leaves: int = 15, max_depth: int = -1,
                 min_child_samples: int = 20, subsample: float = 1.0, colsample_bytree: float = 1.0,
                 reg_lambda: float = 0.0, seed: int = 0, n_jobs: int = 1, learn_failures: bool = False,
                 target_clip: float = 4.0) -> None:
        super().__init__(n_estimators, learning_rate, num_leaves, max_depth, min_child_samples, subsample,
                         colsample_bytree, reg_lambda, seed, n_jobs, learn_failures)
        self.target_clip = target_clip

    def _fit_booster(self, X: np.ndarray, log2_ratio: np.ndarray, rows: pd.DataFrame) -> lgb.Booster:
        target = np.minimum(log2_ratio, self.target_clip)
        import lightgbm as lgb

        model = lgb.LGBMRegressor(objective="regression", **self._lgbm_params())
        model.fit(X, target, feature_name=list(FEATURE_NAMES))
        return model.booster_


__all__ = ["LGBMRankerModel", "LGBMRegressorModel", "RELEVANCE_LEVELS", "LEVELS_PER_DOUBLING"]
