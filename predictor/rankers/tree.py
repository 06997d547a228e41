"""A shallow decision tree on log2(time / best): a ranker whose rules a person can read and check.

sklearn fits the tree; what is kept and saved is its arrays (``TreeArrays``: children, split feature and
threshold, leaf value), which predict here with numpy exactly as sklearn does. A saved tree is therefore plain
JSON data, never a pickle (a pickle runs code when loaded, whatever checksum sits beside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..core.device import DeviceInfo
from ..core.features import FEATURE_NAMES, feature_matrix
from ._common import RankerBase, training_rows

if TYPE_CHECKING:
    from sklearn.tree import DecisionTreeRegressor

LEAF = -1  # sklearn's TREE_LEAF: a node without children


@dataclass(frozen=True, eq=False)
class TreeArrays:
    """A fitted regression tree as arrays, one entry per node (sklearn's depth-first node order).

    ``left``/``right``: child indices, -1 at leaves; ``feature``/``threshold``: the split (x[feature] <= threshold
    goes left); ``missing_left``: where a NaN feature goes; ``value``: the node's prediction."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    missing_left: np.ndarray
    value: np.ndarray
    n_features: int

    @classmethod
    def from_sklearn(cls, model: DecisionTreeRegressor) -> "TreeArrays":
        t = model.tree_
        if t.n_outputs != 1:
            raise ValueError(f"only single-output trees are supported, got {t.n_outputs} outputs")
        missing = getattr(t, "missing_go_to_left", None)
        return cls._checked(t.children_left, t.children_right, t.feature, t.threshold,
                            np.zeros(t.node_count, np.uint8) if missing is None else missing,
                            t.value.reshape(t.node_count), int(t.n_features))

    @classmethod
    def _checked(cls, left, right, feature, threshold, missing_left, value, n_features: int) -> "TreeArrays":
        """Arrays of one length; every internal node's children come after it (so prediction always reaches a
        leaf) and its feature is one of ``n_features``; leaves have no children; values are finite."""
        left, right = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
        feature = np.asarray(feature, dtype=np.int64)
        threshold, value = np.asarray(threshold, dtype=np.float64), np.asarray(value, dtype=np.float64)
        missing_left = np.asarray(missing_left, dtype=bool)
        n = len(left)
        if n == 0 or any(a.shape != (n,) for a in (right, feature, threshold, missing_left, value)):
            raise ValueError("tree arrays are empty or of different lengths")
        node = np.arange(n)
        inner = left != LEAF
        if (right[~inner] != LEAF).any():
            raise ValueError("a tree leaf has a right child but no left child")
        if ((left[inner] <= node[inner]) | (right[inner] <= node[inner]) | (left[inner] >= n) | (right[inner] >= n)).any():
            raise ValueError("a tree node's children are not later nodes of the tree")
        if ((feature[inner] < 0) | (feature[inner] >= n_features)).any():
            raise ValueError(f"a tree node splits on a feature outside 0..{n_features - 1}")
        if not (np.isfinite(value).all() and np.isfinite(threshold[inner]).all()):
            raise ValueError("a tree holds a non-finite value or threshold")
        return cls(left, right, feature, threshold, missing_left, value, int(n_features))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """As ``DecisionTreeRegressor.predict``: X as float32, ``x <= threshold`` in double precision, NaN by
        ``missing_left``."""
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"expected a matrix of {self.n_features} features, got shape {X.shape}")
        node = np.zeros(len(X), dtype=np.int64)
        active = np.flatnonzero(self.left[node] != LEAF)
        while active.size:
            at = node[active]
            x = X[active, self.feature[at]].astype(np.float64)
            go_left = np.where(np.isnan(x), self.missing_left[at], x <= self.threshold[at])
            node[active] = np.where(go_left, self.left[at], self.right[at])
            active = active[self.left[node[active]] != LEAF]
        return self.value[node]

    def to_json(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "left": self.left.tolist(), "right": self.right.tolist(),
                "feature": self.feature.tolist(), "threshold": self.threshold.tolist(),
                "missing_left": self.missing_left.astype(int).tolist(), "value": self.value.tolist()}

    @classmethod
    def from_json(cls, data: Any) -> "TreeArrays":
        keys = ("left", "right", "feature", "threshold", "missing_left", "value")
        if not isinstance(data, dict) or any(not isinstance(data.get(k), list) for k in keys):
            raise ValueError(f"tree state must be an object with the lists {', '.join(keys)}")
        if isinstance(data.get("n_features"), bool) or not isinstance(data.get("n_features"), int):
            raise ValueError("tree state lacks an integer n_features")
        for k in keys:  # numbers only: nothing else may reach numpy
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in data[k]):
                raise ValueError(f"tree state {k!r} holds something other than numbers")
        return cls._checked(*(data[k] for k in keys), data["n_features"])

    def export_text(self, feature_names: list[str], decimals: int = 3, max_depth: int = 10) -> str:
        """The rules as indented text, in ``sklearn.tree.export_text``'s format."""
        lines: list[str] = []

        def depth_below(node: int) -> int:
            return 1 if self.left[node] == LEAF else 1 + max(depth_below(self.left[node]), depth_below(self.right[node]))

        def leaf(node: int, indent: str) -> None:
            lines.append(f"{indent} value: [{self.value[node]:.{decimals}f}]")

        def walk(node: int, depth: int) -> None:
            indent = ("|   " * depth)[:-3] + "---"
            if depth > max_depth + 1:
                below = depth_below(node)
                if below == 1:
                    leaf(node, indent)
                else:
                    lines.append(f"{indent} truncated branch of depth {below}")
            elif self.left[node] == LEAF:
                leaf(node, indent)
            else:
                name, threshold = feature_names[self.feature[node]], f"{self.threshold[node]:.{decimals}f}"
                lines.append(f"{indent} {name} <= {threshold}")
                walk(int(self.left[node]), depth + 1)
                lines.append(f"{indent} {name} >  {threshold}")
                walk(int(self.right[node]), depth + 1)

        walk(0, 1)
        return "\n".join(lines) + "\n"


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
        from sklearn.tree import DecisionTreeRegressor  # only to fit: a saved tree predicts with numpy alone

        fit_rows, log2_ratio = training_rows(rows, self.learn_failures)
        target = np.minimum(log2_ratio, self.target_clip)
        tree = DecisionTreeRegressor(max_depth=self.max_depth, min_samples_leaf=self.min_samples_leaf,
                                     random_state=self.seed)
        tree.fit(feature_matrix(fit_rows, device), target)
        return self._set_tree(TreeArrays.from_sklearn(tree))

    def _set_tree(self, tree: TreeArrays) -> "TreeRanker":
        if not 0 < tree.n_features <= len(FEATURE_NAMES):  # older trees split a prefix of FEATURE_NAMES
            raise ValueError(f"the tree splits {tree.n_features} features, this library computes {len(FEATURE_NAMES)}")
        self.tree_ = tree
        self.feature_names_in_ = list(FEATURE_NAMES[:tree.n_features])
        self.n_features_in_ = tree.n_features
        return self

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        self._check_fitted()
        if len(rows) == 0:
            return np.zeros(0)
        return -self.tree_.predict(feature_matrix(rows, device)[:, :self.n_features_in_]).astype(np.float64)

    def export_rules(self, decimals: int = 3) -> str:
        """The tree as indented if/else text; leaf values are predicted log2(time / best), lower = faster."""
        self._check_fitted()
        return self.tree_.export_text(list(self.feature_names_in_), decimals=decimals)

    # the saved form (predictor.artifacts.model_folder): plain JSON data
    def state_json(self) -> dict[str, Any]:
        self._check_fitted()
        return {"tree": self.tree_.to_json()}

    def load_state_json(self, state: Any) -> "TreeRanker":
        if not isinstance(state, dict) or "tree" not in state:
            raise ValueError("tree model state lacks 'tree'")
        return self._set_tree(TreeArrays.from_json(state["tree"]))
