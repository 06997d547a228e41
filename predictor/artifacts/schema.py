"""The dataset contract's files: long-format parquet, one row per measured problem x candidate, read and written
with the checks of ``dataset_rules`` (the columns, and what rows can be true).

Loaders validate columns and ``schema_version`` and refuse a mismatch with a one-line error, so a
model is never trained or evaluated on rows it misreads. They also refuse rows that cannot be true: a problem
x candidate measured twice (also across the files one training reads), one ``problem_id`` for two shapes (ids are
the hash of the problem fields), a non-finite or implausible time, a size below 1, a negative count, candidate
fields that disagree with the candidate key, a missing required value, parts of one dataset measured on different
GPUs.

Files are written with parquet page checksums (CRC32 of every data and dictionary page) and a sha256 of the
footer's key-value metadata and column list (``footer_sha256``); both are verified on every read, so a flipped
bit in a label, in the metadata or in a column name is an error, never a silently different dataset. A file
whose metadata says it is a dataset of ours must carry ``footer_sha256``; files without our metadata (written by
other tools) are read with their rows checked alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atomic import staged_file
from .dataset_rules import COLUMNS, FOOTER_DIGEST, REQUIRED_METADATA, SCHEMA_VERSION, DatasetError, validate_frame
from .reading import DATASET_BYTES, InputError, MissingInput, open_regular

if TYPE_CHECKING:  # imported where used: the hook reads SCHEMA_VERSION and must not pay for pandas and pyarrow
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq


def _footer_digest(raw: Mapping[bytes, bytes], schema: pa.Schema, num_rows: int) -> str:
    """sha256 of the key-value metadata (all but the digest), the column names and types, and the row count."""
    digest = hashlib.sha256()
    for key in sorted(raw):
        if key not in (FOOTER_DIGEST.encode(), b"ARROW:schema"):
            digest.update(len(key).to_bytes(8, "little") + key + len(raw[key]).to_bytes(8, "little") + raw[key])
    for f in schema:
        digest.update(json.dumps([f.name, str(f.type), f.nullable]).encode())
    digest.update(f"rows={int(num_rows)}".encode())
    return digest.hexdigest()


def _checked_schema(path: Path, file: pq.ParquetFile, num_rows: int | None = None) -> pa.Schema:
    """The file's Arrow schema (with the metadata pyarrow reads back) after checking ``footer_sha256``.

    The footer holds the metadata twice (parquet key-values and the serialised Arrow schema, which pyarrow
    prefers); a digest in either copy must match what is read, so a damaged copy of the digest's own key
    cannot switch the check off. ``num_rows``: the rows actually read (default: the footer's count)."""
    footer = file.metadata
    schema = file.schema_arrow
    raw = schema.metadata or {}
    rows = footer.num_rows if num_rows is None else num_rows
    if rows != footer.num_rows:
        raise DatasetError(f"{path}: corrupt: {rows} rows read, its footer says {footer.num_rows}")
    recorded = {v for v in (raw.get(FOOTER_DIGEST.encode()), (footer.metadata or {}).get(FOOTER_DIGEST.encode()))
                if v is not None}
    if not recorded and b"schema_version" in raw and b"device" in raw:
        # a dataset of ours always carries it (write_parquet): without it nothing below notices a changed byte
        raise DatasetError(f"{path}: its metadata says it is a gemm-predictor dataset but it carries no {FOOTER_DIGEST}; "
                           "rewrite it with predictor.artifacts.schema.write_dataset")
    if recorded and any(json.loads(v) != _footer_digest(raw, schema, rows) for v in recorded):
        raise DatasetError(f"{path}: corrupt: its metadata, columns or row count do not match the recorded {FOOTER_DIGEST}")
    return schema


def _decode(raw: Mapping[bytes, bytes]) -> dict[str, Any]:
    return {k.decode(): json.loads(v) for k, v in raw.items()
            if not k.startswith((b"pandas", b"ARROW")) and k != FOOTER_DIGEST.encode()}


def read_parquet(path: str | Path, columns: list[str] | None = None, what: str = "parquet dataset") -> tuple[pa.Table, dict[str, Any]]:
    """A parquet file's table and its metadata (JSON values), with page checksums and ``footer_sha256`` verified;
    anything unreadable or corrupt is a one-line ``DatasetError`` naming the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        # one open of a regular file under the cap (a FIFO would block pyarrow's open forever), read once
        with open_regular(path, DATASET_BYTES, what) as handle:
            file = pq.ParquetFile(handle, page_checksum_verification=True)
            # one thread: a corrupt page read by the thread pool can abort the interpreter at exit (pyarrow 26)
            table = file.read(columns=columns, use_threads=False)
            raw = _checked_schema(path, file, table.num_rows).metadata
        # the footer holds the metadata twice; the table carries the copy just verified (pandas reads it back)
        table = table.replace_schema_metadata(raw)
        if not raw:  # pyarrow and pandas always write some: none at all is a damaged footer (or not a file of ours)
            raise DatasetError(f"{path}: corrupt or not a {what}: its footer holds no metadata")
        meta = _decode(raw)
    except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: bad JSON or text in the metadata
        if isinstance(exc, DatasetError):
            raise
        if isinstance(exc, MissingInput):
            raise DatasetError(f"{path}: not a readable {what} (no such file)") from None
        if isinstance(exc, InputError):  # a FIFO, a device, a folder, a file over the cap
            raise DatasetError(str(exc)) from None
        text = (str(exc).splitlines() or [""])[0][:160]
        raise DatasetError(f"{path}: corrupt or not a readable {what} ({type(exc).__name__}: {text})") from None
    return table, meta


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    """Write ``table`` (its schema metadata included) as zstd parquet with page checksums and ``footer_sha256``,
    atomically (a unique temporary file beside it, then renamed)."""
    import pyarrow.parquet as pq

    path = Path(path)
    raw = {k: v for k, v in (table.schema.metadata or {}).items() if k != FOOTER_DIGEST.encode()}
    raw[FOOTER_DIGEST.encode()] = json.dumps(_footer_digest(raw, table.schema, table.num_rows)).encode()
    table = table.replace_schema_metadata(raw)
    with staged_file(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
    return path


def file_metadata(path: str | Path) -> dict[str, Any]:
    """A dataset file's metadata (JSON values), its ``footer_sha256`` verified."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        with open_regular(path, DATASET_BYTES, "parquet dataset") as handle:
            return _decode(_checked_schema(path, pq.ParquetFile(handle)).metadata or {})
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, DatasetError):
            raise
        if isinstance(exc, InputError):
            raise DatasetError(str(exc)) from None
        raise DatasetError(f"{path}: corrupt or not a readable parquet dataset ({type(exc).__name__})") from None

