"""Outputs that never lose what a user pointed us at, and never appear half-written.

- An output path is checked before any work (``check_output_folder``, ``check_output_file``): a file where a
  folder is wanted, a folder below a file, a folder we may not write to, or an existing folder that is not one of
  ours (a model folder with our ``metadata.json``, a report folder with our ``metrics.json``) is refused with one
  line. An empty folder is fine; a folder of ours is replaced.
- A folder is written beside its final place and swapped in as a whole (``staged_folder``): on Linux by one
  ``renameat2(RENAME_EXCHANGE)``, so readers see the old folder or the new one, never neither or a mix. Files in
  it that we do not write (notes, a benchmark's table) are carried over into the new folder.
- A file is written to a unique temporary name beside it and renamed over it (``staged_file``).
- Two processes writing one output: the first holds an exclusive lock (``claim_output``) for its whole run; the
  second fails at once with one line, before doing any work. The lock file is removed when the run ends.
Nothing temporary is left behind when a run fails or is interrupted (a killed process's leftovers are removed
by the next run that claims the same output). A write that fails (a full disk) is one line naming the output.

Reading what a user hands us is ``reading``'s.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: an O_EXCL lock file instead
    fcntl = None

from .reading import METADATA_BYTES, InputError, _one_line, read_json

log = logging.getLogger(__name__)


class OutputError(ValueError):
    """An output path that cannot be written safely (one line naming it)."""


class WriteFailed(OSError):
    """A write that failed (a full disk, a quota), as one line naming the output; still an OSError (and its errno)
    for callers that catch those."""

    def __init__(self, path: Path, what: str, exc: OSError) -> None:
        super().__init__(exc.errno, exc.strerror or _one_line(exc), str(path))
        self.message = f"{path}: could not write {what} ({_one_line(exc)}); nothing was replaced"

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class FolderKind:
    """What makes an existing folder recognisably ours: ``marker`` (a JSON object holding ``keys``) and the
    entries we write (``ours``, fnmatch patterns); everything else in it is the user's and is carried over."""

    name: str
    marker: str
    keys: tuple[str, ...]
    ours: tuple[str, ...]


MODEL = FolderKind("model folder", "metadata.json", ("artifact_version", "model_file"),
                   ("metadata.json", "MODEL_CARD.md", "model.*"))
REPORT = FolderKind("report folder", "metrics.json", ("metrics",), ("metrics.json", "report.md", "*.png"))

_HELD: dict[str, list] = {}  # output path -> [lock fd, depth]: claims are re-entrant within a process


def _absolute(path: str | os.PathLike) -> Path:
    path = Path(path).expanduser().resolve()
    if path == Path(path.anchor):
        raise OutputError(f"{path}: a filesystem root cannot be an output")
    return path


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path):
        path = path.parent
    return path


def check_parent(path: Path) -> None:
    """The folder that will hold ``path`` exists or can be created, and we may write there."""
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise OutputError(f"{path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write in {base} (permission denied)")


def _is_ours(folder: Path, kind: FolderKind) -> str | None:
    """None when ``folder`` is empty or recognisably a ``kind``; else why not (one phrase)."""
    try:
        entries = [e.name for e in os.scandir(folder)]
    except OSError as exc:
        return f"cannot be read ({_one_line(exc)})"
    if not entries:
        return None
    if kind.marker not in entries:
        return f"exists and is not a {kind.name} (no {kind.marker}; it holds {', '.join(sorted(entries)[:3])}" + \
            (", ..." if len(entries) > 3 else "") + ")"
    try:
        doc = read_json(folder / kind.marker, METADATA_BYTES, kind.marker)
    except InputError as exc:
        return f"exists and its {kind.marker} is unreadable ({_one_line(exc)}), so it is not a {kind.name} of ours"
    if not isinstance(doc, dict) or any(k not in doc for k in kind.keys):
        return f"exists and its {kind.marker} is not one we write, so it is not a {kind.name} of ours"
    return None


def check_output_folder(path: str | os.PathLike, kind: FolderKind = MODEL) -> Path:
    """The absolute output folder, after refusing anything that writing it could damage (see the module doc)."""
    path = _absolute(path)
    if os.path.lexists(path) and not path.is_dir():
        raise OutputError(f"{path}: is a file, not a folder; choose a folder path")
    if path.is_dir():
        why = _is_ours(path, kind)
        if why:
            raise OutputError(f"{path}: {why}; choose a new folder (nothing was written)")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise OutputError(f"{path}: cannot replace it, {path.parent} is not writable")
    check_parent(path)
    return path


def check_output_file(path: str | os.PathLike) -> Path:
    """The absolute output file path: not a folder, and its folder writable (see the module doc)."""
    path = _absolute(path)
    if path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file path")
    if os.path.lexists(path) and not path.is_file():
        raise OutputError(f"{path}: exists and is not a regular file")
    check_parent(path)
    return path


