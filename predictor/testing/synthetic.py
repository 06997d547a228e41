"""Synthetic datasets in the real schema, for CPU tests and benchmarks (never shipped as labels)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.core.candidate import Candidate
from predictor.core.problem import Problem
from predictor.artifacts.schema import SCHEMA_VERSION

DEVICE = {"gpu": "Synthetic GPU", "cc": "9.0", "sm_count": 132, "smem_per_block": 232448, "l2_bytes": 62914560,
          "mem_bandwidth_gbs": 4000.0, "peak_tflops": {"float16": 600.0, "bfloat16": 600.0, "float32": 50.0, "int8": 1000.0}}
METADATA = {"schema_version": SCHEMA_VERSION, "gpu": DEVICE["gpu"], "cc": DEVICE["cc"], "torch": "2.11.0", "triton": "3.6.0",
            "corpus_sha256": "synthetic", "device": DEVICE}

TILES = [(32, 32, 32, 2, 4), (64, 64, 32, 3, 4), (64, 128, 32, 3, 4), (128, 64, 32, 4, 4), (128, 128, 32, 3, 8),
         (128, 128, 64, 3, 8), (64, 64, 64, 4, 4), (128, 256, 64, 3, 8), (16, 64, 128, 2, 4), (32, 128, 64, 4, 4)]


def _fake_time(p: Problem, c: Candidate, rng: np.random.Generator) -> float:
    """A plausible-looking time: waves of tiles x per-tile cost + launch overhead, with noise."""
    flops = 2.0 * p.m * p.n * p.k
    if c.family == "aten":
        return 4.0 + flops / 4e8 * (1.3 if p.m < 64 else 1.0) * rng.uniform(0.95, 1.05)
    if c.family == "decompose_k":
        return 6.0 + flops / 3e8 / min(c.k_split, 8) + p.m * p.n * c.k_split / 2e6
    tiles = -(-p.m // c.block_m) * -(-p.n // c.block_n)
    waves = -(-tiles // 132)
    per_tile = c.block_m * c.block_n * p.k * 2 / 3e6 / (1 + c.num_stages / 4)
    return (3.0 + waves * per_tile) * rng.uniform(0.97, 1.03)


def synthetic_dataset(n_problems: int = 60, seed: int = 0, groups: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_problems):
        m, n, k = (int(2 ** rng.uniform(4, 13)) for _ in range(3))
        dtype = ["float16", "bfloat16", "float32"][i % 3]
        p = Problem("mm", m, n, k, dtype, layout_b="col" if i % 2 else "row")
        cands = [Candidate("aten", aten_op="mm")] + [Candidate("triton_mm", *t, group_m=8) for t in TILES]
        if k > 4 * max(m, n):
            cands += [Candidate("decompose_k", k_split=s) for s in (2, 4, 8)]
        for rank, c in enumerate(cands):
            t = _fake_time(p, c, rng)
            rows.append({**p.to_dict(), "family_tag": f"synthetic:g{i % groups}", **c.to_dict(), "time_us": t,
                         "time_us_iqr": t * 0.01, "reps": 10, "status": "ok", "collector": "bulk", "gpu": DEVICE["gpu"],
                         "cc": DEVICE["cc"], "torch": "2.11.0", "triton": "3.6.0", "schema_version": SCHEMA_VERSION,
                         "inductor_rank": rank})
    df = pd.DataFrame(rows)
    # a few failures, as real data has
    df.loc[df.sample(frac=0.02, random_state=seed).index.difference(df.index[df.family == "aten"]), ["status", "time_us"]] = ["resources", np.nan]
    return df
