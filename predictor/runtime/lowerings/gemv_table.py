"""The GEMV block table: which blocks won on the labelled GEMV problems nearest a kernel, read instead of searched.

Why: a one-row GEMM in its reduction form (``gemv.py``) is as fast as its blocks. Inductor's default reduction
heuristic gives every row its own program (XBLOCK 1, R0_BLOCK up to 2048), which reaches 2-3 TB/s on wide weights
where coordinate descent finds blocks that reach 3.6-4.1 TB/s (``datasets/nvidia-h200/GEMV.md``) -- and coordinate
descent costs seconds per kernel. Here each GEMV kernel gets the blocks that won on the labelled problems nearest to
it (``datasets/<gpu>/GEMV_BLOCKS.md``); ``gemv_blocks`` writes them into the generated kernel.

Pointwise work fused ahead of a GEMV (a norm's scaling, SiLU-and-multiply) is redone by every program along the
reduction, so it changes which blocks win: the kernel's ``vector_loads`` -- the inputs it reads along the reduction
only -- is part of what the table is keyed by. A K above 1024 is reduced in a loop of R0_BLOCK-wide steps (XBLOCK,
R0_BLOCK and warps to choose), a K of at most 1024 in one persistent block (XBLOCK and warps only). The table is a
JSON file per GPU (``models/gemv-blocks/<gpu>.json``, written by ``gemm-predictor gemv-fit``): plain data, no pickle.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...artifacts.reading import InputError, check_positive, parse_json, read_table_bytes
from ...artifacts.roots import for_this_gpu, note_table, table_path
from ..compile_state import pow2_ceil

log = logging.getLogger(__name__)

TABLE_FOLDER = "gemv-blocks"  # under a model root (artifacts.roots.model_roots)
MIN_K = 1025  # Inductor reduces K <= 1024 in one persistent block (no R0_BLOCK to choose, only rows and warps)
Config = dict[str, int]  # XBLOCK, R0_BLOCK, num_warps, num_stages


@dataclasses.dataclass(frozen=True)
class GemvKernel:
    """What the block choice looks at: the output width, the reduction length, the dtype, how many GEMVs of
    that shape the kernel computes (2: gate and up fused), how many inputs every program reads along the
    reduction (1: the vector alone; 2: SiLU-and-multiply's two inputs, or a norm's input and scale, fused ahead) and
    whether an activation (sigmoid, tanh, erf, exp) is computed on them ahead of the product: that work, redone by
    every program, makes blocks of several rows win (the labels: SiLU-and-multiply ahead wins with 2-8 rows per
    program, a norm's scaling ahead with one, as a plain GEMV)."""

    n: int
    k: int
    dtype: str
    weights: int = 1
    vector_loads: int = 1
    activation_ahead: bool = False


def config_name(config: Config) -> str:
    """``X8_R256_w4``: the candidate's name in the labels."""
    return f"X{config['XBLOCK']}_R{config['R0_BLOCK']}_w{config['num_warps']}"


def parse_config_name(name: str) -> Config:
    match = re.fullmatch(r"X(\d+)_R(\d+)_w(\d+)", name)
    if not match:
        raise ValueError(f"not a GEMV block config name: {name!r} (expected like X8_R256_w4)")
    x, r, w = (int(v) for v in match.groups())
    return {"XBLOCK": x, "R0_BLOCK": r, "num_warps": w, "num_stages": 1}


# The candidates the collector times. XBLOCK x R0_BLOCK spans one row per program (Inductor's default shape) to
# 64 rows per program; elements per thread stay at or below 64 so no config spills. The wide steps of 16 warps
# (R0_BLOCK 2048-4096, 1-8 rows) are what coordinate descent picks for vocabulary heads and wide pairs.
GRID: tuple[Config, ...] = tuple(parse_config_name(name) for name in (
    "X1_R4096_w16", "X2_R4096_w16", "X4_R4096_w16", "X2_R2048_w16", "X4_R2048_w16", "X8_R2048_w16",
    "X1_R2048_w8", "X1_R2048_w16", "X1_R1024_w4", "X1_R1024_w8", "X1_R512_w4",
    "X2_R1024_w8", "X2_R512_w4", "X2_R512_w8", "X2_R256_w2",
    "X4_R512_w8", "X4_R256_w4", "X4_R256_w8", "X4_R128_w2",
    "X8_R256_w8", "X8_R128_w4", "X8_R64_w2", "X8_R512_w8",
    "X16_R128_w8", "X16_R64_w4", "X16_R256_w8",
    "X32_R64_w8", "X32_R32_w4", "X64_R32_w8", "X64_R16_w4",
))


# A K of at most 1024 is one persistent block: the whole reduction in registers, so only the rows per program and
# the warps are free. Such configs are named with R0_BLOCK 0 (``X8_R0_w4``: "the whole K") and emitted without it.
# Elements per thread (XBLOCK x K padded to a power of two / threads) stay at or below 64, as in ``GRID``.
PERSISTENT_GRID: tuple[Config, ...] = tuple(parse_config_name(name) for name in (
    "X1_R0_w2", "X1_R0_w4", "X1_R0_w8", "X2_R0_w2", "X2_R0_w4", "X2_R0_w8", "X4_R0_w2", "X4_R0_w4", "X4_R0_w8",
    "X8_R0_w4", "X8_R0_w8", "X16_R0_w8", "X32_R0_w16",
))


def persistent(kernel: GemvKernel) -> bool:
    """Whether Inductor reduces the kernel's K in one persistent block (K <= 1024)."""
    return kernel.k < MIN_K


def fits(config: Config, kernel: GemvKernel) -> bool:
    """A config whose blocks exceed the problem's sizes only wastes lanes: the collector skips those. A persistent
    kernel takes only persistent configs (R0_BLOCK 0) that hold at most 64 elements per thread; a looped one only
    looped configs whose R0_BLOCK is at most K: a step wider than the whole reduction idles the rest of its lanes
    for the whole kernel (Phi-3's K of 3072 under R0_BLOCK 4096: a near tie in the labels, 1.5-2.6% slower whole
    decode steps on the H100)."""
    if config["XBLOCK"] > pow2_ceil(kernel.n):
        return False
    if persistent(kernel):
        return config["R0_BLOCK"] == 0 and config["XBLOCK"] * pow2_ceil(kernel.k) <= 64 * 32 * config["num_warps"]
    return 0 < config["R0_BLOCK"] <= kernel.k


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 0)


