"""Choose a ranker's hyper-parameters by group cross-validation on the TRAINING side of the split only (CPU).

    python benchmarks/tune_cv.py --ranker lgbm_rank
    python benchmarks/tune_cv.py --ranker tree

The held-out test split (seed 0) is never looked at: three inner validation splits (seeds 100-102) of the
training groups score each setting. Results on the 3537-problem H200 dataset (oracle@1, mean of 3 folds):
- lgbm_rank: 60 trees 0.984, 100 0.987, 150 0.989, **250 0.991**, 400 0.987, 600 0.976 -> n_estimators 250.
- tree: depth 6 0.948, 8 0.959, 10 0.962, 12 0.968, 12 + min_samples_leaf 20 0.969, **14 + leaf 20 0.972**,
  16 + leaf 20 0.972 -> max_depth 14, min_samples_leaf 20.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRIDS = {
    "lgbm_rank": [dict(n_estimators=n) for n in (60, 100, 150, 250, 400, 600)] + [
        dict(n_estimators=150, num_leaves=31), dict(n_estimators=300, learning_rate=0.05),
        dict(n_estimators=150, colsample_bytree=0.7, subsample=0.8), dict(n_estimators=150, reg_lambda=1.0)],
    "tree": [dict(max_depth=d) for d in (6, 8, 10, 12)] + [
        dict(max_depth=d, min_samples_leaf=20) for d in (8, 12, 14, 16)] + [dict(max_depth=12, min_samples_leaf=50)],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="datasets/nvidia-h200/default.parquet")
    ap.add_argument("--ranker", default="lgbm_rank", choices=sorted(GRIDS))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from predictor.device import DeviceInfo
    from predictor.rankers import make_ranker
    from predictor.schema import read_dataset
    from predictor.split import split_by_group
    from predictor.train import evaluate_ranker

    rows = read_dataset(args.dataset)
    device = DeviceInfo.from_metadata(rows.attrs["metadata"])
    train, _ = split_by_group(rows, 0.25, 0)  # the test side is dropped here and never used
    folds = [split_by_group(train, 0.25, 100 + i) for i in range(3)]  # other seeds: other validation groups
    for params in GRIDS[args.ranker]:
        scores = []
        for inner_train, validation in folds:
            model = make_ranker(args.ranker, **params).fit(inner_train, device)
            m = evaluate_ranker(model, validation, device, ks=(1, 5))
            scores.append((m["oracle@1"], m["p5@1"], m["oracle@5"]))
        mean = np.mean(scores, axis=0)
        print(f"{params}: oracle@1 {mean[0]:.4f}  p5@1 {mean[1]:.4f}  oracle@5 {mean[2]:.4f}  "
              f"per fold oracle@1 {[round(s[0], 4) for s in scores]}", flush=True)


if __name__ == "__main__":
    main()
