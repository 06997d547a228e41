"""transformers' ``generate`` with a static KV cache: tokens/s per compile mode, each in a fresh process.

    python -m benchmarks.generate_bench --out OUT/generate [--models llama-4l,qwen2-4l] [--modes eager,auto,gemm_predictor]

``generate`` auto-compiles the decoder's forward when the cache is static (``generation_config.compile_config``,
``mode="reduce-overhead"`` by default: mode ``auto``); mode ``gemm_predictor`` sets
``compile_config=CompileConfig(backend="gemm_predictor")`` (``predictor.runtime.backend``); ``eager`` compiles
nothing. Batch 1, a 16-token prompt, 64 greedy tokens; the first ``generate`` (compile included) is timed as
``compile_s``, then the median of ``--repeats`` calls gives tokens/s. Every mode's tokens are recorded so the
report can check they are the same as ``auto``'s. Results: OUT/results.json and OUT/results.md.
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
    return {"model": model, "mode": mode, "status": "ok", "compile_s": first, "generate_s": median,
            "tokens_per_s": NEW_TOKENS / median, "tokens": out[0, PROMPT:].tolist(),
            "first_tokens_same": out[0].tolist() == tokens[0].tolist(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "transformers": transformers.__version__}


def report(records: list[dict[str, Any]]) -> str:
    lines = ["# generate: tokens/s per compile mode", "",
             f"GPU {records[0].get('gpu')} · torch {records[0].get('torch')} · transformers "
             f"{records[0].get('transformers')}; batch 1, {PROMPT}-token prompt, {NEW_TOKENS} greedy tokens, static "
             "cache, each mode in a fresh process", "",
             "| model | mode | tokens/s | vs auto | first generate s (compile) | same tokens as auto |",
             "|---|---|---|---|---|---|"]
    auto = {r["model"]: r for r in records if r["mode"] == "auto" and r["status"] == "ok"}
    for r in records:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['mode']} | {r['status']}: {r.get('error', '')[:120]} | | | |")
            continue
        a = auto.get(r["model"])
        ratio = f"{r['tokens_per_s'] / a['tokens_per_s']:.3f}" if a else "-"
        same = "-" if not a else "yes" if r["tokens"] == a["tokens"] else "no"
        lines.append(f"| {r['model']} | `{r['mode']}` | {r['tokens_per_s']:.0f} | {ratio} | {r['compile_s']:.1f} | {same} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.generate_bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for results.json and results.md")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of: {', '.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma list of: {', '.join(MODES)}")
    p.add_argument("--repeats", type=int, default=5, help="timed generate calls after the first")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)  # the worker
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one, args.repeats)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    records = json.loads(path.read_text()) if path.exists() else []
    done = {(r["model"], r["mode"]) for r in records}
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            if model not in MODELS or mode not in MODES:
                print(f"generate_bench: error: unknown model or mode {model!r} {mode!r}", file=sys.stderr)
                return 2
            if (model, mode) in done:
                continue
            with tempfile.TemporaryDirectory() as tmp:  # empty caches: compile as a first run sees it
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor", "TRITON_CACHE_DIR": f"{tmp}/triton"}
                proc = subprocess.run([sys.executable, "-m", "benchmarks.generate_bench", "--out", str(args.out),
                                       "--repeats", str(args.repeats), "--one", model, mode],
                                      env=env, capture_output=True, text=True, timeout=600)
            try:
                record = json.loads(proc.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                record = {"model": model, "mode": mode, "status": "error",
                          "error": (proc.stderr.strip().splitlines() or [""])[-1][:300]}
            records.append(record)
            print(f"{model} {mode}: {record.get('tokens_per_s', record.get('error'))}", flush=True)
            path.write_text(json.dumps(records, indent=1))
    (args.out / "results.md").write_text(report(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
