"""transformers' ``generate`` with a static KV cache: tokens/s per compile mode, each in a fresh process.

    python -m benchmarks.generate_bench --out OUT/generate [--models llama-4l,qwen2-4l] [--modes eager,auto,gemm_predictor] [--rounds 3]

``generate`` auto-compiles the decoder's forward when the cache is static (``generation_config.compile_config``,
``mode="reduce-overhead"`` by default: mode ``auto``); mode ``gemm_predictor`` sets
``compile_config=CompileConfig(backend="gemm_predictor")`` (``predictor.runtime.backend``); ``eager`` compiles
nothing. Batch 1, a 16-token prompt, 64 greedy tokens; the first ``generate`` (compile included) is timed as
``compile_s``, then the median of ``--repeats`` calls gives tokens/s, and one profiled call the GPU time per token
(``gpu_ms_per_token``: every kernel's time, the eager prompt's included) and the host's ``kernel_launches`` and
``graph_launches``.

Why rounds: at these sizes a token costs ~2 ms of host work (``generate``'s own loop launches ~50 eager kernels
per token; the compiled forward is one CUDA-graph launch in every compiled mode) against ~0.4 ms of GPU time, so
tokens/s follows how fast the host runs each process: the same mode ran 364 and 638 tokens/s in two processes
on one machine. ``--rounds`` repeats the whole list, modes alternating, each run a fresh process; the
report takes the median per (model, mode) and shows the GPU time beside it, which the host does not move.
Every mode's tokens are recorded so the report can check they are the same as ``auto``'s, and every step's top-2
logit margin, so that where they differ the report can say whether ``auto`` itself was at a near tie. Results:
OUT/results.json (one record per run) and OUT/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NEW_TOKENS = 64
PROMPT = 16
MODELS = {  # 4 layers at real widths (random weights: no download)
    "llama-4l": ("LlamaConfig", dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                                     num_key_value_heads=4, vocab_size=32000, num_hidden_layers=4)),
    "qwen2-4l": ("Qwen2Config", dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                                     num_key_value_heads=2, vocab_size=151936, num_hidden_layers=4,
                                     tie_word_embeddings=True)),
}
MODES = ("eager", "auto", "gemm_predictor")


def run_one(model: str, mode: str, repeats: int) -> dict[str, Any]:
    """One (model, mode) in this process -> its record."""
    import torch
    import transformers

    cls, kwargs = MODELS[model]
    torch.manual_seed(0)
    config = getattr(transformers, cls)(**kwargs)
    lm = transformers.AutoModelForCausalLM.from_config(config).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), device="cuda")
    gen: dict[str, Any] = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                               cache_implementation="static")
    if mode == "eager":
        gen["disable_compile"] = True
    elif mode == "gemm_predictor":
        from predictor.runtime.backend import register
        register()  # the entry point does this for an installed package
        gen["compile_config"] = transformers.CompileConfig(backend="gemm_predictor")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tokens = lm.generate(ids, **gen)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = lm.generate(ids, **gen)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    profiled = profile_call(lambda: lm.generate(ids, **gen))
    try:
        margins = top2_margins(lm, ids, gen)
    except Exception as exc:  # noqa: BLE001 - the margins are extra; never fail a run for them
        margins = {"margins_error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"model": model, "mode": mode, "status": "ok", "compile_s": first, "generate_s": median, **margins,
            "tokens_per_s": NEW_TOKENS / median, "gpu_ms_per_token": profiled["gpu_ms"] / NEW_TOKENS,
            "kernel_launches": profiled["kernel_launches"], "graph_launches": profiled["graph_launches"],
            "tokens": out[0, PROMPT:].tolist(),
            "first_tokens_same": out[0].tolist() == tokens[0].tolist(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "transformers": transformers.__version__}


def top2_margins(lm: Any, ids: Any, gen: dict[str, Any]) -> dict[str, Any]:
    """One more ``generate`` keeping each step's logits: ``margins``, the gap between the two highest logits at
    every generated token, with that call's ``margins_tokens``. Why: with random weights many steps are near ties,
    and a mode whose GEMMs sum in another order may pick the other token there; where the tokens of two modes first
    differ, the margin says whether that was a near tie (a rounding difference) or a real disagreement."""
    import torch

    out = lm.generate(ids, **gen, output_scores=True, return_dict_in_generate=True)
    top = torch.stack(out.scores)[:, 0].float().topk(2, dim=-1).values  # (tokens, 2)
    return {"margins": [round(float(m), 5) for m in top[:, 0] - top[:, 1]],
            "margins_tokens": out.sequences[0, PROMPT:].tolist()}


def first_difference(auto: dict[str, Any], other: dict[str, Any]) -> str:
    """Where ``other``'s tokens first differ from ``auto``'s, and ``auto``'s top-2 logit margin there beside its
    median margin (from ``top2_margins``); "yes" when they never differ."""
    ours, theirs = other["tokens"], auto["tokens"]
    if ours == theirs:
        return "yes"
    index = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    margins = auto.get("margins") if auto.get("margins_tokens") == theirs else None
    if not margins or index >= len(margins):
        return f"no: from token {index + 1}"
    return (f"no: from token {index + 1}, where auto's top-2 logit margin was {margins[index]:.3g} "
            f"(median {statistics.median(margins):.3g})")


LAUNCHES = {"cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"}


def profile_call(call: Any) -> dict[str, float]:
    """One profiled ``call`` (torch.profiler, CPU and CUDA activity): ``gpu_ms``, every kernel's GPU time;
    ``kernel_launches`` and ``graph_launches``, what the host launched."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    events = prof.events()
    return {"gpu_ms": sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA) / 1000,
            "kernel_launches": sum(e.name in LAUNCHES for e in events),
            "graph_launches": sum(e.name == "cudaGraphLaunch" for e in events)}


