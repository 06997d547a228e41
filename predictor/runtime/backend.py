"""``torch.compile(model, backend="gemm_predictor")``: the product as a named Dynamo backend.

Why: whatever takes a backend name can use it without calling ``predictor.compile`` itself, e.g. transformers'
``generate`` auto-compile (``generation_config.compile_config = CompileConfig(backend="gemm_predictor")``). The
name is registered through the ``torch_dynamo_backends`` entry point (pyproject.toml) of an installed package, and
by ``register()`` for a checkout used without installing.

``mode`` as torch.compile passes it: ``None``, ``"default"`` and ``"reduce-overhead"`` give ``predictor.compile``'s
default (CUDA graph trees included); ``"max-autotune"`` benchmarks the decided kind's top 5 per GEMM (``tune=5``);
``"max-autotune-no-cudagraphs"`` the same without CUDA graphs. ``options`` are Inductor options, as for
``predictor.compile``, and may also carry ``predictor.compile``'s own ``tune``, ``cudagraphs``, ``predictor_model``,
``decide_gap``, ``fallback`` and ``allow_similar_gpu`` (torch.compile has no other way to pass them; they override the mode's). The
accumulated-gradient guard needs the module and is ``predictor.compile``'s alone.
"""

from __future__ import annotations

from typing import Any

NAME = "gemm_predictor"
TUNE_FOR_MAX_AUTOTUNE = 5
MODES: dict[str | None, dict[str, Any]] = {
    None: {}, "default": {}, "reduce-overhead": {},
    "max-autotune": {"tune": TUNE_FOR_MAX_AUTOTUNE},
    "max-autotune-no-cudagraphs": {"tune": TUNE_FOR_MAX_AUTOTUNE, "cudagraphs": False},
}
# predictor.compile's arguments that options= may carry (compile.prepare checks their values)
OWN_OPTIONS = ("tune", "cudagraphs", "predictor_model", "decide_gap", "fallback", "allow_similar_gpu")
WHERE = f"torch.compile(backend={NAME!r}, options=...)"


def gemm_predictor(gm: Any, example_inputs: Any, mode: str | None = None,
                   options: dict[str, Any] | None = None) -> Any:
    """A Dynamo backend: compile ``gm`` as ``predictor.compile`` would."""
    from .compile import _inductor_backend, prepare

    if mode not in MODES:
        raise ValueError(f"backend {NAME!r}: unknown mode {mode!r}; expected one of "
                         f"{', '.join(repr(m) for m in MODES if m)}")
    inductor = dict(options or {})
    own = {key: inductor.pop(key) for key in OWN_OPTIONS if key in inductor}
    try:
        merged, cudagraphs, pruner = prepare(options=inductor, where=WHERE, **{**MODES[mode], **own})
    except ValueError as exc:  # raised here, not from prepare's frames: Dynamo shows this frame and the message
        raise ValueError(f"backend {NAME!r}, options {own or inductor}: {exc}") from None
    return _inductor_backend(merged, cudagraphs, pruner=pruner)(gm, example_inputs)


def register() -> None:
    """Make ``backend="gemm_predictor"`` known to Dynamo in this process (a no-op when it is already)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if _BACKENDS.get(NAME) is None:
        register_backend(gemm_predictor, name=NAME)
