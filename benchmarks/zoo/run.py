"""Runner: every (model, mode) in a fresh worker process with empty caches; resumable; results + report.

    python -m benchmarks.zoo.run --models all --modes plain,max-autotune,hook --out OUT/zoo \\
        --lanes auto --run-timeout 240 --budget-s 540

Each lane is one GPU (CUDA_VISIBLE_DEVICES); a model's modes run on one lane in the given order, and lanes take
the next model when free. After every run its record is merged into OUT/results.json (key (model, mode), written
atomically under a lock), so a command killed at any point loses at most the runs in flight; a rerun skips pairs
already recorded (errors and timeouts too, unless --retry-failed). --budget-s is a hard deadline for the command:
no run starts after it and runs still going are stopped there, recorded as "stopped" with how long they had run
(the next call redoes them).
--run-timeout counts a run's own time: what it waits for other lanes' turns on the GPU (--lanes-per-gpu) does not
count, so an autotuning compile is not stopped for the lanes beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from collectors.programs import models
from collectors.programs.harness import waited_seconds, write_json

from . import modes, report
from .processes import _last_line, reap, timeout_error, wait_own_time, worker_env
from .report import STOPPED
from .worker import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
RETRYABLE = ("error", "timeout")


class ZooError(Exception):
    """A one-line user error: printed as ``zoo: error: ...``, exit status 2."""


def load_records(path: Path) -> list[dict[str, Any]]:
    """Records of a results.json: a JSON list of objects with string model and mode; ZooError otherwise."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ZooError(f"cannot read {path}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    ok = isinstance(data, list) and all(
        isinstance(r, dict) and isinstance(r.get("model"), str) and isinstance(r.get("mode"), str) for r in data)
    if not ok:
        raise ZooError(f"{path} is not a zoo results file (a JSON list of records with model and mode)")
    return data


