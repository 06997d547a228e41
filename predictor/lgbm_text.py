"""Score a LightGBM text model with numpy alone: what the hook needs at compile time, without LightGBM.

Why: ``import lightgbm`` also imports scikit-learn and scipy (over a second at every compile's start), and
production images rarely carry LightGBM (the GPU machine here does not). The text format is LightGBM's own
saved model (``model.lgbm.txt``); this reads its trees into arrays and walks all trees for all rows at once.
Supported: numerical splits with LightGBM's three missing-value types (what our features produce). A model with
categorical splits or linear trees is refused with one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

_CATEGORICAL = 1
_DEFAULT_LEFT = 2
_MISSING_SHIFT = 2  # bits 2-3: 0 none, 1 zero, 2 NaN
_ZERO = 1e-35  # LightGBM's kZeroThreshold


@dataclass(frozen=True)
class TextForest:
    """A LightGBM model's trees as padded arrays (tree x node); a child < 0 is the leaf ``~child``."""

    feature_names: tuple[str, ...]
    split_feature: np.ndarray
    threshold: np.ndarray
    decision_type: np.ndarray
    left: np.ndarray
    right: np.ndarray
    leaf_value: np.ndarray  # tree x leaf
    single_leaf: np.ndarray  # bool per tree: a stump with one leaf and no split

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Raw scores (the sum of every tree's leaf), as ``lightgbm.Booster.predict(raw_score=True)``.

        All trees walk all rows at once, one level per step; a (row, tree) pair leaves the working set when it
        reaches its leaf. About 2.5 ms for 25 rows of a 250-tree model on one CPU thread, 200 ms for 2400
        (LightGBM's C++: 0.45 / 35 ms, but importing it costs over a second: the exhaustive space's ranker uses it)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise ValueError(f"expected a (rows, {len(self.feature_names)}) feature matrix, got {X.shape}")
        rows, trees = X.shape[0], self.split_feature.shape[0]
        node = np.zeros((rows, trees), dtype=np.int64)
        node[:, self.single_leaf] = -1  # leaf 0
        r, t = np.nonzero(node >= 0)
        n = node[r, t]
        while len(r):
            value = X[r, self.split_feature[t, n]]
            dtype = self.decision_type[t, n]
            missing = (dtype >> _MISSING_SHIFT) & 3
            is_nan = np.isnan(value)
            value = np.where(is_nan & (missing != 2), 0.0, value)  # NaN counts as 0 unless NaN is "missing"
            use_default = ((missing == 1) & (np.abs(value) <= _ZERO)) | ((missing == 2) & is_nan)
            go_left = np.where(use_default, (dtype & _DEFAULT_LEFT) != 0, value <= self.threshold[t, n])
            n = np.where(go_left, self.left[t, n], self.right[t, n])
            done = n < 0
            node[r[done], t[done]] = n[done]
            r, t, n = r[~done], t[~done], n[~done]
        return self.leaf_value[np.arange(trees), ~node].sum(axis=1)


def _ints(text: str) -> np.ndarray:
    return np.array(text.split(), dtype=np.int64)


def _floats(text: str) -> np.ndarray:
    return np.array(text.split(), dtype=np.float64)


def load_text_forest(path: str | Path) -> TextForest:
    """Parse ``model.lgbm.txt``; a ValueError naming the file for anything this reader does not support."""
    path = Path(path)
    text = path.read_text()
    header, _, body = text.partition("\nTree=")
    fields = dict(line.split("=", 1) for line in header.splitlines() if "=" in line)
    if "feature_names" not in fields or not body:
        raise ValueError(f"{path}: not a LightGBM text model (no feature_names or no trees)")
    if fields.get("num_class", "1") != "1" or fields.get("num_tree_per_iteration", "1") != "1":
        raise ValueError(f"{path}: multi-class LightGBM models are not supported")
    trees = []
    for block in ("Tree=" + body).split("\nTree=")[0:]:
        block = block.split("end of trees")[0]
        tree = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "leaf_value" not in tree:
            continue
        if int(tree.get("num_cat", "0")) or tree.get("is_linear", "0") != "0":
            raise ValueError(f"{path}: categorical splits or linear trees are not supported")
        trees.append(tree)
    if not trees:
        raise ValueError(f"{path}: no trees")
    nodes = max(int(t["num_leaves"]) - 1 for t in trees) or 1
    leaves = max(int(t["num_leaves"]) for t in trees)

    def pad(key: str, width: int, parse, fill) -> np.ndarray:
        out = np.full((len(trees), width), fill, dtype=parse("0").dtype)
        for i, t in enumerate(trees):
            values = parse(t[key]) if key in t else parse("")
            out[i, :len(values)] = values
        return out

    decision = pad("decision_type", nodes, _ints, 0)
    left, right = pad("left_child", nodes, _ints, -1), pad("right_child", nodes, _ints, -1)
    if (decision & _CATEGORICAL).any():
        raise ValueError(f"{path}: categorical splits are not supported")
    return TextForest(
        feature_names=tuple(fields["feature_names"].split()),
        split_feature=pad("split_feature", nodes, _ints, 0), threshold=pad("threshold", nodes, _floats, 0.0),
        decision_type=decision, left=left, right=right, leaf_value=pad("leaf_value", leaves, _floats, 0.0),
        single_leaf=np.array([int(t["num_leaves"]) == 1 for t in trees]))

