"""GEMV block labels: every candidate block config of the GEMV reduction, beside cuBLAS and Inductor's default.

    python -m collectors.gemv_blocks --out datasets/nvidia-h100/gemv_blocks.parquet

Per problem (one-row GEMMs of real decoders, ``corpus()``: K > 1024, where Inductor reduces in a loop, and the
GEMVs of small decoders with K <= 1024, which Inductor reduces in one persistent block, ``short_corpus()``), in the
forms Inductor generates inside a decoder (``form``):

- ``plain``: ``x @ w`` (the attention output projection);
- ``silu_mul``: ``(silu(g) * u) @ w``, SiLU-and-multiply fused ahead of the GEMV (the MLP's down projection);
- ``norm``: ``rmsnorm(h) @ w``, the norm's scaling fused ahead (q, k/v, a fused gate-up weight, the vocabulary head);
- ``add_norm``: ``rmsnorm(h + r) @ w``, the residual add and the norm ahead (a layer's first projections, the head
  after the final norm);
- ``pair``: ``silu(x @ g) * (x @ u)``, the gate and up projections as one kernel of two GEMVs;
- ``norm_pair``, ``add_norm_pair``: the pair after the norm, with or without the residual add.

The work fused ahead is redone by every program, so it moves the winning blocks; the kernel's ``vector_loads``
(``predictor.runtime.lowerings.gemv_blocks.count_vector_loads``: 1 for plain and pair, 2 with SiLU-and-multiply or a norm)
and ``activation_ahead`` (an activation computed in the reduction loop: SiLU-and-multiply) are recorded beside it,
as the runtime sees them. These candidates, timed round-robin in one CUDA graph with L2
flushed before every launch (``collectors.timing``; median and IQR of ``--reps``):

- ``aten/plain``: the function under plain ``torch.compile`` (cuBLAS's GEMV and, for a pair, one pointwise kernel);
- ``gemv/reduction``: the reduction form (``predictor.runtime.lowerings.gemv``) under Inductor's default reduction blocks;
- ``gemv/X{XBLOCK}_R{R0_BLOCK}_w{num_warps}``: the reduction form with each block config of
  ``predictor.runtime.lowerings.gemv_blocks.GRID`` that fits (for a persistent K, ``PERSISTENT_GRID``: ``R0`` names the whole
  K in one block): one kernel compiled with every config, each config's launcher run on the kernel's own arguments.

Outputs are checked against the fp32 function (``rel_err``; a fused pair's block configs write the gate and up
products, not the final output: not checked there, the same kernel source as ``gemv/reduction``). With work fused
ahead, ``aten/plain`` and ``gemv/reduction`` time the whole function and the block configs the GEMV kernel alone.
Written after every problem (resumable). Shardable: ``--shard I/N`` in N processes, each with its own ``--out``,
compiles in parallel while ``$ZOO_GPU_LOCK`` (one file for all) makes their checks and timings take turns on the
GPU; ``--join PART... --out FILE`` then writes the parts as one file::

    export ZOO_GPU_LOCK=/tmp/gpu.lock
    for i in 0 1 2 3; do python -m collectors.gemv_blocks --shard $i/4 --out parts/s$i.parquet & done; wait
    python -m collectors.gemv_blocks --join parts/s*.parquet --out gemv_blocks.parquet
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from collectors.gemv import _MODELS, _VARIANTS, TOLERANCE, collect, join, rel_err
from collectors.selection import Shard
from predictor.runtime.lowerings.gemv_table import MIN_K

log = logging.getLogger(__name__)
KIND = "gemv_block_labels"


FORMS = {  # form -> (source of the function, number of GEMVs in its kernel)
    "plain": ("lambda x, w: x @ w", 1),
    "silu_mul": ("lambda g, u, w: (F.silu(g) * u) @ w", 1),
    "norm": ("lambda h, s, w: rms(h, s) @ w", 1),
    "add_norm": ("lambda h, r, s, w: rms(h + r, s) @ w", 1),
    "pair": ("lambda x, g, u: F.silu(x @ g) * (x @ u)", 2),
    "norm_pair": ("lambda h, s, g, u: F.silu(rms(h, s) @ g) * (rms(h, s) @ u)", 2),
    "add_norm_pair": ("lambda h, r, s, g, u: F.silu(rms(h + r, s) @ g) * (rms(h + r, s) @ u)", 2),
}


def _rms(h: Any, scale: Any) -> Any:
    """RMSNorm as Hugging Face decoders write it (fp32 statistics, scaled in the input dtype)."""
    import torch

    variance = h.float().pow(2).mean(-1, keepdim=True)
    return scale * (h.float() * torch.rsqrt(variance + 1e-6)).to(h.dtype)


def corpus() -> list[dict[str, Any]]:
    """Each model's first dtype, column-major weights: every projection as a plain GEMV, the down projection after
    SiLU-and-multiply, the projections that follow a norm (q, k/v, the head; Phi-3's fused gate-up) after it, and
    the gate-up pair alone and after the norm; the forms after the norm also with the residual add ahead."""
    rows = []
    for group, shapes in _MODELS.items():
        dtype = next(d for d, layout in _VARIANTS[group] if layout == "col")
        base = {"op": "mm", "b": 1, "m": 1, "dtype": dtype, "out_dtype": dtype, "layout_a": "row",
                "layout_b": "col", "family_tag": f"gemv:{group}"}
        (q, kv, gate_up, down, head), hidden = shapes, shapes[0][1]

        def add(form: str, n: int, k: int) -> None:
            if k >= MIN_K:
                rows.append({**base, "n": n, "k": k, "form": form, "weights": FORMS[form][1]})
        for n, k in shapes:
            add("plain", n, k)
        if group != "gpt2":  # GPT-2's MLP is GELU, no gate
            add("silu_mul", *down)
        for n, k in (q, kv, head, *([gate_up] if group == "phi3-mini" else [])):
            add("norm", n, k)
            add("add_norm", n, k)
        if group not in ("phi3-mini", "gpt2"):  # these fuse gate-up in one weight / have none
            add("pair", gate_up[0], hidden)
            add("norm_pair", gate_up[0], hidden)
            add("add_norm_pair", gate_up[0], hidden)
    return rows + short_corpus()


# Small decoders whose hidden width is at most 1024: their GEMVs reduce K in one persistent block. Per model: dtype,
# the projections read after the norm (q or fused qkv, k/v where separate, the vocabulary head), every other
# projection with such a K, and the gate-up width where a SiLU gate pairs two GEMVs (None: GELU, no gate).
_SHORT_MODELS: dict[str, tuple[str, list[tuple[int, int]], list[tuple[int, int]], int | None]] = {
    "qwen2.5-0.5b": ("bfloat16", [(896, 896), (128, 896), (151936, 896)], [(4864, 896)], 4864),
    "smollm2-135m": ("bfloat16", [(576, 576), (192, 576), (49152, 576)], [(1536, 576)], 1536),
    "gpt2": ("float16", [(2304, 768), (50257, 768)], [(768, 768), (3072, 768)], None),
    "opt-350m": ("float16", [(1024, 1024), (50272, 512)], [(4096, 1024)], None),
    "pythia-410m": ("float16", [(3072, 1024), (50304, 1024)], [(1024, 1024), (4096, 1024)], None),
}


def short_corpus() -> list[dict[str, Any]]:
    """The GEMVs with K < ``MIN_K`` (one persistent block: rows per program and warps are the choice), column-major
    weights: every projection plain, the ones after the norm also after it (with and without the residual add),
    and the gate-up pair in its three forms where the model has one."""
    rows = []
    for group, (dtype, after_norm, others, gate_up) in _SHORT_MODELS.items():
        base = {"op": "mm", "b": 1, "m": 1, "dtype": dtype, "out_dtype": dtype, "layout_a": "row",
                "layout_b": "col", "family_tag": f"gemv:{group}"}

        def add(form: str, n: int, k: int) -> None:
            rows.append({**base, "n": n, "k": k, "form": form, "weights": FORMS[form][1]})
        for n, k in [*after_norm, *others]:
            add("plain", n, k)
        for n, k in after_norm:
            add("norm", n, k)
            add("add_norm", n, k)
        if gate_up:
            hidden = after_norm[0][1]
            for form in ("pair", "norm_pair", "add_norm_pair"):
                add(form, gate_up, hidden)
    assert all(r["k"] < MIN_K for r in rows)
    return rows


def problem_op(p: dict[str, Any]) -> str:
    """The labels' ``op`` (part of the problem id): ``mm-x1``/``mm-x2`` for the plain GEMV and the pair (as first
    collected), ``mm-x1-silu_mul`` and so on for the forms with work fused ahead."""
    plain = {"plain": "mm-x1", "pair": "mm-x2"}
    return plain.get(p["form"], f"mm-x{p['weights']}-{p['form']}")


def _operands(p: dict[str, Any]) -> list[Any]:
    import torch

    dtype = getattr(torch, p["dtype"])
    vector = [torch.randn(1, p["k"], device="cuda", dtype=dtype)]
    if p["form"] in ("silu_mul", "add_norm", "add_norm_pair"):  # the up output / the residual
        vector.append(torch.randn(1, p["k"], device="cuda", dtype=dtype))
    if "norm" in p["form"]:
        vector.append(1 + 0.1 * torch.randn(p["k"], device="cuda", dtype=dtype))  # the norm's scale
    weights = [(torch.randn(p["n"], p["k"], device="cuda", dtype=dtype) / p["k"] ** 0.5).t()
               for _ in range(p["weights"])]
    return [*vector, *weights]


def _function(form: str) -> Callable[..., Any]:
    """A new function object with its own code object on every call: Dynamo keeps compiled code per code object,
    so two compiles of one function with equal backends would share (and overwrite) one another's entry."""
    import torch.nn.functional as F

    source = FORMS[form][0]
    return eval(compile(source, f"<gemv {form}>", "eval"), {"F": F, "rms": _rms})  # noqa: S307 - fixed source


