"""Offline: how well each ranker orders the exhaustive space's Triton configs alone (aten left out).

On the exhaustive dataset cuBLAS is the fastest candidate of most problems (all with M, N >= 256), so the usual
oracle@k is close to 1.0 for any ranker that puts aten first; this asks the harder question the exhaustive hook
depends on when a Triton kernel is wanted (epilogue fusion, aten excluded): among ~2400 Triton/TMA configs, how close is the top-k to the best?
Held-out side = the split model's test groups.

    python -m benchmarks.exhaustive_triton_eval --model models/h200-exhaustive-lgbm \
        --dataset datasets/nvidia-h200/exhaustive.parquet
"""

from __future__ import annotations

import argparse

import pandas as pd

from predictor.artifacts.model_folder import load_model, read_metadata
from predictor.core.device import DeviceInfo
from predictor.offline.metrics import per_problem_fraction, summarise
from predictor.offline.split import in_groups, recorded_test_groups
from predictor.core.problem import problem_from_row
from predictor.rankers import make_ranker
from predictor.artifacts.schema import read_dataset
from predictor.spaces import enumerate_space


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/h200-exhaustive-lgbm")
    ap.add_argument("--dataset", default="datasets/nvidia-h200/exhaustive.parquet")
    ap.add_argument("--ks", default="1,2,5,8")
    args = ap.parse_args()
    meta = read_metadata(args.model)
    rows = read_dataset(args.dataset)
    device = DeviceInfo.from_metadata(rows.attrs["metadata"])
    test = rows[in_groups(rows, recorded_test_groups(meta) or []) & (rows["family"] != "aten")]
    aten = rows[(rows["family"] == "aten") & rows["problem_id"].isin(test["problem_id"])].set_index("problem_id")["time_us"]
    best_triton = test[test["status"] == "ok"].groupby("problem_id")["time_us"].min()
    print(f"{args.dataset}: {test['problem_id'].nunique()} held-out problems, {len(test)} Triton/TMA rows "
          f"({len(test) / test['problem_id'].nunique():.0f} per problem); GPU {device.gpu}")
    print(f"cuBLAS time / best Triton time on them: median {(aten / best_triton).median():.3f}, "
          f"max {(aten / best_triton).max():.3f}\n")
    # same run, same rows: the best of the configs Inductor's DEFAULT space also offers vs the best of all
    in_default = []
    for _, group in test.groupby("problem_id"):
        problem = problem_from_row(group.iloc[0])
        keys = {c.key for c in enumerate_space(problem, "default", device, tma=True)}
        in_default.append(group[group["candidate"].isin(keys)])
    default_rows = pd.concat(in_default)
    best_default = default_rows[default_rows["status"] == "ok"].groupby("problem_id")["time_us"].min()
    gain = (best_default / best_triton).dropna()
    print(f"best DEFAULT-space Triton time / best EXHAUSTIVE-space Triton time, same rows ({len(gain)} problems, "
          f"{len(default_rows) / len(gain):.0f} default configs each): median {gain.median():.3f}, "
          f"p90 {gain.quantile(0.9):.3f}, max {gain.max():.3f}\n")
    ks = [int(k) for k in args.ks.split(",")]
    rankers = {"model (" + meta["name"] + ")": load_model(args.model)[0]}
    rankers.update({name: make_ranker(name) for name in ("roofline", "inductor_order")})
    print("| ranker | " + " | ".join(f"oracle@{k}" for k in ks) + " | " + " | ".join(f"p5@{k}" for k in ks) + " |")
    print("|---|" + "---|" * (2 * len(ks)))
    for name, ranker in rankers.items():
        scores = ranker.score(test, device)
        stats = [summarise(per_problem_fraction(test, scores, k)) for k in ks]
        print(f"| {name} | " + " | ".join(f"{s['oracle']:.3f}" for s in stats) + " | "
              + " | ".join(f"{s['p5']:.3f}" for s in stats) + " |")


if __name__ == "__main__":
    pd.set_option("display.width", 160)
    main()
