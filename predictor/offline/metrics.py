"""Offline evaluation metrics: the one implementation of oracle@k, p5@k and hit@k, and their slices.

For a ranker R and k, each problem's *fraction* is its best true time in the space divided by the
fastest true time among R's top-k candidates, a number in [0, 1]:

- a row whose ``status`` is not ``ok`` counts as infinitely slow when chosen, so a top-k made only
  of failed rows scores 0; problems without any ``ok`` row have no best time and are dropped;
- ``oracle@k`` is the geometric mean of the fractions, each floored at ``FAILED_FLOOR`` (1e-3) so
  a single all-failed pick costs a lot (x0.93 on 100 problems) without zeroing the whole mean;
- ``p5@k`` is the 5th percentile (numpy's linear interpolation) of the unfloored fractions;
- ``hit@k`` is the share of problems whose true best time is in the top-k (fraction == 1; a
  candidate tied with the best counts);
- ``failed`` (extra) is the share of problems whose top-k holds only failed rows.

Ties in a ranker's scores are broken by row order (as ``rankers.base.top_k`` does); NaN scores
rank last. The ``random`` baseline is not drawn: it is its exact expectation over uniformly random
k-subsets (``random_expectation``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.device import DeviceInfo

logger = logging.getLogger(__name__)

KS = (1, 2, 3, 5, 8, 10)
FAILED_FLOOR = 1e-3
# Size bands by log2(b*m*n*k): small < 2^24 (below ~256^3: launch/latency bound), medium < 2^33
# (below ~2048^3), large >= 2^33 (compute bound on an H100).
SIZE_BANDS = (("small", 24.0), ("medium", 33.0), ("large", math.inf))
SLICE_KINDS = ("all", "dtype", "family", "size", "op", "applies")
METRIC_COLUMNS = ("ranker", "k", "slice_kind", "slice", "oracle", "p5", "hit", "n", "failed")
BASELINES = ("inductor_order", "aten_only", "random", "roofline", "autoheuristic")
RANDOM = "random"
HEADLINE = (("oracle", 1), ("oracle", 3), ("oracle", 5), ("p5", 5), ("hit", 1), ("hit", 5))
FAMILY_ORDER = ("aten", "triton_mm", "triton_tma", "decompose_k")


class EvaluationError(ValueError):
    """An evaluation that cannot run as asked (one line naming the problem)."""


class NonFiniteScores(EvaluationError):
    """A ranker scored some rows NaN or infinite: every ranking it makes is then arbitrary, so no metric of it may
    be reported (``ranker``: its name in the evaluation)."""

    def __init__(self, ranker: str, bad: int, total: int) -> None:
        self.ranker = ranker
        super().__init__(f"ranker {ranker}: {bad} of {total} scores are not finite (NaN or inf); refusing to report on it")


def finite_scores(scores: Any, ranker: str) -> np.ndarray:
    """``scores`` as floats, or ``NonFiniteScores``."""
    scores = np.asarray(scores, dtype=float)
    bad = int((~np.isfinite(scores)).sum())
    if bad:
        raise NonFiniteScores(ranker, bad, len(scores))
    return scores


@dataclass
class EvaluationResult:
    """``metrics``: tidy table (METRIC_COLUMNS); ``per_problem``: ranker, k, problem_id, fraction, hit,
    top1_family; ``problems``: one row per evaluated problem (op, dtype, family, size band, flops,
    best_family, and an ``applies:<ranker>`` flag per ranker that says where it applies)."""

    metrics: pd.DataFrame
    per_problem: pd.DataFrame
    problems: pd.DataFrame
    rankers: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- metrics


def _check_ks(ks: Iterable[Any]) -> tuple[int, ...]:
    ks = tuple(ks)
    if not ks:
        raise EvaluationError("no k values given; expected e.g. ks=(1, 2, 3, 5, 8, 10)")
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1]
    if bad:
        raise EvaluationError(f"unknown k values {bad}: every k must be an integer >= 1")
    return tuple(sorted(set(int(k) for k in ks)))


def _true_times(rows: pd.DataFrame) -> np.ndarray:
    """Measured time of ok rows; +inf for failed ones (infinitely slow when chosen)."""
    times = rows["time_us"].to_numpy(dtype=float, na_value=np.nan)
    ok = (rows["status"] == "ok").to_numpy() & np.isfinite(times) & (times > 0)
    return np.where(ok, times, np.inf)


def _ranked(rows: pd.DataFrame, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row order sorted by problem, then score (desc), then row position; plus group starts/sizes."""
    scores = np.asarray(scores, dtype=float)
    if scores.shape != (len(rows),):
        raise EvaluationError(f"ranker returned {scores.shape} scores for {len(rows)} rows")
    scores = np.where(np.isnan(scores), -np.inf, scores)
    codes, uniques = pd.factorize(rows["problem_id"], sort=False)
    order = np.lexsort((np.arange(len(rows)), -scores, codes))
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if len(rows) else np.array([], int)
    sizes = np.diff(np.r_[starts, len(rows)])
    return order, starts, sizes, np.asarray(uniques)[sorted_codes[starts]] if len(rows) else np.array([], object)


