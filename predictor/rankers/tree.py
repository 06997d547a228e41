"""A shallow decision tree on log2(time / best): a ranker whose rules a person can read and check."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.tree import DecisionTreeRegressor, export_text

from ..device import DeviceInfo
from ..features import FEATURE_NAMES, feature_matrix
from ._common import RankerBase, training_rows


class TreeRanker(RankerBase):
    """sklearn ``DecisionTreeRegressor`` of the clipped log2 time ratio; score = -prediction."""

    name = "tree"

    # max_depth 14, min_samples_leaf 20: chosen by group CV on the training side only (benchmarks/tune_cv.py)
    def __init__(self, max_depth: int = 14, min_samples_leaf: int = 20, target_clip: float = 4.0, seed: int = 0,
                 learn_failures: bool = False) -> None:
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.target_clip = target_clip
        self.seed = seed
        self.learn_failures = learn_failures

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "TreeRanker":
        fit_rows, log2_ratio = training_rows(rows, self.learn_failures)
        target = np.minimum(log2_ratio, self.target_clip)
        tree = DecisionTreeRegressor(max_depth=self.max_depth, min_samples_leaf=self.min_samples_leaf,
                                     random_state=self.seed)
        tree.fit(feature_matrix(fit_rows, device), target)
        self.tree_ = tree
        self.feature_names_in_ = list(FEATURE_NAMES)
        self.n_features_in_ = len(FEATURE_NAMES)
        return self

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        self._check_fitted()
        if len(rows) == 0:
            return np.zeros(0)
        return -self.tree_.predict(feature_matrix(rows, device)).astype(np.float64)

    def export_rules(self, decimals: int = 3) -> str:
        """The tree as indented if/else text; leaf values are predicted log2(time / best), lower = faster."""
        self._check_fitted()
        return export_text(self.tree_, feature_names=list(self.feature_names_in_), decimals=decimals)
