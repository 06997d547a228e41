"""Learning from use: under ``predictor.compile(tune=K)`` every benchmark Inductor runs becomes labelled rows in the
label store (``predictor.artifacts.label_store``), which ``gemm-predictor refit`` folds into a local model for this GPU.

One feedback saver is registered with Inductor per process (``select_algorithm.add_feedback_saver``; savers cannot
be removed one by one); it defers to the recorder of the installed pruner, and does nothing where there is none
(``record=False``, the default mode, another hook). Per benchmark it reads the GEMM's Problem off the input nodes
and each ChoiceCaller's Candidate (``candidate.from_choice_caller``, the one mapping), and buffers one row per
timed choice; the buffer becomes a part at 4096 rows and at exit. It never calls the profiler thunk (a second
benchmark of every choice) and never raises: the first error of each kind is logged once, then swallowed.

Inductor calls feedback savers with timings replayed from its autotune cache too; a replay repeats the recorded
floats exactly, so an observation already recorded (same problem, same timings) is not recorded again here, and
``refit`` drops exact repeats across processes.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import math
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from ...core.candidate import from_choice_caller
from ...artifacts.label_store import COLLECTOR, StoreFull, default_store, write_part
from ...artifacts.schema import COLUMNS, SCHEMA_VERSION
from .gemm_inputs import problem_from_inputs

log = logging.getLogger(__name__)

# Inductor op names whose operands the Problem reads as (..., mat1, mat2); scaled_mm (scales after the operands) and
# grouped GEMMs are not recorded
RECORDED_OPS = {"mm": "mm", "addmm": "addmm", "bmm": "bmm", "int_mm": "int_mm"}
FLUSH_ROWS = 4096
_REMEMBERED = 1 << 16  # observations remembered per process to skip cache replays


class _Nodes:
    """The feedback saver's input nodes as the ``kernel_inputs`` ``problem_from_inputs`` reads."""

    def __init__(self, nodes: list[Any]) -> None:
        self._nodes = list(nodes)

    def nodes(self) -> list[Any]:
        return self._nodes


def this_device() -> tuple[str, str] | None:
    """(GPU name, capability) of the current CUDA device, None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return torch.cuda.get_device_name(), f"{major}.{minor}"


def _versions() -> tuple[str, str]:
    import torch

    try:
        import triton

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = "not installed"
    return str(torch.__version__).split("+")[0], triton_version


class LabelRecorder:
    """Turns feedback-saver calls into buffered rows and writes them as parts of ``store``."""

    def __init__(self, store: str | Path | None, gpu: str, cc: str, device: dict[str, Any] | None = None,
                 cuda_only: bool = True) -> None:
        self.gpu, self.cc = gpu, cc
        self.store = Path(store) if store is not None else default_store(gpu)
        self.device = device or {"gpu": gpu, "cc": cc}
        self.cuda_only = cuda_only  # tests record CPU benchmarks under a pretended GPU
        self.torch, self.triton = _versions()
        self.counts: Counter = Counter()
        self.parts: list[Path] = []
        self._rows: list[dict[str, Any]] = []
        self._buffered: set[str] = set()  # problem ids in _rows
        self._seen: dict[tuple, None] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._full = False

    def _once(self, key: str, level: int, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.log(level, "gemm-predictor: " + message, *args)

    def __call__(self, timings: dict[Any, float], name: str, input_nodes: list[Any], choices: list[Any],
                 *_rest: Any) -> None:
        try:
            self._record(timings, name, input_nodes, choices)
        except Exception as exc:  # noqa: BLE001 -- recording must never break a compile
            self.counts["errors"] += 1
            self._once(f"error:{type(exc).__name__}", logging.WARNING,
                       "recording a benchmark of %s failed (%s: %s); compiling goes on", name, type(exc).__name__, exc)

    def _record(self, timings: dict[Any, float], name: str, input_nodes: list[Any], choices: list[Any]) -> None:
        self.counts["benchmarks"] += 1
        op = RECORDED_OPS.get(name)
        if op is None:
            self.counts["skipped_op"] += 1
            log.debug("gemm-predictor: benchmark of %s not recorded (not one of %s)", name, ", ".join(RECORDED_OPS))
            return
        if self.cuda_only and any(getattr(getattr(n, "get_device", lambda: None)(), "type", "cuda") != "cuda"
                                  for n in input_nodes[-2:]):
            self.counts["skipped_device"] += 1
            return
        problem = problem_from_inputs(_Nodes(input_nodes), op)
        pfields = problem.to_dict()
        rows = []
        for rank, choice in enumerate(choices):
            try:
                cand = from_choice_caller(getattr(choice, "name", ""), getattr(choice, "description", "") or "")
            except ValueError:
                self.counts["skipped_choice"] += 1
                continue
            ms = timings.get(choice)
            ok = ms is not None and math.isfinite(float(ms)) and float(ms) > 0
            us = float(ms) * 1e3 if ok else None
            rows.append({**pfields, "family_tag": "feedback", **cand.to_dict(), "time_us": us, "time_us_iqr": None,
                         "reps": 1, "status": "ok" if ok else "compile_error", "collector": COLLECTOR,
                         "gpu": self.gpu, "cc": self.cc, "torch": self.torch, "triton": self.triton,
                         "schema_version": SCHEMA_VERSION, "inductor_rank": rank, "inductor_bench_us": us})
        if not rows:
            return
        key = (problem.problem_id, tuple(sorted((r["candidate"], r["time_us"] or -1.0) for r in rows)))
        with self._lock:
            if key in self._seen:  # Inductor replaying its autotune cache: not a new measurement
                self.counts["replayed"] += 1
                return
            if len(self._seen) >= _REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = None
            # one observation per (problem, candidate) per part keeps each part a valid dataset on its own
            if problem.problem_id in self._buffered:
                self._flush_locked()
            self._buffered.add(problem.problem_id)
            self._rows.extend(rows)
            self.counts["rows"] += len(rows)
            if len(self._rows) >= FLUSH_ROWS:
                self._flush_locked()

    def flush(self) -> Path | None:
        with self._lock:
            return self._flush_locked()

    def _flush_locked(self) -> Path | None:
        rows, self._rows = self._rows, []
        self._buffered = set()
        if not rows or self._full:
            return None
        columns = {c: [r.get(c) for r in rows] for c in (*COLUMNS, "inductor_rank", "inductor_bench_us")}
        meta = {"gpu": self.gpu, "cc": self.cc, "torch": self.torch, "triton": self.triton, "device": self.device}
        try:
            path = write_part(self.store, _typed(columns), meta)
        except StoreFull as exc:
            self._full = True
            self._once("full", logging.INFO, "%s", exc)
            return None
        except Exception as exc:  # noqa: BLE001 -- a full disk, a read-only cache: the compile goes on
            self._once(f"write:{type(exc).__name__}", logging.WARNING, "cannot write labels to %s (%s: %s)",
                       self.store, type(exc).__name__, exc)
            return None
        self.parts.append(path)
        self.counts["parts"] += 1
        return path

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**{k: int(v) for k, v in self.counts.items()}, "store": str(self.store),
                    "buffered_rows": len(self._rows)}


def _typed(columns: dict[str, list[Any]]) -> Any:
    """Columns as pyarrow arrays of the contract's types (a column of Nones has no type of its own)."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    types = {**COLUMNS, "inductor_rank": "int64", "inductor_bench_us": "float64"}
    return {c: pa.array(v, type=kinds[types[c]]) for c, v in columns.items()}


