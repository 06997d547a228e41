"""End-to-end: plain torch.compile vs full max-autotune vs max-autotune pruned by the predictor hook (GPU).

    python -m benchmarks.compile_bench --gemms 24 --ks 1,3,5,8 --out docs/benchmarks/h200

For GEMMs from the shipped model's held-out problem groups (shapes it never trained on) it compiles each in
every mode with fresh caches and measures: compile (autotune) wall time of the first call, the compiled
kernel's time under a CUDA graph (warm L2, steady state) and with the L2 flushed before each call (cold),
and the max relative error against an fp32 matmul. With ``--block`` a transformer block (fwd + bwd,
12 GEMMs) is compiled the same way and its training-step time measured. Modes: plain, full, hook-k<K>
(calibrated margin), hook-k<K>-nomargin, and with CUTLASS among the backends (``--cutlass-wheel``):
full+cutlass (all CUTLASS configs), full+cutlass<N> (Inductor's first N), hook-k<K>+cutlass<N> (the hook
keeps N). Writes results.json, results.md and a PNG of speed vs compile time; prints the table. Resumable: finished (gemm, mode) pairs in results.json are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from benchmarks.compile_report import write_outputs


def pick_gemms(model: str, dataset: str, n: int, seed: int) -> list[dict]:
    """Real-model GEMMs (llm/enc/vit/speech families) from the model's held-out side of the split."""

    from predictor.artifacts.model_folder import read_metadata
    from predictor.offline.split import in_groups, recorded_test_groups
    from predictor.artifacts.schema import read_dataset

    rows = read_dataset(dataset)
    test = rows[in_groups(rows, recorded_test_groups(read_metadata(model)) or [])]
    probs = test.drop_duplicates("problem_id")
    probs = probs[probs.family_tag.str.split(":").str[0].isin(["llm", "enc", "vit", "speech"])]
    probs = probs[(probs.m > 1) & (probs.op.isin(["mm", "addmm"]))]
    take = probs.sample(n=min(n, len(probs)), random_state=seed)
    cols = ["problem_id", "family_tag", "op", "m", "n", "k", "dtype", "layout_a", "layout_b"]
    return [dict(zip(cols, r)) for r in take[cols].itertuples(index=False)]


BLOCK = {"problem_id": "block", "family_tag": "block", "op": "block", "m": 2048, "n": 1024, "k": 4096,
         "dtype": "bfloat16", "layout_a": "fwd", "layout_b": "bwd"}


