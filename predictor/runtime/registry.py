"""Every rewrite ``predictor.compile`` makes of what Inductor sees, listed once, in the order it applies them.

A :class:`~.lowerings.base.Lowering` says what it rewrites, at which stage, which of the compile's flags it reads, and
what it adds to the cache key. Adding one is a new module in ``lowerings/`` and one entry in ``LOWERINGS``
(docs/ARCHITECTURE.md walks through it). Only ``predictor.compile`` reads this list: it enters the lowerings through
``entered`` and gives ``digest`` to the pruners it makes, whose cache key carries it. The list sits beside the entry
point, above ``lowerings/`` and ``dynamic/``, so that neither folder imports the other's lowerings.

Why a digest: AOTAutograd's and Inductor's cache keys hash torch's source and Inductor's config but not this
package's code, so a graph traced or lowered under an older rule would be reused after an upgrade. Each lowering's
share is its module's source and, where it reads a table or a rule, that table's or rule's key.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from .dynamic import dynamic_hints, size_ranges
from .lowerings import addmm_bias, conv, few_rows, gemv, gemv_blocks, gemv_table, grouped_mm, pad_k, patchify
from .lowerings.base import STAGES, CompileFlags, Lowering


def _gemv_blocks(flags: CompileFlags) -> contextlib.AbstractContextManager[None]:
    rows = gemv_table.table_for_this_gpu(flags.allow_similar_gpu)  # read once per graph, not per kernel
    return gemv_blocks.gemv_blocks(functools.partial(gemv_table.choose_from_table, rows=rows, top=flags.gemv_top))


def _gemv_table_key(allow_similar_gpu: bool = True) -> tuple[str | None, str]:
    """The table's bytes and the module that reads it: both decide a GEMV kernel's blocks."""
    return gemv_table.table_digest(allow_similar_gpu), source_digest(gemv_table.__name__)


LOWERINGS: list[Lowering] = [
    Lowering("gemv", "a GEMM of one row or column becomes a fused Triton reduction where the GEMV rule says so",
             "trace", lambda f: gemv.gemv_as_reduction(allow_similar=f.allow_similar_gpu), gemv.__name__,
             reads=("allow_similar_gpu",), cache_key=_gemv_table_key),
    Lowering("patchify", "a patch-embedding convolution over an RGB image becomes the GEMM it is",
             "trace", lambda f: patchify.patchify_as_gemm(f.patchify), patchify.__name__, reads=("patchify",)),
    Lowering("pad_k", "an fp16/bf16 GEMM with a short reduction not a multiple of 8 multiplies zero-padded operands",
             "trace", lambda f: pad_k.short_k_padded(f.pad_k), pad_k.__name__, reads=("pad_k",)),
    Lowering("size_ranges", "a GEMM of a symbolic M gets one kernel per range of M (opt-in)", "trace",
             lambda f: size_ranges.size_ranges() if f.size_ranges else contextlib.nullcontext(),
             size_ranges.__name__, reads=("size_ranges",)),
    Lowering("few_rows", "a GEMM of a symbolic few rows becomes the few-rows kernel where this GPU's labels say so",
             "trace", lambda f: (contextlib.nullcontext() if f.size_ranges
                                 else few_rows.few_rows_gemms(few_rows.rule_for_this_gpu(f.allow_similar_gpu))),
             few_rows.__name__, reads=("size_ranges", "allow_similar_gpu"), cache_key=few_rows.table_digest),
    Lowering("conv", "convolutions are lowered as plain torch.compile lowers them", "lower",
             lambda f: conv.convolutions_as_plain(), conv.__name__),
    Lowering("addmm_bias", "an addmm of a 0-d bias is lowered as plain torch.compile lowers it", "lower",
             lambda f: addmm_bias.odd_bias_as_plain(), addmm_bias.__name__),
    Lowering("grouped_mm", "a grouped GEMM gets one Triton config per band of rows per expert, or aten", "lower",
             lambda f: grouped_mm.grouped_mm_decided(grouped_mm.rule_for_this_gpu(f.allow_similar_gpu)),
             grouped_mm.__name__, reads=("allow_similar_gpu",), cache_key=grouped_mm.rule_key),
    Lowering("gemv_blocks", "a GEMV kernel gets the block sizes of this GPU's table", "lower", _gemv_blocks,
             gemv_blocks.__name__, reads=("gemv_top", "allow_similar_gpu"), cache_key=_gemv_table_key),
    Lowering("dynamic_hints", "a dynamic graph's pointwise and reduction kernels are sized for large sizes", "lower",
             lambda f: dynamic_hints.dynamic_kernel_hints(f.example_inputs), dynamic_hints.__name__,
             reads=("example_inputs",), cache_key=dynamic_hints.cache_key),
]


@contextlib.contextmanager
def entered(stage: str, flags: CompileFlags, lowerings: Sequence[Lowering] | None = None) -> Iterator[None]:
    """Every lowering of ``stage``, entered in registry order and left in reverse (also on an error)."""
    if stage not in STAGES:
        raise ValueError(f"unknown lowering stage {stage!r}; expected one of {STAGES}")
    with contextlib.ExitStack() as stack:
        for lowering in LOWERINGS if lowerings is None else lowerings:
            if lowering.stage == stage:
                stack.enter_context(lowering.apply(flags))
        yield


@functools.cache
def source_digest(module: str) -> str:
    """A hash of one module's source file, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"lowering module {module!r} not found")
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()[:16]


def digest(lowerings: Sequence[Lowering] | None = None, allow_similar_gpu: bool = True) -> str:
    """The lowerings' share of the cache key: each one's name, stage, source and ``cache_key()`` (given
    ``allow_similar_gpu`` where the lowering reads it: it picks which GPU's table is read)."""
    def key(lw: Lowering) -> object:
        return lw.cache_key(allow_similar_gpu=allow_similar_gpu) if "allow_similar_gpu" in lw.reads else lw.cache_key()

    parts = [[lw.name, lw.stage, source_digest(lw.module), key(lw)]
             for lw in (LOWERINGS if lowerings is None else lowerings)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
