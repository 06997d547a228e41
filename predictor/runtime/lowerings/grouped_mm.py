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
token's few active ones aten's grouped GEMM wins there (``max_decode_experts``, finding 78). So: the band's config
alone (nothing benchmarked), or plain's aten lowering where the rows are not static, a decode step routes over more
experts than that, or this torch lacks the template.

The bands are a per-GPU table (``models/grouped-mm/<gpu>.json``, ``gemm-predictor grouped-fit --out``), read like
the GEMV and few-rows tables: a GPU without one (and, under ``allow_similar_gpu``, none of its architecture) keeps
plain's aten kernel for every grouped GEMM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
from pathlib import Path
from typing import Any, Callable

from ...artifacts.reading import InputError, check_positive, parse_json, read_table_bytes
from ...artifacts.roots import for_this_gpu, note_table, table_path
from .tables import wrapped_entries

log = logging.getLogger(__name__)

TABLE_FOLDER = "grouped-mm"  # <model root>/grouped-mm/<gpu slug>.json, written by ``gemm-predictor grouped-fit --out``
Config = tuple[int, int, int, int, int]  # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)


@dataclasses.dataclass(frozen=True)
class GroupedRule:
    """One GPU's grouped-GEMM rule. ``bands``: (largest routed rows per expert, rounded down, config) in increasing
    order, the last unbounded; the first band, 0, is fewer routed rows than experts (decode). ``max_decode_experts``:
    above this many experts a decode step keeps aten's grouped GEMM (every program of Inductor's grouped template
    walks every expert's offsets; finding 78)."""

    bands: tuple[tuple[float, Config], ...]
    max_decode_experts: int | None = None

    def config_for(self, rows_per_expert: int, experts: int | None = None) -> Config | None:
        """The Triton config for this many routed rows per expert (A's rows over the experts, rounded down); None
        (aten's grouped GEMM) for a decode step (fewer rows than experts) over more than ``max_decode_experts``."""
        if (self.max_decode_experts is not None and rows_per_expert <= self.bands[0][0] and experts is not None
                and experts > self.max_decode_experts):
            return None
        for limit, config in self.bands:
            if rows_per_expert <= limit:
                return config
        return None


def parse_table(data: bytes, path: Path) -> GroupedRule:
    """A table's bytes as its rule (``path`` only names it in errors); a ValueError naming the file otherwise."""
    try:
        doc = parse_json(data, path, "grouped-GEMM table")
        bands = []
        for band in doc["bands"]:
            limit = float("inf") if band["up_to_rows_per_expert"] is None else band["up_to_rows_per_expert"]
            if limit != float("inf"):
                check_positive(limit + 1, "up_to_rows_per_expert", integer=True)
            config = tuple(band["config"])
            if len(config) != 5:
                raise ValueError(f"config {list(config)}: expected BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps")
            for value in config:
                check_positive(value, "config", integer=True)
            bands.append((limit, config))
        if not bands or bands[-1][0] != float("inf") or [b[0] for b in bands] != sorted(b[0] for b in bands):
            raise ValueError("bands must rise and end unbounded (up_to_rows_per_expert null)")
        experts = doc.get("max_decode_experts")
        if experts is not None:
            check_positive(experts, "max_decode_experts", integer=True)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"{path}: not a grouped-GEMM table ({type(exc).__name__}: {exc})") from None
    return GroupedRule(tuple(bands), experts)


def read_table(path: Path) -> GroupedRule:
    return parse_table(read_table_bytes(path, "grouped-GEMM table"), path)


@functools.lru_cache(maxsize=None)
def _table(gpu_name: str, capability: str, roots: tuple[str, ...]) -> tuple[GroupedRule | None, str | None]:
    """(rule, digest) of this GPU's table (or, given ``capability``, one of its architecture), read once per process
    and setting; (None, None) without one: every grouped GEMM lowers as plain lowers it (aten's)."""
    path = table_path(gpu_name, [Path(r) for r in roots], capability, folder=TABLE_FOLDER)
    note_table(TABLE_FOLDER, capability, path, gpu_name, "grouped-GEMM", "grouped GEMMs", "aten kernel")
    if path is None:
        return None, None
    try:
        data = read_table_bytes(path, "grouped-GEMM table")
        rule = parse_table(data, path)
    except ValueError as exc:
        log.warning("gemm-predictor: %s; grouped GEMMs keep plain torch.compile's aten kernel", exc)
        return None, None
    return rule, hashlib.sha256(data).hexdigest()[:16]


def _this_gpus_table(allow_similar: bool = True) -> tuple[GroupedRule | None, str | None]:
    return for_this_gpu(_table, (None, None), allow_similar)


def rule_for_this_gpu(allow_similar: bool = True) -> GroupedRule | None:
    """This GPU's rule (None: aten everywhere, as plain)."""
    return _this_gpus_table(allow_similar)[0]


def rule_key(allow_similar_gpu: bool = True) -> str | None:
    """What decides a grouped GEMM's kernel here, for the compile cache key: a changed table compiles anew."""
    return _this_gpus_table(allow_similar_gpu)[1]


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


def _decided(lower: Callable[..., Any], rule: GroupedRule | None) -> Callable[..., Any]:
    @functools.wraps(lower)
    def lower_decided(mat_a: Any, mat_b: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor import config
        from torch._inductor.kernel import mm_grouped

        if config.max_autotune or not config.max_autotune_gemm:  # a user's full max-autotune keeps its search
            return lower(mat_a, mat_b, *args, **kwargs)
        shape = _rows_and_experts(mat_a, mat_b)
        choice = None if shape is None or rule is None else rule.config_for(*shape)
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


def grouped_mm_decided(rule: GroupedRule | None) -> contextlib.AbstractContextManager[None]:
    """While active, Inductor lowers ``aten._grouped_mm`` with ``rule``'s band's config (or as plain; None: as plain
    everywhere); the lowering table's entries are restored on exit, also on an error."""
    import torch
    from torch._inductor import lowering

    packet = getattr(torch.ops.aten, "_grouped_mm", None)
    keys = [] if packet is None else [packet, packet.default]
    return wrapped_entries([lowering.lowerings], keys, lambda _key, lower: _decided(lower, rule), "predictor_grouped")
