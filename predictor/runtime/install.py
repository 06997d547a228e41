"""``install`` / ``uninstall`` / ``pruning`` / ``stats``: putting a :class:`~predictor.runtime.choices.pruner.GemmPruner` into
Inductor, in every compiling thread, and taking it out again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from ..core.device import DeviceInfo
from .choices.counters import empty_stats
from .choices.pruner import SEARCH_SPACE, GemmPruner
from .choices.installed import _LAST, _STACK, _Installed
from .choices.policy import ATEN_ALONE_BELOW_US, DECIDE_MIN_GAP
from .choices.settings import HookSettings


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
    """Make max-autotune benchmark only the ``top_k`` candidates the model ranks first for every GEMM.

    Anything the hook cannot handle (no CUDA device, a model for another GPU, an unknown op, any error) leaves
    that GEMM as ``fallback`` says, with one warning: a compile never fails because of the hook.

    Args:
        model: a model folder; None picks the shipped model made for this GPU (``find_model``).
        top_k: candidates kept per GEMM for Inductor to benchmark.
        space: the candidate list Inductor builds (``max_autotune_gemm_search_space``); match the model's.
        keep_aten: also keep the best-scored aten (cuBLAS) choice, the safe fallback.
        min_confidence: in score units (the ranker's output; higher is faster), keep 2k when #1 leads #(k+1) by
            less, and pass everything through outside the model's training ranges; None trusts the model.
        margin: keep only candidates within this score of the favourite; "auto" uses the margin calibrated on
            held-out problems (``metadata.json`` ``pruning``); None keeps all k.
        allow_similar_gpu: without a model for this exact GPU, use one for the same architecture (cc, SM count,
            shared memory), with one warning.
        aten_alone_below_us: keep aten alone where the model favours it and the GEMM's ideal time is below this;
            Inductor's benchmark overstates cuBLAS on small GEMMs and would pick a slower Triton kernel beside it.
        override_gap: torch >= 2.13 only; replace the benchmark's pick by the model's favourite when the pick
            scores more than this below it. None keeps the pick. Not yet timed on a GPU.
        cutlass_top_k: keep only this many CUTLASS kernels, the analytically best (``runtime.cutlass``).
        epilogue_templates: where the output feeds a pointwise op, also keep this many Triton templates so the
            op can be fused into one (labels time bare GEMMs and cannot see that saving). Off until timed.
        hints: with ``config.multi_kernel_hints``, "predict" autotunes only the hints the model expects to win
            (``runtime.hints``); None autotunes every hint group.
        policy: "prune" keeps the top k for Inductor to benchmark; "decide" keeps one choice per GEMM with no
            benchmark (``runtime.policy``; what ``predictor.compile`` uses); "tune" decides, then keeps the decided
            kind's top k (``policy.tuned_choices``; ``predictor.compile(tune=k)``). "decide" and "tune" ignore
            keep_aten, margin and aten_alone_below_us.
        decide_gap: "decide" and "tune" take the model's favourite Triton choice when its score minus aten's is at
            least this (negative: it may trail), else aten.
        fallback: what an unrankable GEMM keeps: "aten" (as plain ``torch.compile``) or "full" (stock
            max-autotune).
        _device: tests only; pretend this is the GPU.

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
    from .choices import feedback

    if _LAST:
        # which model decided (a local refit or the shipped one), and what the tuned mode recorded
        return {**_LAST[0].stats(), "model": None if _LAST[0].model_path is None else str(_LAST[0].model_path),
                "labels": feedback.stats()}
    return {**empty_stats(), "model": None, "labels": feedback.stats()}
