"""Train a ranker on a dataset, measure it on held-out problem groups, and save it as a model folder.

``train`` is what ``gemm-predictor train`` calls: read + validate the dataset, split by problem group
(``predictor.offline.split``), fit on the training side, score the held-out side with the ranker and the
baselines, optionally refit on every row for the shipped model, and save the artifact.
"""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
from tqdm.auto import tqdm

from ..artifacts.atomic import MODEL, check_output_folder, claim_output
from ..core.device import DeviceInfo
from .metrics import KS, RANDOM, finite_scores, per_problem_fraction, random_expectation, summarise
from ..runtime.choices.policy import problem_kind
from ..rankers import BASELINES, RANKERS, make_ranker
from ..artifacts.dataset_rules import check_dataset_device, check_unique_rows, select_space
from ..artifacts.schema import file_sha256, read_dataset
from ..spaces import SPACES
from ..spaces.configs import space_metadata
from .shipped import check_not_shipped
from .split import groups_of, split_by_group, split_by_named_groups

log = logging.getLogger(__name__)



# --- metrics: the official definitions live in predictor.offline.metrics ------------------------------------------

def evaluate_ranker(ranker, rows: pd.DataFrame, device: DeviceInfo, ks: Iterable[int] = KS) -> dict[str, float]:
    """{"problems", "oracle@k", "p5@k", "hit@k", "failed@k"} of a fitted ranker over ``rows``, computed with
    ``predictor.offline.metrics`` (the ``random`` ranker is reported by its exact expectation, as there)."""
    summary: dict[str, float] = {}
    is_random = getattr(ranker, "name", None) == RANDOM
    scores = None if is_random else finite_scores(ranker.score(rows, device), getattr(ranker, "name", "model"))
    for k in ks:
        if is_random:
            expected = random_expectation(rows, k)
            stats = summarise(expected["fraction"], expected["hit"])
        else:
            stats = summarise(per_problem_fraction(rows, scores, k))
        summary["problems"] = stats["n"]
        summary.update({f"oracle@{k}": stats["oracle"], f"p5@{k}": stats["p5"], f"hit@{k}": stats["hit"],
                        f"failed@{k}": stats["failed"]})
    return summary


# --- training ------------------------------------------------------------------------------------------

def _select_space(rows: pd.DataFrame, space: str) -> pd.DataFrame:
    if space not in SPACES:
        raise ValueError(f"unknown space {space!r}; expected one of {', '.join(SPACES)}")
    return select_space(rows, space)


MARGIN_GRID = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def calibrate_margin(model: Any, rows: pd.DataFrame, device: DeviceInfo, top_k: int = 5,
                     max_oracle_loss: float = 0.005, min_p5: float = 0.95) -> dict[str, Any]:
    """The smallest score margin whose pruning keeps held-out oracle within ``max_oracle_loss`` of plain
    top-k and p5 >= ``min_p5`` (or plain top-k's p5 if lower): fewer kept choices = less autotuning.
    None when no margin qualifies (the hook then keeps all k)."""
    from .metrics import pruning_rule_summary

    scores = finite_scores(model.score(rows, device), getattr(model, "name", "model"))
    plain = pruning_rule_summary(rows, scores, top_k, None)
    curve = {str(m): pruning_rule_summary(rows, scores, top_k, m) for m in MARGIN_GRID}
    ok = [m for m in MARGIN_GRID if curve[str(m)]["oracle"] >= plain["oracle"] - max_oracle_loss
          and curve[str(m)]["p5"] >= min(min_p5, plain["p5"])]
    margin = ok[0] if ok else None
    return {"margin": margin, "top_k": top_k, "keep_aten": True, "criterion":
            f"oracle >= top-{top_k} oracle - {max_oracle_loss}, p5 >= {min_p5}", "plain": plain,
            "chosen": curve[str(margin)] if margin is not None else plain, "curve": curve}


