"""Make Inductor's CUTLASS backend usable from the ``nvidia-cutlass`` wheel (no CUTLASS checkout needed).

Inductor (2.11) wants ``config.cutlass.cutlass_dir`` to be a CUTLASS repository root: ``python/cutlass_library``,
``python/cutlass_cppgen``, ``python/pycute`` and the headers under ``include`` and ``tools``. The wheel ships the
Python packages at its top level and the headers under ``cutlass_library/source``; this lays out links in that
shape and points ``TORCHINDUCTOR_CUTLASS_DIR`` at them (measured to work on the H200: docs/CUTLASS.md).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

PACKAGES = ("cutlass_library", "cutlass_cppgen", "pycute")
SOURCE_DIRS = ("include", "tools", "examples")


def prepare_cutlass_root(wheel: str | os.PathLike, workdir: str | os.PathLike = "/tmp/gemm_predictor_cutlass") -> Path:
    """Unpack ``wheel`` under ``workdir`` (once), build the root, set ``TORCHINDUCTOR_CUTLASS_DIR``; return it.

    Call before torch._inductor reads its config (the env var is read at import) or also set
    ``torch._inductor.config.cutlass.cutlass_dir`` to the returned path."""
    wheel = Path(wheel)
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise FileNotFoundError(f"{wheel}: not a wheel file (want nvidia_cutlass-*.whl)")
    unpacked = Path(workdir) / "wheel"
    root = Path(workdir) / "root"
    if not (unpacked / "cutlass_library").is_dir():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
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
