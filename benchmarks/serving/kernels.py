"""One served model's step, kernel by kernel: each size's GPU time per kernel class under torch.profiler, beside its
CUDA-graph replay time, for one mode compiled in this process (static modes once per size).

    python -m benchmarks.serving.kernels --model llama --phase decode --mode hook-dynamic --sizes 2,8,64,256 \\
        --json-out k.json

Why: a step's replay time moves by a few percent between processes; the sum of its kernels' times does not, and
says which kernels a mode gains or loses on (pointwise, reduction, GEMM, attention).
"""

from __future__ import annotations

import collections
import json
import sys
from typing import Any

import torch

from collectors.programs.harness import environment
from collectors.programs.step import batched_step_ms, capture

from . import models
from .worker import compiler_for, one_run_parser

REPEATS = 5  # profiled steps per size
KINDS = (("triton_poi", "pointwise"), ("triton_red", "reduction"), ("triton_per", "reduction"),
         ("triton_tem", "gemm"), ("triton_unk", "gemv"))
ATTENTION_WORDS = ("flash", "fmha", "attention", "sdpa")
GEMM_WORDS = ("gemm", "cutlass", "nvjet", "sm90", "cublas", "gemv", "splitk", "few_rows")  # few_rows: ours


def kind_of(kernel: str) -> str:
    """A kernel's class from its name: Inductor's Triton prefixes, then library attention and GEMM names (attention
    first: cuDNN's flash attention is named for its sm90 GEMM instructions too)."""
    name = kernel.lower()
    for prefix, kind in KINDS:
        if name.startswith(prefix):
            return kind
    if any(word in name for word in ATTENTION_WORDS):
        return "attention"
    return "gemm" if any(word in name for word in GEMM_WORDS) else "other"


def profile_step(step: Any) -> dict[str, Any]:
    """GPU microseconds per step by kernel class and by kernel name (the 20 largest)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPEATS):
            step()
        torch.cuda.synchronize()
    by_kind: dict[str, float] = collections.defaultdict(float)
    by_name: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            us = event.time_range.elapsed_us() / REPEATS
            by_kind[kind_of(event.name)] += us
            by_name[event.name[:100]] += us
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:20]
    return {"kernel_us": sum(by_kind.values()), "by_kind_us": dict(by_kind), "top_us": top}


def run(model: str, phase: str, mode: str, sizes: list[int]) -> list[dict[str, Any]]:
    device = torch.device("cuda")
    spec = models.get(model)
    module = spec.build(device).eval()
    compile_fn, dynamic = compiler_for(mode)
    compiled, records = None, []
    for size in sizes:
        inputs = models.inputs(spec, phase, size, device)
        if compiled is None or not dynamic:
            torch._dynamo.reset()
            compiled = compile_fn(module)
        if dynamic and size > 1:
            models.mark_dynamic(inputs, phase)

        def step() -> Any:
            with torch.no_grad():
                return compiled(*inputs)
        for _ in range(5):
            step()
        graph = capture(step)
        replay_ms = sorted(batched_step_ms(graph.replay, 30, device) for _ in range(5))[2]
        records.append({"model": model, "phase": phase, "mode": mode, "size": size, "step_ms_b2b": replay_ms,
                        **profile_step(step), **environment()})
        kinds = " ".join(f"{k}={v:.1f}" for k, v in sorted(records[-1]["by_kind_us"].items()))
        print(f"{model} {phase} {mode} size {size}: {replay_ms:.4f} ms, kernels {records[-1]['kernel_us']:.1f} us "
              f"({kinds})", flush=True)
    return records


def inductor_settings(pairs: list[str]) -> dict[str, Any]:
    """``["triton.prefer_nd_tiling=True", ...]`` as Inductor config patches, each value read as a Python literal
    (a bare word stays a string); a one-line error naming a malformed pair or a key Inductor does not have."""
    import ast

    from torch._inductor import config

    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            sys.exit(f"kernels: error: --inductor-config {pair!r}: expected KEY=VALUE")
        try:
            config.get_config_copy()[key]
        except KeyError:
            sys.exit(f"kernels: error: --inductor-config {pair!r}: Inductor has no setting {key!r}")
        try:
            settings[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            settings[key] = text
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = one_run_parser("python -m benchmarks.serving.kernels", __doc__.splitlines()[0])
    parser.add_argument("--inductor-config", action="append", default=[], metavar="KEY=VALUE",
                        help="an Inductor setting for this run's compiles (repeatable), e.g. "
                             "triton.prefer_nd_tiling=True; recorded in each record")
    args = parser.parse_args(argv)
    settings = inductor_settings(args.inductor_config)
    if not torch.cuda.is_available():
        sys.exit("kernels: error: needs a CUDA GPU (the profile times GPU kernels)")
    from torch._inductor import config

    with config.patch(settings):
        records = run(args.model, args.phase, args.mode, [int(s) for s in args.sizes.split(",")])
    for record in records:
        record["inductor_config"] = {key: repr(value) for key, value in settings.items()}
    with open(args.json_out, "w") as f:
        json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
