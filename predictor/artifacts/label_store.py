"""The label store: a folder of parquet parts, each holding labelled rows (the dataset contract of
``predictor.artifacts.schema``, collector ``inductor-feedback``) that Inductor's benchmark produced under ``tune=K``.

Layout: ``<root>/<gpu slug>/labels-<host>-<pid>-<utc>-<random>.parquet`` plus a sidecar ``<part>.sha256`` (JSON: the
sha256 and size of the part's bytes). The root is ``$GEMM_PREDICTOR_LABELS``, else ``$XDG_CACHE_HOME`` (or
``~/.cache``) ``/gemm-predictor/labels``; ``predictor.compile(label_store=...)`` names a store folder directly.

- Many processes write at once: every part has a name of its own (host, pid, time, 8 random bytes) and appears whole
  (``predictor.artifacts.schema.write_parquet``: a unique temporary file, then a rename). The sidecar is written before its
  part is renamed into place, so a part without one was torn, copied half or made by someone else.
- Every part read back is verified: the sidecar's sha256 against the bytes, parquet page checksums and the footer
  digest (``schema.read_parquet``), the store format, schema version and collector in its metadata, and the GPU.
  A part that fails any check is skipped with one warning line naming it and why.
- Size cap (``$GEMM_PREDICTOR_LABELS_CAP_MB``, default 256 MiB per store folder): a new part that would pass it is
  refused (one info line per process), old parts are never dropped. Why: parts are shared with concurrent readers
  (a refit, a fleet task) and deleting the "oldest" from several writers at once races with them; and the labels a
  local model was refit from must stay for the next refit, or it would forget them. Inductor's autotune cache keeps a
  GEMM it already tuned from being benchmarked again, so a store grows with new shapes only.

Runtime code: imports pyarrow (through ``schema``) only when a part is written or read, never pandas.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import roots
from .cache_dir import folder_in_cache

log = logging.getLogger(__name__)

STORE_FORMAT = "gemm-predictor/label-part/1"
COLLECTOR = "inductor-feedback"
LABELS_ENV = "GEMM_PREDICTOR_LABELS"  # the root holding one store folder per GPU
CAP_ENV = "GEMM_PREDICTOR_LABELS_CAP_MB"
DEFAULT_CAP_BYTES = 256 << 20
PART_PREFIX = "labels-"
SIDECAR_SUFFIX = ".sha256"
_PART_NAME = re.compile(r"labels-[A-Za-z0-9_.-]+\.parquet")


def gpu_slug(gpu: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200``, a store's folder name (``roots.gpu_slug``, as the per-GPU tables are
    named)."""
    return roots.gpu_slug(gpu) or "unknown-gpu"


def labels_root() -> Path:
    return folder_in_cache(LABELS_ENV, "labels")


def default_store(gpu: str) -> Path:
    """This user's store folder for ``gpu``."""
    return labels_root() / gpu_slug(gpu)


def cap_bytes() -> int:
    text = os.environ.get(CAP_ENV)
    if not text:
        return DEFAULT_CAP_BYTES
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"${CAP_ENV}={text!r} is not a number of MiB") from None
    if not value > 0:
        raise ValueError(f"${CAP_ENV}={text!r} must be > 0 MiB")
    return int(value * (1 << 20))


def shard_of(part_name: str, shards: int) -> int:
    """The shard (0 .. shards-1) a part belongs to: a stable hash of its file name alone (sha256, never Python's
    salted ``hash``), so every task of a fleet agrees on it whatever machine or process it runs in, and a part keeps
    its shard when others are added."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    return int.from_bytes(hashlib.sha256(Path(part_name).name.encode()).digest()[:8], "big") % shards


def part_paths(folder: str | Path) -> list[Path]:
    """The part files of a store folder, by name (temporary files and sidecars excluded)."""
    folder = Path(folder)
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return []
    return [folder / n for n in names if _PART_NAME.fullmatch(n)]


def _store_bytes(folder: Path) -> int:
    total = 0
    try:
        for entry in os.scandir(folder):
            if entry.name.startswith(PART_PREFIX):
                try:
                    total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        return 0
    return total


def _sha256_file(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def new_part_name() -> str:
    host = re.sub(r"[^A-Za-z0-9_-]+", "-", socket.gethostname())[:40] or "host"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{PART_PREFIX}{host}-{os.getpid()}-{stamp}-{secrets.token_hex(8)}.parquet"


class StoreFull(Exception):
    """A new part would pass the store's size cap."""


