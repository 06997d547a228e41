"""One (model, mode) in this process: build, eager reference, compile, check, time, kernel census, one record.

    python -m benchmarks.zoo.worker --model llama-prefill --mode plain --repeats 50 --json-out rec.json

The runner (run.py) starts each in a fresh process with empty TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR, so
compile time is what a user sees on a first run. Any exception becomes status "error" with its one-line message
(traceback on stderr); the record is always written.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import os
import sys
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, Callable

import torch

from collectors.programs import models
from collectors.programs.harness import GPU_LOCK_ENV, LANES_PER_GPU_ENV, environment, one_line, timing_lock, write_json
from collectors.programs.step import measure

from . import modes

log = logging.getLogger("zoo.worker")
SCHEMA_VERSION = 1
RECORD_KEYS = ("model family kind dtype mode status error compile_s compile_s_total step_ms step_ms_p10 step_ms_p90 "
               "step_ms_iqr timing called_ms called_ms_p10 eager_launch_ms census census_replay correct max_abs_err "
               "rel_err hook_stats").split()


@contextlib.contextmanager
def benchmarks_take_turns() -> Iterator[None]:
    """While active, every GPU benchmark Inductor runs (max-autotune's choices, coordinate descent, a Triton
    kernel's configs) holds ``timing_lock``: another lane's timing on the same GPU never overlaps it. Without
    ``$ZOO_GPU_LOCK``: nothing changes."""
    if not os.environ.get(GPU_LOCK_ENV):
        yield
        return
    from torch._inductor.runtime.benchmarking import benchmarker

    from predictor.runtime.lowerings.tables import wrapped_attribute

    def in_turn(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def benchmark(*args: Any, **kwargs: Any) -> Any:
            with timing_lock():
                return original(*args, **kwargs)
        return benchmark

    kind = type(benchmarker)  # the methods of the benchmarker Inductor uses, restored on exit
    with contextlib.ExitStack() as stack:
        for name in ("benchmark_gpu", "benchmark_gpu_with_cuda_graph"):
            if hasattr(kind, name):
                stack.enter_context(wrapped_attribute(kind, name, in_turn, "zoo_gpu_turns"))
        yield


def run(model: str, mode_text: str, repeats: int = 50) -> dict[str, Any]:
    """The record of one (model, mode) run in this process."""
    record: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    record.update(model=model, mode=mode_text, status="ok", repeats=repeats, schema_version=SCHEMA_VERSION,
                  started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        record.update(environment())
        zm, mode = models.get(model), modes.parse_mode(mode_text)
        record.update(family=zm.family, kind=zm.kind, dtype=zm.dtype, description=zm.summary,
                      cudagraphs=mode.cudagraphs)
        reason = modes.skip_reason(mode)
        if reason:
            record.update(status="skipped", error=reason)
            return record
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        record["device"] = device.type
        record["lanes_per_gpu"] = int(os.environ.get(LANES_PER_GPU_ENV, "1"))  # >1: compiles overlapped
        # with other lanes' timings: Inductor's benchmarks, and the model build and eager reference too
        record["benchmarks_took_turns"] = bool(os.environ.get(GPU_LOCK_ENV))
        with benchmarks_take_turns():
            measure(record, zm, mode, repeats, device)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        traceback.print_exc()
        record.update(status="error", error=one_line(exc))
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json-out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    record = run(args.model, args.mode, args.repeats)
    for key, value in record.items():  # NaN is no JSON number: keep the file standard
        if isinstance(value, float) and not math.isfinite(value):
            record[key] = None
    write_json(args.json_out, record)
    log.info("%s %s: %s", args.model, args.mode, record["status"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
