"""Make Inductor's CUTLASS backend usable from the ``nvidia-cutlass`` wheel (no CUTLASS checkout needed).

Inductor (2.11) wants ``config.cutlass.cutlass_dir`` to be a CUTLASS repository root: ``python/cutlass_library``,
``python/cutlass_cppgen``, ``python/pycute`` and the headers under ``include`` and ``tools``. The wheel ships the
Python packages at its top level and the headers under ``cutlass_library/source``; this lays out links in that
shape and points ``TORCHINDUCTOR_CUTLASS_DIR`` at them (measured to work on the H200: docs/CUTLASS.md).

The root holds Python code Inductor imports, so it lives in a folder only this user can write: by default under
the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``), never a fixed shared path under /tmp that another local
user could create first and fill.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("cutlass_library", "cutlass_cppgen", "pycute")
SOURCE_DIRS = ("include", "tools", "examples")


def default_workdir(wheel: Path) -> Path:
    """``<user cache>/gemm-predictor/cutlass/<wheel name>``, or a fresh private temporary folder without a home."""
    cache = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache" if Path.home().is_dir() else None)
    if cache is None:
        return Path(tempfile.mkdtemp(prefix="gemm_predictor_cutlass-"))
    return Path(cache) / "gemm-predictor" / "cutlass" / wheel.stem


def private_dir(path: Path) -> Path:
    """``path`` as a folder owned by this user that nobody else can write (made with mode 0700 if missing)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()
    if (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        raise RuntimeError(f"{path}: not a private folder of this user (owner uid {st.st_uid}, mode "
                           f"{stat.filemode(st.st_mode)}); remove it or pass another workdir")
    return path


def prepare_cutlass_root(wheel: str | os.PathLike, workdir: str | os.PathLike | None = None) -> Path:
    """Unpack ``wheel`` under ``workdir`` (once), build the root, set ``TORCHINDUCTOR_CUTLASS_DIR``; return it.

    ``workdir``: default ``default_workdir(wheel)``; it must be this user's and not writable by others.
    Call before torch._inductor reads its config (the env var is read at import) or also set
    ``torch._inductor.config.cutlass.cutlass_dir`` to the returned path."""
    wheel = Path(wheel)
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise FileNotFoundError(f"{wheel}: not a wheel file (want nvidia_cutlass-*.whl)")
    work = private_dir(Path(workdir) if workdir is not None else default_workdir(wheel))
    unpacked = work / "wheel"
    root = work / "root"
    if not (unpacked / "cutlass_library").is_dir():
        shutil.rmtree(unpacked, ignore_errors=True)  # another wheel's contents, if any
        staging = work / f".wheel-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(staging)
            staging.rename(unpacked)  # whole or not at all; a concurrent unpack that won is just as good
        except OSError:
            if not (unpacked / "cutlass_library").is_dir():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not (unpacked / "cutlass_library" / "source" / "include").is_dir():
        raise ValueError(f"{wheel}: no cutlass_library/source/include inside; is it the nvidia-cutlass wheel?")
    (root / "python").mkdir(parents=True, exist_ok=True)
    links = {root / "python" / p: unpacked / p for p in PACKAGES}
    links.update({root / d: unpacked / "cutlass_library" / "source" / d for d in SOURCE_DIRS})
    for link, target in links.items():
        if target.exists() and not link.exists():
            link.symlink_to(target)
    os.environ["TORCHINDUCTOR_CUTLASS_DIR"] = str(root)
    return root
