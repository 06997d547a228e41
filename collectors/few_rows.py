"""Few-rows labels: GEMMs of 2-32 rows (a served decode batch) timed as cuBLAS and as the few-rows kernel with each
block config.

    python -m collectors.few_rows --out datasets/nvidia-h100/few_rows.parquet

Per problem (a weight in ``F.linear``'s layout, (n, k), and a row count m): the weight shapes of real decoders
(``collectors.gemv``'s corpus, heads up to 600 MB) and a grid of widths and reductions around them (``grid()``), at
m of 2, 4, 8, 16 and 32, in bf16. Candidates:

- ``aten/mm``: ``x @ w.t()``, what plain ``torch.compile`` runs at a symbolic M (cuBLAS);
- ``few_rows/N{BLOCK_N}_K{BLOCK_K}_w{warps}_s{stages}``: ``predictor.runtime.lowerings.few_rows_kernel`` with that block
  config (``predictor.runtime.lowerings.few_rows.GRID``, those that fit), its rows padded to 16 (m <= 16) or 32.

Each output is checked against the fp32 product (``rel_err``), then every candidate is timed round-robin in one
CUDA graph with L2 flushed before every launch (``collectors.timing``; median and IQR of ``--reps``): in a decode
step a weight is read from HBM, the layers before it have evicted it from L2. Written after every problem
(resumable).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from collectors.gemv import _MODELS, TOLERANCE, collect, rel_err
from predictor.runtime.lowerings.few_rows import GRID, config_name, fits

log = logging.getLogger(__name__)
KIND = "few_rows_labels"
ROWS = (2, 4, 8, 16, 32)
MAX_WEIGHT_BYTES = 600 << 20


def grid() -> list[tuple[int, int]]:
    """Widths and reductions spanning decoders' projections, beside the real shapes."""
    return [(n, k) for n in (256, 1024, 3072, 6144, 12288, 24576) for k in (1024, 3072, 6144)]


def corpus(dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Every problem: (n, k) of real decoders and of ``grid()``, each at every m of ``ROWS``."""
    shapes = dict.fromkeys([*(s for shapes in _MODELS.values() for s in shapes), *grid()])
    return [{"op": "mm", "b": 1, "m": m, "n": n, "k": k, "dtype": dtype, "out_dtype": dtype, "layout_a": "row",
             "layout_b": "col", "family_tag": f"few_rows:{n}x{k}"}
            for n, k in shapes if n * k * 2 <= MAX_WEIGHT_BYTES for m in ROWS]


def measure(p: dict[str, Any], reps: int, flush: Any) -> list[dict[str, Any]]:
    """The rows of one problem: cuBLAS and every block config that fits."""
    import torch

    from collectors.timing import time_round_robin
    from predictor.runtime.lowerings.few_rows_kernel import block_rows, few_rows_linear

    dtype = getattr(torch, p["dtype"])
    x = torch.randn(p["m"], p["k"], device="cuda", dtype=dtype)
    w = torch.randn(p["n"], p["k"], device="cuda", dtype=dtype) / p["k"] ** 0.5
    ref = x.float() @ w.float().t()
    rows = block_rows(p["m"])
    candidates: dict[str, Callable[[], Any]] = {"aten/mm": lambda: x @ w.t()}
    for config in GRID:
        if fits(config, p["n"], p["k"], rows):
            candidates[f"few_rows/{config_name(config)}"] = (
                lambda c: (lambda: few_rows_linear(x, w, None, rows, c["BLOCK_N"], c["BLOCK_K"], c["num_warps"],
                                                   c["num_stages"])))(config)
    out, fns = [], []
    for key, fn in candidates.items():
        try:
            rel = rel_err(fn(), ref)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a config Triton cannot compile (shared memory) is recorded
            out.append({**p, "candidate": key, "family": key.split("/")[0], "status": "compile_error",
                        "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        status = "ok" if rel <= TOLERANCE[p["dtype"]] else "wrong_result"
        out.append({**p, "candidate": key, "family": key.split("/")[0], "status": status, "rel_err": rel,
                    "block_m": rows if key != "aten/mm" else None})
        fns.append((len(out) - 1, fn))
    times, method = time_round_robin([fn for _, fn in fns], flush, reps=reps)
    for (i, _), t in zip(fns, times):
        q1, med, q3 = (float(v) for v in pd.Series(t).quantile([0.25, 0.5, 0.75]))
        out[i].update(time_us=med, time_us_iqr=q3 - q1, reps=reps, timing=method)
    return out


ATEN_KEY = "aten/mm"


def labelling(reps: int = 10) -> tuple[list[dict[str, Any]], Callable[[int, dict[str, Any]], list[dict[str, Any]]]]:
    """(problems, measure_one) as ``collectors.gemv.collect`` takes them (this command's and ``calibrate``'s)."""
    from collectors.timing import cuda_flusher

    return corpus(), lambda i, p: measure(p, reps, cuda_flusher())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.few_rows", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="parquet file (resumed when it exists)")
    parser.add_argument("--reps", type=int, default=10, help="timed runs per candidate")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many new problems")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    problems, measure_one = labelling(args.reps)
    return collect(problems, measure_one, args.out, KIND, "few_rows", ATEN_KEY, args.limit)


if __name__ == "__main__":
    sys.exit(main())
