"""One (model, mode) in this process: build, eager reference, compile, check, time, kernel census, one record.

    python -m benchmarks.zoo.worker --model llama-prefill --mode plain --repeats 50 --json-out rec.json

The runner (run.py) starts each in a fresh process with empty TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR, so
compile time is what a user sees on a first run. Any exception becomes status "error" with its one-line message
(traceback on stderr); the record is always written.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import fcntl
import functools
import json
import logging
import math
import os
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import torch

from . import models, modes, report

log = logging.getLogger("zoo.worker")
SCHEMA_VERSION = 1
WARMUP = 10
# rel error = ||compiled - eager|| / ||eager|| of the first output (or first-step loss). Compiled code keeps
# fp32 intermediates inside fused kernels where eager rounds after every op, and reorders reductions, so the
# gap is set by the storage dtype's precision: bf16 has 8 mantissa bits (eps 7.8e-3; ~1e-2 after two layers
# and a logit head), fp16 has 11 (eps 9.8e-4), fp32 differs only by summation order (~1e-6; 1e-3 also admits
# TF32 if a user turned it on, since the record says which).
TOLERANCE = {"bfloat16": 5e-2, "float16": 2e-2, "float32": 1e-3}
RECORD_KEYS = ("model family kind dtype mode status error compile_s compile_s_total step_ms step_ms_p10 step_ms_p90 "
               "step_ms_iqr timing called_ms called_ms_p10 eager_launch_ms census census_replay correct max_abs_err "
               "rel_err hook_stats").split()


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_times_ms(fn: Callable[[], Any], repeats: int, device: torch.device) -> list[float]:
    """Each call timed on its own: CUDA events around it and a sync after (GPU), perf_counter on CPU."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def batched_step_ms(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Mean time of ``repeats`` calls launched back to back between two CUDA events (one sync at the end).

    Why, beside ``step_times_ms``: a per-call event pair also times the gap until the CPU launches the call, so a
    busy host (another lane's compile workers) shows up as a slower step; with the calls queued back to back the
    GPU never waits for the CPU (a CUDA-graph replay is enqueued in microseconds), as in a real serving loop."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) * 1e3 / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def spread(times: list[float]) -> dict[str, float]:
    """Median, p10, p90 and interquartile range (ms)."""
    t = torch.tensor(times, dtype=torch.float64)
    q = torch.quantile(t, torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9], dtype=torch.float64)).tolist()
    return {"step_ms": q[2], "step_ms_p10": q[0], "step_ms_p90": q[4], "step_ms_iqr": q[3] - q[1]}


def capture(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    """``fn`` captured in one CUDA graph after warm-up on a side stream (as torch.cuda.graphs' docs show)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def triton_kernel_configs() -> dict[str, str]:
    """The launch config of every Triton kernel Inductor has loaded in this process, by kernel name
    (``XBLOCK=8 R0_BLOCK=256 warps=4 stages=1``), where autotuning has left one launcher: which blocks each mode's
    kernels ran with, beside their times in the census."""
    from torch._inductor.codecache import PyCodeCache

    found = {}
    for module in [*PyCodeCache.modules, *PyCodeCache.modules_no_attr.values()]:
        for name, kernel in list(vars(module).items()):
            launchers = getattr(kernel, "launchers", None)
            if name.startswith("triton_") and isinstance(launchers, list) and len(launchers) == 1:
                config = launchers[0].config
                found[name] = " ".join([*(f"{k}={v}" for k, v in config.kwargs.items()),
                                        f"warps={config.num_warps}", f"stages={config.num_stages}"])
    return found


def profile_census(step: Callable[[], Any]) -> dict[str, Any]:
    """The census of one step's GPU kernels under torch.profiler (CUDA activity only), with the launch config of
    each Inductor Triton kernel among them (``blocks``)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA]
    result = report.census(kernels)
    try:
        configs = triton_kernel_configs()
        result["blocks"] = {name: configs[name] for name in sorted({n for n, _ in kernels}) if name in configs}
    except Exception as exc:  # noqa: BLE001 - Inductor internals may move; the census stands without blocks
        result["blocks"] = {"error": one_line(exc)}
    if not kernels:
        result["note"] = "the profiler saw no kernels (graph replays may hide them)"
    return result


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max abs error, ||out - ref|| / ||ref||) in fp32."""
    out, ref = out.detach().float(), ref.detach().float()
    diff = out - ref
    return diff.abs().max().item(), (diff.norm() / ref.norm().clamp_min(1e-30)).item()


def autocast_of(zm: models.ZooModel, device: torch.device) -> Callable[[], Any]:
    """A context factory: autocast to the entry's AMP dtype, or nothing for entries without AMP."""
    return (lambda: torch.autocast(device.type, dtype=zm.amp_dtype)) if zm.amp_dtype else nullcontext


