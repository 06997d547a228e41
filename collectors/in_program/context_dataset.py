"""The context dataset: in-program decisions as labelled rows, and what a small tree learns from them.

    python -m collectors.in_program.context_dataset --inprog docs/benchmarks/zoo/nvidia-h100/in_program/context_blocks \\
        --out datasets/nvidia-h100/context.parquet
    python -m collectors.in_program.context_dataset --fit datasets/nvidia-h100/context.parquet \\
        --test docs/benchmarks/zoo/nvidia-h100/in_program --test docs/benchmarks/zoo/nvidia-h100/in_program/held_out_set2

A row is one GEMM (a problem key; repeated layers flip together) of a program the in-program harness timed with
``--paired``: the step with the hook's pick and with the other side of the decision (cuBLAS vs the model's
favourite Triton/decompose-K kernel), replayed in turns in one process. ``triton_gain`` = cuBLAS step / Triton
step - 1: what taking Triton saves of the whole step, the epilogue fusion, launches and L2 state included. Nothing is
edited: the rows are ``agreement.json``'s, with the problem's fields and the measuring environment added.

``--fit`` fits a depth-``--depth`` decision tree (scikit-learn) on the dataset's resolved rows, predicting whether
Triton is faster from the recorded score gap, log2 m/n/k, the ideal time, fp32 and whether the output feeds a
pointwise op, weighted by |gain|; it prints the tree and the in-program agreement it reaches on the ``--test``
folders' GEMMs (never trained on), beside the shipped policy's (``policy.decide_gap_for`` at ``DECIDE_MIN_GAP``) and
the gap alone at -1.5 (the policy of the gap -1.5 runs). Offline code: pandas and scikit-learn.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.artifacts.reading import DOCUMENT_BYTES, read_json
from predictor.core.problem import Problem
from predictor.runtime.choices.policy import DECIDE_MIN_GAP
from predictor.artifacts.schema import DatasetError, read_parquet, write_parquet

from .context_blocks import parse as parse_block_name
from .redecide import problem_of, recorded_takes_triton

FEATURES = ("gap", "log2_m", "log2_n", "log2_k", "log2_ideal_us", "fp32", "feeds_pointwise")
KIND = "in_program_decisions"  # the file metadata's "kind": what tells these rows from GEMM-candidate labels
REQUIRED = ("model", "op", "m", "n", "k", "dtype", "gap", "triton_step_ms", "cublas_step_ms", "resolved", "gpu")


def write_context(df: pd.DataFrame, path: str | Path, sources: list[str]) -> Path:
    """``df`` as zstd parquet with page checksums and ``footer_sha256`` (``predictor.artifacts.schema.write_parquet``, as every
    shipped dataset), its metadata saying what it is and where it came from."""
    import pyarrow as pa

    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = {**(table.schema.metadata or {}), b"kind": json.dumps(KIND).encode(),
            b"gpu": json.dumps(str(df.gpu.iloc[0]) if len(df) else None).encode(),
            b"sources": json.dumps(sources).encode()}
    return write_parquet(table.replace_schema_metadata(meta), path)


def read_context(path: str | Path) -> pd.DataFrame:
    """A context dataset, checksums verified; a one-line ``DatasetError`` naming the file when it is corrupt, of
    another kind, lacks a column or holds several GPUs' rows."""
    table, meta = read_parquet(path, what="context dataset")
    if meta.get("kind") != KIND:
        raise DatasetError(f"{path}: not a context dataset (metadata kind {meta.get('kind')!r}, expected {KIND!r})")
    df = table.to_pandas()
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DatasetError(f"{path}: context dataset lacks column(s) {', '.join(missing)}")
    if df.gpu.nunique() > 1:
        raise DatasetError(f"{path}: rows of several GPUs ({', '.join(map(str, df.gpu.unique()))})")
    df.attrs.update(metadata=meta, source=str(path))  # as predictor.artifacts.schema.read_dataset gives them
    return df


