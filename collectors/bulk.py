"""The bulk collector: time every candidate of a space for every corpus problem on the local GPU(s).

Resumable (whole problems per atomic part, finished ids skipped on restart), shardable (``--shard i/n``), one
worker process per GPU (``--gpus all``), Triton binaries precompiled in parallel into Triton's disk cache
before timing starts.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.core.candidate import Candidate
from predictor.core.device import DeviceInfo
from predictor.core.problem import Problem, problem_from_row
from predictor.artifacts.schema import SCHEMA_VERSION

from .bulk_compile import BackgroundCompiler, compile_key, order_by_shared_binaries
from .selection import Shard, load_problems, select_problems
from .store import PartWriter

log = logging.getLogger(__name__)


def _status_of(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc)
    if name == "OutOfResources" or "out of resource" in text.lower():
        return "resources"
    if "out of memory" in text.lower():
        return "resources"
    return "compile_error"


def measure_problem(p: Problem, candidates: list[Candidate], device: Any, flush: Any, num_sms: int,
                    reps: int, seed: int, screen: float | None = None) -> list[dict]:
    """Warm up + check every candidate, then time the correct ones round-robin. One dict per candidate.

    ``screen``: time every correct candidate once (warm, L2 flushed) and give the full ``reps`` only to those
    within ``screen`` x the fastest; the others keep that single measurement (``reps`` = 1). Exhaustive spaces
    hold ~2400 configs per problem, most several times slower than the best, and their repeated launches were
    most of the GPU time; a 3x-slower config is never in anyone's top-k, so one sample is label enough for it.
    """
    import torch

    from .runners import REL_TOLERANCE, make_operands, make_runner, relative_error
    from .timing import summarise, time_round_robin

    ops = make_operands(p, device, seed)
    results: list[dict] = []
    good: list[tuple[int, Any]] = []
    for i, c in enumerate(candidates):
        rec = {"status": "ok", "time_us": np.nan, "time_us_iqr": np.nan, "reps": 0}
        try:
            run = make_runner(p, c, ops, num_sms)
            ops.out.fill_(float("nan") if ops.out.is_floating_point() else -1)  # poison: unwritten output fails
            run()
            torch.cuda.synchronize()
            err = relative_error(ops.out, ops.reference)
            # rounding error of long reductions grows with k (cuBLAS split-K, fp16 partials)
            if not err <= REL_TOLERANCE[p.dtype] * max(1.0, p.k / 4096):
                rec["status"] = "wrong_result"
                log.warning("%s %s: wrong result (relative error %.3g)", p.problem_id, c.key, err)
            else:
                if screen is None:
                    run()  # second warm-up run, so first-launch costs stay out of the timing (screening is one)
                good.append((i, run))
        except Exception as exc:
            rec["status"] = _status_of(exc)
            log.debug("%s %s: %s", p.problem_id, c.key, exc)
            torch.cuda.synchronize()
        results.append(rec)
    if good and screen is not None:
        first = time_round_robin([run for _, run in good], flush, reps=1)[0][:, 0]
        cutoff = screen * float(first.min())
        for (i, _), t in zip(good, first):
            if t > cutoff:
                results[i].update(time_us=float(t), time_us_iqr=np.nan, reps=1)
        good = [g for g, t in zip(good, first) if t <= cutoff]
    if good:
        times, method = time_round_robin([run for _, run in good], flush, reps=reps)
        med, iqr = summarise(times)
        for (i, _), t, q in zip(good, med, iqr):
            results[i].update(time_us=float(t), time_us_iqr=float(q), reps=reps)
    del ops
    return results


def _rows(p: Problem, family_tag: str, candidates: list[Candidate], results: list[dict], env: dict) -> list[dict]:
    base = {**p.to_dict(), "family_tag": family_tag}
    return [{**base, **c.to_dict(), **r, **env, "inductor_rank": rank}
            for rank, (c, r) in enumerate(zip(candidates, results))]


def collect_loop(todo: pd.DataFrame, candidates_of: Any, measure: Any, writer: PartWriter, env: dict,
                 desc: str = "collect", position: int = 0, before_measure: Any = None, should_stop: Any = None,
                 on_problem: Any = None) -> int:
    """Measure each problem and hand whole problems to the writer; on any interruption the problems already
    measured are still written (they are complete), and the part in progress never appears half-written.

    ``should_stop()``: asked before each problem; True ends the loop there (a time budget: ``calibrate``).
    ``on_problem(problem_id)``: called once a problem's rows are handed to the writer."""
    from tqdm import tqdm

    start = time.time()
    n_rows = 0
    bar = tqdm(todo.itertuples(index=False), total=len(todo), desc=desc, unit="problem", position=position)
    try:
        for row in bar:
            if should_stop is not None and should_stop():
                log.info("stopping before %s: the budget is spent", row.problem_id)
                break
            p = problem_from_row(row)
            cands = candidates_of(p)
            if before_measure is not None:
                before_measure(p, cands)
            results = measure(p, cands)
            if results is None:  # the problem could not be set up; logged by measure, retried on a later run
                continue
            writer.add_problem(_rows(p, row.family_tag, cands, results, env))
            n_rows += len(cands)
            if on_problem is not None:
                on_problem(p.problem_id)
            bar.set_postfix(rows_per_s=f"{n_rows / max(time.time() - start, 1e-9):.0f}")
    finally:
        writer.flush()
    return n_rows


