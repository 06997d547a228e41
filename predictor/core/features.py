"""Features of (problem x candidate) rows, vectorised over numpy arrays.

One row per candidate of a problem; the same function serves training (hundreds of thousands of
rows) and the runtime hook (tens to a thousand rows of one problem, on a latency budget), so there
are no per-row Python loops: string columns are factorised once and mapped through small lookup
tables, a column that holds one value (a problem's own fields, in the hook) is reduced to a scalar,
and everything else is numpy arithmetic on whole columns.

The analytic part (tiles, waves, shared memory, roofline) follows Inductor's Triton mm template:
one CTA per ``BLOCK_M x BLOCK_N`` output tile (times the batch), a K loop of ``ceil(K / BLOCK_K)``
steps, ``EVEN_K`` when ``BLOCK_K`` divides K, ``num_stages`` buffers of the A and B tiles in shared
memory and an fp32 accumulator spread over ``32 * num_warps`` threads. Device properties come from
:class:`~predictor.core.device.DeviceInfo` (dataset/model metadata), never from magic numbers.

Families other than Triton get neutral tile features: counts and sizes 0, efficiencies 1.

Two ways in, one arithmetic (``_matrix``): ``feature_matrix`` reads a DataFrame (training, evaluation);
``runtime_features.runtime_feature_matrix`` reads a Problem and its Candidates straight into numpy (the hook, where building a
DataFrame cost more than the model). pandas and pyarrow are imported only by the DataFrame functions, so the
hook's import path carries neither (a quarter of a second at every compile's start).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .candidate import CANDIDATE_FIELDS, NUMERIC_FIELDS, Candidate
from .device import DeviceInfo
from .feature_names import ATEN_OPS, DTYPES, FAMILIES, FEATURE_NAMES, FP8_DTYPES, N_FEATURES, OPS, SCALED_OPS
from .problem import DTYPE_BYTES, PROBLEM_FIELDS, Problem

if TYPE_CHECKING:
    import pandas as pd

# The L2 -> SM bandwidth is not in the device metadata; the roofline's tile-reload term assumes it
# is this multiple of the measured DRAM bandwidth (about right for Hopper; it only has to order
# tile shapes, and the learned rankers see the raw byte counts anyway).
L2_BANDWIDTH_FACTOR = 3.0
# Used only when the device metadata lacks a number (e.g. DeviceInfo.from_torch without measurements).
FALLBACK_PEAK_TFLOPS = 100.0
FALLBACK_BANDWIDTH_GBS = 1000.0
# Decompose-K writes fp32 partial products (one m x n slab per split) and reads them back to sum them.
PARTIAL_BYTES = 4

_INDEX = {name: i for i, name in enumerate(FEATURE_NAMES)}
assert len(_INDEX) == N_FEATURES, "duplicate feature names"

_PROBLEM_NUMERIC = ("b", "m", "n", "k", "align")
_CANDIDATE_NUMERIC = NUMERIC_FIELDS  # Candidate.numbers is a row of these
_STRING = ("op", "dtype", "out_dtype", "layout_a", "layout_b", "family", "aten_op")
REQUIRED_COLUMNS = (*_PROBLEM_NUMERIC, *_CANDIDATE_NUMERIC, *_STRING)



def ideal_time_us(b: int, m: int, n: int, k: int, dtype: str, out_dtype: str, device: DeviceInfo) -> float:
    """The GEMM's ideal time on ``device``: max(flops at the dtype's peak, operand + output bytes at the memory
    bandwidth), in us. The same figure the features use as the aten rows' roofline (``log2_roofline_us``)."""
    peaks = {d: float(v) * 1e12 for d, v in (device.peak_tflops or {}).items() if v and v > 0}
    peak = peaks.get(dtype, max(peaks.values()) if peaks else FALLBACK_PEAK_TFLOPS * 1e12)
    bandwidth = (device.mem_bandwidth_gbs if device.mem_bandwidth_gbs and device.mem_bandwidth_gbs > 0
                 else FALLBACK_BANDWIDTH_GBS) * 1e9
    nbytes = b * ((m * k + k * n) * DTYPE_BYTES[dtype] + m * n * DTYPE_BYTES[out_dtype])
    return max(2.0 * b * m * n * k / peak, nbytes / bandwidth) * 1e6