def rows_of(folder: str | Path) -> pd.DataFrame:
    """One row per GEMM of an in-program folder's ``agreement.json`` (resolved or not), with the problem's fields."""
    doc = read_json(Path(folder) / "agreement.json", DOCUMENT_BYTES, "agreement.json")  # never blocks on a FIFO
    rows = []
    for g in doc["gemms"]:
        problem = problem_of(g)
        triton_ms, cublas_ms = ((g["hook_ms"], g["alternative_ms"]) if g["hook"] != "cublas"
                                else (g["alternative_ms"], g["hook_ms"]))
        block = parse_block_name(g["model"]) or {}
        rows.append({
            "model": g["model"], "block_act": block.get("act"), "op": problem.op, "b": problem.b, "m": problem.m,
            "n": problem.n, "k": problem.k, "dtype": problem.dtype, "out_dtype": problem.out_dtype,
            "layout_a": problem.layout_a, "layout_b": problem.layout_b, "align": problem.align,
            "count": g["count"], "ideal_us": g["ideal_us"], "gap": g["gap"], "hook_side": g["hook"],
            "triton_template": g["alternative"] if g["hook"] == "cublas" else None,
            "feeds_pointwise": bool(g["feeds_pointwise"]), "consumers": ",".join(g.get("consumers") or []),
            "triton_step_ms": triton_ms, "cublas_step_ms": cublas_ms, "triton_gain": cublas_ms / triton_ms - 1,
            "ratio_iqr": g.get("ratio_iqr"), "resolved": bool(g.get("resolved", True)),
            "gpu": doc.get("gpu"), "torch": doc.get("torch"), "triton": doc.get("triton"),
            "tolerance": doc["tolerance"], "source": str(folder)})
    return pd.DataFrame(rows)


def features(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"gap": df.gap, "log2_m": np.log2(df.m), "log2_n": np.log2(df.n), "log2_k": np.log2(df.k),
                         "log2_ideal_us": np.log2(df.ideal_us + 1e-3), "fp32": (df.dtype == "float32") * 1.0,
                         "feeds_pointwise": df.feeds_pointwise * 1.0})


def agreement(df: pd.DataFrame, takes_triton: np.ndarray) -> float:
    """Share of GEMMs whose chosen side's step is within the folder's tolerance of the better side's."""
    chosen = np.where(takes_triton, df.triton_step_ms, df.cublas_step_ms)
    best = np.minimum(df.triton_step_ms, df.cublas_step_ms)
    return float(np.mean(chosen <= best * (1 + df.tolerance)))


def shipped_policy(df: pd.DataFrame, gap: float = DECIDE_MIN_GAP, gap_only: bool = False) -> np.ndarray:
    """Whether the decide policy at ``gap`` takes Triton for each row, from its recorded gap
    (``redecide.recorded_takes_triton``: the shipped floors, or ``gap`` alone with ``gap_only``)."""
    return np.array([recorded_takes_triton(Problem(r.op, r.m, r.n, r.k, r.dtype, b=r.b), r.gap, gap, gap_only)
                     for r in df.itertuples()], dtype=bool)


def fit(train: pd.DataFrame, test: pd.DataFrame, depth: int) -> str:
    """The tree fitted on ``train``'s resolved rows and the agreement table on both sets, as text."""
    from sklearn.tree import DecisionTreeClassifier, export_text

    train, test = train[train.resolved], test[test.resolved]
    tree = DecisionTreeClassifier(max_depth=depth, min_samples_leaf=10, random_state=0)
    tree.fit(features(train), train.triton_gain > 0, sample_weight=train.triton_gain.abs().clip(0.002, 0.2))
    lines = [export_text(tree, feature_names=list(FEATURES)).rstrip(), "",
             "| rule | train (context, %d GEMMs) | test (%d GEMMs) |" % (len(train), len(test)), "|---|---|---|"]
    for name, side in [("the gap alone at -1.5 (the gap -1.5 runs)", lambda d: shipped_policy(d, -1.5, gap_only=True)),
                       (f"shipped policy (decide_gap_for at {DECIDE_MIN_GAP})", shipped_policy),
                       (f"depth-{depth} tree fitted on the context rows", lambda d: tree.predict(features(d)))]:
        lines.append(f"| {name} | {agreement(train, side(train)):.1%} | {agreement(test, side(test)):.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inprog", action="append", default=[], help="in_program folder(s) to turn into rows")
    p.add_argument("--out", help="the parquet to write (zstd)")
    p.add_argument("--fit", help="a context parquet to fit the tree on")
    p.add_argument("--test", action="append", default=[], help="in_program folder(s) to test the tree on")
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args(argv)
    if args.inprog:
        if not args.out:
            p.error("--inprog needs --out")
        for folder in args.inprog:
            if not (Path(folder) / "agreement.json").is_file():
                p.error(f"{folder}: no agreement.json (run python -m collectors.in_program.collect --report-only first)")
        df = pd.concat([rows_of(f) for f in args.inprog], ignore_index=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_context(df, args.out, args.inprog)
        print(f"{args.out}: {len(df)} GEMMs of {df.model.nunique()} programs ({int(df.resolved.sum())} resolved)")
    if args.fit:
        if not args.test:
            p.error("--fit needs at least one --test folder")
        print(fit(read_context(args.fit), pd.concat([rows_of(f) for f in args.test], ignore_index=True),
                  args.depth))
    if not args.inprog and not args.fit:
        p.error("give --inprog/--out and/or --fit/--test")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
