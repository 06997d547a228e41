"""A residual add and a norm over a hidden width of 2048 (bf16), compiled for one size and with
``torch.compile(dynamic=True)`` (first called at 64 or at 4096 rows), timed by CUDA-graph replay at several row
counts; with ``--drop-row-mask`` a dynamic kernel's row mask is also written as a constant (a timing probe only: a row
count its blocks do not divide would be wrong).

    python -m benchmarks.serving.norms --drop-row-mask --json-out norms.json

Why: a dynamic graph's reductions (a decoder's norms) ran 20% slower than a compile for the size at a 4096-token OPT
prefill (kernel census, docs/DYNAMIC.md). The generated code differs in the row mask (``xindex < xnumel`` against a
constant) and, where the hidden width is a symbol itself, in its index arithmetic: under ``dynamic=True`` the RMS
norm's width comes from its inputs and stays a symbol, the layer norm's is pinned by its ``normalized_shape``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, Callable

import torch

from collectors.programs.harness import environment

HIDDEN = 2048
ROW_MASK = "xmask = xindex < xnumel"


def layer_norm(norm: torch.nn.LayerNorm) -> Callable[..., Any]:
    def fn(x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + residual
        return h, norm(h)
    return fn


def rms_norm(weight: torch.Tensor) -> Callable[..., Any]:
    def fn(x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = (x + residual).float()
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h.to(x.dtype), y.to(x.dtype) * weight
    return fn


def without_row_mask(codegen: Callable[..., Any]) -> Callable[..., Any]:
    def codegen_kernel(self: Any, *args: Any, **kwargs: Any) -> Any:
        source = codegen(self, *args, **kwargs)
        if "triton_heuristics.reduction(" not in source:  # a reduction's rows are [XBLOCK, 1]
            return source
        return source.replace(ROW_MASK, "xmask = tl.full([XBLOCK, 1], True, tl.int1)")
    return codegen_kernel


def replay_us(fn: Callable[..., Any], rows: int) -> float:
    import triton

    x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    fn(x, residual)
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(lambda: fn(x, residual), rep=200) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="64,1000,4096", help="row counts timed (comma-separated)")
    parser.add_argument("--drop-row-mask", action="store_true", help="also time dynamic kernels without a row mask")
    parser.add_argument("--json-out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("norms: needs a CUDA GPU", file=sys.stderr)
        return 2
    from torch._inductor.codegen.triton import TritonKernel

    from predictor.runtime.lowerings.tables import wrapped_attribute

    rows = [int(r) for r in args.rows.split(",")]
    norms = {"layer_norm": layer_norm(torch.nn.LayerNorm(HIDDEN, device="cuda", dtype=torch.bfloat16)),
             "rms_norm": rms_norm(torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16))}
    # (name, dynamic=, the row count of the first call, the row mask dropped)
    compiles = [("static", False, None, False), ("dynamic, first 64 rows", True, 64, False),
                ("dynamic, first 4096 rows", True, 4096, False)]
    if args.drop_row_mask:
        compiles.append(("dynamic, first 64 rows, no row mask", True, 64, True))
    env, records = environment(), []
    for norm, fn in norms.items():
        for name, dynamic, first, drop_mask in compiles:
            torch._dynamo.reset()
            with (wrapped_attribute(TritonKernel, "codegen_kernel", without_row_mask, "norms_no_row_mask")
                  if drop_mask else contextlib.nullcontext()):
                compiled = torch.compile(fn, dynamic=dynamic)
                if first is not None:
                    x = torch.randn(first, HIDDEN, device="cuda", dtype=torch.bfloat16)
                    compiled(x, torch.randn_like(x))
                for n in rows:
                    us = replay_us(compiled, n)
                    records.append({"norm": norm, "compile": name, "rows": n, "us": round(us, 2), **env})
                    print(f"{norm:10s} {name:38s} {n:5d} rows {us:7.2f} us", flush=True)
    with open(args.json_out, "w") as f:
        json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
