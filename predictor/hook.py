"""The ``torch.compile`` hook: let Inductor's max-autotune compile and benchmark only the predicted few.

``install()`` points ``torch._inductor.config.inductor_choices_class`` at a :class:`GemmPruner`, a
factory for an ``InductorChoices`` subclass whose ``_finalize_template_configs`` (same signature in
torch 2.11 and 2.13) receives every GEMM's cheap ``KernelTemplateChoice`` list *before* any
ChoiceCaller is created, compiled or benchmarked. The pruner maps each choice to a
:class:`~predictor.candidate.Candidate`, reads the :class:`~predictor.problem.Problem` off the kernel
inputs, scores the candidates with the model and returns the best ``top_k`` (plus the best aten
choice with ``keep_aten``) in Inductor's own order.

The hook must never break a compile: any exception, an unknown op or template, or a model that does
not fit this GPU makes it log one warning and keep what plain ``torch.compile`` runs, the aten choice alone
(``fallback="aten"``, the default), or Inductor's full list (``fallback="full"``: stock max-autotune).

Torch is imported lazily, so ``import predictor`` stays cheap on machines that only train or evaluate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .artifacts import METADATA_FILE, ModelError, load_runtime_model, read_metadata
from .candidate import CANDIDATE_FIELDS, Candidate, from_choice_caller, from_template_kwargs
from .cutlass import is_cutlass_choice, prune_cutlass
from .device import DeviceInfo
from .features import ideal_time_us
from .policy import (ATEN_ALONE_BELOW_US, DECIDE_MIN_GAP, FALLBACKS, aten_alone_if_small, decide_one,
                     fallback_choices, is_aten_choice, keep_best, problem_kind, with_aten_fallback,
                     with_epilogue_templates)
from .problem import DTYPE_BYTES, PROBLEM_FIELDS, Problem
from .spaces import SPACES

log = logging.getLogger(__name__)

MODELS_ENV = "GEMM_PREDICTOR_MODELS"  # extra model roots (os.pathsep-separated), searched first
PREFERRED_SUFFIX = "-lgbm-all"  # the shipped default: LambdaRank refit on every labelled row
# Optional model metadata section with the training problems' extent, e.g.
# {"m": [1, 28672], "n": [9, 151936], "k": [128, 65536], "ops": ["mm", ...], "dtypes": [...]}.
RANGES_KEY = "problem_ranges"
PRUNING_KEY = "pruning"
# Inductor's op_name -> Problem.op. Anything else (baddbmm, scaled_mm, "mm-ah", ...) is passed through.
INDUCTOR_OPS = {"mm": "mm", "addmm": "addmm", "bmm": "bmm", "int_mm": "int_mm"}
# Inductor's max_autotune_gemm_search_space value for each of our spaces.
SEARCH_SPACE = {"default": "DEFAULT", "exhaustive": "EXHAUSTIVE"}
_STAT_KEYS = ("gemms_seen", "pruned", "passed_through", "kept_total", "considered_total", "overridden",
              "hints_considered", "hints_kept", "cutlass_considered", "cutlass_kept", "epilogue_templates_added")
SLOW_FILTER_MS = 50.0  # per GEMM: above this the filter itself would slow compiles down (Exhaustive issue)
_RECENT_DECISIONS = 256  # kept-score records remembered for override_best_choice (per pruner)
_SCORE_CACHE = 4096  # problems whose scores a pruner remembers


class _PassThrough(Exception):
    """Internal: leave this GEMM's list alone, for ``reason`` (a stats key)."""

    def __init__(self, reason: str, message: str, warn: bool = True, keep_all: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.warn = warn
        self.keep_all = keep_all  # not ours to judge (a CPU GEMM): the whole list whatever the fallback


@dataclasses.dataclass(frozen=True)
class HookSettings:
    """Everything a pruner is built from; also what a pickled pruner carries to another process."""

    model: str | None = None
    top_k: int = 5
    space: str = "default"
    keep_aten: bool = True
    min_confidence: float | None = None
    hints: str | None = None
    device: DeviceInfo | None = None  # test-only override of the GPU (see ``install(_device=...)``)
    margin: float | str | None = "auto"
    allow_similar_gpu: bool = True
    aten_alone_below_us: float | None = ATEN_ALONE_BELOW_US
    override_gap: float | None = None
    cutlass_top_k: int | None = None
    epilogue_templates: int = 0
    policy: str = "prune"  # "prune": keep the top k for Inductor to benchmark; "decide": one choice, no benchmark
    decide_gap: float = DECIDE_MIN_GAP
    fallback: str = "aten"  # what a GEMM the hook cannot rank keeps: "aten" (plain's choice) or "full"

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {self.top_k!r}")
        if self.space not in SPACES:
            raise ValueError(f"unknown space {self.space!r}; expected one of {', '.join(SPACES)}")
        confidence = self.min_confidence
        if confidence is not None and not (isinstance(confidence, (int, float)) and math.isfinite(confidence)
                                           and confidence >= 0):
            raise ValueError(f"min_confidence must be a non-negative number or None, got {self.min_confidence!r}")
        if not (self.margin is None or self.margin == "auto"
                or (isinstance(self.margin, (int, float)) and math.isfinite(self.margin) and self.margin >= 0)):
            raise ValueError(f"margin must be 'auto', None or a non-negative number, got {self.margin!r}")
        below = self.aten_alone_below_us
        if below is not None and not (isinstance(below, (int, float)) and math.isfinite(below) and below >= 0):
            raise ValueError(f"aten_alone_below_us must be a non-negative number or None, got {below!r}")
        gap = self.override_gap
        if gap is not None and not (isinstance(gap, (int, float)) and math.isfinite(gap) and gap >= 0):
            raise ValueError(f"override_gap must be a non-negative number or None, got {gap!r}")
        ck = self.cutlass_top_k
        if ck is not None and (isinstance(ck, bool) or not isinstance(ck, int) or ck < 1):
            raise ValueError(f"cutlass_top_k must be a positive integer or None, got {ck!r}")
        et = self.epilogue_templates
        if isinstance(et, bool) or not isinstance(et, int) or et < 0:
            raise ValueError(f"epilogue_templates must be a non-negative integer, got {et!r}")
        if self.hints not in (None, "predict"):
            raise ValueError(f"unknown hints mode {self.hints!r}; expected None or 'predict'")
        if self.policy not in ("prune", "decide"):
            raise ValueError(f"unknown policy {self.policy!r}; expected 'prune' or 'decide'")
        if self.fallback not in FALLBACKS:
            raise ValueError(f"unknown fallback {self.fallback!r}; expected one of {', '.join(FALLBACKS)}")
        gap = self.decide_gap
        if isinstance(gap, bool) or not (isinstance(gap, (int, float)) and math.isfinite(gap)):
            raise ValueError(f"decide_gap must be a finite number, got {self.decide_gap!r}")


# ---------------------------------------------------------------------------------------------
# Finding the model
# ---------------------------------------------------------------------------------------------

def model_roots() -> list[Path]:
    """Where ``install(model=None)`` looks for model folders: ``$GEMM_PREDICTOR_MODELS`` first, then the
    package's own ``models/`` folder. Never the working directory: a ``./models`` there is whatever the current
    folder holds (a download, another user's checkout), and a model is a file we act on; pass
    ``install(model=path)`` or set ``$GEMM_PREDICTOR_MODELS`` to use models from anywhere else."""
    extra = [Path(p) for p in os.environ.get(MODELS_ENV, "").split(os.pathsep) if p]
    return [*extra, Path(__file__).resolve().parents[1] / "models"]


def find_model(device: DeviceInfo, space: str = "default", roots: Sequence[Path] | None = None,
               allow_similar: bool = False) -> Path | None:
    """The model folder made for ``device`` (same GPU name and capability): one for ``space`` first, then
    a ``*-lgbm-all`` folder, then the earliest root, then by name. With ``allow_similar``, a model made for
    another GPU of the same architecture (``DeviceInfo.same_architecture``) is taken when no exact one
    exists. None when no folder fits."""
    ranked = []
    for root_index, root in enumerate(model_roots() if roots is None else roots):
        for meta_path in sorted(Path(root).glob(f"*/{METADATA_FILE}")):
            folder = meta_path.parent
            try:
                meta = read_metadata(folder)
                trained_for = DeviceInfo.from_metadata(meta)
            except (ModelError, TypeError, ValueError):
                continue
            exact = trained_for.same_gpu(device)
            if exact or (allow_similar and trained_for.same_architecture(device)):
                ranked.append((not exact, meta.get("space", "default") != space,
                               not folder.name.endswith(PREFERRED_SUFFIX), root_index, folder.name, folder))
    return min(ranked)[-1] if ranked else None


def _this_gpu() -> DeviceInfo | None:
    import torch

    return DeviceInfo.from_torch() if torch.cuda.is_available() else None


# ---------------------------------------------------------------------------------------------
# Reading the Problem off Inductor's kernel inputs
# ---------------------------------------------------------------------------------------------

def _hints(exprs: Sequence[Any]) -> tuple[int, ...]:
    """Concrete sizes: static ones directly, symbolic ones through the graph's size hints (the
    method is ``optimization_hints`` in torch 2.13 and ``size_hints`` in 2.11)."""
    try:
        return tuple(int(x) for x in exprs)
    except TypeError:
        pass
    from torch._inductor import config
    from torch._inductor.virtualized import V

    sizevars = V.graph.sizevars
    if hasattr(sizevars, "optimization_hints"):
        return tuple(int(x) for x in sizevars.optimization_hints(exprs))
    return tuple(int(x) for x in sizevars.size_hints(exprs, fallback=config.unbacked_symint_fallback))


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _low_bit(nbytes: int) -> int:
    return 16 if nbytes == 0 else min(16, nbytes & -nbytes)


def _offset_bytes(node: Any, itemsize: int) -> int:
    """The operand's storage offset in bytes, 0 when unknown or symbolic (aligned allocations are the norm)."""
    try:
        return int(node.get_layout().offset) * itemsize
    except Exception:  # noqa: BLE001 -- a fake node, a symbolic offset: not worth failing over
        return 0


def _layout(size: tuple[int, ...], stride: tuple[int, ...]) -> str:
    """``col`` when the operand's inner dimension is not the contiguous one (it is a transpose)."""
    return "row" if size[-1] == 1 or stride[-1] == 1 else "col"


def _symbolic_sizes(kernel_inputs: Any) -> bool:
    """Whether a GEMM operand has a symbolic size (dynamic shapes). The hook then decides for one size hint,
    while the kernel runs at every size: cuBLAS adapts to each call, one Triton config does not, so the decide
    policy keeps cuBLAS there."""
    try:
        nodes = kernel_inputs.mat1mat2() if hasattr(kernel_inputs, "mat1mat2") else list(kernel_inputs.nodes())[-2:]
        for node in nodes:
            [int(x) for x in node.get_size()]
    except TypeError:
        return True
    except Exception:  # noqa: BLE001 -- unreadable: not a reason to change the decision
        return False
    return False


def _operands_key(nodes: list[Any]) -> tuple | None:
    """The two matrix operands of a GEMM as names, sizes and strides: what ties a ``_finalize_template_configs``
    call to the ChoiceCallers of the same GEMM in Inductor's preprocessing step (names alone repeat across
    graphs). None when they cannot be read."""
    try:
        return tuple((str(n.get_name()), tuple(map(str, n.get_size())), tuple(map(str, n.get_stride())))
                     for n in nodes[-2:]) if len(nodes) >= 2 else None
    except Exception:  # noqa: BLE001 -- an unreadable node only means no match
        return None


def problem_from_inputs(kernel_inputs: Any, op: str) -> Problem:
    """The Problem as Inductor lowers it. ``align`` follows ``collectors.corpus.alignment``: the largest
    power of two <= 16 bytes dividing every non-unit operand stride, the output strides and the bases."""
    if hasattr(kernel_inputs, "mat1mat2"):
        mat1, mat2 = kernel_inputs.mat1mat2()
    else:
        mat1, mat2 = list(kernel_inputs.nodes())[-2:]
    size_a, size_b = _hints(mat1.get_size()), _hints(mat2.get_size())
    stride_a, stride_b = _hints(mat1.get_stride()), _hints(mat2.get_stride())
    dtype = _dtype_name(mat1.get_dtype())
    out = getattr(kernel_inputs, "out_dtype", None)
    out_dtype = _dtype_name(out()) if callable(out) else ("int32" if dtype == "int8" else dtype)
    if len(size_a) != len(size_b) or len(size_a) not in (2, 3) or (len(size_a) == 3) != (op == "bmm"):
        raise ValueError(f"{op} operands of shapes {size_a} and {size_b} are not a (batched) GEMM")
    m, k = size_a[-2:]
    n = size_b[-1]
    b = size_a[0] if op == "bmm" else 1
    itemsize, out_size = DTYPE_BYTES.get(dtype, 1), DTYPE_BYTES.get(out_dtype, 4)
    strides = [s * itemsize for size, stride in ((size_a, stride_a), (size_b, stride_b))
               for d, s in zip(size, stride, strict=True) if d > 1 and s != 1]
    strides += [n * out_size] + ([m * n * out_size] if b > 1 else [])
    strides += [_offset_bytes(mat1, itemsize), _offset_bytes(mat2, itemsize)]
    return Problem(op=op, b=b, m=m, n=n, k=k, dtype=dtype, out_dtype=out_dtype,
                   layout_a=_layout(size_a, stride_a), layout_b=_layout(size_b, stride_b),
                   align=min(_low_bit(abs(s)) for s in strides))


# ---------------------------------------------------------------------------------------------
# The pruner (the factory Inductor calls, and the filter)
# ---------------------------------------------------------------------------------------------

class GemmPruner:
    """Holds the loaded model, the settings and the counters; calling it returns the ``InductorChoices``
    instance Inductor uses (``config.inductor_choices_class`` is a factory, called once per thread and
    once per FX-graph cache key in torch 2.13, so calling it must be cheap: the model is loaded once).

    ``uuid()`` goes into Inductor's FX graph cache key: torch 2.13 calls the factory and the instance's
    ``uuid()`` (``config._cache_config_factory_keys``); torch 2.11 pickles the config value, and a
    pruner pickles as its settings, so a different model, k, space, ``keep_aten`` or confidence gives a
    different key either way and a cached graph compiled under other settings is not reused.
    """

    def __init__(self, settings: HookSettings, ranker: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.model_path: Path | None = None
        self.ranker = ranker
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.disabled: str | None = None  # why every GEMM is passed through, if it is
        self._warned: set[str] = set()
        self._lock = threading.Lock()  # counters and warnings
        self._load_lock = threading.Lock()
        self._stats: Counter = Counter()
        self._recent: dict[frozenset, dict[str, float]] = {}  # kept candidate keys -> their scores
        # operands of the GEMMs cut to cuBLAS alone (aten_alone_below_us): their CUTLASS choices, which reach
        # Inductor's preprocessing step later, are dropped too
        self._aten_alone: dict[tuple, None] = {}
        self._filter_ms: list[float] = []  # the filter's own time per GEMM (model load included on the first)
        self._fallbacks: Counter = Counter()
        self._scores: dict[tuple, np.ndarray] = {}  # see _score
        self._thread = threading.local()  # per compiling thread: the operands of the last addmm's aten call
        self._loaded = ranker is not None
        self._uuid: str | None = None
        # called as recorder(kept, kernel_inputs, op_name) with every GEMM's final list (predictor.export); never pickled
        self.recorder: Any = None
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
            return self._disable("no_model", f"cannot query the GPU ({type(exc).__name__}: {exc}); "
                                 f"every GEMM: {self._fallback_words()}")
        if device is None:
            return self._disable("no_model", f"no CUDA device; every GEMM: {self._fallback_words()}")
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
            # a LightGBM model scores with numpy: importing LightGBM (and scikit-learn, scipy) takes over a second;
            # the exhaustive space's ~2400 choices per GEMM score faster with LightGBM, used where it is installed
            self.ranker, self.metadata = load_runtime_model(folder, expect_device=None if similar else device,
                                                            prefer_lightgbm=s.space == "exhaustive")
        except ModelError as exc:
            return self._disable("no_model", f"{exc}; every GEMM: {self._fallback_words()}")
        except Exception as exc:  # noqa: BLE001 -- load_runtime_model wraps known errors; this is the rest
            return self._disable("no_model", f"{folder}: cannot load ({type(exc).__name__}: {exc}); "
                                 f"every GEMM: {self._fallback_words()}")
        self.model_path = folder
        self.device = DeviceInfo.from_metadata(self.metadata)
        if similar:
            self._warn_once("similar_gpu", f"using {folder}, trained on {trained_for.gpu}, for "
                            f"{device.gpu} (same cc {device.cc}, {device.sm_count} SMs, same shared memory); "
                            "its rankings were not measured on this GPU (allow_similar_gpu=False refuses)")
        if self.metadata.get("space", "default") != s.space:
            log.warning("%s was trained on the %r space, the hook prunes the %r space; its ranking may be off",
                        folder, self.metadata.get("space"), s.space)
        log.info("gemm-predictor: pruning GEMM choices to top %d with %s (%s)", s.top_k, folder,
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
        return _choices_class()(self)

    def uuid(self) -> str:
        self.load()
        if self._uuid is None:
            s = self.settings
            key = {"model_sha256": None if self.ranker is None else self.metadata.get("model_sha256"),
                   "top_k": s.top_k, "space": s.space, "keep_aten": s.keep_aten,
                   "min_confidence": s.min_confidence, "hints": s.hints, "margin": self.margin,
                   "aten_alone_below_us": s.aten_alone_below_us, "override_gap": s.override_gap,
                   "cutlass_top_k": s.cutlass_top_k, "epilogue_templates": s.epilogue_templates,
                   "allow_similar_gpu": s.allow_similar_gpu, "policy": s.policy, "decide_gap": s.decide_gap,
                   "fallback": s.fallback}
            self._uuid = "gemm-predictor-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        return self._uuid

    def __reduce__(self) -> tuple:
        return _restore_pruner, (self.settings,)

    def __copy__(self) -> GemmPruner:
        return self  # config snapshots copy values; one pruner keeps one model and one set of counters

    def __deepcopy__(self, memo: dict) -> GemmPruner:
        return self

    def __repr__(self) -> str:
        where = self.model_path or ("pass-through: " + self.disabled if self.disabled else "not loaded")
        return f"GemmPruner(top_k={self.settings.top_k}, space={self.settings.space!r}, model={str(where)!r})"

    # -- counters ------------------------------------------------------------------------------
    def pick(self, best_choice: Any, timings: dict[Any, float]) -> Any:
        """Inductor's benchmark pick, or the model's favourite among the benchmarked choices when the pick
        scores more than ``override_gap`` below it (torch >= 2.13 ``InductorChoices.override_best_choice``).

        Why: Inductor's benchmark overstates cuBLAS on small GEMMs; the model, trained on clean labels, can
        know better. Only choices this pruner scored (matched by candidate key set) and that benchmarked to a
        finite time are considered; anything unexpected keeps Inductor's pick."""
        gap = self.settings.override_gap
        if gap is None or len(timings) < 2 or best_choice not in timings:
            return best_choice
        key_of = {c: from_choice_caller(getattr(c, "name", ""), getattr(c, "description", "")).key for c in timings}
        with self._lock:
            scores = self._recent.get(frozenset(key_of.values()))
        if scores is None:
            return best_choice
        finite = [c for c, t in timings.items() if math.isfinite(float(t))]
        favourite = max(finite, key=lambda c: scores[key_of[c]])
        best_key, favourite_key = key_of[best_choice], key_of[favourite]
        if favourite_key == best_key or scores[favourite_key] - scores[best_key] <= gap:
            return best_choice
        with self._lock:
            self._stats["overridden"] += 1
        log.debug("gemm-predictor: benchmark picked %s (%.3g), using the model's %s (%.3g)", best_key,
                  scores[best_key], favourite_key, scores[favourite_key])
        return favourite

    def preprocess(self, choices: list[Any]) -> list[Any]:
        """Inductor's preprocessing step over the whole ChoiceCaller list (CUTLASS choices never pass through
        ``_finalize_template_configs``): a GEMM the filter cut to cuBLAS alone loses its CUTLASS choices too,
        and otherwise the ``cutlass_top_k`` best CUTLASS kernels are kept (``predictor.cutlass``).

        Why the first: below ``aten_alone_below_us`` Inductor's benchmark overstates cuBLAS, so any kernel left
        beside it tends to win the benchmark and lose in the program. Measured on an H200 (2047x2048x2048 bf16):
        the 4 CUTLASS kernels kept beside cuBLAS cost 109 s of compile, and the one Inductor picked ran 42 us in
        the program where cuBLAS runs 23 us (docs/CUTLASS.md). Any error keeps the list as it is."""
        if self._aten_alone and any(map(is_cutlass_choice, choices)):
            key = _operands_key(getattr(choices[0], "input_nodes", None) or [])
            if key is not None and key in self._aten_alone:
                with self._lock:
                    self._stats["cutlass_considered"] += len({c.name for c in choices if is_cutlass_choice(c)})
                return [c for c in choices if not is_cutlass_choice(c)]
        k = self.settings.cutlass_top_k
        if k is None:
            return choices
        try:
            device = self.device if self.device is not None else self.settings.device or _this_gpu()
            kept = prune_cutlass(choices, k, device.sm_count if device is not None else 132)
        except Exception as exc:  # never break a compile
            self._warn_once("cutlass", f"CUTLASS pruning failed ({type(exc).__name__}: {exc}); keeping every choice")
            return choices
        names = lambda cs: {c.name for c in cs if is_cutlass_choice(c)}
        with self._lock:
            self._stats["cutlass_considered"] += len(names(choices))
            self._stats["cutlass_kept"] += len(names(kept))
        return kept

    def stats(self) -> dict[str, Any]:
        """Counters since install: GEMMs seen, pruned or passed through, choices kept/considered, and
        ``fallbacks`` by reason (no_model, not_cuda, unknown_op, unknown_template, out_of_distribution, tf32,
        low_confidence (widened, may still prune), error, empty, slow), ``overridden`` (benchmark picks replaced,
        ``override_gap``), and the filter's own time per GEMM (``filter_ms_median``, ``filter_ms_max``)."""
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
        if choices:
            try:
                self.load()
                if self._aten_offered_apart(choices, kernel_inputs, op_name):
                    kept = self._decide_apart(choices, kernel_inputs, op_name)
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
                kept, fallback = self._fallback(choices), "error"
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

    def _aten_offered_apart(self, choices: list[Any], kernel_inputs: Any, op_name: str) -> bool:
        """Whether this list is the non-aten part of a GEMM whose aten choices Inductor offered in the call just
        before, on this thread, for the same operands: torch >= 2.13 lowers ``addmm`` in three calls (aten
        choices with the 1-D bias, a contiguous-bias subgraph, the Triton templates), torch 2.11 in one. Only
        ``policy="decide"`` with ``fallback="aten"`` acts on it: one choice per GEMM across the calls."""
        s = self.settings
        if op_name != "addmm" or s.policy != "decide" or s.fallback != "aten":
            return False
        key = _operands_key(list(kernel_inputs.nodes()) if hasattr(kernel_inputs, "nodes") else [])
        if any(map(is_aten_choice, choices)):
            self._thread.addmm_aten_key = key
            return False
        return key is not None and getattr(self._thread, "addmm_aten_key", None) == key

    def _decide_apart(self, choices: list[Any], kernel_inputs: Any, op_name: str) -> list[Any]:
        """The non-aten part of a split ``addmm``: nothing (the aten choice already kept stands, as plain
        ``torch.compile`` runs it) unless the model's favourite here beats cuBLAS, scored as a virtual aten
        candidate, by ``decide_gap``. An unknown template (the contiguous-bias subgraph) keeps nothing."""
        if self.ranker is None:
            return []
        try:
            cands = [from_template_kwargs(c.template.uid, c.params.to_kwargs()) for c in choices]
        except (ValueError, KeyError, AttributeError):
            return []
        problem = problem_from_inputs(kernel_inputs, "addmm")
        virtual = [Candidate("aten", aten_op="addmm"), Candidate("aten", aten_op="bias_addmm")]
        every = cands + virtual
        scores = self._score(problem, every, [None] * len(every))
        if scores.shape != (len(every),) or not np.isfinite(scores).all():
            return []
        trusted = self._trusted(problem) and not _symbolic_sizes(kernel_inputs)
        chosen = decide_one(scores, [c.family == "aten" for c in every], trusted, self.settings.decide_gap)
        return [] if chosen >= len(cands) else [choices[chosen]]

    def _score(self, problem: Problem, cands: list[Candidate], hints: list[int | None]) -> np.ndarray:
        """The ranker's scores, remembered per (problem, candidates, hints): a model's repeated layers and its
        backward pass lower the same GEMM again and again (building the feature frame is most of the cost)."""
        key = (problem, tuple(c.key for c in cands), tuple(hints))
        scores = self._scores.get(key)
        if scores is None:
            scores = np.asarray(self.ranker.score(_rows(problem, cands, hints), self.device), dtype=np.float64)
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

    def _trusted(self, problem: Problem) -> bool:
        """Whether the model was trained on this kind of problem (op, dtype, layouts): a Triton pick is only
        taken over cuBLAS for kinds it has labels for. Why: int8 labels are all B row-major, while real int8 code
        (torchao, ``F.linear`` weights) runs B column-major, cuBLAS's fast path (the hook kept Triton there and
        ran 0.86x plain)."""
        kinds = (self.metadata.get(RANGES_KEY) or {}).get("kinds")
        if not isinstance(kinds, list):
            return True
        return problem_kind(problem.op, problem.dtype, problem.layout_a, problem.layout_b) in kinds

    def _prune(self, choices: list[Any], kernel_inputs: Any, op_name: str) -> list[Any]:
        s = self.settings
        if self.ranker is None:
            raise _PassThrough(self.disabled or "no_model", "no usable model", warn=False)
        if s.device is None and getattr(kernel_inputs, "device_type", "cuda") != "cuda":
            raise _PassThrough("not_cuda", f"{op_name} on {kernel_inputs.device_type}", warn=False, keep_all=True)
        op = INDUCTOR_OPS.get(op_name)
        if op is None:
            raise _PassThrough("unknown_op", f"unknown GEMM op {op_name!r}")
        kwargs = [ktc.params.to_kwargs() for ktc in choices]
        try:
            cands = [from_template_kwargs(ktc.template.uid, kw) for ktc, kw in zip(choices, kwargs, strict=True)]
        except (ValueError, KeyError) as exc:
            raise _PassThrough("unknown_template", f"{op_name}: {exc}") from None
        hints = [kw.get("hint_override") for kw in kwargs]
        groups: dict[int | None, list[int]] = {}
        for i, hint in enumerate(hints):
            groups.setdefault(hint, []).append(i)
        hinted = any(h is not None for h in groups)
        choosing_hints = hinted and s.hints == "predict"
        deciding = s.policy == "decide" and not hinted
        if len(choices) == 1 or (not deciding and not choosing_hints
                                 and all(len(members) <= s.top_k for members in groups.values())):
            return choices  # nothing to prune: skip the problem and the model

        problem = problem_from_inputs(kernel_inputs, op)
        # an op or dtype the model never trained on is always passed through; sizes only when asked to be careful
        self._check_in_range(problem, sizes=s.min_confidence is not None)
        if problem.dtype == "float32" and _tf32_enabled():
            # labels time float32 with TF32 off (Inductor's default); with TF32 on, cuBLAS and the Triton
            # templates run other instructions and the ranking does not carry over
            raise _PassThrough("tf32", f"{problem}: float32 with TF32 enabled was never measured", warn=False)
        scores = self._score(problem, cands, hints)
        if scores.shape != (len(choices),) or not np.isfinite(scores).all():
            raise ValueError(f"the ranker returned {scores.shape} scores, not {len(choices)} finite ones")

        if deciding:
            is_aten = [c.family == "aten" for c in cands]
            trusted = self._trusted(problem) and not _symbolic_sizes(kernel_inputs)
            chosen = decide_one(scores, is_aten, trusted, s.decide_gap)
            log.debug("gemm-predictor: %s (%s): decided %s of %d", op_name, problem, cands[chosen].key, len(cands))
            return [choices[chosen]]

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
            keep_idx = with_aten_fallback(keep_idx, scores, [c.family == "aten" for c in cands])
        if s.aten_alone_below_us is not None and not hinted:  # scores of other hints' M do not compare with aten's
            ideal = ideal_time_us(problem.b, problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype,
                                  self.device)
            keep_idx = aten_alone_if_small(keep_idx, scores, [c.family == "aten" for c in cands], ideal,
                                           s.aten_alone_below_us)
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
        """The multi-kernel hints worth autotuning (``predictor.hints.choose_hints``: each hint's favourite kernel
        scored at runtime sizes over the hints' span)."""
        from .hints import choose_hints

        hint_values = sorted(h for h in groups if h is not None)
        kernel_at = {h: cands[max(groups[h], key=lambda i: scores[i])] for h in hint_values}
        chosen = set(choose_hints(self.ranker, self.device, problem, kernel_at))
        with self._lock:
            self._stats["hints_considered"] += len(hint_values)
            self._stats["hints_kept"] += len(chosen)
        log.debug("gemm-predictor: %s: autotuning hints %s of %s", problem, sorted(chosen), hint_values)
        return chosen

    def _check_in_range(self, problem: Problem, sizes: bool = True) -> None:
        """Pass a problem through when it lies outside what the model was trained on (if the metadata says)."""
        ranges = self.metadata.get(RANGES_KEY)
        if not isinstance(ranges, dict):
            return
        for name in ("b", "m", "n", "k") if sizes else ():
            bounds = ranges.get(name)
            value = getattr(problem, name)
            if isinstance(bounds, (list, tuple)) and len(bounds) == 2 and not bounds[0] <= value <= bounds[1]:
                raise _PassThrough("out_of_distribution",
                                   f"{problem}: {name}={value} outside the training range {list(bounds)}", warn=False)
        for name, field in (("ops", "op"), ("dtypes", "dtype")):
            allowed = ranges.get(name)
            if isinstance(allowed, list) and getattr(problem, field) not in allowed:
                raise _PassThrough("out_of_distribution",
                                   f"{problem}: {field} {getattr(problem, field)!r} never seen in training", warn=False)


# ops that only re-view a GEMM's output: an epilogue behind them still fuses into the template
_VIEW_OP_NAMES = {"view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "squeeze", "unsqueeze",
                  "alias"}


def _lowering_node() -> Any:
    """The FX node Inductor is lowering now (the GEMM whose choices are being filtered), or None."""
    try:
        from torch._inductor.virtualized import V

        return getattr(V.graph, "current_node", None)
    except Exception:  # no graph being lowered (e.g. a direct call in a test)
        return None


def output_feeds_pointwise(node: Any, depth: int = 3) -> bool:
    """Whether ``node``'s output reaches a pointwise op (directly or through views): an epilogue Inductor
    could fuse into a Triton template."""
    import torch

    if node is None or depth < 0:
        return False
    for user in getattr(node, "users", ()):
        target = getattr(user, "target", None)
        tags = getattr(target, "tags", ()) or ()
        if torch.Tag.pointwise in tags:
            return True
        packet = getattr(target, "overloadpacket", None)
        name = getattr(packet, "__name__", "")
        if name in _VIEW_OP_NAMES and output_feeds_pointwise(user, depth - 1):
            return True
    return False


def _tf32_enabled() -> bool:
    import torch

    return torch.get_float32_matmul_precision() != "highest"


def _rows(problem: Problem, cands: list[Candidate], hints: list[int | None]) -> pd.DataFrame:
    """Ranker rows: the problem's fields (M replaced by each choice's multi-kernel hint) + candidate fields."""
    columns: dict[str, Any] = {name: getattr(problem, name) for name in PROBLEM_FIELDS}
    if any(h is not None for h in hints):
        columns["m"] = [problem.m if h is None else int(h) for h in hints]
    for name in CANDIDATE_FIELDS:
        columns[name] = [getattr(c, name) for c in cands]
    return pd.DataFrame(columns)


@functools.cache
def _choices_class() -> type:
    """The ``InductorChoices`` subclass, built on first use so that importing predictor needs no torch."""
    from torch._inductor.choices import InductorChoices

    class PredictorChoices(InductorChoices):
        """Stock heuristics, with max-autotune GEMM choices pruned by a :class:`GemmPruner`."""

        def __init__(self, pruner: GemmPruner) -> None:
            super().__init__()
            self.pruner = pruner

        def uuid(self) -> str:
            return self.pruner.uuid()

        def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name,
                                       kwarg_overrides=None):
            choices = super()._finalize_template_configs(template_choices, kernel_inputs, templates, op_name,
                                                         kwarg_overrides)
            return self.pruner.filter(choices, kernel_inputs, op_name)

        def override_best_choice(self, best_choice, timings):  # torch >= 2.13 calls this after benchmarking
            try:
                return self.pruner.pick(best_choice, timings)
            except Exception:  # never break a compile: keep Inductor's pick
                log.debug("gemm-predictor: override_best_choice failed", exc_info=True)
                return best_choice

    PredictorChoices.__module__ = __name__
    return PredictorChoices


# ---------------------------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Installed:
    pruner: GemmPruner
    previous_class: Any
    previous_space: Any
    previous_default: Any  # virtualized._choices._default


_STACK: list[_Installed] = []
_LAST: list[GemmPruner] = []  # the most recent pruner, so stats() still answers after uninstall


def _restore_pruner(settings: HookSettings) -> GemmPruner:
    """Unpickling (a compile subprocess, a config snapshot): reuse the installed pruner with these
    settings, or build one that loads its model on first use."""
    for entry in reversed(_STACK):
        if entry.pruner.settings == settings:
            return entry.pruner
    return GemmPruner(settings)


def _drop_cached_choices() -> None:
    """Make every thread build its InductorChoices afresh on its next compile.

    Inductor caches the handler per thread on first use (``virtualized._choices_default``). Deleting it here
    only reaches this thread, but a backward pass is compiled lazily in autograd's device thread, which
    keeps whatever it cached during an earlier compile (measured on the H200: a transformer block's backward
    GEMMs were then never pruned). Moving the cache to a new thread-local key misses in every thread."""
    from torch._inductor import virtualized

    key = virtualized._choices._key
    if hasattr(virtualized.threadlocal, key):
        delattr(virtualized.threadlocal, key)
    _KEY_GENERATION[0] += 1
    virtualized._choices._key = f"__torchinductor_choices_gemm_predictor_{_KEY_GENERATION[0]}"


_KEY_GENERATION = [0]
_PREPROCESSING_REGISTERED = [False]


def _preprocess_with_installed(choices: list[Any]) -> list[Any]:
    """Registered once with Inductor (preprocessing functions cannot be removed one by one): defers to the
    pruner installed now, and is a no-op when none is."""
    return _STACK[-1].pruner.preprocess(choices) if _STACK else choices


def _register_preprocessing() -> None:
    if _PREPROCESSING_REGISTERED[0]:
        return
    from torch._inductor import select_algorithm

    if hasattr(select_algorithm, "add_preprocessing_fn"):  # torch >= 2.10
        select_algorithm.add_preprocessing_fn(_preprocess_with_installed)
        _PREPROCESSING_REGISTERED[0] = True


def _choices_factory(pruner: GemmPruner) -> Any:
    """Inductor's per-thread default for ``V.choices``, building our choices in every thread.

    Setting ``config.inductor_choices_class`` alone is not enough: torch >= 2.13 keeps config assignments
    per thread (ContextVar), so autograd's thread, which compiles the backward pass, would not see it."""

    def make() -> Any:
        from torch._inductor import virtualized

        handler = pruner()
        setattr(virtualized.threadlocal, virtualized._choices._key, handler)
        return handler

    return make


def install(model: str | os.PathLike | None = None, top_k: int = 5, space: str = "default", keep_aten: bool = True,
            min_confidence: float | None = None, hints: str | None = None, *, margin: float | str | None = "auto",
            allow_similar_gpu: bool = True, aten_alone_below_us: float | None = ATEN_ALONE_BELOW_US,
            override_gap: float | None = None, cutlass_top_k: int | None = None, epilogue_templates: int = 0,
            policy: str = "prune", decide_gap: float = DECIDE_MIN_GAP, fallback: str = "aten",
            _device: DeviceInfo | None = None) -> GemmPruner:
    """Make max-autotune benchmark only the predicted top ``top_k`` candidates of every GEMM.

    ``model``: a model folder; None picks the shipped model made for this GPU (``find_model``). A model
    for another GPU, a broken folder or no CUDA device leave compiles untouched, with one warning.
    ``space``: which candidate list Inductor builds (sets ``max_autotune_gemm_search_space``); the
    model should have been trained on it. ``keep_aten``: also keep the best-scored aten/cuBLAS choice,
    the safe fallback, if it is not among the top k; with ``top_k=1, keep_aten=False`` exactly one choice
    survives and Inductor uses it without benchmarking. ``min_confidence`` (score units): when the
    score margin between the #1 and #(k+1) candidate is smaller, keep the top 2k instead; and when the
    model metadata records training ranges (``problem_ranges``) and the problem lies outside them, pass
    all choices through. None trusts the model everywhere. ``margin``: within the top k keep only
    candidates scored at most this far below the favourite; ``"auto"`` (default) uses the margin the model
    was calibrated with on held-out problems (``metadata.json`` ``pruning``), None keeps all k.
    ``allow_similar_gpu``: without a model for this exact GPU, use one made for a GPU of the same
    architecture (same cc, SM count, shared memory; e.g. H200 -> H100 SXM), with one warning.
    ``aten_alone_below_us``: where the model favours aten on a GEMM whose ideal time is below this (us),
    keep aten alone (no benchmark): Inductor's benchmark overstates cuBLAS on small GEMMs and would pick a
    slower Triton kernel beside it; None turns this off. ``override_gap`` (torch >= 2.13, which has
    ``InductorChoices.override_best_choice``): after Inductor benchmarks the kept choices, use the model's
    favourite instead of the benchmark's pick when the pick scores more than this below it; None (default)
    always keeps the benchmark's pick. Not measured on a GPU yet (the GPU here runs torch 2.11).
    ``cutlass_top_k`` (with CUTLASS among ``max_autotune_gemm_backends``): keep only this many CUTLASS kernels
    (all their swizzles), the analytically best (``predictor.cutlass``) rather than Inductor's first N; None
    (default) leaves CUTLASS choices alone. Not measured on a GPU yet. ``epilogue_templates``: when the GEMM's
    output feeds a pointwise op (bias, activation, residual add; read off the FX graph being lowered), also keep
    this many best-scored Triton mm templates, so Inductor's epilogue-fusion benchmark can still fuse that op
    into a template (labels time bare GEMMs and cannot see the saving); 0 (default) keeps none. Off by default
    until measured on a GPU: Inductor's benchmark overstates cuBLAS on small GEMMs (``aten_alone_below_us``), so
    a template kept beside it may also be picked unfused where it is slower. ``hints``: with ``config.multi_kernel_hints``
    set, None keeps the top k of every hint group (scored with M = the hint); ``"predict"`` keeps the top k
    only for the hints worth autotuning (``predictor.hints``: at most 3, each adding a kernel the model expects
    to win somewhere over the hints' span) and the favourite alone for the others (Inductor needs a Triton
    kernel for every hint in ``config.multi_kernel_hints``; which hints exist is that global setting).
    ``policy``: ``"prune"`` keeps the top k (and the rules above) for Inductor to benchmark; ``"decide"`` keeps
    exactly one choice per GEMM, used without any benchmark: the model's favourite where it beats the best aten
    choice by ``decide_gap`` score units on a kind of problem it was trained on, else aten (``predictor.policy``;
    ``predictor.compile`` uses it). ``fallback``: what a GEMM keeps when the hook cannot rank it (an op or
    template it does not know, no model for this GPU, any error): ``"aten"`` (default) the aten choice alone, as
    plain ``torch.compile`` runs it; ``"full"`` Inductor's whole list (stock max-autotune). ``_device``: tests
    only, pretend this is the GPU (and prune GEMMs of any device type).

    Returns the pruner (``.stats()``, ``.uuid()``); ``uninstall()`` restores the previous settings."""
    settings = HookSettings(model=None if model is None else str(model), top_k=top_k, space=space,
                            keep_aten=keep_aten, min_confidence=min_confidence, hints=hints, device=_device,
                            margin=margin, allow_similar_gpu=allow_similar_gpu,
                            aten_alone_below_us=aten_alone_below_us, override_gap=override_gap,
                            cutlass_top_k=cutlass_top_k, epilogue_templates=epilogue_templates,
                            policy=policy, decide_gap=decide_gap, fallback=fallback)
    return install_settings(settings)


def install_settings(settings: HookSettings) -> GemmPruner:
    """``install()`` from a ready :class:`HookSettings`."""
    pruner = GemmPruner(settings).load()
    from torch._inductor import config

    from torch._inductor import virtualized

    _STACK.append(_Installed(pruner, config.inductor_choices_class, config.max_autotune_gemm_search_space,
                             virtualized._choices._default))
    virtualized._choices._default = _choices_factory(pruner)
    _register_preprocessing()
    _LAST[:] = [pruner]
    config.inductor_choices_class = pruner
    config.max_autotune_gemm_search_space = SEARCH_SPACE[settings.space]
    _drop_cached_choices()
    return pruner


def uninstall() -> None:
    """Undo the most recent ``install()`` (a no-op when none is active)."""
    if not _STACK:
        return
    entry = _STACK.pop()
    from torch._inductor import config

    config.inductor_choices_class = entry.previous_class
    config.max_autotune_gemm_search_space = entry.previous_space
    from torch._inductor import virtualized

    virtualized._choices._default = entry.previous_default
    _drop_cached_choices()


@contextlib.contextmanager
def pruning(model: str | os.PathLike | None = None, top_k: int = 5, space: str = "default", keep_aten: bool = True,
            min_confidence: float | None = None, hints: str | None = None, *, margin: float | str | None = "auto",
            allow_similar_gpu: bool = True, aten_alone_below_us: float | None = ATEN_ALONE_BELOW_US,
            override_gap: float | None = None, cutlass_top_k: int | None = None, epilogue_templates: int = 0,
            policy: str = "prune", decide_gap: float = DECIDE_MIN_GAP, fallback: str = "aten",
            _device: DeviceInfo | None = None) -> Iterator[GemmPruner]:
    """``with pruning(top_k=3): torch.compile(...)(x)`` — ``install`` for the block, ``uninstall`` after."""
    pruner = install(model, top_k, space, keep_aten, min_confidence, hints, margin=margin,
                     allow_similar_gpu=allow_similar_gpu, aten_alone_below_us=aten_alone_below_us,
                     override_gap=override_gap, cutlass_top_k=cutlass_top_k,
                     epilogue_templates=epilogue_templates, policy=policy, decide_gap=decide_gap,
                     fallback=fallback, _device=_device)
    try:
        yield pruner
    finally:
        uninstall()


def stats() -> dict[str, Any]:
    """The counters of the most recently installed pruner (see ``GemmPruner.stats``); zeros if none."""
    if _LAST:
        return _LAST[0].stats()
    return {**{key: 0 for key in _STAT_KEYS}, "fallbacks": {}, "filter_ms_max": 0.0, "filter_ms_median": 0.0}
