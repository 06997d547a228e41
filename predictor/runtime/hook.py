"""The ``torch.compile`` hook: let Inductor's max-autotune compile and benchmark only the predicted few.

``install()`` points ``torch._inductor.config.inductor_choices_class`` at a :class:`GemmPruner`, a factory for an
``InductorChoices`` subclass whose ``_finalize_template_configs`` (same signature in torch 2.11 and 2.13) receives
every GEMM's cheap ``KernelTemplateChoice`` list *before* any ChoiceCaller is created, compiled or benchmarked. The
pruner maps each choice to a :class:`~predictor.candidate.Candidate`, reads the :class:`~predictor.problem.Problem`
off the kernel inputs, scores the candidates and returns what ``settings.policy`` keeps, in Inductor's own order.

The hook must never break a compile: any exception, an unknown op or template, or a model that does not fit this
GPU makes it log one warning and keep the aten choice alone (``fallback="aten"``) or Inductor's full list
(``fallback="full"``). Torch is imported lazily, so ``import predictor`` stays cheap where nothing compiles.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import ModelError, load_runtime_model, read_metadata
from ..candidate import Candidate, candidates_from_choices, from_choice_caller
from . import dynamic_hints, few_rows, gemv_blocks, grouped_mm
from .cutlass import is_cutlass_choice, keep_cutlass
from .decompositions import decompositions_digest
from ..device import DeviceInfo
from .discovery import _this_gpu, find_model, model_roots
from .installed import _STACK
from ..features import ideal_time_us, ranker_rows, runtime_feature_matrix
from .inductor_inputs import (_lowering_node, _operands_key, _tf32_enabled, one_kernel_fits, output_feeds_pointwise,
                              problem_from_inputs, scaled_op)
from .region_models import RegionModel, load_region_models, model_for
from .policy import (EXPLICIT_KIND_OPS, GAP_FLOORS, aten_alone_if_small, decide_gap_for, decide_one, decided_choices,
                     fallback_choices, keep_best, out_of_training_range, override_choice, trusted_kind,
                     untrained_kind, with_aten_fallback, with_epilogue_templates)
from ..problem import Problem
from .settings import HookSettings
from .split_addmm import SplitAddmm

log = logging.getLogger(__name__)

# Optional model metadata section with the training problems' extent ({"m": [1, 28672], "ops": ["mm", ...], ...}).
RANGES_KEY = "problem_ranges"
PRUNING_KEY = "pruning"
# Inductor's op_name -> Problem.op. Anything else (baddbmm, "mm-ah", ...) is passed through. scaled_mm's Problem.op
# depends on its scales (inductor_inputs.scaled_op).
INDUCTOR_OPS = {"mm": "mm", "addmm": "addmm", "bmm": "bmm", "int_mm": "int_mm", "scaled_mm": "scaled_mm"}
# Inductor's max_autotune_gemm_search_space value for each of our spaces.
SEARCH_SPACE = {"default": "DEFAULT", "exhaustive": "EXHAUSTIVE"}
_STAT_KEYS = ("gemms_seen", "pruned", "passed_through", "kept_total", "considered_total", "overridden",
              "hints_considered", "hints_kept", "cutlass_considered", "cutlass_kept", "epilogue_templates_added",
              "region_scored")
SLOW_FILTER_MS = 50.0  # per GEMM: above this the filter itself would slow compiles down (Exhaustive issue)
_RECENT_DECISIONS = 256  # kept-score records remembered for override_best_choice (per pruner)
_SCORE_CACHE = 4096  # problems whose scores a pruner remembers


class _PassThrough(Exception):
    """Internal: the hook cannot rank this GEMM, for ``reason`` (a stats key): it keeps the fallback (the aten
    choice alone, or the whole list with ``fallback="full"``), or the whole list with ``keep_all``."""

    def __init__(self, reason: str, message: str, warn: bool = True, keep_all: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.warn = warn
        self.keep_all = keep_all  # not ours to judge (a CPU GEMM): the whole list whatever the fallback


# ---------------------------------------------------------------------------------------------
# The pruner (the factory Inductor calls, and the filter)
# ---------------------------------------------------------------------------------------------

class GemmPruner:
    """Holds the loaded model, the settings and the counters; calling it returns the ``InductorChoices``
    instance Inductor uses (``config.inductor_choices_class`` is a factory, called once per thread and
    once per FX-graph cache key in torch 2.13, so calling it must be cheap: the model is loaded once).

    ``uuid()`` goes into Inductor's cache keys: torch 2.13 calls the factory and the instance's ``uuid()``; torch 2.11
    pickles the config value, a pruner as its settings and decompositions: no graph of other settings is reused.
    """

    def __init__(self, settings: HookSettings, ranker: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.model_path: Path | None = None
        self.ranker = ranker
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.region_models: dict[str, RegionModel] = {}  # beside a discovered main model (predictor.regions)
        self.disabled: str | None = None  # why every GEMM is passed through, if it is
        self._warned: set[str] = set()
        self._lock = threading.Lock()  # counters and warnings
        self._load_lock = threading.Lock()
        self._stats: Counter = Counter()
        self._recent: dict[frozenset, dict[str, float]] = {}  # kept candidate keys -> their scores
        # operands of the GEMMs cut to cuBLAS alone (aten_alone_below_us): their CUTLASS choices, which reach
        # Inductor's preprocessing step later, are dropped too
        self._aten_alone: dict[tuple, None] = {}
        self._filter_ms: deque = deque(maxlen=100_000)  # the filter's own time per GEMM (the model's load in the first)
        self._fallbacks: Counter = Counter()
        self._scores: dict[tuple, np.ndarray] = {}  # see scores()
        self._split_addmm = SplitAddmm()
        self._loaded = ranker is not None
        self._uuid: str | None = None
        # called as recorder(kept, kernel_inputs, op_name) with every GEMM's final list (predictor.offline.export);
        # never pickled
        self.recorder: Any = None
        # opt-in, never pickled: decision_observer(choices, scores, is_aten, chosen, problem, kernel_inputs, op_name)
        # for every GEMM the decide policy settles (collectors/in_program/collect.py times its policy.runner_up)
        self.decision_observer: Any = None
        # the ranker scores with the device the model was trained for (its measured peaks and bandwidth)
        self.device: DeviceInfo | None = (DeviceInfo.from_metadata(self.metadata) if "device" in self.metadata
                                          else settings.device)

    @property
    def margin(self) -> float | None:
        """Score margin below the favourite beyond which candidates are dropped even inside the top k.

        ``"auto"`` takes the margin calibrated on held-out problems at training time (metadata
        ``pruning.margin``; None when the model has none), so a confident model keeps one or two candidates
        (a single survivor is used without benchmarking) and an unsure one keeps up to k."""
        m = self.settings.margin
        if m == "auto":
            m = (self.metadata.get(PRUNING_KEY) or {}).get("margin")
        return None if m is None else float(m)

    # -- set-up --------------------------------------------------------------------------------
    def load(self) -> GemmPruner:
        """Resolve and load the model once; on any problem disable pruning with one warning."""
        with self._load_lock:
            if not self._loaded:
                self._load()
                self._loaded = True
        return self

    def _load(self) -> None:
        s = self.settings
        try:
            device = s.device if s.device is not None else _this_gpu()
        except Exception as exc:  # noqa: BLE001 -- a broken CUDA set-up must not break compiling
            return self._disable("no_gpu", f"cannot query the GPU ({type(exc).__name__}: {exc}); "
                                 f"every GEMM: {self._fallback_words()}")
        if device is None:
            return self._disable("no_gpu", f"no CUDA device; every GEMM: {self._fallback_words()}")
        if s.model is None:
            folder = find_model(device, s.space, allow_similar=s.allow_similar_gpu)
            if folder is None:
                return self._disable("no_model", f"no model for {device.gpu} (cc {device.cc}) under "
                                     f"{', '.join(map(str, model_roots()))}; every GEMM: {self._fallback_words()}")
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
            self.ranker, self.metadata = load_runtime_model(folder, expect_device=None if similar else device)
        except ModelError as exc:
            return self._disable("no_model", f"{exc}; every GEMM: {self._fallback_words()}")
        except Exception as exc:  # noqa: BLE001 -- load_runtime_model wraps known errors; this is the rest
            return self._disable("no_model", f"{folder}: cannot load ({type(exc).__name__}: {exc}); "
                                 f"every GEMM: {self._fallback_words()}")
        self.model_path = folder
        self.device = DeviceInfo.from_metadata(self.metadata)
        if s.model is None:  # a model the caller names ranks every GEMM itself
            self.region_models = load_region_models(device, s.space, s.allow_similar_gpu, self._warn_once)
        if similar:
            self._warn_once("similar_gpu", f"using {folder}, trained on {trained_for.gpu}, for "
                            f"{device.gpu} (same cc {device.cc}, {device.sm_count} SMs, same shared memory); "
                            "its rankings were not measured on this GPU (allow_similar_gpu=False refuses)")
        if self.metadata.get("space", "default") != s.space:
            log.warning("%s was trained on the %r space, the hook prunes the %r space; its ranking may be off",
                        folder, self.metadata.get("space"), s.space)
        log.info("gemm-predictor: %s GEMM choices (top %d) with %s (%s)", s.policy, s.top_k, folder,
                 self.metadata.get("ranker", {}).get("name"))

    def _disable(self, reason: str, message: str) -> None:
        self.disabled = reason
        self.ranker = None
        self._warn_once(reason, message)

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning("gemm-predictor: %s", message)

    # -- what Inductor calls -------------------------------------------------------------------
    def __call__(self) -> Any:
        from .inductor_integration import _choices_class

        return _choices_class()(self)

    def uuid(self) -> str:
        self.load()
        if self._uuid is None:
            s = self.settings
            key = {"model_sha256": None if self.ranker is None else self.metadata.get("model_sha256"),
                   "top_k": s.top_k, "space": s.space, "keep_aten": s.keep_aten, "min_confidence": s.min_confidence,
                   "hints": s.hints, "margin": self.margin, "aten_alone_below_us": s.aten_alone_below_us,
                   "override_gap": s.override_gap, "cutlass_top_k": s.cutlass_top_k,
                   "epilogue_templates": s.epilogue_templates, "allow_similar_gpu": s.allow_similar_gpu,
                   "policy": s.policy, "decide_gap": s.decide_gap, "fallback": s.fallback, "gap_floors": GAP_FLOORS,
                   "gemv_blocks": gemv_blocks.table_digest(), "few_rows": few_rows.table_digest(),
                   "decompositions": decompositions_digest(),
                   "grouped_mm_bands": grouped_mm.rule_key(), "dynamic_pointwise": dynamic_hints.cache_key(),
                   "region_models": {r: m.metadata.get("model_sha256") for r, m in self.region_models.items()}}
            self._uuid = "gemm-predictor-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        return self._uuid

    def __reduce__(self) -> tuple:
        return _restore_pruner, (self.settings, decompositions_digest())  # torch 2.11 keys its caches on this pickle

    def __copy__(self) -> GemmPruner:
        return self  # config snapshots copy values; one pruner keeps one model and one set of counters

    def __deepcopy__(self, memo: dict) -> GemmPruner:
        return self

    def __repr__(self) -> str:
        where = self.model_path or ("pass-through: " + self.disabled if self.disabled else "not loaded")
        return f"GemmPruner(top_k={self.settings.top_k}, space={self.settings.space!r}, model={str(where)!r})"

    # -- counters ------------------------------------------------------------------------------
    def pick(self, best_choice: Any, timings: dict[Any, float]) -> Any:
        """Inductor's benchmark pick, or the model's favourite among the benchmarked choices where the pick scores
        more than ``override_gap`` below it (``policy.override_choice``; torch >= 2.13 ``override_best_choice``).
        Only choices this pruner scored (matched by candidate key set) are considered."""
        gap = self.settings.override_gap
        if gap is None or len(timings) < 2 or best_choice not in timings:
            return best_choice
        key_of = {c: from_choice_caller(getattr(c, "name", ""), getattr(c, "description", "")).key for c in timings}
        with self._lock:
            scores = self._recent.get(frozenset(key_of.values()))
        chosen = best_choice if scores is None else override_choice(best_choice, timings, key_of, scores, gap)
        if chosen is not best_choice:
            with self._lock:
                self._stats["overridden"] += 1
        return chosen

    def preprocess(self, choices: list[Any]) -> list[Any]:
        """Inductor's preprocessing of a GEMM's ChoiceCallers: ``SplitAddmm.without_aten``, then ``keep_cutlass``: no
        CUTLASS where decided (decide/tune: blind to CUTLASS) or cut to cuBLAS alone, else the cutlass_top_k best."""
        choices = self._split_addmm.without_aten(choices)
        if not any(map(is_cutlass_choice, choices)):
            return choices
        try:
            key = _operands_key(getattr(choices[0], "input_nodes", None) or []) if self._aten_alone else None
            cut = self.settings.policy != "prune" or (key is not None and key in self._aten_alone)
            device = self.device if self.device is not None else self.settings.device or _this_gpu()
            kept = keep_cutlass(choices, cut, self.settings.cutlass_top_k, device.sm_count if device else 132)
        except Exception as exc:  # never break a compile
            self._warn_once("cutlass", f"CUTLASS pruning failed ({type(exc).__name__}: {exc}); keeping every choice")
            return choices
        if kept is not choices:
            names = lambda cs: {c.name for c in cs if is_cutlass_choice(c)}
            with self._lock:
                self._stats["cutlass_considered"] += len(names(choices))
                self._stats["cutlass_kept"] += len(names(kept))
        return kept

    def stats(self) -> dict[str, Any]:
        """Counters since install: GEMMs seen, pruned or passed through, choices kept/considered, ``region_scored``
        (GEMMs a region model ranked), ``fallbacks`` by reason (no_gpu, no_model, not_cuda, unknown_op, untrained_kind,
        unknown_template, out_of_distribution, tf32, low_confidence (widened, may still prune), error, empty, slow),
        ``overridden`` (``override_gap``), the filter's own time per GEMM (``filter_ms_median``, ``filter_ms_max``)."""
        with self._lock:
            out: dict[str, Any] = {key: int(self._stats[key]) for key in _STAT_KEYS}
            out["fallbacks"] = dict(self._fallbacks)
            out["filter_ms_max"] = round(max(self._filter_ms), 3) if self._filter_ms else 0.0
            out["filter_ms_median"] = round(float(np.median(self._filter_ms)), 3) if self._filter_ms else 0.0
        return out

    # -- the filter ----------------------------------------------------------------------------
    def filter(self, choices: list[Any], kernel_inputs: Any, op_name: str) -> list[Any]:
        """The choices to keep, in Inductor's order; the full list whenever anything is off."""
        kept: list[Any] = choices
        fallback: str | None = None
        start = time.perf_counter()
        later_part = False  # of a split addmm: its aten choice was kept in an earlier call, so a failure keeps nothing
        if choices:
            try:
                self.load()
                later_part = self._split_addmm.is_later_part(self.settings, choices, kernel_inputs, op_name)
                if later_part:
                    kept = self._split_addmm.decide(self, choices, kernel_inputs)
                else:
                    kept = self._prune(choices, kernel_inputs, op_name)
                    if not kept:
                        raise _PassThrough("empty", f"nothing kept of {len(choices)} choices for {op_name}")
            except _PassThrough as exc:
                kept, fallback = (choices if exc.keep_all else self._fallback(choices)), exc.reason
                if exc.warn:
                    self._warn_once(exc.reason, f"{exc}; {self._fallback_words()}")
                else:
                    log.debug("gemm-predictor: %s; %s (%d choices)", exc, self._fallback_words(), len(choices))
            except Exception as exc:  # the hook must never break a compile
                kept, fallback = ([] if later_part else self._fallback(choices)), "error"
                self._warn_once("error", f"choice filter failed for {op_name} ({type(exc).__name__}: {exc}); "
                                f"{self._fallback_words()}")
                log.debug("gemm-predictor: filter failure", exc_info=True)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if elapsed_ms > SLOW_FILTER_MS:
            self._warn_once("slow", f"the choice filter took {elapsed_ms:.0f} ms for {op_name} with {len(choices)} "
                            f"choices (budget {SLOW_FILTER_MS:.0f} ms per GEMM)")
        with self._lock:
            self._filter_ms.append(elapsed_ms)
            self._stats["gemms_seen"] += 1
            self._stats["considered_total"] += len(choices)
            self._stats["kept_total"] += len(kept)
            self._stats["pruned" if len(kept) < len(choices) else "passed_through"] += 1
            if fallback is not None:
                self._fallbacks[fallback] += 1
        if self.recorder is not None and kept:
            try:
                self.recorder(kept, kernel_inputs, op_name)
            except Exception as exc:  # recording must never break a compile
                self._warn_once("record", f"recording the decision for {op_name} failed ({type(exc).__name__}: {exc})")
        return kept

    def may_pick_triton(self, problem: Problem, kernel_inputs: Any) -> bool:
        """Whether the decide policy may take a Triton kernel over cuBLAS for this GEMM: a kind of problem the model
        has labels for (``policy.trusted_kind``), at sizes one kernel fits (``inductor_inputs.one_kernel_fits``)."""
        return trusted_kind(self.metadata.get(RANGES_KEY), problem) and one_kernel_fits(kernel_inputs)

    def decide_gap(self, problem: Problem, region: RegionModel | None) -> float:
        """``policy.decide_gap_for`` with this pruner's gap, for a GEMM ranked by ``region`` (``model_for``)."""
        return decide_gap_for(problem, self.settings.decide_gap, region.region if region else None)

    def scores(self, problem: Problem, cands: list[Candidate], hints: list[int | None],
               region: RegionModel | None) -> np.ndarray:
        """The ranker's scores (``region``'s where its model ranks ``problem``: ``region_models.model_for``),
        remembered per (problem, candidates, hints): repeated layers and the backward lower a GEMM again and again."""
        ranker, device = (region.ranker, region.device) if region is not None else (self.ranker, self.device)
        key = (problem, tuple([c.key for c in cands]), tuple(hints))
        scores = self._scores.get(key)
        if scores is None:
            if hasattr(ranker, "score_features"):  # the LightGBM rankers: features straight into numpy
                raw = ranker.score_features(runtime_feature_matrix(problem, cands, hints, device))
            else:  # the other rankers read rows (and import pandas, as they import scikit-learn)
                raw = ranker.score(ranker_rows(problem, cands, hints), device)
            scores = np.asarray(raw, dtype=np.float64)
            if len(self._scores) >= _SCORE_CACHE:
                self._scores.pop(next(iter(self._scores)), None)
            self._scores[key] = scores
        return scores

    def _fallback(self, choices: list[Any]) -> list[Any]:
        try:
            return fallback_choices(choices, self.settings.fallback)
        except Exception:  # noqa: BLE001 -- an odd choice object: the full list is always valid
            return choices

    def _fallback_words(self) -> str:
        return ("keeping Inductor's whole list (fallback='full')" if self.settings.fallback == "full"
                else "keeping the aten/cuBLAS choice alone, as plain torch.compile would (fallback='aten')")

    def _prune(self, choices: list[Any], kernel_inputs: Any, op_name: str) -> list[Any]:
        s = self.settings
        if self.ranker is None:
            raise _PassThrough(self.disabled or "no_model", "no usable model", warn=False)
        if s.device is None and getattr(kernel_inputs, "device_type", "cuda") != "cuda":
            raise _PassThrough("not_cuda", f"{op_name} on {kernel_inputs.device_type}", warn=False, keep_all=True)
        op = INDUCTOR_OPS.get(op_name)
        if op == "scaled_mm":
            op = scaled_op(kernel_inputs)
        if op is None:
            raise _PassThrough("unknown_op", f"unknown GEMM op {op_name!r}")
        if op in EXPLICIT_KIND_OPS:  # checked before any choice is mapped: untrained, it gets the fallback
            why = untrained_kind(self.metadata.get(RANGES_KEY), problem_from_inputs(kernel_inputs, op))
            if why:
                raise _PassThrough("untrained_kind", f"{op_name}: {why}")
        try:
            cands, hints = candidates_from_choices(choices)
        except (ValueError, KeyError) as exc:
            raise _PassThrough("unknown_template", f"{op_name}: {exc}") from None
        groups: dict[int | None, list[int]] = {}
        if hints.count(None) == len(hints):  # no multi-kernel hints (the usual case): no loop over 2400 choices
            groups[None] = list(range(len(hints)))
        else:
            for i, hint in enumerate(hints):
                groups.setdefault(hint, []).append(i)
        hinted = any(h is not None for h in groups)
        choosing_hints = hinted and s.hints == "predict"
        deciding = s.policy in ("decide", "tune") and not hinted
        if len(choices) == 1 or (not deciding and not choosing_hints
                                 and all(len(members) <= s.top_k for members in groups.values())):
            return choices  # nothing to prune: skip the problem and the model

        problem = problem_from_inputs(kernel_inputs, op)
        # an op or dtype the model never trained on is always passed through; sizes only when asked to be careful
        outside = out_of_training_range(self.metadata.get(RANGES_KEY), problem, sizes=s.min_confidence is not None)
        if outside:
            raise _PassThrough("out_of_distribution", outside, warn=False)
        if problem.dtype == "float32" and _tf32_enabled():
            # labels time float32 with TF32 off (Inductor's default); with TF32 on, cuBLAS and the Triton
            # templates run other instructions and the ranking does not carry over
            raise _PassThrough("tf32", f"{problem}: float32 with TF32 enabled was never measured", warn=False)
        region = model_for(self.region_models, problem)  # a region model ranks its region's GEMMs
        with self._lock:
            self._stats["region_scored"] += region is not None
        scores = self.scores(problem, cands, hints, region)
        if scores.shape != (len(choices),) or not np.isfinite(scores).all():
            raise ValueError(f"the ranker returned {scores.shape} scores, not {len(choices)} finite ones")

        is_aten = [c.family == "aten" for c in cands]
        if deciding:
            chosen = decide_one(scores, is_aten, self.may_pick_triton(problem, kernel_inputs),
                                self.decide_gap(problem, region))
            log.debug("gemm-predictor: %s (%s): decided %s of %d", op_name, problem, cands[chosen].key, len(cands))
            if self.decision_observer is not None:
                try:  # observing must never break a compile
                    self.decision_observer(choices, scores, is_aten, chosen, problem, kernel_inputs, op_name)
                except Exception as exc:  # noqa: BLE001
                    self._warn_once("observe", f"observing the decision for {op_name} failed ({type(exc).__name__}: {exc})")
            return [choices[i] for i in decided_choices(scores, is_aten, chosen, s.policy, s.top_k)]

        # Inductor's scheduler needs a Triton kernel for every hint in config.multi_kernel_hints (it takes the
        # min over each hint group's Triton timings), so a hint not worth autotuning keeps its favourite alone
        # rather than nothing
        predicted = self._predicted_hints(problem, cands, scores, groups) if choosing_hints else None

        margin = self.margin
        kept: list[np.ndarray] = []
        for hint, members in groups.items():
            idx = np.asarray(members)
            k = s.top_k if predicted is None or hint is None or hint in predicted else 1
            if s.min_confidence is not None and len(idx) > k:
                ordered = np.sort(scores[idx])[::-1]
                confidence = ordered[0] - ordered[k]
                if confidence < s.min_confidence:
                    k = 2 * s.top_k
                    with self._lock:
                        self._fallbacks["low_confidence"] += 1
                    log.debug("gemm-predictor: %s hint=%s: margin %.3g < %.3g, keeping top %d",
                              problem, hint, confidence, s.min_confidence, k)
            kept.append(idx[keep_best(scores[idx], k, margin)])
        keep_idx = np.concatenate(kept)
        if s.keep_aten:
            keep_idx = with_aten_fallback(keep_idx, scores, is_aten)
        if s.aten_alone_below_us is not None and not hinted:  # scores of other hints' M do not compare with aten's
            ideal = ideal_time_us(problem.b, problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype,
                                  self.device)
            keep_idx = aten_alone_if_small(keep_idx, scores, is_aten, ideal, s.aten_alone_below_us)
            if len(keep_idx) == 1 and cands[int(keep_idx[0])].family == "aten" and ideal < s.aten_alone_below_us:
                self._remember_aten_alone(kernel_inputs)
        if s.epilogue_templates and not hinted and output_feeds_pointwise(_lowering_node()):
            before = len(keep_idx)
            keep_idx = with_epilogue_templates(keep_idx, scores, [c.family == "triton_mm" for c in cands],
                                               s.epilogue_templates)
            if len(keep_idx) > before:
                with self._lock:
                    self._stats["epilogue_templates_added"] += len(keep_idx) - before
        keep = {int(i) for i in keep_idx}
        if s.override_gap is not None:
            record = {cands[i].key: float(scores[i]) for i in keep}
            with self._lock:
                if len(self._recent) >= _RECENT_DECISIONS:
                    self._recent.pop(next(iter(self._recent)))
                self._recent[frozenset(record)] = record
        if log.isEnabledFor(logging.DEBUG):
            ranked = sorted(range(len(cands)), key=lambda i: -scores[i])
            log.debug("gemm-predictor: %s (%s): kept %d/%d %s; scores %s", op_name, problem, len(keep), len(cands),
                      [cands[i].key for i in sorted(keep)],
                      ", ".join(f"{cands[i].key}={scores[i]:.3f}" for i in ranked))
        return [choices[i] for i in sorted(keep)]

    def _remember_aten_alone(self, kernel_inputs: Any) -> None:
        key = _operands_key(list(kernel_inputs.nodes()) if hasattr(kernel_inputs, "nodes") else [])
        if key is None:
            return
        with self._lock:
            if len(self._aten_alone) >= _RECENT_DECISIONS:
                self._aten_alone.pop(next(iter(self._aten_alone)))
            self._aten_alone[key] = None

    def _predicted_hints(self, problem: Problem, cands: list[Candidate], scores: np.ndarray,
                         groups: dict[int | None, list[int]]) -> set[int]:
        """The multi-kernel hints worth autotuning (``predictor.runtime.hints.hints_worth_tuning``)."""
        from .hints import hints_worth_tuning

        chosen, considered = hints_worth_tuning(self.ranker, self.device, problem, cands, scores, groups)
        with self._lock:
            self._stats["hints_considered"] += considered
            self._stats["hints_kept"] += len(chosen)
        return chosen


def _restore_pruner(settings: HookSettings, _decompositions_digest: str | None = None) -> GemmPruner:
    """Unpickling (a compile subprocess, a config snapshot): the installed pruner with these settings, or a new one."""
    same = [entry.pruner for entry in _STACK if entry.pruner.settings == settings]
    return same[-1] if same else GemmPruner(settings)
