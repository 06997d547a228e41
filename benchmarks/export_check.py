"""GPU check of ``predictor.offline.export``: does the exported lookup table reproduce the hook's kernels with torch alone?

    python -m benchmarks.export_check --out OUT/export_check [--models mlp,decode] [--predictor-model DIR]

For two transformers-free bf16 models (``mlp``: a Llama MLP block on 512 tokens, 4096 -> 11008 -> 4096, no bias;
``decode``: two 4096 -> 4096 Linear layers with bias on 8 tokens), each in a fresh process with empty Inductor and
Triton caches:

1. ``hook``: ``predictor.offline.export.export_table`` (compile with ``predictor.compile``, one run, table written; its wall
   time is the hook's compile time), then ``predictor.compile`` again for the generated code (GEMM kernels) and the
   step time (CUDA graph trees, as ``predictor.compile`` sets them);
2. ``table``: torch alone (this module imports no ``predictor``; checked): ``LookupTableChoices`` with the table
   and the Inductor options the export recorded (``max_autotune_gemm=True``); compile time, step time, kernels,
   lookup hits and misses;
3. ``plain``: ``torch.compile`` with CUDA graph trees only (``triton.cudagraphs``), the compile-time baseline.

Passes when the table run's GEMM kernels (extern calls, and each Triton template's block sizes, stages and warps)
equal the hook run's, every lookup hits (a miss would fall back to stock max-autotune), no ``predictor`` module was
imported, and the table's compile time is at plain's level (within 1.5x or 10 s). Prints a table; writes
``results.json`` (and each phase's JSON) under ``--out`` with the GPU, torch and triton versions. Takes about
2-3 minutes (6 fresh processes); not resumable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from collectors.in_program.table_choices import table_choices_class

MODELS = ("mlp", "decode")
REPO = Path(__file__).resolve().parents[1]  # the phases run as ``python -m benchmarks.export_check`` from here
PHASES = ("hook", "table", "plain")


# ---------------------------------------------------------------------------------------------
# Models (no transformers)
# ---------------------------------------------------------------------------------------------

def build(name: str) -> tuple[Any, tuple]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    dtype, dev = torch.bfloat16, "cuda"
    if name == "mlp":
        class MLP(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.gate = nn.Linear(4096, 11008, bias=False)
                self.up = nn.Linear(4096, 11008, bias=False)
                self.down = nn.Linear(11008, 4096, bias=False)

            def forward(self, x):
                return self.down(F.silu(self.gate(x)) * self.up(x))

        return MLP().to(dev, dtype).eval(), (torch.randn(512, 4096, device=dev, dtype=dtype),)
    if name == "decode":
        class Decode(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.a = nn.Linear(4096, 4096)
                self.b = nn.Linear(4096, 4096)

            def forward(self, x):
                return self.b(F.gelu(self.a(x)))

        return Decode().to(dev, dtype).eval(), (torch.randn(8, 4096, device=dev, dtype=dtype),)
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


# ---------------------------------------------------------------------------------------------
# Measuring (shared by the phases; torch only)
# ---------------------------------------------------------------------------------------------

_TRITON_BLOCK = re.compile(r"async_compile\.triton\(\s*'(\w+)',\s*'''(.*?)'''", re.S)


def gemm_kernels(code: str) -> list[str]:
    """The GEMM kernels of generated wrapper code: extern calls (``extern_kernels.mm`` ...) and, per Triton template
    kernel, its constexpr block sizes, stages and warps (enough to tell two configs apart)."""
    out = [f"extern:{m}" for m in re.findall(r"extern_kernels\.(\w+)\(", code)]
    for name, src in _TRITON_BLOCK.findall(code):
        if "_tem_" not in name and "BLOCK_M : tl.constexpr" not in src:
            continue
        consts = dict(re.findall(r"(\w+) : tl\.constexpr = (\w+)", src))
        meta = dict(re.findall(r"\b(num_stages|num_warps)=(\d+)", src))
        keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
        out.append(f"{name}:" + ",".join(f"{k}={consts.get(k)}" for k in keys)
                   + f",s={meta.get('num_stages')},w={meta.get('num_warps')}")
    return sorted(out)


def compile_and_measure(compiled: Any, model: Any, inputs: tuple, iters: int = 100) -> dict[str, Any]:
    """First call (compile) wall time, generated GEMM kernels, step time and max error against eager."""
    import torch
    from torch._inductor.utils import run_and_get_code

    with torch.no_grad():
        torch.cuda.synchronize()
        start = time.perf_counter()
        out, code = run_and_get_code(compiled, *inputs)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        ref = model(*inputs)
        err = float(((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6)).item())
        for _ in range(5):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(*inputs)
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(iters):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(*inputs)
        end.record()
        torch.cuda.synchronize()
    return {"compile_s": round(compile_s, 2), "step_us": round(begin.elapsed_time(end) * 1e3 / iters, 2),
            "max_rel_err": err, "kernels": gemm_kernels("\n".join(code))}


def versions() -> dict[str, Any]:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton_version}


# ---------------------------------------------------------------------------------------------
# Phases (each in its own process)
# ---------------------------------------------------------------------------------------------

def phase_hook(name: str, out: Path, predictor_model: str | None) -> dict[str, Any]:
    import torch
    from torch._inductor.utils import run_and_get_code

    import predictor
    from predictor.offline.export import export_table

    model, inputs = build(name)
    table_path = out / f"{name}.table.json"
    start = time.perf_counter()
    with torch.no_grad():
        doc, code = run_and_get_code(export_table, model, inputs, table_path, model_name=name,
                                     predictor_model=predictor_model)
    export_s = time.perf_counter() - start
    stats = predictor.stats()
    torch._dynamo.reset()
    # compiled a second time for the step time (Triton's cache is warm now); its kernels must be the export's
    compiled = predictor.compile(model, predictor_model=predictor_model, options={"fx_graph_cache": False})
    measured = compile_and_measure(compiled, model, inputs)
    return {"compile_s": round(export_s, 2), "recompile_s": measured.pop("compile_s"), **measured,
            "kernels": gemm_kernels("\n".join(code)), "kernels_recompile": measured["kernels"],
            "table_keys": doc["gemms"]["keys"], "by_template": doc["gemms"]["by_template"],
            "predictor_model": doc["predictor_model"], "predictor_disabled": doc["predictor_disabled"],
            "hook_stats": {k: stats[k] for k in ("gemms_seen", "kept_total", "considered_total", "fallbacks")}}


def phase_table(name: str, out: Path) -> dict[str, Any]:
    """torch alone, as docs/DEPLOY.md tells production to do it."""
    import torch
    from torch._inductor import config

    doc = json.loads((out / f"{name}.table.json").read_text())
    TableChoices = table_choices_class()  # noqa: N806
    counts = TableChoices.counts
    config.lookup_table.table = doc["table"]
    config.inductor_choices_class = TableChoices
    model, inputs = build(name)
    compiled = torch.compile(model, options=doc["inductor_options"])
    measured = compile_and_measure(compiled, model, inputs)
    return {**measured, **counts, "inductor_options": doc["inductor_options"],
            "predictor_imported": any(m == "predictor" or m.startswith("predictor.") for m in sys.modules)}


def phase_plain(name: str) -> dict[str, Any]:
    import torch

    model, inputs = build(name)
    return compile_and_measure(torch.compile(model, options={"triton.cudagraphs": True}), model, inputs)


def run_phase(args: argparse.Namespace) -> None:
    out = Path(args.out)
    if args.phase == "hook":
        result = phase_hook(args.model, out, args.predictor_model)
    elif args.phase == "table":
        result = phase_table(args.model, out)
    else:
        result = phase_plain(args.model)
    result = {"model": args.model, "phase": args.phase, **versions(), **result}
    (out / f"{args.model}.{args.phase}.json").write_text(json.dumps(result, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------

def spawn(phase: str, model: str, out: Path, predictor_model: str | None, timeout: float) -> dict[str, Any]:
    """One phase in a fresh process with empty Inductor and Triton caches."""
    with tempfile.TemporaryDirectory(prefix=f"export_check_{model}_{phase}_") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TRITON_CACHE_DIR": f"{cache}/triton"}
        cmd = [sys.executable, "-m", "benchmarks.export_check", "--out", str(out), "--phase", phase, "--model", model]
        if predictor_model:
            cmd += ["--predictor-model", predictor_model]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        wall = round(time.perf_counter() - start, 1)
    path = out / f"{model}.{phase}.json"
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        return {"error": f"exit {proc.returncode}", "stderr_tail": tail, "process_s": wall}
    return {**json.loads(path.read_text()), "process_s": wall}


def verdict(hook: dict, table: dict, plain: dict) -> dict[str, Any]:
    if any("error" in r for r in (hook, table, plain)):
        return {"ok": False, "why": "a phase failed"}
    same = hook["kernels"] == table["kernels"]
    extra_s = table["compile_s"] - plain["compile_s"]
    ratio = table["compile_s"] / plain["compile_s"] if plain["compile_s"] else float("inf")
    checks = {"kernels_match": same, "hook_kernels_stable": hook["kernels"] == hook["kernels_recompile"],
              "all_hits": table["misses"] == 0 and table["hits"] >= hook["table_keys"],
              "no_predictor_import": not table["predictor_imported"],
              "table_vs_plain_compile": f"{ratio:.2f}x, {extra_s:+.1f} s"}
    # "at plain's level": within 1.5x or 10 s of plain (a Triton template the hook picked compiles in a few seconds)
    checks["ok"] = (same and checks["all_hits"] and checks["no_predictor_import"]
                    and (ratio <= 1.5 or extra_s <= 10.0))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--predictor-model", default=None, help="model folder (default: the shipped one for this GPU)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per phase")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)  # internal: one phase, this process
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.phase:
        run_phase(args)
        return 0

    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            parser.error(f"unknown model {m!r}; expected some of {', '.join(MODELS)}")
    results: dict[str, Any] = {"command": " ".join(["python -m benchmarks.export_check", *sys.argv[1:]]), "models": {}}
    start = time.perf_counter()
    for m in models:
        runs = {p: spawn(p, m, out, args.predictor_model, args.timeout) for p in PHASES}
        results["models"][m] = {**runs, "verdict": verdict(runs["hook"], runs["table"], runs["plain"])}
    results["wall_s"] = round(time.perf_counter() - start, 1)
    first = next((r for v in results["models"].values() for r in v.values() if isinstance(r, dict) and "gpu" in r), {})
    results.update({k: first.get(k) for k in ("gpu", "torch", "triton")})
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    ok = report(results)
    print("PASS" if ok else "FAIL", f"-> {out / 'results.json'}")
    return 0 if ok else 1


def report(results: dict[str, Any]) -> bool:
    """Print the table; True when every model passed."""
    print(f"{results.get('gpu')}  torch {results.get('torch')}  triton {results.get('triton')}"
          f"  ({results['wall_s']} s)")
    print(f"{'model':8} {'phase':6} {'compile s':>9} {'step us':>9} {'rel err':>8}  GEMM kernels")
    for m, v in results["models"].items():
        for p in PHASES:
            r = v[p]
            if "error" in r:
                print(f"{m:8} {p:6} ERROR {r['error']}: {' | '.join(r.get('stderr_tail', [])[-3:])}")
                continue
            print(f"{m:8} {p:6} {r['compile_s']:9.1f} {r['step_us']:9.1f} {r['max_rel_err']:8.1e}  "
                  f"{'; '.join(r['kernels'])}")
        print(f"{m:8} verdict {json.dumps(v['verdict'])}"
              + (f"  hits {v['table']['hits']} misses {v['table']['misses']}" if "hits" in v["table"] else ""))
    return all(v["verdict"].get("ok") for v in results["models"].values())


if __name__ == "__main__":
    sys.exit(main())
