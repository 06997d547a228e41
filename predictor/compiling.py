"""``predictor.compile``: the one recommended call — ``torch.compile`` with the settings that pay.

What it sets, and why (measured on real models: docs/benchmarks/zoo, "Attribution"):
- The hook with ``policy="decide"``: every GEMM gets exactly one choice, used without any benchmark — cuBLAS,
  or the Triton/decompose-K kernel the model is confident beats it. Full max-autotune benchmarks 20–30 kernels
  per GEMM (minutes of compile) and its benchmark overstates cuBLAS on small GEMMs, so it often picks slower
  Triton kernels: most of its inference losses.
- ``max_autotune_gemm=True`` only so that Inductor builds the Triton candidates the hook may pick; nothing is
  benchmarked when one choice is left. Pointwise/reduction autotuning (``max_autotune_pointwise``,
  ``coordinate_descent_tuning``) stays off: it costs compile time per kernel.
- Convolutions and CPU GEMMs keep their plain-``torch.compile`` backends (aten): the hook cannot rank them.
- ``triton.cudagraphs`` (CUDA graph trees, as ``mode="max-autotune"`` and ``"reduce-overhead"`` set): a step
  launched eagerly is often host-bound; replaying the whole graph removes the launches.
"""

from __future__ import annotations

import os
from typing import Any

from . import hook
from .policy import DECIDE_MIN_GAP

# Inductor options predictor.compile passes to torch.compile (a user's ``options`` win over these).
RECOMMENDED_OPTIONS: dict[str, Any] = {
    "max_autotune_gemm": True,
    "max_autotune_gemm_backends": "ATEN,TRITON",  # no CPU C++ GEMM templates: on a CPU, plain's choices
    "max_autotune_conv_backends": "ATEN",  # the hook cannot rank convolution templates; cuDNN as plain runs it
}


def recommended_settings(model: str | os.PathLike | None = None, decide_gap: float = DECIDE_MIN_GAP,
                         fallback: str = "aten") -> hook.HookSettings:
    """The hook settings ``predictor.compile`` installs: one choice per GEMM, decided by the model."""
    return hook.HookSettings(model=None if model is None else str(model), top_k=1, keep_aten=False, margin=None,
                             aten_alone_below_us=None, policy="decide", decide_gap=decide_gap, fallback=fallback)


def compile(model: Any, *, cudagraphs: bool = True, predictor_model: str | os.PathLike | None = None,
            decide_gap: float = DECIDE_MIN_GAP, fallback: str = "aten", options: dict[str, Any] | None = None,
            **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(model)`` with gemm-predictor choosing every GEMM's kernel; compile time at plain's level.

    ``cudagraphs``: CUDA graph trees (``triton.cudagraphs``), as ``mode="max-autotune"`` uses; turn off for a
    model whose inputs change shape every call or that you capture in your own CUDA graph.
    ``predictor_model``: a model folder (default: the shipped one for this GPU; without one, every GEMM runs
    cuBLAS, as under plain ``torch.compile``, with one warning). ``decide_gap``: how far (score units) the
    model's favourite Triton kernel must lead cuBLAS to be taken (``predictor.policy.DECIDE_MIN_GAP``).
    ``fallback``: what a GEMM the hook cannot rank gets (``"aten"``, plain's choice; ``"full"``, stock
    max-autotune). ``options``: extra Inductor options, applied over the recommended ones. Anything else goes
    to ``torch.compile`` (``dynamic``, ``fullgraph``, ``backend`` must stay "inductor").

    The hook is installed process-wide (``predictor.stats()`` counts its decisions; ``predictor.uninstall()``
    removes it); compiling several models with the same settings shares one hook."""
    import torch

    if "mode" in torch_compile_kwargs:
        raise ValueError("predictor.compile sets its own Inductor options; pass options=..., not mode=")
    if torch_compile_kwargs.get("backend", "inductor") != "inductor":
        raise ValueError(f"predictor.compile needs the inductor backend, got backend={torch_compile_kwargs['backend']!r}")
    settings = recommended_settings(predictor_model, decide_gap, fallback)
    if not (hook._STACK and hook._STACK[-1].pruner.settings == settings):
        hook.install_settings(settings)
    merged = {**RECOMMENDED_OPTIONS, "triton.cudagraphs": bool(cudagraphs), **(options or {})}
    return torch.compile(model, options=merged, **torch_compile_kwargs)