def medians(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (model, mode), over its successful runs: ``runs``, median ``tokens_per_s``, ``gpu_ms_per_token`` and
    ``compile_s``, the runs' ``tokens_per_s_range`` (min, max), and the last run's ``tokens`` and ``margins``."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") == "ok":
            runs.setdefault((r["model"], r["mode"]), []).append(r)

    def median_of(rs: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    return {key: {"runs": len(rs), "tokens": rs[-1]["tokens"], "margins": rs[-1].get("margins"),
                  "margins_tokens": rs[-1].get("margins_tokens"),
                  "tokens_per_s_range": (min(r["tokens_per_s"] for r in rs), max(r["tokens_per_s"] for r in rs)),
                  **{k: median_of(rs, k) for k in ("tokens_per_s", "gpu_ms_per_token", "compile_s")}}
            for key, rs in runs.items()}


def report(records: list[dict[str, Any]]) -> str:
    lines = ["# generate: tokens/s per compile mode", "",
             f"GPU {records[0].get('gpu')} · torch {records[0].get('torch')} · transformers "
             f"{records[0].get('transformers')}; batch 1, {PROMPT}-token prompt, {NEW_TOKENS} greedy tokens, static "
             "cache, each mode in a fresh process", "",
             "| model | mode | runs | tokens/s (median) | runs' range | vs auto | GPU ms per token | GPU time vs auto "
             "| first generate s (compile) | same tokens as auto |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    table = medians(records)
    for r in records:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['mode']} | round {r.get('round', 0)} | {r['status']}: "
                         f"{r.get('error', '')[:120]} | | | | | | |")
    for (model, mode), m in table.items():
        auto = table.get((model, "auto"))
        ratio = f"{m['tokens_per_s'] / auto['tokens_per_s']:.3f}" if auto else "-"
        same = "-" if not auto else first_difference(auto, m)
        gpu = "-" if m["gpu_ms_per_token"] is None else f"{m['gpu_ms_per_token']:.3f}"
        gpu_ratio = (f"{m['gpu_ms_per_token'] / auto['gpu_ms_per_token']:.3f}"
                     if auto and m["gpu_ms_per_token"] and auto["gpu_ms_per_token"] else "-")
        low, high = m["tokens_per_s_range"]
        lines.append(f"| {model} | `{mode}` | {m['runs']} | {m['tokens_per_s']:.0f} | {low:.0f}-{high:.0f} | {ratio} | "
                     f"{gpu} | {gpu_ratio} | {m['compile_s']:.1f} | {same} |")
    return "\n".join(lines) + "\n"


def run_in_fresh_process(out: Path, model: str, mode: str, repeats: int) -> dict[str, Any]:
    """One (model, mode) in a fresh process with empty caches (compile as a first run sees it) -> its record."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor", "TRITON_CACHE_DIR": f"{tmp}/triton"}
        proc = subprocess.run([sys.executable, "-m", "benchmarks.generate_bench", "--out", str(out),
                               "--repeats", str(repeats), "--one", model, mode],
                              env=env, capture_output=True, text=True, timeout=600)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"model": model, "mode": mode, "status": "error",
                "error": (proc.stderr.strip().splitlines() or [""])[-1][:300]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.generate_bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for results.json and results.md")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of: {', '.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma list of: {', '.join(MODES)}")
    p.add_argument("--repeats", type=int, default=5, help="timed generate calls after the first")
    p.add_argument("--rounds", type=int, default=3,
                   help="runs of every (model, mode); modes alternate, in reverse order every other round")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)  # the worker
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one, args.repeats)))
        return 0
    for name, known, kind in ((args.models, MODELS, "model"), (args.modes, MODES, "mode")):
        unknown = [x for x in name.split(",") if x not in known]
        if unknown:
            print(f"generate_bench: error: unknown {kind} {unknown[0]!r}; expected one of {', '.join(known)}",
                  file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    records = json.loads(path.read_text()) if path.exists() else []
    done = {(r["model"], r["mode"], r.get("round", 0)) for r in records}
    for round_ in range(args.rounds):
        for model in args.models.split(","):
            order = args.modes.split(",")
            for mode in order if round_ % 2 == 0 else order[::-1]:  # both orders
                if (model, mode, round_) in done:
                    continue
                record = {**run_in_fresh_process(args.out, model, mode, args.repeats), "round": round_}
                records.append(record)
                print(f"{model} {mode} round {round_}: {record.get('tokens_per_s', record.get('error'))}", flush=True)
                path.write_text(json.dumps(records, indent=1))
    (args.out / "results.md").write_text(report(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
