"""Runner: every (model, phase, mode) in a fresh worker process with empty caches; resumable; results + report.

    python -m benchmarks.serving.run --models llama,opt --out docs/benchmarks/serving/nvidia-h100 --lanes auto

A dynamic mode's worker runs every size of its phase (``models.SIZES``, or ``--decode-sizes`` / ``--prefill-sizes``)
through its one compile; a static mode compiles per size, so its sizes go to workers in chunks of ``--static-chunk``
that lanes share. Each worker returns one record per size. After every worker its records are added to
OUT/results.json (written atomically), so a command stopped at any point loses only the runs in flight; a rerun skips
the (model, phase, mode) already there and, for static modes, the sizes already there (a static worker stopped by the
budget keeps the sizes it finished). --budget-s: no run starts after it, and runs still going are stopped there.
--processes N runs each dynamic mode in N fresh processes (records say which: ``process``), and the report takes the
median per size: one mode's replays move by up to 5% between processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.zoo.processes import reap, timeout_error, wait_own_time, worker_env
from benchmarks.zoo.run import ZooError, lane_devices
from collectors.programs.harness import write_json

from . import models, report

REPO = Path(__file__).resolve().parents[2]


class ServingError(Exception):
    """A one-line user error: ``serving: error: ...``, exit status 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serving.run", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", default="llama,opt", help=f"comma list of: {', '.join(models.REGISTRY)}")
    p.add_argument("--phases", default="decode,prefill", help="comma list of: decode, prefill")
    p.add_argument("--modes", default=",".join(models.MODES), help="comma list of those modes")
    p.add_argument("--decode-sizes", default=",".join(map(str, models.SIZES["decode"])), help="batch sizes")
    p.add_argument("--prefill-sizes", default=",".join(map(str, models.SIZES["prefill"])), help="token counts")
    p.add_argument("--out", required=True, type=Path, help="folder for results.json, results.md and the plot")
    p.add_argument("--lanes", default="auto", help="GPUs used in parallel (auto: every visible one)")
    p.add_argument("--lanes-per-gpu", type=int, default=1,
                   help="runs sharing each GPU: their compiles overlap, their timings take turns; compile times then "
                        "include the contention (records say lanes_per_gpu)")
    p.add_argument("--static-chunk", type=int, default=3, help="sizes per worker of a static mode")
    p.add_argument("--processes", type=int, default=1,
                   help="fresh processes per dynamic mode, each timing every size (the report takes the median)")
    p.add_argument("--repeats", type=int, default=30, help="timed replays per size")
    p.add_argument("--run-timeout", type=float, default=540.0,
                   help="seconds of its own per (model, phase, mode) run: time it waits for other lanes' turns on "
                        "the GPU does not count")
    p.add_argument("--budget-s", type=float, default=None,
                   help="a hard deadline in seconds: no run starts after it, and runs still going are stopped there")
    p.add_argument("--report-only", action="store_true", help="only rewrite results.md and the plot")
    return p.parse_args(argv)


def _check(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """(model, phase, mode, sizes) to run, checked: one-line ServingError naming the bad value."""
    if args.lanes_per_gpu < 1:
        raise ServingError(f"--lanes-per-gpu {args.lanes_per_gpu}: expected 1 or more")
    if args.static_chunk < 1:
        raise ServingError(f"--static-chunk {args.static_chunk}: expected 1 or more")
    if args.processes < 1:
        raise ServingError(f"--processes {args.processes}: expected 1 or more")
    todo = []
    for model in args.models.split(","):
        if model not in models.REGISTRY:
            raise ServingError(f"unknown model {model!r}; known: {', '.join(models.REGISTRY)}")
        for phase in args.phases.split(","):
            if phase not in models.SIZES:
                raise ServingError(f"unknown phase {phase!r}; expected decode or prefill")
            sizes = args.decode_sizes if phase == "decode" else args.prefill_sizes
            if not all(s.strip().isdigit() and int(s) > 0 for s in sizes.split(",")):
                raise ServingError(f"--{phase}-sizes {sizes!r}: expected positive integers separated by commas")
            for mode in args.modes.split(","):
                if mode not in models.MODES:
                    raise ServingError(f"unknown mode {mode!r}; known: {', '.join(models.MODES)}")
                todo.append((model, phase, mode, sizes))
    return todo


def pending(jobs: list[tuple[str, str, str, str]], records: list[dict[str, Any]], static_chunk: int,
            processes: int = 1) -> list[tuple[str, str, str, str, int]]:
    """The runs still to do, as (model, phase, mode, sizes, process): a dynamic mode whole in each of ``processes``
    processes unless that process's records are there (every process of every job before the next process's, so a
    budget spent leaves whole rounds); a static mode's missing sizes, in chunks (process 0)."""
    done: dict[tuple[str, str, str, int], set[int]] = {}
    for r in records:
        done.setdefault((r["model"], r["phase"], r["mode"], int(r.get("process", 0))), set()).add(int(r["size"]))
    out = []
    for process in range(processes):
        for model, phase, mode, sizes in jobs:
            key = (model, phase, mode, process)
            if not mode.endswith("-static"):
                if key not in done:
                    out.append((model, phase, mode, sizes, process))
            elif process == 0:
                left = [s for s in sizes.split(",") if int(s) not in done.get(key, set())]
                out += [(model, phase, mode, ",".join(left[i:i + static_chunk]), 0)
                        for i in range(0, len(left), static_chunk)]
    return out


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ServingError(f"cannot read {path}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    if not (isinstance(data, list) and all(isinstance(r, dict) and {"model", "phase", "mode", "size"} <= set(r)
                                           for r in data)):
        raise ServingError(f"{path} is not a serving results file (a JSON list of records)")
    return data


