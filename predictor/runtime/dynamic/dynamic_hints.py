"""Block sizes of a dynamic graph's pointwise kernels chosen for the sizes a server grows to, not for the first size
it saw.

Why: Inductor sizes a Triton kernel's block candidates from its element count's hint
(``TritonKernel.codegen_kernel``: ``size_hints``), and under dynamic shapes that hint is the first size the graph
was called with. A server warming up at batch 2 gets blocks of 128-256 elements and one warp, and keeps them at
batch 256, where they run 2x slower than a static compile's (an H100 llama decode step: 36 against 20 us of
pointwise work; docs/DYNAMIC.md). With the symbols' hints raised to Inductor's own hint for an unknown size
(``config.unbacked_symint_fallback``, 8192) the candidates are those of a large size; at a small size they are
launch-bound, as every candidate is there.

And a dynamic graph's pointwise kernels keep the heuristic's own config instead of benchmarking its candidates at
their first call (``triton.autotune_pointwise`` off). At the first size, often a few rows, every candidate takes
the same 2 us and the pick is a coin toss; a losing pick ran a Llama prefill's SiLU-gate kernel 35% and its 2-D
attention-mask kernel 50% slower at 1536 tokens, and the whole prefill 20% slower at 4096 (same docs). The one
config costs 2% at decode batches of 2-64, where the coin toss's other candidate is a little faster.

Reductions keep Inductor's own hints and candidates. Their rows are often few at every size a server sees (a
query-key norm over 4 heads of a 64-token prefill is 256 rows). Hinted at 8192 rows, a Gemma 3 prefill's
norm-and-rotary kernel ran 34.5 against 5.1 us at 64 tokens with the first size's hint (H100, torch.profiler).

A 1-D pointwise kernel goes further: its three blocks are compiled and each launch takes the one for its own
element count (``pointwise_by_size``); the raised hints then decide only 2-D tilings.

And a pointwise kernel that would divide each element's index by a symbolic size is tiled in two dimensions instead
(``symbolic_tiling``: a prefill's tokens x tokens attention mask).

Only the pointwise heuristics' hints, blocks and benchmark change: no guard, no lowering and no GEMM choice reads
them, so outputs and recompiles are those of the graph without it. Static graphs are untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Callable

from ..lowerings import symbolic_tiling
from ..lowerings.pointwise_by_size import BLOCKS, SIZE_ARGUMENT_BITS, by_size_source
from ..lowerings.tables import wrapped_attribute

# the sizevars methods that give codegen its hints, by torch version: ``optimization_hint`` (2.13), ``size_hint``,
# ``symbolic_hint`` (older)
HINT_METHODS = ("optimization_hint", "size_hint", "symbolic_hint")


def hint_floor() -> int:
    """The smallest hint a symbol gets: Inductor's own hint for a size it cannot know."""
    from torch._inductor import config

    return int(getattr(config, "unbacked_symint_fallback", 8192))


def cache_key() -> list[int]:
    """What decides a dynamic graph's pointwise kernels here (the hook's cache key carries it): the hint floor, the
    blocks picked per launch, the width of their size arguments and the rule for their 2-D tilings."""
    return [hint_floor(), *BLOCKS, SIZE_ARGUMENT_BITS, symbolic_tiling.RULE_VERSION]


def floored(original: Callable[..., Any], floor: int) -> Callable[..., Any]:
    """``original`` (a sizevars hint method, bound) with each free symbol of the expression hinted at least
    ``floor``: the expression's hint at those raised values. A symbol that cannot be hinted leaves the hint as
    ``original`` gives it."""
    def hint(expr: Any, *args: Any, **kwargs: Any) -> Any:
        symbols = getattr(expr, "free_symbols", None)
        if not symbols:
            return original(expr, *args, **kwargs)
        try:
            raised = {s: max(int(original(s)), floor) for s in symbols}
            return original(expr.subs(raised), *args, **kwargs)
        except Exception:  # noqa: BLE001 - an unhintable symbol: Inductor's own answer
            return original(expr, *args, **kwargs)
    return hint


@contextlib.contextmanager
def large_size_hints(sizevars: Any, floor: int) -> Iterator[None]:
    """While active, ``sizevars``' hint methods floor every symbol's hint at ``floor`` (instance attributes,
    removed on exit)."""
    patched = []
    for name in HINT_METHODS:
        original = getattr(sizevars, name, None)
        if callable(original) and name not in vars(sizevars):
            setattr(sizevars, name, floored(original, floor))
            patched.append(name)
    try:
        yield
    finally:
        for name in patched:
            delattr(sizevars, name)


def reduces(kernel: Any) -> bool:
    """Whether an Inductor Triton kernel reduces: a reduction range (prefix ``r0_``, ``r1_``; ``r`` in older torch)
    of more than one element. A pointwise kernel has one too, of 1 (``SIMDScheduling.create_tiling``)."""
    numels = getattr(kernel, "numels", None)
    if numels is None:
        return bool(getattr(kernel, "inside_reduction", False))
    return any(str(prefix).startswith("r") and numel != 1 for prefix, numel in numels.items())


def _codegen_with_large_hints(codegen: Callable[..., Any]) -> Callable[..., Any]:
    def codegen_kernel(self: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor.virtualized import V

        if reduces(self):  # a reduction's rows stay few at every size: Inductor's own hints (module docstring)
            return codegen(self, *args, **kwargs)
        try:
            sizevars = V.graph.sizevars
        except Exception:  # noqa: BLE001 - no graph being lowered: nothing to hint, Inductor's own codegen
            return codegen(self, *args, **kwargs)
        with large_size_hints(sizevars, hint_floor()):
            source = codegen(self, *args, **kwargs)
        return by_size_source(source) if isinstance(source, str) else source
    return codegen_kernel


def is_dynamic(example_inputs: Any) -> bool:
    """Whether a graph's example inputs (Inductor's inner compile) carry a symbolic size."""
    import torch

    for value in example_inputs or ():
        if isinstance(value, torch.SymInt):
            return True
        if isinstance(value, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in value.shape):
            return True
    return False


@contextlib.contextmanager
def dynamic_kernel_hints(example_inputs: Any) -> Iterator[None]:
    """For a dynamic graph (``is_dynamic``), while active: Inductor writes each pointwise Triton kernel's
    ``size_hints`` with its symbols hinted at least ``hint_floor()`` (``TritonKernel.codegen_kernel`` wrapped; a
    reduction's hints are its own) and gives pointwise kernels the heuristic's one config
    (``triton.autotune_pointwise`` off), tiled in 2-D where 1-D would divide by a symbol (``symbolic_tiling``); all
    restored on exit, also on an error. A static graph compiles as it would without it."""
    if not is_dynamic(example_inputs):
        yield
        return
    from torch._inductor import config
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch._inductor.codegen.triton import TritonKernel

    with (config.patch({"triton.autotune_pointwise": False}),
          wrapped_attribute(TritonKernel, "codegen_kernel", _codegen_with_large_hints, "predictor_large_size_hints"),
          wrapped_attribute(SIMDScheduling, "get_tiling_and_scores", symbolic_tiling.wrap,
                            "predictor_symbolic_tiling")):
        yield