# --- the table ---------------------------------------------------------------------------------------------------

def read_table(path: Path) -> list[dict[str, Any]]:
    """The labelled problems of one table: ``n``, ``k``, ``dtype``, ``weights``, ``vector_loads`` and ``times``
    (block config name -> us). Raises ValueError naming the file when it is not such a table."""
    return _read_table(path)[0]


def _read_table(path: Path) -> tuple[list[dict[str, Any]], bytes]:
    """``(rows, the file's bytes)``: one read, so the digest is of the very bytes the rows came from."""
    data = read_table_bytes(path, "GEMV block table")
    return parse_table(data, path), data


def parse_table(data: bytes, path: Path) -> list[dict[str, Any]]:
    """``read_table`` of a file's bytes (``path`` only names it in errors)."""
    try:
        rows = parse_json(data, path, "GEMV block table")["problems"]
        for row in rows:
            for key in ("n", "k", "weights", *(("vector_loads",) if "vector_loads" in row else ())):
                check_positive(row[key], key, integer=True)
            _problem(row)
            for name, us in row["times"].items():
                parse_config_name(name)
                check_positive(us, f"times[{name!r}]")
            if "cublas_us" in row:
                check_positive(row["cublas_us"], "cublas_us")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a GEMV block table ({type(exc).__name__}: {_first_line(exc)})") from None
    return rows


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:160]


def _problem(row: dict[str, Any]) -> GemvKernel:
    return GemvKernel(int(row["n"]), int(row["k"]), str(row["dtype"]), int(row["weights"]),
                      int(row.get("vector_loads", 1)), bool(row.get("activation_ahead", False)))


def neighbours(kernel: GemvKernel) -> int:
    """Labelled problems pooled per choice (held-out oracle@1, gemm-predictor gemv-fit): a single GEMV with no
    activation ahead follows its nearest problem best; pairs and GEMVs with an activation ahead, fewer labels with
    closer calls between configs, need the pool's agreement."""
    return 1 if kernel.weights == 1 and not kernel.activation_ahead else 3


