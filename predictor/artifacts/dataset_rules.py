"""The dataset contract's rules: the columns, their types and vocabularies, and what rows can be true (one
measurement per problem x candidate, one shape per ``problem_id``, plausible times and sizes, candidate fields that
agree with the key, a device section whose numbers a GPU can have). ``schema`` reads and writes the files and applies
these; every refusal is a one-line ``DatasetError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.candidate import CANDIDATE_FIELDS, FAMILIES, Candidate
from ..core.device import DeviceInfo
from ..core.problem import DTYPE_BYTES, DTYPES, LAYOUTS, OPS, PROBLEM_FIELDS, problem_id

if TYPE_CHECKING:  # imported where used: the hook reads SCHEMA_VERSION and must not pay for pandas
    import pandas as pd

SCHEMA_VERSION = 1
STATUSES = ("ok", "compile_error", "resources", "timeout", "wrong_result")
COLLECTORS = ("bulk", "inductor", "inductor-feedback")  # inductor-feedback: the label store (predictor.artifacts.label_store)

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
# Columns that may be null: a failed measurement has no time.
NULLABLE = ("time_us", "time_us_iqr", "inductor_bench_us", "compile_s", "hint", "inductor_rank")
# A problem x candidate is measured once per collector (and space, and multi-kernel hint, where recorded).
ROW_KEY = ("problem_id", "candidate")
ROW_KEY_OPTIONAL = ("collector", "space", "hint")
FOOTER_DIGEST = "footer_sha256"
# The longest time a row may hold: no GEMM kernel runs for a minute; a larger number is a unit or encoding error.
MAX_TIME_US = 6e7
# The shortest: one nanosecond, two cycles of a 2 GHz clock. An empty kernel's launch alone takes microseconds, so
# a smaller time (5e-324, a subnormal) is a unit or encoding error too; and it would dominate every ratio it enters.
MIN_TIME_US = 1e-3
# The values a text column may hold (the problem's vocabulary, ``predictor.core.problem``): anything else is a misread.
VOCABULARY = {"op": OPS, "dtype": DTYPES, "out_dtype": tuple(DTYPE_BYTES), "layout_a": LAYOUTS, "layout_b": LAYOUTS}

assert set(PROBLEM_FIELDS) <= set(COLUMNS) and set(CANDIDATE_FIELDS) <= set(COLUMNS)


class DatasetError(ValueError):
    """A dataset file that does not follow the contract."""


def validate_frame(df: pd.DataFrame, source: str = "<frame>") -> pd.DataFrame:
    """Check required columns, schema version, statuses and the rows' consistency (see the module doc); return
    the frame with canonical dtypes."""
    import pandas as pd

    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"{source}: missing columns {', '.join(missing)}")
    nulls = [c for c in COLUMNS if c not in NULLABLE and df[c].isna().any()]
    if nulls:
        c = nulls[0]
        raise DatasetError(f"{source}: {int(df[c].isna().sum())} rows have no {c} (first at row {int(np.flatnonzero(df[c].isna())[0])})")
    versions = {int(v) for v in pd.unique(df["schema_version"])} if len(df) else {SCHEMA_VERSION}
    if versions != {SCHEMA_VERSION}:
        raise DatasetError(f"{source}: schema_version {sorted(versions)} but this library reads {SCHEMA_VERSION}")
    bad_status = set(pd.unique(df["status"])) - set(STATUSES)
    if bad_status:
        raise DatasetError(f"{source}: unknown status values {sorted(bad_status)}")
    bad_collector = set(pd.unique(df["collector"])) - set(COLLECTORS)
    if bad_collector:
        raise DatasetError(f"{source}: unknown collector values {sorted(bad_collector)}")
    for column, allowed in VOCABULARY.items():
        unknown = set(map(str, pd.unique(df[column]))) - set(allowed)
        if unknown:
            raise DatasetError(f"{source}: unknown {column} values {sorted(unknown)[:5]} (expected one of "
                               f"{', '.join(allowed)})")
    types = {c: t for c, t in {**COLUMNS, **OPTIONAL_COLUMNS}.items() if c in df.columns}
    for column, kind in types.items():  # astype would cut 512.7 to 512: a size that was never measured
        if kind == "int64" and pd.api.types.is_float_dtype(df[column]):
            values = df[column].to_numpy(dtype=np.float64, na_value=np.nan)
            fractional = np.isfinite(values) & (values != np.floor(values))
            _first_bad(df, fractional, column, source, "an integer column holds whole numbers")
    try:
        df = df.astype(types)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{source}: a column has the wrong type ({str(exc).splitlines()[0][:160]})") from None
    ok = (df["status"] == "ok").to_numpy(dtype=bool)
    time_us = df["time_us"].to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isinf(time_us).any() or np.isinf(df["time_us_iqr"].to_numpy(dtype=np.float64, na_value=np.nan)).any():
        raise DatasetError(f"{source}: infinite time_us or time_us_iqr (a failed measurement has status != ok and no time)")
    if (np.isnan(time_us[ok]) | (time_us[ok] <= 0)).any():
        raise DatasetError(f"{source}: rows with status ok must have a positive time_us")
    _first_bad(df, ok & (time_us < MIN_TIME_US), "time_us", source,
               f"an ok time is at least {MIN_TIME_US} us (a nanosecond: no kernel runs faster)")
    _check_bounds(df, source)
    _check_problems(df, source)
    check_unique_rows(df, source)
    return df


def _first_bad(df: pd.DataFrame, bad: np.ndarray, column: str, source: str, rule: str) -> None:
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = df[column].iloc[row]
        value = value.item() if isinstance(value, np.generic) else value
        raise DatasetError(f"{source}: {column} {value!r} at row {row} ({int(bad.sum())} rows): {rule}")


def _check_bounds(df: pd.DataFrame, source: str) -> None:
    """Values no measurement can produce: a size below 1, a time beyond ``MAX_TIME_US``, a negative count, and
    candidate fields that disagree with the row's candidate key (the features read the fields, the space the key)."""
    for column in ("b", "m", "n", "k"):
        _first_bad(df, df[column].to_numpy() < 1, column, source, "sizes are >= 1")
    _first_bad(df, df["align"].to_numpy() < 0, "align", source, "an alignment is >= 0 (0: not recorded)")
    for column in ("time_us", "time_us_iqr"):
        values = df[column].to_numpy(dtype=np.float64, na_value=np.nan)
        _first_bad(df, (values < 0) | (values > MAX_TIME_US), column, source,
                   f"times lie in [0, {MAX_TIME_US:.0e}] us (a GEMM kernel, not a minute)")
    reps = df["reps"].to_numpy()
    _first_bad(df, reps < 0, "reps", source, "a count of runs is >= 0")
    timed = ((df["status"] == "ok") & (df["collector"] == "bulk")).to_numpy(dtype=bool)
    _first_bad(df, timed & (reps < 1), "reps", source, "an ok bulk measurement comes from >= 1 run")
    import pyarrow as pa

    fields = ["candidate", *CANDIDATE_FIELDS]
    # the distinct candidates (hundreds, in a million rows), by Arrow's hash grouping
    distinct = pa.Table.from_pandas(df[fields], preserve_index=False).group_by(fields).aggregate([]).to_pandas()
    for row in distinct.itertuples(index=False):
        values = dict(zip(fields, row))
        try:
            if values["family"] not in FAMILIES:
                raise ValueError(f"unknown family {values['family']!r}")
            candidate = Candidate(**{f: values[f] for f in CANDIDATE_FIELDS})
            numbers = [values[f] for f in ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")]
            if candidate.is_triton and min(numbers) < 1:
                raise ValueError("a Triton candidate's blocks, stages, warps and group are >= 1")
            if values["family"] == "decompose_k" and values["k_split"] < 2:
                raise ValueError("a decompose_k candidate splits k in >= 2")
            if candidate.key != values["candidate"]:
                raise ValueError(f"its fields make {candidate.key!r}")
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"{source}: candidate {values['candidate']!r}: {exc}") from None


