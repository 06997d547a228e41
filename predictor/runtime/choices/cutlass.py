"""Keep the CUTLASS kernels most likely to win instead of Inductor's first N (``cutlass_max_profiling_configs``).

CUTLASS choices reach Inductor's autotuner outside ``_finalize_template_configs`` (torch 2.11 appends them in
``tuned_mm``), so the hook prunes them in a ``select_algorithm.add_preprocessing_fn`` instead, before any is
compiled. Each CUTLASS kernel costs ~30 s of nvcc (docs/CUTLASS.md); its L2-swizzle variants share that
compile and only add benchmarks, so the unit kept or dropped is the kernel, with all its swizzles.

No CUTLASS labels exist yet, so the ranking is analytic: the share of the padded tile work that is useful
(wave quantisation over the SMs and tile padding), then the tile closest to the work per SM. A learned ranking
replaces it once the Inductor-faithful collector has CUTLASS rows (``collect-inductor --backends ...CUTLASS``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...core.candidate import Candidate, from_choice_caller


def tile_score(m: int, n: int, c: Candidate, sm_count: int) -> float:
    """Higher is better: log of the useful share of the padded tile work, with a mild preference for the tile
    whose area is nearest the output area per SM (big tiles for big outputs, small ones for small)."""
    tiles = math.ceil(m / c.block_m) * math.ceil(n / c.block_n)
    waves = math.ceil(tiles / max(sm_count, 1))
    useful = (m * n) / (waves * sm_count * c.block_m * c.block_n)
    per_sm = max(m * n / max(sm_count, 1), 64 * 64)
    return math.log(min(useful, 1.0)) - 0.05 * abs(math.log2(c.block_m * c.block_n / min(per_sm, 256 * 128)))


def is_cutlass_choice(choice: Any) -> bool:
    """A CUTLASS ChoiceCaller (Inductor names them ``cutlass_<hash>``, one name per kernel, shared by its swizzles)."""
    return str(getattr(choice, "name", "")).startswith("cutlass")


def _output_mn(choice: Any) -> tuple[int, int] | None:
    try:
        size = [int(s) for s in choice.layout.size]  # symbolic sizes raise: then nothing is pruned
    except (AttributeError, TypeError, ValueError):
        return None
    return (size[-2], size[-1]) if len(size) >= 2 else None


def prune_cutlass(choices: Sequence[Any], top_k: int, sm_count: int) -> list[Any]:
    """``choices`` with only the ``top_k`` best-scored CUTLASS kernels (all swizzles of each) left among the
    CUTLASS ones; every other choice and the order are untouched. Unknown CUTLASS names are kept."""
    kernels: dict[str, Candidate] = {}
    for choice in choices:
        if is_cutlass_choice(choice):
            try:
                kernels.setdefault(choice.name, from_choice_caller(choice.name, getattr(choice, "description", "")))
            except ValueError:
                continue  # unparseable: never dropped
    if len(kernels) <= top_k:
        return list(choices)
    mn = next((x for x in map(_output_mn, choices) if x is not None), None)
    if mn is None:
        return list(choices)
    ranked = sorted(kernels, key=lambda name: -tile_score(mn[0], mn[1], kernels[name], sm_count))
    dropped = set(ranked[top_k:])
    return [c for c in choices if getattr(c, "name", None) not in dropped]


def keep_cutlass(choices: list[Any], cut_to_aten: bool, top_k: int | None, sm_count: int) -> list[Any]:
    """The hook's preprocessing of one GEMM's ChoiceCaller list: no CUTLASS choice where the hook cut the GEMM to
    cuBLAS alone, else the ``top_k`` analytically best CUTLASS kernels (``prune_cutlass``), else the list as is.

    Why the first: below ``aten_alone_below_us`` Inductor's benchmark overstates cuBLAS, so any kernel left beside
    it tends to win the benchmark and lose in the program. Measured on an H200 (2047x2048x2048 bf16): the 4 CUTLASS
    kernels kept beside cuBLAS cost 109 s of compile, and the one Inductor picked ran 42 us in the program where
    cuBLAS runs 23 us (docs/CUTLASS.md)."""
    if cut_to_aten:
        return [c for c in choices if not is_cutlass_choice(c)]
    if top_k is None:
        return choices
    return prune_cutlass(choices, top_k, sm_count)
