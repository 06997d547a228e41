"""``install`` / ``uninstall`` / ``pruning`` / ``stats``: putting a :class:`~predictor.runtime.hook.GemmPruner` into
Inductor, in every compiling thread, and taking it out again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from ..device import DeviceInfo
from .hook import _STAT_KEYS, SEARCH_SPACE, GemmPruner
from .policy import ATEN_ALONE_BELOW_US, DECIDE_MIN_GAP
from .settings import HookSettings


@dataclasses.dataclass
class _Installed:
    pruner: GemmPruner
    previous_class: Any
    previous_space: Any
    previous_default: Any  # virtualized._choices._default


_STACK: list[_Installed] = []
_LAST: list[GemmPruner] = []  # the most recent pruner, so stats() still answers after uninstall


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
    (all their swizzles), the analytically best (``predictor.runtime.cutlass``) rather than Inductor's first N; None
    (default) leaves CUTLASS choices alone. Not measured on a GPU yet. ``epilogue_templates``: when the GEMM's
    output feeds a pointwise op (bias, activation, residual add; read off the FX graph being lowered), also keep
    this many best-scored Triton mm templates, so Inductor's epilogue-fusion benchmark can still fuse that op
    into a template (labels time bare GEMMs and cannot see the saving); 0 (default) keeps none. Off by default
    until measured on a GPU: Inductor's benchmark overstates cuBLAS on small GEMMs (``aten_alone_below_us``), so
    a template kept beside it may also be picked unfused where it is slower. ``hints``: with ``config.multi_kernel_hints``
    set, None keeps the top k of every hint group (scored with M = the hint); ``"predict"`` keeps the top k
    only for the hints worth autotuning (``predictor.runtime.hints``: at most 3, each adding a kernel the model expects
    to win somewhere over the hints' span) and the favourite alone for the others (Inductor needs a Triton
    kernel for every hint in ``config.multi_kernel_hints``; which hints exist is that global setting).
    ``policy``: ``"prune"`` keeps the top k (and the rules above) for Inductor to benchmark; ``"decide"`` keeps
    exactly one choice per GEMM, used without any benchmark: the model's favourite non-aten choice where its score
    minus the best aten choice's is at least ``decide_gap`` (negative: it may trail) on a kind of problem it was
    trained on, else aten (``predictor.runtime.policy``;
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
    from torch._inductor import config, virtualized

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
def pruning(model: str | os.PathLike | None = None, **options: Any) -> Iterator[GemmPruner]:
    """``with pruning(top_k=3): torch.compile(...)(x)`` — ``install(model, **options)`` for the block, ``uninstall``
    after; the options are ``install()``'s."""
    pruner = install(model, **options)
    try:
        yield pruner
    finally:
        uninstall()


def stats() -> dict[str, Any]:
    """The counters of the most recently installed pruner (see ``GemmPruner.stats``); zeros if none."""
    if _LAST:
        return _LAST[0].stats()
    return {**{key: 0 for key in _STAT_KEYS}, "fallbacks": {}, "filter_ms_max": 0.0, "filter_ms_median": 0.0}
