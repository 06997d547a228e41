"""The compiled tree walker: ``tree_walk.c`` built once per machine with the system C compiler, loaded with ctypes.

Why: numpy walks a 250-tree forest in ~17 levels of ~7 calls each, so 30 rows cost ~0.35 ms of per-call overhead
and 2400 rows ~15 ms; the C walker (QuickScorer's, vectorised over rows) takes ~0.06 and ~1.3 ms (CPU machine, one
thread), with the same scores bit for bit. Triton and Inductor already need a C compiler on every GPU machine.

The library is compiled once per machine and source version into ``$XDG_CACHE_HOME/gemm-predictor``
(``~/.cache/gemm-predictor``), named by a hash of the source, the flags, the compiler and the platform. The compile
(~0.45 s on the CPU machine) runs in a background thread, started at the first request: until it is done the
numpy walk scores (the same scores), so a fresh machine's first ``torch.compile`` never waits for it, and a
compile with few GEMMs, which would save less than it costs, loses nothing. A cached library loads at once.
Anything that fails (no compiler, a compile error, an unwritable cache, a forest the walker does not support)
makes ``compiled_forest`` return False, and ``TextForest`` walks in numpy. ``GEMM_PREDICTOR_TREE_WALK=numpy``
forces numpy; ``$CC`` names the compiler (default ``cc``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .lgbm_text import TextForest

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("tree_walk.c")
WALK_ENV = "GEMM_PREDICTOR_TREE_WALK"  # "numpy": never compile or load the C walker
FLAGS = ("-O3", "-shared", "-fPIC")
MAX_LEAVES = 64  # tree_walk.c's MAX_LEAVES: a leaf mask is one 64-bit word
_COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()
_library: Any = None  # the loaded ctypes library, False once loading failed (not retried in this process)
_builder: threading.Thread | None = None  # the background compile, once started


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemm-predictor"


def library_path(compiler: str) -> Path:
    """Where the library built from this source, with these flags, for this platform lives."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(FLAGS).encode(), compiler.encode(), sys.platform.encode(),
                 platform.machine().encode()):
        key.update(part + b"\0")
    return cache_dir() / f"tree_walk-{key.hexdigest()[:16]}.so"


def _build(compiler: str, target: Path) -> None:
    """Compile into a temporary file beside ``target``, then rename: a concurrent build never loads half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob("*.tmp.so"):  # left by a process that exited mid-build (a daemon thread)
        if time.time() - stale.stat().st_mtime > 600:
            stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([compiler, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True,
                              timeout=_COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _compiler() -> str | None:
    """The C compiler's path, or None when told to walk in numpy or none is found."""
    if os.environ.get(WALK_ENV, "").lower() == "numpy":
        return None
    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        log.info("no C compiler (%s) found: LightGBM forests are walked in numpy (slower, same scores)",
                 os.environ.get("CC") or "cc")
    return compiler


def _load(compiler: str, path: Path) -> Any:
    """The ctypes library at ``path``, compiled first if this machine has no copy yet; None when anything fails."""
    import ctypes

    try:
        if not path.is_file():
            _build(compiler, path)
            log.info("compiled the tree walker into %s", path)
        lib = ctypes.CDLL(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log.warning("the compiled tree walker is unavailable (%s: %s); LightGBM forests are walked in numpy "
                    "(slower, same scores)", type(exc).__name__, exc)
        return None
    lib.gp_prepare.argtypes = [ctypes.c_void_p]
    lib.gp_predict.argtypes = [ctypes.c_void_p, ctypes.c_void_p, *[ctypes.c_int64] * 3, ctypes.c_void_p]
    lib.gp_prepare.restype = lib.gp_predict.restype = ctypes.c_int
    return lib


def _build_in_background(compiler: str, path: Path) -> None:
    global _library
    lib = _load(compiler, path)
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
                path = library_path(compiler) if compiler else None
                if path is None or path.is_file():
                    _library = (_load(compiler, path) if path else None) or False
                else:
                    _builder = threading.Thread(target=_build_in_background, args=(compiler, path),
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
    """A TextForest's arrays in the walker's types and its ``forest_t`` (tree_walk.c) pointing at them."""

    def __init__(self, lib: Any, forest: TextForest) -> None:
        import ctypes

        class _Forest(ctypes.Structure):
            _fields_ = [(name, ctypes.c_int64 if kind == "i" else ctypes.c_void_p) for name, kind in _FIELDS]

        self.lib = lib
        self.arrays = {  # kept alive here: the struct holds their addresses
            "roots": np.ascontiguousarray(forest.roots, dtype=np.int32),
            "children": np.ascontiguousarray(forest.children, dtype=np.int32),
            "feature": np.ascontiguousarray(forest.feature, dtype=np.int32),
            "threshold": np.ascontiguousarray(forest._threshold32[::2]),  # float32, rounded down (TextForest)
            "value": np.ascontiguousarray(forest.value, dtype=np.float64),
            "left_leaves": np.zeros(len(forest.feature), dtype=np.uint64),
            "by_bit": np.zeros(len(forest.roots) * MAX_LEAVES),
        }
        self.struct = _Forest(trees=len(forest.roots), width=forest.width, split_nodes=forest.split_nodes,
                              features=len(forest.feature_names), wide=0,
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


def compiled_forest(forest: TextForest, wait: bool = False) -> CompiledForest | bool | None:
    """``forest`` for the compiled walker; None while the walker is still being compiled (ask again later; ``wait``:
    block until it is built); False for good: no walker on this machine, or trees of over ``MAX_LEAVES`` leaves."""
    if forest.width - forest.split_nodes > MAX_LEAVES:
        return False
    lib = library(wait)
    if lib is None:
        return False if unavailable() else None
    compiled = CompiledForest(lib, forest)
    if compiled.status != 0:  # (-2: a split numbered before its parent, which LightGBM never writes)
        log.info("the compiled tree walker cannot walk this forest (gp_prepare: %d); walking it in numpy",
                 compiled.status)
        return False
    return compiled