def _fractions_for_ks(rows: pd.DataFrame, scores: np.ndarray, ks: Sequence[int]) -> tuple[pd.DataFrame, pd.Series]:
    """Per problem (index) and k (columns): the fraction; plus the family of each problem's top-1 row."""
    order, starts, sizes, pids = _ranked(rows, scores)
    times = _true_times(rows)[order]
    cummin = pd.Series(times).groupby(np.repeat(np.arange(len(starts)), sizes)).cummin().to_numpy()
    best = cummin[starts + sizes - 1]
    keep = np.isfinite(best)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in ks:
            chosen = cummin[starts + np.minimum(k, sizes) - 1]
            out[k] = np.where(np.isfinite(chosen), best / chosen, 0.0)[keep]
    frame = pd.DataFrame(out, index=pd.Index(pids[keep], name="problem_id"))
    top1 = pd.Series(rows["family"].to_numpy()[order][starts][keep], index=frame.index, name="top1_family")
    return frame, top1


def per_problem_fraction(rows: pd.DataFrame, scores: np.ndarray, k: int) -> pd.Series:
    """Per problem: best true time / fastest true time among the ranker's top-k (0 if all chosen failed).

    Problems with no ``ok`` row are dropped. Index: ``problem_id``.
    """
    (k,) = _check_ks([k])
    frame, _ = _fractions_for_ks(rows, scores, [k])
    return frame[k].rename("fraction")


def random_expectation(rows: pd.DataFrame, k: int) -> pd.DataFrame:
    """The ``random`` baseline's exact per-problem expectation over uniformly random k-subsets.

    With the N candidates sorted by true time (failed = +inf), the fastest of a random k-subset is
    the j-th with probability C(N-j, k-1) / C(N, k). Columns: ``fraction`` = exp(E[log max(f,
    FAILED_FLOOR)]) (so the geometric mean over problems is exp(E[log oracle@k]) exactly) and
    ``hit`` = P(the best time is in the subset). Problems with no ``ok`` row are dropped.
    """
    (k,) = _check_ks([k])
    times = pd.Series(_true_times(rows), index=rows.index)
    fractions, hits, pids = [], [], []
    for pid, group in times.groupby(rows["problem_id"].to_numpy(), sort=False):
        t = np.sort(group.to_numpy())
        best = t[0]
        if not np.isfinite(best):
            continue
        n = len(t)
        kk = min(k, n)
        # P_1 = k/N, P_{j+1} = P_j * (N-j-k+1)/(N-j)  (j 1-based), zero once fewer than k-1 rows remain
        j = np.arange(1, n + 1)
        ratio = np.ones(n)
        ratio[1:] = np.clip(n - j[:-1] - kk + 1, 0, None) / (n - j[:-1])
        prob = kk / n * np.cumprod(ratio)
        with np.errstate(divide="ignore"):
            frac = np.maximum(np.where(np.isfinite(t), best / t, 0.0), FAILED_FLOOR)
        fractions.append(float(np.exp(np.sum(prob * np.log(frac)))))
        hits.append(float(np.sum(prob[t == best])))
        pids.append(pid)
    return pd.DataFrame({"fraction": fractions, "hit": hits}, index=pd.Index(pids, name="problem_id"))


def summarise(fractions: pd.Series | np.ndarray, hits: pd.Series | np.ndarray | None = None) -> dict[str, float]:
    """{oracle: geomean (floored at FAILED_FLOOR), p5: 5th percentile, hit: share with fraction == 1, n,
    failed: share with fraction 0}. ``hits`` overrides the hit indicator (the random expectation)."""
    f = np.asarray(fractions, dtype=float)
    n = int(len(f))
    if n == 0:
        return {"oracle": float("nan"), "p5": float("nan"), "hit": float("nan"), "n": 0, "failed": float("nan")}
    h = (f >= 1.0 - 1e-12).astype(float) if hits is None else np.asarray(hits, dtype=float)
    return {
        "oracle": float(np.exp(np.mean(np.log(np.maximum(f, FAILED_FLOOR))))),
        "p5": float(np.percentile(f, 5)),
        "hit": float(np.mean(h)),
        "n": n,
        "failed": float(np.mean(f <= 0.0)),
    }


