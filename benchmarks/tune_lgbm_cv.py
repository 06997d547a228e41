"""Choose lgbm_rank hyper-parameters by group cross-validation on the TRAINING side of the split only (CPU).

    python benchmarks/tune_lgbm_cv.py

The held-out test split (seed 0) is never looked at: three inner validation splits (seeds 100-102) of the
training groups score each setting. Result on the 3537-problem H200 dataset (oracle@1, mean of 3 folds):
60 trees 0.984, 100 0.987, 150 0.989, 250 0.991, 400 0.987, 600 0.976 -> default n_estimators = 250.
"""
import itertools, numpy as np, pandas as pd, warnings
warnings.filterwarnings("ignore")
from predictor.schema import read_dataset
from predictor.device import DeviceInfo
from predictor.split import split_by_group
from predictor.rankers import make_ranker
from predictor.train import evaluate_ranker
ds = read_dataset("datasets/nvidia-h200/default.parquet")
dev = DeviceInfo.from_metadata(ds.attrs["metadata"])
train, _ = split_by_group(ds, 0.25, 0)
folds = []
for i in range(3):
    inner_train, val = split_by_group(train, 0.25, 100 + i)  # different seeds -> different validation groups
    folds.append((inner_train, val))
grid = [dict(n_estimators=n) for n in (60, 100, 150, 250, 400, 600)] + [
    dict(n_estimators=150, num_leaves=31), dict(n_estimators=300, learning_rate=0.05),
    dict(n_estimators=150, colsample_bytree=0.7, subsample=0.8), dict(n_estimators=150, reg_lambda=1.0)]
for params in grid:
    res = []
    for tr, va in folds:
        r = make_ranker("lgbm_rank", **params).fit(tr, dev)
        m = evaluate_ranker(r, va, dev, ks=(1, 5))
        res.append((m["oracle@1"], m["p5@1"], m["oracle@5"]))
    a = np.array(res)
    print(params, "oracle@1 %.4f p5@1 %.4f oracle@5 %.4f" % tuple(a.mean(0)), "per fold @1", a[:, 0].round(4).tolist(), flush=True)