def collect_worker(corpus: str, out: str, space: str, shard: Shard, gpu: int, reps: int, limit: int | None,
                   tma: bool, seed: int, position: int = 0, query: str | None = None,
                   order: list[str] | None = None, compiler: BackgroundCompiler | None = None,
                   screen: float | None = None, should_stop: Any = None, on_problem: Any = None,
                   part_every: int = 50) -> dict:
    """Collect one shard on one GPU; returns throughput figures."""
    import torch
    import triton

    from predictor.spaces import enumerate_space

    from .timing import L2Flusher

    import signal
    import sys

    # `timeout`/`kill` send SIGTERM: turn it into SystemExit so collect_loop's finally writes finished problems
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    device_info = DeviceInfo.from_metadata(json.loads((Path(out) / "device.json").read_text()))
    num_sms = device_info.sm_count
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    todo = select_problems(corpus, shard, out, query, None)
    if order is not None:
        pending = set(todo.problem_id)
        todo = todo.set_index("problem_id", drop=False).loc[[pid for pid in order if pid in pending]]
    if limit is not None:
        todo = todo.head(limit)
    env = {"collector": "bulk", "gpu": device_info.gpu, "cc": device_info.cc, "torch": torch.__version__.split("+")[0],
           "triton": triton.__version__, "schema_version": SCHEMA_VERSION, "space": space}
    meta = json.loads((Path(out) / "run.json").read_text())
    writer = PartWriter(out, f"part-s{shard.index}of{shard.count}-g{gpu}", meta, every=part_every)
    flush = L2Flusher(dev)
    # warm the GPU up so clocks have ramped before the first label
    x = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    t_end = time.time() + 1.0
    while time.time() < t_end:
        x @ x
    torch.cuda.synchronize()
    start = time.time()
    skipped: list[str] = []

    def measure(p: Problem, cands: list[Candidate]) -> list[dict] | None:
        try:
            return measure_problem(p, cands, dev, flush, num_sms, reps, seed, screen)
        except RuntimeError as exc:
            # one problem that cannot even be set up must not stop a long run, unless the CUDA context is broken
            torch.cuda.synchronize()  # raises again on a sticky error (illegal address...), ending the run
            log.warning("%s: skipped, setup failed: %s", p.problem_id, str(exc).splitlines()[0][:200])
            skipped.append(p.problem_id)
            return None

    wait = None
    if compiler is not None:
        wait = lambda p, cands: compiler.wait(compile_key(p, c) for c in cands)
    n_rows = collect_loop(todo, lambda p: enumerate_space(p, space, device_info, tma=tma), measure, writer, env,
                          desc=f"gpu{gpu} {space}", position=position, before_measure=wait,
                          should_stop=should_stop, on_problem=on_problem)
    elapsed = time.time() - start
    return {"gpu": gpu, "problems": len(todo) - len(skipped), "skipped": skipped, "rows": n_rows, "seconds": elapsed}


