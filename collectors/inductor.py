"""The Inductor-faithful collector: let max-autotune time every choice itself and record what it saw.

For each problem we compile ``a @ b`` (or addmm/bmm/_int_mm/_scaled_mm) with ``mode="max-autotune-no-cudagraphs"`` and
fresh caches, and a feedback saver records every choice with two times: Inductor's own benchmark
(``inductor_bench_us``) and the profiler's kernel-only re-timing (``time_us``, DESIGN: Inductor's benchmark
overstates small aten GEMMs). The compile wall time goes to ``compile_s``. Rows use the bulk schema with
``collector="inductor"`` so both label sets can be compared problem by problem.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from predictor.core.candidate import from_choice_caller
from predictor.core.problem import Problem
from predictor.artifacts.schema import SCHEMA_VERSION

from .store import PartWriter, finished_problem_ids

log = logging.getLogger(__name__)


def _reset_choices_handler() -> None:
    """Inductor caches its InductorChoices per thread; drop it so the current config is honoured."""
    from torch._inductor import virtualized

    key = virtualized._choices._key
    if hasattr(virtualized.threadlocal, key):
        delattr(virtualized.threadlocal, key)


def _compiled_call(p: Problem, ops: Any):
    import torch

    if p.op == "mm":
        fn = lambda a, b: a @ b
        args = (ops.a, ops.b)
    elif p.op == "bmm":
        fn = torch.bmm
        args = (ops.a, ops.b)
    elif p.op == "addmm":
        fn = torch.addmm
        args = (ops.bias, ops.a, ops.b)
    elif p.op == "int_mm":
        fn = torch._int_mm
        args = (ops.a, ops.b)
    else:  # fp8 scaled_mm, as torchao calls it (runners.FP8_FAST_ACCUM); Inductor lowers it with tuned_scaled_mm
        from .runners import FP8_FAST_ACCUM

        out_dtype = ops.out.dtype
        fn = lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=out_dtype, use_fast_accum=FP8_FAST_ACCUM)
        args = (ops.a, ops.b, ops.scale_a, ops.scale_b)
    return fn, args


def autotune_problem(p: Problem, device: Any, tma: bool, seed: int = 0, backends: str = "ATEN,TRITON",
                     cutlass_max_configs: int | None = None) -> tuple[list[dict], float]:
    """Compile one problem under max-autotune; return (one record per timed choice, compile seconds)."""
    import torch
    from torch._inductor import config as icfg
    from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers

    from .runners import make_operands

    records: list[dict] = []

    def saver(timings, name, input_nodes, choices, profiled_fn, *rest) -> None:
        try:
            profiled = profiled_fn() or {}
        except Exception as exc:  # profiling can fail for subgraph choices; keep Inductor's time then
            log.warning("%s: profiler re-timing failed (%s)", p.problem_id, exc)
            profiled = {}
        for rank, choice in enumerate(choices):
            try:
                cand = from_choice_caller(choice.name, getattr(choice, "description", "") or "")
            except ValueError as exc:
                log.warning("%s: skipping unknown choice (%s)", p.problem_id, exc)
                continue
            bench = timings.get(choice, float("inf"))
            prof = profiled.get(choice)
            ok = np.isfinite(bench) and bench > 0
            records.append({**cand.to_dict(), "inductor_rank": rank,
                            "inductor_bench_us": float(bench) * 1e3 if ok else np.nan,
                            "time_us": float(prof) * 1e3 if (ok and prof) else (float(bench) * 1e3 if ok else np.nan),
                            "status": "ok" if ok else "compile_error"})

    ops = make_operands(p, device, seed)
    fn, args = _compiled_call(p, ops)
    clear_feedback_savers()
    add_feedback_saver(saver)
    _reset_choices_handler()
    torch._dynamo.reset()
    start = time.time()
    try:
        patches = {"force_disable_caches": True, "triton.enable_persistent_tma_matmul": tma,
                   "max_autotune_gemm_backends": backends}
        if cutlass_max_configs is not None:
            patches["cutlass.cutlass_max_profiling_configs"] = cutlass_max_configs
        with icfg.patch(patches):
            torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)(*args)
        torch.cuda.synchronize()
    finally:
        clear_feedback_savers()
    return records, time.time() - start


def collect_inductor(problems: Any, out: str, gpu_name: str, cc: str, metadata: dict, tma: bool = True,
                     limit: int | None = None, part_prefix: str = "inductor", backends: str = "ATEN,TRITON",
                     cutlass_max_configs: int | None = None) -> int:
    """Autotune each problem (a DataFrame with Problem fields + family_tag); resumable like the bulk collector."""
    import torch
    import triton
    from tqdm import tqdm

    from predictor.core.problem import problem_from_row

    dev = torch.device("cuda")
    done = finished_problem_ids(out)
    todo = problems[~problems["problem_id"].isin(done)]
    if limit is not None:
        todo = todo.head(limit)
    writer = PartWriter(out, part_prefix, metadata, every=1)  # one prefix per process: parts never collide
    env = {"collector": "inductor", "gpu": gpu_name, "cc": cc, "torch": torch.__version__.split("+")[0],
           "triton": triton.__version__, "schema_version": SCHEMA_VERSION, "reps": 0, "time_us_iqr": np.nan}
    n = 0
    for row in tqdm(todo.itertuples(index=False), total=len(todo), desc="inductor autotune", unit="problem"):
        p = problem_from_row(row)
        records, seconds = autotune_problem(p, dev, tma, backends=backends, cutlass_max_configs=cutlass_max_configs)
        base = {**p.to_dict(), "family_tag": row.family_tag, **env, "compile_s": seconds}
        seen: set[str] = set()
        rows = []
        for rec in records:  # one row per candidate (multi-template duplicates keep the first)
            if rec["candidate"] not in seen:
                seen.add(rec["candidate"])
                rows.append({**base, **rec})
        if rows:
            writer.add_problem(rows)
            n += 1
        else:
            log.warning("%s: Inductor timed no choices (single choice or M=1 path)", p.problem_id)
    writer.flush()
    return n


def run_inductor_collection(corpus: str, out: str, query: str | None = None, limit: int | None = None,
                            sample: int | None = None, seed: int = 0, ids: list[str] | None = None,
                            shard: str = "0/1", backends: str = "ATEN,TRITON", cutlass_wheel: str | None = None,
                            cutlass_max_configs: int | None = None, skip_dataset: str | None = None) -> int:
    """CLI entry: choose problems from the corpus and autotune them with Inductor (device metadata as bulk)."""
    import torch
    import triton

    from predictor.core.device import DeviceInfo

    from .bulk import check_count
    from .selection import Shard, select_problems
    from .corpus import corpus_sha256, load_corpus

    # what can be wrong without a GPU first
    check_count(limit, "--limit")
    check_count(sample, "--sample")
    check_count(cutlass_max_configs, "--cutlass-max-configs", "configs")
    Shard.parse(shard)
    backends = backends.upper()
    unknown = set(backends.split(",")) - {"ATEN", "TRITON", "CUTLASS"}
    if unknown:
        raise ValueError(f"--backends {backends}: unknown {', '.join(sorted(unknown))} (ATEN, TRITON, CUTLASS)")
    load_corpus(corpus)
    if not torch.cuda.is_available():
        raise RuntimeError("collect-inductor needs a CUDA GPU and none is visible")
    if "CUTLASS" in backends:
        from torch._inductor import config as icfg

        from .cutlass_env import prepare_cutlass_root

        if cutlass_wheel:
            icfg.cutlass.cutlass_dir = str(prepare_cutlass_root(cutlass_wheel))
        from torch._inductor.codegen.cutlass.utils import try_import_cutlass

        if not try_import_cutlass():
            raise RuntimeError(f"--backends {backends}: Inductor cannot import CUTLASS from "
                               f"{icfg.cutlass.cutlass_dir}; pass --cutlass-wheel nvidia_cutlass-*.whl")
    # --shard splits the problems by id, so one process per GPU (CUDA_VISIBLE_DEVICES) shares a list
    problems = select_problems(corpus, Shard.parse(shard), out, query, None)
    if ids is not None:
        unknown = sorted(set(ids) - set(load_corpus(corpus).problem_id))
        if unknown:
            raise ValueError(f"--ids: {len(unknown)} ids are not in {corpus} (first: {unknown[0]})")
        pending = set(problems.problem_id)
        problems = problems.set_index("problem_id", drop=False).loc[[i for i in ids if i in pending]]
    if skip_dataset:  # problems an earlier run already committed (e.g. datasets/<gpu>/inductor.parquet)
        from predictor.artifacts.schema import read_dataset

        problems = problems[~problems["problem_id"].isin(set(read_dataset(skip_dataset, columns=["problem_id"]).problem_id))]
    if sample is not None and sample < len(problems):
        problems = problems.sample(n=sample, random_state=seed)
    Path(out).mkdir(parents=True, exist_ok=True)
    info = DeviceInfo.from_torch(0)
    meta = {"schema_version": SCHEMA_VERSION, "gpu": info.gpu, "cc": info.cc, "torch": torch.__version__.split("+")[0],
            "triton": triton.__version__, "corpus_sha256": corpus_sha256(load_corpus(corpus)), "device": info.to_dict(),
            "collector": "inductor", "timing": "Inductor benchmark (inductor_bench_us) + profiler kernel time (time_us)",
            "backends": backends, "cutlass_max_profiling_configs": cutlass_max_configs}
    part = Shard.parse(shard)
    prefix = "inductor" if part.count == 1 else f"inductor-s{part.index}of{part.count}"
    return collect_inductor(problems, out, info.gpu, info.cc, meta, tma=True, limit=limit, part_prefix=prefix,
                            backends=backends, cutlass_max_configs=cutlass_max_configs)
