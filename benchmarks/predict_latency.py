"""Latency of ranking one problem's candidates on one CPU thread (features + model + ordering).

    python -m benchmarks.predict_latency                       # trains lgbm on a synthetic dataset
    python -m benchmarks.predict_latency --dataset datasets/h100/default.parquet --candidates 1000

The hook's budget: 1000 candidates of one problem in <= 2 ms p50. Building the rows DataFrame is the
caller's cost and not timed; the breakdown shows features and model separately.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one thread, before numpy loads
    os.environ[_var] = "1"

import argparse  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


from predictor.core.candidate import Candidate  # noqa: E402
from predictor.core.device import DeviceInfo  # noqa: E402
from predictor.core.features import feature_matrix  # noqa: E402
from predictor.core.problem import Problem  # noqa: E402
from predictor.rankers import make_ranker  # noqa: E402
from predictor.artifacts.schema import read_dataset  # noqa: E402


def candidate_rows(problem: Problem, count: int) -> pd.DataFrame:
    """``count`` candidates of one problem: aten, decompose-K splits and a grid of Triton tiles (an
    EXHAUSTIVE-sized list), as the hook would hand them over."""
    cands = [Candidate("aten", aten_op="mm")] + [Candidate("decompose_k", k_split=s) for s in (2, 4, 8, 16, 32)]
    grid = itertools.product((16, 32, 64, 128, 256), (16, 32, 64, 128, 256), (16, 32, 64, 128), (1, 2, 3, 4, 5),
                             (2, 4, 8), ("triton_mm", "triton_tma"))
    for bm, bn, bk, stages, warps, family in grid:
        if len(cands) >= count:
            break
        cands.append(Candidate(family, bm, bn, bk, stages, warps, 8))
    return pd.DataFrame([{**problem.to_dict(), **c.to_dict(), "inductor_rank": i} for i, c in enumerate(cands[:count])])


def percentiles(samples: list[float]) -> tuple[float, float]:
    values = np.asarray(samples) * 1e3
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help="train on this dataset (default: a synthetic one)")
    parser.add_argument("--ranker", default="lgbm")
    parser.add_argument("--n-estimators", type=int, help="override the ranker's tree count")
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args(argv)

    if args.dataset:
        rows = read_dataset(args.dataset)
        device = DeviceInfo.from_metadata(rows.attrs["metadata"])
    else:
        from predictor.testing.synthetic import METADATA, synthetic_dataset

        rows = synthetic_dataset(300)
        device = DeviceInfo.from_metadata(METADATA)
    params = {"n_estimators": args.n_estimators} if args.n_estimators else {}
    ranker = make_ranker(args.ranker, **params).fit(rows, device)

    problem = Problem("mm", 333, 1111, 2222, "float16", layout_b="col")
    cands = candidate_rows(problem, args.candidates)

    def rank() -> np.ndarray:
        return np.argsort(-ranker.score(cands, device), kind="stable")

    X = feature_matrix(cands, device)
    timings: dict[str, list[float]] = {"total (features + model + order)": [], "features": [], "model": []}
    jobs = {"total (features + model + order)": rank, "features": lambda: feature_matrix(cands, device)}
    booster = getattr(ranker, "booster_", None)
    if booster is not None:
        jobs["model"] = lambda: booster.predict(X, num_threads=1)
    else:
        del timings["model"]
    for _ in range(20):  # warm-up
        for job in jobs.values():
            job()
    for _ in range(args.repeats):
        for name, job in jobs.items():
            started = time.perf_counter()
            job()
            timings[name].append(time.perf_counter() - started)

    trees = booster.num_trees() if booster is not None else "-"
    print(f"{args.ranker} ({type(ranker).__name__}, {trees} trees), {len(cands)} candidates of one problem, one thread, "
          f"{args.repeats} repeats")
    for name, samples in timings.items():
        p50, p99 = percentiles(samples)
        print(f"  {name:34s} p50 {p50:6.3f} ms   p99 {p99:6.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
