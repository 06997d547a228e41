"""Re-measure random labelled rows in a fresh process and report how far the new medians are from the labels.

    python -m benchmarks.reproducibility --dataset datasets/nvidia-h200/default.parquet --rows 200

Rows are sampled (seeded) among status == ok; each sampled problem's sampled candidates are re-timed with the
same method as the collector (fresh operands, L2 flush, round-robin, CUDA graph). Prints median and p90 of
|new - old| / old, overall and by time band.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="write per-row results (csv) here")
    args = ap.parse_args()

    import numpy as np
    import pandas as pd
    import torch
    import triton

    from collectors.bulk import BackgroundCompiler, compile_key, measure_problem
    from collectors.timing import L2Flusher
    from predictor.core.candidate import parse_key
    from predictor.core.problem import problem_from_row
    from predictor.artifacts.schema import read_dataset

    df = read_dataset(args.dataset)
    ok = df[df.status == "ok"]
    sample = ok.sample(n=min(args.rows, len(ok)), random_state=args.seed)
    dev = torch.device("cuda")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    flush = L2Flusher(dev)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    for _ in range(200):
        x @ x
    plan = {pid: (problem_from_row(rows.iloc[0]), [parse_key(k) for k in rows.candidate]) for pid, rows in sample.groupby("problem_id")}
    keys = list(dict.fromkeys(k for p, cands in plan.values() for k in (compile_key(p, c) for c in cands) if k))
    compiler = BackgroundCompiler(keys, workers=max(1, (os.cpu_count() or 2) - 2), num_sms=sms)
    compiler.wait(keys)
    compiler.close()
    out = []
    for pid, rows in sample.groupby("problem_id"):
        p = problem_from_row(rows.iloc[0])
        cands = [parse_key(k) for k in rows.candidate]
        new = measure_problem(p, cands, dev, flush, sms, reps=10, seed=args.seed)
        for (_, r), n in zip(rows.iterrows(), new):
            out.append({"problem_id": pid, "candidate": r.candidate, "old_us": r.time_us, "new_us": n["time_us"]})
    res = pd.DataFrame(out)
    res["rel_delta"] = (res.new_us - res.old_us).abs() / res.old_us
    bands = pd.cut(res.old_us, [0, 10, 30, 100, np.inf], labels=["<10us", "10-30us", "30-100us", ">100us"])
    summary = {
        "gpu": torch.cuda.get_device_name(0), "rows": len(res), "problems": int(res.problem_id.nunique()),
        "median_abs_rel_delta": round(float(res.rel_delta.median()), 4),
        "p90_abs_rel_delta": round(float(res.rel_delta.quantile(0.9)), 4),
        "by_band": res.groupby(bands, observed=True).rel_delta.median().round(4).to_dict(),
    }
    if args.out:
        res.to_csv(args.out, index=False)
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