@contextlib.contextmanager
def _captured_launchers(sink: list[tuple[list[Any], tuple[Any, ...], dict[str, Any]]]) -> Iterator[None]:
    """While active, a kernel with several configs (the grid) is not benchmarked by Inductor: its autotuner, the
    kernel's own arguments and kwargs are kept in ``sink`` and the first config is taken (Inductor then drops the
    other launchers from the autotuner, so the list is copied); ``measure`` times every
    launcher itself. (Inductor's ``bench`` would time its Python launcher and argument clones too, which for a
    5 us kernel is most of the time.)"""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    original = CachingAutotuner.benchmark_all_configs

    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> dict[Any, float]:
        sink.append((list(self.launchers), args, kwargs))
        return {launcher: float(i) for i, launcher in enumerate(self.launchers)}

    CachingAutotuner.benchmark_all_configs = benchmark_all_configs
    try:
        yield
    finally:
        CachingAutotuner.benchmark_all_configs = original


def _launcher_name(launcher: Any) -> str:
    """The config name of a compiled launcher (a persistent kernel's configs carry no R0_BLOCK: named R0)."""
    from predictor.runtime.lowerings.gemv_table import config_name

    return config_name({"R0_BLOCK": 0, **launcher.config.kwargs, "num_warps": launcher.config.num_warps})


