"""Grouped-GEMM labels (mixture-of-experts layers): every Triton grouped-mm config and aten, timed by Inductor.

    python -m collectors.grouped_mm --out datasets/nvidia-h200/grouped_mm.parquet

Per problem (G experts, m_avg rows per expert, an expert's (n, k)), ``torch._grouped_mm`` as transformers' MoE
layers call it (A: the routed rows (G*m_avg, k); B: the experts' weights (G, n, k) transposed, K-major; offsets
every m_avg rows) is compiled under ``max_autotune_gemm`` and Inductor's own autotune timings of every choice are
recorded through its feedback saver (``select_algorithm.add_feedback_saver``): one row per choice, the config
parsed from the choice's description. Resumable: problems already in ``--out`` are skipped.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
KIND = "grouped_mm_labels"  # the file metadata's "kind"
EXPERTS = 8
# an expert's (n, k): Mixtral-8x7B gate-up and down, Qwen1.5-MoE-A2.7B / OLMoE-sized gate-up and down
SHAPES = {"mixtral": [(28672, 4096), (4096, 14336)], "small-moe": [(2816, 2048), (2048, 1408)]}
M_AVG = (1, 4, 16, 64, 256)
_FIELDS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")


def corpus() -> list[dict[str, Any]]:
    return [{"op": "grouped_mm", "b": EXPERTS, "m": m_avg, "n": n, "k": k, "dtype": "bfloat16",
             "family_tag": f"moe:{group}"} for group, shapes in SHAPES.items() for n, k in shapes for m_avg in M_AVG]


def config_of(description: str) -> dict[str, int]:
    """The block sizes, stages and warps named in a Triton choice's description (empty for aten)."""
    out = {}
    for field in _FIELDS:
        found = re.search(rf"\b{field}=(\d+)", description)
        if found:
            out[field] = int(found.group(1))
    return out


def measure(p: dict[str, Any]) -> list[dict[str, Any]]:
    import torch
    from torch._inductor import select_algorithm
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    g, m_avg, n, k = p["b"], p["m"], p["n"], p["k"]
    a = torch.randn(g * m_avg, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    offs = torch.arange(m_avg, g * m_avg + 1, m_avg, device="cuda", dtype=torch.int32)
    timings: list[dict[str, Any]] = []

    def save(result: dict[Any, float], name: str, *rest: Any) -> None:
        for choice, ms in result.items():
            desc = str(getattr(choice, "description", "") or "")
            key = "aten" if "aten" in str(getattr(choice, "name", "")).lower() or not config_of(desc) else "triton"
            timings.append({**p, "candidate": key if key == "aten" else
                            "triton/" + "/".join(f"{f}={v}" for f, v in config_of(desc).items()),
                            "family": key, **config_of(desc), "time_us": float(ms) * 1e3,
                            "status": "ok" if ms == ms and ms < float("inf") else "compile_error",
                            "description": desc[:300]})

    select_algorithm.add_feedback_saver(save)
    try:
        with fresh_cache():
            fn = torch.compile(lambda a, w, offs: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs),
                               options={"max_autotune_gemm": True, "max_autotune_gemm_backends": "ATEN,TRITON"})
            fn(a, w, offs)
    finally:
        select_algorithm.clear_feedback_savers()
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.grouped_mm", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="parquet file (resumed when it exists)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from collectors.gemv import collect

    return collect(corpus(), lambda i, p: measure(p), args.out, KIND, "grouped_mm", "aten")


if __name__ == "__main__":
    sys.exit(main())