def _check_problems(df: pd.DataFrame, source: str) -> None:
    """Each problem_id is the hash of its problem fields (so one id is one shape) and has one family_tag."""
    import pyarrow as pa

    columns = ["problem_id", *PROBLEM_FIELDS, "family_tag"]
    # the distinct (id, fields, tag) rows: Arrow's hash grouping, 4x faster than drop_duplicates on 1M rows
    problems = pa.Table.from_pandas(df[columns], preserve_index=False).group_by(columns).aggregate([]).to_pandas()
    problems = problems.sort_values(columns, kind="stable")
    ids = problems["problem_id"].astype(str)
    not_hex = ~ids.str.fullmatch(r"[0-9a-f]{12}")
    if not_hex.any():
        raise DatasetError(f"{source}: problem_id {ids[not_hex].iloc[0]!r} is not a 12-digit hex problem id")
    twice = problems["problem_id"].duplicated(keep=False)
    if twice.any():
        first = problems[twice].iloc[0]["problem_id"]
        shapes = problems[problems["problem_id"] == first]
        what = "family_tags" if len(shapes.drop_duplicates(list(PROBLEM_FIELDS))) == 1 else "problems (shapes)"
        raise DatasetError(f"{source}: problem_id {first} names {len(shapes)} different {what}")
    for row in problems[["problem_id", *PROBLEM_FIELDS]].itertuples(index=False):
        expected = problem_id(*row[1:])
        if row[0] != expected:
            raise DatasetError(f"{source}: problem_id {row[0]} does not match its fields ({row[1]} b={row[2]} m={row[3]} "
                               f"n={row[4]} k={row[5]} {row[6]} ...: expected {expected})")


