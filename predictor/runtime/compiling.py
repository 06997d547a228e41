"""``predictor.compile``: the one recommended call — ``torch.compile`` with the settings that pay.

What it sets, and why (measured on real models: docs/benchmarks/zoo, "Attribution"):
- The hook with ``policy="decide"``: every GEMM gets exactly one choice, used without any benchmark — the model's
  favourite Triton/decompose-K kernel unless cuBLAS leads it by more than 2.5 score units (``policy.DECIDE_MIN_GAP``
  says why near ties go to Triton: measured in whole steps; few rows with a long K keep cuBLAS unless Triton leads by
  2.0, ``policy.SMALL_M_LONG_K``), else cuBLAS. Full
  max-autotune benchmarks 20–30 kernels per GEMM (minutes of compile) and its benchmark overstates cuBLAS on
  small GEMMs, so it often picks slower Triton kernels: most of its inference losses.
- ``max_autotune_gemm=True`` only so that Inductor builds the Triton candidates the hook may pick; nothing is
  benchmarked when one choice is left. Pointwise/reduction autotuning (``max_autotune_pointwise``,
  ``coordinate_descent_tuning``) stays off: it costs compile time per kernel.
- Convolutions and CPU GEMMs keep their plain-``torch.compile`` backends (aten): the hook cannot rank them. That
  includes 1x1 convolutions, which ``max_autotune_gemm`` would otherwise turn into GEMMs (``conv_lowering``).
- CUDA graph trees (``triton.cudagraphs``) for training graphs only (``cudagraphs="auto"``). A training step
  launched eagerly is host-bound: on the H200 zoo the trees alone made three training steps 1.25-2.4x faster,
  the whole of full max-autotune's training win. For inference graphs they are left off: a model served under
  one CUDA graph of the user's own gains nothing from them, and the trees' own per-call work made inference
  steps 0.77-0.84x as fast as plain ``torch.compile`` replayed in one graph (docs/benchmarks/zoo).
- Gradient accumulation under those trees: a backward's gradient output lives in the trees' memory pool, and
  when ``.grad`` was empty autograd keeps that very tensor as ``.grad``; the next forward overwrites the pool,
  so a second backward without zeroing fails ("accessing tensor output of CUDAGraphs that has been overwritten",
  pytorch/pytorch#169545) under ``mode="max-autotune"`` too. ``predictor.compile`` gives such gradients their
  own memory before each forward of a module (a read of each parameter's ``.grad``; a copy only when accumulating).
"""

from __future__ import annotations

import os
from typing import Any

from . import installing
from .conv_lowering import convolutions_as_plain
from .policy import DECIDE_MIN_GAP
from .settings import HookSettings

# Inductor options predictor.compile passes to torch.compile (a user's ``options`` win over these).
RECOMMENDED_OPTIONS: dict[str, Any] = {
    "max_autotune_gemm": True,
    "max_autotune_gemm_backends": "ATEN,TRITON",  # no CPU C++ GEMM templates: on a CPU, plain's choices
    "max_autotune_conv_backends": "ATEN",  # the hook cannot rank convolution templates; cuDNN as plain runs it
}


def recommended_settings(model: str | os.PathLike | None = None, decide_gap: float = DECIDE_MIN_GAP,
                         fallback: str = "aten") -> HookSettings:
    """The hook settings ``predictor.compile`` installs: one choice per GEMM, decided by the model."""
    return HookSettings(model=None if model is None else str(model), top_k=1, keep_aten=False, margin=None,
                             aten_alone_below_us=None, policy="decide", decide_gap=decide_gap, fallback=fallback)


def _graph_needs_backward(gm: Any, example_inputs: Any) -> bool:
    """Whether AOTAutograd will build a backward for this Dynamo graph: grad mode on and some input or
    parameter requires grad (what decides between Inductor's inference and training compiles)."""
    import torch

    if not torch.is_grad_enabled():
        return False
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return True
    return any(p.requires_grad for p in gm.parameters())