def seed_from_dataset(dataset: str | Path, out: str | Path, gpu_name: str, cc: str) -> int:
    """Continue a committed dataset: copy it into the parts folder as a finished part and reuse its device and
    run metadata, so new parts carry the same metadata and finished problems are skipped. Refuses a dataset
    measured on another GPU. Returns the number of problems already done."""
    from predictor.artifacts.schema import read_dataset

    df = read_dataset(dataset)
    meta = dict(df.attrs["metadata"])
    if (meta.get("gpu"), meta.get("cc")) != (gpu_name, cc):
        raise ValueError(f"--resume-from {dataset}: measured on {meta.get('gpu')} (cc {meta.get('cc')}), "
                         f"this GPU is {gpu_name} (cc {cc})")
    out_path = Path(out)
    out_path.mkdir(parents=True, exist_ok=True)
    target = out_path / "part-seed-00000.parquet"
    if not target.exists():
        shutil.copyfile(dataset, target)
    for name, content in (("device.json", {"device": meta["device"]}), ("run.json", meta)):
        if not (out_path / name).exists():
            (out_path / name).write_text(json.dumps(content, indent=1))
    return int(df["problem_id"].nunique())


def prepare_run(corpus: str, out: str, space: str, tma: bool, reps: int) -> dict:
    """Measure the device once per output folder (reused on resume so every part carries the same metadata)."""
    import torch
    import triton

    from .corpus import corpus_sha256
    from .timing import measure_device_peaks

    out_path = Path(out)
    out_path.mkdir(parents=True, exist_ok=True)
    dev_file = out_path / "device.json"
    if not dev_file.exists():
        bandwidth, peaks = measure_device_peaks(torch.device("cuda", 0))
        info = DeviceInfo.from_torch(0, mem_bandwidth_gbs=round(bandwidth, 1),
                                     peak_tflops={k: round(v, 1) for k, v in peaks.items()})
        dev_file.write_text(json.dumps({"device": info.to_dict()}, indent=1))
    device = json.loads(dev_file.read_text())["device"]
    run_file = out_path / "run.json"
    if not run_file.exists():
        meta = {"schema_version": SCHEMA_VERSION, "gpu": device["gpu"], "cc": device["cc"],
                "torch": torch.__version__.split("+")[0], "triton": triton.__version__,
                "corpus_sha256": corpus_sha256(load_problems(corpus)), "device": device, "space": space, "tma": tma,
                "reps": reps, "collector": "bulk", "timing": "L2 flush + CUDA events, round-robin, CUDA graph"}
        run_file.write_text(json.dumps(meta, indent=1))
    return json.loads(run_file.read_text())


