"""GEMMs of 2-32 rows as cuBLAS and as Inductor's reduction form (the batch-1 GEMV path at more rows), on the GPU.

    python -m benchmarks.small_m_reduction --out docs/benchmarks/small-m-reduction/nvidia-h100.json

Why: at batch 1 the reduction form (a broadcast multiply summed over K) runs a decoder's GEMVs faster than cuBLAS
(docs/GEMV.md). This asks whether it still does at a few rows, where a per-size-range choice could use it under a
dynamic batch. Per decoder weight (N, K; bf16, ``F.linear``'s layout) and rows M, each timed by
``triton.testing.do_bench`` (L2 flushed before every call, mean over 60 ms), in microseconds:
- ``cublas_M``: ``torch.mm`` (plain ``torch.compile``'s choice);
- ``static_m_M``: the reduction form compiled for that M (Inductor's default heuristic);
- ``dyn_m_M`` / ``dyn_n_M``: the reduction form compiled once with M dynamic, rows ordered by M (``[M, N]``) or by
  N (``[N, M]``, transposed back: each weight row's M products next to each other), timed at each M;
- ``err_*``: the largest absolute difference from ``torch.mm``.
Writes one JSON (rows, GPU and versions) and prints a line per weight.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# (name, N, K): the serving benchmark's decoders' widths, and one Gemma 3 projection
SHAPES = [("llama.q", 2048, 2048), ("llama.kv", 256, 2048), ("llama.gate", 5632, 2048), ("llama.down", 2048, 5632),
          ("llama.head", 32000, 2048), ("opt.fc1", 8192, 2048), ("opt.fc2", 2048, 8192), ("gemma.gate", 6912, 1152)]
ROWS = [2, 3, 4, 8, 16, 32]


def rows_by_m(a, w):
    """``a @ w.T`` as Inductor's mm decomposition spells a GEMV: output rows ordered by M."""
    return (a.unsqueeze(2) * w.t().unsqueeze(0)).sum(dim=1)


def rows_by_n(a, w):
    """The same product with each weight row's M products adjacent, transposed back to ``[M, N]``."""
    return (w.unsqueeze(1) * a.unsqueeze(0)).sum(dim=2).t()


def time_shape(name: str, n: int, k: int) -> dict:
    import torch
    from triton.testing import do_bench

    def bench(fn) -> float:
        return do_bench(fn, warmup=10, rep=60) * 1000.0

    dtype = torch.bfloat16
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    row: dict = {"shape": name, "n": n, "k": k}
    for form, fn in (("m", rows_by_m), ("n", rows_by_n)):
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=True)
        for m in ROWS:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            row[f"err_{form}_{m}"] = (compiled(a, w).float() - (a @ w.t()).float()).abs().max().item()
            row[f"dyn_{form}_{m}"] = bench(lambda: compiled(a, w))
    for m in ROWS:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        row[f"cublas_{m}"] = bench(lambda: torch.mm(a, w.t()))
        torch._dynamo.reset()
        compiled = torch.compile(rows_by_m, dynamic=False)
        compiled(a, w)
        row[f"static_m_{m}"] = bench(lambda: compiled(a, w))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.small_m_reduction",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        sys.exit("small_m_reduction: error: needs a CUDA GPU")
    torch._dynamo.config.cache_size_limit = 1000
    rows = []
    for name, n, k in SHAPES:
        row = time_shape(name, n, k)
        rows.append(row)
        print(name, " ".join(f"M{m}: cublas {row[f'cublas_{m}']:.1f} static {row[f'static_m_{m}']:.1f} "
                             f"dyn-m {row[f'dyn_m_{m}']:.1f} dyn-n {row[f'dyn_n_{m}']:.1f} |" for m in ROWS), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                          "triton": triton.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