def measure(p: dict[str, Any], reps: int, flush: Any) -> list[dict[str, Any]]:
    """The rows of one problem (one per candidate)."""
    import torch

    from collectors.programs.harness import timing_lock
    from collectors.timing import time_round_robin
    from predictor.runtime.lowerings.gemv import gemv_as_reduction
    from predictor.runtime.lowerings.gemv_table import GRID, PERSISTENT_GRID, GemvKernel, config_name, fits
    from predictor.runtime.lowerings.gemv_blocks import gemv_blocks

    torch._dynamo.reset()
    args = _operands(p)
    ref = _function(p["form"])(*[a.float() for a in args])
    tol = TOLERANCE[p["dtype"]]
    kernel = GemvKernel(p["n"], p["k"], p["dtype"], p["weights"])
    grid = [c for c in (*GRID, *PERSISTENT_GRID) if fits(c, kernel)]
    seen: list[GemvKernel] = []

    def grid_for_this_gemv(k: GemvKernel) -> list[dict[str, int]] | None:
        if (k.n, k.k, k.weights) != (kernel.n, kernel.k, kernel.weights):
            return None
        seen.append(k)
        return grid

    def compiled(decompose: bool, choose: Any = None) -> Callable[..., Any]:
        compiled_fn = torch.compile(_function(p["form"]), dynamic=False)
        if not decompose:
            compiled_fn(*args)
            return compiled_fn
        with gemv_as_reduction(rule=lambda *problem: True), gemv_blocks(choose or (lambda kernel: None)):
            compiled_fn(*args)  # compiles with the decomposition (for the grid: every config, not benchmarked)
        return compiled_fn

    plain = compiled(decompose=False)
    default = compiled(decompose=True)
    captured: list[tuple[list[Any], tuple[Any, ...], dict[str, Any]]] = []
    with _captured_launchers(captured):
        compiled(decompose=True, choose=grid_for_this_gemv)
    names = {config_name(c) for c in grid}
    captured = [c for c in captured  # the GEMV kernel; a norm's own kernel may have several configs too
                if {_launcher_name(la) for la in c[0]} == names]
    if len(captured) != 1 or len(seen) != 1:
        raise RuntimeError(f"expected one GEMV kernel with {len(grid)} configs, captured {len(captured)} "
                           "(Inductor's code generation changed?)")
    launchers, kargs, kkwargs = captured[0]
    out_index = next(i for i, a in enumerate(kargs) if isinstance(a, torch.Tensor) and a.shape == ref.shape
                     and a.data_ptr() not in {t.data_ptr() for t in args})  # the kernel's output buffer (1, n)

    def launch(launcher: Any) -> Callable[[], None]:
        return lambda: launcher(*kargs, **kkwargs, stream=torch.cuda.current_stream().cuda_stream)

    candidates: dict[str, Callable[[], Any]] = {"aten/plain": lambda: plain(*args),
                                                "gemv/reduction": lambda: default(*args)}
    outputs: dict[str, Any] = {}
    for launcher in launchers:
        name = "gemv/" + _launcher_name(launcher)
        candidates[name] = launch(launcher)
    rows = []
    with timing_lock():  # parallel shards: the checks run on the GPU too, so they take their turn with the timing
        for name, call in candidates.items():
            result = call()
            torch.cuda.synchronize()
            outputs[name] = result if result is not None else kargs[out_index].clone()
    if p["weights"] == 2:  # the grid kernel writes gate and up products: compare the fused output of plain/default
        for name in list(outputs):
            if name.startswith("gemv/X"):
                outputs[name] = None
    times, method = time_round_robin(list(candidates.values()), flush, reps=reps)
    for (name, _), t in zip(candidates.items(), times):
        out = outputs[name]
        rel = float("nan") if out is None else rel_err(out, ref)
        ok = out is None or rel <= tol
        q1, med, q3 = (float(v) for v in pd.Series(t).quantile([0.25, 0.5, 0.75]))
        rows.append({**p, "vector_loads": seen[0].vector_loads, "activation_ahead": seen[0].activation_ahead,
                     "candidate": name, "family": name.split("/")[0], "status": "ok" if ok else "wrong_result",
                     "rel_err": rel, "time_us": med, "time_us_iqr": q3 - q1, "reps": reps, "timing": method})
    blocks = {r["candidate"]: r["time_us"] for r in rows if r["candidate"].startswith("gemv/X")}
    best = min(blocks, key=blocks.get)
    log.info("%s %s n=%d k=%d x%d: plain %.1f us, default %.1f us, best %s %.1f us", p["family_tag"], p["form"], p["n"], p["k"],
             p["weights"], rows[0]["time_us"], rows[1]["time_us"], best, blocks[best])
    return rows


