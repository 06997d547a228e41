"""Score a LightGBM text model without LightGBM: what the hook needs at compile time.

Why: ``import lightgbm`` also imports scikit-learn and scipy (over a second at every compile's start), and
production images rarely carry LightGBM (the GPU machine here does not). The text format is LightGBM's own
saved model (``model.lgbm.txt``); this reads its trees into arrays and walks all trees for all rows at once, in
numpy or, for the hook's float32 rows, with the compiled walker of ``predictor.artifacts.compiled_walk`` where one builds.
Supported: numerical splits with LightGBM's three missing-value types (what our features produce). A model with
categorical splits or linear trees is refused with one line.

It is also the gate to LightGBM itself (``check_model_text``): LightGBM's native parser trusts the text it is given
and crashes the process, or loops forever, on a cut file, a short list or an index out of range, so every model file
is checked here in full, once at load, before ``lightgbm.Booster`` sees it (``predictor.artifacts.model_folder``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .atomic import MODEL_BYTES, InputError, read_regular
from .compiled_walk import CompiledForest, compiled_forest
from ..core.features import feature_matrix, model_feature_count

if TYPE_CHECKING:
    import pandas as pd

    from ..core.device import DeviceInfo

_CATEGORICAL = 1
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


class ModelTextError(ValueError):
    """A LightGBM text model this reader refuses: one line naming the file and the first bad field."""


# Every number in a model is written by LightGBM's own printer: plain decimals, never nan/inf, underscores or hex.
_INT = r"[-+]?\d+"
_FLOAT = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_INT_LIST = re.compile(rf"(?:{_INT}(?: {_INT})*)?")
_FLOAT_LIST = re.compile(rf"(?:{_FLOAT}(?: {_FLOAT})*)?")
# a split's threshold may be infinite: LightGBM writes "inf" where every number goes one way and NaN the other
_THRESHOLD = rf"(?:{_FLOAT}|-?inf)"
_THRESHOLD_LIST = re.compile(rf"(?:{_THRESHOLD}(?: {_THRESHOLD})*)?")
_MAX_LEAVES = 1 << 17  # LightGBM's own num_leaves limit
# A forest's size: the shipped models hold 250 trees of at most 31 leaves (15,250 slots). Past these caps a model
# would cost seconds at every GEMM (10^6 one-leaf trees: 0.35-1.8 s) or gigabytes of arrays (``TextForest`` pads
# every tree to the widest: one tree of 2^17 leaves beside 10^4 small ones is 2.6e9 slots), so it is refused.
MAX_TREES = 10_000
MAX_SLOTS = 1 << 21  # trees x (the widest tree's splits + leaves): ~0.35 GB of walk arrays
# per-tree lists: (key, per leaf or per split, integers, required)
_TREE_LISTS = (
    ("split_feature", "node", True, True), ("split_gain", "node", False, True), ("threshold", "node", False, True),
    ("decision_type", "node", True, True), ("left_child", "node", True, True), ("right_child", "node", True, True),
    ("leaf_value", "leaf", False, True), ("leaf_weight", "leaf", False, False), ("leaf_count", "leaf", True, False),
    ("internal_value", "node", False, False), ("internal_weight", "node", False, False),
    ("internal_count", "node", True, False),
)
_TRAILER_LINE = re.compile(r"|feature_importances:|[A-Za-z0-9_]+=\d+|parameters:|\[[A-Za-z0-9_]+: [^\]\n]*\]|"
                           r"end of parameters|pandas_categorical:null")


def _key_values(lines: list[str], path: str | Path, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        if not line:
            continue
        key, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[a-z_]+", key) or key in out:
            raise ModelTextError(f"{path}: {where}: line {line[:40]!r} is not a new key=value")
        out[key] = value
    return out


def _numbers(fields: dict[str, str], key: str, integer: bool, path: str | Path, where: str) -> np.ndarray:
    text = fields[key]
    pattern = _INT_LIST if integer else _THRESHOLD_LIST if key == "threshold" else _FLOAT_LIST
    if not pattern.fullmatch(text):
        token_pattern = re.compile(_INT if integer else _THRESHOLD if key == "threshold" else _FLOAT)
        tokens = text.split(" ")
        bad = next((i for i, t in enumerate(tokens) if not token_pattern.fullmatch(t)), 0)
        kind = "an integer" if integer else "a finite number"
        raise ModelTextError(f"{path}: {where} {key}: value {bad} ({tokens[bad][:30]!r}) is not {kind}")
    try:
        values = np.array(text.split(), dtype=np.int64 if integer else np.float64)
    except OverflowError:
        raise ModelTextError(f"{path}: {where} {key}: an integer out of range") from None
    if not integer and key != "threshold" and not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ModelTextError(f"{path}: {where} {key}: value {bad} ({text.split()[bad][:30]!r}) is not a finite number")
    return values


def _header_int(fields: dict[str, str], key: str, path: str | Path) -> int:
    value = fields.get(key)
    if value is None or not re.fullmatch(_INT, value):
        raise ModelTextError(f"{path}: header {key}: {value!r:.40} is not an integer")
    return int(value)


def _check_tree(fields: dict[str, str], index: int, n_features: int, path: str | Path) -> dict[str, np.ndarray]:
    """One tree's lists after checking their lengths, values and shape (a tree: every split and leaf reached once
    from the root): what LightGBM's native parser would read past the end of, or walk forever."""
    where = f"Tree={index}"
    n_leaves = _header_int(fields, "num_leaves", f"{path}: {where}")
    if not 1 <= n_leaves <= _MAX_LEAVES:
        raise ModelTextError(f"{path}: {where} num_leaves: {n_leaves} is not in 1..{_MAX_LEAVES}")
    if fields.get("num_cat", "0") != "0":
        raise ModelTextError(f"{path}: {where} num_cat: categorical splits are not supported")
    if fields.get("is_linear", "0") != "0":
        raise ModelTextError(f"{path}: {where} is_linear: linear trees are not supported")
    if "shrinkage" in fields:
        _numbers(fields, "shrinkage", False, path, where)
    nodes = n_leaves - 1
    out: dict[str, np.ndarray] = {}
    for key, per, integer, required in _TREE_LISTS:
        if key not in fields:
            if required and (per == "leaf" or nodes):
                raise ModelTextError(f"{path}: {where} {key}: missing")
            continue
        values = _numbers(fields, key, integer, path, where)
        expected = n_leaves if per == "leaf" else nodes
        # LightGBM writes a one-leaf tree's leaf_weight empty
        if len(values) != expected and not (n_leaves == 1 and not required and not len(values)):
            raise ModelTextError(f"{path}: {where} {key}: {len(values)} values, num_leaves={n_leaves} means {expected}")
        out[key] = values
    if not nodes:
        return out
    decision = out["decision_type"]
    if ((decision & ~0b1111) != 0).any() or (((decision >> _MISSING_SHIFT) & 3) == 3).any():
        raise ModelTextError(f"{path}: {where} decision_type: a value LightGBM never writes")
    if (decision & _CATEGORICAL).any():
        raise ModelTextError(f"{path}: {where} decision_type: categorical splits are not supported")
    feature = out["split_feature"]
    if ((feature < 0) | (feature >= n_features)).any():
        raise ModelTextError(f"{path}: {where} split_feature: a tree refers to a feature it does not have "
                             f"(features 0..{n_features - 1})")
    children = np.stack([out["left_child"], out["right_child"]], axis=1)
    for key, side in (("left_child", 0), ("right_child", 1)):
        if ((children[:, side] < -n_leaves) | (children[:, side] >= nodes)).any():
            raise ModelTextError(f"{path}: {where} {key}: a tree refers to a node or leaf it does not have")
    # a tree: from the root, every split and every leaf is reached exactly once (no cycle, nothing shared or lost)
    seen_nodes, seen_leaves, frontier = np.zeros(nodes, bool), np.zeros(n_leaves, bool), [0]
    seen_nodes[0] = True
    while frontier:
        node = frontier.pop()
        for child in children[node]:
            seen = seen_nodes if child >= 0 else seen_leaves
            slot = child if child >= 0 else ~child
            if seen[slot]:
                raise ModelTextError(f"{path}: {where} left_child/right_child: not a tree (a cycle or a shared child)")
            seen[slot] = True
            if child >= 0:
                frontier.append(int(child))
    if not (seen_nodes.all() and seen_leaves.all()):
        raise ModelTextError(f"{path}: {where} left_child/right_child: not a tree (a split or leaf is never reached)")
    return out


