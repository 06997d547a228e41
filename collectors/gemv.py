"""GEMV labels: one-row GEMMs (batch-1 decode) timed as cuBLAS and as Inductor's fused reduction.

    python -m collectors.gemv --out datasets/nvidia-h100/gemv.parquet [--cdt-every 3]

Per problem (the weight shapes of real decoders' layers and vocabulary heads, ``CORPUS``), three candidates:
``aten/gemv`` (``F.linear`` / ``x @ w``: what plain ``torch.compile`` runs), ``gemv/reduction`` (the reduction
form ``predictor.runtime.lowerings.gemv`` lowers to, with Inductor's own reduction heuristic: what ``predictor.compile``
runs) and ``gemv/reduction-cdt`` (the same after Inductor's coordinate-descent search: what
``coordinate_descent_tuning`` finds, on every ``--cdt-every``-th problem since each costs seconds). Each is checked
against the fp32 product and timed round-robin in one CUDA graph with L2 flushed before every launch
(``collectors.timing``); median and IQR of ``--reps``. Written after every problem (resumable: problems already
in ``--out`` are skipped).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from collectors.selection import Shard

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1

# (group: the model the widths come from, n, k): q/kv/gate-up/down projections and the vocabulary head
_MODELS = {
    "tinyllama-1.1b": [(2048, 2048), (256, 2048), (5632, 2048), (2048, 5632), (32000, 2048)],
    "llama3-8b": [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096)],
    "qwen2-1.5b": [(1536, 1536), (256, 1536), (8960, 1536), (1536, 8960), (151936, 1536)],
    "qwen2.5-0.5b": [(896, 896), (128, 896), (4864, 896), (896, 4864), (151936, 896)],
    "phi3-mini": [(9216, 3072), (3072, 3072), (16384, 3072), (3072, 8192), (32064, 3072)],
    "gpt2": [(2304, 768), (768, 768), (3072, 768), (768, 3072), (50257, 768)],
    "gemma-2b": [(2048, 2048), (256, 2048), (32768, 2048), (2048, 16384), (256000, 2048)],
    "mistral-7b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (32768, 4096)],
}
# (dtype, layout of B): F.linear weights are (n, k) row-major, i.e. B = w.t() column-major; GPT-2's Conv1D
# multiplies by a (k, n) row-major weight
_VARIANTS = {"tinyllama-1.1b": [("bfloat16", "col"), ("float16", "col")], "llama3-8b": [("bfloat16", "col")],
             "qwen2-1.5b": [("float16", "col"), ("bfloat16", "col")], "qwen2.5-0.5b": [("bfloat16", "col")],
             "phi3-mini": [("bfloat16", "col")], "gpt2": [("float16", "row"), ("float16", "col")],
             "gemma-2b": [("bfloat16", "col")], "mistral-7b": [("bfloat16", "col"), ("float32", "col")]}


def corpus() -> list[dict[str, Any]]:
    """Every problem: one row (m=1), weight (n, k), dtype, B's layout, the model it comes from."""
    rows = []
    for group, shapes in _MODELS.items():
        for dtype, layout in _VARIANTS[group]:
            for n, k in shapes:
                rows.append({"op": "mm", "b": 1, "m": 1, "n": n, "k": k, "dtype": dtype, "out_dtype": dtype,
                             "layout_a": "row", "layout_b": layout, "family_tag": f"gemv:{group}"})
    return rows


def problem_id(p: dict[str, Any]) -> str:
    key = "|".join(str(p[f]) for f in ("op", "b", "m", "n", "k", "dtype", "layout_a", "layout_b") if f in p)
    if "active" in p:  # grouped GEMMs routing fewer rows than experts (collectors/grouped_mm.py)
        key += f"|active={p['active']}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _operands(p: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    dtype = getattr(torch, p["dtype"])
    x = torch.randn(1, p["k"], device="cuda", dtype=dtype)
    w = torch.randn(p["n"], p["k"], device="cuda", dtype=dtype) / p["k"] ** 0.5
    b = w.t() if p["layout_b"] == "col" else w.t().contiguous()  # (k, n): strides (1, k) or (n, 1)
    return x, b


TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}  # largest rel_err still "ok", by dtype