def nearest_rows(kernel: GemvKernel, rows: Sequence[dict[str, Any]], count: int = 1) -> list[dict[str, Any]]:
    """The ``count`` labelled problems closest to ``kernel``: same number of fused GEMVs, an activation ahead or
    not, the nearest number of vector loads (the work fused ahead), the same element size where one exists, then
    the smallest distance in log2(n) and log2(k). (Each criterion narrows the rows where some row meets it.) Only
    rows of the same kind of reduction, looped or persistent, and for a persistent one of the same element size."""
    rows = [r for r in rows if persistent(_problem(r)) == persistent(kernel)]  # looped blocks do not carry over
    same = [r for r in rows if int(r["weights"]) == kernel.weights] or list(rows)
    same = [r for r in same if _problem(r).activation_ahead == kernel.activation_ahead] or same
    loads_gap = [abs(_problem(r).vector_loads - kernel.vector_loads) for r in same]
    nearest_loads = min(loads_gap, default=0)
    same = [r for r, gap in zip(same, loads_gap) if gap == nearest_loads]
    sized = [r for r in same if _itemsize(str(r["dtype"])) == _itemsize(kernel.dtype)]
    # a persistent block holds the whole K in registers: winners at 2-byte elements do not carry over to 4-byte ones
    sized = sized or ([] if persistent(kernel) else same)
    return sorted(sized, key=lambda r: (math.log2(int(r["n"]) / kernel.n) ** 2 + math.log2(int(r["k"]) / kernel.k) ** 2,
                                        int(r["n"]), int(r["k"])))[:count]


# Why a partial last block costs: where R0_BLOCK does not divide K, every program runs one more loop step whose
# lanes are partly masked. Masked lanes load nothing, so the cost is issue slots and latency, not bandwidth: a
# config's labelled time is scaled by (padded K over the kernel's / padded K over the label's) ** 0.5. Chosen on the
# labels' leave-one-model-out oracle@1 (gemm-predictor gemv-fit, H100): 0.966 without the term, 0.982 with 0.5,
# 0.981 with 1; on the problems whose K is no power of two, 0.937 -> 0.976. Single GEMVs only: on pairs (two
# weights per program, gate and up) the labels say no better (0.987 -> 0.983 over the pair forms), and on the zoo's
# qwen2-decode-b1 (H100) the pairs at K=1536 it moved from R0_BLOCK 1024-2048 to 512 ran 4-6% slower.
K_TAIL_EXPONENT = 0.5


def _k_tail(k: int, r0_block: int) -> float:
    """K padded up to whole R0_BLOCKs, over K: 1.0 where the block divides K, and for a persistent block (0)."""
    return math.ceil(k / r0_block) * r0_block / k if r0_block else 1.0


def ranked_configs(kernel: GemvKernel, rows: Sequence[dict[str, Any]], count: int | None = None,
                   k_tail_exponent: float = K_TAIL_EXPONENT) -> list[str]:
    """Block configs best first by their geomean of (fastest / their time) over the nearest labelled problems
    (``neighbours``, or ``count``), among configs that fit ``kernel`` and were timed on all of them: for a pair,
    one problem's 1% winner does not decide alone. For a single GEMV each time is carried over to the kernel's K by
    the partial-block term (``K_TAIL_EXPONENT``; 0 leaves it out). Empty for an empty table."""
    pool = nearest_rows(kernel, rows, count or neighbours(kernel))
    if not pool:
        return []
    names = set.intersection(*(set(r["times"]) for r in pool))
    names = {n for n in names if fits(parse_config_name(n), kernel)}

    exponent = k_tail_exponent if kernel.weights == 1 else 0.0

    def score(name: str) -> float:
        r0_block = parse_config_name(name)["R0_BLOCK"]
        return sum(math.log(min(r["times"].values()) / r["times"][name])
                   - exponent * math.log(_k_tail(kernel.k, r0_block) / _k_tail(int(r["k"]), r0_block))
                   for r in pool)

    return sorted(sorted(names), key=score, reverse=True)


def choose_from_table(kernel: GemvKernel, rows: Sequence[dict[str, Any]], top: int = 1) -> list[Config] | None:
    """The best config of the nearest labelled problems, or None (Inductor's default). With ``top`` > 1
    (``predictor.compile(tune=K)``), the K best, which Inductor benchmarks on the kernel's first call."""
    return [parse_config_name(name) for name in ranked_configs(kernel, rows)[:top]] or None


def reduction_beats_cublas(kernel: GemvKernel, rows: Sequence[dict[str, Any]]) -> bool | None:
    """For a persistent GEMV (K < ``MIN_K``): whether its nearest labelled plain GEMV (the GEMV alone, timed beside
    cuBLAS's: ``cublas_us``) ran faster as the reduction under its best fitting blocks than under cuBLAS. None
    where no such label exists. Why per shape: with K this short a wide vocabulary head can lose to cuBLAS
    (151936 x 896 on the H200 under Inductor's default blocks: 96.5 against 77.2 us) where narrower GEMVs win. Only
    labels of the kernel's element size judge it."""
    plain = [r for r in rows if "cublas_us" in r and not _problem(r).activation_ahead
             and _itemsize(str(r["dtype"])) == _itemsize(kernel.dtype)]  # fp32 is not judged by 2-byte labels
    pool = nearest_rows(GemvKernel(kernel.n, kernel.k, kernel.dtype), plain, 1) if persistent(kernel) else []
    if not pool:
        return None
    times = [us for name, us in pool[0]["times"].items() if fits(parse_config_name(name), kernel)]
    return bool(times) and min(times) < float(pool[0]["cublas_us"])


