"""How each benchmark mode compiles a module.

The ablations split max-autotune into its parts (GEMM templates, pointwise tuning, coordinate descent, CUDA
graphs, epilogue-fusion benchmarking) so that a model's gain or loss under full max-autotune can be attributed.
Every inference mode is timed as called (direct calls, ``called_ms``); a mode whose compiled call can be captured
into one outer CUDA graph is also timed by replaying that graph (``step_ms``), the fair comparison between modes.
Stock CUDA graph trees cannot be captured again (``Mode.replayable`` is False): those modes are compared as called
only. ``predictor.compile`` runs its kernels without the trees inside a caller's capture, so it is timed both ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn


class ModeUnavailable(RuntimeError):
    """The mode cannot run in this environment (e.g. ``predictor.compile`` does not exist yet)."""


@dataclass(frozen=True)
class Mode:
    """A parsed mode: ``name`` is the full string as given (the record's key), ``base`` its registry name."""

    name: str
    base: str
    cudagraphs: bool  # uses cudagraph trees (triton.cudagraphs) when called directly
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def replayable(self) -> bool:
        """Whether one outer CUDA graph can capture the compiled call (stock cudagraph trees cannot)."""
        return self.base not in STOCK_TREES

    def compile(self, module: nn.Module) -> Callable:
        """The compiled callable for ``module``; raises ModeUnavailable when the mode cannot run here."""
        reason = skip_reason(self)
        if reason:
            raise ModeUnavailable(reason)
        return _COMPILERS[self.base][0](module, **self.kwargs)


def _hook(module: nn.Module, **kwargs: Any) -> Callable:
    """``predictor.compile``: the product's recommended call (imported only for hook modes)."""
    try:
        import predictor
    except ImportError as exc:
        raise ModeUnavailable(f"cannot import predictor: {exc}") from exc
    fn = getattr(predictor, "compile", None)
    if not callable(fn):
        raise ModeUnavailable("predictor.compile does not exist in this checkout (predictor/__init__.py)")
    return fn(module, **kwargs)


def _hook_tuned(module: nn.Module, **kwargs: Any) -> Callable:
    """``predictor.compile(tune=5)``: the decided kind's top 5 per GEMM in Inductor's own benchmark."""
    return _hook(module, **{"tune": 5, **kwargs})


def _opts(mode: str | None = None, **options: Any) -> Callable[[nn.Module], Callable]:
    """torch.compile with ``mode`` and/or Inductor ``options`` (``a__b`` spells ``a.b``). torch.compile refuses
    both at once, so a mode with options becomes the mode's own option set with ``options`` on top."""
    def compile_(module: nn.Module) -> Callable:
        if not options:
            return torch.compile(module, mode=mode)
        opts = {k.replace("__", "."): v for k, v in options.items()}
        if mode:
            opts = {**torch._inductor.list_mode_options(mode), **opts}
        return torch.compile(module, options=opts)
    return compile_


# name -> (compile function, uses cudagraph trees when called directly)
_COMPILERS: dict[str, tuple[Callable[..., Callable], bool]] = {
    "plain": (_opts(), False),
    "max-autotune": (_opts("max-autotune"), True),
    "hook": (_hook, True),
    "hook-tuned": (_hook_tuned, True),
    "ma-no-cudagraphs": (_opts("max-autotune-no-cudagraphs"), False),
    "cudagraphs": (_opts("reduce-overhead"), True),
    "ma-gemm": (_opts(max_autotune_gemm=True), False),
    "ma-gemm-cudagraphs": (_opts(max_autotune_gemm=True, triton__cudagraphs=True), True),
    "ma-pointwise": (_opts(max_autotune_pointwise=True), False),
    "coordinate-descent": (_opts(coordinate_descent_tuning=True), False),
    "ma-no-epilogue-fusion": (_opts("max-autotune-no-cudagraphs", benchmark_epilogue_fusion=False), False),
}
NAMES = list(_COMPILERS)
# modes whose stock CUDA graph trees replay graphs of their own: timed as called, never replayed in an outer graph
STOCK_TREES = frozenset({"max-autotune", "cudagraphs", "ma-gemm-cudagraphs"})


def has_inductor_config(key: str) -> bool:
    """Whether the installed torch's Inductor config has ``key`` (options naming an unknown key fail)."""
    import torch._inductor.config as config
    return key in getattr(config, "_config", {}) or hasattr(config, key)


def skip_reason(mode: Mode) -> str | None:
    """Why ``mode`` is skipped in this torch (recorded as status "skipped"), or None."""
    if mode.base == "ma-no-epilogue-fusion" and not has_inductor_config("benchmark_epilogue_fusion"):
        return f"torch {torch.__version__} has no inductor config benchmark_epilogue_fusion"
    return None


def _value(text: str) -> Any:
    """A kwarg value: int, float, bool, None, else the string itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


OPTION_PREFIX = "options."


def parse_mode(text: str) -> Mode:
    """``plain``, ``max-autotune``, ``hook``, an ablation, or ``hook:key=value,...`` (kwargs for
    predictor.compile; ``options.<inductor option>=value`` goes into its ``options``). ValueError naming the mode
    for anything else."""
    base, sep, rest = text.partition(":")
    if base not in _COMPILERS:
        raise ValueError(f"unknown mode {text!r}; known: {', '.join(NAMES)} (and hook:key=value,...)")
    kwargs: dict[str, Any] = {}
    if sep:
        if not base.startswith("hook"):
            raise ValueError(f"mode {text!r}: only hook takes key=value arguments")
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            key = key.strip()
            option = key.removeprefix(OPTION_PREFIX) if key.startswith(OPTION_PREFIX) else None
            if option is None:
                valid = key.isidentifier() and key != "options"
            else:
                valid = option.replace(".", "_").isidentifier()
            if not eq or not valid:  # options come one by one: options.<inductor option>=value
                raise ValueError(f"mode {text!r}: expected key=value, got {item!r}")
            if option is not None:  # an Inductor option for predictor.compile(options=...)
                kwargs.setdefault("options", {})[option] = _value(value.strip())
            else:
                kwargs[key] = _value(value.strip())
    cudagraphs = _COMPILERS[base][1]
    if base.startswith("hook") and "cudagraphs" in kwargs:
        cudagraphs = kwargs["cudagraphs"] is not False  # "training": trees on training graphs only
    return Mode(text, base, cudagraphs, kwargs)


def split_modes(text: str, repeats: bool = False) -> list[str]:
    """``plain,max-autotune,hook:tune=3,cudagraphs=False`` -> three modes: an item with '=' continues a hook mode's
    kwargs. ';' also separates modes. A mode named twice counts once unless ``repeats``."""
    out: list[str] = []
    for part in re.split(r"[;,]", text):
        part = part.strip()
        if "=" in part and ":" not in part and out and ":" in out[-1]:
            out[-1] += "," + part
        elif part:
            out.append(part)
    return out if repeats else list(dict.fromkeys(out))
