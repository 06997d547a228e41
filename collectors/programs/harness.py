"""What every GPU measurement here records and shares: the environment (GPU, versions, TF32 switches), one-line
errors, atomic JSON records, and the GPU lock by which parallel runs on one GPU take turns.

Shared by the in-program collector (``collectors/in_program``) and the benchmarks (``benchmarks/zoo``,
``benchmarks/serving``), which import it from here: collection code never imports the benchmarks.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (records keep one line; the traceback goes to stderr)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """GPU, versions and TF32 switches (fp32 results depend on them)."""
    import torch

    cuda = torch.cuda.is_available()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # allow_tf32 reads may warn about the newer fp32_precision API
        tf32 = {"allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
    return {"gpu": torch.cuda.get_device_name() if cuda else None,
            "cc": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
            "torch": torch.__version__, "triton": _version("triton"), "transformers": _version("transformers"),
            "timm": _version("timm"), "python": platform.python_version(), **tf32}


# A file that parallel runs lock while they use the GPU (in_program.py --lanes, --lanes-per-gpu): their compiles
# overlap on the host; their timings, and the autotuning benchmarks of their compiles, take turns on the GPU.
GPU_LOCK_ENV = "ZOO_GPU_LOCK"
LANES_PER_GPU_ENV = "ZOO_LANES_PER_GPU"
# where this process tells its runner how long it has waited for the lock: the run timeout counts its own time
WAITED_FILE_ENV = "ZOO_WAITED_FILE"
# re-entrant within this process: a benchmark inside a timed step locks once; ``waited``: seconds this process has
# spent blocked on the lock (a compile's share is taken out of its compile time: other lanes' turns, not its work)
_HELD = {"depth": 0, "file": None, "waited": 0.0}


def _report_waited() -> None:
    """Write the seconds this process has waited for the lock to ``$ZOO_WAITED_FILE`` (atomically), where set."""
    path = os.environ.get(WAITED_FILE_ENV)
    if not path:
        return
    try:
        with open(f"{path}.tmp", "w") as f:
            f.write(f"{_HELD['waited']:.3f}")
        os.replace(f"{path}.tmp", path)
    except OSError:  # the runner then counts the waits as the run's own time: a timeout comes sooner, nothing else
        pass


def lock_waited_s() -> float:
    """Seconds this process has spent blocked on the lock so far (a compile's share: the difference around it)."""
    return _HELD["waited"]


def waited_seconds(path: str | os.PathLike) -> float:
    """What a run's ``$ZOO_WAITED_FILE`` says (0.0 while it has not waited, or the file cannot be read)."""
    try:
        return float(Path(path).read_text())
    except (OSError, ValueError):
        return 0.0


class timing_lock:
    """Exclusive hold of ``$ZOO_GPU_LOCK`` (a no-op when unset) while this process uses the GPU for a measurement.
    Re-entrant: nested holds in one process share the outer one."""

    def __enter__(self) -> "timing_lock":
        path = os.environ.get(GPU_LOCK_ENV)
        if path and _HELD["depth"] == 0:
            _HELD["file"] = open(path, "a")  # noqa: SIM115 -- closed when the outermost hold ends
            t0 = time.perf_counter()
            fcntl.flock(_HELD["file"], fcntl.LOCK_EX)
            _HELD["waited"] += time.perf_counter() - t0
            _report_waited()
        if path:
            _HELD["depth"] += 1
        self.file = _HELD["file"] if path else None
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.file:
            return
        _HELD["depth"] -= 1
        if _HELD["depth"] == 0:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.file.close()
            _HELD["file"] = None


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (temp file + os.replace): a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str, allow_nan=True)
    os.replace(tmp, path)
