"""Fitting half of ``gemm-predictor calibrate``: a ranker for a new GPU from a few minutes of its labels plus the
labels of GPUs measured before.

Method ("union"): one LambdaRank model over the base GPU's training rows and the new GPU's calibration rows,
each row's features computed with the device it was measured on (``predictor.core.features`` has the device's SM
count, shared memory, L2, bandwidth and peaks in its roofline, wave and fit features). A problem measured on
both GPUs is two queries, so the model learns where the devices agree from the large base set and where they
differ from the new rows. The result is a model for the new GPU: its metadata names the new device, so the hook
finds it there and computes features with it. (Continuing the base booster on the new rows alone was the other
design; with the base rows in the fit nothing the base model knew is forgotten when the new rows are few.)

The new rows are the problems labelled within ``--until-minutes`` of calibration time
(``predictor.offline.calibration.labelled_within``), so the same collection yields the 5, 10 and 15 minute models.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..artifacts.model_folder import read_metadata
from ..core.device import DeviceInfo
from ..core.features import feature_matrix
from ..rankers import make_ranker
from ..rankers._common import training_rows
from ..artifacts.schema import read_dataset
from .split import in_groups, recorded_test_groups

log = logging.getLogger(__name__)

METHODS = ("union", "new-only")


def base_training_rows(base_model: str | Path) -> tuple[pd.DataFrame, DeviceInfo, list[str]]:
    """The base model's own dataset without the problem groups it held out (they stay unseen by every model
    fitted from it, so they can score the new GPU's models fairly), its device, and those groups."""
    meta = read_metadata(base_model)
    held_out = recorded_test_groups(meta) or []
    path = (meta.get("datasets") or [{}])[0].get("path") or meta.get("dataset", {}).get("path")
    if not path:
        raise ValueError(f"{base_model}: metadata names no dataset to transfer from")
    rows = read_dataset(path)
    rows = rows[~in_groups(rows, held_out)] if held_out else rows
    return rows.reset_index(drop=True), DeviceInfo.from_metadata(meta), held_out


def _labelled_matrix(rows: pd.DataFrame, device: DeviceInfo, tag: str) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    fit_rows, log2_ratio = training_rows(rows)
    fit_rows = fit_rows.assign(problem_id=tag + ":" + fit_rows["problem_id"].astype(str))
    return feature_matrix(fit_rows, device), log2_ratio, fit_rows


def fit_calibrated(new_rows: pd.DataFrame, new_device: DeviceInfo, base_rows: pd.DataFrame | None = None,
                   base_device: DeviceInfo | None = None, method: str = "union", seed: int = 0) -> Any:
    """A fitted ``lgbm_rank`` model for ``new_device``. ``union``: base and new rows in one fit (features per
    device); ``new-only``: the new rows alone (the reference "trained on this GPU's labels")."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if new_rows.empty and method == "new-only":
        raise ValueError("no labelled rows of the new GPU to fit on")
    parts = [_labelled_matrix(new_rows, new_device, "new")] if not new_rows.empty else []
    if method == "union":
        if base_rows is None or base_device is None:
            raise ValueError("method 'union' needs the base GPU's rows and device")
        parts.append(_labelled_matrix(base_rows, base_device, "base"))
    return make_ranker("lgbm_rank", seed=seed).fit_features(
        np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
        pd.concat([p[2] for p in parts], ignore_index=True))


def new_gpu_rows(parts: str | Path, minutes: float | None) -> tuple[pd.DataFrame, DeviceInfo, dict[str, float]]:
    """The calibration rows labelled within ``minutes`` (all for None), their device, and problem -> seconds."""
    from .calibration import labelled_within

    labelled = labelled_within(parts, minutes)
    if not any(Path(parts).glob("*.parquet")):
        raise ValueError(f"{parts}: no labelled parts to fit on")
    rows = read_dataset(parts)  # the folder of parts, checked as merge checks it
    meta = rows.attrs.get("metadata", {})
    rows = rows[rows["problem_id"].isin(set(labelled))].reset_index(drop=True)
    try:
        device = DeviceInfo.from_metadata(meta)
    except ValueError as exc:
        raise ValueError(f"{parts}: {exc}") from None
    rows.attrs["metadata"] = meta
    return rows, device, labelled


def calibrate_fit(parts: str | Path, out: str | Path, base_model: str | Path, minutes: float | None = None,
                  method: str = "union", seed: int = 0, force: bool = False) -> dict[str, Any]:
    """Fit and save a model folder for the GPU the calibration parts were measured on; returns its metadata.
    A shipped model folder is replaced only with ``force``."""
    from ..artifacts.model_folder import save_model
    from ..artifacts.atomic import MODEL, check_output_folder, claim_output
    from ..spaces.configs import space_metadata
    from .shipped import check_not_shipped
    from .train import _problem_ranges

    out = check_output_folder(out, MODEL)
    check_not_shipped(out, force)
    started = time.perf_counter()
    new_rows, new_device, labelled = new_gpu_rows(parts, minutes)
    base_rows, base_device, held_out = base_training_rows(base_model)
    with claim_output(out):
        model = fit_calibrated(new_rows, new_device, base_rows, base_device, method, seed)
        meta = new_rows.attrs["metadata"]
        ledger_s = max(labelled.values(), default=0.0)
        metadata = {
            "name": Path(out).name,
            "space": "default",
            "seed": seed,
            "fitted_on": f"calibration: {method} of {Path(base_model).name}'s training rows and "
                         f"{new_rows['problem_id'].nunique()} problems of this GPU labelled in {ledger_s / 60:.1f} min",
            "calibration": {"method": method, "parts": str(parts), "until_minutes": minutes,
                            "new_problems": int(new_rows["problem_id"].nunique()), "new_rows": int(len(new_rows)),
                            "labelled_seconds": round(ledger_s, 1), "base_model": str(base_model),
                            "base_rows": int(len(base_rows)) if method == "union" else 0},
            "dataset": {"path": str(parts), "rows": int(len(new_rows)), "ok_rows": int((new_rows["status"] == "ok").sum()),
                        "problems": int(new_rows["problem_id"].nunique()),
                        "collectors": sorted(map(str, new_rows["collector"].unique())), "gpu": meta.get("gpu"),
                        "cc": meta.get("cc"), "torch": meta.get("torch"), "triton": meta.get("triton"),
                        "corpus_sha256": meta.get("corpus_sha256")},
            "split": {"method": "held-out groups of the base model (never collected by calibrate)",
                      "train_problems": int(new_rows["problem_id"].nunique()), "test_groups": sorted(held_out)},
            "problem_ranges": _problem_ranges(pd.concat([new_rows, base_rows]) if method == "union" else new_rows),
            "train_seconds": round(time.perf_counter() - started, 3),
            "device": new_device.to_dict(),
            **space_metadata(meta.get("torch")),
        }
        save_model(model, out, metadata)
    log.info("calibrated model: %s", json.dumps(metadata["calibration"]))
    return read_metadata(out)
