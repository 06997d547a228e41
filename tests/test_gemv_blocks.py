"""The GEMV block choice on the CPU: the shipped table, the pooled choice, recognising a GEMV kernel, the heuristic
line rewritten in a generated kernel, and the held-out evaluation of the shipped labels.
(On a GPU: tests/test_gpu_gemv_blocks.py.)"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from predictor.offline import gemv_blocks_fit
from predictor.runtime import gemv_blocks as gb

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "models" / "gemv-blocks" / "nvidia-h200.json"
LABELS = ROOT / "datasets" / "nvidia-h200" / "gemv_blocks.parquet"

# what Inductor's TritonKernel.codegen_kernel emits for a reduction (torch 2.11 and 2.13)
GENERATED = '''
@triton_heuristics.reduction(
    size_hints={'x': 32768, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16'}},
    inductor_meta={'kernel_name': 'triton_red_fused_mm_0'}
)
@triton.jit
def triton_red_fused_mm_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    pass
'''


def test_config_names_round_trip_and_every_grid_config_is_named_once():
    names = [gb.config_name(c) for c in gb.GRID]
    assert len(set(names)) == len(names)
    assert all(gb.parse_config_name(n) == c for n, c in zip(names, gb.GRID))
    with pytest.raises(ValueError, match="X8_R256"):
        gb.parse_config_name("XBLOCK=8")


def test_one_config_becomes_inductors_fixed_config_and_several_its_user_autotune():
    one = gb.with_configs(GENERATED, [gb.parse_config_name("X1_R1024_w8")])
    assert "@triton_heuristics.fixed_config(\n    config={'XBLOCK': 1, 'R0_BLOCK': 1024, 'num_warps': 8, " in one
    assert "size_hints" not in one and "reduction_hint" not in one
    assert "filename=__file__" in one and "inductor_meta={'kernel_name'" in one and one.endswith(GENERATED[-60:])
    several = gb.with_configs(GENERATED, list(gb.GRID[:3]))
    assert several.count("'XBLOCK'") == 3 and "@triton_heuristics.user_autotune(" in several
    assert gb.with_configs(GENERATED.replace(".reduction(", ".pointwise("), [gb.GRID[0]]) is None
    assert gb.with_configs(GENERATED, []) is None


class _Origin:
    """An FX node as a kernel's ``origins`` hold it (hashed by identity, like fx.Node)."""

    def __init__(self, target, original, dtype):
        self.target = target
        self.meta = {"original_aten": original, "val": types.SimpleNamespace(dtype=dtype)}


def _origin(target, original, dtype="torch.bfloat16"):
    return _Origin(target, original, dtype)


def _kernel(*reductions, numels=None, persistent=False):
    nodes = [types.SimpleNamespace(is_reduction=lambda: True, node=types.SimpleNamespace(origins=set(origins)))
             for origins in reductions]
    return types.SimpleNamespace(inside_reduction=True, persistent_reduction=persistent, cooperative_reduction=False,
                                 numels=numels or {"x": 5632, "r0_": 2048},
                                 features=types.SimpleNamespace(scheduler_nodes=lambda: nodes))


SUM, MM = "aten.sum.dim_IntList", "aten.mm.default"


def test_describe_counts_the_gemv_sums_of_a_kernel():
    gate, up = _origin(SUM, MM), _origin(SUM, MM)
    assert gb.describe(_kernel([gate])) == gb.GemvKernel(5632, 2048, "bfloat16", 1)
    assert gb.describe(_kernel([gate], [up])) == gb.GemvKernel(5632, 2048, "bfloat16", 2)
    scaled = _origin("aten.mul.Tensor", MM)  # pointwise work fused ahead of the sum shares its node's origins
    assert gb.describe(_kernel([gate, scaled])) == gb.GemvKernel(5632, 2048, "bfloat16", 1)


def test_describe_leaves_every_other_kernel_to_inductor():
    gemv = _origin(SUM, MM)
    assert gb.describe(_kernel([_origin(SUM, "aten.sum.dim_IntList")])) is None  # a plain sum, not a GEMM's
    assert gb.describe(_kernel([_origin("aten.mean.dim", None)], [gemv])) is None  # a norm's mean beside the GEMV
    assert gb.describe(_kernel([gemv], persistent=True)) is None
    assert gb.describe(_kernel([gemv], numels={"x": 64, "y": 8, "r0_": 2048})) is None
    assert gb.describe(_kernel([gemv], numels={"x": object(), "r0_": 2048})) is None  # a symbolic size
    assert gb.describe(types.SimpleNamespace(inside_reduction=False)) is None


