"""``install`` / ``uninstall`` / ``pruning`` / ``stats``: a :class:`~predictor.runtime.choices.pruner.GemmPruner` put
into Inductor for every compile of the process (stock max-autotune pruned), in every compiling thread
(``choices.installed``), and taken out again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from ..artifacts.model_folder import load_runtime_model
from ..core.device import DeviceInfo
from .choices import installed
from .choices.counters import empty_stats
from .choices.policy import ATEN_ALONE_BELOW_US, DECIDE_MIN_GAP
from .choices.pruner import SEARCH_SPACE, GemmPruner
from .choices.settings import HookSettings


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
    pruner = GemmPruner(settings, load=load_runtime_model).load()
    installed.push(pruner, SEARCH_SPACE[settings.space])
    return pruner


def uninstall() -> None:
    """Undo the most recent ``install()`` (or ``predictor.compile``'s process-wide hook); a no-op when none is
    active."""
    installed.pop()


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
    """The counters of the most recently installed pruner (see ``GemmPruner.stats``); zeros if none. ``model``: the
    ranker's folder; ``tables``: per kind of per-GPU table read in this process (``gemv-blocks``, ``few-rows``,
    ``grouped-mm``), the file that decided, whether it is this GPU's own or borrowed, or none (plain's choices)."""
    from ..artifacts.roots import tables_decided
    from .choices import feedback

    if installed._LAST:
        # which model decided (a local refit or the shipped one), which GPU's file each per-GPU table came from,
        # and what the tuned mode recorded
        last = installed._LAST[0]
        model = None if last.model_path is None else str(last.model_path)
        ranker = ("none (plain torch.compile's choices)" if model is None else
                  f"{model} (borrowed from {last.model.borrowed_from}: allow_similar_gpu)" if last.model.borrowed_from
                  else f"{model} (this GPU's)")
        return {**last.stats(), "model": model, "tables": {"ranker": ranker, **tables_decided(
            last.settings.allow_similar_gpu)}, "labels": feedback.stats()}
    return {**empty_stats(), "model": None, "tables": {}, "labels": feedback.stats()}