def _problem_ranges(rows: pd.DataFrame) -> dict[str, Any]:
    ok = rows[rows["status"] == "ok"]
    ranges: dict[str, Any] = {name: [int(ok[name].min()), int(ok[name].max())] for name in ("b", "m", "n", "k")}
    ranges["ops"] = sorted(map(str, ok["op"].unique()))
    ranges["dtypes"] = sorted(map(str, ok["dtype"].unique()))
    # the kinds (op, dtype, layouts) with labels: the hook's "decide" policy takes a Triton pick over cuBLAS
    # only for these (predictor.runtime.choices.policy)
    kinds = ok[["op", "dtype", "layout_a", "layout_b"]].drop_duplicates().astype(str)
    ranges["kinds"] = sorted(problem_kind(*row) for row in kinds.itertuples(index=False))
    return ranges


def _takes_seed(name: str) -> bool:
    cls = RANKERS.get(name)
    return cls is not None and "seed" in inspect.signature(cls.__init__).parameters


def _baselines(rows: pd.DataFrame) -> list[str]:
    names = [b for b in BASELINES if b not in ("inductor_order", "aten_only") or "inductor_rank" in rows.columns]
    return names


def _dataset_summary(path: Path, rows: pd.DataFrame, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "path": str(path),
        "sha256": file_sha256(path),
        "rows": int(len(rows)),
        "ok_rows": int((rows["status"] == "ok").sum()),
        "problems": int(rows["problem_id"].nunique()),
        "collectors": sorted(map(str, rows["collector"].unique())),
        "gpu": meta.get("gpu"), "cc": meta.get("cc"), "torch": meta.get("torch"), "triton": meta.get("triton"),
        "corpus_sha256": meta.get("corpus_sha256"),
    }


def load_training_rows(dataset: str | Path | list, space: str = "default") -> tuple[pd.DataFrame, DeviceInfo, dict[str, Any]]:
    """Read a dataset (or several, of one GPU), keep the requested space, and build the device it was measured on.

    Several datasets with a larger ``space`` than ``default``: a problem measured in that space keeps those
    rows; a problem measured only in the default space keeps its default rows. The default list is a subset
    of the exhaustive one, so those rows are true (partial) labels of the same question, and they carry the
    dtypes, layouts and ops the smaller exhaustive collection lacks."""
    paths = [dataset] if isinstance(dataset, (str, Path)) else list(dataset)
    frames = [read_dataset(p) for p in paths]
    meta = frames[0].attrs.get("metadata", {})
    try:
        device = DeviceInfo.from_metadata(meta)
    except ValueError as exc:
        raise ValueError(f"{paths[0]}: {exc}") from None
    # every feature divides by or compares with these numbers: a model fit on a zero bandwidth or a NaN peak is
    # one the loaders refuse, so such data is refused here, before any fit
    check_dataset_device(meta, str(paths[0]))
    for path, frame in zip(paths[1:], frames[1:]):
        other = frame.attrs.get("metadata", {}).get("gpu")
        if other != meta.get("gpu"):
            raise ValueError(f"{path}: measured on {other!r}, but {paths[0]} on {meta.get('gpu')!r}; train per GPU")
    if len(frames) == 1:
        return _select_space(frames[0], space), device, meta
    rows = pd.concat([f.assign(space=f["space"] if "space" in f else f.attrs.get("metadata", {}).get("space", "default"))
                      for f in frames], ignore_index=True)
    # each file was checked alone; a row measured twice can also come from two files (or one file given twice)
    check_unique_rows(rows, ", ".join(map(str, paths)))
    in_space = set(rows.loc[rows["space"].astype(str) == space, "problem_id"])
    if not in_space:
        raise ValueError(f"none of {', '.join(map(str, paths))} holds rows of space {space!r}")
    own = rows["space"].astype(str) == space
    fallback = (rows["space"].astype(str) == "default") & ~rows["problem_id"].isin(in_space)
    return rows[own | fallback].reset_index(drop=True), device, meta