# the other collectors' label files (metadata ``kind``) and the subcommand that reads each
LABEL_SETS = {"gemv_labels": ("a GEMV label set", "gemv-eval"),
              "gemv_block_labels": ("a GEMV block label set", "gemv-fit"),
              "few_rows_labels": ("a few-rows label set", "few-rows-fit"),
              "grouped_mm_labels": ("a grouped-GEMM label set", "grouped-fit")}


def read_dataset(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a dataset file (or a folder of parquet parts) and validate it."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset")
    parts = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not parts:
        raise DatasetError(f"{path}: folder holds no .parquet files")
    frames, first = [], None
    for part in parts:
        table, meta = read_parquet(part, columns)
        if meta.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise DatasetError(f"{part}: schema_version {meta.get('schema_version')} but this library reads {SCHEMA_VERSION}")
        if meta.get("kind") in LABEL_SETS:  # a label file of another collector: say which, and what reads it
            what, command = LABEL_SETS[meta["kind"]]
            raise DatasetError(f"{part}: {what}, not a GEMM dataset; `gemm-predictor {command}` reads it")
        lacking = [k for k in REQUIRED_METADATA if k not in meta]
        if meta.keys() & set(REQUIRED_METADATA) and lacking:  # write_dataset writes all or (another tool) none
            raise DatasetError(f"{part}: metadata lacks {', '.join(lacking)} (a damaged footer?)")
        if first is None:
            first = (part, meta)
        elif (meta.get("gpu"), meta.get("cc")) != (first[1].get("gpu"), first[1].get("cc")):
            raise DatasetError(f"{part}: measured on {meta.get('gpu')!r} (cc {meta.get('cc')}), but {first[0].name} on "
                               f"{first[1].get('gpu')!r} (cc {first[1].get('cc')}); one dataset holds one GPU's rows")
        frames.append(table.to_pandas())
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if columns is None:
        df = validate_frame(df, str(path))
        _check_one_gpu(df, first[1], str(path))
    df.attrs["metadata"] = first[1]
    df.attrs["source"] = str(path)
    return df


def _check_one_gpu(df: pd.DataFrame, meta: Mapping[str, Any], source: str) -> None:
    pairs = df[["gpu", "cc"]].iloc[:1] if df["gpu"].nunique() <= 1 and df["cc"].nunique() <= 1 else \
        df[["gpu", "cc"]].drop_duplicates()
    if len(pairs) > 1:
        names = ", ".join(f"{g} (cc {c})" for g, c in pairs.itertuples(index=False))
        raise DatasetError(f"{source}: rows measured on several GPUs ({names}); one dataset holds one GPU's rows")
    if len(pairs) and "gpu" in meta and (pairs.iloc[0]["gpu"], pairs.iloc[0]["cc"]) != (meta.get("gpu"), meta.get("cc", pairs.iloc[0]["cc"])):
        raise DatasetError(f"{source}: rows say {pairs.iloc[0]['gpu']!r} (cc {pairs.iloc[0]['cc']}), its metadata "
                           f"{meta.get('gpu')!r} (cc {meta.get('cc')})")


def write_dataset(df: pd.DataFrame, path: str | Path, metadata: dict[str, Any]) -> Path:
    """Write validated rows with file-level metadata (zstd parquet), atomically (tmp + rename)."""
    import pyarrow as pa

    path = Path(path)
    missing = [k for k in REQUIRED_METADATA if k not in metadata]
    if missing:
        raise DatasetError(f"{path}: metadata lacks {', '.join(missing)}")
    df = validate_frame(df, str(path))
    ordered = [c for c in COLUMNS] + [c for c in df.columns if c not in COLUMNS]
    table = pa.Table.from_pandas(df[ordered], preserve_index=False)
    meta = {**(table.schema.metadata or {}), **{k.encode(): json.dumps(v).encode() for k, v in metadata.items()
                                                 if k != FOOTER_DIGEST}}
    return write_parquet(table.replace_schema_metadata(meta), path)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    path = Path(path)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    for file in files:
        try:
            with open_regular(file, DATASET_BYTES, "parquet dataset") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except InputError as exc:
            raise DatasetError(str(exc)) from None
    return digest.hexdigest()
