"""The dataset contract: long-format parquet, one row per measured problem x candidate.

Loaders validate columns and ``schema_version`` and refuse a mismatch with a one-line error, so a
model is never trained or evaluated on rows it misreads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .candidate import CANDIDATE_FIELDS
from .problem import PROBLEM_FIELDS

SCHEMA_VERSION = 1
STATUSES = ("ok", "compile_error", "resources", "timeout", "wrong_result")
COLLECTORS = ("bulk", "inductor")

COLUMNS: dict[str, str] = {
    # problem
    "op": "string", "b": "int64", "m": "int64", "n": "int64", "k": "int64", "dtype": "string",
    "out_dtype": "string", "layout_a": "string", "layout_b": "string", "align": "int64",
    "problem_id": "string", "family_tag": "string",
    # candidate
    "family": "string", "block_m": "int64", "block_n": "int64", "block_k": "int64", "num_stages": "int64",
    "num_warps": "int64", "group_m": "int64", "k_split": "int64", "aten_op": "string", "candidate": "string",
    # measurement
    "time_us": "float64", "time_us_iqr": "float64", "reps": "int64", "status": "string", "collector": "string",
    "gpu": "string", "cc": "string", "torch": "string", "triton": "string", "schema_version": "int64",
}
# Optional columns a collector may add (kept when present, never required).
OPTIONAL_COLUMNS: dict[str, str] = {"space": "string", "compile_s": "float64", "hint": "int64", "inductor_rank": "int64",
                                    "inductor_bench_us": "float64"}
# Metadata keys every dataset file carries (pyarrow schema metadata, values JSON-encoded).
REQUIRED_METADATA = ("schema_version", "gpu", "cc", "torch", "triton", "corpus_sha256", "device")

assert set(PROBLEM_FIELDS) <= set(COLUMNS) and set(CANDIDATE_FIELDS) <= set(COLUMNS)


class DatasetError(ValueError):
    """A dataset file that does not follow the contract."""


def validate_frame(df: pd.DataFrame, source: str = "<frame>") -> pd.DataFrame:
    """Check required columns, schema version, statuses; return the frame with canonical dtypes."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"{source}: missing columns {', '.join(missing)}")
    versions = {int(v) for v in pd.unique(df["schema_version"])} if len(df) else {SCHEMA_VERSION}
    if versions != {SCHEMA_VERSION}:
        raise DatasetError(f"{source}: schema_version {sorted(versions)} but this library reads {SCHEMA_VERSION}")
    bad_status = set(pd.unique(df["status"])) - set(STATUSES)
    if bad_status:
        raise DatasetError(f"{source}: unknown status values {sorted(bad_status)}")
    bad_collector = set(pd.unique(df["collector"])) - set(COLLECTORS)
    if bad_collector:
        raise DatasetError(f"{source}: unknown collector values {sorted(bad_collector)}")
    ok = df["status"] == "ok"
    if (df.loc[ok, "time_us"].isna() | (df.loc[ok, "time_us"] <= 0)).any():
        raise DatasetError(f"{source}: rows with status ok must have a positive time_us")
    types = {c: t for c, t in {**COLUMNS, **OPTIONAL_COLUMNS}.items() if c in df.columns}
    try:
        return df.astype(types)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{source}: a column has the wrong type ({exc})") from None


def select_space(rows: pd.DataFrame, space: str, source: str = "dataset") -> pd.DataFrame:
    """Rows collected for ``space``: by the ``space`` column when present, else the file metadata's must agree."""
    if "space" not in rows.columns:
        declared = rows.attrs.get("metadata", {}).get("space")
        if declared is not None and declared != space:
            raise DatasetError(f"{source} was collected for space {declared!r}, not {space!r}")
        return rows
    selected = rows[rows["space"].astype(str) == space]
    if selected.empty:
        spaces = ", ".join(repr(s) for s in sorted(rows["space"].astype(str).unique()))
        raise DatasetError(f"{source} holds no rows of space {space!r} (it holds {spaces})")
    return selected


def file_metadata(path: str | Path) -> dict[str, Any]:
    raw = pq.read_schema(path).metadata or {}
    return {k.decode(): json.loads(v) for k, v in raw.items() if not k.startswith(b"pandas") and not k.startswith(b"ARROW")}


def read_dataset(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a dataset file (or a folder of parquet parts) and validate it."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset")
    parts = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not parts:
        raise DatasetError(f"{path}: folder holds no .parquet files")
    frames = []
    for part in parts:
        try:
            meta = file_metadata(part)
            frame = pq.read_table(part, columns=columns).to_pandas()
        except (pa.ArrowException, OSError, json.JSONDecodeError) as exc:
            raise DatasetError(f"{part}: not a readable parquet dataset ({type(exc).__name__}: {str(exc)[:120]})") from None
        if meta.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise DatasetError(f"{part}: schema_version {meta.get('schema_version')} but this library reads {SCHEMA_VERSION}")
        frames.append(frame)
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if columns is None:
        df = validate_frame(df, str(path))
    df.attrs["metadata"] = file_metadata(parts[0])
    df.attrs["source"] = str(path)
    return df


def write_dataset(df: pd.DataFrame, path: str | Path, metadata: dict[str, Any]) -> Path:
    """Write validated rows with file-level metadata (zstd parquet), atomically (tmp + rename)."""
    path = Path(path)
    missing = [k for k in REQUIRED_METADATA if k not in metadata]
    if missing:
        raise DatasetError(f"{path}: metadata lacks {', '.join(missing)}")
    df = validate_frame(df, str(path))
    ordered = [c for c in COLUMNS] + [c for c in df.columns if c not in COLUMNS]
    table = pa.Table.from_pandas(df[ordered], preserve_index=False)
    meta = {**(table.schema.metadata or {}), **{k.encode(): json.dumps(v).encode() for k, v in metadata.items()}}
    table = table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)
    return path


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    path = Path(path)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    for file in files:
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