def check_model_text(payload: bytes | str, path: str | Path = "<text>") -> tuple[dict[str, str], list[dict]]:
    """``(header, trees)`` of a LightGBM text model after checking everything LightGBM's native parser trusts:
    ``tree_sizes`` against the text (it cuts the trees out by those byte counts), every count and list length,
    every index in range, every number finite. Nothing may reach ``lightgbm.Booster`` before this has passed: its
    parser crashes the process (or loops forever) on a cut file, a short list or an index out of range. A refused
    file is a ``ModelTextError`` naming ``path`` and the first bad field."""
    if isinstance(payload, bytes):
        try:
            text = payload.decode("ascii")
        except UnicodeDecodeError as exc:
            raise ModelTextError(f"{path}: not a LightGBM text model (a byte that is not ASCII at {exc.start})") from None
    else:
        text = payload
        if not text.isascii():
            raise ModelTextError(f"{path}: not a LightGBM text model (a character that is not ASCII)")
    start = text.find("\nTree=")
    if not text.startswith("tree\n") or start < 0:
        raise ModelTextError(f"{path}: not a LightGBM text model (no 'tree' first line or no trees)")
    header = _key_values(text[:start].splitlines()[1:], path, "header")
    for key in ("version", "feature_names", "tree_sizes", "max_feature_idx"):
        if key not in header:
            raise ModelTextError(f"{path}: header {key}: missing")
    if header["version"] != "v4":
        raise ModelTextError(f"{path}: header version: {header['version']!r:.20}, this reader reads v4")
    if _header_int(header, "num_class", path) != 1 or _header_int(header, "num_tree_per_iteration", path) != 1:
        raise ModelTextError(f"{path}: header num_class: multi-class LightGBM models are not supported")
    names = header["feature_names"].split()
    if not names or _header_int(header, "max_feature_idx", path) != len(names) - 1:
        raise ModelTextError(f"{path}: header max_feature_idx: {header['max_feature_idx']!r:.20} does not match "
                             f"{len(names)} feature_names")
    if "feature_infos" in header and len(header["feature_infos"].split()) != len(names):
        raise ModelTextError(f"{path}: header feature_infos: {len(header['feature_infos'].split())} entries for "
                             f"{len(names)} features")
    if not re.fullmatch(r"[a-z_]+(?: [a-z_]+:[-+0-9.eE]+)*", header.get("objective", "regression")):
        raise ModelTextError(f"{path}: header objective: {header['objective']!r:.40} is not an objective")
    if header["tree_sizes"].count(" ") >= MAX_TREES:
        raise ModelTextError(f"{path}: header tree_sizes: {header['tree_sizes'].count(' ') + 1} trees, more than "
                             f"this reader takes ({MAX_TREES})")
    sizes = _numbers(header, "tree_sizes", True, path, "header")
    if not len(sizes) or (sizes <= 0).any():
        raise ModelTextError(f"{path}: header tree_sizes: empty or not positive")
    # LightGBM cuts tree i out of the text at the byte offsets tree_sizes gives, from the first "Tree=" line
    trees, offset = [], start + 1
    for i, size in enumerate(sizes.tolist()):
        block = text[offset:offset + size]
        if len(block) != size or not block.startswith(f"Tree={i}\n") or "\nTree=" in block.rstrip("\n"):
            raise ModelTextError(f"{path}: header tree_sizes: entry {i} ({size} bytes) does not match the text of "
                                 f"Tree={i}")
        lines = block.splitlines()[1:]
        trees.append(_check_tree(_key_values(lines, path, f"Tree={i}"), i, len(names), path))
        offset += size
    if not text.startswith("end of trees\n", offset) and text[offset:].rstrip("\n") != "end of trees":
        raise ModelTextError(f"{path}: header tree_sizes: {len(sizes)} trees, then no 'end of trees' "
                             "(a cut file or more trees than tree_sizes lists)")
    for line in text[offset:].splitlines()[1:]:
        if not _TRAILER_LINE.fullmatch(line):
            raise ModelTextError(f"{path}: after the trees: line {line[:40]!r} is not one LightGBM writes")
    widest = max(len(t["leaf_value"]) for t in trees)
    if len(trees) * 2 * widest > MAX_SLOTS:
        raise ModelTextError(f"{path}: header tree_sizes: {len(trees)} trees of up to {widest} leaves, more than this "
                             f"reader takes ({MAX_SLOTS} slots: trees x the widest tree's splits and leaves)")
    return header, trees