def _neutral(values: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([_INDEX[name] for name in values]), np.array(list(values.values()), dtype=np.float32)


# What rows of other families read for the tile-only and decompose-K-only features: no tiles, no waste.
_TILE_NEUTRAL = _neutral({
    "log2_block_m": 0, "log2_block_n": 0, "log2_block_k": 0, "num_stages": 0, "num_warps": 0, "group_m": 0,
    "log2_tiles_m": 0, "log2_tiles_n": 0, "k_iters": 0, "even_k": 1, "eff_m": 1, "eff_n": 1, "eff_k": 1,
    "last_tile_m": 1, "last_tile_n": 1, "last_tile_k": 1, "pad_eff": 1, "log2_ctas": 0, "waves": 0, "waves_ceil": 0,
    "wave_eff": 1, "sm_fill": 1, "smem_stage_kb": 0, "smem_frac": 0, "smem_fits": 1, "acc_regs": 0,
    "tile_intensity": 0, "log2_tile_load_bytes": 0})
_DK_NEUTRAL = _neutral({"k_split": 0, "log2_k_per_split": 0, "log2_dk_extra_bytes": 0, "dk_extra_ratio": 0})

Values = np.ndarray | float  # a problem-level quantity is a scalar when the rows hold one problem


def _column(rows: pd.DataFrame, name: str):
    """The values of one column as an ndarray or ExtensionArray. ``DataFrame._get_column_array`` skips
    building a Series (about 10 us per column, a third of the hook's feature time); the public
    path is the fallback should pandas drop it."""
    try:
        position = rows.columns.get_loc(name)
    except KeyError:
        missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
        raise ValueError(f"rows lack the columns {', '.join(missing)} needed for features") from None
    getter = getattr(rows, "_get_column_array", None)
    if getter is not None and isinstance(position, int):
        return getter(position)
    return rows[name].array


def _string_codes(rows: pd.DataFrame, names: tuple[str, ...]) -> dict[str, tuple[np.ndarray | None, list]]:
    """Factorise string columns into {name: (codes, distinct values)}; ``codes`` is None when the column
    holds one value, and missing values get code -1. Arrow-backed strings (pandas' default) are
    dictionary-encoded together by pyarrow in one call: several times cheaper than ``pd.factorize`` each."""
    columns = [_column(rows, name) for name in names]
    if not all(hasattr(values, "__arrow_array__") for values in columns):
        return {name: _codes(values) for name, values in zip(names, columns, strict=True)}
    import pyarrow as pa

    chunks = []
    for values in columns:
        array = values.__arrow_array__()
        if isinstance(array, pa.ChunkedArray):
            array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
        chunks.append(array.cast(pa.large_string()) if array.type != pa.large_string() else array)
    encoded = pa.concat_arrays(chunks).dictionary_encode()
    indices = encoded.indices
    codes = (indices.fill_null(-1) if indices.null_count else indices).to_numpy().reshape(len(names), -1)
    uniques = encoded.dictionary.to_pylist()
    constant = (codes == codes[:, :1]).all(axis=1) & (codes[:, 0] >= 0)
    return {name: ((None, [uniques[row[0]]]) if const else (row, uniques))
            for name, row, const in zip(names, codes, constant, strict=True)}


def _codes(values) -> tuple[np.ndarray | None, list]:
    """``_string_codes`` for one column that is not arrow-backed."""
    import pandas as pd

    codes, uniques = pd.factorize(values)
    if len(uniques) == 1 and (codes == 0).all():
        return None, list(uniques)
    return codes, list(uniques)


def _present(codes: np.ndarray | None, uniques: list) -> list:
    """The distinct values a factorised column really holds (``uniques`` may be shared between columns)."""
    if codes is None:
        return uniques
    return [uniques[i] for i in np.unique(codes) if i >= 0]


def _lookup(codes: np.ndarray | None, uniques: list, table: dict, default: float = 0.0) -> Values:
    """Map factorised codes through ``table`` (value -> number); code -1 (missing) gets ``default``."""
    if codes is None:
        return float(table.get(uniques[0], default))
    lut = np.array([table.get(u, default) for u in uniques] + [default], dtype=np.float64)
    return lut[codes]


def _numeric(values, scalar_if_constant: bool = False) -> Values:
    """A numeric column as float64 (missing -> 0); a scalar when asked and the column holds one value."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        array = values.astype(np.float64)
    elif isinstance(values, np.ndarray) and values.dtype.kind == "f":
        array = np.nan_to_num(values.astype(np.float64), nan=0.0)
    else:
        import pandas as pd

        array = np.asarray(pd.array(values).to_numpy(dtype=np.float64, na_value=0.0))
    if scalar_if_constant and (array == array[0]).all():
        return float(array[0])
    return array


def _log2(x: Values) -> Values:
    return np.log2(np.maximum(x, 1e-30))


def _log2_each(*values: Values) -> list[Values]:
    """``np.log2`` of each value: one call for all when they are scalars (the hook's problem), else one each."""
    if any(isinstance(v, np.ndarray) and v.ndim for v in values):
        return [np.log2(v) for v in values]
    return list(np.log2(np.array(values, dtype=np.float64)))


def feature_matrix(rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
    """Features as a float32 array of shape (len(rows), len(FEATURE_NAMES)); the fast path rankers use."""
    if len(rows) == 0:
        return np.zeros((0, N_FEATURES), dtype=np.float32)
    problem = [_numeric(_column(rows, c), scalar_if_constant=True) for c in _PROBLEM_NUMERIC]
    candidate = np.array([_numeric(_column(rows, c)) for c in _CANDIDATE_NUMERIC])
    return _matrix(len(rows), problem, candidate, _string_codes(rows, _STRING), device)


# A list's candidate columns (``_candidate_columns``) and features (``_candidate_part``, per input dtype size and
# device) by the identity of its Candidates, which the hook shares between GEMMs (``candidates_from_choices``):
# every GEMM of a compile with the same list reuses them. Each entry holds its Candidates, so no id in a key can
# be reused while the entry lives.
def _matrix(n_rows: int, problem: list[Values], candidate: np.ndarray, strs: dict[str, tuple[np.ndarray | None, list]],
            device: DeviceInfo, parts: dict | None = None) -> np.ndarray:
    """The features from columns: ``problem`` (b, m, n, k, align; scalars where constant), ``candidate``
    (``_CANDIDATE_NUMERIC`` as a (7, rows) float64 array) and ``strs`` (``_STRING``, factorised); ``parts``
    remembers the candidates' own features (``_candidate_part``) for another problem with the same candidates.

    The hook's lists have ~30 rows, where each numpy call costs more than its arithmetic: M, N and K go through
    the tile formulas as one (3, rows) array, and the problem's logarithms are one call. Every value still comes
    from the same operations in the same order, so the features are the same bit for bit."""
    # filled one feature at a time (contiguous), handed out as an (n_rows, n_features) view
    out = np.zeros((N_FEATURES, n_rows), dtype=np.float32)

    put, put_rows = partial(_put, out), partial(_put_rows, out)

    b, m, n, k, align = problem
    b, m, n, k = (np.maximum(x, 1.0) for x in (b, m, n, k))

    dtype_codes, dtype_values = strs["dtype"]
    out_codes, out_values = strs["out_dtype"]
    unknown = ([d for d in _present(dtype_codes, dtype_values) if d not in DTYPE_BYTES]
               + [d for d in _present(out_codes, out_values) if d not in DTYPE_BYTES and d != ""])
    if unknown or (dtype_codes is not None and (dtype_codes < 0).any()):
        raise ValueError(f"rows hold unknown or missing dtypes {sorted(map(str, unknown))}; "
                         f"expected {', '.join(DTYPE_BYTES)}")
    in_bytes = _lookup(dtype_codes, dtype_values, DTYPE_BYTES)
    out_bytes = _lookup(out_codes, out_values, DTYPE_BYTES)
    if "" in _present(out_codes, out_values) or (out_codes is not None and (out_codes < 0).any()):
        # out_dtype not given: the Problem default (int32 for int8, else the input dtype)
        out_bytes = np.where(out_bytes > 0, out_bytes, np.where(in_bytes == 1, 4.0, in_bytes))

    # device constants
    peak_table = {d: float(v) * 1e12 for d, v in (device.peak_tflops or {}).items() if v and v > 0}
    fallback_peak = max(peak_table.values()) if peak_table else FALLBACK_PEAK_TFLOPS * 1e12
    peak = _lookup(dtype_codes, dtype_values, peak_table, fallback_peak)
    bandwidth = (device.mem_bandwidth_gbs if device.mem_bandwidth_gbs and device.mem_bandwidth_gbs > 0
                 else FALLBACK_BANDWIDTH_GBS) * 1e9
    sm_count = float(max(device.sm_count, 1))
    smem_limit = float(max(device.smem_per_block, 1))

    # ---- problem
    flops = 2.0 * b * m * n * k
    ideal_bytes = b * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    ideal_us = np.maximum(flops / peak, ideal_bytes / bandwidth) * 1e6
    log2_m, log2_n, log2_k, log2_b, log2_flops, log2_intensity, log2_ideal_us = _log2_each(
        m, n, k, b, flops, flops / ideal_bytes, np.maximum(ideal_us, 1e-30))
    put(log2_m=log2_m, log2_n=log2_n, log2_k=log2_k, log2_b=log2_b, log2_flops=log2_flops,
        log2_intensity=log2_intensity, log2_ideal_us=log2_ideal_us)
    _one_hot(out, dtype_codes, dtype_values, DTYPES, "dtype_float16")
    put(in_bytes=in_bytes, out_bytes=out_bytes)
    put(layout_a_col=_lookup(*strs["layout_a"], {"col": 1.0}))
    put(layout_b_col=_lookup(*strs["layout_b"], {"col": 1.0}))
    put(align_bytes=align)
    put(m_aligned16=(m * in_bytes) % 16 == 0)
    put(n_aligned16=(n * in_bytes) % 16 == 0)
    put(k_aligned16=(k * in_bytes) % 16 == 0)
    _one_hot(out, *strs["op"], OPS, "op_mm")
    _one_hot(out, dtype_codes, dtype_values, FP8_DTYPES, "dtype_float8_e4m3fn")
    _one_hot(out, *strs["op"], SCALED_OPS, "op_scaled_mm_tensorwise")

    # ---- the candidates alone
    part = parts.get((in_bytes, smem_limit)) if parts is not None and np.ndim(in_bytes) == 0 else None
    if part is None:
        part = _candidate_part(out, candidate, strs, in_bytes, smem_limit)
        if parts is not None and np.ndim(in_bytes) == 0:
            parts[(in_bytes, smem_limit)] = part
    else:
        out[_CANDIDATE_ONLY] = part[0]
    _, is_tile, is_dk = part
    # Tile features are computed for every row (block sizes of 0 read as 1) and overwritten with their
    # neutral values for non-tile rows at the end: one masked store instead of a np.where per feature.
    blocks = np.maximum(candidate[:3], 1.0)  # BLOCK_M, BLOCK_N, BLOCK_K
    bm, bn, bk = blocks

    # ---- tiles and quantisation, M, N and K at once
    scalars = all(np.ndim(x) == 0 for x in (m, n, k))
    dims = np.array([[m], [n], [k]]) if scalars else np.array(np.broadcast_arrays(m, n, k))
    tiles = np.ceil(dims / blocks)
    tiles_m, tiles_n, tiles_k = tiles
    put_rows("log2_tiles_m", np.log2(tiles[:2]))
    put(k_iters=tiles_k)
    put(even_k=(k % bk) == 0)
    eff = dims / (tiles * blocks)
    put_rows("eff_m", eff)
    put_rows("last_tile_m", (dims - (tiles - 1.0) * blocks) / blocks)
    put(pad_eff=eff[0] * eff[1] * eff[2])

    # ---- parallelism: one CTA per output tile (the persistent TMA kernel loops over the same tiles)
    ctas = b * tiles_m * tiles_n
    waves = ctas / sm_count
    waves_ceil = np.ceil(waves)
    put(log2_ctas=np.log2(ctas))
    put(waves=waves, waves_ceil=waves_ceil)
    put(wave_eff=waves / waves_ceil)
    put(sm_fill=np.minimum(ctas, sm_count) / sm_count)

    # ---- decompose-K: k_split bmm slabs of fp32 partial sums, written, then read back by the sum
    splits = np.maximum(candidate[6], 1.0)  # k_split
    dk_extra = (2.0 * PARTIAL_BYTES) * b * m * n * splits
    put(log2_k_per_split=np.log2(k / splits))
    put(log2_dk_extra_bytes=np.log2(1.0 + dk_extra))
    put(dk_extra_ratio=dk_extra / ideal_bytes)

    # ---- roofline (us). Tiles: every wave costs one CTA's padded tile work at 1/sm_count of the peak;
    # operand tiles are reloaded by every CTA (from L2); DRAM moves the operands once.
    padded_k = tiles_k * bk
    tile_loads = ctas * (bm + bn) * padded_k * in_bytes
    tile_compute = waves_ceil * (2.0 * sm_count) * bm * bn * padded_k / peak
    tile_us = np.maximum(np.maximum(tile_compute, ideal_bytes / bandwidth),
                         tile_loads / (L2_BANDWIDTH_FACTOR * bandwidth)) * 1e6
    dk_us = np.maximum(flops / peak, (ideal_bytes + dk_extra) / bandwidth) * 1e6
    log2_roofline = _log2(np.where(is_tile, tile_us, np.where(is_dk, dk_us, ideal_us)))
    put(log2_tile_load_bytes=np.log2(1.0 + tile_loads))
    put(log2_roofline_us=log2_roofline)
    put(roofline_ratio_log2=log2_roofline - log2_ideal_us)

    _neutralise(out, ~is_tile, _TILE_NEUTRAL)
    _neutralise(out, ~is_dk, _DK_NEUTRAL)
    return out.T


# The features of a candidate alone (given the input dtype's size and the device): the same for every problem.
_CANDIDATE_ONLY = [_INDEX[name] for name in (
    *(f"family_{f}" for f in FAMILIES), *(f"aten_{o.lstrip('_')}" for o in ATEN_OPS), "aten_scaled_mm",
    "log2_block_m", "log2_block_n", "log2_block_k", "num_stages", "num_warps", "group_m",
    "smem_stage_kb", "smem_frac", "smem_fits", "acc_regs", "tile_intensity", "k_split")]


def _candidate_part(out: np.ndarray, candidate: np.ndarray, strs: dict[str, tuple[np.ndarray | None, list]],
                    in_bytes: Values, smem_limit: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Write the ``_CANDIDATE_ONLY`` features into ``out``; return them (a copy) and which rows are tiles and
    decompose-K."""
    put = partial(_put, out)

    # ---- identity
    _one_hot(out, *strs["family"], FAMILIES, "family_triton_mm")
    is_tile = (out[_INDEX["family_triton_mm"]] + out[_INDEX["family_triton_tma"]]) > 0
    is_dk = out[_INDEX["family_decompose_k"]] > 0
    _one_hot(out, *strs["aten_op"], ATEN_OPS, "aten_mm")
    _one_hot(out, *strs["aten_op"], ("_scaled_mm",), "aten_scaled_mm")
    blocks = np.maximum(candidate[:3], 1.0)  # BLOCK_M, BLOCK_N, BLOCK_K
    bm, bn, bk = blocks
    stages, warps = np.maximum(candidate[3:5], 1.0)
    _put_rows(out, "log2_block_m", np.log2(blocks))
    _put_rows(out, "num_stages", candidate[3:6])  # num_stages, num_warps, group_m
    put(k_split=np.maximum(candidate[6], 1.0))

    # ---- resources
    stage_bytes = (bm * bk + bk * bn) * in_bytes
    smem_frac = stage_bytes * stages / smem_limit
    put(smem_stage_kb=stage_bytes / 1024.0)
    put(smem_frac=smem_frac)
    put(smem_fits=smem_frac <= 1.0)
    put(acc_regs=bm * bn / (32.0 * warps))
    put(tile_intensity=(2.0 / in_bytes) * bm * bn / (bm + bn))
    return out[_CANDIDATE_ONLY], is_tile, is_dk


def _put(out: np.ndarray, **values: Values) -> None:
    """Write each named feature's values (a row of ``out``: features are rows until ``_matrix`` transposes)."""
    for name, value in values.items():
        out[_INDEX[name]] = value


def _put_rows(out: np.ndarray, first: str, values: np.ndarray) -> None:
    """Write consecutive features from ``first``, one per row of ``values``."""
    start = _INDEX[first]
    out[start:start + len(values)] = values


def _one_hot(out: np.ndarray, codes: np.ndarray | None, uniques: list, vocabulary: tuple, first: str) -> None:
    """Write the one-hot encoding of a factorised column into the consecutive features from ``first`` (still 0:
    ``out`` starts as zeros and each feature is written once)."""
    start = _INDEX[first]
    if codes is None:  # one value in every row (the hook's problem fields): one feature of 1s, or none
        if uniques[0] in vocabulary:
            out[start + vocabulary.index(uniques[0])] = 1.0
        return
    table = np.zeros((len(uniques) + 1, len(vocabulary)), dtype=np.float32)  # last row: missing
    for i, value in enumerate(uniques):
        if value in vocabulary:
            table[i, vocabulary.index(value)] = 1.0
    out[start:start + len(vocabulary)] = table[codes].T


def _neutralise(out: np.ndarray, mask: np.ndarray, neutral: tuple[np.ndarray, np.ndarray]) -> None:
    """Set the features ``neutral[0]`` of the rows in ``mask`` to the values ``neutral[1]``."""
    where = np.flatnonzero(mask)
    if len(where):
        out[neutral[0][:, None], where] = neutral[1][:, None]


def compute_features(rows: pd.DataFrame, device: DeviceInfo) -> pd.DataFrame:
    """Features as a float32 DataFrame with columns ``FEATURE_NAMES`` and the rows' index."""
    import pandas as pd

    return pd.DataFrame(feature_matrix(rows, device), columns=FEATURE_NAMES, index=rows.index, copy=False)


def ranker_rows(problem: Problem, cands: list[Candidate], hints: list[int | None]) -> pd.DataFrame:
    """Ranker rows: the problem's fields (M replaced by each choice's multi-kernel hint) + candidate fields."""
    import pandas as pd

    columns: dict[str, Any] = {name: getattr(problem, name) for name in PROBLEM_FIELDS}
    if any(h is not None for h in hints):
        columns["m"] = [problem.m if h is None else int(h) for h in hints]
    for name in CANDIDATE_FIELDS:
        columns[name] = [getattr(c, name) for c in cands]
    return pd.DataFrame(columns)
