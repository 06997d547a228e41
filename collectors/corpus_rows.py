"""One corpus row: the problem fields, the cost bound every problem obeys, and the first-tag-wins dedupe.

Shared by the float corpus (``collectors.corpus``) and the quantized one (``collectors.corpus_quant``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pandas as pd

from predictor.core.problem import DTYPE_BYTES, PROBLEM_FIELDS, Problem, default_out_dtype

log = logging.getLogger(__name__)

CORPUS_COLUMNS = (*PROBLEM_FIELDS, "problem_id", "family_tag", "group")
MAX_MNKB = 2**37  # m*n*k*b (= FLOPs / 2) per problem
MAX_OPERAND_BYTES = 2**30  # per operand (A, B, C)


def _lowbit_bytes(elements: int, nbytes: int) -> int:
    stride = elements * nbytes
    return min(16, stride & -stride)


def alignment(b: int, m: int, n: int, k: int, dtype: str, layout_a: str, layout_b: str) -> int:
    """``align`` for contiguous operands on 16-byte-aligned bases: the largest power of two <= 16 bytes
    dividing every stride (A, B and the output), as the collectors will allocate them."""
    size = DTYPE_BYTES[dtype]
    out = DTYPE_BYTES[default_out_dtype(dtype)]
    strides = [(k if layout_a == "row" else m, size), (n if layout_b == "row" else k, size), (n, out)]
    if b > 1:
        strides += [(m * k, size), (k * n, size), (m * n, out)]
    return min(_lowbit_bytes(e, s) for e, s in strides)


def within_budget(b: int, m: int, n: int, k: int, dtype: str) -> bool:
    """The cost bound every corpus problem obeys: m*n*k*b <= 2**37 and every operand <= 1 GiB."""
    size = DTYPE_BYTES[dtype]
    out = DTYPE_BYTES[default_out_dtype(dtype)]
    return (m * n * k * b <= MAX_MNKB and b * m * k * size <= MAX_OPERAND_BYTES
            and b * k * n * size <= MAX_OPERAND_BYTES and b * m * n * out <= MAX_OPERAND_BYTES)


def int_mm_ok(m: int, n: int, k: int) -> bool:
    """torch._int_mm's constraints (CUDA): m > 16, k and n multiples of 8."""
    return m > 16 and k % 8 == 0 and n % 8 == 0


def _row(tag: str, op: str, m: int, n: int, k: int, dtype: str, b: int = 1,
         layout_a: str = "row", layout_b: str = "row") -> dict[str, Any] | None:
    """One corpus row, or None when the problem is outside the cost bound."""
    if not within_budget(b, m, n, k, dtype):
        return None
    p = Problem(op, m, n, k, dtype, b=b, layout_a=layout_a, layout_b=layout_b,
                align=alignment(b, m, n, k, dtype, layout_a, layout_b))
    return {**p.to_dict(), "family_tag": tag}


def _take(rows: Iterable[dict[str, Any] | None], seen: set[str], out: list[dict[str, Any]],
          limit: int | None = None) -> int:
    """Append rows whose problem_id is new (first tag wins); stop after ``limit`` new ones. Returns the count."""
    added = dropped = 0
    for row in rows:
        if limit is not None and added >= limit:
            break
        if row is None:
            dropped += 1
            continue
        if row["problem_id"] in seen:
            continue
        seen.add(row["problem_id"])
        out.append(row)
        added += 1
    if dropped:
        log.debug("dropped %d problems over the cost bound", dropped)
    return added


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    types = {c: ("int64" if c in ("b", "m", "n", "k", "align") else "string") for c in CORPUS_COLUMNS}
    return df.astype(types)


def corpus_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A corpus as a table: ``rows`` (``_row``'s, deduplicated) with each problem's group, in the corpus columns
    and row order (by family tag, dtype, op, sizes, layouts), typed. Every corpus builder ends here."""
    from predictor.offline.split import problem_group

    df = pd.DataFrame(rows)
    df["group"] = [problem_group(t, p) for t, p in zip(df["family_tag"], df["problem_id"])]
    df = df.sort_values(["family_tag", "dtype", "op", "b", "m", "n", "k", "layout_a", "layout_b"], kind="stable")
    return _typed(df.reset_index(drop=True)[list(CORPUS_COLUMNS)])