def build_block(g: dict):
    """A pre-norm transformer block (qkv, attention, out projection, MLP), fwd + bwd: 12 GEMMs per step."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    tokens, d, ffn = g["m"], g["n"], g["k"]
    heads, seq = 16, 512
    dtype = getattr(torch, g["dtype"])

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)

        def forward(self, x):
            b = x.shape[0] // seq
            q, k, v = self.qkv(self.norm1(x)).view(b, seq, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(x.shape)
            x = x + self.proj(attn)
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    torch.manual_seed(0)
    block = Block().to("cuda", dtype)
    x = torch.randn(tokens, d, device="cuda", dtype=dtype, requires_grad=True)
    with torch.no_grad():
        ref = block(x).float()

    def step(module):
        def run(inp):
            out = module(inp)
            out.float().square().mean().backward()
            return out
        return run

    return block, step, x, ref


def build(g: dict):
    import torch

    from collectors.runners import make_operands
    from predictor.core.problem import Problem

    p = Problem(op=g["op"], m=int(g["m"]), n=int(g["n"]), k=int(g["k"]), dtype=g["dtype"], layout_a=g["layout_a"],
                layout_b=g["layout_b"])
    ops = make_operands(p, torch.device("cuda"), seed=0)
    if p.op == "addmm":
        return (lambda bias, a, b: torch.addmm(bias, a, b)), (ops.bias, ops.a, ops.b), ops.reference
    return (lambda a, b: a @ b), (ops.a, ops.b), ops.reference


def event_times_us(run, reps: int, before=None) -> list[float]:
    """GPU time of ``run()`` in us, ``reps`` times, each between two CUDA events (``before()`` runs untimed
    ahead of each, e.g. an L2 flush)."""
    import torch

    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        s.record()
        run()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return times


def time_compiled(fn, args) -> tuple[float, float]:
    """(warm-L2 us under a CUDA graph of 20 calls, cold-L2 us median of 20 flushed calls)."""
    import numpy as np
    import torch

    from collectors.timing import L2Flusher

    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(20):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    warm = [t / 20 for t in event_times_us(graph.replay, 5)]
    cold = event_times_us(lambda: fn(*args), 20, before=L2Flusher(torch.device("cuda")))
    return float(np.median(warm)), float(np.median(cold))


def parse_mode(mode: str) -> dict | None:
    """``hook-k5`` -> install(top_k=5) (the defaults: calibrated margin, aten alone on small GEMMs it favours);
    suffixes ``-nomargin`` (margin=None), ``-benchaten`` (aten_alone_below_us=None: let Inductor benchmark
    aten against the kept Triton kernels everywhere), ``-epi`` (epilogue_templates=1: also keep the best Triton
    template of a GEMM that feeds a pointwise op, for Inductor's epilogue fusion) and ``-exhaustive`` (Inductor's EXHAUSTIVE space, pruned to the top k before anything
    compiles; give it a model trained on that space with ``--model``)."""
    usage = f"unknown mode {mode!r}: plain, full, hook-k<K>[-nomargin][-benchaten][-epi][-exhaustive]"
    if not mode.startswith("hook-k"):
        if mode not in ("plain", "full"):
            raise ValueError(usage)
        return None
    k, *suffixes = mode[len("hook-k"):].split("-")
    if not k.isdigit() or int(k) < 1 or not set(suffixes) <= {"nomargin", "benchaten", "epi", "exhaustive"} or len(set(suffixes)) < len(suffixes):
        raise ValueError(usage)
    settings = {"top_k": int(k), "margin": None if "nomargin" in suffixes else "auto"}
    if "benchaten" in suffixes:
        settings["aten_alone_below_us"] = None
    if "epi" in suffixes:
        settings["epilogue_templates"] = 1
    if "exhaustive" in suffixes:
        settings["space"] = "exhaustive"
    return settings


def split_cutlass(mode: str) -> tuple[str, dict, int | None]:
    """``full+cutlass`` / ``full+cutlass4`` / ``hook-k5+cutlass2``: the base mode, Inductor config patches
    (CUTLASS among the backends; for ``full`` a number is ``cutlass_max_profiling_configs``) and, for a hook
    mode, the number of CUTLASS kernels it keeps (``install(cutlass_top_k=...)``)."""
    base, plus, extra = mode.partition("+")
    if not plus:
        return mode, {}, None
    if not extra.startswith("cutlass") or not (extra[7:] == "" or extra[7:].isdigit()):
        raise ValueError(f"unknown mode {mode!r}: <mode>+cutlass[N]")
    n = int(extra[7:]) if extra[7:] else None
    patches = {"max_autotune_gemm_backends": "ATEN,TRITON,CUTLASS"}
    if base.startswith("hook-k"):
        if n is None:
            raise ValueError(f"{mode}: a hook mode needs the CUTLASS kernels to keep, e.g. {base}+cutlass4")
        return base, patches, n
    if base == "plain":
        raise ValueError(f"{mode}: plain torch.compile does not autotune, so CUTLASS does not apply")
    if n is not None:
        patches["cutlass.cutlass_max_profiling_configs"] = n
    return base, patches, None


def time_block_step(step, x) -> float:
    """Median fwd+bwd step time in us, launched eagerly (host overhead included: the autograd engine and the
    compiled wrappers' launches, which dominate a step of ~12 small GEMMs)."""
    import numpy as np
    import torch

    for _ in range(3):
        step(x)
    torch.cuda.synchronize()
    return float(np.median(event_times_us(lambda: step(x), 20)))


def time_block_step_graphed(step, x, params) -> float:
    """Median fwd+bwd step time in us with the whole step (forward, backward) captured in one CUDA graph: GPU
    time without host launch overhead, the kernel-time figure. NaN if the step cannot be captured."""
    import numpy as np
    import torch

    def zero_grads():
        for t in (*params, x):
            t.grad = None

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream, as whole-network capture requires
            for _ in range(3):
                zero_grads()
                step(x)
        torch.cuda.current_stream().wait_stream(side)
        zero_grads()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step(x)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a benchmark figure, never a crash
        print(f"block: CUDA-graph capture failed ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
        torch.cuda.synchronize()
        return float("nan")
    return float(np.median(event_times_us(graph.replay, 20)))


def run_mode(g: dict, mode: str, model: str, exhaustive_model: str) -> dict:
    import torch
    from torch._inductor import config as icfg
    from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers

    import predictor

    base, patches, cutlass_top_k = split_cutlass(mode)
    hook = parse_mode(base)
    if cutlass_top_k is not None:
        hook = {**hook, "cutlass_top_k": cutlass_top_k}
    is_block = g["problem_id"] == "block"
    if is_block:
        block, make_step, x, ref = build_block(g)
        fn, args = block, (x,)
    else:
        fn, args, ref = build(g)
    benchmarked = []
    timed: dict[str, float] = {}  # every choice Inductor timed, with its benchmark time (us): CUTLASS labels

    def saver(timings, name, inputs, choices, *rest) -> None:
        benchmarked.append(len(choices))
        for choice in choices:
            t = timings.get(choice, float("inf"))
            label = f"{choice.name} {getattr(choice, 'description', '') or ''}".strip()
            timed[label] = float(t) * 1e3 if math.isfinite(t) else float("nan")

    clear_feedback_savers()
    add_feedback_saver(saver)
    torch._dynamo.reset()
    if hook is not None and hook.get("space") == "exhaustive":
        model = exhaustive_model
    pruner = predictor.install(model=model, **hook) if hook is not None else None
    try:
        with icfg.patch({"force_disable_caches": True, **patches}):
            compiled = torch.compile(fn, mode=None if base == "plain" else "max-autotune-no-cudagraphs", dynamic=False)
            start = time.time()
            out = make_step(compiled)(*args) if is_block else compiled(*args)  # block: fwd + bwd compile
            torch.cuda.synchronize()
            compile_s = time.time() - start
    finally:
        if hook is not None:
            predictor.uninstall()
        clear_feedback_savers()
    err = float((out.float() - ref).norm() / ref.norm())
    stats = pruner.stats() if pruner is not None else {}
    common = {"rel_err": err, "benchmarked": sum(benchmarked), "timed_us": timed, "filter_ms_max": stats.get("filter_ms_max", 0.0),
              "epilogue_templates_added": stats.get("epilogue_templates_added", 0)}
    if is_block:
        # warm_us: the step under one CUDA graph (kernel time); eager_us: launched eagerly (what a training loop
        # without CUDA graphs sees; the split-model run and corpus-completion run reported only this one, as warm_us)
        eager_us = time_block_step(make_step(compiled), x)
        graph_us = time_block_step_graphed(make_step(compiled), x, list(block.parameters()))
        return {"compile_s": compile_s, "warm_us": graph_us, "eager_us": eager_us, "cold_us": float("nan"), **common}
    warm, cold = time_compiled(compiled, args)
    return {"compile_s": compile_s, "warm_us": warm, "cold_us": cold, **common}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the split models, not the shipped refit-on-all ones: the GEMMs come from their held-out groups, so the
    # hook is measured on shapes its model never saw (the shipped -all models have seen every group)
    ap.add_argument("--model", default="models/h200-default-lgbm")
    ap.add_argument("--exhaustive-model", default="models/h200-exhaustive-lgbm", help="for the -exhaustive modes")
    ap.add_argument("--split-model", default="models/h200-default-lgbm", help="whose held-out groups to draw GEMMs from")
    ap.add_argument("--dataset", default="datasets/nvidia-h200/default.parquet")
    ap.add_argument("--gemms", type=int, default=24)
    ap.add_argument("--gemms-from", default=None,
                    help="an earlier run's results.json: benchmark exactly its GEMMs (comparable across model versions)")
    ap.add_argument("--ks", default="1,3,5,8")
    ap.add_argument("--modes", default=None, help="comma list overriding plain,full,hook-k<k>...")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtypes", default=None, help="only GEMMs of these dtypes, e.g. float16,bfloat16 (CUTLASS)")
    ap.add_argument("--block", action="store_true", help="also a transformer block, fwd + bwd (12 GEMMs)")
    ap.add_argument("--cutlass-wheel", default=None, help="nvidia_cutlass-*.whl, for the +cutlass modes")
    ap.add_argument("--out", default="docs/benchmarks/latest")
    ap.add_argument("--shard", default="0/1", help="i/n: run every n-th GEMM from the i-th (one process per GPU); "
                    "each GEMM's modes all run on the same GPU, so its speed ratios never compare two GPUs")
    ap.add_argument("--replot", nargs="+", default=None,
                    help="only rewrite results.md + PNG (beside the first file) from these results.json (no GPU)")
    args = ap.parse_args()
    if args.replot:
        saved = [json.loads(Path(f).read_text()) for f in args.replot]
        devices = {s["device"] for s in saved}
        if len(devices) > 1:
            raise SystemExit(f"--replot: results from different GPUs/versions: {sorted(devices)}")
        results = {k: v for s in saved for k, v in s["results"].items()}
        gemms = list({g["problem_id"]: g for s in saved for g in s["gemms"]}.values())
        modes = list(dict.fromkeys(key.split("|")[1] for key in results))
        out = Path(args.replot[0]).parent
        (out / "results.json").write_text(json.dumps({"device": saved[0]["device"], "gemms": gemms, "results": results},
                                                      indent=1))
        print(write_outputs(results, gemms, modes, out, saved[0]["device"]))
        return

    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    modes = args.modes.split(",") if args.modes else ["plain", "full"] + [f"hook-k{k}" for k in args.ks.split(",")]
    for mode in modes:
        parse_mode(split_cutlass(mode)[0])  # fail before any GPU work on a typo
    if any("+cutlass" in m for m in modes):
        if not args.cutlass_wheel:
            raise SystemExit("+cutlass modes need --cutlass-wheel nvidia_cutlass-*.whl")
        from collectors.cutlass_env import prepare_cutlass_root
        from torch._inductor import config as icfg

        icfg.cutlass.cutlass_dir = str(prepare_cutlass_root(args.cutlass_wheel))
    if args.gemms_from:
        gemms = [g for g in json.loads(Path(args.gemms_from).read_text())["gemms"] if g["problem_id"] != "block"]
        if args.dtypes:
            gemms = [g for g in gemms if g["dtype"] in args.dtypes.split(",")]
        gemms = gemms[: args.gemms]
    else:
        gemms = pick_gemms(args.split_model, args.dataset, args.gemms, args.seed)
    gemms += [BLOCK] if args.block else []
    shard, shards = (int(x) for x in args.shard.split("/"))
    gemms = gemms[shard::shards]
    res_file = out / "results.json"
    results = json.loads(res_file.read_text())["results"] if res_file.exists() else {}
    device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {__import__('triton').__version__}"
    for g in gemms:
        for mode in modes:
            key = f"{g['problem_id']}|{mode}"
            if key in results:
                continue
            try:
                results[key] = run_mode(g, mode, args.model, args.exhaustive_model)
            except Exception as exc:  # a failed compile is a result too, never a silent skip
                results[key] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}", "compile_s": float("nan"),
                                "warm_us": float("nan"), "cold_us": float("nan"), "benchmarked": 0, "rel_err": float("nan")}
            print(key, json.dumps(results[key]), flush=True)
            res_file.write_text(json.dumps({"device": device, "gemms": gemms, "results": results}, indent=1))
    print(write_outputs(results, gemms, modes, out, device))


if __name__ == "__main__":
    main()
