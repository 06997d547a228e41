"""Grouped-GEMM labels (mixture-of-experts layers): every Triton grouped-mm config and aten, timed by Inductor.

    python -m collectors.grouped_mm --out datasets/nvidia-h200/grouped_mm.parquet

Per problem (G experts, m rows per routed expert, an expert's (n, k)), ``torch._grouped_mm`` as transformers' MoE
layers call it (A: the routed rows, 2-D; B: the experts' weights (G, n, k) transposed, K-major; offsets every m
rows) is compiled under ``max_autotune_gemm`` and Inductor's own autotune timings of every choice are recorded
through its feedback saver (``select_algorithm.add_feedback_saver``): one row per choice, the config parsed from
the choice's description. Resumable: problems already in ``--out`` are skipped.

Fewer routed rows than experts (decode: a token's top-k experts) is a problem of its own: ``active`` experts get
one row each and the rest none, as the router leaves them. Every other problem routes m rows to every expert.
The corpus is MoE decoders' expert shapes at their expert counts and top-k, over token counts from batch-1
decode to a 2048-token prefill (routed rows = tokens x top-k), ordered so a run stopped early still spans them.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import Any, Callable

import pandas as pd

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
KIND = "grouped_mm_labels"  # the file metadata's "kind"
# MoE decoders as transformers builds them: (experts, top-k, gate-up (n, k), down (n, k)). Qwen3-MoE (128 experts,
# top-8, 768 wide) is left out on purpose: the zoo's held-out MoE model (collectors/programs/configs.py).
ROUTED = {"mixtral": (8, 2, (28672, 4096), (4096, 14336)),
          "qwen1.5-moe": (60, 4, (2816, 2048), (2048, 1408)),
          "olmoe": (64, 8, (2048, 2048), (2048, 1024)),
          "gpt-oss": (32, 4, (5760, 2880), (2880, 2880))}
TOKENS = (1, 8, 512, 64, 2048, 256)  # decode batch 1 and 8, prefill; this order: a partial run spans the range
_FIELDS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")


def routed_problem(group: str, experts: int, top_k: int, n: int, k: int, tokens: int) -> dict[str, Any]:
    """One grouped GEMM of ``tokens`` tokens routed to ``top_k`` of ``experts`` experts: m rows per expert, or,
    with fewer routed rows than experts, ``active`` experts of one row each."""
    rows = tokens * top_k
    p = {"op": "grouped_mm", "b": experts, "m": max(rows // experts, 1), "n": n, "k": k, "dtype": "bfloat16",
         "family_tag": f"moe:{group}"}
    return {**p, "active": rows} if rows < experts else p


def corpus() -> list[dict[str, Any]]:
    """Every group's gate-up and down projections at every token count (Mixtral's uniform problems at 1, 4, 16,
    64 and 256 rows per expert were the first collected; those the routed list repeats are skipped on resume)."""
    return [routed_problem(group, experts, top_k, n, k, tokens) for tokens in TOKENS
            for group, (experts, top_k, gate_up, down) in ROUTED.items() for n, k in (gate_up, down)]


def routed_rows(p: dict[str, Any]) -> int:
    """A's rows: ``active`` one-row experts, or m rows to each of b experts."""
    active = p.get("active")
    return int(active) if active == active and active is not None else int(p["b"]) * int(p["m"])


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
    g, m_avg, n, k, rows = p["b"], p["m"], p["n"], p["k"], routed_rows(p)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    # offsets are each expert's end row: m rows each, or one row for the first ``active`` experts and none after
    ends = torch.arange(1, g + 1, device="cuda") * m_avg
    offs = ends.clamp(max=rows).to(torch.int32)
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


ATEN_KEY = "aten"


def labelling(reps: int | None = None) -> tuple[list[dict[str, Any]], Callable[[int, dict[str, Any]], list[dict[str, Any]]]]:
    """(problems, measure_one) as ``collectors.gemv.collect`` takes them (this command's and ``calibrate``'s).
    ``reps`` is not used: the times are Inductor's own benchmark's."""
    return corpus(), lambda i, p: measure(p)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.grouped_mm", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="parquet file (resumed when it exists)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from collectors.gemv import collect

    problems, measure_one = labelling()
    return collect(problems, measure_one, args.out, KIND, "grouped_mm", ATEN_KEY)


if __name__ == "__main__":
    sys.exit(main())
