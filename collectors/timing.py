"""GPU timing for labels: L2 flushed before every timed launch, CUDA events, median and IQR of >= 10 runs.

All candidates of one problem are timed round-robin (rep 1 of every candidate, then rep 2, ...) so clock and
thermal drift spread evenly over them instead of favouring whoever ran first. The whole schedule is captured
once into a CUDA graph (external event-record nodes carry the timestamps), so Python launch overhead never
leaks into a label; where capture fails the same schedule runs eagerly, where the ~30 us L2 flush in front
of each launch still hides the launch latency.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable, Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)


class L2Flusher:
    """Overwrites a buffer of twice the L2 size, as Inductor's benchmarker does before each timed run."""

    def __init__(self, device: torch.device) -> None:
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or (64 << 20)
        self.buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


@functools.cache
def cuda_flusher() -> L2Flusher:
    """One flusher for the current CUDA device, made at first use (a collector's problems share it)."""
    return L2Flusher(torch.device("cuda"))


def _events(n: int, external: bool) -> list[torch.cuda.Event]:
    kwargs = {"enable_timing": True}
    if external:
        kwargs["external"] = True
    return [torch.cuda.Event(**kwargs) for _ in range(n)]


def time_round_robin(fns: Sequence[Callable[[], None]], flush: L2Flusher, reps: int = 10,
                     use_graph: bool = True) -> tuple[np.ndarray, str]:
    """Return (times_us[fn, rep], method). Functions must already be warmed up (compiled, checked). Held under the
    GPU lock (``collectors.programs.harness.timing_lock``) where ``$ZOO_GPU_LOCK`` is set: processes sharing one
    GPU take turns, so no kernel of another runs among the timed ones."""
    from collectors.programs.harness import timing_lock

    if not fns:
        return np.zeros((0, reps)), "none"
    with timing_lock():
        return _time_round_robin(fns, flush, reps, use_graph)


def _time_round_robin(fns: Sequence[Callable[[], None]], flush: L2Flusher, reps: int,
                      use_graph: bool) -> tuple[np.ndarray, str]:
    starts = _events(len(fns) * reps, external=use_graph)
    ends = _events(len(fns) * reps, external=use_graph)

    def schedule() -> None:
        for r in range(reps):
            for i, fn in enumerate(fns):
                flush()
                starts[r * len(fns) + i].record()
                fn()
                ends[r * len(fns) + i].record()

    method = "eager"
    if use_graph:
        try:
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                with torch.cuda.graph(graph, stream=stream):
                    schedule()
            torch.cuda.current_stream().wait_stream(stream)
            graph.replay()
            method = "cudagraph"
        except Exception as exc:  # capture unsupported for some op: fall back to eager, same schedule
            log.debug("CUDA graph capture failed (%s); timing eagerly", exc)
            torch.cuda.synchronize()
            starts = _events(len(fns) * reps, external=False)
            ends = _events(len(fns) * reps, external=False)
            schedule()
    else:
        schedule()
    torch.cuda.synchronize()
    times = np.array([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]).reshape(reps, len(fns)).T
    return times, method


def summarise(times_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and inter-quartile range per row."""
    q1, med, q3 = np.percentile(times_us, [25, 50, 75], axis=1)
    return med, q3 - q1


def measure_device_peaks(device: torch.device) -> tuple[float, dict[str, float]]:
    """Measured copy bandwidth (GB/s, bytes read + written) and dense matmul TFLOP/s per dtype.

    Features use these as the roofline; measuring beats datasheet numbers (clocks, power caps differ).
    """
    def best_ms(fn: Callable[[], None], n: int = 20) -> float:
        for _ in range(3):
            fn()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(n):
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return float(np.median(times))

    src = torch.empty(1 << 28, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() / (best_ms(lambda: dst.copy_(src)) * 1e-3) / 1e9
    del src, dst
    peaks = {}
    size = 8192
    for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32),
                        ("int8", torch.int8)):
        if dtype == torch.int8:
            a = torch.randint(-8, 8, (size, size), device=device, dtype=dtype)
            b = torch.randint(-8, 8, (size, size), device=device, dtype=dtype)
            fn = lambda: torch._int_mm(a, b)
        else:
            a = torch.randn(size, size, device=device, dtype=dtype)
            b = torch.randn(size, size, device=device, dtype=dtype)
            fn = lambda: torch.mm(a, b)
        peaks[name] = 2 * size ** 3 / (best_ms(fn, 10) * 1e-3) / 1e12
        del a, b
    return bandwidth, peaks