def measure(record: dict[str, Any], zm: models.ZooModel, mode: modes.Mode, repeats: int,
            device: torch.device) -> None:
    """Fill ``record`` phase by phase (what was measured before an exception stays in the record)."""
    amp = autocast_of(zm, device)
    log.info("build %s on %s", zm.name, device)
    with timing_lock():  # eager GPU work, kept out of other lanes' timings and autotuning benchmarks
        module, inputs, record["step_kind"] = zm.build(device)
        if zm.kind == "infer":
            module.eval()
            with torch.no_grad(), amp():
                ref = module(*inputs).detach().float().clone()
        else:
            module.train()
            reference = copy.deepcopy(module)  # eager first-step loss on a copy: the compiled step updates weights
            with amp():
                ref = reference(*inputs).detach().float()
            del reference
        _sync(device)
    log.info("compile with %s", mode.name)
    t0 = time.perf_counter()  # from the compile call: what it does eagerly (imports, a hook's set-up) counts too
    waited = lock_waited_s()
    compiled = mode.compile(module)
    record["compile_call_s"] = time.perf_counter() - t0
    if zm.kind == "infer":
        def step() -> torch.Tensor:
            with torch.no_grad(), amp():
                return compiled(*inputs)
    else:
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)

        def step() -> torch.Tensor:
            with amp():
                loss = compiled(*inputs)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

    first = step().detach().float().clone()  # clone: cudagraph trees overwrite outputs on the next replay
    _sync(device)
    record["compile_s"] = time.perf_counter() - t0
    record["compile_waited_s"] = lock_waited_s() - waited  # its benchmarks waiting for other lanes' turns
    # cudagraph trees warm up on call 1, record on call 2, replay from call 3. In turn with the other lanes: these
    # steps' kernels would otherwise run beside another lane's autotuning benchmarks, which then time noise
    waited_before_warm_up = lock_waited_s()
    with timing_lock():
        for _ in range(2):
            step()
        _sync(device)
    record["compile_s_total"] = time.perf_counter() - t0 - (lock_waited_s() - waited_before_warm_up)
    log.info("compiled in %.1f s (%.1f s until warm)", record["compile_s"], record["compile_s_total"])

    if torch.isfinite(ref).all():
        record["max_abs_err"], record["rel_err"] = errors(first, ref)
        record["correct"] = bool(record["rel_err"] <= (zm.tolerance or TOLERANCE[zm.compute_dtype]))
    else:
        record["correct"] = None
        record["error"] = "eager reference has NaN/inf: correctness unchecked"

    detected = device.type == "cuda" and modes.cudagraph_trees_used(torch.cuda.current_device())
    record["cudagraph_trees_detected"] = detected
    trees = device.type == "cuda" and (detected or bool(mode.cudagraphs))  # Inductor has no graphs on CPU
    with timing_lock():
        _time_and_census(record, zm, step, trees, mode.replayable, repeats, device)
    if mode.base.startswith("hook"):
        import predictor
        from predictor.runtime.choices import installed
        from predictor.runtime.lowerings.gemv import gemv_count
        from predictor.runtime.lowerings.gemv_blocks import fixed_count
        from predictor.runtime.lowerings.pad_k import padded_k_count
        from predictor.runtime.lowerings.patchify import patch_gemm_count
        record["hook_stats"] = {**predictor.stats(), "gemv_reductions": gemv_count(), **fixed_count(),
                                "patch_gemms": patch_gemm_count(), "padded_k": padded_k_count()}
        if installed._STACK:  # which model and gap decided: the shipped default changes between releases
            pruner = installed._STACK[-1].pruner
            record["predictor_model"] = {"name": pruner.metadata.get("name"),
                                         "model_sha256": str(pruner.metadata.get("model_sha256", ""))[:12],
                                         "policy": pruner.settings.policy, "decide_gap": pruner.settings.decide_gap}
    if record["correct"] is False:
        record["status"] = "wrong"


def _time_and_census(record: dict[str, Any], zm: models.ZooModel, step: Callable[[], Any], trees: bool,
                     replayable: bool, repeats: int, device: torch.device) -> None:
    """Warm up, time the step as called (direct calls), then for inference by replaying one outer CUDA graph where
    the mode can be captured (``modes.Mode.replayable``); kernel census."""
    for _ in range(WARMUP):
        step()
    _sync(device)
    direct = step_times_ms(step, repeats, device)
    record.update(spread(direct), timing="eager-step" if zm.kind == "train" else "cudagraph-trees" if trees
                  else "direct")  # kept if the graph capture below fails
    graph = None
    if zm.kind == "infer":
        record["called_ms"] = record["eager_launch_ms"] = record["step_ms"]  # the user's own loop
        # direct calls are host-bound: their fastest tenth says what the call costs when the host is not shared
        record["called_ms_p10"] = record["step_ms_p10"]
        if device.type == "cuda" and replayable:
            try:
                graph = capture(step)
                for _ in range(WARMUP):
                    graph.replay()
                record.update(spread(step_times_ms(graph.replay, repeats, device)), timing="cudagraph-replay")
            except Exception as exc:  # noqa: BLE001 - fall back to direct calls, say why
                record["capture_error"] = one_line(exc)
                torch.cuda.synchronize()  # raises (an error run) if the failed capture broke the context
                log.warning("CUDA-graph capture failed, timing direct calls: %s", record["capture_error"])
    log.info("step %.3f ms (%s)", record["step_ms"], record["timing"])

    if device.type == "cuda":
        try:
            record["census"] = profile_census(step)
        except Exception as exc:  # noqa: BLE001 - the census is extra; never fail a run for it
            record["census"] = {"error": one_line(exc)}
    if graph is not None and record["timing"] == "cudagraph-replay":
        # the kernels of the replayed step itself, which step_ms timed: a direct call of a mode with CUDA graph
        # trees also copies its inputs into the trees' memory, which the replay does not
        try:
            record["census_replay"] = profile_census(graph.replay)
        except Exception as exc:  # noqa: BLE001 - extra, as the census
            record["census_replay"] = {"error": one_line(exc)}


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


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (temp file + os.replace): a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str, allow_nan=True)
    os.replace(tmp, path)


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