def train(dataset: str | Path, ranker: str = "lgbm", out: str | Path | None = None, seed: int = 0,
          space: str = "default", test_fraction: float = 0.25, refit_all: bool = False,
          params: dict[str, Any] | None = None, progress: bool = True,
          holdout_groups: Iterable[str] | None = None, force: bool = False,
          region: str | None = None) -> dict[str, Any]:
    """Fit ``ranker`` on ``dataset`` and save it to ``out`` (default ``models/<ranker>``); return the metadata.
    A shipped model folder is replaced only with ``force`` (``predictor.offline.shipped``).

    ``region`` (``predictor.core.regions``): fit on that region's rows alone; the hook then scores only that region's
    GEMMs with the model, beside the GPU's main model.

    ``holdout_groups`` (e.g. an earlier model's ``split.test_groups``) replaces the seeded fraction split.

    Held-out metrics always come from the fit on the training split. With ``refit_all`` the saved model is
    then refit on every row (train + held-out) with the same hyper-parameters and seed, which is what
    to ship once the hyper-parameters are chosen; the metadata records which one was saved."""
    datasets = [Path(dataset)] if isinstance(dataset, (str, Path)) else [Path(d) for d in dataset]
    # the output first: a folder that is not a model folder, or cannot be written, is refused before any work,
    # and the claim makes a second train into the same folder fail at once instead of racing this one
    out = check_output_folder(out if out is not None else Path("models") / ranker, MODEL)
    check_not_shipped(out, force)
    with claim_output(out):
        return _fit_and_save(datasets, ranker, out, seed, space, test_fraction, refit_all, params, progress,
                             holdout_groups, region)


def _fit_and_save(datasets: list[Path], ranker: str, out: Path, seed: int, space: str, test_fraction: float,
                  refit_all: bool, params: dict[str, Any] | None, progress: bool,
                  holdout_groups: Iterable[str] | None, region: str | None = None) -> dict[str, Any]:
    params = dict(params or {})
    if _takes_seed(ranker) and "seed" not in params:
        params["seed"] = seed
    started = time.perf_counter()
    steps = tqdm(total=5 if refit_all else 4, desc=f"train {ranker}", unit="step", disable=not progress)

    steps.set_postfix_str("read")
    rows, device, meta = load_training_rows(datasets, space)
    if region is not None:
        from ..core.regions import rows_in_region

        rows = rows[rows_in_region(region, rows)].reset_index(drop=True)
        if rows.empty:
            raise ValueError(f"{', '.join(map(str, datasets))}: no rows in region {region!r}")
    log.info("%s: %d rows, %d problems, space %s, device %s", ", ".join(map(str, datasets)), len(rows), rows["problem_id"].nunique(), space, device.gpu)
    if holdout_groups is not None:
        train_rows, test_rows = split_by_named_groups(rows, holdout_groups)
    else:
        train_rows, test_rows = split_by_group(rows, test_fraction=test_fraction, seed=seed)
    log.info("split (seed %d): %d train / %d held-out problems", seed, train_rows["problem_id"].nunique(),
             test_rows["problem_id"].nunique())
    steps.update()

    steps.set_postfix_str("fit")
    model = make_ranker(ranker, **params).fit(train_rows, device)
    steps.update()

    steps.set_postfix_str("evaluate")
    eval_train, eval_test = train_rows, test_rows
    if "space" in rows.columns and space != "default":
        # the metrics are about the space asked for: problems that fell back to default rows only train
        eval_test = test_rows[test_rows["space"].astype(str) == space]
        eval_train = train_rows[train_rows["space"].astype(str) == space]
    heldout = {model.name: evaluate_ranker(model, eval_test, device)}
    for name in _baselines(rows):
        heldout[name] = evaluate_ranker(make_ranker(name), eval_test, device)
    training = evaluate_ranker(model, eval_train, device)
    steps.update()
    log.info("held-out oracle@1 %.3f (train %.3f), oracle@5 %.3f; baselines: %s", heldout[model.name]["oracle@1"],
             training["oracle@1"], heldout[model.name]["oracle@5"],
             ", ".join(f"{n} {m['oracle@1']:.3f}" for n, m in heldout.items() if n != model.name))

    pruning = calibrate_margin(model, eval_test, device)
    log.info("pruning margin %s: held-out oracle %.3f with %.2f choices kept on average (%.0f%% single)",
             pruning["margin"], pruning["chosen"]["oracle"], pruning["chosen"]["kept_mean"],
             100 * pruning["chosen"]["single"])

    if refit_all:
        steps.set_postfix_str("refit on all rows")
        model = make_ranker(ranker, **params).fit(rows, device)
        steps.update()

    steps.set_postfix_str("save")
    from ..artifacts.model_folder import save_model

    metadata = {
        "name": out.name,
        "space": space,
        "seed": seed,
        # the problems the model ranks (predictor.core.regions); None: every problem, the GPU's main model
        "region": region,
        # flat keys predictor.offline.evaluate.run_evaluation reads to rebuild the same split
        "split_seed": seed,
        "test_fraction": test_fraction,
        "dataset_sha256": None,
        "refit_all": refit_all,
        "dataset": _dataset_summary(datasets[0], rows, meta),
        "datasets": [{"path": str(d), "sha256": file_sha256(d)} for d in datasets],
        "split": {
            "method": "predictor.offline.split.split_by_named_groups" if holdout_groups is not None
            else "predictor.offline.split.split_by_group",
            "seed": seed, "test_fraction": test_fraction,
            "train_problems": int(train_rows["problem_id"].nunique()),
            "test_problems": int(test_rows["problem_id"].nunique()),
            "scored_test_problems": int(eval_test["problem_id"].nunique()),
            "test_groups": sorted(map(str, groups_of(test_rows).unique())),
        },
        "fitted_on": "all rows" if refit_all else "training split",
        # what the fitted model has seen: the hook passes unseen ops/dtypes through and, with min_confidence,
        # sizes outside these ranges
        "problem_ranges": _problem_ranges(rows if refit_all else train_rows),
        # the hook's default score margin, calibrated on the held-out split (the refit model shares it)
        "pruning": pruning,
        "metrics": {"train": training, "heldout": heldout, "definition": "predictor.offline.metrics (oracle@k, p5@k, hit@k)"},
        "train_seconds": round(time.perf_counter() - started, 3),
        "device": device.to_dict(),
        # the Inductor config lists the data was collected with: the hook warns when the installed torch's differ
        **space_metadata(meta.get("torch")),
    }
    metadata["dataset_sha256"] = metadata["dataset"]["sha256"]
    save_model(model, out, metadata)
    steps.update()
    steps.close()
    from ..artifacts.model_folder import read_metadata

    return read_metadata(out)


