"""The features' names, in the order every model reads them, and the vocabularies their one-hot columns spell
out. Apart from the arithmetic (``features``) so that a model file can be checked against them with nothing else."""

from __future__ import annotations

DTYPES = ("float16", "bfloat16", "float32", "int8")
OPS = ("mm", "addmm", "bmm", "int_mm")
FAMILIES = ("triton_mm", "triton_tma", "decompose_k", "aten")
ATEN_OPS = ("mm", "addmm", "bias_addmm", "bmm", "_int_mm")
# Added after the first models (fp8 _scaled_mm): appended at the end of FEATURE_NAMES, so a model trained on the
# features before them (a prefix) still loads and scores on its own columns (``model_feature_count``).
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
SCALED_OPS = ("scaled_mm_tensorwise", "scaled_mm_rowwise")

FEATURE_NAMES: list[str] = [
    # problem
    "log2_m", "log2_n", "log2_k", "log2_b", "log2_flops", "log2_intensity", "log2_ideal_us",
    *(f"dtype_{d}" for d in DTYPES), "in_bytes", "out_bytes",
    "layout_a_col", "layout_b_col", "align_bytes", "m_aligned16", "n_aligned16", "k_aligned16",
    *(f"op_{o}" for o in OPS),
    # candidate identity
    *(f"family_{f}" for f in FAMILIES), *(f"aten_{o.lstrip('_')}" for o in ATEN_OPS),
    "log2_block_m", "log2_block_n", "log2_block_k", "num_stages", "num_warps", "group_m",
    # tiles and quantisation (useful fraction of the padded work, and of the last tile)
    "log2_tiles_m", "log2_tiles_n", "k_iters", "even_k",
    "eff_m", "eff_n", "eff_k", "last_tile_m", "last_tile_n", "last_tile_k", "pad_eff",
    # parallelism over the SMs
    "log2_ctas", "waves", "waves_ceil", "wave_eff", "sm_fill",
    # resources
    "smem_stage_kb", "smem_frac", "smem_fits", "acc_regs", "tile_intensity",
    # decompose-K
    "k_split", "log2_k_per_split", "log2_dk_extra_bytes", "dk_extra_ratio",
    # roofline
    "log2_tile_load_bytes", "log2_roofline_us", "roofline_ratio_log2",
    # fp8 scaled mm (appended: see FP8_DTYPES)
    *(f"dtype_{d}" for d in FP8_DTYPES), *(f"op_{o}" for o in SCALED_OPS), "aten_scaled_mm",
]
N_FEATURES = len(FEATURE_NAMES)


def model_feature_count(names: list[str] | tuple[str, ...]) -> int:
    """How many leading columns of ``FEATURE_NAMES`` a model reads: its features must be a prefix of them (the
    library appends new features, never reorders). Raises ValueError naming the first difference."""
    names = list(names)
    if names == FEATURE_NAMES[:len(names)] and names:
        return len(names)
    first = next((i for i, (a, b) in enumerate(zip(names, FEATURE_NAMES, strict=False)) if a != b),
                 min(len(names), len(FEATURE_NAMES)))
    theirs = names[first] if first < len(names) else "(end)"
    ours = FEATURE_NAMES[first] if first < len(FEATURE_NAMES) else "(end)"
    raise ValueError(f"model uses {len(names)} features, this library computes {len(FEATURE_NAMES)}; they differ "
                     f"from #{first} ({theirs!r} vs {ours!r}); retrain it")
