"""A LightGBM model's trees as flat arrays, walked for all rows at once: in numpy or, for the hook's float32 rows,
with the compiled walker of ``predictor.artifacts.compiled_walk`` where one builds. Same scores as
``lightgbm.Booster.predict(raw_score=True)``.

The arrays come from a text model ``lgbm_text.check_model_text`` has checked in full (``forest_of``); reading the
file is ``model_check.load_text_forest``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .compiled_walk import CompiledForest, compiled_forest

_DEFAULT_LEFT = 2
_MISSING_SHIFT = 2  # bits 2-3: 0 none, 1 zero, 2 NaN
_ZERO = 1e-35  # LightGBM's kZeroThreshold
_CHUNK_ROWS = 256  # rows walked at once: 64k pairs of a 250-tree model stay in cache (~7% faster than 128)
_FIRST_DROP = 4  # the level from which pairs at their leaf leave the walk (``TextForest._walk``)
_SPECIALISE_PAIRS = 50_000  # (rows x trees) from which specialising pays for its cost (~0.3 ms): 200 rows x 250 trees


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

    def __post_init__(self) -> None:
        # the walk's layout (``_walk``): per-slot arrays repeated twice, indexed by a state of 2 * slot (+1)
        two = lambda a: np.repeat(a, 2)
        derived = {
            "roots2": 2 * self.roots, "children2": 2 * self.children, "feature2": two(self.feature),
            "threshold2": two(self.threshold), "missing2": two(self.missing), "default_left2": two(self.default_left),
            "value2": two(self.value), "is_split2": two(np.arange(len(self.feature)) % self.width < self.split_nodes),
        }
        rounded = derived["threshold2"].astype(np.float32)
        too_high = rounded.astype(np.float64) > derived["threshold2"]
        derived["_threshold32"] = np.where(too_high, np.nextafter(rounded, np.float32(-np.inf)), rounded)
        derived["_plain"] = not self.missing.any()  # every split treats NaN as 0 (read once, not per call)
        derived["_compiled"] = None  # the compiled walker's view (made at a float32 predict once built); False: none
        for name, array in derived.items():
            object.__setattr__(self, name, array)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Raw scores (the sum of every tree's leaf), as ``lightgbm.Booster.predict(raw_score=True)``.

        float32 rows of a model without missing-value splits (the hook's) go to the compiled walker
        (``predictor.artifacts.compiled_walk``: ~0.06 ms for 30 rows, ~1.3 ms for 2400) where this machine has one; the numpy
        walk below scores everything else, with the same scores bit for bit.

        Every (row, tree) pair walks one level per step, one gather per array per level for all pairs at once
        (``_walk``). For many rows the forest is first specialised to ``X`` (``_specialise``): a split on a feature
        that holds one value in every row (in the hook, the problem's own features: 45% of the shipped models'
        splits) goes the same way for all rows, so it is decided once and jumped over. On one CPU thread, for a
        250-tree model: ~0.38 ms for 30 rows of one problem (LightGBM's C++: ~0.40 ms, and importing it costs over a
        second), ~15 ms for 2400 rows (LightGBM ~17-19 ms). Earlier walks took ~0.5 and ~24 ms, ~0.65 and ~48 ms."""
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise ValueError(f"expected a (rows, {len(self.feature_names)}) feature matrix, got {X.shape}")
        if len(X) == 0:
            return np.zeros(0)
        plain = self._plain
        # float32 features (the hook's) compare against thresholds rounded down to float32, which decides every
        # split as the float64 threshold does (no float32 lies between them) and gathers half the bytes
        single = plain and X.dtype == np.float32
        if single:
            # None until the walker is built (asked again next call); two threads may both make it: the same arrays
            if self._compiled is None:
                object.__setattr__(self, "_compiled", self.compiled())
            scores = self._compiled.predict(X) if self._compiled else None
            if scores is not None:
                return scores
        X = np.asarray(X, dtype=np.float32 if single else np.float64)
        if plain:  # every split treats NaN as 0: once here instead of at every step
            X = np.where(np.isnan(X), X.dtype.type(0), X)
        threshold = self._threshold32 if single else self.threshold2
        roots, children = self.roots2, self.children2
        if len(X) * len(self.roots) >= _SPECIALISE_PAIRS:
            roots, children = self._specialise(X, threshold, plain)
        if len(X) <= _CHUNK_ROWS:
            return self._walk(X, roots, children, threshold, plain)
        return np.concatenate([self._walk(X[i:i + _CHUNK_ROWS], roots, children, threshold, plain)
                               for i in range(0, len(X), _CHUNK_ROWS)])

    def compiled(self, wait: bool = False) -> CompiledForest | bool | None:
        """This forest for the compiled walker (``predictor.artifacts.compiled_walk.compiled_forest``): None while it is being
        built, False where there is none (or it cannot walk these trees)."""
        return compiled_forest(width=self.width, split_nodes=self.split_nodes, features=len(self.feature_names),
                               roots=self.roots, children=self.children, feature=self.feature,
                               threshold32=self._threshold32[::2], value=self.value, wait=wait)

    def _specialise(self, X: np.ndarray, threshold: np.ndarray, plain: bool) -> tuple[np.ndarray, np.ndarray]:
        """Roots and children with every split on a feature constant over ``X``'s rows decided and jumped over."""
        constant = (X == X[0]).all(axis=0)  # NaN != NaN: a column with a NaN is never "constant"
        fixed = constant.take(self.feature2) & self.is_split2
        if not fixed.any():
            return self.roots2, self.children2
        value = X[0].take(self.feature2)
        doubled = np.arange(len(fixed))
        right = value > threshold if plain else self._right(value, doubled)
        # one hop past each decided split (a state is 2 * slot, or 2 * slot + 1 for the pair of a right child)
        step = np.where(fixed, self.children2.take(doubled - (doubled & 1) + right), doubled)
        for _ in range(max(self.depth, 1).bit_length()):  # pointer jumping: 2, 4, 8, ... hops, past whole chains
            step = step.take(step)
        return step.take(self.roots2), step.take(self.children2)

    def _walk(self, X: np.ndarray, roots: np.ndarray, children: np.ndarray, threshold: np.ndarray,
              plain: bool) -> np.ndarray:
        """Each row's sum of leaves, walking all (row, tree) pairs level-synchronously. A pair's state is twice its
        slot: adding "goes right" (0 or 1) gives the entry of ``children`` to take, with no multiply per level.

        Level 0 needs no per-pair lookups (all rows of a tree start at its root: one gather from ``X``). Pairs at
        their leaf leave the working set from level ``_FIRST_DROP`` on, every other level: before it too few have
        arrived to pay for the gathers that drop them (~84% of the pairs still walk at level 2, ~50% at 4). Both
        together: a quarter to a third less time than dropping from level 0 on, for 30 rows as for 2400."""
        flat, rows, trees, width = X.ravel(), X.shape[0], len(roots), X.shape[1]
        value = X.take(self.feature2.take(roots), axis=1)  # (rows, trees): each pair's value at its root
        right = (value > threshold.take(roots) if plain
                 else self._right(value, np.broadcast_to(roots, value.shape)))
        state = children.take(right + roots)
        row_start = np.arange(0, rows * width, width)[:, None]
        for _ in range(1, _FIRST_DROP):
            value = flat.take(row_start + self.feature2.take(state))
            state = children.take(state + (value > threshold.take(state) if plain else self._right(value, state)))
        state = state.ravel()
        out = self.value2.take(state)  # final for the pairs at their leaf, overwritten for the rest
        where = self.is_split2.take(state).nonzero()[0]  # the pairs still walking
        state, offset = state.take(where), (where // trees) * width  # offset: the pair's row's start in ``flat``
        for _ in range(_FIRST_DROP, self.depth, 2):  # every pair is at its leaf within depth levels
            if not len(state):
                break
            for _ in range(2):
                value = flat.take(offset + self.feature2.take(state))
                state = children.take(state + (value > threshold.take(state) if plain else self._right(value, state)))
            out[where] = self.value2.take(state)
            walking = self.is_split2.take(state).nonzero()[0]
            where, state, offset = where.take(walking), state.take(walking), offset.take(walking)
        return out.reshape(rows, trees).sum(axis=1)

    def _right(self, value: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Which pairs go right, with LightGBM's missing-value rules (NumericalDecision)."""
        missing = self.missing2.take(state)
        is_nan = np.isnan(value)
        value = np.where(is_nan & (missing != 2), 0.0, value)  # NaN counts as 0 unless NaN is "missing"
        use_default = ((missing == 1) & (np.abs(value) <= _ZERO)) | ((missing == 2) & is_nan)
        return np.where(use_default, ~self.default_left2.take(state), value > self.threshold2.take(state))



def forest_of(header: dict[str, str], trees: list[dict]) -> TextForest:
    """The forest of a LightGBM text model's header and trees, as ``lgbm_text.check_model_text`` returns them
    (checked: child indices in range, no cycles)."""
    nodes = max(len(t["leaf_value"]) - 1 for t in trees) or 1
    leaves = max(len(t["leaf_value"]) for t in trees)

    def pad(key: str, width: int, dtype, fill) -> np.ndarray:
        out = np.full((len(trees), width), fill, dtype=dtype)
        for i, t in enumerate(trees):
            if key in t:
                out[i, :len(t[key])] = t[key]
        return out

    decision = pad("decision_type", nodes, np.int64, 0)
    left, right = pad("left_child", nodes, np.int64, -1), pad("right_child", nodes, np.int64, -1)
    n_leaves = np.array([len(t["leaf_value"]) for t in trees])
    split_feature = pad("split_feature", nodes, np.int64, 0)

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
    value[:, nodes:] = pad("leaf_value", leaves, np.float64, 0.0)
    single_leaf = n_leaves == 1
    roots = np.where(single_leaf, first[:, 0] + nodes, first[:, 0])
    depth, frontier, flat_children = 0, roots[~single_leaf], children.reshape(-1, 2)
    while len(frontier):  # breadth first: the longest path (check_model_text has ruled out cycles)
        depth += 1
        frontier = np.unique(flat_children[frontier])
        frontier = frontier[frontier % width < nodes]
    return TextForest(
        feature_names=tuple(header["feature_names"].split()), width=width, split_nodes=nodes, roots=roots,
        feature=slots(split_feature, 0), threshold=slots(pad("threshold", nodes, np.float64, 0.0), np.inf),
        missing=slots((decision >> _MISSING_SHIFT) & 3, 0), default_left=slots((decision & _DEFAULT_LEFT) != 0, False),
        children=children.ravel(), value=value.ravel(), depth=depth)
