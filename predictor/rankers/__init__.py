"""Rankers by name: ``make_ranker("lgbm")``. One file per implementation; ``base.Ranker`` is the protocol."""

from __future__ import annotations

import inspect

from .autoheuristic import AutoHeuristicRanker
from .base import Ranker, top_k
from .baselines import AtenOnlyRanker, InductorOrderRanker, RandomRanker, RooflineRanker
from .lgbm import LGBMRankerModel, LGBMRegressorModel
from .tree import TreeRanker

# "lgbm" is the default learned ranker: LambdaRank edged out the pointwise regressor held out on synthetic
# data (6 seeds: oracle@1 0.986 vs 0.984, hit@1 0.46 vs 0.41); re-check with predictor.offline.train.compare_rankers
# when real data arrives. Artifacts record the
# canonical name (``ranker.name``), never the alias, so re-pointing it does not change saved models.
DEFAULT_LGBM = LGBMRankerModel

RANKERS: dict[str, type] = {
    "lgbm": DEFAULT_LGBM,
    LGBMRankerModel.name: LGBMRankerModel,
    LGBMRegressorModel.name: LGBMRegressorModel,
    TreeRanker.name: TreeRanker,
    RooflineRanker.name: RooflineRanker,
    InductorOrderRanker.name: InductorOrderRanker,
    RandomRanker.name: RandomRanker,
    AtenOnlyRanker.name: AtenOnlyRanker,
    AutoHeuristicRanker.name: AutoHeuristicRanker,  # imports torch when it scores
}
# the baselines training reports next to the model (predictor.offline.evaluate adds autoheuristic, which needs torch)
BASELINES = ("inductor_order", "aten_only", "random", "roofline")


def make_ranker(name: str, **params) -> Ranker:
    """A new, unfitted ranker; unknown names and unknown hyper-parameters are refused by name."""
    cls = RANKERS.get(name)
    if cls is None:
        raise ValueError(f"unknown ranker {name!r}; known rankers: {', '.join(RANKERS)}")
    accepted = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"ranker {name!r} has no hyper-parameter {', '.join(unknown)}; "
                         f"it takes: {', '.join(accepted) or '(none)'}")
    return cls(**params)


__all__ = ["RANKERS", "BASELINES", "make_ranker", "Ranker", "top_k", "LGBMRankerModel", "LGBMRegressorModel",
           "TreeRanker", "RooflineRanker", "InductorOrderRanker", "RandomRanker", "AtenOnlyRanker",
           "AutoHeuristicRanker"]
