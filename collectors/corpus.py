"""The shape corpus: which GEMM problems the collectors time, each tagged with the family it came from.

Five kinds of shapes, so the predictor sees both the GEMMs real models run and the space around them:

* linear layers (and some attention ``bmm``) of real model families -- LLMs, encoders, vision
  transformers, speech -- forward plus both backward GEMMs, at real token counts (odd ones included);
* ``random``: log-uniform shapes, some batched, some ``int8``;
* ``splitk``: small M and N with K up to 65536 (where decompose-K candidates appear);
* ``unaligned``: N and/or K not a multiple of 8;
* ``msweep:<k>x<n>``: M over 1..16384 for fixed K, N (the hint buckets are learned from these).

Every problem is bounded (``m*n*k*b <= 2**37``, every operand <= 1 GiB) so ~20 candidates x 10
reps of the whole corpus fit the GPU budget. The build is deterministic: randomness comes only from
``random.Random`` seeded with ``(seed, stream name)`` and only ``.random()`` is drawn, whose stream
Python keeps stable across versions. ``datasets/corpus/CORPUS.md`` documents the committed build.
The model families and M sweeps are tables in ``collectors.corpus_families``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from predictor.artifacts.schema import DatasetError, read_parquet, write_parquet

# row building and the table of model families are re-exported here for callers of this module
from .corpus_rows import (CORPUS_COLUMNS, MAX_MNKB, MAX_OPERAND_BYTES, _row, _take, corpus_frame,  # noqa: F401
                          _typed, alignment, int_mm_ok, within_budget)
from .corpus_families import MODEL_FAMILIES, MODEL_KINDS, MSWEEP_M, MSWEEPS, Attention, Linear, ModelFamily  # noqa: F401

log = logging.getLogger(__name__)

CORPUS_VERSION = 1
KINDS = ("llm", "enc", "vit", "speech", "random", "splitk", "unaligned", "msweep")

N_RANDOM = 1100
N_SPLITK = 360
N_UNALIGNED = 480
SECOND_DTYPE_P = 0.3  # share of model token counts also run in a second dtype


class CorpusError(ValueError):
    """A corpus file that does not follow the corpus contract."""


# ---------------------------------------------------------------------------------------------
# helpers


def _rng(seed: int, stream: str) -> random.Random:
    return random.Random(f"corpus-v{CORPUS_VERSION}:{seed}:{stream}")


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    """Weighted choice from one ``rng.random()`` draw (stable across Python versions)."""
    total = sum(w for _, w in weighted)
    u = rng.random() * total
    for value, w in weighted:
        u -= w
        if u < 0:
            return value
    return weighted[-1][0]


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, max(lo, int(math.exp(math.log(lo) + rng.random() * (math.log(hi + 1) - math.log(lo))))))


def _round_to(value: int, multiple: int) -> int:
    return max(multiple, int(round(value / multiple)) * multiple)


# ---------------------------------------------------------------------------------------------
# generators (each yields candidate rows; build_corpus dedupes by problem_id in kind priority order)


def _runs(family: ModelFamily, rng: random.Random) -> Iterator[tuple[int, bool, str]]:
    """(tokens, train, dtype): one dtype per token count, and with probability SECOND_DTYPE_P a second one
    (the same model run by another user in another precision)."""
    runs = [(m, True) for m in family.train_m] + [(m, False) for m in family.infer_m]
    for tokens, train in runs:
        dtype = _pick(rng, family.dtype_weights)
        yield tokens, train, dtype
        if rng.random() < SECOND_DTYPE_P:
            yield tokens, train, _pick(rng, [(d, w) for d, w in family.dtype_weights if d != dtype])


def model_rows(family: ModelFamily, seed: int) -> Iterator[dict[str, Any]]:
    """Forward + grad-input + grad-weight GEMMs of every layer at each training token count, the forward
    GEMM at inference token counts, w8a8 int8 forwards, and attention bmm's. One dtype per token count
    (a run uses one dtype throughout)."""
    rng = _rng(seed, family.name)
    for tokens, train, dtype in _runs(family, rng):
        for layer in family.layers:
            if train and not layer.train:
                continue
            conv1d = (layer.weight or family.weight) == "conv1d"
            m = max(1, tokens // layer.m_div)
            tag = f"{family.group}:{layer.name}"
            fwd_op = "addmm" if layer.bias else "mm"
            # forward: X[m, in] @ W^T -> F.linear gives B col; GPT-2 Conv1D stores W as (in, out), B row
            yield _row(f"{tag}:fwd", fwd_op, m, layer.out_f, layer.in_f, dtype, layout_b="row" if conv1d else "col")
            if not train:
                continue
            # grad wrt input: dY[m, out] @ W[out, in] (B row for F.linear; Conv1D needs W^T, B col)
            yield _row(f"{tag}:bwd_in", "mm", m, layer.in_f, layer.out_f, dtype, layout_b="col" if conv1d else "row")
            # grad wrt weight (A col): F.linear weight is column-major in the forward mm, so autograd computes
            # dY^T @ X (m=out, n=in); Conv1D's row-major weight gives X^T @ dY (m=in, n=out). k = tokens.
            if conv1d:
                yield _row(f"{tag}:bwd_w", "mm", layer.in_f, layer.out_f, m, dtype, layout_a="col")
            else:
                yield _row(f"{tag}:bwd_w", "mm", layer.out_f, layer.in_f, m, dtype, layout_a="col")
    for tokens in family.int8_m:
        for layer in family.layers:
            m = tokens // layer.m_div
            if int_mm_ok(m, layer.out_f, layer.in_f):
                yield _row(f"{family.group}:{layer.name}:fwd", "int_mm", m, layer.out_f, layer.in_f, "int8")
    if family.attention is not None:
        att = family.attention
        for seq, batch in att.seq_batch:
            dtype = _pick(rng, family.dtype_weights)
            b = batch * att.heads
            # scores = Q @ K^T: K stored (b, seq, d) -> B col; out = P @ V: V row
            yield _row(f"{family.group}:attn_qk:fwd", "bmm", seq, seq, att.head_dim, dtype, b=b, layout_b="col")
            yield _row(f"{family.group}:attn_pv:fwd", "bmm", seq, att.head_dim, seq, dtype, b=b)


def msweep_rows() -> Iterator[dict[str, Any]]:
    for k, n, dtype, layout_b in MSWEEPS:
        for m in MSWEEP_M:
            yield _row(f"msweep:{k}x{n}", "mm", m, n, k, dtype, layout_b=layout_b)


FLOAT_DTYPES = (("bfloat16", 0.4), ("float16", 0.38), ("float32", 0.22))
LAYOUTS_AB = ((("row", "col"), 0.4), (("row", "row"), 0.4), (("col", "row"), 0.15), (("col", "col"), 0.05))


def random_rows(rng: random.Random) -> Iterator[dict[str, Any]]:
    """Log-uniform sizes with a mix of roundings; some addmm, bmm and int8. Endless; the caller takes enough."""
    grains_nk = ((1, 0.15), (8, 0.25), (16, 0.2), (64, 0.2), (128, 0.2))
    grains_m = ((1, 0.5), (8, 0.2), (64, 0.3))
    while True:
        op = _pick(rng, (("mm", 0.7), ("addmm", 0.12), ("bmm", 0.1), ("int_mm", 0.08)))
        if op == "bmm":
            b = _log_uniform(rng, 2, 256)
            m, n, k = (_log_uniform(rng, 16, 4096) for _ in range(3))
        else:
            b, m = 1, _log_uniform(rng, 1, 16384)
            n, k = (_log_uniform(rng, 16, 16384) for _ in range(2))
        m = _round_to(m, _pick(rng, grains_m))
        n = _round_to(n, _pick(rng, grains_nk))
        k = _round_to(k, _pick(rng, grains_nk))
        if op == "int_mm":
            m, n, k = max(m, 17), _round_to(n, 8), _round_to(k, 8)
            yield _row("random", op, m, n, k, "int8")
            continue
        layout_a, layout_b = _pick(rng, LAYOUTS_AB)
        yield _row("random", op, m, n, k, _pick(rng, FLOAT_DTYPES), b=b, layout_a=layout_a, layout_b=layout_b)


def splitk_rows(rng: random.Random) -> Iterator[dict[str, Any]]:
    """M, N in [16, 256] and K in [max(2048, 16*max(M, N)), 65536]: the decompose-K regime."""
    while True:
        m = _log_uniform(rng, 16, 256)
        n = _log_uniform(rng, 16, 256)
        if rng.random() < 0.5:
            m = min(256, _round_to(m, 16))
        if rng.random() < 0.7:
            n = min(256, _round_to(n, 8))
        lo = max(2048, 16 * max(m, n))
        k = _log_uniform(rng, lo, 65536)
        if rng.random() < 0.15:
            k = 2 ** math.ceil(math.log2(k))  # powers of two, up to 65536 itself
        grain = 256 if rng.random() < 0.7 else 8
        k = min(65536, math.ceil(k / grain) * grain)
        if rng.random() < 0.07 and int_mm_ok(m, n, k):
            yield _row("splitk", "int_mm", m, n, k, "int8")
            continue
        layout_a, layout_b = _pick(rng, LAYOUTS_AB)
        yield _row("splitk", "mm", m, n, k, _pick(rng, FLOAT_DTYPES), layout_a=layout_a, layout_b=layout_b)


def unaligned_rows(rng: random.Random) -> Iterator[dict[str, Any]]:
    """N and/or K not a multiple of 8 (often odd), M anything; float dtypes only (int8 needs multiples of 8)."""
    while True:
        op = _pick(rng, (("mm", 0.75), ("addmm", 0.15), ("bmm", 0.1)))
        if op == "bmm":
            b = _log_uniform(rng, 2, 128)
            m, n, k = (_log_uniform(rng, 8, 4096) for _ in range(3))
        else:
            b, m = 1, _log_uniform(rng, 1, 8192)
            n, k = (_log_uniform(rng, 8, 16384) for _ in range(2))
        which = _pick(rng, (("k", 1.0), ("n", 1.0), ("nk", 1.0)))
        if "n" in which:
            n = (n // 8) * 8 + 1 + int(rng.random() * 7)
        if "k" in which:
            k = (k // 8) * 8 + 1 + int(rng.random() * 7)
        layout_a, layout_b = _pick(rng, LAYOUTS_AB)
        yield _row("unaligned", op, m, n, k, _pick(rng, FLOAT_DTYPES), b=b, layout_a=layout_a, layout_b=layout_b)


# ---------------------------------------------------------------------------------------------
# build, hash, save, load


def build_corpus(seed: int = 0) -> pd.DataFrame:
    """The corpus as one row per distinct problem: Problem fields, problem_id, family_tag, group.

    Duplicates keep the first tag in this order: msweep (a sweep must stay complete), model
    families, splitk, unaligned, random.
    """
    seed = int(seed)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    counts = {"msweep": _take(msweep_rows(), seen, rows)}
    counts["models"] = sum(_take(model_rows(f, seed), seen, rows) for f in MODEL_FAMILIES)
    counts["splitk"] = _take(splitk_rows(_rng(seed, "splitk")), seen, rows, N_SPLITK)
    counts["unaligned"] = _take(unaligned_rows(_rng(seed, "unaligned")), seen, rows, N_UNALIGNED)
    counts["random"] = _take(random_rows(_rng(seed, "random")), seen, rows, N_RANDOM)
    log.info("corpus seed %d: %s", seed, ", ".join(f"{k} {v}" for k, v in counts.items()))
    return corpus_frame(rows)


def build_token_corpus(seed: int = 0) -> pd.DataFrame:
    """The token-mixing corpus (``collectors.corpus_tokens``), in the corpus_v1 columns and row order."""
    from .corpus_tokens import TOKEN_FAMILIES

    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    for family in TOKEN_FAMILIES:
        _take(model_rows(family, seed), seen, rows)
    return corpus_frame(rows)


def corpus_sha256(df: pd.DataFrame) -> str:
    """sha256 over the sorted problem ids: names the set of problems, whatever the row order."""
    ids = sorted(map(str, df["problem_id"]))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def kind_of(family_tag: str) -> str:
    return family_tag.split(":", 1)[0]


def summary(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Counts per family kind, model group, dtype, op and layout pair (for the CLI and the card)."""
    layouts = "A " + df["layout_a"].astype(str) + " / B " + df["layout_b"].astype(str)
    return {
        "kind": df["family_tag"].map(kind_of).value_counts().reindex(KINDS, fill_value=0).rename_axis("kind"),
        "dtype": df["dtype"].value_counts().rename_axis("dtype"),
        "op": df["op"].value_counts().rename_axis("op"),
        "layout": layouts.value_counts().rename_axis("layout"),
    }