def rel_err(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in fp32 (``ref``: the fp32 product)."""
    return ((out.float() - ref).norm() / ref.norm()).item()


def _compiled(options: dict[str, Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``x @ b`` compiled by Inductor with the GEMV decomposition on for every GEMV (nothing else in the graph)."""
    import torch
    from predictor.runtime.lowerings.gemv import gemv_as_reduction

    fn = torch.compile(lambda x, b: x @ b, options=options, dynamic=False)

    def first_call_decomposed(x: Any, b: Any) -> Any:
        with gemv_as_reduction(rule=lambda *problem: True):
            return fn(x, b)
    return first_call_decomposed, fn


def measure(p: dict[str, Any], reps: int, cdt: bool, flush: Any) -> list[dict[str, Any]]:
    """The rows of one problem (one per candidate)."""
    import torch
    from collectors.timing import time_round_robin

    torch._dynamo.reset()
    x, b = _operands(p)
    ref = x.float() @ b.float()
    candidates: dict[str, Callable[[], Any]] = {"aten/gemv": lambda: x @ b}
    options = {"reduction": {}, "reduction-cdt": {"coordinate_descent_tuning": True}}
    for name, opts in options.items():
        if name.endswith("cdt") and not cdt:
            continue
        first, fn = _compiled(opts)
        first(x, b)  # compiles (and, under coordinate descent, searches) with the decomposition on
        candidates[f"gemv/{name}"] = (lambda f: (lambda: f(x, b)))(fn)
    rows, fns = [], []
    tol = TOLERANCE[p["dtype"]]
    for key, fn in candidates.items():
        out = fn()
        torch.cuda.synchronize()
        rel = rel_err(out, ref)
        status = "ok" if rel <= tol else "wrong_result"
        rows.append({**p, "candidate": key, "family": key.split("/")[0], "status": status, "rel_err": rel})
        fns.append(fn)
    times, method = time_round_robin(fns, flush, reps=reps)
    for row, t in zip(rows, times):
        q1, med, q3 = (float(v) for v in pd.Series(t).quantile([0.25, 0.5, 0.75]))
        row.update(time_us=med, time_us_iqr=q3 - q1, reps=reps, timing=method)
    return rows


def environment() -> dict[str, Any]:
    import torch
    import triton

    return {"gpu": torch.cuda.get_device_name(), "cc": ".".join(map(str, torch.cuda.get_device_capability())),
            "torch": torch.__version__, "triton": triton.__version__}


KIND = "gemv_labels"  # the file metadata's "kind": what tells these rows from GEMM-candidate labels


def write(frame: pd.DataFrame, path: Path, env: dict[str, Any], kind: str = KIND) -> None:
    """zstd parquet with page checksums and ``footer_sha256`` (``predictor.artifacts.schema.write_parquet``, as every shipped
    dataset), the environment and ``kind`` in the file metadata; written atomically."""
    import json

    import pyarrow as pa
    from predictor.artifacts.schema import write_parquet

    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = {**(table.schema.metadata or {}), b"kind": json.dumps(kind).encode(),
            b"schema_version": json.dumps(SCHEMA_VERSION).encode(),
            **{key.encode(): json.dumps(value).encode() for key, value in env.items()}}
    write_parquet(table.replace_schema_metadata(meta), path)


def resume_mismatch(done: pd.DataFrame, env: dict[str, Any]) -> str | None:
    """How the rows being resumed differ from this machine (GPU, capability, torch, triton), or None: labels of
    one file must all come from one GPU and one software stack."""
    diffs = [f"on {key} {sorted(set(map(str, done[key])))[0]!r}, this machine has {value!r}"
             for key, value in env.items() if key in done.columns and set(map(str, done[key])) != {str(value)}]
    return "; ".join(diffs) or None


def collect(problems: list[dict[str, Any]], measure_one: Callable[[int, dict[str, Any]], list[dict[str, Any]]],
            out: Path, kind: str, collector: str, aten_key: str, limit: int | None = None,
            seconds: float | None = None, after_each: Callable[[], None] | None = None,
            shard: Shard | None = None) -> int:
    """Measure each problem not yet in ``out`` (``measure_one(index, problem)`` -> rows) and rewrite ``out`` after
    every one, so a run stopped at any point keeps what it measured; a problem that fails is recorded as such
    (status ``compile_error``) and the rest go on. ``seconds``: start no problem once this many have passed (a
    calibration budget); ``after_each()`` once each problem is written (a calibration's ledger); ``shard``: only
    this shard's problems (by problem id), for one of several processes, each with its own ``out`` (``join``).
    Exit status 2 without a GPU."""
    import torch
    from tqdm import tqdm

    from predictor.offline.gemv_eval import read_labels

    if not torch.cuda.is_available():
        print(f"collectors.{collector}: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    env = environment()
    done = read_labels(out, kind) if out.exists() else pd.DataFrame()
    mismatch = resume_mismatch(done, env)
    if mismatch:
        print(f"collectors.{collector}: error: {out} was measured {mismatch}: write to a new file", file=sys.stderr)
        return 2
    seen = set(done["problem_id"]) if len(done) else set()
    problems = [dict(p, problem_id=problem_id(p)) for p in problems]
    mine = (lambda pid: True) if shard is None else shard.owns
    todo = [(i, p) for i, p in enumerate(problems) if p["problem_id"] not in seen and mine(p["problem_id"])][:limit]
    frames = [done] if len(done) else []
    started = time.perf_counter()
    for i, p in tqdm(todo, unit="problem"):
        if seconds is not None and time.perf_counter() - started >= seconds:
            log.info("collectors.%s: budget of %.0f s spent; %s keeps what was measured", collector, seconds, out)
            break
        try:
            rows = measure_one(i, p)
        except Exception as exc:  # noqa: BLE001 - a failed problem is recorded, the rest go on
            log.warning("%s: %s", p["problem_id"], exc)
            rows = [{**p, "candidate": aten_key, "family": "aten", "status": "compile_error",
                     "error": f"{type(exc).__name__}: {exc}"[:300]}]
        frames.append(pd.DataFrame([{**r, **env, "collector": collector, "schema_version": SCHEMA_VERSION}
                                    for r in rows]))
        write(pd.concat(frames, ignore_index=True), out, env, kind)
        if after_each is not None:
            after_each()
    return 0


def join(parts: list[Path], out: Path, kind: str) -> int:
    """Write the shard files ``parts`` of one collection (``collect(shard=...)``) as one labels file ``out``: refused
    (exit status 2, one line) when they come from different GPUs or software stacks, or a problem is in two."""
    from predictor.artifacts.schema import DatasetError
    from predictor.offline.gemv_eval import read_labels

    try:
        frames = [read_labels(str(p), kind) for p in parts]
    except (OSError, DatasetError) as exc:
        print(f"join: error: {exc}", file=sys.stderr)
        return 2
    first = frames[0].attrs["metadata"]
    env = {key: first.get(key) for key in ("gpu", "cc", "torch", "triton") if key in first}
    for path, frame in zip(parts, frames):
        mismatch = resume_mismatch(frame, env)
        if mismatch:
            print(f"join: error: {path} was measured {mismatch} (in {parts[0]})", file=sys.stderr)
            return 2
    owners: dict[str, Path] = {}
    for path, frame in zip(parts, frames):
        for pid in set(frame["problem_id"]):
            if pid in owners:
                print(f"join: error: problem {pid} is in both {owners[pid]} and {path}", file=sys.stderr)
                return 2
            owners[pid] = path
    write(pd.concat(frames, ignore_index=True), out, file_environment(frames[0]), kind)
    return 0


def file_environment(frame: pd.DataFrame) -> dict[str, Any]:
    """The metadata a labels file read by ``read_labels`` was written with (GPU, versions, ...), less what ``write``
    sets itself: what a file rewritten from its rows carries over."""
    return {key: value for key, value in frame.attrs["metadata"].items()
            if key not in ("kind", "schema_version", "footer_sha256", "pandas")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.gemv", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="parquet file (resumed when it exists)")
    parser.add_argument("--reps", type=int, default=20, help="timed runs per candidate")
    parser.add_argument("--cdt-every", type=int, default=3,
                        help="time the coordinate-descent candidate on every N-th problem (0: never)")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many new problems")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    def measure_one(i: int, p: dict[str, Any]) -> list[dict[str, Any]]:
        from collectors.timing import cuda_flusher

        return measure(p, args.reps, bool(args.cdt_every) and i % args.cdt_every == 0, cuda_flusher())

    return collect(corpus(), measure_one, args.out, KIND, "gemv", "aten/gemv", args.limit)


if __name__ == "__main__":
    sys.exit(main())