def check_unique_rows(df: pd.DataFrame, source: str) -> None:
    """Each problem x candidate once (per collector, space and hint): also for rows merged from several files."""
    key = [*ROW_KEY, *(c for c in ROW_KEY_OPTIONAL if c in df.columns)]
    dup = df.duplicated(key)
    if dup.any():
        first = df.iloc[int(np.argmax(dup.to_numpy()))]
        raise DatasetError(f"{source}: {int(dup.sum())} duplicate problem x candidate rows (first: problem_id "
                           f"{first['problem_id']}, candidate {first['candidate']}); each is measured once")


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


def device_fault(device: DeviceInfo) -> str | None:
    """What is implausible in a device section (None: nothing). The numbers the features divide by and compare
    against must be finite and positive: a NaN bandwidth turns every roofline feature into NaN, which the trees
    send one fixed way; a zero divides by zero. Datasets and models are checked alike."""
    for key in ("sm_count", "smem_per_block", "l2_bytes", "mem_bandwidth_gbs"):
        value = getattr(device, key)
        if not _finite(value) or value <= 0:
            return f"metadata device.{key} is {value!r:.40}, not a finite number > 0"
    for dtype, value in device.peak_tflops.items():
        if not _finite(value) or value <= 0:
            return f"metadata device.peak_tflops.{dtype} is {value!r:.40}, not a finite number > 0"
    return None


def _finite(value: float) -> bool:
    return isinstance(value, int) or math.isfinite(value)  # an int is finite (and may be too large for a float)


def check_dataset_device(meta: Mapping[str, Any], source: str) -> DeviceInfo | None:
    """The device a dataset's metadata describes, checked (``device_fault``) for use in features (training): None
    when it has no device section (a file of another tool). Not part of every read: a collector that measures no
    bandwidth records 0 (Inductor's own timings, ``inductor.parquet``), which is fine for what reads those rows."""
    if "device" not in meta:
        return None
    try:
        device = DeviceInfo.from_metadata(dict(meta))
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{source}: {(str(exc).splitlines() or [''])[0][:160]}") from None
    fault = device_fault(device)
    if fault:
        raise DatasetError(f"{source}: {fault}; the features of every row would be wrong")
    return device
