"""``predictor.compile``: the one recommended call — ``torch.compile`` with the settings that pay.

What it sets, and why (the figures, with the commands that reproduce them: docs/benchmarks/zoo):
- The hook with ``policy="decide"``: every GEMM gets exactly one choice, used without any benchmark (the model's
  favourite Triton/decompose-K kernel unless cuBLAS leads it, ``policy.DECIDE_MIN_GAP``). Benchmarking 20-30
  kernels per GEMM costs minutes of compile, and Inductor's benchmark overstates cuBLAS on small GEMMs.
- ``max_autotune_gemm=True`` only so that Inductor builds the Triton candidates the hook picks from; nothing is
  benchmarked when one choice is left. Pointwise tuning and coordinate descent stay off: they cost compile time
  per kernel.
- GEMVs (one row or column, e.g. batch-1 decode) become a fused Triton reduction where the GEMV rule says so
  (``gemv``): the win coordinate descent finds there, without its search.
- A dynamic graph's pointwise and reduction kernels are written for large sizes, pointwise ones on the heuristic's
  one config (``dynamic_hints``): Inductor would size them for the first size called and pick among candidates
  that all tie there.
- Patch-embedding convolutions over an RGB image (ViT and Swin stems) become the GEMM they are (``patchify``):
  cuDNN pads the 3 channels to 8 and runs them several times slower than the GEMM.
- GEMMs whose short reduction is not a multiple of 8 (token mixing, patch-14 stems) multiply zero-padded operands
  (``pad_k``): unpadded, cuBLAS and Triton run their unaligned kernels, up to 2.7x slower.
- Other convolutions are lowered as plain ``torch.compile`` lowers them (``conv_lowering``): the hook cannot rank them.
  Grouped GEMMs (mixture-of-experts layers) get one Triton config per band of rows per expert, or aten
  (``grouped_mm``): ``max_autotune_gemm`` alone would benchmark ~40 configs each.
- CUDA graph trees on every graph, as ``mode="reduce-overhead"`` has them: a model called step by step from
  Python is otherwise launch-bound. Inside a caller's own CUDA-graph capture the compiled kernels run without the
  trees, so the caller's graph captures them (``_capture_aware_cudagraphify``; forward graphs only: a backward is
  compiled later, outside this call, with the stock trees).
- Gradient accumulation under the trees: a backward's gradient output lives in the trees' memory pool, and when
  ``.grad`` was empty autograd keeps that very tensor as ``.grad``; the next forward overwrites the pool, so a
  second backward without zeroing fails (pytorch/pytorch#169545, under ``mode="max-autotune"`` too).
  ``AccumulatedGradGuard`` gives such gradients memory of their own before each forward of a module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Iterator
from typing import Any, Callable

from ..artifacts.metadata import METADATA_FILE
from ..artifacts.model_folder import load_runtime_model
from . import registry
from .choices import installed
from .choices.policy import DECIDE_MIN_GAP
from .choices.pruner import SEARCH_SPACE, GemmPruner
from .choices.settings import HookSettings
from .grad_guard import AccumulatedGradGuard
from .lowerings.base import CompileFlags
from .lowerings import gemv_table
from .lowerings.gemv_table import GemvKernel, choose_from_table
from .lowerings.tables import wrapped_attribute
from ..spaces.configs import warn_if_untested_torch

log = logging.getLogger(__name__)

# Inductor options predictor.compile passes to torch.compile (a user's ``options`` win over these).
RECOMMENDED_OPTIONS: dict[str, Any] = {
    "max_autotune_gemm": True,
    "max_autotune_gemm_backends": "ATEN,TRITON",  # no CPU C++ GEMM templates: on a CPU, plain's choices
    "max_autotune_conv_backends": "ATEN",  # the hook cannot rank convolution templates; cuDNN as plain runs it
}


def recommended_settings(model: str | os.PathLike | None = None, decide_gap: float = DECIDE_MIN_GAP,
                         fallback: str = "aten", tune: int | None = None,
                         allow_similar_gpu: bool = True) -> HookSettings:
    """The hook settings ``predictor.compile`` installs: one choice per GEMM, decided by the model; with ``tune=K``
    the same decision, then the decided kind's top K for Inductor's own benchmark to pick from: cuBLAS alone where
    the model chose cuBLAS, its K best Triton kernels where it chose Triton (``policy.tuned_choices``)."""
    model = None if model is None else str(model)
    if tune is not None:
        return HookSettings(model=model, top_k=tune, keep_aten=False, margin=None, aten_alone_below_us=None,
                            policy="tune", decide_gap=decide_gap, fallback=fallback,
                            allow_similar_gpu=allow_similar_gpu)
    return HookSettings(model=model, top_k=1, keep_aten=False, margin=None, aten_alone_below_us=None,
                        policy="decide", decide_gap=decide_gap, fallback=fallback, allow_similar_gpu=allow_similar_gpu)


CUDAGRAPHS = (True, "training", False)
_PRUNERS: dict[HookSettings, GemmPruner] = {}  # one per settings compiled with: each keeps one model


def lowerings_digest(allow_similar_gpu: bool = True) -> str:
    """``registry.digest`` of the lowerings registered when asked (a pruner pickles this function by name)."""
    return registry.digest(allow_similar_gpu=allow_similar_gpu)


def pruner_for(settings: HookSettings) -> GemmPruner:
    """The pruner every ``predictor.compile`` of these settings uses, made (and its model loaded) at the first:
    compiles of the same settings share it, so alternating settings keep one pruner (one model) each, until
    ``predictor.uninstall()`` (``prepare``)."""
    pruner = _PRUNERS.get(settings)
    if pruner is None:
        pruner = _PRUNERS.setdefault(settings, GemmPruner(settings, load=load_runtime_model,
                                                          lowerings_digest=lowerings_digest))
    return pruner.load()


def _active(pruner: GemmPruner | None) -> contextlib.AbstractContextManager[None]:
    """``pruner`` installed while its compiled object compiles (Inductor consults the choices then, in the forward's
    compile and in a backward's at its first call): a compile of another object, with other settings, in between
    changes nothing for it."""
    if pruner is None:
        return contextlib.nullcontext()
    return installed.active(pruner, SEARCH_SPACE[pruner.settings.space])


def _graph_needs_backward(gm: Any, example_inputs: Any) -> bool:
    """Whether AOTAutograd will build a backward for this Dynamo graph: grad mode on and some input or
    parameter requires grad (what decides between Inductor's inference and training compiles)."""
    import torch

    if not torch.is_grad_enabled():
        return False
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return True
    return any(p.requires_grad for p in gm.parameters())


@contextlib.contextmanager
def _capture_aware_cudagraphify() -> Iterator[None]:
    """While active, every graph Inductor wraps in CUDA graph trees also keeps its plain kernels: a call made while
    the current stream is being captured (a caller's ``torch.cuda.graph``) runs them, so they land in the caller's
    graph, where the trees would try to record a graph of their own inside the capture."""
    import torch
    from torch._inductor import compile_fx

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def cudagraphify(model: Any, *args: Any, **kwargs: Any) -> Any:
            trees = original(model, *args, **kwargs)

            def run(inputs: Any) -> Any:
                return model(inputs) if torch.cuda.is_current_stream_capturing() else trees(inputs)
            return run
        return cudagraphify

    with wrapped_attribute(compile_fx, "cudagraphify", wrap, "predictor_capture_aware"):
        yield


def _inductor_backend(options: dict[str, Any], cudagraphs: bool | str,
                      on_training_graph: Callable[[], None] | None = None, by_size_range: bool = False,
                      patchify: bool = True, pad_k: bool = True, pruner: GemmPruner | None = None) -> Any:
    """torch.compile's own Inductor backend object with ``options``, deciding CUDA graph trees per graph, and
    ``pruner`` (None: whatever is installed) choosing the GEMMs of every graph it compiles.

    A subclass of ``torch._TorchCompileInductorWrapper`` (what ``torch.compile`` builds for ``backend="inductor"``)
    so that Dynamo treats it as Inductor (cache keys, ``torch._dynamo.reset`` resetting the trees, the CUPTI
    settings it makes when CUDA graphs may run); only the ``triton.cudagraphs`` value differs per graph."""
    import torch
    from torch._inductor.compile_fx import compile_fx

    class PredictorInductor(torch._TorchCompileInductorWrapper):
        def __call__(self, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
            backward = _graph_needs_backward(model_, inputs_)
            trees = backward if cudagraphs == "training" else bool(cudagraphs)
            if trees and backward and on_training_graph is not None:
                on_training_graph()
            patches = {**self.config, **(kwargs.get("config_patches") or {}), "triton.cudagraphs": trees}
            _note_fused_layers(model_)
            if warn_if_untested_torch():  # no rewrite of what Inductor sees was checked against this torch
                with _active(pruner):
                    return compile_fx(model_, inputs_, config_patches=patches)
            # decompositions apply here, where AOTAutograd traces the forward and backward together; lowering and
            # codegen happen in compile_fx's inner compile, which runs for the backward later, at its first call,
            # outside this call: inner_compile carries their patches there (config_patches, compile_fx re-applies)
            # a symbolic M: one kernel per range of it (opt-in), or else the few-rows kernel up to 16 rows
            flags = CompileFlags(patchify=patchify, pad_k=pad_k, size_ranges=by_size_range,
                                 gemv_top=gemv_top(pruner.settings if pruner is not None else None),
                                 allow_similar_gpu=pruner is None or pruner.settings.allow_similar_gpu)
            with _active(pruner), registry.entered("trace", flags), _capture_aware_cudagraphify(), \
                    _without_autograd_cache(not (patchify and pad_k)):
                return compile_fx(model_, inputs_, inner_compile=_inner_compile_as_decided(flags, pruner),
                                  config_patches=patches)

    return PredictorInductor(None, {**options, "triton.cudagraphs": cudagraphs is not False}, None)


def _without_autograd_cache(bypass: bool) -> contextlib.AbstractContextManager[Any]:
    """AOTAutograd's cache off for this compile when ``bypass``: its key does not cover Inductor's decomposition
    tables, so a ``patchify=False`` (or ``pad_k=False``) compile would reuse the default's graph (it neither reads nor
    writes)."""
    from torch._functorch import config as functorch_config

    return functorch_config.patch(enable_autograd_cache=False) if bypass else contextlib.nullcontext()


def _inner_compile_as_decided(flags: CompileFlags, pruner: GemmPruner | None = None) -> Callable[..., Any]:
    """Inductor's inner compile (one graph's lowering and codegen: the forward now, a backward at its first call)
    inside the registry's "lower" lowerings (convolutions as plain, grouped GEMMs decided, GEMV kernels given the
    table's blocks, a dynamic graph's kernels sized for large sizes). Without it a training graph's backward would
    lower grouped GEMMs under ``max_autotune_gemm`` and benchmark ~40 configs each. ``pruner`` is installed
    again around it: a backward compiled later, after other compiles, still gets its own object's settings."""
    def inner_compile(gm: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor import compile_fx

        with _active(pruner), registry.entered("lower", dataclasses.replace(flags, example_inputs=example_inputs)):
            return compile_fx.compile_fx_inner(gm, example_inputs, *args, **kwargs)
    return inner_compile


def gemv_top(settings: HookSettings | None = None) -> int:
    """GEMV block configs per kernel: the table's best; under ``tune=K`` (policy "tune" of ``settings``, default the
    installed hook's) the table's K best, benchmarked by Inductor on each kernel's first call."""
    if settings is None:
        settings = installed._STACK[-1].pruner.settings if installed._STACK else None
    return settings.top_k if settings is not None and settings.policy in ("prune", "tune") else 1


def gemv_choice() -> Callable[[GemvKernel], Any]:
    """How this compile's GEMV kernels get their blocks (``gemv_top`` of this GPU's table, read as the installed
    hook's ``allow_similar_gpu`` says)."""
    settings = installed._STACK[-1].pruner.settings if installed._STACK else None
    rows = gemv_table.table_for_this_gpu(settings is None or settings.allow_similar_gpu)
    return functools.partial(choose_from_table, rows=rows, top=gemv_top(settings))


def compile(model: Any, *, cudagraphs: bool | str = True, predictor_model: str | os.PathLike | None = None,
            decide_gap: float = DECIDE_MIN_GAP, fallback: str = "aten", tune: int | None = None,
            options: dict[str, Any] | None = None, size_ranges: bool = False, patchify: bool = True,
            pad_k: bool = True, record: bool = True, label_store: str | os.PathLike | None = None,
            allow_similar_gpu: bool = True, **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(model)`` with gemm-predictor choosing every GEMM's kernel; compile time at plain's level.

    ``cudagraphs``: CUDA graph trees (``triton.cudagraphs``, what ``mode="reduce-overhead"`` turns on): ``True``
    (default) for every graph; inside a caller's own CUDA-graph capture the kernels run without them and are
    captured. ``"training"``: only graphs that build a backward. ``False``: none (each call launches its kernels).
    As under ``mode="reduce-overhead"``, an output is overwritten by the next call of the same graph: clone what
    you keep across calls (the trees raise an error naming the access otherwise).
    ``predictor_model``: a model folder (default: the shipped one for this GPU; without one, every GEMM runs
    cuBLAS, as under plain ``torch.compile``, with one warning). ``decide_gap``: how far (score units) the
    model's favourite Triton kernel must lead cuBLAS to be taken; negative: how far it may trail
    (``predictor.runtime.choices.policy.DECIDE_MIN_GAP``, -2.5; int8/fp8 GEMMs and float32 mm/addmm never below 0.0, few
    rows with a long K never below 2.0).
    ``fallback``: what a GEMM the hook cannot rank gets (``"aten"``, plain's choice; ``"full"``, stock
    max-autotune). ``tune``: where the model decides a Triton kernel, benchmark its top ``tune`` Triton kernels in
    Inductor's own benchmark (a GEMM decided for cuBLAS keeps cuBLAS, unbenchmarked), and the GEMV block table's top
    ``tune`` configs per GEMV kernel: a longer compile for users who accept one.
    ``size_ranges``: under ``dynamic=True``, each GEMM whose M is symbolic gets one kernel per range of M (2-16,
    17-64, 65-256; cuBLAS above), chosen by the model and dispatched on the actual M (``runtime.size_ranges``;
    such graphs run without CUDA graph trees). Off by default: in the H100 serving runs it lost to the default,
    which runs such a GEMM as the few-rows kernel at 2-16 rows where this GPU's labels say it wins, and cuBLAS
    otherwise (``runtime.few_rows``; docs/DYNAMIC.md).
    ``patchify``: patch-embedding convolutions over channels cuDNN must pad (an RGB image) run as the GEMM they
    are, decided by the model (``runtime.patchify``); False keeps them on cuDNN. ``pad_k``: fp16/bf16 GEMMs with a
    short reduction not a multiple of 8 (token mixing, patch-14 stems) multiply zero-padded operands, so cuBLAS and
    Triton run aligned kernels (``runtime.pad_k``); False multiplies them as they are.
    ``record``: under ``tune``, each benchmark Inductor runs becomes labelled rows in the label store ``label_store``
    (default: this GPU's under ``~/.cache/gemm-predictor/labels``), which ``gemm-predictor refit`` folds (docs/LEARN.md).
    ``allow_similar_gpu``: where this GPU has no model or per-GPU table of its own (GEMV blocks, few rows, grouped
    GEMMs), use one made on another GPU of the same architecture, said in one line (``predictor.stats()["tables"]``
    names each file); False reads nothing made on another GPU, and what has no table keeps plain's choice.
    ``options``: extra Inductor options, applied over the recommended ones. Anything else goes to ``torch.compile``
    (``dynamic``, ``fullgraph``; the backend is Inductor's, ``backend=`` is refused).

    The settings are the compiled object's own: its graphs are compiled with its pruner whenever they compile (a
    recompile, a backward), whatever was compiled since; compiles with the same settings share one pruner (one
    model loaded). The latest compile's pruner is also installed process-wide, for what a plain ``torch.compile``
    compiles with max-autotune (``predictor.stats()`` counts the decisions of the pruner that compiled last;
    ``predictor.uninstall()`` removes the process-wide one)."""
    if model is None or not callable(model):
        raise ValueError(f"predictor.compile needs a model to compile (an nn.Module or a function), got "
                         f"{type(model).__name__}")
    for refused in ("mode", "backend"):
        if refused in torch_compile_kwargs:
            raise ValueError(f"predictor.compile sets its own Inductor backend and options; pass options=..., "
                             f"not {refused}=")
    if size_ranges and torch_compile_kwargs.get("dynamic") is not True:
        if torch_compile_kwargs.get("dynamic") is False:
            raise ValueError("size_ranges=True needs a symbolic M, and dynamic=False makes every size static: "
                             "pass dynamic=True")
        log.warning("gemm-predictor: size_ranges=True acts on GEMMs whose M is symbolic: pass dynamic=True (without "
                    "it only graphs that Dynamo recompiles as dynamic after a size change get ranges)")
    for name, flag in (("size_ranges", size_ranges), ("patchify", patchify), ("pad_k", pad_k), ("record", record)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    merged, cudagraphs, pruner = prepare(cudagraphs, predictor_model, decide_gap, fallback, tune, options,
                                         allow_similar_gpu=allow_similar_gpu)
    from .choices import feedback  # learning from use: the tuned mode's benchmarks become labels

    feedback.attach(pruner, record, label_store)
    return compile_without_hook(model, merged, cudagraphs, by_size_range=size_ranges, patchify=patchify,
                                pad_k=pad_k, pruner=pruner, **torch_compile_kwargs)


def prepare(cudagraphs: bool | str = True, predictor_model: str | os.PathLike | None = None,
            decide_gap: float = DECIDE_MIN_GAP, fallback: str = "aten", tune: int | None = None,
            options: dict[str, Any] | None = None, where: str = "predictor.compile(options=...)",
            allow_similar_gpu: bool = True) -> tuple[dict[str, Any], bool | str, GemmPruner]:
    """Check ``predictor.compile``'s arguments (one-line ValueError), install the hook they ask for process-wide (in
    place of an earlier compile's) and return the Inductor options, CUDA-graph setting and pruner to compile with."""
    if cudagraphs not in CUDAGRAPHS:
        raise ValueError(f"cudagraphs must be True, 'training' or False, got {cudagraphs!r}")
    if tune is not None and (isinstance(tune, bool) or not isinstance(tune, int) or tune < 1):
        raise ValueError(f"tune must be a positive integer (kernels benchmarked per GEMM) or None, got {tune!r}")
    merged = {**RECOMMENDED_OPTIONS, **(options or {})}
    if "triton.cudagraphs" in merged:
        cudagraphs = bool(merged.pop("triton.cudagraphs"))
    _check_options(merged, where)  # before installing anything: a refused call leaves no hook behind
    _check_model_folder(predictor_model)
    if not any(entry.by_compile for entry in installed._STACK):
        # predictor.uninstall() took the compiles' hook out: later compiles start afresh (new counters, the model
        # read again), while every object compiled before keeps its own pruner
        _PRUNERS.clear()
    if not isinstance(allow_similar_gpu, bool):
        raise ValueError(f"allow_similar_gpu must be True or False, got {allow_similar_gpu!r}")
    pruner = pruner_for(recommended_settings(predictor_model, decide_gap, fallback, tune, allow_similar_gpu))
    installed.push(pruner, SEARCH_SPACE[pruner.settings.space], by_compile=True)
    return merged, cudagraphs, pruner


def compile_without_hook(model: Any, options: dict[str, Any], cudagraphs: bool | str = True,
                         by_size_range: bool = False, patchify: bool = True, pad_k: bool = True,
                         pruner: GemmPruner | None = None, **torch_compile_kwargs: Any) -> Any:
    """What ``predictor.compile`` compiles with, the hook aside: Inductor with ``options``, CUDA graph trees decided
    per graph, and the accumulated-gradient guard on a module. Whatever chooses the GEMMs is ``pruner`` or, without
    one, the caller's (the installed hook, or a lookup table in ``collectors/in_program/collect.py``)."""
    import torch

    guarded: list[Any] = []

    def guard_gradients() -> None:
        """Registered when the first graph with a backward runs under the trees (an inference-only model keeps
        nn.Module's fast call path: a forward pre-hook costs every call)."""
        if not guarded and isinstance(compiled, torch.nn.Module):
            guarded.append(compiled.register_forward_pre_hook(AccumulatedGradGuard()))

    backend = _inductor_backend(options, cudagraphs, guard_gradients, by_size_range, patchify, pad_k, pruner)
    compiled = torch.compile(model, backend=backend, **torch_compile_kwargs)
    return compiled


def _check_options(options: dict[str, Any], where: str = "predictor.compile(options=...)") -> None:
    """Refuse an unknown Inductor option now, in one line, rather than at the first call."""
    from torch._inductor import config

    unknown = [key for key in options if key not in config._config]  # noqa: SLF001 -- Inductor's own key list
    if unknown:
        raise ValueError(f"unknown Inductor option(s) {', '.join(map(repr, unknown))} in {where}")


def _check_model_folder(predictor_model: str | os.PathLike | None) -> None:
    """A named model folder must be one now, on any machine: on a CPU the hook never loads it, and a typo would pass
    unnoticed until the code reached a GPU."""
    if predictor_model is None:
        return
    from pathlib import Path

    folder = Path(predictor_model)
    if not folder.is_dir():
        raise ValueError(f"predictor_model {str(folder)!r}: no such folder")
    if not (folder / METADATA_FILE).is_file():
        raise ValueError(f"predictor_model {str(folder)!r}: not a model folder (no {METADATA_FILE})")


# Inference fast paths that run a whole layer as one aten op: Inductor sees no GEMM inside them
FUSED_LAYER_OPS = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")
_warned_fused: set[str] = set()


def _note_fused_layers(gm: Any) -> None:
    """One warning per op and process when a graph holds a fused layer op: its GEMMs never reach Inductor, so none
    is chosen (``predictor.stats()`` shows no GEMM seen) and the layer runs as it does without torch.compile."""
    import torch

    ops = {getattr(torch, name, None): name for name in FUSED_LAYER_OPS}
    ops.update({getattr(torch.ops.aten, name).default: name for name in FUSED_LAYER_OPS
                if hasattr(torch.ops.aten, name)})
    found = {ops[n.target] for n in getattr(getattr(gm, "graph", None), "nodes", ())
             if n.op == "call_function" and n.target in ops}
    for name in sorted(found - _warned_fused):
        _warned_fused.add(name)
        log.warning("gemm-predictor: the graph runs torch.%s, one fused op (nn.TransformerEncoderLayer / "
                    "nn.MultiheadAttention's inference fast path in eval mode under no_grad): no GEMM in it reaches "
                    "Inductor, so none is chosen; torch.backends.mha.set_fastpath_enabled(False) lets them through",
                    name)
