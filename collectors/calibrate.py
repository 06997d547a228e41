"""``gemm-predictor calibrate``, collection half: label the problems that teach a new GPU the most, within a time
budget, resumable across processes.

1. Candidates: the corpus minus every problem group the given models held out (their ``split.test_groups``):
   those groups are the ground truth a calibrated model is scored on, so calibration never labels them.
2. Plan (once, ``<parts>/calibration/plan.parquet``, reused on resume): a greedy order. Each step takes the
   problem with the highest ``value x novelty / cost``:
   - value = 0.25 + uncertainty, uncertainty in [0, 1] = half the base model's closeness between its top two
     candidates (1 - margin, the margin scaled by the top's lead over the median score) plus half the
     disagreement of the compare model (where the compare model's favourite sits in the base model's order: 0 if
     first, 1 if fifth or later);
   - novelty = mean over the facets family kind / dtype / op / layout of 1 / (1 + problems already taken with
     that value): a round robin, so every kind, dtype, op and layout appears early;
   - cost = estimated seconds: ``MEASURE_S`` + the Triton binaries it needs that no problem taken before needs,
     x ``COMPILE_S`` / compile workers (the bulk collector's cost notion: compilation dominates, shared binaries
     are nearly free).
3. Collection: the bulk collector on the plan, in order, until the budget (wall seconds of all runs, kept in the
   ledger) is spent; each labelled problem's cumulative second is recorded (``predictor.offline.calibration``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from predictor.core.device import DeviceInfo
from predictor.offline.calibration import PLAN_FILE, Ledger, calibration_dir
from predictor.offline.split import problem_group, recorded_test_groups
from predictor.core.problem import problem_from_row

from .bulk_compile import compile_key
from .selection import load_problems
from .store import finished_problem_ids

log = logging.getLogger(__name__)

COMPILE_S = 1.5  # CPU seconds per Triton binary (collectors.bulk_compile.order_by_shared_binaries)
MEASURE_S = 0.3  # GPU seconds to check and time one problem's default space
FACETS = ("kind", "dtype", "op", "layout")
PLAN_COLUMNS = ("position", "problem_id", "reason", "stratum", "uncertainty", "margin", "disagreement",
                "new_binaries", "cost_s", "novelty")


# --- candidates ----------------------------------------------------------------------------------------------

def held_out_groups(models: list[str]) -> set[str]:
    """The union of the problem groups these model folders held out; a model recording none is an error (a
    calibration scored on groups it may have labelled would be worthless)."""
    from predictor.artifacts.model_folder import read_metadata

    groups: set[str] = set()
    for folder in models:
        found = recorded_test_groups(read_metadata(folder))
        if not found:
            raise ValueError(f"--hold-out-groups-of {folder}: its metadata records no split.test_groups")
        groups.update(found)
    return groups


def candidate_problems(corpus: pd.DataFrame, held_out: set[str]) -> pd.DataFrame:
    """Corpus rows outside the held-out groups, by the split's own grouping and by the corpus ``group`` column."""
    group = pd.Series([problem_group(t, pid) for t, pid in zip(corpus["family_tag"], corpus["problem_id"])],
                      index=corpus.index)
    out = group.isin(held_out)
    if "group" in corpus:
        out |= corpus["group"].isin(held_out)
    return corpus[~out].drop_duplicates("problem_id")


# --- uncertainty ---------------------------------------------------------------------------------------------

def _score_all(ranker: Any, device: DeviceInfo, problems: pd.DataFrame, cands_of: dict[str, list]) -> dict[str, np.ndarray]:
    records, owners = [], []
    for row in problems.itertuples(index=False):
        p = problem_from_row(row)
        for c in cands_of[row.problem_id]:
            records.append({**p.to_dict(), **c.to_dict()})
            owners.append(row.problem_id)
    scores = ranker.score(pd.DataFrame(records), device)
    owners_arr = np.asarray(owners, dtype=object)
    out, start = {}, 0
    for pid in problems["problem_id"]:
        n = len(cands_of[pid])
        out[pid] = scores[start:start + n]
        start += n
    assert start == len(owners_arr)
    return out


def uncertainty(base: np.ndarray, other: np.ndarray | None) -> tuple[float, float, float]:
    """``(uncertainty, margin, disagreement)`` of one problem's candidate scores; see the module docstring."""
    if len(base) < 2:
        return 0.0, 1.0, 0.0
    s = np.sort(base)[::-1]
    lead = s[0] - float(np.median(base))
    margin = float(np.clip((s[0] - s[1]) / lead, 0.0, 1.0)) if lead > 0 else 0.0
    disagreement = 0.0
    if other is not None and len(other) == len(base):
        order = np.argsort(-base, kind="stable")
        pos = int(np.flatnonzero(order == int(np.argmax(other)))[0])
        disagreement = min(pos, 4) / 4.0
    return 0.5 * (1.0 - margin) + 0.5 * disagreement, margin, disagreement