def write_part(folder: str | Path, columns: dict[str, list[Any]], metadata: dict[str, Any],
               cap: int | None = None) -> Path:
    """Write one part (``columns``: dataset-contract column -> values) with ``metadata`` (must name gpu, cc, torch,
    triton, device) into ``folder``; return its path. Raises ``StoreFull`` at the cap, ``OSError`` on a write
    error. pyarrow is imported here."""
    import pyarrow as pa

    from .schema import SCHEMA_VERSION, write_parquet

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cap = cap_bytes() if cap is None else cap
    meta = {"schema_version": SCHEMA_VERSION, "store_format": STORE_FORMAT, "collector": COLLECTOR,
            "corpus_sha256": "none: labels from use", **metadata,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    table = pa.table(columns)
    table = table.replace_schema_metadata({k.encode(): json.dumps(v).encode() for k, v in meta.items()})
    name = new_part_name()
    final = folder / name
    staging = folder / f".staging-{name}"  # not a part name: no reader lists it
    try:
        write_parquet(table, staging)
        digest, size = _sha256_file(staging)
        if _store_bytes(folder) + size > cap:
            raise StoreFull(f"{folder}: the label store holds its cap of {cap / (1 << 20):.0f} MiB (${CAP_ENV}); "
                            "new labels are not kept (fold them with `gemm-predictor refit`, then move the folder "
                            "away or raise the cap)")
        sidecar = {"format": STORE_FORMAT, "part": name, "sha256": digest, "bytes": size}
        side = folder / (name + SIDECAR_SUFFIX)
        tmp_side = folder / f".staging-{name}{SIDECAR_SUFFIX}"
        tmp_side.write_text(json.dumps(sidecar) + "\n")
        os.replace(tmp_side, side)
        os.replace(staging, final)
    finally:
        for leftover in (staging, folder / f".staging-{name}{SIDECAR_SUFFIX}"):
            try:
                leftover.unlink()
            except FileNotFoundError:
                pass
    return final


@dataclass
class StoreRead:
    """The verified parts of one or more store folders: ``tables`` (pyarrow), their ``parts`` and the ``skipped``
    ones with the reason (each already logged as one line)."""

    tables: list[Any] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def verify_part(path: Path, gpu: str | None, cc: str | None) -> tuple[Any, dict[str, Any], str]:
    """``(table, metadata, sha256)`` of a part that passes every check (module doc), else ``ValueError`` with the
    reason (one phrase)."""
    from .schema import SCHEMA_VERSION, DatasetError, read_parquet

    side = path.with_name(path.name + SIDECAR_SUFFIX)
    try:
        record = json.loads(side.read_text())
    except FileNotFoundError:
        raise ValueError(f"no {side.name} sidecar (torn, or not written by a label store)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable sidecar {side.name} ({type(exc).__name__})") from None
    if not isinstance(record, dict) or record.get("format") != STORE_FORMAT or record.get("part") != path.name:
        raise ValueError(f"sidecar {side.name} is not a {STORE_FORMAT} record of this part")
    digest, size = _sha256_file(path)
    if digest != record.get("sha256") or size != record.get("bytes"):
        raise ValueError(f"sha256 {digest[:12]}... ({size} bytes) does not match its sidecar's "
                         f"{str(record.get('sha256'))[:12]}... ({record.get('bytes')} bytes): changed or torn")
    try:
        table, meta = read_parquet(path, what="label part")
    except DatasetError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None
    if meta.get("store_format") != STORE_FORMAT or meta.get("collector") != COLLECTOR:
        raise ValueError(f"metadata says format {meta.get('store_format')!r}, collector {meta.get('collector')!r}, "
                         f"not {STORE_FORMAT!r} / {COLLECTOR!r}")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"schema_version {meta.get('schema_version')!r}, this library reads {SCHEMA_VERSION}")
    if gpu is not None and (meta.get("gpu"), str(meta.get("cc"))) != (gpu, str(cc)):
        raise ValueError(f"measured on {meta.get('gpu')!r} (cc {meta.get('cc')}), not {gpu!r} (cc {cc})")
    return table, meta, digest


def read_store(folders: str | Path | Sequence[str | Path], gpu: str | None = None, cc: str | None = None,
               shard: tuple[int, int] | None = None) -> StoreRead:
    """Every verified part of ``folders`` (a store folder or several, e.g. several machines'); with ``gpu``/``cc``
    only parts measured there (else the first good part's GPU decides); ``shard=(i, n)``: only the parts whose
    ``shard_of(name, n) == i``. Parts failing a check are skipped, one warning each."""
    paths: Iterable[str | Path] = [folders] if isinstance(folders, (str, Path)) else folders
    out = StoreRead()
    for folder in paths:
        if not Path(folder).is_dir():
            raise ValueError(f"{folder}: not a label store folder")
        for path in part_paths(folder):
            if shard is not None and shard_of(path.name, shard[1]) != shard[0]:
                continue
            try:
                table, meta, digest = verify_part(path, gpu, cc)
            except ValueError as exc:
                reason = str(exc)
                out.skipped.append((str(path), reason))
                log.warning("gemm-predictor: skipping label part %s: %s", path, reason)
                continue
            if gpu is None:
                gpu, cc = meta.get("gpu"), str(meta.get("cc"))
            out.tables.append(table)
            out.parts.append({"path": str(path), "sha256": digest, "rows": int(table.num_rows), "gpu": meta.get("gpu"),
                              "cc": meta.get("cc"), "torch": meta.get("torch"), "triton": meta.get("triton"),
                              "device": meta.get("device")})
    return out