class Store:
    """The results file: records keyed by (model, mode), rewritten whole and atomically after every run. Earlier
    runs of a model and mode (repeats, ``--add-runs``) are kept beside the latest one; the report pools them."""

    def __init__(self, path: Path, records: list[dict[str, Any]]) -> None:
        self.path, self.lock = path, threading.Lock()
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        self.repeats: list[dict[str, Any]] = []
        for r in records:
            if self._hides_result(r):
                continue
            key = (r["model"], r["mode"])
            current = self.records.get(key)
            if current is not None and current.get("status") != STOPPED:  # a placeholder is never a repeat
                self.repeats.append(current)
            self.records[key] = r

    def _hides_result(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` is a stopped run's placeholder where its model and mode have a record with a result
        (loaded beside it, or a retried timeout): such a placeholder is dropped."""
        current = self.records.get((record["model"], record["mode"]))
        return record.get("status") == STOPPED and current is not None and current.get("status") != STOPPED

    def done(self, model: str, mode: str, retry_failed: bool) -> bool:
        """Whether (model, mode) has its result: a run the deadline stopped has none (the next call redoes it)."""
        rec = self.records.get((model, mode))
        return rec is not None and rec.get("status") != STOPPED and not (
            retry_failed and rec.get("status") in RETRYABLE)

    def add(self, record: dict[str, Any]) -> None:
        """Record a run; a stopped run never replaces a record with a result (a retried timeout, say)."""
        with self.lock:
            if self._hides_result(record):
                return
            self.records[(record["model"], record["mode"])] = record
            self.save()

    def all(self) -> list[dict[str, Any]]:
        """Every run: the repeats, then the latest of each model and mode."""
        return self.repeats + list(self.records.values())

    def save(self) -> None:
        write_json(str(self.path), self.all())


class Runner:
    """Launches workers on lanes; tracks live processes so that an interrupt stops them."""

    def __init__(self, args: argparse.Namespace, store: Store, out: Path, deadline: float | None) -> None:
        self.args, self.store, self.out, self.deadline = args, store, out, deadline
        self.stop, self.lock, self.bar, self.done = threading.Event(), threading.Lock(), None, 0
        self.live: set[subprocess.Popen] = set()

    def launch(self, model: str, mode: str, lane: int, device: str | None) -> dict[str, Any] | None:
        """One worker run -> its record (status "stopped" when the budget's deadline cut it); None when the runner
        was interrupted."""
        tmp = Path(tempfile.mkdtemp(prefix="zoo-run-"))
        env, waited_file = worker_env(tmp, device, self.args.lanes_per_gpu, self.args.gpu_lock_dir or self.out)
        log_path = self.out / "logs" / re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model}__{mode}.log")
        cmd = [sys.executable, "-m", "benchmarks.zoo.worker", "--model", model, "--mode", mode,
               "--repeats", str(self.args.repeats), "--json-out", str(tmp / "record.json")]
        started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.monotonic()
        try:
            with open(log_path, "w") as log:
                proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        process_group=0)  # own group: a timeout kills compile workers too
                with self.lock:
                    self.live.add(proc)
                try:
                    outcome = wait_own_time(proc, self.args.run_timeout, self.deadline, waited_file)
                    if outcome is not None:
                        self.kill(proc)
                    code = reap(proc, killed=outcome is not None)
                finally:
                    with self.lock:
                        self.live.discard(proc)
            wall = time.monotonic() - t0
            if self.stop.is_set():
                return None
            written = (tmp / "record.json").exists()  # a run that wrote its record as it was stopped keeps it
            if outcome == "deadline" and not written:
                waited = waited_seconds(waited_file)
                record = {"status": STOPPED, "error": f"stopped by the budget's deadline after {wall - waited:.0f} s "
                          f"of its own ({waited:.0f} s more waiting for other runs' turns on the GPU), before a "
                          f"result; the next call redoes it; last log line: {_last_line(log_path)}"}
            elif outcome == "timeout" and not written:
                record = {"status": "timeout", "error": f"{timeout_error(self.args.run_timeout, waited_file)}; "
                          f"last log line: {_last_line(log_path)}"}
            else:
                try:
                    record = json.loads((tmp / "record.json").read_text())
                except (OSError, ValueError):
                    record = {"status": "error", "error": f"worker exited with code {code} and no record; "
                              f"last log line: {_last_line(log_path)}"}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        zm = models.get(model)
        base = {"model": model, "mode": mode, "family": zm.family, "kind": zm.kind, "dtype": zm.dtype,
                "started_at": started, "schema_version": SCHEMA_VERSION}
        return {**base, **record, "wall_s": round(wall, 2), "lane": lane,
                "log": str(log_path.relative_to(self.out))}

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL the worker's process group (it and Inductor's compile workers: all started by this runner)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def lane(self, lane: int, device: str | None, work: queue.Queue) -> None:
        """Take models from ``work`` until it is empty, the budget is spent, or the runner is stopped."""
        while not self.stop.is_set():
            try:
                model, todo = work.get_nowait()
            except queue.Empty:
                return
            for mode in todo:
                if self.stop.is_set() or (self.deadline is not None and time.monotonic() >= self.deadline):
                    return
                record = self.launch(model, mode, lane, device)
                with self.lock:
                    if record is None:
                        self.bar.write(f"{model:<18} {mode:<26} stopped by an interrupt (not recorded)")
                        continue
                    self.store.add(record)
                    self.done += 1
                    self.bar.write(f"[{self.done}/{self.bar.total}] {format_line(record)}")
                    self.bar.update(1)

    def stop_all(self) -> None:
        self.stop.set()  # lanes start nothing more; live workers are killed
        with self.lock:
            for proc in list(self.live):
                self.kill(proc)


def format_line(r: dict[str, Any]) -> str:
    """One line per finished run: model, mode, compile_s, step_ms, status (and the error, shortened)."""
    def num(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) else "-"
    line = (f"{r['model']:<18} {r['mode']:<26} compile {num(r.get('compile_s'), '8.1f')} s  "
            f"step {num(r.get('step_ms'), '10.3f')} ms  {r.get('status')}")
    return line + (f"  ({str(r['error'])[:160]})" if r.get("error") and r.get("status") != "ok" else "")


def lane_devices(lanes: str) -> list[str | None]:
    """The CUDA_VISIBLE_DEVICES value of each lane ([None] on a machine without CUDA)."""
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    n = (count or 1) if lanes == "auto" else int(lanes) if lanes.isdigit() else 0
    if n < 1 or (count and n > count):
        raise ZooError(f"--lanes {lanes}: expected auto or 1..{max(count, 1)} ({count} visible CUDA GPU(s))")
    if not count:
        return [None] * n
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(count)]
    return ids[:n]


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM (a tool's time limit) -> KeyboardInterrupt in the main thread: stop the workers, keep results."""
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.zoo.run", description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all", help="all (the real models) or name,name")
    p.add_argument("--modes", default="plain,max-autotune,hook", help=f"comma list of: {', '.join(modes.NAMES)}, "
                   "or hook:key=value,... (one such mode per --modes item: separate several with ';')")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--lanes", default="auto", help="GPUs to use in parallel (auto: all visible)")
    p.add_argument("--lanes-per-gpu", type=int, default=1,
                   help="workers per GPU: their compiles overlap, their timings and autotuning benchmarks take turns "
                        "(a lock per GPU); compile times then include the host's contention (records say "
                        "lanes_per_gpu), not the waits for turns (compile_waited_s)")
    p.add_argument("--gpu-lock-dir", type=Path, default=None,
                   help="where the per-GPU lock lives (default --out): runners of other --out folders on the same "
                        "machine given the same folder take turns with these lanes too")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--run-timeout", type=float, default=240.0,
                   help="seconds of its own per (model, mode) run: time it waits for other lanes' turns on the GPU "
                        "does not count")
    p.add_argument("--budget-s", type=float, default=None,
                   help="a hard deadline in seconds: no run starts after it, and runs still going are stopped there "
                        "and recorded as stopped, with how long they had run (the next call redoes them)")
    p.add_argument("--resume-from", type=Path, help="seed the results with an earlier results.json")
    p.add_argument("--add-runs", type=Path, action="append", default=[], metavar="RESULTS",
                   help="add every run in this results.json as a repeat beside the runs of the same model and mode "
                        "(separate processes, e.g. the other order); the report counts their medians")
    p.add_argument("--retry-failed", action="store_true", help="rerun pairs recorded as error or timeout")
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite results.md and the plot (with --add-runs: those runs pooled in, results.json "
                        "unchanged)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args, argv if argv is not None else sys.argv[1:])
    except ZooError as exc:
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 2


def prepare(args: argparse.Namespace, argv: list[str]) -> tuple[list[str], list[str], Store]:
    """Check the models, modes, --out and the results files (one-line ZooError, nothing written before the
    checks pass); record the command in out/meta.json for the report's header."""
    out, results = args.out, args.out / "results.json"
    try:
        model_names = models.names() if args.models == "all" else [m.strip() for m in args.models.split(",")]
        mode_names = modes.split_modes(args.modes)
        for name in model_names:
            models.get(name)
        for name in mode_names:
            modes.parse_mode(name)
    except ValueError as exc:
        raise ZooError(str(exc)) from None
    records = load_records(results) if results.exists() else []
    if args.resume_from is not None:
        seen = {(r["model"], r["mode"]) for r in records if r.get("status") != STOPPED}
        records += [r for r in load_records(args.resume_from) if (r["model"], r["mode"]) not in seen]
    for path in args.add_runs:
        records += load_records(path)
    try:
        (out / "logs").mkdir(parents=True, exist_ok=True)
        meta = json.loads((out / "meta.json").read_text()) if (out / "meta.json").exists() else {}
        commands = meta.get("commands", []) if isinstance(meta, dict) else []
        write_json(str(out / "meta.json"), {"commands": commands + ["python -m benchmarks.zoo.run " + " ".join(argv)]})
    except (OSError, ValueError) as exc:
        raise ZooError(f"cannot write to --out {out}: {getattr(exc, 'strerror', None) or exc}") from None
    store = Store(results, records)
    store.save()  # the merged seed (and a check that results.json can be written) before any run
    return model_names, mode_names, store


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from tqdm import tqdm

    out, results = args.out, args.out / "results.json"
    if args.report_only:
        if not results.exists():
            raise ZooError(f"--report-only: no {results}")
        added = [r for path in args.add_runs for r in load_records(path)]  # pooled in the report only
        report.write_report(load_records(results) + added, out)
        return 0
    if args.lanes_per_gpu < 1:
        raise ZooError(f"--lanes-per-gpu {args.lanes_per_gpu}: expected 1 or more")
    devices = [d for d in lane_devices(args.lanes) for _ in range(args.lanes_per_gpu)]
    model_names, mode_names, store = prepare(args, argv)
    work: queue.Queue = queue.Queue()
    total = 0
    for model in model_names:
        todo = [m for m in mode_names if not store.done(model, m, args.retry_failed)]
        if todo:
            work.put((model, todo))
            total += len(todo)
    deadline = time.monotonic() + args.budget_s if args.budget_s is not None else None
    runner = Runner(args, store, out, deadline)
    print(f"zoo: {total} run(s) to do on {len(devices)} lane(s); results in {results}", flush=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    # disable=None: the bar only on a terminal; a captured log gets the per-run lines alone
    with tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True, disable=None) as runner.bar:
        threads = [threading.Thread(target=runner.lane, args=(i, d, work), daemon=True)
                   for i, d in enumerate(devices)]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                threads[0].join(timeout=0.5)  # a short wait keeps the main thread able to take signals
        except KeyboardInterrupt:
            runner.stop_all()
            print("zoo: interrupted; finished runs are in results.json", file=sys.stderr)
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
    left = sum(1 for m in model_names for mode in mode_names if not store.done(m, mode, False))
    if left:
        print(f"zoo: {left} run(s) left (budget spent): rerun the same command to continue", flush=True)
    path = report.write_report(store.all(), out)
    print(f"zoo: wrote {path} and {out / 'speed_vs_compile.png'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
