"""The ``torch.compile`` hook: let Inductor's max-autotune compile and benchmark only the predicted few.

``install()`` points ``torch._inductor.config.inductor_choices_class`` at a :class:`GemmPruner`, a factory for an
``InductorChoices`` subclass (``inductor``) whose ``_finalize_template_configs`` receives every GEMM's cheap
``KernelTemplateChoice`` list *before* any ChoiceCaller is created, compiled or benchmarked. The pruner hands it
to ``filtering.prune``, which maps each choice to a :class:`~predictor.core.candidate.Candidate`, reads the
:class:`~predictor.core.problem.Problem` off the kernel inputs, scores the candidates with the ``loading``
model and returns what ``settings.policy`` keeps, in Inductor's own order. ``counters`` counts.

The hook must never break a compile: any exception, an unknown op or template, or a model that does not fit this
GPU makes it log one warning and keep the aten choice alone (``fallback="aten"``) or Inductor's full list
(``fallback="full"``). Torch is imported lazily, so ``import predictor`` stays cheap where nothing compiles.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.candidate import Candidate, from_choice_caller
from ...core.problem import Problem
from .counters import Counters
from .cutlass import is_cutlass_choice, keep_cutlass
from .discovery import _this_gpu
from .filtering import RANGES_KEY, PassThrough, prune
from .gemm_inputs import _operands_key, one_kernel_fits
from .installed import _STACK
from .loading import FolderLoader, LoadedModel
from .policy import GAP_FLOORS, decide_gap_for, fallback_choices, override_choice, trusted_kind
from .region_models import RegionModel
from .settings import HookSettings
from .split_addmm import SplitAddmm

log = logging.getLogger(__name__)

# Inductor's max_autotune_gemm_search_space value for each of our spaces.
SEARCH_SPACE = {"default": "DEFAULT", "exhaustive": "EXHAUSTIVE"}
SLOW_FILTER_MS = 50.0  # per GEMM: above this the filter itself would slow compiles down (Exhaustive issue)
_RECENT_DECISIONS = 256  # kept-score records remembered for override_best_choice (per pruner)
# the choice filter's own source: a changed rule must not reuse a graph lowered under the older one
_CHOICE_MODULES = ("pruner.py", "filtering.py", "policy.py", "split_addmm.py")


@functools.cache
def choices_digest() -> str:
    """A digest of the modules that decide the GEMMs (read by name: this module imports them)."""
    digest = hashlib.sha256()
    for name in _CHOICE_MODULES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:16]




class GemmPruner:
    """Holds the settings, the model (``loading.LoadedModel``) and the counters; calling it returns the
    ``InductorChoices`` instance Inductor uses (``config.inductor_choices_class`` is a factory, called once per
    thread and once per FX-graph cache key in torch 2.13, so calling it must be cheap: the model is loaded once).

    ``uuid()`` goes into Inductor's cache keys: torch 2.13 calls the factory and the instance's ``uuid()``; torch 2.11
    pickles the config value, a pruner as its settings and ``cache_digest()``: no graph of other settings is reused.

    Given by whoever makes the pruner: ``load``, how a model folder is read (``loading.LoadedModel``), and
    ``lowerings_digest``, the share of the cache key of the lowerings the compile applies (``predictor.compile``
    gives ``registry.digest``; a pruner installed for plain ``torch.compile`` sees no lowering and has none).
    """

    def __init__(self, settings: HookSettings, ranker: Any = None, metadata: dict[str, Any] | None = None,
                 load: FolderLoader | None = None, lowerings_digest: Callable[[], str] | None = None) -> None:
        self.settings = settings
        self.model = LoadedModel(settings, ranker, metadata, load)
        self.lowerings_digest = lowerings_digest
        self.counters = Counters()
        self._load_lock = threading.Lock()
        self._loaded = ranker is not None
        self._recent: dict[frozenset, dict[str, float]] = {}  # kept candidate keys -> their scores
        # operands of the GEMMs cut to cuBLAS alone (aten_alone_below_us): their CUTLASS choices, which reach
        # Inductor's preprocessing step later, are dropped too
        self._aten_alone: dict[tuple, None] = {}
        self._split_addmm = SplitAddmm()
        self._uuid: tuple[str, str] | None = None  # (cache_digest, uuid)
        # called as recorder(kept, kernel_inputs, op_name) with every GEMM's final list (predictor.offline.export);
        # never pickled
        self.recorder: Any = None
        # opt-in, never pickled: decision_observer(choices, scores, is_aten, chosen, problem, kernel_inputs, op_name)
        # for every GEMM the decide policy settles (collectors/in_program/collect.py times its policy.runner_up)
        self.decision_observer: Any = None

    # the model's state, as callers read (and tests set) it
    ranker = property(lambda self: self.model.ranker, lambda self, v: setattr(self.model, "ranker", v))
    metadata = property(lambda self: self.model.metadata, lambda self, v: setattr(self.model, "metadata", v))
    device = property(lambda self: self.model.device, lambda self, v: setattr(self.model, "device", v))
    model_path = property(lambda self: self.model.path, lambda self, v: setattr(self.model, "path", v))
    region_models = property(lambda self: self.model.region_models,
                             lambda self, v: setattr(self.model, "region_models", v))
    disabled = property(lambda self: self.model.disabled, lambda self, v: setattr(self.model, "disabled", v))
    margin = property(lambda self: self.model.margin())
    _scores = property(lambda self: self.model.scores_)

    def cache_digest(self) -> str:
        """What a compiled graph's reuse depends on beyond the settings: the choice filter's source and, for a
        pruner of ``predictor.compile``, every lowering's share (``lowerings_digest``)."""
        if self.lowerings_digest is None:
            return choices_digest()
        return f"{choices_digest()}-{self.lowerings_digest(self.settings.allow_similar_gpu)}"

    def load(self) -> GemmPruner:
        """Resolve and load the model once; on any problem disable pruning with one warning."""
        with self._load_lock:
            if not self._loaded:
                self.model.load(self._warn_once, self._fallback_words())
                self._loaded = True
        return self

    def _warn_once(self, key: str, message: str) -> None:
        self.counters.warn_once(key, message)

    # -- what Inductor calls -------------------------------------------------------------------
    def __call__(self) -> Any:
        from .inductor import _choices_class

        return _choices_class()(self)

    def uuid(self) -> str:
        self.load()
        digest = self.cache_digest()
        if self._uuid is None or self._uuid[0] != digest:
            s = self.settings
            key = {"model_sha256": None if self.ranker is None else self.metadata.get("model_sha256"),
                   "top_k": s.top_k, "space": s.space, "keep_aten": s.keep_aten, "min_confidence": s.min_confidence,
                   "hints": s.hints, "margin": self.margin, "aten_alone_below_us": s.aten_alone_below_us,
                   "override_gap": s.override_gap, "cutlass_top_k": s.cutlass_top_k,
                   "epilogue_templates": s.epilogue_templates, "allow_similar_gpu": s.allow_similar_gpu,
                   "policy": s.policy, "decide_gap": s.decide_gap, "fallback": s.fallback, "gap_floors": GAP_FLOORS,
                   "code": digest,
                   "region_models": {r: m.metadata.get("model_sha256") for r, m in self.region_models.items()}}
            self._uuid = (digest, "gemm-predictor-" +
                          hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32])
        return self._uuid[1]

    def __reduce__(self) -> tuple:
        # torch 2.11 keys its caches on this pickle; the collaborators are functions, pickled by name
        return _restore_pruner, (self.settings, self.cache_digest(), self.model.load_folder, self.lowerings_digest)

    def __copy__(self) -> GemmPruner:
        return self  # config snapshots copy values; one pruner keeps one model and one set of counters

    def __deepcopy__(self, memo: dict) -> GemmPruner:
        return self

    def __repr__(self) -> str:
        where = self.model_path or ("pass-through: " + self.disabled if self.disabled else "not loaded")
        return f"GemmPruner(top_k={self.settings.top_k}, space={self.settings.space!r}, model={str(where)!r})"

    def pick(self, best_choice: Any, timings: dict[Any, float]) -> Any:
        """Inductor's benchmark pick, or the model's favourite among the benchmarked choices where the pick scores
        more than ``override_gap`` below it (``policy.override_choice``; torch >= 2.13 ``override_best_choice``).
        Only choices this pruner scored (matched by candidate key set) are considered."""
        gap = self.settings.override_gap
        if gap is None or len(timings) < 2 or best_choice not in timings:
            return best_choice
        key_of = {c: from_choice_caller(getattr(c, "name", ""), getattr(c, "description", "")).key for c in timings}
        with self.counters.lock:
            scores = self._recent.get(frozenset(key_of.values()))
        chosen = best_choice if scores is None else override_choice(best_choice, timings, key_of, scores, gap)
        if chosen is not best_choice:
            self.counters.add("overridden")
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
            self.counters.add("cutlass_considered", len(names(choices)))
            self.counters.add("cutlass_kept", len(names(kept)))
        return kept

    def stats(self) -> dict[str, Any]:
        """Counters since install: GEMMs seen, pruned or passed through, choices kept/considered, ``region_scored``
        (GEMMs a region model ranked), ``fallbacks`` by reason (no_gpu, no_model, not_cuda, unknown_op, untrained_kind,
        unknown_template, out_of_distribution, tf32, low_confidence (widened, may still prune), error, empty, slow),
        ``overridden`` (``override_gap``), the filter's own time per GEMM (``filter_ms_median``, ``filter_ms_max``)."""
        return self.counters.stats()

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
                    kept = prune(self, choices, kernel_inputs, op_name)
                    if not kept:
                        raise PassThrough("empty", f"nothing kept of {len(choices)} choices for {op_name}")
            except PassThrough as exc:
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
        self.counters.gemm(elapsed_ms, len(choices), len(kept), fallback)
        if self.recorder is not None and kept:
            try:
                self.recorder(kept, kernel_inputs, op_name)
            except Exception as exc:  # recording must never break a compile
                self._warn_once("record", f"recording the decision for {op_name} failed ({type(exc).__name__}: {exc})")
        return kept

    def may_pick_triton(self, problem: Problem, kernel_inputs: Any) -> bool:
        """Whether the decide policy may take a Triton kernel over cuBLAS for this GEMM: a kind of problem the model
        has labels for (``policy.trusted_kind``), at sizes one kernel fits (``gemm_inputs.one_kernel_fits``)."""
        return trusted_kind(self.metadata.get(RANGES_KEY), problem) and one_kernel_fits(kernel_inputs)

    def decide_gap(self, problem: Problem, region: RegionModel | None) -> float:
        """``policy.decide_gap_for`` with this pruner's gap, for a GEMM ranked by ``region`` (``model_for``)."""
        return decide_gap_for(problem, self.settings.decide_gap, region.region if region else None)

    def scores(self, problem: Problem, cands: list[Candidate], hints: list[int | None],
               region: RegionModel | None) -> np.ndarray:
        """``LoadedModel.scores``: the ranker's scores, remembered per problem."""
        return self.model.scores(problem, cands, hints, region)

    def remember_scores(self, record: dict[str, float]) -> None:
        """The kept candidates' scores, for ``pick`` (``override_gap``)."""
        with self.counters.lock:
            if len(self._recent) >= _RECENT_DECISIONS:
                self._recent.pop(next(iter(self._recent)))
            self._recent[frozenset(record)] = record

    def remember_aten_alone(self, kernel_inputs: Any) -> None:
        key = _operands_key(list(kernel_inputs.nodes()) if hasattr(kernel_inputs, "nodes") else [])
        if key is None:
            return
        with self.counters.lock:
            if len(self._aten_alone) >= _RECENT_DECISIONS:
                self._aten_alone.pop(next(iter(self._aten_alone)))
            self._aten_alone[key] = None

    def predicted_hints(self, problem: Problem, cands: list[Candidate], scores: np.ndarray,
                        groups: dict[int | None, list[int]]) -> set[int]:
        """The multi-kernel hints worth autotuning (``hint_buckets.hints_worth_tuning``)."""
        from .hint_buckets import hints_worth_tuning

        chosen, considered = hints_worth_tuning(self.ranker, self.device, problem, cands, scores, groups)
        self.counters.add("hints_considered", considered)
        self.counters.add("hints_kept", len(chosen))
        return chosen

    def _fallback(self, choices: list[Any]) -> list[Any]:
        try:
            return fallback_choices(choices, self.settings.fallback)
        except Exception:  # noqa: BLE001 -- an odd choice object: the full list is always valid
            return choices

    def _fallback_words(self) -> str:
        return ("keeping Inductor's whole list (fallback='full')" if self.settings.fallback == "full"
                else "keeping the aten/cuBLAS choice alone, as plain torch.compile would (fallback='aten')")


def _restore_pruner(settings: HookSettings, _digest: str | None = None, load: FolderLoader | None = None,
                    lowerings_digest: Callable[[], str] | None = None) -> GemmPruner:
    """Unpickling (a compile subprocess, a config snapshot): the installed pruner with these settings, or a new one
    with the same collaborators."""
    same = [entry.pruner for entry in _STACK if entry.pruner.settings == settings]
    return same[-1] if same else GemmPruner(settings, load=load, lowerings_digest=lowerings_digest)
