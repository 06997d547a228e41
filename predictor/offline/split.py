"""Train/test split by problem group: a whole model family (or a block of random shapes) goes to one side."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

RANDOM_BLOCKS = 8


def problem_group(family_tag: str, problem_id: str) -> str:
    """``llm:llama3-8b:qkv:fwd`` -> ``llm:llama3-8b``; tags without a model part are cut into blocks by id."""
    parts = family_tag.split(":")
    if len(parts) >= 2:
        return ":".join(parts[:2])
    return f"{family_tag}:block{int(problem_id, 16) % RANDOM_BLOCKS}"


def groups_of(rows: pd.DataFrame) -> pd.Series:
    pairs = rows[["family_tag", "problem_id"]].drop_duplicates()
    mapping = {pid: problem_group(tag, pid) for tag, pid in pairs.itertuples(index=False)}
    return rows["problem_id"].map(mapping)


def split_by_group(rows: pd.DataFrame, test_fraction: float = 0.25, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Shuffle the groups with a fixed seed and move whole groups to the test side until it holds
    ``test_fraction`` of the problems. The same rows and seed always give the same split."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    group = groups_of(rows)
    per_group = group.groupby(rows["problem_id"]).first().value_counts().sort_index()
    if len(per_group) < 2:
        raise ValueError(f"need at least 2 problem groups to split, found {len(per_group)}")
    order = np.random.default_rng(seed).permutation(per_group.index.to_numpy())
    target = test_fraction * per_group.sum()
    test_groups, total = set(), 0
    for g in order:
        if total >= target:
            break
        test_groups.add(g)
        total += per_group[g]
    is_test = group.isin(test_groups)
    return rows[~is_test].copy(), rows[is_test].copy()


def recorded_test_groups(meta: dict) -> list[str] | None:
    """The problem groups a model held out, as its metadata records them (None for models that predate it).
    Evaluations and benchmarks select held-out rows by these, never by re-splitting: a re-split of a grown or
    different dataset moves groups across the sides."""
    return (meta.get("split") or {}).get("test_groups") or None


def in_groups(rows: pd.DataFrame, groups: Iterable[str]) -> pd.Series:
    """Boolean mask of the rows whose problem group is one of ``groups``."""
    return groups_of(rows).isin(set(groups))


def split_by_named_groups(rows: pd.DataFrame, test_groups: Iterable[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Hold out exactly ``test_groups``: how a model trained on a grown dataset keeps an earlier model's held-out
    groups unseen, so benchmarks drawn from those groups stay fair (a fraction-based split moves when groups grow)."""
    wanted = set(test_groups)
    unknown = sorted(wanted - set(groups_of(rows).unique()))
    if unknown:
        raise ValueError(f"held-out groups not in the dataset: {', '.join(unknown[:5])}")
    is_test = in_groups(rows, wanted)
    if is_test.all():
        raise ValueError("the held-out groups cover every row; nothing left to train on")
    return rows[~is_test].copy(), rows[is_test].copy()