def _make_parents(folder: Path) -> list[Path]:
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    made = []
    for d in reversed(missing):
        d.mkdir()
        made.append(d)
    return made


def _remove_empty(made: list[Path]) -> None:
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            return


def _lock(lock_path: Path, target: Path) -> int:
    while True:
        if fcntl is None:  # pragma: no cover
            try:
                return os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                raise OutputError(f"{target}: another run is writing it now ({lock_path.name} exists)") from None
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(f"{target}: another run is writing it now (it holds {lock_path.name}); "
                              "wait for it to finish or choose another output") from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the previous holder removed the file after we opened it: take the new one
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)


@contextmanager
def claim_output(path: str | os.PathLike) -> Iterator[Path]:
    """Hold ``path`` for this process (re-entrant) until the block ends; another process claiming it fails at
    once with one line. Missing parent folders are made here and removed again if the block fails and they
    stayed empty."""
    path = _absolute(path)
    key = str(path)
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield path
        finally:
            _HELD[key][1] -= 1
        return
    check_parent(path)
    made = _make_parents(path.parent)
    lock_path = path.with_name(f".{path.name}.lock")
    try:
        fd = _lock(lock_path, path)
    except BaseException:
        _remove_empty(made)
        raise
    _HELD[key] = [fd, 1]
    ok = False
    try:
        yield path
        ok = True
    finally:
        del _HELD[key]
        try:
            lock_path.unlink()  # while still holding it, so a waiting claimer sees the file is gone and retries
        except FileNotFoundError:
            pass
        os.close(fd)
        if not ok:
            _remove_empty(made)


def _stale(path: Path, kind: str) -> list[Path]:
    prefix = f".{path.name}.{kind}-"
    return [path.parent / e.name for e in os.scandir(path.parent) if e.name.startswith(prefix)]


def _new_name(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _carry_over(old: Path, new: Path, kind: FolderKind) -> list[str]:
    kept = []
    for entry in sorted(os.scandir(old), key=lambda e: e.name):
        if any(fnmatch(entry.name, pattern) for pattern in kind.ours) or os.path.lexists(new / entry.name):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.copytree(entry.path, new / entry.name, symlinks=True)
        else:
            shutil.copy2(entry.path, new / entry.name, follow_symlinks=False)
        kept.append(entry.name)
    return kept


def _swap_in(tmp: Path, path: Path, kind: FolderKind) -> Path:
    """Make ``tmp`` the folder at ``path``; return where the old one went (to remove), or the empty ``tmp``."""
    if not path.is_dir():
        tmp.rename(path)
        return tmp
    kept = _carry_over(path, tmp, kind)
    if kept:
        log.info("%s: kept %s (not ours) in the new %s", path, ", ".join(kept), kind.name)
    if _exchange(tmp, path):
        return tmp
    old = _new_name(path, "old")  # no atomic exchange here: two renames, old kept until the new one is in place
    path.rename(old)
    tmp.rename(path)
    return old


@contextmanager
def _named_write_errors(path: Path, tmp: Path, what: str) -> Iterator[None]:
    """A write error (a full disk, a quota, a read-only file system) names the output, not just ``[Errno 28]``: an
    OSError that names no file, or the staging one, becomes one line naming ``path``. Errors about other files (an
    input read while writing) pass through as they are."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None and not os.fspath(exc.filename).startswith(os.fspath(tmp)):
            raise
        raise WriteFailed(path, what, exc) from None


@contextmanager
def staged_folder(path: str | os.PathLike, kind: FolderKind = MODEL) -> Iterator[Path]:
    """Yield an empty folder beside ``path``; when the block succeeds it becomes ``path`` in one atomic step
    (replacing a folder of ours, see the module doc). When it fails nothing of it is left."""
    with claim_output(path) as path:
        check_output_folder(path, kind)  # again, now that it is ours alone
        for leftover in _stale(path, "tmp"):  # a killed run's staging folder (the lock says none is running)
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = _new_name(path, "tmp")
        try:
            tmp.mkdir()
        except OSError as exc:
            raise OutputError(f"{path}: cannot write beside it ({_one_line(exc)})") from None
        try:
            with _named_write_errors(path, tmp, f"the new {kind.name}"):
                yield tmp
            try:
                tmp = _swap_in(tmp, path, kind)
            except OSError as exc:
                raise OutputError(f"{path}: could not put the new {kind.name} in place ({_one_line(exc)})") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # the staging folder, or after the swap the old one


@contextmanager
def staged_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new, unique file path beside ``path``; when the block succeeds it is renamed over ``path``, when
    it fails it is removed."""
    path = check_output_file(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        made = _make_parents(path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot make its folder ({_one_line(exc)})") from None
    ok = False
    try:
        with _named_write_errors(path, tmp, "it"):
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as to any new file
            yield tmp
            os.replace(tmp, path)
        ok = True
    finally:
        if not ok:
            tmp.unlink(missing_ok=True)
            _remove_empty(made)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """``path.write_text(text)``, atomically."""
    with staged_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)
