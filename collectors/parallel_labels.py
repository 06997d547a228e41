"""One label collection run by several processes on one GPU: their compiles overlap on the host, their checks and
timings take turns on the GPU (``$ZOO_GPU_LOCK``, held by ``collectors.timing.time_round_robin``).

A table's labels are compile-bound (a GEMV problem compiles one kernel with up to 30 block configs, then times them
in milliseconds), so N processes label up to N times as many problems per GPU-minute. Each process takes one shard
of the problems (``collectors.selection.Shard``, by problem id) and resumes its own part file
(``<labels>.s<i>of<n>.parquet``); the labels file is then the parts joined (``collectors.gemv.join``). A part is
first seeded with the labels file's rows of its shard, so a collection resumed in parallel after a serial run (or
after a parallel run with another N that reached its join) measures nothing twice.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from collectors.selection import Shard, interleaved


def part_path(labels: Path, shard: Shard) -> Path:
    return labels.with_name(f"{labels.stem}.s{shard.index}of{shard.count}{labels.suffix}")


def seed_part(labels: Path, part: Path, shard: Shard, kind: str) -> None:
    """Give ``part`` the rows of ``labels`` its shard owns, beside the rows it has of problems ``labels`` lacks
    (a parallel run stopped before its join)."""
    import pandas as pd

    from collectors.gemv import file_environment, write
    from predictor.offline.gemv_eval import read_labels

    if not labels.exists():
        return
    known = read_labels(str(labels), kind)
    mine = known[known["problem_id"].map(shard.owns)]
    frames = [mine]
    if part.exists():
        own = read_labels(str(part), kind)
        frames.append(own[~own["problem_id"].isin(set(known["problem_id"]))])
    write(pd.concat(frames, ignore_index=True), part, file_environment(known), kind)


def _worker(collector: str, part: str, shard: tuple[int, int], seconds: float | None, lock: str,
            interleave_by: str | None) -> None:
    """One process's share: the collector's problems of ``shard``, resumed from ``part``."""
    import importlib
    import logging

    from collectors.gemv import collect
    from collectors.programs.harness import GPU_LOCK_ENV

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s shard {shard[0]}/{shard[1]} %(message)s")
    os.environ[GPU_LOCK_ENV] = lock
    module = importlib.import_module(collector)
    problems, measure_one = module.labelling()
    if interleave_by:
        problems = interleaved(problems, interleave_by)
    status = collect(problems, measure_one, Path(part), module.KIND, collector.split(".")[-1], module.ATEN_KEY,
                     seconds=seconds, shard=Shard(*shard))
    raise SystemExit(status)


def collect_in_parallel(collector: str, labels: Path, processes: int, seconds: float | None = None,
                        interleave_by: str | None = None, tick: Callable[[], None] | None = None,
                        worker: Callable[..., None] = _worker, poll_s: float = 5.0) -> int:
    """Label ``collector``'s problems (a module with ``labelling()``, ``KIND``, ``ATEN_KEY``) into ``labels`` with
    ``processes`` processes (spawned: each with its own CUDA context), each starting no problem after ``seconds``;
    ``tick()`` every ``poll_s`` while they run (a calibration ledger). Returns 0 when every process did, else the
    first failing exit status (the parts are joined either way: nothing measured is lost)."""
    import importlib

    from collectors.gemv import join

    kind = importlib.import_module(collector).KIND
    shards = [Shard(i, processes) for i in range(processes)]
    parts = [part_path(labels, s) for s in shards]
    labels.parent.mkdir(parents=True, exist_ok=True)
    for shard, part in zip(shards, parts):
        seed_part(labels, part, shard, kind)
    lock = str(Path(tempfile.gettempdir()) / f"gemm-predictor-labels-{os.getpid()}.lock")
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=worker, args=(collector, str(part), (s.index, s.count), seconds, lock,
                                                   interleave_by))
             for s, part in zip(shards, parts)]
    for p in procs:
        p.start()
    while any(p.is_alive() for p in procs):
        time.sleep(poll_s)
        if tick is not None:
            tick()
    for p in procs:
        p.join()
    present = [part for part in parts if part.exists()]
    joined = join(present, labels, kind) if present else 0
    codes = [p.exitcode or 0 for p in procs]
    return next((c for c in codes if c), joined)