def _inductor_backend(options: dict[str, Any], cudagraphs: bool | str) -> Any:
    """torch.compile's own Inductor backend object with ``options``, deciding CUDA graph trees per graph.

    A subclass of ``torch._TorchCompileInductorWrapper`` (what ``torch.compile`` builds for ``backend="inductor"``)
    so that Dynamo treats it as Inductor (cache keys, ``torch._dynamo.reset`` resetting the trees, the CUPTI
    settings it makes when CUDA graphs may run); only the ``triton.cudagraphs`` value differs per graph."""
    import torch
    from torch._inductor.compile_fx import compile_fx

    class PredictorInductor(torch._TorchCompileInductorWrapper):
        def __call__(self, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
            trees = _graph_needs_backward(model_, inputs_) if cudagraphs == "auto" else bool(cudagraphs)
            patches = {**self.config, **(kwargs.get("config_patches") or {}), "triton.cudagraphs": trees}
            # compile_fx re-applies config_patches around the backward pass, which is compiled later, lazily;
            # convolutions are lowered in the forward graph, here, as plain lowers them (conv_lowering says why)
            with convolutions_as_plain():
                return compile_fx(model_, inputs_, config_patches=patches)

    return PredictorInductor(None, {**options, "triton.cudagraphs": cudagraphs is not False}, None)


def compile(model: Any, *, cudagraphs: bool | str = "auto", predictor_model: str | os.PathLike | None = None,
            decide_gap: float = DECIDE_MIN_GAP, fallback: str = "aten", options: dict[str, Any] | None = None,
            **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(model)`` with gemm-predictor choosing every GEMM's kernel; compile time at plain's level.

    ``cudagraphs``: CUDA graph trees (``triton.cudagraphs``, what ``mode="max-autotune"`` turns on): ``"auto"``
    (default) for graphs that build a backward (training) and not for inference graphs, ``True`` for every graph
    (an inference server calling the model directly, step by step), ``False`` for none.
    ``predictor_model``: a model folder (default: the shipped one for this GPU; without one, every GEMM runs
    cuBLAS, as under plain ``torch.compile``, with one warning). ``decide_gap``: how far (score units) the
    model's favourite Triton kernel must lead cuBLAS to be taken; negative: how far it may trail
    (``predictor.runtime.policy.DECIDE_MIN_GAP``, -2.5; int8/fp8 GEMMs never below 0.0, few rows with a long K
    never below 2.0).
    ``fallback``: what a GEMM the hook cannot rank gets (``"aten"``, plain's choice; ``"full"``, stock
    max-autotune). ``options``: extra Inductor options, applied over the recommended ones. Anything else goes
    to ``torch.compile`` (``dynamic``, ``fullgraph``; the backend is Inductor's, ``backend=`` is refused).

    The hook is installed process-wide (``predictor.stats()`` counts its decisions; ``predictor.uninstall()``
    removes it); compiling several models with the same settings shares one hook."""
    for refused in ("mode", "backend"):
        if refused in torch_compile_kwargs:
            raise ValueError(f"predictor.compile sets its own Inductor backend and options; pass options=..., "
                             f"not {refused}=")
    if cudagraphs not in ("auto", True, False):
        raise ValueError(f"cudagraphs must be 'auto', True or False, got {cudagraphs!r}")
    merged = {**RECOMMENDED_OPTIONS, **(options or {})}
    if "triton.cudagraphs" in merged:
        cudagraphs = bool(merged.pop("triton.cudagraphs"))
    _check_options(merged)  # before installing anything: a refused call leaves no hook behind
    settings = recommended_settings(predictor_model, decide_gap, fallback)
    if not (installing._STACK and installing._STACK[-1].pruner.settings == settings):
        installing.install_settings(settings)
    return compile_without_hook(model, merged, cudagraphs, **torch_compile_kwargs)


def compile_without_hook(model: Any, options: dict[str, Any], cudagraphs: bool | str = "auto",
                         **torch_compile_kwargs: Any) -> Any:
    """What ``predictor.compile`` compiles with, the hook aside: Inductor with ``options``, CUDA graph trees decided
    per graph, and the accumulated-gradient guard on a module. Whatever chooses the GEMMs is the caller's (the
    installed hook, or a lookup table in ``benchmarks/zoo/in_program.py``)."""
    import torch

    compiled = torch.compile(model, backend=_inductor_backend(options, cudagraphs), **torch_compile_kwargs)
    if cudagraphs is not False and isinstance(compiled, torch.nn.Module):
        compiled.register_forward_pre_hook(AccumulatedGradGuard())
    return compiled


_OWNED = "_gemm_predictor_owned_grad"


class AccumulatedGradGuard:
    """Forward pre-hook: before a forward with grad on, move every gradient autograd took over from a backward's
    output into memory of its own (once per accumulation; later backwards add into it in place), so that the
    forward's CUDA graph replay cannot overwrite a gradient still being accumulated.

    Per call it reads every parameter's ``.grad`` from a list taken once, at the first call (walking
    ``module.parameters()`` would cost ~0.7 ms per call for 300 parameters; the list, tens of us). Every
    parameter is in it, frozen ones too (one unfrozen later is guarded), and none stands for the others: the
    first one may get no gradient (unused, frozen) while the rest accumulate. A parameter added to the module
    after the first call is not guarded."""

    def __init__(self) -> None:
        self.params: list | None = None

    def __call__(self, module: Any, _args: Any) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        if self.params is None:
            self.params = list(module.parameters())
        if not any([p.grad is not None for p in self.params]):
            return
        for param in self.params:
            grad = param.grad
            if grad is not None and not getattr(grad, _OWNED, False):
                owned = grad.clone()
                setattr(owned, _OWNED, True)
                param.grad = owned


def _check_options(options: dict[str, Any]) -> None:
    """Refuse an unknown Inductor option now, in one line, rather than at the first call."""
    from torch._inductor import config

    unknown = [key for key in options if key not in config._config]  # noqa: SLF001 -- Inductor's own key list
    if unknown:
        raise ValueError(f"unknown Inductor option(s) {', '.join(map(repr, unknown))} in predictor.compile(options=...)")
