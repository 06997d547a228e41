"""One (model, phase, mode) of the serving benchmark in this process: compile, run every size served, time each.

    python -m benchmarks.serving.worker --model llama --phase decode --mode hook-dynamic --sizes 1,2,4 --json-out r.json

Dynamic modes compile once with the served dimension marked dynamic (decode: the batch; prefill: the tokens) and
then run every size; ``compile_s`` is the whole compile of that one graph over every size (each size's first call,
recompiles included) and ``recompiles`` counts the graphs Dynamo compiled beyond the first. Static modes compile
once per size (``torch._dynamo.reset()`` between sizes, so each is a first compile). Each size is timed by replaying
one CUDA graph of the step (direct calls on a CPU). ``max_rel_err``: each size's first output against eager's. Any
exception becomes status "error" for the sizes it hit.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from typing import Any, Callable

import torch

from benchmarks.zoo.worker import benchmarks_take_turns
from collectors.programs.harness import LANES_PER_GPU_ENV, environment, lock_waited_s, one_line, timing_lock, write_json
from collectors.programs.step import batched_step_ms, capture, spread, step_times_ms, sync

from . import models

log = logging.getLogger("serving.worker")
SCHEMA_VERSION = 1
WARMUP = 5


def compiler_for(mode: str) -> tuple[Callable[[torch.nn.Module], Callable], bool]:
    """(compile function, dynamic?) for a mode name (``models.MODES``)."""
    dynamic = mode.endswith("-dynamic")
    if mode.startswith("plain"):
        return (lambda m: torch.compile(m, dynamic=dynamic)), dynamic
    if mode.startswith("ma"):
        return (lambda m: torch.compile(m, mode="max-autotune-no-cudagraphs", dynamic=dynamic)), dynamic
    import predictor

    # no CUDA graph trees: each size is timed inside one outer CUDA graph of its own, like the peers;
    # hook-ranges-dynamic: one kernel per range of M (predictor.runtime.dynamic.size_ranges); hook-static: one compile per size
    ranges = mode.startswith("hook-ranges")
    return (lambda m: predictor.compile(m, dynamic=dynamic, cudagraphs=False, size_ranges=ranges)), dynamic


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def time_size(step: Callable[[], Any], repeats: int, device: torch.device) -> dict[str, Any]:
    """Warm up, then the step's time by one CUDA-graph replay (direct calls where there is no CUDA): ``step_ms``,
    each replay timed on its own with a sync after it, as the peers' records; ``step_ms_b2b``, the median of five
    rounds of replays queued back to back (the GPU's own time, without each replay's launch gap, which moves by
    tens of microseconds between processes)."""
    if device.type != "cuda":
        for _ in range(WARMUP):
            step()
        return {**spread(step_times_ms(step, repeats, device)), "timing": "direct"}
    # lanes sharing the GPU compile at once but run and time one at a time (warm-ups too: in a four-lane run with
    # them outside, OLMoE's decode at batch 256 timed 1.87 ms against 1.24 ms of kernels)
    with timing_lock():
        for _ in range(WARMUP):
            step()
        graph = capture(step)
        for _ in range(WARMUP):
            graph.replay()
        times = step_times_ms(graph.replay, repeats, device)
        rounds = sorted(batched_step_ms(graph.replay, repeats, device) for _ in range(5))
    return {**spread(times), "step_ms_b2b": rounds[2], "timing": "cudagraph-replay"}


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    """max |out - reference| over max |reference|: how far a compiled step's output is from eager's (in bf16 a few
    thousandths; a kernel launched wrong shows as order 1)."""
    out, reference = out.float(), reference.float()
    return float((out - reference).abs().max() / reference.abs().max().clamp_min(1e-12))


def run(model: str, phase: str, mode: str, sizes: list[int], repeats: int,
        json_out: str | None = None) -> list[dict[str, Any]]:
    """One record per size (status "error" with the message for sizes that failed), written to ``json_out`` after
    every size (a runner that stops a static mode keeps the sizes it finished)."""
    env = environment()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    compile_fn, dynamic = compiler_for(mode)
    spec = models.get(model)
    with timing_lock():  # eager GPU work, kept out of other lanes' timings and autotuning benchmarks
        module = spec.build(device).eval()
        sync(device)
    base = {"model": model, "phase": phase, "mode": mode, "schema_version": SCHEMA_VERSION, **env,
            "lanes_per_gpu": int(os.environ.get(LANES_PER_GPU_ENV, "1"))}
    records: list[dict[str, Any]] = []
    compiled: Callable | None = None
    total_compile, total_waited, first_graphs = 0.0, 0.0, None
    for size in sizes:
        record = {**base, "size": size, "status": "ok"}
        try:
            inputs = models.inputs(spec, phase, size, device)
            if compiled is None or not dynamic:
                torch._dynamo.reset()
                compiled = compile_fn(module)
            if dynamic and size > 1:  # Dynamo specialises a size of 1: that size gets a graph of its own
                models.mark_dynamic(inputs, phase)
            with torch.no_grad():
                sync(device)
                t0, waited = time.perf_counter(), lock_waited_s()
                out = compiled(*inputs)  # this size's first call: a compile, a recompile or neither
                sync(device)
                first = time.perf_counter() - t0
                waited = lock_waited_s() - waited  # its benchmarks waiting for other lanes' turns on the GPU
                graphs = _graphs_compiled()
                first_graphs = graphs if first_graphs is None else first_graphs
                total_compile += first
                total_waited += waited
                record["compile_s"] = total_compile if dynamic else first
                record["compile_waited_s"] = total_waited if dynamic else waited
                record["recompiles"] = graphs - first_graphs if dynamic else 0
                with timing_lock():  # eager GPU work
                    record["max_rel_err"] = relative_error(out, module(*inputs))

                def step() -> Any:
                    with torch.no_grad():
                        return compiled(*inputs)
                record.update(time_size(step, repeats, device))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a record
            traceback.print_exc()
            record.update(status="error", error=one_line(exc))
        records.append(record)
        if json_out:
            write_json(json_out, records)
        log.info("%s %s %s size %d: %s", model, phase, mode, size, record.get("step_ms"))
    if dynamic:  # the one graph's whole compile, over every size served
        for record in records:
            record["compile_s"], record["compile_waited_s"] = total_compile, total_waited
    if json_out:
        write_json(json_out, records)
    return records


def one_run_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The arguments of one (model, phase, mode) run over its sizes: this worker's and ``kernels``'."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", required=True, choices=sorted(models.REGISTRY))
    parser.add_argument("--phase", required=True, choices=("decode", "prefill"))
    parser.add_argument("--mode", required=True, choices=models.MODES)
    parser.add_argument("--sizes", required=True,
                        help="comma list of batch sizes (decode) or token counts (prefill), in calling order")
    parser.add_argument("--json-out", required=True, help="where the records go (a JSON list)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = one_run_parser("python -m benchmarks.serving.worker", __doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed replays per size")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    sizes = [int(s) for s in args.sizes.split(",")]
    with benchmarks_take_turns():  # a max-autotune compile's benchmarks never overlap another lane's timing
        run(args.model, args.phase, args.mode, sizes, args.repeats, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
