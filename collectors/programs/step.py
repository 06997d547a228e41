"""How a program's step is measured: build, eager reference, compile, check, time (direct calls, then one outer
CUDA-graph replay for inference), and the kernel census. One definition, used by the zoo benchmark's worker
(``benchmarks/zoo/worker.py``) and the in-program collector (``collectors/in_program/collect.py``), so a label and
a benchmark time a step alike.

``mode`` is anything with ``name``, ``base``, ``cudagraphs``, ``replayable`` and ``compile(module)`` (the zoo's
``modes.Mode``, the collector's ``_Mode``).
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import nullcontext
from typing import Any, Callable

import torch

from .census import profile_census
from .floor import floor_record
from .harness import lock_waited_s, one_line, timing_lock
from .models import ZooModel

log = logging.getLogger("zoo.worker")
WARMUP = 10
# rel error = ||compiled - eager|| / ||eager|| of the first output (or first-step loss). Compiled code keeps
# fp32 intermediates inside fused kernels where eager rounds after every op, and reorders reductions, so the
# gap is set by the storage dtype's precision: bf16 has 8 mantissa bits (eps 7.8e-3; ~1e-2 after two layers
# and a logit head), fp16 has 11 (eps 9.8e-4), fp32 differs only by summation order (~1e-6; 1e-3 also admits
# TF32 if a user turned it on, since the record says which).
TOLERANCE = {"bfloat16": 5e-2, "float16": 2e-2, "float32": 1e-3}
def sync(device: torch.device) -> None:
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


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max abs error, ||out - ref|| / ||ref||) in fp32."""
    out, ref = out.detach().float(), ref.detach().float()
    diff = out - ref
    return diff.abs().max().item(), (diff.norm() / ref.norm().clamp_min(1e-30)).item()


# torch's own compile timers (``torch._dynamo.utils.compilation_time_metrics``, seconds summed over this process)
# that split a compile into what a GEMM choice filter can change: lowering (where the hook's filter and lowerings
# run), the scheduler's fusion and code generation, and Triton's compiles
COMPILE_PHASES = ("bytecode_tracing", "create_aot_dispatcher_function", "_recursive_joint_graph_passes",
                  "_recursive_post_grad_passes", "GraphLowering.run", "Scheduler.__init__", "Scheduler.codegen",
                  "async_compile.wait", "PyCodeCache.load_by_key_path", "build_guards")


def compile_phases() -> dict[str, float]:
    """Seconds this process spent in each of ``COMPILE_PHASES`` so far (a phase torch does not time is left out)."""
    from torch._dynamo.utils import compilation_time_metrics

    return {name: round(sum(compilation_time_metrics[name]), 3) for name in COMPILE_PHASES
            if compilation_time_metrics.get(name)}


def autocast_of(zm: ZooModel, device: torch.device) -> Callable[[], Any]:
    """A context factory: autocast to the entry's AMP dtype, or nothing for entries without AMP."""
    return (lambda: torch.autocast(device.type, dtype=zm.amp_dtype)) if zm.amp_dtype else nullcontext


def measure(record: dict[str, Any], zm: ZooModel, mode: Any, repeats: int,
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
        if zm.layers is not None and device.type == "cuda":  # a decoder at its real depth: its memory floor
            record.update(floor_record(module, device), layers=zm.layers)
        sync(device)
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
    sync(device)
    record["compile_s"] = time.perf_counter() - t0
    record["compile_waited_s"] = lock_waited_s() - waited  # its benchmarks waiting for other lanes' turns
    # cudagraph trees warm up on call 1, record on call 2, replay from call 3. In turn with the other lanes: these
    # steps' kernels would otherwise run beside another lane's autotuning benchmarks, which then time noise
    waited_before_warm_up = lock_waited_s()
    with timing_lock():
        for _ in range(2):
            step()
        sync(device)
    record["compile_s_total"] = time.perf_counter() - t0 - (lock_waited_s() - waited_before_warm_up)
    record["compile_phases_s"] = compile_phases()
    log.info("compiled in %.1f s (%.1f s until warm)", record["compile_s"], record["compile_s_total"])

    if torch.isfinite(ref).all():
        record["max_abs_err"], record["rel_err"] = errors(first, ref)
        record["correct"] = bool(record["rel_err"] <= (zm.tolerance or TOLERANCE[zm.compute_dtype]))
    else:
        record["correct"] = None
        record["error"] = "eager reference has NaN/inf: correctness unchecked"

    detected = device.type == "cuda" and cudagraph_trees_used(torch.cuda.current_device())
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


def _time_and_census(record: dict[str, Any], zm: ZooModel, step: Callable[[], Any], trees: bool,
                     replayable: bool, repeats: int, device: torch.device) -> None:
    """Warm up, time the step as called (direct calls), then for inference by replaying one outer CUDA graph where
    the mode can be captured (``mode.replayable``); kernel census."""
    for _ in range(WARMUP):
        step()
    sync(device)
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



def cudagraph_trees_used(device_index: int = 0) -> bool:
    """Whether cudagraph trees hold graphs on this device (how a hook mode's timing is chosen at run time)."""
    try:
        from torch._inductor import cudagraph_trees as trees
        if not torch._C._is_key_in_tls("tree_manager_containers"):
            return False
        container = trees.get_obj(trees.local, "tree_manager_containers").get(device_index)
    except Exception:  # noqa: BLE001 - private API: unknown means "not used"
        return False
    return container is not None and (container.tree_manager is not None or container.live_cudagraphify_fns > 0)