def compare_rankers(dataset: str | Path | pd.DataFrame, names: Iterable[str] = ("lgbm_rank", "lgbm_reg", "tree"),
                    seed: int = 0, space: str = "default", test_fraction: float = 0.25,
                    device: DeviceInfo | None = None, params: dict[str, dict[str, Any]] | None = None,
                    progress: bool = True) -> pd.DataFrame:
    """Held-out metrics of several rankers (and the baselines) on one group split: a table, one row per ranker.

    How the default ``lgbm`` was chosen; rerun it when a new dataset arrives. ``dataset`` may be a path
    or already-loaded rows (then ``device`` is required)."""
    if isinstance(dataset, pd.DataFrame):
        if device is None:
            raise ValueError("compare_rankers on a DataFrame needs the device")
        rows = _select_space(dataset, space)
    else:
        rows, device, _ = load_training_rows(dataset, space)
    train_rows, test_rows = split_by_group(rows, test_fraction=test_fraction, seed=seed)
    results = {}
    for name in tqdm([*names, *_baselines(rows)], desc="compare", disable=not progress):
        extra = dict((params or {}).get(name, {}))
        if _takes_seed(name) and "seed" not in extra:
            extra["seed"] = seed
        ranker = make_ranker(name, **extra)
        started = time.perf_counter()
        ranker.fit(train_rows, device)
        fit_s = time.perf_counter() - started
        results[name] = {**evaluate_ranker(ranker, test_rows, device), "fit_s": round(fit_s, 3)}
    return pd.DataFrame(results).T