def check_count(value: int | None, option: str, what: str = "problems") -> None:
    """``--limit``/``--sample``: None (all) or a positive count; a negative one would silently mean "all but"."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{option} {value}: must be a positive number of {what} (leave it out for all)")


def check_collect_args(corpus: str, shard: str, limit: int | None, reps: int, gpus: str, screen: float | None) -> Shard:
    """Everything about a collect request that can be wrong without a GPU, checked before looking for one."""
    check_count(limit, "--limit")
    if reps < 10:
        raise ValueError(f"--reps {reps}: labels need the median of at least 10 runs")
    if screen is not None and not screen >= 1.5:
        raise ValueError(f"--screen {screen}: must be 0 (off) or >= 1.5 (else near-best candidates lose reps)")
    if gpus != "all" and not all(g.strip().isdigit() for g in gpus.split(",")):
        raise ValueError(f"--gpus {gpus!r}: must be 'all' or comma-separated GPU indices, e.g. 0,1")
    base = Shard.parse(shard)
    load_problems(corpus)  # exists, is a readable (and intact) corpus with the problem columns
    return base


def collect(corpus: str, out: str, space: str = "default", shard: str = "0/1", gpus: str = "0", reps: int = 10,
            limit: int | None = None, tma: bool = True, seed: int = 0, precompile_workers: int | None = None,
            query: str | None = None, resume_from: str | None = None, screen: float | None = None,
            order: list[str] | None = None, should_stop: Any = None, on_problem: Any = None,
            part_every: int = 50) -> list[dict]:
    """``order``: collect only these problem ids, in this order (``calibrate``'s plan) instead of the cheapest-first
    order of the whole corpus; ``should_stop``/``on_problem``: see :func:`collect_loop` (one GPU only)."""
    import torch

    from predictor.spaces import enumerate_space

    base = check_collect_args(corpus, shard, limit, reps, gpus, screen)  # before the GPU: wrong input is wrong anywhere
    if not torch.cuda.is_available():
        raise RuntimeError("collect needs a CUDA GPU and none is visible (torch.cuda.is_available() is False)")
    if resume_from:
        props = torch.cuda.get_device_properties(0)
        done = seed_from_dataset(resume_from, out, props.name, f"{props.major}.{props.minor}")
        log.info("resuming from %s: %d problems already labelled", resume_from, done)
    gpu_ids = list(range(torch.cuda.device_count())) if gpus == "all" else [int(g) for g in gpus.split(",")]
    if (should_stop is not None or on_problem is not None) and len(gpu_ids) != 1:
        raise ValueError("a time-boxed collection (should_stop/on_problem) runs on one GPU")
    meta = prepare_run(corpus, out, space, tma, reps)
    device_info = DeviceInfo.from_metadata(meta)

    problems = select_problems(corpus, base, out, query, None)
    if order is not None:
        problems = problems[problems["problem_id"].isin(set(order))]
    keys_of = {}
    for row in problems.itertuples(index=False):
        p = problem_from_row(row)
        keys_of[row.problem_id] = {k for k in (compile_key(p, c) for c in enumerate_space(p, space, device_info, tma=tma)) if k}
    if order is None:
        order = order_by_shared_binaries(keys_of)
    else:
        order = [pid for pid in dict.fromkeys(order) if pid in keys_of]
    if limit is not None:
        order = order[: limit * len(gpu_ids)]
    ordered_keys = list(dict.fromkeys(k for pid in order for k in sorted(keys_of[pid], key=str)))
    workers = precompile_workers if precompile_workers is not None else max(1, (os.cpu_count() or 2) - 2)
    log.info("%d problems to collect need %d distinct Triton binaries", len(order), len(ordered_keys))
    compiler = BackgroundCompiler(ordered_keys, workers, device_info.sm_count)
    try:
        if len(gpu_ids) == 1:
            return [collect_worker(corpus, out, space, base, gpu_ids[0], reps, limit, tma, seed, 0, query, order, compiler,
                                   screen, should_stop, on_problem, part_every)]
        # several GPUs: compile everything first (worker processes cannot share the futures), then one process
        # per GPU, each taking its sub-shard of the base shard in the same cheap-first order
        compiler.wait(ordered_keys, desc="compile (all GPUs' binaries, before timing)")
        log.info("%d of %d binaries failed to compile (their candidates are recorded as failures)", compiler.failed,
                 len(ordered_keys))
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        # on SIGTERM (`timeout`) the workers must write their finished problems before this process returns,
        # else a script that merges right after finds nothing: stop them and wait for their final flush
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        with ProcessPoolExecutor(max_workers=len(gpu_ids), mp_context=ctx) as pool:
            futures = [pool.submit(collect_worker, corpus, out, space,
                                   Shard(base.index + base.count * j, base.count * len(gpu_ids)), g, reps, limit, tma,
                                   seed, j, query, order, None, screen) for j, g in enumerate(gpu_ids)]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for child in mp.active_children():
                    child.terminate()  # SIGTERM: the worker's handler flushes its part, then exits
                raise
    finally:
        compiler.close()
