"""Reading a file a user may hand us (model files, metadata, per-GPU tables, datasets, documents): through
``open_regular`` / ``read_regular`` / ``read_json``, a FIFO, a device (``/dev/zero`` behind a link), a folder or a
socket where a file belongs is refused at once (a FIFO opened without O_NONBLOCK waits forever for a writer), and so
is a file over its kind's size cap, before it is read (a 2 GB sparse file costs no time and no memory). JSON is
parsed strictly, and a number read from a table is checked before any arithmetic sees it (``check_positive``).
"""

from __future__ import annotations

import json
import math
import os
import stat
from typing import Any, BinaryIO


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


class InputError(ValueError):
    """A file we were handed that cannot be read safely: not a regular file, over its size cap, or not parseable
    (one line naming it)."""


class MissingInput(InputError):
    """No file at that path."""


# Size caps per kind of file, each far above the largest one shipped (in parentheses) and far below what would
# cost a compile seconds or gigabytes.
METADATA_BYTES = 4 << 20  # metadata.json and the other small markers (14 KB)
MODEL_BYTES = 64 << 20  # model.lgbm.txt, model.json (0.9 MB)
TABLE_BYTES = 16 << 20  # per-GPU tables the runtime reads: gemv-blocks, few-rows (112 KB)
DOCUMENT_BYTES = 64 << 20  # other JSON documents: agreement.json, lookup tables, ledgers, reports (132 KB)
DATASET_BYTES = 1 << 30  # one parquet file (4.4 MB)

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _size(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"


def _check_regular(path: str, st: os.stat_result, limit: int, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
        raise InputError(f"{path}: not a regular file ({kind}); a {what} must be a plain file")
    if st.st_size > limit:
        raise InputError(f"{path}: {_size(st.st_size)}, more than a {what} may hold ({_size(limit)})")


def open_regular(path: str | os.PathLike, limit: int, what: str = "file") -> BinaryIO:
    """``path`` opened for binary reading, once it is a regular file of at most ``limit`` bytes; ``MissingInput``
    when there is none, ``InputError`` (one line) for anything else. Links are followed (a link to a model file is
    fine; a link to ``/dev/zero`` is a device). The open never blocks (O_NONBLOCK), and what was opened is checked
    again, so a file swapped for a FIFO between the two looks is still refused."""
    path = os.fspath(path)
    try:
        _check_regular(path, os.stat(path), limit, what)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise MissingInput(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({_one_line(exc)})") from None
    try:
        _check_regular(path, os.fstat(fd), limit, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: reads never wait; the flag was for the open alone
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of ``path`` (``open_regular``'s checks); at most ``limit + 1`` bytes are ever read, so a file
    that grows past its cap while read is refused too."""
    with open_regular(path, limit, what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise InputError(f"{os.fspath(path)}: cannot be read ({_one_line(exc)})") from None
    if len(data) > limit:
        raise InputError(f"{os.fspath(path)}: grew past {_size(limit)} while read, more than a {what} may hold")
    return data



def read_table_bytes(path: str | os.PathLike, what: str) -> bytes:
    """A per-GPU table's bytes (``read_regular`` under ``TABLE_BYTES``); a FIFO (which would block every compile), a
    device or a file over the cap is a ValueError naming the file, as a malformed table is."""
    try:
        return read_regular(path, TABLE_BYTES, what)
    except InputError as exc:
        raise ValueError(str(exc)) from None


def parse_json(data: bytes, path: str | os.PathLike, what: str = "JSON file") -> Any:
    """``json.loads(data)``; anything it raises (bad JSON, bad UTF-8, an integer of over 4300 digits, nesting deep
    enough to exhaust the stack) is an ``InputError`` naming ``path``."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InputError(f"{os.fspath(path)}: unreadable, not a {what} ({type(exc).__name__}: {_one_line(exc)})") from None


def read_json(path: str | os.PathLike, limit: int, what: str = "JSON file") -> Any:
    """The JSON document at ``path``, read by ``read_regular`` and parsed by ``parse_json``."""
    return parse_json(read_regular(path, limit, what), path, what)


def check_positive(value: Any, key: str, integer: bool = False) -> None:
    """A size or a time the choice takes logs and ratios of: a finite number > 0 (an integer for a size). A zero, a
    negative or a NaN there would raise inside every compile that reads the table, or pick at random."""
    number = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{key} is {value!r:.40}, not a {'whole' if integer else 'finite'} number > 0")