# --------------------------------------------------------------------------- process-wide wiring

_REGISTERED = [False]
_ACTIVE: list[LabelRecorder] = []  # the recorders the installed pruners use; flushed at exit
_RECORDERS: dict[tuple, LabelRecorder] = {}


def _save_with_installed(*args: Any) -> None:
    from .installed import _STACK

    recorder = getattr(_STACK[-1].pruner, "label_recorder", None) if _STACK else None
    if recorder is not None:
        recorder(*args)


def _flush_all() -> None:
    for recorder in list(_ACTIVE):
        recorder.flush()


def recorder_for(store: str | Path | None, device: tuple[str, str] | None = None) -> LabelRecorder | None:
    """The recorder for ``store`` (None: this GPU's default store) on this GPU, registering the feedback saver once;
    None (with one info line) where nothing can be recorded: no CUDA device, no pyarrow."""
    if importlib.util.find_spec("pyarrow") is None:
        _info_once("no_pyarrow", "pyarrow is not installed: tuned benchmarks are not recorded as labels "
                   "(pip install pyarrow)")
        return None
    device = device if device is not None else this_device()
    if device is None:
        _info_once("no_gpu", "no CUDA device: tuned benchmarks are not recorded as labels")
        return None
    key = (None if store is None else str(Path(store).expanduser().resolve()), *device)
    recorder = _RECORDERS.get(key)
    if recorder is None:
        props = None
        try:
            from ...core.device import DeviceInfo

            props = DeviceInfo.from_torch().to_dict() if device == this_device() else None
        except Exception:  # noqa: BLE001 -- the name and capability are enough to label rows
            props = None
        recorder = _RECORDERS[key] = LabelRecorder(store, *device, device=props)
        _ACTIVE.append(recorder)
    if not _REGISTERED[0]:
        from torch._inductor import select_algorithm

        select_algorithm.add_feedback_saver(_save_with_installed)
        atexit.register(_flush_all)
        _REGISTERED[0] = True
    return recorder


_INFO: set[str] = set()


def _info_once(key: str, message: str) -> None:
    if key not in _INFO:
        _INFO.add(key)
        log.info("gemm-predictor: %s", message)


def attach(pruner: Any, record: bool, store: str | Path | None) -> None:
    """Give ``pruner`` (the one ``predictor.compile`` installed) its recorder, or none: only the tune policy
    benchmarks, so only it records."""
    on = record and getattr(pruner.settings, "policy", None) == "tune"
    pruner.label_recorder = recorder_for(store) if on else None


def stats() -> dict[str, Any]:
    """What the recorders of this process did (``predictor.stats()["labels"]``)."""
    if not _ACTIVE:
        return {}
    total: Counter = Counter()
    for recorder in _ACTIVE:
        total.update({k: v for k, v in recorder.stats().items() if isinstance(v, int)})
    return {**dict(total), "stores": [str(r.store) for r in _ACTIVE]}

