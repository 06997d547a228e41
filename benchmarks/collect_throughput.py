"""Bulk-collector throughput on the GPU: labelled rows per GPU-second, compilation included.

    python -m benchmarks.collect_throughput --corpus datasets/corpus/corpus_v1.parquet --problems 200

Starts from an empty Triton cache (so compile time counts), samples problems across all corpus families with a
fixed seed, collects the default space, and prints rows, wall seconds and rows/s, plus status counts.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="datasets/corpus/corpus_v1.parquet")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--out", default=None, help="parts folder (default: a temporary one)")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")  # cold cache: compile time counts
    import pandas as pd
    import torch

    from collectors.bulk import collect
    from predictor.artifacts.schema import read_dataset

    corpus = pd.read_parquet(args.corpus)
    sample = corpus.sample(n=min(args.problems, len(corpus)), random_state=args.seed)
    work = Path(tempfile.mkdtemp(prefix="throughput-"))
    sample_path = work / "sample.parquet"
    sample.to_parquet(sample_path)
    out = Path(args.out) if args.out else work / "parts"

    start = time.time()
    stats = collect(str(sample_path), str(out), space="default", gpus=args.gpus)
    wall = time.time() - start
    df = read_dataset(out)
    n_gpus = len(stats)
    result = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": __import__("triton").__version__,
        "problems": int(df.problem_id.nunique()), "rows": len(df), "wall_s": round(wall, 1), "gpus": n_gpus,
        "rows_per_gpu_s": round(len(df) / wall / n_gpus, 1),
        "timing_only_rows_per_s": round(sum(s["rows"] for s in stats) / max(s["seconds"] for s in stats), 1),
        "status": df.status.value_counts().to_dict(),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
