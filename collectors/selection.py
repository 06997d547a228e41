"""Which corpus problems a collector works on: the corpus file, its shard (``--shard i/n``), the ``--filter`` query,
minus the problems already finished, and a one-line refusal of problems no runner can set up."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.core.problem import PROBLEM_FIELDS, SCALED_OPS
from predictor.artifacts.schema import read_parquet

from .store import finished_problem_ids


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        try:
            i, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise ValueError(f"--shard must look like i/n (e.g. 0/4), got {text!r}") from None
        if not 0 <= i < n:
            raise ValueError(f"--shard {text}: need 0 <= i < n")
        return cls(i, n)

    @classmethod
    def argument(cls, text: str) -> "Shard":
        """``Shard.parse`` for argparse's ``type=``: its message, not argparse's "invalid value"."""
        import argparse

        try:
            return cls.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def owns(self, problem_id: str) -> bool:
        """Whether this shard takes the problem: a stable assignment by (hexadecimal) id, independent of row order."""
        return int(problem_id, 16) % self.count == self.index

    def select(self, problem_ids: pd.Series) -> np.ndarray:
        return problem_ids.map(self.owns).to_numpy()


def load_problems(corpus: str | Path) -> pd.DataFrame:
    path = Path(corpus)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such corpus file")
    df = read_parquet(path, what="corpus parquet")[0].to_pandas()  # page checksums and footer_sha256 verified
    missing = [c for c in (*PROBLEM_FIELDS, "problem_id", "family_tag") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: corpus lacks columns {', '.join(missing)}")
    return df


# fp8 problems the collectors can build operands for: torchao's layout (A row-major, B the transpose of a contiguous
# weight, as _scaled_mm requires) and e4m3 (cuBLAS refuses _scaled_mm of two e5m2 operands; none are in a corpus)
SCALED_DTYPES = ("float8_e4m3fn",)


def refuse_unsupported(problems: pd.DataFrame, corpus: str) -> None:
    """One-line error for selected problems no runner can set up, before any GPU time is spent on them."""
    scaled = problems[problems["op"].isin(SCALED_OPS)]
    bad = scaled[(scaled["layout_a"] != "row") | (scaled["layout_b"] != "col") | ~scaled["dtype"].isin(SCALED_DTYPES)]
    if len(bad):
        first = bad.iloc[0]
        raise ValueError(f"{corpus}: {len(bad)} selected scaled_mm problems are not {'/'.join(SCALED_DTYPES)} with A "
                         f"row-major and B column-major (first: {first['problem_id']}, {first['dtype']} "
                         f"{first['layout_a']}/{first['layout_b']}); --filter them out")


def select_problems(corpus: str, shard: Shard, out: str, query: str | None, limit: int | None) -> pd.DataFrame:
    """The corpus rows this worker still has to do: its shard, the filter, minus finished problems."""
    problems = load_problems(corpus)
    if query:
        try:
            problems = problems.query(query)
        except Exception as exc:
            raise ValueError(f"--filter {query!r}: {exc}") from None
    refuse_unsupported(problems, corpus)
    problems = problems[shard.select(problems["problem_id"])]
    problems = problems[~problems["problem_id"].isin(finished_problem_ids(out))]
    return problems.head(limit) if limit is not None else problems


def interleaved(problems: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """``problems`` round-robin over the values of ``key`` (first-seen order), each value's own order kept."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for p in problems:
        groups.setdefault(p.get(key), []).append(p)
    return [p for batch in itertools.zip_longest(*groups.values()) for p in batch if p is not None]
