"""The Ranker role: score the candidates of problems; higher score = predicted faster."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from ..device import DeviceInfo


@runtime_checkable
class Ranker(Protocol):
    """sklearn-style: hyper-parameters in ``__init__``, learned state ends with ``_``.

    ``rows`` are dataset rows (problem fields + candidate fields; labels only needed by ``fit``).
    ``score`` must work on the rows of many problems at once and return one float per row;
    ranking happens within each ``problem_id``.
    """

    name: str

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "Ranker": ...

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray: ...


def top_k(rows: pd.DataFrame, scores: np.ndarray, k: int) -> pd.DataFrame:
    """The k best-scored rows of each problem (ties broken by the row order, so results are deterministic)."""
    ranked = rows.assign(_score=np.asarray(scores, dtype=float), _order=np.arange(len(rows)))
    ranked = ranked.sort_values(["problem_id", "_score", "_order"], ascending=[True, False, True], kind="stable")
    return ranked.groupby("problem_id", sort=False).head(k).drop(columns=["_order"])


def keep_best(scores: np.ndarray, k: int, margin: float | None = None) -> np.ndarray:
    """Indices of the candidates one problem keeps: the k best scores (ties in the given order), minus any
    more than ``margin`` below the favourite. The hook and the offline evaluation share this rule."""
    scores = np.asarray(scores, dtype=float)
    order = np.argsort(-scores, kind="stable")
    chosen = order[:k]
    if margin is not None and len(order):
        chosen = chosen[scores[chosen] >= scores[order[0]] - margin]
    return chosen


def with_aten_fallback(kept: np.ndarray, scores: np.ndarray, is_aten: np.ndarray) -> np.ndarray:
    """``kept`` plus the best-scored aten candidate when none is kept (cuBLAS as the safe fallback)."""
    is_aten = np.asarray(is_aten, dtype=bool)
    if not is_aten.any() or is_aten[kept].any():
        return kept
    aten = np.flatnonzero(is_aten)
    best = aten[np.argsort(-np.asarray(scores, dtype=float)[aten], kind="stable")[0]]
    return np.append(kept, best)


def with_epilogue_templates(kept: np.ndarray, scores: np.ndarray, is_template: np.ndarray, n: int) -> np.ndarray:
    """``kept`` plus the ``n`` best-scored fusable Triton templates when fewer are kept.

    Why: a GEMM whose output feeds a pointwise op (bias, activation, residual add, gradient products) can
    have that op fused into a Triton template's epilogue, saving a kernel and a round trip through memory;
    cuBLAS cannot. Inductor decides that by benchmarking the best template with the epilogue fused against
    the best choice plus a separate epilogue kernel, but only among the choices it was given. Labels time
    bare GEMMs, so a model that favours cuBLAS would otherwise take the fusion away."""
    is_template = np.asarray(is_template, dtype=bool)
    missing = n - int(is_template[kept].sum())
    if missing <= 0 or not is_template.any():
        return kept
    candidates = np.flatnonzero(is_template & ~np.isin(np.arange(len(is_template)), kept))
    best = candidates[np.argsort(-np.asarray(scores, dtype=float)[candidates], kind="stable")[:missing]]
    return np.append(kept, best)


# GEMMs whose ideal time (features.ideal_time_us) is below this keep aten alone when the model favours it:
# Inductor's benchmark overstates cuBLAS there and would pick a slower Triton kernel. 100 us covers the
# losses measured on the H200 (docs/benchmarks/h200: 6-60 us GEMMs, up to 2.5x slower picks).
ATEN_ALONE_BELOW_US = 100.0


def aten_alone_if_small(kept: np.ndarray, scores: np.ndarray, is_aten: np.ndarray, ideal_us: float,
                        below_us: float | None) -> np.ndarray:
    """Only the favourite when it is aten and the GEMM's ideal time is under ``below_us``.

    Why: Inductor's own benchmark overstates cuBLAS's time on small GEMMs (launch overhead it does not
    charge to Triton kernels), so if a Triton candidate survives beside a favoured aten it is often picked
    although it is slower (measured up to 2.5x on an H200, docs/benchmarks). A single survivor is used
    without any benchmark. Offline, where benchmarking is perfect, this can only lose; the GPU benchmark
    is where it wins."""
    scores = np.asarray(scores, dtype=float)
    is_aten = np.asarray(is_aten, dtype=bool)
    if below_us is None or not len(kept) or ideal_us >= below_us or not is_aten.any():
        return kept
    best_aten = int(np.flatnonzero(is_aten)[np.argmax(scores[is_aten])])
    if is_aten.all() or scores[best_aten] > scores[~is_aten].max():  # strictly favoured, not a tie
        return np.asarray([best_aten])
    return kept
