"""Read a LightGBM text model without LightGBM: what the hook needs at compile time.

Why: ``import lightgbm`` also imports scikit-learn and scipy (over a second at every compile's start), and
production images rarely carry LightGBM (the GPU machine here does not). The text format is LightGBM's own
saved model (``model.lgbm.txt``); this checks its header and trees field by field and hands them on as lists, which
``text_forest.forest_of`` lays out for the walk.
Supported: numerical splits with LightGBM's three missing-value types (what our features produce). A model with
categorical splits or linear trees is refused with one line.

It is also the gate to LightGBM itself (``check_model_text``): LightGBM's native parser trusts the text it is given
and crashes the process, or loops forever, on a cut file, a short list or an index out of range, so every model file
is checked here in full, once at load, before ``lightgbm.Booster`` sees it (``predictor.artifacts.model_folder``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

_CATEGORICAL = 1
_DEFAULT_LEFT = 2
_MISSING_SHIFT = 2  # bits 2-3: 0 none, 1 zero, 2 NaN (text_forest reads the same bits)


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