def pruning_rule_summary(rows: pd.DataFrame, scores: np.ndarray, k: int, margin: float | None,
                         keep_aten: bool = True, aten_alone_below_us: float | None = None,
                         device: "DeviceInfo | None" = None) -> dict[str, float]:
    """What the hook keeps and reaches, by the hook's own rule (``policy.keep_best`` and
    ``with_aten_fallback``): per problem the top ``k``, minus those more than ``margin`` below the favourite,
    plus the best-scored aten row when ``keep_aten`` and none is kept; with ``aten_alone_below_us`` (needs
    ``device``), aten alone where it is the favourite of a GEMM whose ideal time is below that.

    Returns ``summarise`` of the fractions plus ``kept_mean`` (choices Inductor would still compile and
    benchmark) and ``single`` (share of problems left with one choice: no benchmarking at all)."""
    from ..core.features import ideal_time_us
    from ..runtime.choices.policy import aten_alone_if_small, keep_best, with_aten_fallback

    if aten_alone_below_us is not None and device is None:
        raise ValueError("aten_alone_below_us needs the device (for the GEMM's ideal time)")
    times = _true_times(rows)
    scores = np.asarray(scores, dtype=float)
    is_aten = (rows["family"] == "aten").to_numpy()
    fractions, kept_counts = [], []
    for idx in rows.groupby("problem_id", sort=False).indices.values():
        best = times[idx].min()
        if not np.isfinite(best):
            continue  # no ok row: not evaluated, as everywhere else
        kept = keep_best(scores[idx], k, margin)
        if keep_aten:
            kept = with_aten_fallback(kept, scores[idx], is_aten[idx])
        if aten_alone_below_us is not None:
            r = rows.iloc[idx[0]]
            ideal = ideal_time_us(int(r["b"]), int(r["m"]), int(r["n"]), int(r["k"]), str(r["dtype"]),
                                  str(r["out_dtype"]), device)
            kept = aten_alone_if_small(kept, scores[idx], is_aten[idx], ideal, aten_alone_below_us)
        chosen = times[idx][kept].min()
        fractions.append(best / chosen if np.isfinite(chosen) else 0.0)
        kept_counts.append(len(kept))
    kept_counts = np.asarray(kept_counts)
    return {**summarise(np.asarray(fractions)), "kept_mean": float(kept_counts.mean()) if len(kept_counts) else float("nan"),
            "single": float((kept_counts == 1).mean()) if len(kept_counts) else float("nan")}


# --------------------------------------------------------------------------- slices and tables


def size_band(log2_size: float) -> str:
    for name, upper in SIZE_BANDS:
        if log2_size < upper:
            return name
    return SIZE_BANDS[-1][0]


