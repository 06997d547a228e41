"""The model a pruner scores with: found for this GPU (``discovery``) or named, loaded once, checked against the
GPU, with the region models beside a discovered one; and the scores it gives, remembered per problem.

The folder is read by a loader given to it: by default ``model_check.load_text_model`` (LightGBM text models,
scored with numpy); ``predictor.compile`` and ``install`` give ``model_folder.load_runtime_model``, which also
rebuilds the fit side's other rankers (the decision tree, the baselines) and so imports the ranker registry."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.metadata import ModelError, read_metadata
from ...artifacts.model_check import load_text_model
from ...core.candidate import Candidate
from ...core.device import DeviceInfo
from ...core.features import ranker_rows
from ...core.problem import Problem
from ...core.regions import REGIONS
from ...core.runtime_features import runtime_feature_matrix
from .discovery import _this_gpu, find_model, model_roots
from .region_models import RegionModel
from .settings import HookSettings
from ...spaces.configs import warn_if_untested_torch

# (folder, the GPU it must have been trained for or None) -> (ranker, metadata); raises ModelError
FolderLoader = Callable[[Path, DeviceInfo | None], tuple[Any, dict[str, Any]]]

log = logging.getLogger("predictor.runtime.choices.pruner")

PRUNING_KEY = "pruning"  # optional metadata section: the margin calibrated on held-out problems
_SCORE_CACHE = 4096  # problems whose scores a model remembers


class LoadedModel:
    """The ranker, its metadata and the GPU it was trained for; ``disabled`` says why there is none."""

    def __init__(self, settings: HookSettings, ranker: Any = None, metadata: dict[str, Any] | None = None,
                 load: FolderLoader | None = None) -> None:
        self.settings = settings
        self.load_folder: FolderLoader = load or load_text_model
        self.ranker = ranker
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.path: Path | None = None
        self.borrowed_from: str | None = None  # the GPU a model of this architecture was trained on, if not this one
        self.region_models: dict[str, RegionModel] = {}  # beside a discovered main model (predictor.core.regions)
        self.disabled: str | None = None  # why every GEMM is passed through, if it is
        # the ranker scores with the device the model was trained for (its measured peaks and bandwidth)
        self.device: DeviceInfo | None = (DeviceInfo.from_metadata(self.metadata) if "device" in self.metadata
                                          else settings.device)
        self.scores_: dict[tuple, np.ndarray] = {}

    def margin(self) -> float | None:
        """Score margin below the favourite beyond which candidates are dropped even inside the top k.

        ``"auto"`` takes the margin calibrated on held-out problems at training time (metadata
        ``pruning.margin``; None when the model has none), so a confident model keeps one or two candidates
        (a single survivor is used without benchmarking) and an unsure one keeps up to k."""
        m = self.settings.margin
        if m == "auto":
            m = (self.metadata.get(PRUNING_KEY) or {}).get("margin")
        return None if m is None else float(m)

    def load(self, warn_once: Callable[[str, str], None], fallback_words: str) -> None:
        """Resolve and load the model; on any problem disable it with one warning."""
        s = self.settings
        if warn_if_untested_torch():  # its one line is logged process-wide: the compile path skips its rewrites too
            self.disabled, self.ranker = "untested_torch", None
            return None
        try:
            device = s.device if s.device is not None else _this_gpu()
        except Exception as exc:  # noqa: BLE001 -- a broken CUDA set-up must not break compiling
            return self._disable(warn_once, "no_gpu", f"cannot query the GPU ({type(exc).__name__}: {exc}); "
                                 f"every GEMM: {fallback_words}")
        if device is None:
            return self._disable(warn_once, "no_gpu", f"no CUDA device; every GEMM: {fallback_words}")
        if s.model is None:
            folder = find_model(device, s.space, allow_similar=s.allow_similar_gpu)
            if folder is None:
                return self._disable(warn_once, "no_model", f"no model for {device.gpu} (cc {device.cc}) under "
                                     f"{', '.join(map(str, model_roots()))}; every GEMM: {fallback_words}")
        else:
            folder = Path(s.model)
        try:
            trained_for = DeviceInfo.from_metadata(read_metadata(folder))
            # same architecture, other GPU (e.g. an H200 model on an H100 SXM): tile, wave and shared-memory
            # arithmetic are identical, so the ranking transfers far better than no pruning at all
            similar = (s.allow_similar_gpu and not trained_for.same_gpu(device)
                       and trained_for.same_architecture(device))
            # a LightGBM model scores without LightGBM (lgbm_text, compiled_walk): importing it (and scikit-learn,
            # scipy) takes over a second, and its predictor is slower (2400 choices: ~17 ms against ~1.3 ms)
            self.ranker, self.metadata = self.load_folder(folder, None if similar else device)
        except ModelError as exc:
            return self._disable(warn_once, "no_model", f"{exc}; every GEMM: {fallback_words}")
        except Exception as exc:  # noqa: BLE001 -- the loader wraps known errors; this is the rest
            return self._disable(warn_once, "no_model", f"{folder}: cannot load ({type(exc).__name__}: {exc}); "
                                 f"every GEMM: {fallback_words}")
        self.path = folder
        self.borrowed_from = trained_for.gpu if similar else None
        self.device = DeviceInfo.from_metadata(self.metadata)
        if s.model is None:  # a model the caller names ranks every GEMM itself
            self.region_models = load_region_models(device, s.space, s.allow_similar_gpu, warn_once, self.load_folder)
        if similar:
            warn_once("similar_gpu", f"using {folder}, trained on {trained_for.gpu}, for "
                      f"{device.gpu} (same cc {device.cc}, {device.sm_count} SMs, same shared memory); "
                      "its rankings were not measured on this GPU (allow_similar_gpu=False refuses)")
        if self.metadata.get("space", "default") != s.space:
            log.warning("%s was trained on the %r space, the hook prunes the %r space; its ranking may be off",
                        folder, self.metadata.get("space"), s.space)
        log.info("gemm-predictor: %s GEMM choices (top %d) with %s (%s)", s.policy, s.top_k, folder,
                 self.metadata.get("ranker", {}).get("name"))

    def _disable(self, warn_once: Callable[[str, str], None], reason: str, message: str) -> None:
        self.disabled = reason
        self.ranker = None
        warn_once(reason, message)

    def scores(self, problem: Problem, cands: list[Candidate], hints: list[int | None],
               region: RegionModel | None) -> np.ndarray:
        """The ranker's scores (``region``'s where its model ranks ``problem``: ``region_models.model_for``),
        remembered per (problem, candidates, hints): repeated layers and the backward lower a GEMM again and again."""
        ranker, device = (region.ranker, region.device) if region is not None else (self.ranker, self.device)
        key = (problem, tuple([c.key for c in cands]), tuple(hints))
        scores = self.scores_.get(key)
        if scores is None:
            if hasattr(ranker, "score_features"):  # the LightGBM rankers: features straight into numpy
                raw = ranker.score_features(runtime_feature_matrix(problem, cands, hints, device))
            else:  # the other rankers read rows (and import pandas, as they import scikit-learn)
                raw = ranker.score(ranker_rows(problem, cands, hints), device)
            scores = np.asarray(raw, dtype=np.float64)
            if len(self.scores_) >= _SCORE_CACHE:
                self.scores_.pop(next(iter(self.scores_)), None)
            self.scores_[key] = scores
        return scores


def load_region_models(device: DeviceInfo, space: str, allow_similar: bool, warn: Callable[[str, str], None],
                       load: FolderLoader = load_text_model) -> dict[str, RegionModel]:
    """region -> its model (``predictor.core.regions``), for every region with a model for ``device``
    (``warn(key, message)`` on a bad one, whose region the main model then ranks)."""
    found: dict[str, RegionModel] = {}
    for region in REGIONS:
        folder = find_model(device, space, allow_similar=allow_similar, region=region)
        if folder is None:
            continue
        try:
            trained_for = DeviceInfo.from_metadata(read_metadata(folder))
            similar = not trained_for.same_gpu(device)
            ranker, metadata = load(folder, None if similar else device)
        except Exception as exc:  # noqa: BLE001 -- the main model still ranks the region: never break a compile
            warn(f"region_model:{region}", f"{folder}: cannot load ({type(exc).__name__}: {exc}); the main model "
                 f"ranks the {region} GEMMs")
            continue
        found[region] = RegionModel(region, ranker, metadata, DeviceInfo.from_metadata(metadata), folder)
    return found
