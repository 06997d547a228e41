"""The compiled tree walker: ``tree_walk.c`` built once per machine with the system C compiler, loaded with ctypes.

Why: numpy walks a 250-tree forest in ~17 levels of ~7 calls each, so 30 rows cost ~0.35 ms of per-call overhead
and 2400 rows ~15 ms; the C walker (QuickScorer's, vectorised over rows) takes ~0.06 and ~1.3 ms (CPU machine, one
thread), with the same scores bit for bit. Triton and Inductor already need a C compiler on every GPU machine.

The library is compiled once per machine and source version into ``$XDG_CACHE_HOME/gemm-predictor``
(``~/.cache/gemm-predictor``), named by a hash of the source, the flags, the compiler and the platform. The compile
(~0.45 s on the CPU machine) runs in a background thread, started at the first request: until it is done the
numpy walk scores (the same scores), so a fresh machine's first ``torch.compile`` never waits for it, and a
compile with few GEMMs, which would save less than it costs, loses nothing. A cached library loads at once.

Loading a library runs its code, and its name can be computed by anyone: the cache folder is created 0700, and a
folder or library that is not owned by this user, or that group or others may write, is never loaded from (the
walker is then built in a private temporary folder for this process). The sha256 of the built library is kept
beside it (``.sha256``) and checked on the very bytes that are loaded (a private copy of them, beside it or, in a
read-only cache, in a private temporary folder), so a damaged or swapped file is rebuilt once, never loaded.
Anything that fails (no compiler, a compile error, an unwritable cache, a library that does not load, a forest the
walker does not support) makes ``compiled_forest`` return False, and ``TextForest`` walks in numpy.
``GEMM_PREDICTOR_TREE_WALK=numpy`` forces numpy; ``$CC`` names the compiler (default ``cc``).

This module takes a forest as arrays (``compiled_forest``) and never reads model files: ``predictor.artifacts.lgbm_text``
parses and checks them, then hands the arrays over.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """``artifacts.cache_dir.cache_dir()``, spelled out here: the walker is loaded deep in the hook's imports and
    imports nothing of the project (``tests/test_compiled_walk.py`` holds the two equal)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemm-predictor"


SOURCE = Path(__file__).with_name("tree_walk.c")
WALK_ENV = "GEMM_PREDICTOR_TREE_WALK"  # "numpy": never compile or load the C walker
FLAGS = ("-O3", "-shared", "-fPIC")
MAX_LEAVES = 64  # tree_walk.c's MAX_LEAVES: a leaf mask is one 64-bit word
DIGEST_SUFFIX = ".sha256"  # beside the library: the sha256 of its bytes, written by the build
_COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()
_library: Any = None  # the loaded ctypes library, False once loading failed (not retried in this process)
_builder: threading.Thread | None = None  # the background compile, once started
_private: Path | None = None  # this process's own build folder, when the shared cache is refused


class UnsafeLibrary(Exception):
    """A cached library (or its folder) that must not be loaded: foreign, writable by others, or not what was built."""


def _uid() -> int:
    return os.getuid()


