"""Grouped GEMMs (mixture-of-experts layers) decided without a benchmark: one Triton config per rows-per-expert.

Why: transformers runs its experts through ``torch._grouped_mm``. Plain ``torch.compile`` lowers it to aten's
grouped GEMM; with ``max_autotune_gemm`` on, Inductor benchmarks ~40-70 Triton configs per grouped GEMM
(``kernel/mm_grouped.py``) outside the choices the hook sees. The labels (Inductor's timings of every config over
four MoE decoders' expert shapes, decode to 2048-token prefill: ``datasets/nvidia-h100/GROUPED_MM.md``) show one
config per band of routed rows per expert within 1-3% of the best from one row per expert up, where aten trails by
2-22% (``gemm-predictor grouped-fit``). Below one row per expert (decode: a token's top-k of many experts) the
labels time a few experts' weights that stay in L2 across Inductor's repeated runs; in whole decode steps of three
MoE decoders the config below beat both the labels' favourite and aten (docs/DESIGN.md; finding 67) -- up to 64
experts: every program of Inductor's grouped template walks every expert's offsets, so with many experts and a
token's few active ones aten's grouped GEMM wins there (``MAX_DECODE_EXPERTS``, finding 78). So: the band's config
alone (nothing benchmarked), or plain's aten lowering where the rows are not static, a decode step routes over more
experts than that, or this torch lacks the template.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

from .tables import wrapped_entries

# (largest routed rows per expert, rounded down, (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)); the first
# band, 0: fewer routed rows than experts (decode), chosen in whole steps; the rest: predictor.offline.grouped_mm_fit.
BANDS: tuple[tuple[float, tuple[int, int, int, int, int]], ...] = (
    (0, (16, 64, 256, 4, 4)),
    (16, (16, 128, 128, 4, 4)),
    (160, (64, 128, 128, 4, 4)),
    (float("inf"), (128, 256, 64, 4, 8)),
)


# Whole decode steps (H100): Triton's decode config ran Mixtral (8 experts) 1.20x and Qwen1.5-MoE (60) 1.04x
# aten's grouped GEMM, Qwen3-MoE (128) 0.94x. Above this many experts a decode step keeps aten's.
MAX_DECODE_EXPERTS = 64


def config_for(rows_per_expert: int, experts: int | None = None) -> tuple[int, int, int, int, int] | None:
    """The Triton config for this many routed rows per expert (A's rows over the experts, rounded down); None
    (aten's grouped GEMM) for a decode step (fewer rows than experts) over more than ``MAX_DECODE_EXPERTS``."""
    if rows_per_expert <= BANDS[0][0] and experts is not None and experts > MAX_DECODE_EXPERTS:
        return None
    for limit, config in BANDS:
        if rows_per_expert <= limit:
            return config
    return None


def rule_key() -> str:
    """What decides a grouped GEMM's kernel here, for the compile cache key: a changed rule compiles anew."""
    return repr((BANDS, MAX_DECODE_EXPERTS))


def _rows_and_experts(mat_a: Any, mat_b: Any) -> tuple[int, int] | None:
    """(routed rows per expert, experts) of a 2-D A against 3-D B (transformers' layout), when static; else None.
    Rows are rounded down, as Inductor's own config pruning counts them (``mm_grouped.early_config_prune``), so
    that the band's config is never one Inductor prunes (0: fewer routed rows than experts)."""
    try:
        a_size, b_size = mat_a.get_size(), mat_b.get_size()
        if len(a_size) != 2 or len(b_size) != 3:
            return None
        experts = int(b_size[0])
        return int(a_size[0]) // experts, experts
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):  # symbolic sizes
        return None


def _decided(lower: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(lower)
    def lower_decided(mat_a: Any, mat_b: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor import config
        from torch._inductor.kernel import mm_grouped

        if config.max_autotune or not config.max_autotune_gemm:  # a user's full max-autotune keeps its search
            return lower(mat_a, mat_b, *args, **kwargs)
        shape = _rows_and_experts(mat_a, mat_b)
        choice = None if shape is None else config_for(*shape)
        if choice is None or not hasattr(mm_grouped, "grouped_mm_configs") or not hasattr(mm_grouped, "Config"):
            with config.patch(max_autotune_gemm=False):
                return lower(mat_a, mat_b, *args, **kwargs)
        block_m, block_n, block_k, stages, warps = choice
        one = mm_grouped.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
                                 "NUM_CONSUMER_GROUPS": 1}, num_stages=stages, num_warps=warps)
        original = mm_grouped.grouped_mm_configs
        mm_grouped.grouped_mm_configs = lambda: [one]
        try:
            with config.patch(max_autotune_gemm_backends="TRITON"):
                return lower(mat_a, mat_b, *args, **kwargs)
        except Exception:  # noqa: BLE001 - the template refused this problem: plain's lowering, as without us
            with config.patch(max_autotune_gemm=False):
                return lower(mat_a, mat_b, *args, **kwargs)
        finally:
            mm_grouped.grouped_mm_configs = original
    return lower_decided


def grouped_mm_decided() -> contextlib.AbstractContextManager[None]:
    """While active, Inductor lowers ``aten._grouped_mm`` with the band's config (or as plain); the lowering
    table's entries are restored on exit, also on an error."""
    import torch
    from torch._inductor import lowering

    packet = getattr(torch.ops.aten, "_grouped_mm", None)
    keys = [] if packet is None else [packet, packet.default]
    return wrapped_entries([lowering.lowerings], keys, lambda _key, lower: _decided(lower), "predictor_grouped")