def test_shipped_table_reads_and_fits_its_gpu_and_architecture():
    rows = gb.read_table(TABLE)
    assert rows and all(r["times"] for r in rows)
    assert gb.table_path("NVIDIA H200", [ROOT / "models"]) == TABLE
    assert gb.table_path("NVIDIA H100 80GB HBM3", [ROOT / "models"]) is None
    assert gb.table_path("NVIDIA H100 80GB HBM3", [ROOT / "models"], capability="9.0") == TABLE
    assert gb.table_path("NVIDIA A100-SXM4-80GB", [ROOT / "models"], capability="8.0") is None


def test_a_broken_table_is_refused_naming_the_file(tmp_path):
    bad = tmp_path / "nvidia-h200.json"
    bad.write_text(json.dumps({"problems": [{"n": 1, "k": 2, "dtype": "bfloat16", "weights": 1,
                                             "times": {"fast": 1.0}}]}))
    with pytest.raises(ValueError, match=str(bad)):
        gb.read_table(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="not a GEMV block table"):
        gb.read_table(bad)


def _row(n, k, weights, times, dtype="bfloat16"):
    return {"n": n, "k": k, "dtype": dtype, "weights": weights, "times": times}


def _best(kernel, rows):
    chosen = gb.choose_from_table(kernel, rows)
    return chosen and gb.config_name(chosen[0])


def test_single_gemvs_follow_their_nearest_problem_and_pairs_the_pool():
    rows = [_row(4096, 4096, 1, {"X1_R1024_w8": 10.0, "X4_R256_w4": 12.0}),
            _row(32000, 2048, 1, {"X1_R1024_w8": 40.0, "X4_R256_w4": 30.0}),
            _row(5632, 2048, 2, {"X1_R1024_w8": 20.0, "X4_R256_w4": 19.9}),
            _row(8960, 1536, 2, {"X1_R1024_w8": 20.0, "X4_R256_w4": 30.0}),
            _row(14336, 4096, 2, {"X1_R1024_w8": 20.0, "X4_R256_w4": 30.0})]
    assert _best(gb.GemvKernel(3000, 4096, "bfloat16"), rows) == "X1_R1024_w8"
    assert _best(gb.GemvKernel(50000, 2048, "float16"), rows) == "X4_R256_w4"
    # the nearest pair alone would say X4_R256_w4 by 0.5%; the three nearest agree on X1_R1024_w8
    assert _best(gb.GemvKernel(5632, 2048, "bfloat16", 2), rows) == "X1_R1024_w8"
    # a config larger than the problem is never chosen
    assert _best(gb.GemvKernel(3000, 512, "bfloat16"), rows) == "X4_R256_w4"
    assert gb.choose_from_table(gb.GemvKernel(3000, 4096, "bfloat16"), []) is None


def test_held_out_table_beats_cublas_and_inductors_default_blocks_on_the_shipped_labels():
    from predictor.offline.gemv_eval import read_labels

    probs = gemv_blocks_fit.problems(read_labels(LABELS, gemv_blocks_fit.KIND))
    scores = gemv_blocks_fit.evaluate(probs).loc[f"all ({len(probs)})"]
    assert scores["table (held out)"] > scores["max-n-rule"] + 0.02  # the same rule, default blocks
    assert scores["table (held out)"] > scores["cublas-only"] + 0.05
    assert scores["table at every width"] > scores["reduction-default"] + 0.05
    # the shipped table is this fit of the shipped labels
    shipped = json.loads(TABLE.read_text())["problems"]
    assert shipped == gemv_blocks_fit.table_rows(probs)


def test_tuned_mode_hands_inductor_the_tables_top_k_configs_best_first(monkeypatch):
    import predictor
    from predictor.runtime import compiling

    rows = [_row(4096, 4096, 1, {"X1_R1024_w8": 10.0, "X4_R256_w4": 12.0, "X2_R512_w4": 11.0, "X1_R512_w4": 15.0})]
    monkeypatch.setattr(gb, "table_for_this_gpu", lambda: rows)
    kernel = gb.GemvKernel(4096, 4096, "bfloat16")
    assert gb.ranked_configs(kernel, rows) == ["X1_R1024_w8", "X2_R512_w4", "X4_R256_w4", "X1_R512_w4"]
    assert gb.choose_from_table(kernel, rows) == [gb.parse_config_name("X1_R1024_w8")]
    assert [gb.config_name(c) for c in gb.choose_from_table(kernel, rows, top=3)] == ["X1_R1024_w8", "X2_R512_w4",
                                                                                      "X4_R256_w4"]
    try:
        compiling.prepare(tune=3)
        assert [gb.config_name(c) for c in compiling.gemv_choice()(kernel)] == ["X1_R1024_w8", "X2_R512_w4",
                                                                               "X4_R256_w4"]
        predictor.uninstall()
        compiling.prepare()  # the default decides: one config
        assert compiling.gemv_choice()(kernel) == [gb.parse_config_name("X1_R1024_w8")]
    finally:
        while compiling.installing._STACK:
            predictor.uninstall()