def _unsafe(st: os.stat_result, what: str) -> str | None:
    """Why a folder or file with this ``lstat`` must not be trusted (another user could have put code there)."""
    if stat.S_ISLNK(st.st_mode):
        return f"{what} is a symbolic link"
    if st.st_uid != _uid():
        return f"{what} is owned by uid {st.st_uid}, not this user ({_uid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _shared_cache() -> Path | None:
    """The per-user cache folder (made 0700 when new), or None when it cannot be made or must not be trusted.

    Only its last two levels are made, under a folder that exists: the home folder (``.cache`` and
    ``gemm-predictor`` in it), or the folder holding ``$XDG_CACHE_HOME``. A HOME that does not exist (a service
    account's ``/nonexistent``) gets no folders made for it, least of all as root: the walker is built in a private
    temporary folder instead."""
    folder = cache_dir()
    try:
        base = folder.parent.parent
        if not base.is_dir():
            raise FileNotFoundError(f"{base} does not exist")
        folder.parent.mkdir(mode=0o700, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        why = _unsafe(os.lstat(folder), f"the cache folder {folder}")
    except OSError as exc:
        why = f"the cache folder {folder} cannot be made ({type(exc).__name__}: {exc})"
    if why:
        log.warning("%s: the tree walker is built in a private temporary folder instead", why)
        return None
    return folder


def _private_folder() -> Path:
    """A folder of this process alone (mkdtemp makes it 0700), removed at exit."""
    global _private
    if _private is None:
        _private = Path(tempfile.mkdtemp(prefix="gemm-predictor-walk-"))
        atexit.register(shutil.rmtree, _private, ignore_errors=True)
    return _private


def library_path(compiler: str, folder: Path | None = None) -> Path:
    """Where the library built from this source, with these flags, for this platform lives."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(FLAGS).encode(), compiler.encode(), sys.platform.encode(),
                 platform.machine().encode()):
        key.update(part + b"\0")
    return (cache_dir() if folder is None else folder) / f"tree_walk-{key.hexdigest()[:16]}.so"


def _digest_path(library: Path) -> Path:
    return library.with_name(library.name + DIGEST_SUFFIX)


def _build(compiler: str, target: Path) -> None:
    """Compile into a temporary file beside ``target``, record its sha256, then rename: a concurrent build never
    loads half a file (a reader between the two renames sees a digest mismatch and rebuilds)."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in target.parent.glob("*.tmp.so"):  # left by a process that exited mid-build (a daemon thread)
        if time.time() - stale.stat().st_mtime > 600:
            stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    digest_tmp = tmp + DIGEST_SUFFIX
    try:
        proc = subprocess.run([compiler, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True,
                              timeout=_COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        os.chmod(tmp, 0o700)  # the linker's mode follows the umask: never writable by others
        with open(tmp, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        with open(os.open(digest_tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(digest + "\n")
        os.replace(digest_tmp, _digest_path(target))
        os.replace(tmp, target)
    finally:
        for leftover in (tmp, digest_tmp):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _remove(library: Path) -> None:
    for path in (library, _digest_path(library)):
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def _compiler() -> str | None:
    """The C compiler's path, or None when told to walk in numpy or none is found."""
    if os.environ.get(WALK_ENV, "").lower() == "numpy":
        return None
    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        log.info("no C compiler (%s) found: LightGBM forests are walked in numpy (slower, same scores)",
                 os.environ.get("CC") or "cc")
    return compiler


def _open(path: Path) -> Any:
    """The ctypes library at ``path`` once its owner, mode and sha256 are checked; ``UnsafeLibrary`` for anything
    wrong with it (including failing to load or lacking the walker's functions).

    The checked bytes are loaded from a fresh copy of this process's own (a unique name, removed once loaded):
    nothing can swap the file between the check and the load, and the dynamic loader, which hands back an
    already loaded library for a name it has seen, always opens the copy."""
    import ctypes

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise UnsafeLibrary(f"cannot open it ({type(exc).__name__}: {exc})") from None
    with open(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        why = _unsafe(st, "the library") or (None if stat.S_ISREG(st.st_mode) else "the library is not a file")
        if why:
            raise UnsafeLibrary(why)
        data = handle.read()
    try:
        recorded = _digest_path(path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        recorded = None
    if hashlib.sha256(data).hexdigest() != recorded:
        raise UnsafeLibrary("its sha256 does not match the one recorded when it was built")
    try:
        copy_fd, copy = tempfile.mkstemp(prefix=path.stem + ".", suffix=".load.tmp.so", dir=path.parent)
    except OSError:  # a read-only cache (a shared image's): the copy goes to this process's own folder
        copy_fd, copy = tempfile.mkstemp(prefix=path.stem + ".", suffix=".load.tmp.so", dir=_private_folder())
    try:
        with open(copy_fd, "wb") as handle:
            handle.write(data)
        lib = ctypes.CDLL(copy)
        lib.gp_prepare.argtypes = [ctypes.c_void_p]
        lib.gp_predict.argtypes = [ctypes.c_void_p, ctypes.c_void_p, *[ctypes.c_int64] * 3, ctypes.c_void_p]
        lib.gp_prepare.restype = lib.gp_predict.restype = ctypes.c_int
    except Exception as exc:  # noqa: BLE001 -- OSError (not a library), AttributeError (not ours), anything
        raise UnsafeLibrary(f"it does not load as the walker ({type(exc).__name__}: {exc})") from None
    finally:
        os.unlink(copy)
    return lib


def _load(compiler: str, path: Path, rebuild: bool = True) -> Any:
    """The walker at ``path``: loaded when a good copy is there, else built and loaded; a bad copy is rebuilt once
    (``rebuild``; False when the caller already removed one). None when anything fails (then numpy walks)."""
    reason: Exception | None = None
    for attempt in range(2):
        try:
            if attempt or not path.is_file():
                _build(compiler, path)
                log.info("compiled the tree walker into %s", path)
            return _open(path)
        except UnsafeLibrary as exc:
            reason = exc
            if attempt or not rebuild:
                break
            log.warning("the cached tree walker %s is not loaded (%s); rebuilding it", path, exc)
            _remove(path)
        except Exception as exc:  # noqa: BLE001 -- a compile error, a full disk, anything: numpy walks
            reason = exc
            break
    log.warning("the compiled tree walker is unavailable (%s: %s); LightGBM forests are walked in numpy "
                "(slower, same scores)", type(reason).__name__, reason)
    return None


def _build_in_background(compiler: str, path: Path, rebuild: bool) -> None:
    global _library
    lib = _load(compiler, path, rebuild)
    with _lock:
        _library = lib or False


def library(wait: bool = False) -> Any:
    """The loaded walker; None while it is being compiled (``wait``: block until it is) or when it is unavailable
    (then for the rest of the process: a failure is not retried). A cached library loads here at once; otherwise
    the first call starts the compile in a background thread."""
    global _library, _builder
    if _library is None:
        with _lock:
            if _library is None and _builder is None:
                compiler = _compiler()
                path = library_path(compiler, _shared_cache() or _private_folder()) if compiler else None
                lib, rebuild = None, True
                if path is not None and path.is_file():
                    try:
                        lib = _open(path)
                    except UnsafeLibrary as exc:  # rebuilt once, in the background, below
                        log.warning("the cached tree walker %s is not loaded (%s); rebuilding it", path, exc)
                        _remove(path)
                        rebuild = False
                if path is None or lib is not None:
                    _library = lib or False
                else:
                    _builder = threading.Thread(target=_build_in_background, args=(compiler, path, rebuild),
                                                name="gemm-predictor-tree-walk-build", daemon=True)
                    _builder.start()
        if wait and _builder is not None:
            _builder.join()
    return _library or None


def unavailable() -> bool:
    """Whether the walker will never load in this process (as opposed to: not compiled yet)."""
    return _library is False


def _after_fork_in_child() -> None:
    """A fork while the build thread ran leaves the child with no such thread and maybe the lock held: start over
    there (the child builds or loads again when it first asks; a finished library is inherited as it is)."""
    global _lock, _builder
    _lock = threading.Lock()
    if _library is None:
        _builder = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def reset() -> None:
    """Forget the loaded library (tests: to load again under other settings)."""
    global _library, _builder
    with _lock:
        if _builder is not None:
            _builder.join()
        _library, _builder = None, None


_FIELDS = (("trees", "i"), ("width", "i"), ("split_nodes", "i"), ("features", "i"), ("roots", "p"), ("children", "p"),
           ("feature", "p"), ("threshold", "p"), ("value", "p"), ("left_leaves", "p"), ("by_bit", "p"), ("wide", "i"))


class CompiledForest:
    """A forest's arrays in the walker's types and its ``forest_t`` (tree_walk.c) pointing at them."""

    def __init__(self, lib: Any, *, width: int, split_nodes: int, features: int, roots: np.ndarray,
                 children: np.ndarray, feature: np.ndarray, threshold32: np.ndarray, value: np.ndarray) -> None:
        import ctypes

        class _Forest(ctypes.Structure):
            _fields_ = [(name, ctypes.c_int64 if kind == "i" else ctypes.c_void_p) for name, kind in _FIELDS]

        self.lib = lib
        self.arrays = {  # kept alive here: the struct holds their addresses
            "roots": np.ascontiguousarray(roots, dtype=np.int32),
            "children": np.ascontiguousarray(children, dtype=np.int32),
            "feature": np.ascontiguousarray(feature, dtype=np.int32),
            "threshold": np.ascontiguousarray(threshold32, dtype=np.float32),  # rounded down (TextForest)
            "value": np.ascontiguousarray(value, dtype=np.float64),
            "left_leaves": np.zeros(len(feature), dtype=np.uint64),
            "by_bit": np.zeros(len(roots) * MAX_LEAVES),
        }
        self.struct = _Forest(trees=len(roots), width=width, split_nodes=split_nodes, features=features, wide=0,
                              **{name: array.ctypes.data for name, array in self.arrays.items()})
        self.status = lib.gp_prepare(ctypes.byref(self.struct))  # 0, or the forest is not for this walker
        self._forest = ctypes.addressof(self.struct)

    def predict(self, X: np.ndarray) -> np.ndarray | None:
        """Raw scores of float32 rows (any strides), or None when the walker could not run (out of memory)."""
        if X.strides[0] % 4 or X.strides[1] % 4:
            X = np.ascontiguousarray(X)
        out = np.empty(len(X))
        status = self.lib.gp_predict(self._forest, X.ctypes.data, len(X), X.strides[0] // 4, X.strides[1] // 4,
                                     out.ctypes.data)
        return out if status == 0 else None


def compiled_forest(*, width: int, split_nodes: int, features: int, roots: np.ndarray, children: np.ndarray,
                    feature: np.ndarray, threshold32: np.ndarray, value: np.ndarray,
                    wait: bool = False) -> CompiledForest | bool | None:
    """A forest for the compiled walker, from its flat slot arrays (``TextForest``'s layout: tree ``t`` owns slots
    ``[t * width, (t + 1) * width)``, splits first; ``threshold32`` per slot, float32 rounded down). None while the
    walker is still being compiled (ask again later; ``wait``: block until it is built); False for good: no walker
    on this machine, trees of over ``MAX_LEAVES`` leaves, or anything failing here (numpy then walks)."""
    if width - split_nodes > MAX_LEAVES:
        return False
    try:
        lib = library(wait)
        if lib is None:
            return False if unavailable() else None
        compiled = CompiledForest(lib, width=width, split_nodes=split_nodes, features=features, roots=roots,
                                  children=children, feature=feature, threshold32=threshold32, value=value)
    except Exception as exc:  # noqa: BLE001 -- the walker is an optimisation: numpy scores the same
        log.warning("the compiled tree walker failed (%s: %s); LightGBM forests are walked in numpy",
                    type(exc).__name__, exc)
        return False
    if compiled.status != 0:  # (-2: a split numbered before its parent, which LightGBM never writes)
        log.info("the compiled tree walker cannot walk this forest (gp_prepare: %d); walking it in numpy",
                 compiled.status)
        return False
    return compiled