# --- the plan ------------------------------------------------------------------------------------------------

def _facets(problems: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"kind": problems["family_tag"].str.split(":").str[0].to_numpy(),
                         "dtype": problems["dtype"].to_numpy(), "op": problems["op"].to_numpy(),
                         "layout": (problems["layout_a"] + "-" + problems["layout_b"]).to_numpy()})


def build_plan(problems: pd.DataFrame, device: DeviceInfo, base: Any, base_device: DeviceInfo,
               other: Any = None, other_device: DeviceInfo | None = None, workers: int = 14) -> pd.DataFrame:
    """The collection order of ``problems`` (corpus rows), one row per problem; deterministic for the same
    inputs. ``base``/``other``: rankers (``score(rows, device)``) with the device each ranks for."""
    from predictor.spaces import enumerate_space

    problems = problems.sort_values("problem_id", kind="stable").reset_index(drop=True)
    pids = problems["problem_id"].tolist()
    cands_of, keys_of = {}, {}
    for row in problems.itertuples(index=False):
        p = problem_from_row(row)
        cands_of[row.problem_id] = enumerate_space(p, "default", device)
        keys_of[row.problem_id] = sorted({k for k in (compile_key(p, c) for c in cands_of[row.problem_id]) if k}, key=str)
    base_scores = _score_all(base, base_device, problems, cands_of)
    other_scores = _score_all(other, other_device, problems, cands_of) if other is not None else {}
    unc = np.array([uncertainty(base_scores[pid], other_scores.get(pid)) for pid in pids]).reshape(-1, 3)

    # problems x binaries incidence, and for each problem the binaries not yet compiled by chosen problems
    key_index: dict[tuple, int] = {}
    rows_of = [[key_index.setdefault(k, len(key_index)) for k in keys_of[pid]] for pid in pids]
    problems_of_key: list[list[int]] = [[] for _ in key_index]
    for i, ks in enumerate(rows_of):
        for k in ks:
            problems_of_key[k].append(i)
    new_binaries = np.array([len(ks) for ks in rows_of], dtype=np.float64)
    compiled = np.zeros(len(key_index), dtype=bool)

    facets = _facets(problems)
    codes = [pd.factorize(facets[f], sort=True)[0] for f in FACETS]
    taken_with = [np.zeros(c.max() + 1 if len(c) else 0) for c in codes]
    value = 0.25 + unc[:, 0]
    remaining = np.ones(len(pids), dtype=bool)
    plan = []
    for position in range(len(pids)):
        novelty = np.mean([1.0 / (1.0 + taken_with[j][codes[j]]) for j in range(len(FACETS))], axis=0)
        cost = MEASURE_S + new_binaries * COMPILE_S / max(1, workers)
        priority = np.where(remaining, value * novelty / cost, -np.inf)
        i = int(np.argmax(priority))  # ties: the smallest problem_id (rows are sorted by it)
        stratum = "/".join(str(facets[f].iat[i]) for f in FACETS)
        u, margin, dis = unc[i]
        why = "models disagree" if dis > 0 else ("close call" if margin < 0.25 else "confident")
        plan.append({"position": position, "problem_id": pids[i],
                     "reason": f"{why}; {int(new_binaries[i])} new binaries; {stratum} "
                               f"(taken before: {int(taken_with[1][codes[1][i]])} of its dtype)",
                     "stratum": stratum, "uncertainty": float(u), "margin": float(margin),
                     "disagreement": float(dis), "new_binaries": int(new_binaries[i]), "cost_s": float(cost[i]),
                     "novelty": float(novelty[i])})
        remaining[i] = False
        for j in range(len(FACETS)):
            taken_with[j][codes[j][i]] += 1
        for k in rows_of[i]:
            if not compiled[k]:
                compiled[k] = True
                new_binaries[problems_of_key[k]] -= 1
    return pd.DataFrame(plan, columns=list(PLAN_COLUMNS))


