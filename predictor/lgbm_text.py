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
from typing import TYPE_CHECKING

import numpy as np

from .features import FEATURE_NAMES, feature_matrix

if TYPE_CHECKING:
    import pandas as pd

    from .device import DeviceInfo

_CATEGORICAL = 1
_DEFAULT_LEFT = 2
_MISSING_SHIFT = 2  # bits 2-3: 0 none, 1 zero, 2 NaN
_ZERO = 1e-35  # LightGBM's kZeroThreshold
_CHUNK_ROWS = 512


@dataclass(frozen=True)
class TextForest:
    """A LightGBM model's trees as flat arrays. Tree ``t`` owns the slots ``[t * width, (t + 1) * width)``: its split
    nodes first, then its leaves; a leaf's two children are itself, so a walk may go on past it."""

    feature_names: tuple[str, ...]
    width: int  # slots per tree
    split_nodes: int  # the first split_nodes slots of a tree are split nodes, the rest leaves
    roots: np.ndarray  # slot each tree starts at (its leaf for a one-leaf tree)
    feature: np.ndarray  # per slot: split feature (0 at leaves)
    threshold: np.ndarray  # per slot: x <= threshold goes left (+inf at leaves)
    missing: np.ndarray  # per slot: 0 none (NaN counts as 0), 1 zero, 2 NaN
    default_left: np.ndarray  # per slot: where a missing value goes
    children: np.ndarray  # slot s goes to children[2 * s] (left) or children[2 * s + 1] (right)
    value: np.ndarray  # per slot: the leaf's value (0 at split nodes)
    depth: int  # the longest root-to-leaf path

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Raw scores (the sum of every tree's leaf), as ``lightgbm.Booster.predict(raw_score=True)``.

        Every (row, tree) pair walks one level per step; every 4 levels the pairs that reached their leaf leave
        the working set. On one CPU thread, for a 250-tree model: 0.3-0.5 ms for 8-25 rows (LightGBM's C++:
        0.1-0.4 ms, but importing it costs over a second), 37 ms for 2400 rows of an exhaustive list (LightGBM 22 ms)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise ValueError(f"expected a (rows, {len(self.feature_names)}) feature matrix, got {X.shape}")
        if len(X) > _CHUNK_ROWS:  # a working set that stays in cache: 13% faster for 2400 rows
            return np.concatenate([self.predict(X[i:i + _CHUNK_ROWS]) for i in range(0, len(X), _CHUNK_ROWS)])
        plain = not self.missing.any()
        if plain:  # every split treats NaN as 0: once here instead of at every step
            X = np.where(np.isnan(X), 0.0, X)
        flat, rows, trees = X.ravel(), X.shape[0], len(self.roots)
        offset = np.repeat(np.arange(rows, dtype=np.int64) * X.shape[1], trees)  # per pair: its row's start
        node = np.tile(self.roots, rows)
        out, where = np.empty(len(node)), np.arange(len(node))  # each pair's leaf value; the pairs still walking
        for level in range(self.depth):
            if level and level % 4 == 0:
                out[where] = self.value.take(node)
                walking = node % self.width < self.split_nodes
                where, node, offset = where[walking], node[walking], offset[walking]
            value = flat.take(offset + self.feature.take(node))
            node = self.children.take(2 * node + (value > self.threshold.take(node) if plain
                                                  else self._right(value, node)))
        out[where] = self.value.take(node)
        return out.reshape(rows, trees).sum(axis=1)

    def _right(self, value: np.ndarray, node: np.ndarray) -> np.ndarray:
        """Which pairs go right, with LightGBM's missing-value rules (NumericalDecision)."""
        missing = self.missing.take(node)
        is_nan = np.isnan(value)
        value = np.where(is_nan & (missing != 2), 0.0, value)  # NaN counts as 0 unless NaN is "missing"
        use_default = ((missing == 1) & (np.abs(value) <= _ZERO)) | ((missing == 2) & is_nan)
        return np.where(use_default, ~self.default_left.take(node), value > self.threshold.take(node))


def _ints(text: str) -> np.ndarray:
    return np.array(text.split(), dtype=np.int64)


def _floats(text: str) -> np.ndarray:
    return np.array(text.split(), dtype=np.float64)


def load_text_forest(path: str | Path) -> TextForest:
    """Parse ``model.lgbm.txt``; a ValueError naming the file for anything this reader does not support."""
    return parse_text_forest(Path(path).read_text(), path)


def parse_text_forest(text: str, path: str | Path = "<text>") -> TextForest:
    """Parse the text of a LightGBM model (``path`` only names it in errors)."""
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
    n_leaves = np.array([int(t["num_leaves"]) for t in trees])
    split_feature = pad("split_feature", nodes, _ints, 0)
    n_features = len(fields["feature_names"].split())
    if ((left < -n_leaves[:, None]) | (left >= nodes) | (right < -n_leaves[:, None]) | (right >= nodes)).any() or (
            (split_feature < 0) | (split_feature >= n_features)).any():
        raise ValueError(f"{path}: a tree refers to a node, leaf or feature it does not have")

    width = nodes + leaves
    first = (np.arange(len(trees)) * width)[:, None]  # each tree's first slot
    children = np.empty((len(trees), width, 2), dtype=np.int64)
    for side, child in enumerate((left, right)):
        children[:, :nodes, side] = np.where(child >= 0, first + child, first + nodes + ~child)
        children[:, nodes:, side] = first + nodes + np.arange(leaves)  # a leaf stays where it is

    def slots(split_values: np.ndarray, leaf_fill) -> np.ndarray:
        out = np.full((len(trees), width), leaf_fill, dtype=split_values.dtype)
        out[:, :nodes] = split_values
        return out.ravel()

    value = np.zeros((len(trees), width))
    value[:, nodes:] = pad("leaf_value", leaves, _floats, 0.0)
    single_leaf = n_leaves == 1
    roots = np.where(single_leaf, first[:, 0] + nodes, first[:, 0])
    depth, frontier, flat_children = 0, roots[~single_leaf], children.reshape(-1, 2)
    while len(frontier):  # breadth first: the longest path; more levels than split nodes means a cycle
        depth += 1
        if depth > nodes:
            raise ValueError(f"{path}: a tree is not a tree (a cycle)")
        frontier = np.unique(flat_children[frontier])
        frontier = frontier[frontier % width < nodes]
    return TextForest(
        feature_names=tuple(fields["feature_names"].split()), width=width, split_nodes=nodes, roots=roots,
        feature=slots(split_feature, 0), threshold=slots(pad("threshold", nodes, _floats, 0.0), np.inf),
        missing=slots((decision >> _MISSING_SHIFT) & 3, 0), default_left=slots((decision & _DEFAULT_LEFT) != 0, False),
        children=children.ravel(), value=value.ravel(), depth=depth)


# The sign that turns each LightGBM ranker's raw prediction into "higher = faster", as its ``_sign`` in
# predictor.rankers.lgbm (a test checks they agree): LambdaRank scores as is, the regressor predicts log2 slowdown.
TEXT_FOREST_SIGNS = {"lgbm_rank": 1.0, "lgbm_reg": -1.0}


class TextForestRanker:
    """A saved LightGBM ranker (``lgbm_rank`` or ``lgbm_reg``) that scores with numpy alone: the hook's runtime
    ranker (``predictor.artifacts.load_runtime_model``). Same scores as the LightGBM ranker it was saved from."""

    def __init__(self, name: str, forest: TextForest) -> None:
        if name not in TEXT_FOREST_SIGNS:
            raise ValueError(f"ranker {name!r} is not a LightGBM ranker; known: {', '.join(TEXT_FOREST_SIGNS)}")
        if list(forest.feature_names) != list(FEATURE_NAMES):
            raise ValueError("the LightGBM model's feature names differ from this library's FEATURE_NAMES")
        self.name = name
        self.forest = forest
        self.sign = TEXT_FOREST_SIGNS[name]

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        """One score per row, higher = predicted faster."""
        if len(rows) == 0:
            return np.zeros(0)
        return self.score_features(feature_matrix(rows, device))

    def score_features(self, X: np.ndarray) -> np.ndarray:
        """``score`` from a feature matrix already built (the hook's ``features.runtime_feature_matrix``)."""
        if len(X) == 0:
            return np.zeros(0)
        return self.sign * self.forest.predict(X)