def write_corpus(df: pd.DataFrame, path: str | Path, seed: int) -> Path:
    """zstd parquet with metadata (seed, corpus_sha256, count), page checksums and ``footer_sha256``
    (``predictor.artifacts.schema.write_parquet``), written atomically."""
    path = Path(path)
    table = pa.Table.from_pandas(df[list(CORPUS_COLUMNS)], preserve_index=False)
    meta = {"corpus_version": CORPUS_VERSION, "seed": int(seed), "corpus_sha256": corpus_sha256(df), "count": len(df),
            "generator": "python -m collectors.corpus"}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           **{k.encode(): json.dumps(v).encode() for k, v in meta.items()}})
    write_parquet(table, path)
    log.info("wrote %d problems to %s (sha256 %s)", len(df), path, meta["corpus_sha256"][:12])
    return path


def load_corpus(path: str | Path) -> pd.DataFrame:
    """Read a corpus file, check its columns and that its problem ids match the recorded hash."""
    path = Path(path)
    try:
        table, meta = read_parquet(path, what="corpus parquet")  # page checksums and footer_sha256 verified
    except DatasetError as exc:
        raise CorpusError(str(exc)) from None
    missing = [c for c in CORPUS_COLUMNS if c not in table.column_names]
    if missing:
        raise CorpusError(f"{path}: missing corpus columns {', '.join(missing)}")
    df = _typed(table.to_pandas()[list(CORPUS_COLUMNS)])
    if df["problem_id"].duplicated().any():
        raise CorpusError(f"{path}: {int(df['problem_id'].duplicated().sum())} duplicate problem ids")
    if "corpus_sha256" in meta and meta["corpus_sha256"] != corpus_sha256(df):
        raise CorpusError(f"{path}: problem ids do not match the recorded corpus_sha256 {meta['corpus_sha256'][:12]}")
    df.attrs["metadata"] = meta
    df.attrs["source"] = str(path)
    return df


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="parquet file to write")
    parser.add_argument("--seed", type=int, default=0)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--quantized", action="store_true",
                       help="build the quantized corpus (int8 B col-major, fp8 scaled_mm; collectors.corpus_quant) "
                            "instead of corpus v1; it takes no seed")
    which.add_argument("--token-mixing", action="store_true",
                       help="build the token-mixing corpus (MLP-Mixer, ResMLP, gMLP token layers; "
                            "collectors.corpus_tokens) instead of corpus v1")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.quantized:
        from .corpus_quant import build_quant_corpus

        df = build_quant_corpus()
    elif args.token_mixing:
        df = build_token_corpus(args.seed)
    else:
        df = build_corpus(args.seed)
    write_corpus(df, args.out, args.seed)
    print(f"{len(df)} problems, seed {args.seed}, corpus_sha256 {corpus_sha256(df)}")
    for name, counts in summary(df).items():
        print(f"\nper {name}:")
        print(counts.rename("problems").to_string())
    print(f"\n{args.out}: {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