def form_of(row: dict[str, Any]) -> tuple[int, int, bool, bool]:
    """(weights, vector_loads, activation_ahead, persistent): which kind of GEMV kernel a labelled problem is."""
    kernel = _problem(row)
    return kernel.weights, kernel.vector_loads, kernel.activation_ahead, persistent(kernel)


def with_borrowed_forms(own: Sequence[dict[str, Any]], others: Sequence[Sequence[dict[str, Any]]]
                        ) -> list[dict[str, Any]]:
    """``own`` plus the rows of ``others`` (tables of GPUs of the same architecture) whose form ``own`` has no
    label of: a GPU whose labels predate a form takes that form's blocks from its sibling, never in place of its
    own. Only the blocks: a sibling's cuBLAS time (``cublas_us``) is left behind, since whether the reduction beats
    cuBLAS moves with the GPU (a 151936 x 896 head: cuBLAS won on the H200 under default blocks, lost on the H100)."""
    known = {form_of(r) for r in own}
    borrowed = [{key: v for key, v in r.items() if key != "cublas_us"}
                for table in others for r in table if form_of(r) not in known]
    return [*own, *borrowed]


@functools.lru_cache(maxsize=None)
def _table(gpu_name: str, capability: str, roots: tuple[str, ...]) -> tuple[tuple[dict[str, Any], ...], str | None]:
    """(rows, digest) of the table for this GPU, read once per process, with the forms it lacks from the tables
    of the same architecture (``with_borrowed_forms``)."""
    import hashlib

    folders = [Path(r) for r in roots]
    path = table_path(gpu_name, folders, capability, folder=TABLE_FOLDER)
    note_table(TABLE_FOLDER, capability, path, gpu_name, "GEMV block", "batch-1 GEMVs", "cuBLAS")
    if path is None:
        return (), None
    sibling = table_path("", folders, capability, folder=TABLE_FOLDER, skip=path)
    files = [path] if sibling is None else [path, sibling]
    try:
        (own, own_bytes), *others = [_read_table(f) for f in files]
    except ValueError as exc:
        log.warning("gemm-predictor: %s; GEMVs keep Inductor's default blocks", exc)
        return (), None
    # how the rows are read changes the blocks too: the K tail's weight, which configs may fit
    read_rule = f"k_tail_exponent={K_TAIL_EXPONENT};looped R0_BLOCK <= K".encode()
    digest = hashlib.sha256(b"".join([own_bytes, *(data for _, data in others), read_rule])).hexdigest()[:16]
    others = [rows for rows, _ in others]
    rows = with_borrowed_forms(own, others)
    borrowed = sorted({f"{r.get('form', 'plain')}{' (K <= 1024)' if form_of(r)[3] else ''}" for r in rows[len(own):]})
    if borrowed:
        log.warning("gemm-predictor: %s has no labels of the GEMV forms %s; their blocks come from %s",
                    path.name, ", ".join(borrowed), sibling)
    return tuple(rows), digest


def has_fused_forms(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether a table has labels of GEMVs with work fused ahead (then every column-major GEMV with a looped K takes
    the reduction, whatever its width: ``gemv.takes_reduction``)."""
    return any(form_of(r)[1] > 1 for r in rows)


def _this_gpus_table(allow_similar: bool = True) -> tuple[tuple[dict[str, Any], ...], str | None]:
    return for_this_gpu(_table, ((), None), allow_similar)


def table_for_this_gpu(allow_similar: bool = True) -> tuple[dict[str, Any], ...]:
    """The table's rows for the current CUDA GPU (empty without one, or without a GPU); ``allow_similar``: another
    GPU's table of this architecture where this one has none (the hook's ``allow_similar_gpu``)."""
    return _this_gpus_table(allow_similar)[0]


def table_digest(allow_similar: bool = True) -> str | None:
    """A hash of this GPU's table file and of how it is read (part of the hook's FX-graph-cache key: a new table or
    rule must not reuse kernels compiled with the old blocks)."""
    return _this_gpus_table(allow_similar)[1]
