"""Patch-embedding convolutions: cuDNN (as every stock mode lowers them) against the GEMM form, on the GPU.

    python -m benchmarks.patchify_bench --out docs/benchmarks/patchify/nvidia-h100

Per case (a vision model's stem or downsampling layer: batch, channels, spatial sizes, outputs, kernel = stride),
one compiled function each, timed by CUDA-graph replay (``triton.testing.do_bench_cudagraph``, median):
- ``conv_us``: ``F.conv`` under plain ``torch.compile`` (cuDNN, with Inductor's layout kernels);
- ``gemm_us``: the GEMM form (``predictor.runtime.lowerings.patchify.as_gemm``) under plain ``torch.compile`` (cuBLAS);
- ``hook_us``: ``F.conv`` under ``predictor.compile`` (the GEMM form where ``patchify.takes_gemm`` takes it, the
  GEMM decided by the model).
Writes ``results.json`` (records plus GPU and versions) and prints a table. A case that fails is recorded with its
error and the run goes on.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import Any

from .compiled_cases import run_cases, time_compiled

# (name, batch, channels, spatial sizes, outputs, kernel); channels_last: the input in channels-last memory
CASES: list[tuple[str, int, int, tuple[int, ...], int, tuple[int, ...], bool]] = [
    ("vit-s16 stem", 32, 3, (224, 224), 384, (16, 16), False),
    ("vit-b16 stem", 32, 3, (224, 224), 768, (16, 16), False),
    ("vit-b16 stem, batch 1", 1, 3, (224, 224), 768, (16, 16), False),
    ("vit-l14 stem (CLIP)", 8, 3, (224, 224), 1024, (14, 14), False),
    ("dinov2-s14 stem at 518", 4, 3, (518, 518), 384, (14, 14), False),
    ("sam-b16 stem at 1024", 1, 3, (1024, 1024), 768, (16, 16), False),
    ("swin-t / convnext-t stem", 32, 3, (224, 224), 96, (4, 4), False),
    ("convnext-t downsample 1", 32, 96, (56, 56), 192, (2, 2), True),
    ("convnext-t downsample 1, NCHW", 32, 96, (56, 56), 192, (2, 2), False),
    ("convnext-t downsample 3", 32, 384, (14, 14), 768, (2, 2), True),
    ("videomae tubelet 2x16x16", 2, 3, (16, 224, 224), 768, (2, 16, 16), False),
    ("audio patch 1d", 8, 3, (16000,), 512, (16,), False),
]
DTYPES = ("float16", "bfloat16", "float32")


def _case_functions(case: tuple, dtype: Any) -> tuple[Any, Any, Any]:
    import torch
    import torch.nn.functional as F

    from predictor.runtime.lowerings.patchify import as_gemm

    _, batch, channels, sizes, outs, kernel, channels_last = case
    x = torch.randn(batch, channels, *sizes, device="cuda", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    weight = torch.randn(outs, channels, *kernel, device="cuda", dtype=dtype) / math.sqrt(channels * math.prod(kernel))
    bias = torch.randn(outs, device="cuda", dtype=dtype)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(sizes)]

    def by_conv(x: Any) -> Any:
        return conv(x, weight, bias, stride=kernel)

    def by_gemm(x: Any) -> Any:
        return as_gemm(x, weight, bias, list(kernel), [s // k for s, k in zip(sizes, kernel)])
    return x, by_conv, by_gemm


def time_case(case: tuple, dtype_name: str) -> dict[str, Any]:
    import torch

    import predictor

    dtype = getattr(torch, dtype_name)
    record: dict[str, Any] = {"case": case[0], "batch": case[1], "channels": case[2], "sizes": list(case[3]),
                              "outputs": case[4], "kernel": list(case[5]), "channels_last": case[6],
                              "dtype": dtype_name}
    x, by_conv, by_gemm = _case_functions(case, dtype)
    with torch.no_grad():
        reference = by_conv(x).float()
    compiled = {"conv_us": torch.compile(by_conv), "gemm_us": torch.compile(by_gemm),
                "hook_us": predictor.compile(by_conv, cudagraphs=False)}
    record.update(time_compiled(compiled, x, reference, rep=100))
    record["gemm_speedup"] = record["conv_us"] / record["gemm_us"]
    record["hook_speedup"] = record["conv_us"] / record["hook_us"]
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json")
    parser.add_argument("--dtypes", default="float16", help="comma-separated, of " + ", ".join(DTYPES))
    parser.add_argument("--cases", default="", help="comma-separated case numbers (0-based; default: all)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("patchify_bench: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        parser.error(f"unknown dtype(s) {unknown}; expected some of {DTYPES}")
    chosen = [CASES[int(i)] for i in args.cases.split(",") if i.strip()] if args.cases else CASES
    run_cases(args.out, [(f"{case[0]}, {dtype}", functools.partial(time_case, case, dtype))
                         for case in chosen for dtype in dtypes], {"allow_tf32": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