ATEN_KEY = "aten/plain"


def labelling(reps: int = 20) -> tuple[list[dict[str, Any]], Callable[[int, dict[str, Any]], list[dict[str, Any]]]]:
    """(problems, measure_one) as ``collectors.gemv.collect`` takes them, with Inductor's caches off: every compile
    fresh, every config benchmarked, no kernel or autotune result reused from an earlier problem. Shared by this
    module's command and ``gemm-predictor calibrate``."""
    import torch._inductor.config as inductor_config

    from collectors.timing import cuda_flusher

    inductor_config.force_disable_caches = True
    inductor_config.autotune_local_cache = False
    problems = [dict(p, op=problem_op(p)) for p in corpus()]
    return problems, lambda i, p: measure(p, reps, cuda_flusher())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.gemv_blocks", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="parquet file (resumed when it exists)")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many new problems")
    parser.add_argument("--reps", type=int, default=20, help="timed runs per candidate")
    parser.add_argument("--shard", type=Shard.argument, default=None, metavar="I/N",
                        help="label only the I-th of N shards of the problems (by problem id), one process each with "
                             "its own --out; with $ZOO_GPU_LOCK naming one file, their timings take turns on the GPU")
    parser.add_argument("--join", type=Path, nargs="+", default=None, metavar="PART",
                        help="write these shard files as one labels file --out (nothing is measured)")
    args = parser.parse_args(argv)
    if args.join:
        return join(args.join, args.out, KIND)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    problems, measure_one = labelling(args.reps)
    return collect(problems, measure_one, args.out, KIND, "gemv_blocks", ATEN_KEY, args.limit, shard=args.shard)


if __name__ == "__main__":
    sys.exit(main())
