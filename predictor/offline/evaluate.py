"""Offline evaluation: ``run_evaluation`` (a trained model and the baselines on the held-out split, with the report).

The metric definitions (oracle@k, p5@k, hit@k, the random expectation, slices) live in ``predictor.offline.metrics``,
the report tables and ``compare`` in ``predictor.offline.report``, the plots in ``predictor.offline.plots``; their public names
are re-exported here, so ``from predictor.offline.evaluate import ...`` keeps working.
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..artifacts.atomic import REPORT, check_output_folder, claim_output
from ..core.device import DeviceInfo
# re-exported: the names callers import from predictor.offline.evaluate
from .metrics import (BASELINES, FAILED_FLOOR, FAMILY_ORDER, HEADLINE, KS, METRIC_COLUMNS,  # noqa: F401
                      RANDOM, SIZE_BANDS, SLICE_KINDS, EvaluationError, EvaluationResult, NonFiniteScores,  # noqa: F401
                      _check_ks,  # noqa: F401
                      evaluate, evaluate_rankers, per_problem_fraction, problem_table,  # noqa: F401
                      pruning_rule_summary, random_expectation, size_band, summarise)  # noqa: F401
from .plots import plot_family_confusion, plot_fraction_vs_size, plot_oracle_curves  # noqa: F401
from .report import (compare, headline_table, load_metrics, markdown_table, metrics_dict,  # noqa: F401
                     slice_table, write_report)  # noqa: F401

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- run_evaluation


class _ExpectedRandom:
    """Placeholder for the random baseline: ``evaluate`` reports its expectation, never its scores."""

    name = RANDOM

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "_ExpectedRandom":
        return self

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:  # pragma: no cover - never called
        raise EvaluationError("the random baseline is evaluated by its expectation, not by scores")


def _make_baseline(name: str) -> Any:
    if name == RANDOM:
        return _ExpectedRandom()
    try:
        from ..rankers import make_ranker  # type: ignore[attr-defined]

        return make_ranker(name)
    except (ImportError, ValueError, KeyError):
        if name == "autoheuristic":
            from ..rankers.autoheuristic import AutoHeuristicRanker

            return AutoHeuristicRanker()
        raise


def _select_space(rows: pd.DataFrame, space: str, source: str) -> pd.DataFrame:
    from ..artifacts.dataset_rules import DatasetError, select_space

    try:
        return select_space(rows, space, source)
    except DatasetError as exc:
        raise EvaluationError(f"{exc}; evaluate with a space the dataset holds") from None


def hook_rule_table(rows: pd.DataFrame, model: Any, device: DeviceInfo, meta: Mapping[str, Any],
                    ks: Iterable[int]) -> list[dict[str, Any]]:
    """What ``predictor.install(top_k=k)`` keeps and reaches on these rows, per k: its plain top k, then its
    defaults (the calibrated margin from ``meta``, a favoured aten alone on GEMMs under ATEN_ALONE_BELOW_US)."""
    from ..runtime.choices.policy import ATEN_ALONE_BELOW_US

    scores = np.asarray(model.score(rows, device), dtype=float)
    margin = (meta.get("pruning") or {}).get("margin")
    out = []
    for k in ks:
        for rule, kwargs in (("top k + aten", {"margin": None}),
                             ("+ margin", {"margin": margin}),
                             ("+ margin + aten alone (hook default)",
                              {"margin": margin, "aten_alone_below_us": ATEN_ALONE_BELOW_US, "device": device})):
            s = pruning_rule_summary(rows, scores, k, **kwargs)
            out.append({"k": int(k), "rule": rule, **{key: s[key] for key in ("oracle", "p5", "kept_mean", "single")}})
    return out


def run_evaluation(model_dir: str | Path, dataset: str | Path, out_dir: str | Path, space: str = "default",
                   ks: Iterable[int] = KS, split: str = "test", compare_models: Sequence[str | Path] = (),
                   command: str | None = None) -> dict[str, Any]:
    """Evaluate a trained model, the baselines and ``compare_models`` on the held-out split; write the report.

    ``compare_models`` entries are model folders (loaded like the main model) or registry ranker
    names (fitted on the training side of the same split). The split is the model's own:
    ``split_by_group(rows, test_fraction, split_seed)`` from its metadata (defaults 0.25 and 0), or exactly the
    ``split.test_groups`` its metadata records.
    Returns the ``metrics.json`` document.
    """
    ks = _check_ks(ks)
    if split not in ("test", "all"):
        raise EvaluationError(f"unknown split {split!r}; expected 'test' or 'all'")
    out = check_output_folder(out_dir, REPORT)  # before the work; held so a second run into it fails at once
    with claim_output(out):
        return _run_evaluation(model_dir, dataset, out, space, ks, split, compare_models, command)


def _run_evaluation(model_dir: str | Path, dataset: str | Path, out_dir: Path, space: str, ks: tuple[int, ...],
                    split: str, compare_models: Sequence[str | Path], command: str | None) -> dict[str, Any]:
    from ..artifacts.schema import DatasetError, file_sha256, read_dataset
    from .split import in_groups, recorded_test_groups, split_by_group

    try:
        from ..artifacts.model_folder import load_model
    except ImportError as exc:
        raise EvaluationError(f"cannot load models: predictor.artifacts.model_folder is unavailable ({exc})") from None

    model_dir = Path(model_dir)
    model, meta = load_model(model_dir)
    model_space = meta.get("space", space)
    if model_space != space:
        raise EvaluationError(f"model {model_dir} was trained for space {model_space!r}, not the requested {space!r}")
    try:
        rows = read_dataset(dataset)
    except DatasetError as exc:
        raise EvaluationError(str(exc)) from None
    data_meta = dict(rows.attrs.get("metadata", {}))
    rows = _select_space(rows, space, str(dataset))
    if not (rows["status"] == "ok").any():
        raise EvaluationError(f"{dataset}: no rows with status ok")

    seed = int(meta.get("split_seed", 0))
    test_fraction = float(meta.get("test_fraction", 0.25))
    held_out = recorded_test_groups(meta)
    if split == "test" and held_out:
        # exactly the groups the model was held out from: a re-split of a different dataset (the exhaustive file
        # of a model trained on default + exhaustive rows, or a grown dataset) would move groups across sides
        is_test = in_groups(rows, held_out)
        train, test = rows[~is_test], rows[is_test]
    elif split == "test":
        try:
            train, test = split_by_group(rows, test_fraction=test_fraction, seed=seed)
        except ValueError as exc:
            raise EvaluationError(f"{dataset}: cannot split ({exc})") from None
    else:
        train, test = rows, rows
    if test.empty or not (test["status"] == "ok").any():
        model_gpu = meta["device"].get("gpu") if isinstance(meta.get("device"), dict) else None
        if model_gpu and data_meta.get("gpu") and model_gpu != data_meta["gpu"]:  # its held-out groups are not here
            raise EvaluationError(f"{dataset}: measured on {data_meta['gpu']}, but {model_dir} was made for "
                                  f"{model_gpu}: the GPUs differ, and none of the problem groups it held out are in "
                                  f"this dataset (--split all scores it on every row)")
        raise EvaluationError(f"{dataset}: the {split} split (seed {seed}, test fraction {test_fraction}) has no ok rows")

    try:
        device = DeviceInfo.from_metadata(meta if isinstance(meta.get("device"), dict) else data_meta)
    except ValueError as exc:
        raise EvaluationError(f"{model_dir} / {dataset}: no usable device description in the metadata ({exc})") from None
    notes: list[str] = []
    data_gpu = data_meta.get("gpu")
    if data_gpu and data_gpu != device.gpu:
        notes.append(f"the model was made for {device.gpu} but the dataset was measured on {data_gpu}.")
        logger.warning("model made for %s, dataset measured on %s", device.gpu, data_gpu)

    main = str(meta.get("name") or model_dir.name)
    rankers: dict[str, Any] = {main: model}
    folders: dict[str, Path] = {main: model_dir}  # the model folders, to name one that scores NaN
    skipped: list[str] = []
    for entry in compare_models:
        path = Path(entry)
        if path.is_dir():
            other, other_meta = load_model(path)
            if other_meta.get("space", space) != space:
                raise EvaluationError(f"model {path} was trained for space {other_meta.get('space')!r}, not {space!r}")
            rankers[str(other_meta.get("name") or path.name)] = other
            folders[str(other_meta.get("name") or path.name)] = path
        else:
            try:
                rankers[str(entry)] = _make_baseline(str(entry)).fit(train, device)
            except (ImportError, ValueError, KeyError) as exc:
                raise EvaluationError(f"unknown model or ranker {entry!r} ({exc})") from None
    for name in BASELINES:
        if name in rankers:
            continue
        try:
            rankers[name] = _make_baseline(name).fit(train, device)
        except Exception as exc:  # a missing baseline must not hide the model's numbers; the report says so
            skipped.append(f"`{name}` ({type(exc).__name__}: {str(exc)[:160]})")
            logger.warning("baseline %s skipped: %s", name, exc)

    n_all = test["problem_id"].nunique()
    try:
        result = evaluate(test, rankers, device, ks)
    except NonFiniteScores as exc:
        where = folders.get(exc.ranker)
        raise EvaluationError(f"{where}: model refused: {exc}" if where else str(exc)) from None
    context = {
        "gpu": data_meta.get("gpu", device.gpu), "cc": data_meta.get("cc", device.cc),
        "torch": data_meta.get("torch"), "triton": data_meta.get("triton"),
        "dataset": str(dataset), "dataset_sha256": file_sha256(dataset),
        "model_dir": str(model_dir), "model_name": main, "model_gpu": device.gpu,
        "model_dataset_sha256": meta.get("dataset_sha256"),
        "space": space, "split": split, "split_seed": seed, "test_fraction": test_fraction,
        "ks": list(ks), "main": main, "rankers": list(rankers),
        "n_problems": int(len(result.problems)), "n_rows": int(len(test)), "n_dropped": int(n_all - len(result.problems)),
        "command": command or shlex.join(sys.argv), "skipped": skipped, "notes": notes,
    }
    context["hook_rule"] = hook_rule_table(test, model, device, meta, ks)
    if meta.get("dataset_sha256") and meta.get("dataset_sha256") == context["dataset_sha256"] and split == "all":
        notes.append("this is the model's training dataset and split=all: numbers include training problems.")
    return write_report(result, out_dir, context)