def problem_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem with at least one ok row: slice keys, size and the true-best family."""
    first = rows.groupby("problem_id", sort=False)[["op", "dtype", "b", "m", "n", "k", "family_tag"]].first()
    ok = rows[rows["status"] == "ok"]
    best_idx = ok.groupby("problem_id", sort=False)["time_us"].idxmin()
    best = pd.Series(rows.loc[best_idx.to_numpy(), "family"].to_numpy(), index=best_idx.index)
    first = first.loc[first.index.isin(best.index)].copy()
    size = first[["b", "m", "n", "k"]].astype(float).prod(axis=1)
    first["log2_size"] = np.log2(size)
    first["log10_flops"] = np.log10(2.0 * size)
    first["size"] = first["log2_size"].map(size_band)
    first["family"] = first["family_tag"].astype(str).str.split(":").str[0]
    first["best_family"] = best.reindex(first.index)
    first["n_rows"] = rows.groupby("problem_id", sort=False).size().reindex(first.index)
    return first


def _metrics_table(per_problem: pd.DataFrame, problems: pd.DataFrame, rankers: Sequence[str]) -> pd.DataFrame:
    applies_cols = [c for c in problems.columns if c.startswith("applies:")]
    records = []
    for (ranker, k), group in per_problem.groupby(["ranker", "k"], sort=False):
        g = group.set_index("problem_id")
        attrs = problems.reindex(g.index)
        slices: list[tuple[str, str, np.ndarray]] = [("all", "all", np.ones(len(g), bool))]
        for kind in ("dtype", "family", "size", "op"):
            for value in sorted(attrs[kind].dropna().unique(), key=str):
                slices.append((kind, str(value), (attrs[kind] == value).to_numpy()))
        for col in applies_cols:
            slices.append(("applies", col.split(":", 1)[1], attrs[col].fillna(False).to_numpy(bool)))
        for kind, value, mask in slices:
            stats = summarise(g["fraction"].to_numpy()[mask], g["hit"].to_numpy()[mask])
            records.append({"ranker": ranker, "k": int(k), "slice_kind": kind, "slice": value, **stats})
    table = pd.DataFrame.from_records(records, columns=list(METRIC_COLUMNS))
    if table.empty:
        return table
    table["_r"] = table["ranker"].map({r: i for i, r in enumerate(rankers)})
    table["_s"] = table["slice_kind"].map({s: i for i, s in enumerate(SLICE_KINDS)})
    table = table.sort_values(["_r", "k", "_s", "slice"], kind="stable").drop(columns=["_r", "_s"])
    return table.reset_index(drop=True)


def evaluate(rows: pd.DataFrame, rankers: Mapping[str, Any], device: DeviceInfo, ks: Iterable[int] = KS) -> EvaluationResult:
    """Score every ranker on ``rows`` and compute all metrics and slices.

    A ranker named ``random`` (key or ``.name``) is never asked for scores: its exact expectation
    is reported. A ranker with an ``applies(rows, device)`` method (autoheuristic) adds a slice
    ``applies/<name>`` holding the problems where it ranks at least one row, for every ranker.
    """
    ks = _check_ks(ks)
    if not rankers:
        raise EvaluationError("no rankers to evaluate")
    rows = rows.reset_index(drop=True)
    problems = problem_table(rows)
    if problems.empty:
        raise EvaluationError("no problem has an ok row to evaluate on")
    parts = []
    for name, ranker in rankers.items():
        if name == RANDOM or getattr(ranker, "name", None) == RANDOM:
            for k in ks:
                exp = random_expectation(rows, k)
                parts.append(pd.DataFrame({"ranker": name, "k": k, "problem_id": exp.index, "fraction": exp["fraction"].to_numpy(),
                                           "hit": exp["hit"].to_numpy(), "top1_family": None}))
            continue
        scores = finite_scores(ranker.score(rows, device), name)
        frame, top1 = _fractions_for_ks(rows, scores, ks)
        for k in ks:
            f = frame[k].to_numpy()
            parts.append(pd.DataFrame({"ranker": name, "k": k, "problem_id": frame.index, "fraction": f,
                                       "hit": (f >= 1.0 - 1e-12).astype(float), "top1_family": top1.to_numpy()}))
        if hasattr(ranker, "applies"):
            mask = np.asarray(ranker.applies(rows, device), dtype=bool)
            share = pd.Series(mask, dtype=float).groupby(rows["problem_id"].to_numpy()).mean()
            problems[f"applies:{name}"] = share.reindex(problems.index).fillna(0.0).to_numpy() > 0
            problems[f"ranked_share:{name}"] = share.reindex(problems.index).fillna(0.0).to_numpy()
            logger.info("%s applies to %d of %d problems", name, int(problems[f"applies:{name}"].sum()), len(problems))
    per_problem = pd.concat(parts, ignore_index=True)
    names = list(rankers)
    return EvaluationResult(_metrics_table(per_problem, problems, names), per_problem, problems, names)


def evaluate_rankers(rows: pd.DataFrame, rankers: Mapping[str, Any], device: DeviceInfo, ks: Iterable[int] = KS) -> pd.DataFrame:
    """Tidy metrics: one row per (ranker, k, slice_kind, slice) with oracle, p5, hit, n (and failed)."""
    return evaluate(rows, rankers, device, ks).metrics


def decision_sides(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem of scored rows (a ``score`` column, ok rows) with both sides of the decide policy: the
    model's favourite non-aten candidate (``family``, ``score``, ``time_us``), the best-scored aten one
    (``*_aten``), the score gap between them (what ``policy.decide_one`` compares with its gap; negative when the
    model prefers cuBLAS), the best time (``best_us``) and ``aten_over_fav``. Problems without both sides are
    left out."""
    rows = rows.assign(aten=rows.family == "aten")
    best = rows.groupby("problem_id").time_us.min().rename("best_us")
    other = rows[~rows.aten]
    other = other.loc[other.groupby("problem_id").score.idxmax(), ["problem_id", "family", "score", "time_us", "dtype",
                                                                  "op", "layout_b"]]
    aten = rows[rows.aten]
    aten = aten.loc[aten.groupby("problem_id").score.idxmax(), ["problem_id", "score", "time_us"]]
    m = rows.groupby("problem_id").m.first()
    out = (other.merge(aten, on="problem_id", suffixes=("", "_aten")).merge(best, on="problem_id")
           .merge(m, on="problem_id"))
    out["gap"] = out.score - out.score_aten
    out["aten_over_fav"] = out.time_us_aten / out.time_us
    return out


def decided_fraction(sides: pd.DataFrame, gap: float) -> pd.Series:
    """Per problem of ``decision_sides``: best time / time of the kernel the decide policy keeps at ``gap`` (the
    favourite non-aten candidate where it leads the best aten one by at least ``gap``, else that aten one)."""
    return sides["best_us"] / np.where(sides["gap"] >= gap, sides["time_us"], sides["time_us_aten"])
