"""A run's worker process: its environment (empty caches of its own, its GPU, the shared lock), its own time
(the run timeout counts what it did not spend waiting for the lock), and reaping it once killed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from collectors.programs.harness import GPU_LOCK_ENV, LANES_PER_GPU_ENV, WAITED_FILE_ENV, waited_seconds


def _last_line(path: Path) -> str:
    """The log's last non-empty line (why a run died, in the record)."""
    lines = path.read_text(errors="replace").split("\n") if path.exists() else []
    return next((ln.strip()[:300] for ln in reversed(lines) if ln.strip()), "")


def worker_env(tmp: Path, device: str | None, lanes_per_gpu: int, lock_dir: Path) -> tuple[dict[str, str], Path]:
    """A worker's environment (empty caches under ``tmp``, its GPU, the lock lanes sharing that GPU take turns on)
    and the file where it reports its waits for those turns (``wait_own_time`` reads it)."""
    waited_file = tmp / "waited_s"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "TRITON_CACHE_DIR": str(tmp / "triton"),
           "PYTHONUNBUFFERED": "1", WAITED_FILE_ENV: str(waited_file)}
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
        if lanes_per_gpu > 1:  # lanes sharing a GPU take turns to time; their compiles overlap
            env[GPU_LOCK_ENV] = str(lock_dir / f".gpu{device}.lock")
            env[LANES_PER_GPU_ENV] = str(lanes_per_gpu)
    return env, waited_file


def timeout_error(run_timeout: float, waited_file: Path) -> str:
    """A timed-out run's error: its own time ran out, and how long it also waited for other lanes."""
    return (f"no result within {run_timeout:.0f} s of its own (--run-timeout; {waited_seconds(waited_file):.0f} s "
            "more waiting for other runs' turns on the GPU)")


def wait_own_time(proc: subprocess.Popen, own_timeout: float, deadline: float | None, waited_file: Path,
                  poll_s: float = 1.0) -> str | None:
    """Wait for ``proc`` to exit: None when it did; "deadline" when the budget's deadline (``time.monotonic``) came
    first; "timeout" when its own time passed ``own_timeout``. Its own time is the wall time less what it waited for
    other lanes' turns on the GPU (``waited_file``, written by the worker): an autotuning compile waits for every
    other lane's timing, and would otherwise time out for the lanes, not for its work. The caller kills it."""
    start = time.monotonic()
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return "deadline"
        own_left = own_timeout - (now - start - waited_seconds(waited_file))
        if own_left <= 0:
            return "timeout"
        wait = min(own_left, poll_s, deadline - now if deadline is not None else poll_s)
        try:
            proc.wait(timeout=max(wait, 0.01))
            return None
        except subprocess.TimeoutExpired:
            continue


# How long a killed worker may take to exit. Why: a process killed while its CUDA context is busy exits only once
# its GPU work has drained, and the budget's deadline is a promise to the caller: a run still not gone by then is
# recorded as stopped (or timed out) and left to the system.
KILL_WAIT_S = 15.0


def reap(proc: subprocess.Popen, killed: bool, wait_s: float = KILL_WAIT_S) -> int | None:
    """``proc``'s exit code; None when it was ``killed`` and had not exited ``wait_s`` later."""
    try:
        return proc.wait(timeout=wait_s if killed else None)
    except subprocess.TimeoutExpired:
        return None