def load_or_build_plan(parts: str | Path, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """The plan written by the first run of this parts folder (never rebuilt: resumed runs follow the same order)."""
    path = calibration_dir(parts) / PLAN_FILE
    if path.exists():
        plan = pd.read_parquet(path)
        missing = [c for c in ("position", "problem_id", "reason") if c not in plan.columns]
        if missing:
            raise ValueError(f"{path}: not a calibration plan (lacks {', '.join(missing)}); move it away and rerun")
        return plan.sort_values("position", kind="stable").reset_index(drop=True)
    plan = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    plan.to_parquet(tmp, index=False)
    tmp.replace(path)
    log.info("wrote %s: %d problems in order", path, len(plan))
    return plan


# --- the time-boxed collection -------------------------------------------------------------------------------

def check_parts_folder(parts: str | Path) -> Path:
    path = Path(parts)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--parts {parts}: exists and is not a folder")
    if not path.exists() and not path.parent.is_dir():
        raise ValueError(f"--parts {parts}: its parent folder {path.parent} does not exist")
    return path


def run_calibration_collection(corpus: str, parts: str, minutes: float, base_model: str, holdout_models: list[str],
                               compare_model: str | None, workers: int, prepare: Callable[[], DeviceInfo],
                               collect_fn: Callable[..., Any], clock: Callable[[], float] = time.monotonic) -> dict:
    """Plan (first run only) and collect until ``minutes`` of calibration time are spent over all runs.

    ``prepare()``: measure or read this GPU's device description (writes ``device.json``/``run.json`` in
    ``parts``); ``collect_fn(order=, should_stop=, on_problem=)``: the collector (``collectors.bulk.collect`` on
    the GPU; a fake in CPU tests)."""
    from predictor.artifacts.model_folder import load_model

    if not minutes > 0:
        raise ValueError(f"--minutes {minutes}: must be a positive number of minutes")
    check_parts_folder(parts)
    problems = load_problems(corpus)
    held_out = held_out_groups(holdout_models)  # every model folder is checked before any GPU work
    base, base_meta = load_model(base_model)
    other, other_meta = load_model(compare_model) if compare_model else (None, None)
    budget_s = 60.0 * minutes
    Path(parts).mkdir(parents=True, exist_ok=True)
    ledger = Ledger(parts)
    ledger.settings = {**ledger.settings, "budget_s": budget_s, "corpus": corpus, "base_model": base_model,
                       "hold_out_groups_of": list(holdout_models), "compare_model": compare_model}
    if ledger.spent_s >= budget_s:
        log.info("calibration budget %.0f s already spent (%.0f s): nothing to collect", budget_s, ledger.spent_s)
        return {"spent_s": ledger.spent_s, "budget_s": budget_s, "labelled": len(ledger.labelled), "new": 0}
    start = clock()
    ledger.start_run()
    ledger.save()
    new = 0
    try:
        device = prepare()
        ledger.advance(clock() - start)

        def build() -> pd.DataFrame:
            cands = candidate_problems(problems, held_out)
            log.info("planning %d problems (%d held-out groups left out)", len(cands), len(held_out))
            return build_plan(cands, device, base, DeviceInfo.from_metadata(base_meta), other,
                              DeviceInfo.from_metadata(other_meta) if other_meta else None, workers=workers)

        plan = load_or_build_plan(parts, build)
        leaked = set(plan["problem_id"]) - set(candidate_problems(problems, held_out)["problem_id"])
        if leaked:
            raise ValueError(f"{calibration_dir(parts) / PLAN_FILE}: plans {len(leaked)} problems outside the allowed "
                             f"corpus rows (held out, or another corpus); start a new --parts folder")
        done = finished_problem_ids(parts)
        order = [pid for pid in plan["problem_id"] if pid not in done]
        ledger.advance(clock() - start)
        log.info("calibration: %.0f of %.0f s spent, %d problems labelled, %d planned left", ledger.spent_s,
                 budget_s, len(done), len(order))
        bar = _budget_bar(budget_s, ledger.spent_s)

        def should_stop() -> bool:
            spent = ledger.advance(clock() - start)
            bar.update(spent - bar.n)
            return spent >= budget_s

        def on_problem(problem_id: str) -> None:
            nonlocal new
            new += 1
            spent = ledger.advance(clock() - start, problem_id)
            bar.update(spent - bar.n)
            bar.set_postfix(labelled=len(ledger.labelled))

        try:
            collect_fn(order=order, should_stop=should_stop, on_problem=on_problem)
        finally:
            bar.close()
    finally:
        ledger.advance(clock() - start)
    return {"spent_s": round(ledger.spent_s, 1), "budget_s": budget_s, "labelled": len(ledger.labelled), "new": new,
            "plan": str(calibration_dir(parts) / PLAN_FILE), "ledger": str(ledger.path)}


def _budget_bar(budget_s: float, spent_s: float) -> Any:
    from tqdm import tqdm

    return tqdm(total=round(budget_s), initial=min(spent_s, budget_s), desc="calibration budget", unit="s",
                bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} s {postfix}", mininterval=2.0, position=1)
