"""Append-only, crash-safe dataset parts: a collector killed at any moment loses at most the problems it had
not yet written, and never writes a problem twice.

Each part holds whole problems (all their candidates) and appears atomically (write to ``.tmp``, then rename),
so on restart the set of problem ids already in parts is exactly the set of finished problems.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from predictor.artifacts.atomic import check_output_file
from predictor.artifacts.schema import DatasetError, file_metadata, read_dataset, write_dataset

log = logging.getLogger(__name__)


class PartWriter:
    def __init__(self, folder: str | Path, prefix: str, metadata: dict[str, Any], every: int = 25,
                 every_rows: int = 20_000) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.metadata = metadata
        self.every = every
        self.every_rows = every_rows  # exhaustive problems carry ~2400 rows each: flush by size as well
        self._rows: list[dict] = []
        self._problems = 0
        own = re.compile(re.escape(prefix) + r"-(\d+)\.parquet")
        seqs = []
        for path in sorted(self.folder.glob(f"{prefix}-*.parquet")):
            match = own.fullmatch(path.name)
            if match:
                seqs.append(int(match.group(1)))
            else:  # e.g. a copy someone made; read with the parts (merge checks it), never overwritten
                log.warning("%s: not a part name this writer uses (%s-NNNNN.parquet); left alone", path, prefix)
        self._seq = 1 + max(seqs, default=-1)

    def add_problem(self, rows: list[dict]) -> None:
        self._rows.extend(rows)
        self._problems += 1
        if self._problems >= self.every or len(self._rows) >= self.every_rows:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        path = self.folder / f"{self.prefix}-{self._seq:05d}.parquet"
        write_dataset(pd.DataFrame(self._rows), path, self.metadata)
        log.debug("wrote %s (%d rows)", path, len(self._rows))
        self._seq += 1
        self._rows, self._problems = [], 0


def finished_problem_ids(folder: str | Path) -> set[str]:
    """Problem ids already stored in complete parts (``.tmp`` leftovers of a crash are ignored)."""
    done: set[str] = set()
    for part in sorted(Path(folder).glob("*.parquet")):
        try:
            done.update(pq.read_table(part, columns=["problem_id"]).column("problem_id").to_pylist())
        except Exception as exc:
            raise DatasetError(f"{part}: unreadable part ({exc}); move it away and rerun") from None
    return done


def merge_parts(folder: str | Path, dest: str | Path, metadata_update: dict[str, Any] | None = None) -> pd.DataFrame:
    """Concatenate all parts into one dataset file, written atomically. ``read_dataset`` refuses duplicate
    (problem, candidate) rows and parts of different GPUs; ``dest`` must be a new path or a dataset file (which is
    replaced), checked before any part is read."""
    check_output_file(dest)
    if Path(dest).exists():
        try:
            file_metadata(dest)["schema_version"]
        except (DatasetError, KeyError):
            raise DatasetError(f"{dest}: exists and is not a dataset file; choose a new path (nothing was written)") from None
    if not Path(folder).is_dir():
        raise DatasetError(f"{folder}: not a folder of parts")
    df = read_dataset(folder)
    meta = dict(df.attrs["metadata"])
    df = df.sort_values(["problem_id", "inductor_rank" if "inductor_rank" in df else "candidate"], kind="stable")
    meta.update(metadata_update or {})
    write_dataset(df.reset_index(drop=True), dest, meta)
    return df
