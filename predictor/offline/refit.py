"""``gemm-predictor refit``: fold label stores (``predictor.artifacts.label_store``) into a local model for this GPU.

Fold: every verified part of the stores; an observation repeated exactly (Inductor replaying its autotune cache) is
dropped; each problem x candidate becomes one row whose time is the median of its observations, weighted by their
``reps`` (a fleet's shard folds carry their counts, so folding folds is the reps-weighted median of medians), in the
dataset contract (collector ``inductor-feedback``).

Fit: continue the base LightGBM ranker (``init_model``) for ``rounds`` more trees on the rows it was fitted on (its
dataset minus the groups it held out; every row for a ``refit_all`` model, as the shipped ones are) together with the
folded rows, each folded row weighted ``weight``. Why this
design: the new trees fit what the base model gets wrong on the new rows while the base rows anchor everything it
already ranks well; continuing on the new rows alone has nothing that stops it trading the old problems for the new
ones, and a refit from scratch costs the whole base fit again (docs/LEARN.md has the figures of the three).

Validate: on the base model's held-out groups of its own dataset (as ``gemm-predictor evaluate`` selects them), the
refit model's oracle@1 may not fall more than ``max_loss`` (0.005) below the base model's; otherwise nothing is
written and the refusal names both figures. The model folder (``artifacts.save_model``: metadata, card, sha256,
written atomically) goes to the local models root, its metadata ``refit`` section naming the base, the parts and the
figures; discovery takes it before the shipped model on this GPU (``runtime.choices.discovery``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..artifacts.label_store import COLLECTOR, read_store
from ..artifacts.model_folder import load_model, read_metadata, save_model
from ..artifacts.schema import SCHEMA_VERSION, read_dataset, validate_frame, write_dataset
from ..core.candidate import CANDIDATE_FIELDS
from ..core.device import DeviceInfo
from ..core.problem import PROBLEM_FIELDS
from .calibrate_fit import base_training_rows
from .split import in_groups, recorded_test_groups
from .train import _problem_ranges, evaluate_ranker

log = logging.getLogger(__name__)

MAX_LOSS = 0.005  # oracle@1 the refit may lose on the base model's held-out problems
WEIGHT = 4.0  # a folded row counts as this many base rows
ROUNDS = 60  # trees added to the base model
KEY = ["problem_id", *PROBLEM_FIELDS, "candidate", *CANDIDATE_FIELDS]


class EmptyFold(ValueError):
    """No verified part to fold (a fleet's shard may hold none)."""


class RefitRefused(ValueError):
    """The refit model lost too much on the base model's held-out problems (one line with both figures)."""


def _weighted_median(times: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(times, kind="stable")
    cum = np.cumsum(weights[order])
    return float(times[order][np.searchsorted(cum, 0.5 * cum[-1])])


def fold_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem x candidate from repeated observations (see the module doc)."""
    rows = rows.copy()
    rows["reps"] = rows["reps"].fillna(1).clip(lower=1)
    rows = rows.drop_duplicates([*KEY, "time_us"])  # exact repeats: cache replays, not measurements
    rows["_ok"] = (rows["status"] == "ok") & rows["time_us"].notna()
    out = []
    for _, group in rows.groupby(KEY, sort=True, dropna=False):
        first = group.iloc[0].to_dict()
        ok = group[group["_ok"]]
        if len(ok):
            times = ok["time_us"].to_numpy(dtype=float)
            weights = ok["reps"].to_numpy(dtype=float)
            q1, q3 = np.percentile(times, [25, 75]) if len(times) > 1 else (np.nan, np.nan)
            first.update(time_us=_weighted_median(times, weights), time_us_iqr=float(q3 - q1) if len(times) > 1
                         else np.nan, status="ok", reps=int(weights.sum()))
            first["inductor_bench_us"] = first["time_us"]
        else:
            first.update(time_us=np.nan, time_us_iqr=np.nan, reps=int(group["reps"].sum()))
        first["inductor_rank"] = int(group["inductor_rank"].min()) if "inductor_rank" in group else 0
        out.append(first)
    folded = pd.DataFrame(out).drop(columns=["_ok"])
    folded["family_tag"] = "feedback"  # one problem, one tag (whatever part it came from)
    folded["collector"] = COLLECTOR
    return validate_frame(folded.reset_index(drop=True), "folded label store")


def fold_stores(stores: Sequence[str | Path] = (), folded: Sequence[str | Path] = (), gpu: str | None = None,
                cc: str | None = None, shard: tuple[int, int] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The folded rows of ``stores`` (label store folders; with ``shard=(i, n)`` only that shard's parts) and of
    ``folded`` (files an earlier fold wrote), with a summary: the parts used and skipped, the GPU."""
    read = read_store(list(stores), gpu, cc, shard) if stores else None
    frames = [t.to_pandas() for t in read.tables] if read else []
    parts = list(read.parts) if read else []
    gpu = gpu or (parts[0]["gpu"] if parts else None)
    cc = cc or (str(parts[0]["cc"]) if parts else None)
    device = next((p["device"] for p in parts if isinstance(p.get("device"), dict)), None)
    for path in folded:
        frame = read_dataset(path)
        meta = frame.attrs.get("metadata", {})
        if gpu is not None and (meta.get("gpu"), str(meta.get("cc"))) != (gpu, str(cc)):
            raise ValueError(f"{path}: folded on {meta.get('gpu')!r} (cc {meta.get('cc')}), not {gpu!r} (cc {cc})")
        gpu, cc = meta.get("gpu"), str(meta.get("cc"))
        device = device or meta.get("device")
        parts.extend(meta.get("label_parts") or [])
        frames.append(frame)
    if not frames:
        where = ", ".join(map(str, [*stores, *folded])) or "(nothing given)"
        raise EmptyFold(f"{where}: no verified label parts to fold")
    rows = fold_rows(pd.concat(frames, ignore_index=True))
    return rows, {"gpu": gpu, "cc": cc, "device": device, "parts": parts,
                  "skipped": [{"path": p, "why": w} for p, w in (read.skipped if read else [])]}


def write_folded(rows: pd.DataFrame, summary: dict[str, Any], dest: str | Path) -> Path:
    """The folded rows as one dataset file (what a fleet's shard task writes, and what merges machines' stores)."""
    first = rows.iloc[0]
    meta = {"schema_version": SCHEMA_VERSION, "gpu": summary["gpu"], "cc": summary["cc"], "torch": str(first["torch"]),
            "triton": str(first["triton"]), "corpus_sha256": "none: labels from use",
            "device": summary["device"] or {"gpu": summary["gpu"], "cc": summary["cc"]},
            "collector": COLLECTOR, "label_parts": [{k: p.get(k) for k in ("path", "sha256", "rows")}
                                                    for p in summary["parts"]]}
    return write_dataset(rows, dest, meta)


def _dataset_path(base: Path, meta: dict[str, Any], dataset: str | Path | None) -> Path:
    if dataset is not None:
        return Path(dataset)
    named = Path((meta.get("datasets") or [{}])[0].get("path") or meta.get("dataset", {}).get("path") or "")
    for candidate in (named, base.resolve().parent.parent / named, Path.cwd() / named):
        if str(named) and candidate.is_file():
            return candidate
    raise ValueError(f"{base}: its dataset {str(named) or '(none named)'} is not here to validate against; "
                     "pass --dataset with the base model's dataset")


def _continue(base_ranker: Any, X: np.ndarray, log2_ratio: np.ndarray, groups: np.ndarray, weights: np.ndarray,
              rounds: int) -> Any:
    """``rounds`` more LambdaRank trees on ``X`` starting from ``base_ranker``'s booster (``init_model``)."""
    import lightgbm as lgb

    from ..rankers._common import fraction_gains, relevance

    order = np.argsort(groups, kind="stable")
    _, sizes = np.unique(groups[order], return_counts=True)
    params = {k: v for k, v in base_ranker._lgbm_params().items() if k != "n_estimators"}
    params.update(objective="lambdarank", lambdarank_truncation_level=base_ranker.truncation_level,
                  label_gain=fraction_gains())
    params["seed"] = params.pop("random_state", 0)
    n = base_ranker.n_features_in_
    data = lgb.Dataset(np.ascontiguousarray(X[order][:, :n]), label=relevance(log2_ratio[order]), group=sizes,
                       weight=weights[order], feature_name=list(base_ranker.feature_names_in_), free_raw_data=True)
    booster = lgb.train(params, data, num_boost_round=rounds, init_model=base_ranker.booster_)
    return type(base_ranker)(**base_ranker.get_params())._set_booster(booster)


def _labelled(rows: pd.DataFrame, device: DeviceInfo, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from ..core.features import feature_matrix
    from ..rankers._common import training_rows

    fit_rows, log2_ratio = training_rows(rows)
    many = fit_rows.groupby("problem_id")["candidate"].transform("size").to_numpy() > 1  # one choice teaches nothing
    fit_rows, log2_ratio = fit_rows[many], log2_ratio[many]
    groups = (tag + ":" + fit_rows["problem_id"].astype(str)).to_numpy(dtype=object)
    return feature_matrix(fit_rows, device), log2_ratio, groups


def refit(stores: Sequence[str | Path] = (), folded: Sequence[str | Path] = (), base_model: str | Path | None = None,
          out: str | Path | None = None, dataset: str | Path | None = None, weight: float = WEIGHT,
          rounds: int = ROUNDS, anchor: bool = True, max_loss: float = MAX_LOSS) -> dict[str, Any]:
    """Fold ``stores``/``folded``, continue ``base_model`` (default: the shipped model for the stores' GPU) on them,
    validate, save; return the new metadata. ``RefitRefused`` (nothing written) when validation fails."""
    started = time.perf_counter()
    rows, summary = fold_stores(stores, folded)
    base = Path(base_model) if base_model is not None else _shipped_for(summary)
    base_ranker, base_meta = load_model(base)
    if not hasattr(base_ranker, "booster_") or not hasattr(base_ranker, "truncation_level"):
        raise ValueError(f"{base}: a {base_meta.get('ranker', {}).get('name')!r} model; refit continues LightGBM "
                         "LambdaRank models (lgbm_rank)")
    device = DeviceInfo.from_metadata(base_meta)
    held_out = recorded_test_groups(base_meta)
    if not held_out:
        raise ValueError(f"{base}: its metadata records no held-out groups (split.test_groups) to validate on")
    data_path = _dataset_path(base, base_meta, dataset)
    all_rows = read_dataset(data_path)
    test = all_rows[in_groups(all_rows, held_out)]
    X_new, r_new, g_new = _labelled(rows, device, "store")
    if not len(X_new):
        raise ValueError("the label stores hold no problem with two or more timed choices: nothing to learn")
    parts = [(X_new, r_new, g_new, np.full(len(X_new), float(weight)))]
    if anchor:  # the rows the base was fitted on: its training split, or every row for a refit_all model
        train_rows = all_rows if base_meta.get("refit_all") else all_rows[~in_groups(all_rows, held_out)]
        X_b, r_b, g_b = _labelled(train_rows, device, "base")
        parts.append((X_b, r_b, g_b, np.ones(len(X_b))))
    X, r, g, w = (np.concatenate([p[i] for p in parts]) for i in range(4))
    model = _continue(base_ranker, X, r, g, w, rounds)

    before = evaluate_ranker(base_ranker, test, device, ks=(1,))["oracle@1"]
    after = evaluate_ranker(model, test, device, ks=(1,))["oracle@1"]
    store_before = evaluate_ranker(base_ranker, rows, device, ks=(1,))["oracle@1"]
    store_after = evaluate_ranker(model, rows, device, ks=(1,))["oracle@1"]
    if after < before - max_loss:
        raise RefitRefused(f"refit refused: held-out oracle@1 {after:.4f} against the base model {base.name}'s "
                           f"{before:.4f} on {data_path} (may lose at most {max_loss}); nothing written")
    from ..runtime.choices.discovery import REFIT_KEY, local_models_root

    name = f"{base_meta.get('name') or base.name}-local"
    out = Path(out) if out is not None else local_models_root() / name
    gpu, cc = summary["gpu"], summary["cc"]
    if (gpu, cc) != (device.gpu, device.cc):  # a base of the same architecture: the model is for the labels' GPU
        device = DeviceInfo(**{**device.to_dict(), "gpu": gpu, "cc": cc})
    seen = all_rows if base_meta.get("refit_all") else all_rows[~in_groups(all_rows, held_out)]
    ranges = _problem_ranges(pd.concat([seen, rows], ignore_index=True))
    metadata = {k: base_meta[k] for k in ("space", "split_seed", "test_fraction", "split", "pruning", "datasets",
                                          "dataset", "dataset_sha256", "torch_version", "space_fingerprint")
                if k in base_meta}
    metadata.update(name=out.name, device=device.to_dict(), problem_ranges=ranges, fitted_on="refit",
                    metrics={"heldout": {"refit": {"oracle@1": after}, "base": {"oracle@1": before}}})
    metadata[REFIT_KEY] = {
        "refit_from": str(base), "base_model_sha256": base_meta.get("model_sha256"), "validated": True,
        "validation": {"dataset": str(data_path), "heldout_groups": len(held_out), "heldout_problems":
                       int(test["problem_id"].nunique()), "base_oracle@1": before, "refit_oracle@1": after,
                       "max_loss": max_loss, "store_oracle@1_base": store_before, "store_oracle@1_refit": store_after,
                       "store_figures": "in-sample: the folded rows the refit learnt from"},
        "method": "continue (init_model)" + (" on base training rows + store rows" if anchor else " on store rows"),
        "weight": weight, "rounds": rounds, "store_problems": int(rows["problem_id"].nunique()),
        "store_rows": int(len(rows)), "parts": [{k: p.get(k) for k in ("path", "sha256", "rows")}
                                                for p in summary["parts"]],
        "skipped_parts": summary["skipped"], "seconds": round(time.perf_counter() - started, 2)}
    save_model(model, out, metadata)
    log.info("refit %s from %s on %d store problems: held-out oracle@1 %.4f (base %.4f), store %.4f -> %.4f, %.1f s",
             out, base, rows["problem_id"].nunique(), after, before, store_before, store_after,
             metadata[REFIT_KEY]["seconds"])
    return read_metadata(out)


def this_store() -> Path:
    """This GPU's default label store; on a machine without one, the only store under the labels root."""
    from ..artifacts.label_store import default_store, labels_root
    from ..runtime.choices.feedback import this_device

    device = this_device()
    if device is not None:
        return default_store(device[0])
    stores = sorted(p for p in labels_root().glob("*") if p.is_dir())
    if len(stores) != 1:
        raise ValueError(f"{labels_root()}: {len(stores)} label stores and no GPU to choose one; pass --store")
    return stores[0]


def _shipped_for(summary: dict[str, Any]) -> Path:
    from ..runtime.choices.discovery import find_model, shipped_roots

    dev = summary.get("device") or {}
    device = DeviceInfo(gpu=summary["gpu"], cc=str(summary["cc"]), sm_count=int(dev.get("sm_count", 0)),
                        smem_per_block=int(dev.get("smem_per_block", 0)), l2_bytes=int(dev.get("l2_bytes", 0)),
                        mem_bandwidth_gbs=float(dev.get("mem_bandwidth_gbs", 0.0)))
    found = find_model(device, roots=shipped_roots(), allow_similar=True)
    if found is None:
        raise ValueError(f"no shipped model for {summary['gpu']} (cc {summary['cc']}); pass --base-model")
    return found
