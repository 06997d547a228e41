"""GEMMs with a short reduction not a multiple of 8, as they are and zero-padded (``predictor.runtime.lowerings.pad_k``), on the GPU.

    python -m benchmarks.pad_k_bench --out docs/benchmarks/pad_k/nvidia-h100

Per case (a token-mixing or patch-14 layer: rows, K, N, dtype), ``F.linear(x, w, b)`` compiled three ways, each timed
by CUDA-graph replay (``triton.testing.do_bench_cudagraph``, median):
- ``plain_us``: plain ``torch.compile`` (cuBLAS on the unaligned operands);
- ``padded_us``: plain ``torch.compile`` of the padded product (x and w padded in the graph, every call);
- ``hook_us``: ``predictor.compile`` (the rule pads where it takes the GEMM; the model decides the kernel).
Writes ``results.json`` (records plus GPU and versions) and prints a table. A case that fails is recorded with its
error and the run goes on.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from .compiled_cases import run_cases, time_compiled

# (name, rows, K, N, dtype)
CASES: list[tuple[str, int, int, int, str]] = [
    ("mixer-b16 token fc1 (196 tokens)", 24576, 196, 384, "float16"),
    ("resmlp-24 token projection at 240 px", 12288, 225, 384, "bfloat16"),
    ("token MLP over CLIP-L/14's 257 tokens", 24576, 257, 512, "float16"),
    ("mixer-s32 token fc1 (49 tokens)", 49152, 49, 384, "float16"),
    ("a 197-wide output, K aligned (not padded: the region model's case)", 24576, 1536, 197, "bfloat16"),
    ("MLP over a class-token ViT's 197 tokens", 6272, 197, 3072, "float16"),
    ("patch-14 stem as a GEMM (3 x 14 x 14)", 8192, 588, 1024, "float16"),
    ("gmlp-s16 spatial gating at 288 px (324 tokens)", 24576, 324, 324, "float16"),
]


def time_case(case: tuple, rep: int = 200) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    import predictor
    from predictor.runtime.lowerings.pad_k import padded_k_count

    name, m, k, n, dtype_name = case
    dtype = getattr(torch, dtype_name)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    kp = -(-k // 8) * 8

    def linear(x: Any) -> Any:
        return F.linear(x, w, b)

    def padded(x: Any) -> Any:
        return F.linear(F.pad(x, (0, kp - k)), F.pad(w, (0, kp - k)), b)

    record: dict[str, Any] = {"case": name, "m": m, "k": k, "n": n, "dtype": dtype_name}
    torch._dynamo.reset()
    before = padded_k_count()
    with torch.no_grad():
        reference = linear(x).float()
    compiled = {"plain_us": torch.compile(linear), "padded_us": torch.compile(padded),
                "hook_us": predictor.compile(linear, cudagraphs=False)}
    record.update(time_compiled(compiled, x, reference, rep))
    record["hook_padded"] = padded_k_count() - before
    record["padded_speedup"] = record["plain_us"] / record["padded_us"]
    record["hook_speedup"] = record["plain_us"] / record["hook_us"]
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("pad_k_bench: no CUDA device", file=sys.stderr)
        return 2
    run_cases(args.out, [(case[0], functools.partial(time_case, case)) for case in CASES])
    return 0


if __name__ == "__main__":
    sys.exit(main())