def launch(args: argparse.Namespace, job: tuple[str, str, str, str, int], device: str | None,
           deadline: float | None) -> list[dict[str, Any]] | None:
    """One worker -> its records, each with its ``process``; None when the deadline stopped it (left for the next
    call)."""
    got = _launch(args, job, device, deadline)
    return None if got is None else [{**r, "process": job[4]} for r in got]


def _launch(args: argparse.Namespace, job: tuple[str, str, str, str, int], device: str | None,
            deadline: float | None) -> list[dict[str, Any]] | None:
    model, phase, mode, sizes, process = job
    tmp = Path(tempfile.mkdtemp(prefix="serving-"))
    env, waited_file = worker_env(tmp, device, args.lanes_per_gpu, args.out)
    chunk = f"__{sizes.replace(',', '-')}" if mode.endswith("-static") else f"__p{process}" if process else ""
    log = args.out / "logs" / f"{model}__{phase}__{mode}{chunk}.log"
    cmd = [sys.executable, "-m", "benchmarks.serving.worker", "--model", model, "--phase", phase, "--mode", mode,
           "--sizes", sizes, "--repeats", str(args.repeats), "--json-out", str(tmp / "records.json")]

    def written() -> list[dict[str, Any]]:  # the worker writes its records after every size
        try:
            return json.loads((tmp / "records.json").read_text())
        except (OSError, ValueError):
            return []

    try:
        with open(log, "w") as out:
            # its own process group: a timeout kills Inductor's compile workers with it
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0)
            outcome = wait_own_time(proc, args.run_timeout, deadline, waited_file)
            if outcome is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                reap(proc, killed=True)
                # a static mode keeps the sizes it finished; a dynamic mode's compile_s needs every size
                finished = written() if mode.endswith("-static") else []
                if outcome == "deadline":
                    return finished or None
                left = sorted(set(map(int, sizes.split(","))) - {r["size"] for r in finished})
                error = timeout_error(args.run_timeout, waited_file)
                return finished + [{"model": model, "phase": phase, "mode": mode, "size": s, "status": "timeout",
                                    "error": error} for s in left]
        got = written()
        left = sorted(set(map(int, sizes.split(","))) - {r["size"] for r in got})
        return got + [{"model": model, "phase": phase, "mode": mode, "size": s, "status": "error",
                       "error": f"worker wrote no record; see {log.relative_to(args.out)}"} for s in left]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except (ServingError, ZooError) as exc:
        print(f"serving: error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    results = args.out / "results.json"
    records = load(results)
    if args.report_only:
        if not records:
            raise ServingError(f"--report-only: no records in {results}")
        report.write_report(records, args.out)
        return 0
    jobs: queue.Queue = queue.Queue()
    wanted = _check(args)
    todo = pending(wanted, records, args.static_chunk, args.processes)
    for job in todo:
        jobs.put(job)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    write_json(str(results), records)
    deadline = None if args.budget_s is None else time.monotonic() + args.budget_s
    lock = threading.Lock()
    bar = tqdm(total=len(todo), unit="run", file=sys.stderr, disable=None)

    def lane(device: str | None) -> None:
        while deadline is None or time.monotonic() < deadline:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                return
            got = launch(args, job, device, deadline)
            with lock:
                if got is not None:
                    records.extend(got)
                    write_json(str(results), records)
                    ok = sum(r.get("status") == "ok" for r in got)
                    bar.write(f"{' '.join(job[:3])}: {ok}/{len(got)} sizes ok")
                bar.update(1)

    threads = [threading.Thread(target=lane, args=(d,), daemon=True) for d in lane_devices(args.lanes)
               for _ in range(args.lanes_per_gpu)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    report.write_report(records, args.out)
    left = len(pending(wanted, records, args.static_chunk, args.processes))
    if left:
        print(f"serving: {left} run(s) left (budget spent): rerun the same command to continue", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