def load_text_forest(path: str | Path) -> TextForest:
    """Parse ``model.lgbm.txt``; a ModelTextError naming the file for anything this reader does not support."""
    try:
        payload = read_regular(path, MODEL_BYTES, "model file")
    except InputError as exc:
        raise ModelTextError(str(exc)) from None
    return parse_text_forest(payload, path)


def parse_text_forest(text: str | bytes, path: str | Path = "<text>") -> TextForest:
    """The forest of a LightGBM text model, checked by ``check_model_text`` (``path`` only names it in errors)."""
    header, trees = check_model_text(text, path)
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


# The sign that turns each LightGBM ranker's raw prediction into "higher = faster", as its ``_sign`` in
# predictor.rankers.lgbm (a test checks they agree): LambdaRank scores as is, the regressor predicts log2 slowdown.
TEXT_FOREST_SIGNS = {"lgbm_rank": 1.0, "lgbm_reg": -1.0}


class TextForestRanker:
    """A saved LightGBM ranker (``lgbm_rank`` or ``lgbm_reg``) that scores without LightGBM: the hook's runtime
    ranker (``predictor.artifacts.model_folder.load_runtime_model``). Same scores as the LightGBM ranker it was saved from."""

    def __init__(self, name: str, forest: TextForest) -> None:
        if name not in TEXT_FOREST_SIGNS:
            raise ValueError(f"ranker {name!r} is not a LightGBM ranker; known: {', '.join(TEXT_FOREST_SIGNS)}")
        self.n_features = model_feature_count(forest.feature_names)  # a prefix of FEATURE_NAMES (older models)
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
        return self.sign * self.forest.predict(X[:, :self.n_features])
