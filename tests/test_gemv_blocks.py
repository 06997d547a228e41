"""The GEMV block choice on the CPU: the shipped table, the pooled choice, recognising a GEMV kernel, the heuristic
line rewritten in a generated kernel, and the held-out evaluation of the shipped labels.
(On a GPU: tests/test_gpu_gemv_blocks.py.)"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from predictor.offline import gemv_blocks_fit
from predictor.runtime.choices import installed
from predictor.runtime.lowerings import gemv_blocks, gemv_table
from predictor.artifacts.roots import table_path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "models" / "gemv-blocks" / "nvidia-h200.json"

def _generated(heuristic, r0_hint, name, parameters, body):
    """A reduction kernel as Inductor's TritonKernel.codegen_kernel emits it (torch 2.11 and 2.13)."""
    return f'''
@triton_heuristics.{heuristic}(
    size_hints={{'x': 32768, 'r0_': {r0_hint}}},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={{'signature': {{'in_ptr0': '*bf16'}}}},
    inductor_meta={{'kernel_name': '{name}'}}
)
@triton.jit
def {name}({parameters}):
{body}'''


GENERATED = _generated("reduction", 2048, "triton_red_fused_mm_0",
                       "in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr",
                       "    pass\n")


def test_config_names_round_trip_and_every_grid_config_is_named_once():
    names = [gemv_table.config_name(c) for c in gemv_table.GRID]
    assert len(set(names)) == len(names)
    assert all(gemv_table.parse_config_name(n) == c for n, c in zip(names, gemv_table.GRID))
    with pytest.raises(ValueError, match="X8_R256"):
        gemv_table.parse_config_name("XBLOCK=8")


def test_one_config_becomes_inductors_fixed_config_and_several_its_user_autotune():
    one = gemv_blocks.with_configs(GENERATED, [gemv_table.parse_config_name("X1_R1024_w8")])
    assert "@triton_heuristics.fixed_config(\n    config={'XBLOCK': 1, 'R0_BLOCK': 1024, 'num_warps': 8, " in one
    assert "size_hints" not in one and "reduction_hint" not in one
    assert "filename=__file__" in one and "inductor_meta={'kernel_name'" in one and one.endswith(GENERATED[-60:])
    several = gemv_blocks.with_configs(GENERATED, list(gemv_table.GRID[:3]))
    assert several.count("'XBLOCK'") == 3 and "@triton_heuristics.user_autotune(" in several
    assert gemv_blocks.with_configs(GENERATED.replace(".reduction(", ".pointwise("), [gemv_table.GRID[0]]) is None
    assert gemv_blocks.with_configs(GENERATED, []) is None


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
    assert gemv_blocks.describe(_kernel([gate])) == gemv_table.GemvKernel(5632, 2048, "bfloat16", 1)
    assert gemv_blocks.describe(_kernel([gate], [up])) == gemv_table.GemvKernel(5632, 2048, "bfloat16", 2)
    scaled = _origin("aten.mul.Tensor", MM)  # pointwise work fused ahead of the sum shares its node's origins
    assert gemv_blocks.describe(_kernel([gate, scaled])) == gemv_table.GemvKernel(5632, 2048, "bfloat16", 1)


def test_describe_leaves_every_other_kernel_to_inductor():
    gemv = _origin(SUM, MM)
    assert gemv_blocks.describe(_kernel([_origin(SUM, "aten.sum.dim_IntList")])) is None  # a plain sum, not a GEMM's
    assert gemv_blocks.describe(_kernel([_origin("aten.mean.dim", None)], [gemv])) is None  # a norm's mean beside the GEMV
    assert gemv_blocks.describe(_kernel([gemv], persistent=True)) is None
    assert gemv_blocks.describe(_kernel([gemv], numels={"x": 64, "y": 8, "r0_": 2048})) is None
    assert gemv_blocks.describe(_kernel([gemv], numels={"x": object(), "r0_": 2048})) is None  # a symbolic size
    assert gemv_blocks.describe(types.SimpleNamespace(inside_reduction=False)) is None


# the loads of generated GEMV kernels (torch 2.11's TritonKernel.load): weight rows carry x0, the vector does not
PLAIN_LOADS = """
        tmp0 = tl.load(in_ptr0 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp2 = tl.load(in_ptr1 + (r0_1 + 5632*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
    tmp9 = tl.load(in_ptr2 + (x0), xmask, eviction_policy='evict_last')
"""
SILU_MUL_LOADS = """
        tmp0 = tl.load(in_ptr0 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp5 = tl.load(in_ptr1 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp8 = tl.load(in_ptr2 + (r0_1 + 5632*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp3 = tl.load(in_ptr0 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
"""
NORM_LOADS = """
    tmp2 = tl.load(in_ptr1 + (0))
        tmp0 = tl.load(in_ptr0 + (((r0_1 // 2) % 2048)), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp6 = tl.load(in_ptr2 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp9 = tl.load(in_ptr3 + (r0_1 + 2048*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
"""


def test_vector_loads_count_the_inputs_every_program_reads_again():
    assert gemv_blocks.count_vector_loads(PLAIN_LOADS) == 1  # the vector; the weight and a bias are indexed by the row
    assert gemv_blocks.count_vector_loads(SILU_MUL_LOADS) == 2  # the gate and up outputs (one of them loaded twice)
    assert gemv_blocks.count_vector_loads(NORM_LOADS) == 2  # the norm's input and scale; its one statistic is a scalar
    assert gemv_blocks.count_vector_loads("") == 1


def test_kernels_with_work_fused_ahead_take_the_blocks_labelled_with_it():
    rows = [_row(2048, 5632, 1, {"X1_R1024_w8": 10.0, "X8_R256_w8": 12.0}),
            {**_row(2048, 5632, 1, {"X1_R1024_w8": 20.0, "X8_R256_w8": 11.0}), "vector_loads": 2,
             "activation_ahead": True},
            {**_row(2048, 2048, 1, {"X1_R1024_w8": 9.0, "X8_R256_w8": 10.0}), "vector_loads": 2},
            {**_row(4096, 14336, 1, {"X1_R1024_w8": 30.0, "X8_R256_w8": 31.0}), "vector_loads": 3}]
    assert _best(gemv_table.GemvKernel(2048, 5632, "bfloat16"), rows) == "X1_R1024_w8"
    silu_mul = gemv_table.GemvKernel(2048, 5632, "bfloat16", vector_loads=2, activation_ahead=True)
    assert _best(silu_mul, rows) == "X8_R256_w8"
    assert gemv_table.nearest_rows(silu_mul, rows, 3) == [rows[1]]  # only the labels with an activation ahead
    # a norm's scaling ahead (two loads, no activation): the label of its kind, not the nearer shape
    assert gemv_table.nearest_rows(gemv_table.GemvKernel(2048, 5632, "bfloat16", vector_loads=2), rows)[0] is rows[2]
    # no label with as many loads: the nearest count, here 3, before the nearest shape
    assert gemv_table.nearest_rows(gemv_table.GemvKernel(2048, 5632, "bfloat16", vector_loads=4), rows)[0]["k"] == 14336


ACTIVATED_LOOP = """
    xmask = xindex < xnumel
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        tmp0 = tl.load(in_ptr0 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp1 = tl.sigmoid(tmp0)
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
    tmp4 = tl.sum(_tmp4, 1)[:, None]
"""


def test_an_activation_counts_only_inside_the_reduction_loop():
    assert gemv_blocks.count_activations_ahead(ACTIVATED_LOOP) == 1
    after = ACTIVATED_LOOP.replace("        tmp1 = tl.sigmoid(tmp0)\n", "") + "    tmp9 = tl.sigmoid(tmp4)\n"
    assert gemv_blocks.count_activations_ahead(after) == 0  # a pair's SiLU on its products: once per row
    tanh = ACTIVATED_LOOP.replace("tl.sigmoid(", "libdevice.tanh(")
    assert gemv_blocks.count_activations_ahead(tanh) == 1
    assert gemv_blocks.count_activations_ahead(ACTIVATED_LOOP.replace("tl.sigmoid(", "libdevice.rsqrt(")) == 0  # a norm's
    assert gemv_blocks.count_activations_ahead("def f():\n    pass\n") == 0


def test_collector_corpus_covers_every_form_and_keeps_the_first_problem_ids():
    from collectors import gemv_blocks as collector

    problems = collector.corpus()
    short = collector.short_corpus()
    assert problems[-len(short):] == short  # the short K problems come after the first ones: their ids stay
    assert {p["form"] for p in problems} == set(collector.FORMS)
    assert {p["form"]: p["weights"] for p in problems} == {"plain": 1, "silu_mul": 1, "norm": 1, "add_norm": 1,
                                                           "pair": 2, "norm_pair": 2, "add_norm_pair": 2}
    assert all(p["k"] >= gemv_table.MIN_K for p in problems[:-len(short)]) and all(p["k"] < gemv_table.MIN_K for p in short)
    assert {p["form"] for p in short} == set(collector.FORMS) - {"silu_mul"}  # a down projection's K is long
    assert ("plain", 151936, 896) in {(p["form"], p["n"], p["k"]) for p in short}
    ops = {collector.problem_op(p) for p in problems}
    assert {"mm-x1", "mm-x2", "mm-x1-silu_mul", "mm-x1-norm", "mm-x1-add_norm", "mm-x2-norm_pair",
            "mm-x2-add_norm_pair"} == ops
    tiny = [p for p in problems if p["family_tag"] == "gemv:tinyllama-1.1b"]
    assert {(p["form"], p["n"], p["k"]) for p in tiny} >= {("silu_mul", 2048, 5632), ("norm", 2048, 2048),
                                                           ("norm_pair", 5632, 2048), ("norm", 32000, 2048),
                                                           ("add_norm", 32000, 2048)}


def test_shipped_table_reads_and_fits_its_gpu_and_architecture():
    rows = gemv_table.read_table(TABLE)
    assert rows and all(r["times"] for r in rows)
    assert table_path("NVIDIA H200", [ROOT / "models"], folder=gemv_table.TABLE_FOLDER) == TABLE
    h100 = table_path("NVIDIA H100 80GB HBM3", [ROOT / "models"], folder=gemv_table.TABLE_FOLDER)
    assert h100 == TABLE.with_name("nvidia-h100.json")
    nvl = table_path("NVIDIA H100 NVL", [ROOT / "models"], capability="9.0", folder=gemv_table.TABLE_FOLDER)
    assert nvl.parent == TABLE.parent
    assert table_path("NVIDIA GH200 480GB", [ROOT / "models"], folder=gemv_table.TABLE_FOLDER) is None
    assert table_path("NVIDIA A100-SXM4-80GB", [ROOT / "models"], capability="8.0",
                      folder=gemv_table.TABLE_FOLDER) is None


def test_a_broken_table_is_refused_naming_the_file(tmp_path):
    bad = tmp_path / "nvidia-h200.json"
    bad.write_text(json.dumps({"problems": [{"n": 1, "k": 2, "dtype": "bfloat16", "weights": 1,
                                             "times": {"fast": 1.0}}]}))
    with pytest.raises(ValueError, match=str(bad)):
        gemv_table.read_table(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="not a GEMV block table"):
        gemv_table.read_table(bad)


def _row(n, k, weights, times, dtype="bfloat16"):
    return {"n": n, "k": k, "dtype": dtype, "weights": weights, "times": times}


def _best(kernel, rows):
    chosen = gemv_table.choose_from_table(kernel, rows)
    return chosen and gemv_table.config_name(chosen[0])


def test_single_gemvs_follow_their_nearest_problem_and_pairs_the_pool():
    rows = [_row(4096, 4096, 1, {"X1_R1024_w8": 10.0, "X4_R256_w4": 12.0}),
            _row(32000, 2048, 1, {"X1_R1024_w8": 40.0, "X4_R256_w4": 30.0}),
            _row(5632, 2048, 2, {"X1_R1024_w8": 20.0, "X4_R256_w4": 19.9}),
            _row(8960, 1536, 2, {"X1_R1024_w8": 20.0, "X4_R256_w4": 30.0}),
            _row(14336, 4096, 2, {"X1_R1024_w8": 20.0, "X4_R256_w4": 30.0})]
    assert _best(gemv_table.GemvKernel(3000, 4096, "bfloat16"), rows) == "X1_R1024_w8"
    assert _best(gemv_table.GemvKernel(50000, 2048, "float16"), rows) == "X4_R256_w4"
    # the nearest pair alone would say X4_R256_w4 by 0.5%; the three nearest agree on X1_R1024_w8
    assert _best(gemv_table.GemvKernel(5632, 2048, "bfloat16", 2), rows) == "X1_R1024_w8"
    # a config with more rows than the problem is never chosen
    assert _best(gemv_table.GemvKernel(2, 2048, "float16"), [rows[1]]) == "X1_R1024_w8"
    # a K short enough for one persistent block takes none of the looped kernels' labels
    assert gemv_table.choose_from_table(gemv_table.GemvKernel(3000, 512, "bfloat16"), rows) is None
    assert gemv_table.choose_from_table(gemv_table.GemvKernel(3000, 4096, "bfloat16"), []) is None


def test_a_partial_last_block_along_k_counts_against_a_config():
    """A label's times carry over to a K its R0_BLOCK does not divide with the masked loop step counted: at K=2304
    (Gemma 2's width) R0_BLOCK 2048 runs two steps over 4096 lanes, 256 does nine over exactly 2304."""
    rows = [_row(256000, 2048, 1, {"X1_R2048_w8": 340.0, "X16_R256_w8": 357.0})]
    assert _best(gemv_table.GemvKernel(256000, 2048, "bfloat16"), rows) == "X1_R2048_w8"
    assert _best(gemv_table.GemvKernel(256000, 4096, "bfloat16"), rows) == "X1_R2048_w8"  # both blocks divide K
    assert _best(gemv_table.GemvKernel(256000, 2304, "bfloat16"), rows) == "X16_R256_w8"
    assert gemv_table.ranked_configs(gemv_table.GemvKernel(256000, 2304, "bfloat16"), rows, k_tail_exponent=0.0)[0] == "X1_R2048_w8"


def test_counting_the_partial_block_raises_the_held_out_oracle_on_the_h100_labels():
    from predictor.offline.gemv_eval import read_labels

    probs = gemv_blocks_fit.problems(read_labels(ROOT / "datasets/nvidia-h100/gemv_blocks.parquet", gemv_blocks_fit.KIND))
    every = gemv_blocks_fit.evaluate(probs).filter(like="all", axis=0).iloc[0]
    assert every["table at every width"] > every["K tail ignored"] + 0.01


@pytest.mark.parametrize("gpu", ["nvidia-h100", "nvidia-h200"])
def test_held_out_table_beats_cublas_and_inductors_default_blocks_on_the_shipped_labels(gpu):
    from predictor.offline.gemv_eval import read_labels

    probs = gemv_blocks_fit.problems(read_labels(ROOT / "datasets" / gpu / "gemv_blocks.parquet", gemv_blocks_fit.KIND))
    scores = gemv_blocks_fit.evaluate(probs)
    plain = scores.loc[f"plain ({(probs['form'] == 'plain').sum()})"]
    assert plain["table (held out)"] > plain["max-n-rule"]  # the same width rule, default blocks
    assert plain["table (held out)"] > plain["cublas-only"] + 0.05
    assert plain["table at every width"] > plain["reduction-default"] + 0.02
    for form, row in scores.iterrows():  # knowing what is fused ahead never hurts the choice
        assert row["table at every width"] >= row["forms ignored"] - 0.02, form
    # the shipped table is this fit of the shipped labels
    shipped = json.loads((TABLE.parent / f"{gpu}.json").read_text())["problems"]
    assert shipped == gemv_blocks_fit.table_rows(probs)


def test_a_calibrations_cut_is_scored_against_the_full_table_on_the_full_labels():
    from predictor.offline.gemv_eval import read_labels

    full = gemv_blocks_fit.problems(read_labels(ROOT / "datasets/nvidia-h100/gemv_blocks.parquet", gemv_blocks_fit.KIND))
    same = gemv_blocks_fit.compare(full, full)
    assert (same["cut / full"] == 1.0).all() and same.index[-1] == f"all ({len(full)})"
    # a cut without any short-K label chooses those GEMVs' blocks from long-K neighbours: it loses there
    long_only = gemv_blocks_fit.compare(full[full["k"] > 1024], full).loc[f"all ({len(full)})"]
    assert long_only["cut / full"] < 1.0 and long_only["full"] == same.loc[f"all ({len(full)})", "full"]
    # the committed repeat: a second collection on the same GPU, cut by the calibration budget (9 minutes)
    report = gemv_blocks_fit.run_compare(str(ROOT / "datasets/nvidia-h100/gemv_blocks_repeat.parquet"),
                                         str(ROOT / "datasets/nvidia-h100/gemv_blocks.parquet"))
    assert "(68 problems) against the table of" in report and "| all (138) |" in report


def test_comparing_two_gpus_labels_is_refused():
    with pytest.raises(ValueError, match="was measured on NVIDIA H200, .* on NVIDIA H100 80GB HBM3"):
        gemv_blocks_fit.run_compare(str(ROOT / "datasets/nvidia-h200/gemv_blocks.parquet"),
                                    str(ROOT / "datasets/nvidia-h100/gemv_blocks.parquet"))


def test_silu_and_multiply_ahead_is_chosen_better_knowing_it_on_the_h100_labels():
    from predictor.offline.gemv_eval import read_labels

    probs = gemv_blocks_fit.problems(read_labels(ROOT / "datasets/nvidia-h100/gemv_blocks.parquet", gemv_blocks_fit.KIND))
    silu = gemv_blocks_fit.evaluate(probs).filter(like="silu_mul", axis=0).iloc[0]
    assert silu["table at every width"] > silu["forms ignored"] + 0.1


def test_tuned_mode_hands_inductor_the_tables_top_k_configs_best_first(monkeypatch):
    import predictor
    from predictor.runtime import compile

    rows = [_row(4096, 4096, 1, {"X1_R1024_w8": 10.0, "X4_R256_w4": 12.0, "X2_R512_w4": 11.0, "X1_R512_w4": 15.0})]
    monkeypatch.setattr(gemv_table, "table_for_this_gpu", lambda allow_similar=True: rows)
    kernel = gemv_table.GemvKernel(4096, 4096, "bfloat16")
    assert gemv_table.ranked_configs(kernel, rows) == ["X1_R1024_w8", "X2_R512_w4", "X4_R256_w4", "X1_R512_w4"]
    assert gemv_table.choose_from_table(kernel, rows) == [gemv_table.parse_config_name("X1_R1024_w8")]
    assert [gemv_table.config_name(c) for c in gemv_table.choose_from_table(kernel, rows, top=3)] == ["X1_R1024_w8", "X2_R512_w4",
                                                                                      "X4_R256_w4"]
    try:
        compile.prepare(tune=3)
        assert [gemv_table.config_name(c) for c in compile.gemv_choice()(kernel)] == ["X1_R1024_w8", "X2_R512_w4",
                                                                               "X4_R256_w4"]
        predictor.uninstall()
        compile.prepare()  # the default decides: one config
        assert compile.gemv_choice()(kernel) == [gemv_table.parse_config_name("X1_R1024_w8")]
    finally:
        while installed._STACK:
            predictor.uninstall()


def test_a_table_without_a_form_borrows_that_forms_labels_from_its_architecture_sibling():
    own = [_row(2048, 2048, 1, {"X1_R1024_w8": 9.0}), _row(5632, 2048, 2, {"X1_R1024_w8": 20.0})]
    sibling = [_row(2048, 2048, 1, {"X8_R256_w8": 1.0}),  # a form own has: never taken in place of own's
               {**_row(2048, 5632, 1, {"X8_R256_w8": 11.0}), "vector_loads": 2, "activation_ahead": True},
               {**_row(32000, 2048, 1, {"X2_R512_w8": 50.0}), "vector_loads": 2}]
    merged = gemv_table.with_borrowed_forms(own, [sibling])
    assert merged == [*own, sibling[1], sibling[2]]
    assert gemv_table.with_borrowed_forms(own, []) == own
    # a short K's blocks are borrowed, but not the sibling's verdict on cuBLAS: this GPU keeps the width rule there
    short_head = {**_row(151936, 896, 1, {"X4_R0_w8": 90.0}), "cublas_us": 100.0}
    merged = gemv_table.with_borrowed_forms(own, [[short_head]])
    assert merged[-1]["times"] == short_head["times"] and "cublas_us" not in merged[-1]
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(151936, 896, "bfloat16"), merged) is None
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(151936, 896, "bfloat16"), [*own, short_head]) is True


def test_the_sibling_table_of_the_same_architecture_is_found_and_merged(tmp_path, monkeypatch):
    folder = tmp_path / gemv_table.TABLE_FOLDER
    folder.mkdir()
    plain = {"n": 2048, "k": 2048, "dtype": "bfloat16", "weights": 1, "times": {"X1_R1024_w8": 9.0}}
    norm = {**plain, "vector_loads": 2, "times": {"X2_R512_w8": 8.0}}
    (folder / "nvidia-h200.json").write_text(json.dumps({"cc": "9.0", "problems": [plain]}))
    (folder / "nvidia-h100.json").write_text(json.dumps({"cc": "9.0", "problems": [norm]}))
    sibling = table_path("", [tmp_path], "9.0", folder=gemv_table.TABLE_FOLDER, skip=folder / "nvidia-h200.json")
    assert sibling == folder / "nvidia-h100.json"
    rows, digest = gemv_table._table("NVIDIA H200", "9.0", (str(tmp_path),))
    assert list(rows) == [plain, norm] and digest
    monkeypatch.setattr(gemv_table, "table_for_this_gpu", lambda allow_similar=True: rows)
    assert gemv_table.has_fused_forms(gemv_table.table_for_this_gpu())
    from predictor.runtime.lowerings import gemv

    assert gemv.runtime_rule()(151936, 1536, "float16", "col")  # a vocabulary head: every width with forms known
    assert not gemv.runtime_rule()(151936, 896, "bfloat16", "col")  # but not a K the table gives no blocks for
    assert gemv.runtime_rule()(4096, 896, "bfloat16", "col")  # (within the width threshold it still does)
    monkeypatch.setattr(gemv_table, "table_for_this_gpu", lambda allow_similar=True: [plain])
    assert not gemv_table.has_fused_forms(gemv_table.table_for_this_gpu()) and not gemv.runtime_rule()(151936, 1536, "float16", "col")
    assert gemv.runtime_rule()(4096, 4096, "bfloat16", "col") and not gemv.runtime_rule()(4096, 4096, "bfloat16", "row")


# a GEMV whose K fits one persistent block (torch 2.11): R0_BLOCK is defined inside, XBLOCK is the only parameter
PERSISTENT = _generated("persistent_reduction", 1024, "triton_per_fused_mm_0",
                        "in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr", """\
    xnumel = 49152
    r0_numel = 960
    R0_BLOCK: tl.constexpr = 1024
    tmp0 = tl.load(in_ptr0 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
    tmp1 = tl.load(in_ptr1 + (r0_1 + 960*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
    tmp2 = tl.sigmoid(tmp0)
    tmp5 = tl.sum(tmp4, 1)[:, None]
    tmp6 = tl.sigmoid(tmp5)
""")


def test_a_short_k_gemv_is_one_persistent_kernel_given_rows_and_warps_only():
    gemv = _origin(SUM, MM)
    head = gemv_table.GemvKernel(49152, 960, "bfloat16", 1)
    assert gemv_blocks.describe(_kernel([gemv], numels={"x": 49152, "r0_": 960}, persistent=True)) == head
    # a looped kernel of a short K, or a persistent one of a long K, is some other reduction: Inductor keeps it
    assert gemv_blocks.describe(_kernel([gemv], numels={"x": 49152, "r0_": 960})) is None
    names = [gemv_table.config_name(c) for c in gemv_table.PERSISTENT_GRID]
    assert len(set(names)) == len(names) and all(gemv_table.parse_config_name(n)["R0_BLOCK"] == 0 for n in names)
    fitting = {gemv_table.config_name(c) for c in (*gemv_table.GRID, *gemv_table.PERSISTENT_GRID) if gemv_table.fits(c, head)}
    assert fitting and all("_R0_" in n for n in fitting)
    assert len(fitting) == len(gemv_table.PERSISTENT_GRID)  # each holds at most 64 elements per thread of K padded to 1024
    assert not gemv_table.fits(gemv_table.parse_config_name("X8_R0_w2"), head)  # 128 would spill
    assert not any(gemv_table.fits(c, gemv_table.GemvKernel(49152, 2048, "bfloat16")) for c in gemv_table.PERSISTENT_GRID)
    one = gemv_blocks.with_configs(PERSISTENT, [gemv_table.parse_config_name("X8_R0_w4")])
    assert "@triton_heuristics.fixed_config(\n    config={'XBLOCK': 8, 'num_warps': 4, 'num_stages': 1},\n" in one
    assert "R0_BLOCK: tl.constexpr = 1024" in one and "size_hints" not in one
    assert gemv_blocks.count_vector_loads(PERSISTENT) == 1
    assert gemv_blocks.count_activations_ahead(PERSISTENT) == 1  # the sigmoid ahead of the sum, not the one after it


def test_a_short_k_takes_the_reduction_where_its_nearest_plain_label_beat_cublas():
    from predictor.runtime.lowerings.gemv import takes_reduction_by_table

    head = {**_row(151936, 896, 1, {"X1_R0_w4": 96.0, "X8_R0_w8": 70.0}), "cublas_us": 77.0}
    small = {**_row(896, 896, 1, {"X1_R0_w4": 5.0, "X2_R0_w4": 6.0}), "cublas_us": 8.0}
    slow_head = {**head, "times": {"X1_R0_w4": 96.0, "X8_R0_w8": 80.0}}
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(131072, 768, "bfloat16"), [head, small]) is True
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(131072, 768, "bfloat16"), [slow_head, small]) is False
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(4096, 4096, "bfloat16"), [head, small]) is None  # looped K
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(131072, 768, "bfloat16"), []) is None
    assert gemv_table.reduction_beats_cublas(gemv_table.GemvKernel(131072, 768, "float32"), [head, small]) is None  # 2-byte labels
    assert _best(gemv_table.GemvKernel(151936, 1024, "bfloat16"), [head, small]) == "X8_R0_w8"
    assert gemv_table.choose_from_table(gemv_table.GemvKernel(151936, 1024, "float32"), [head, small]) is None  # registers double
    # the table decides a short K at every width; without its labels, the width rule (at most 6144 outputs)
    assert takes_reduction_by_table(151936, 896, "bfloat16", "col", [head, small])
    assert not takes_reduction_by_table(151936, 896, "bfloat16", "col", [slow_head, small])
    assert not takes_reduction_by_table(151936, 896, "bfloat16", "col", [])
    assert takes_reduction_by_table(4096, 896, "bfloat16", "col", [])
    assert not takes_reduction_by_table(151936, 896, "bfloat16", "row", [head, small])  # GPT-2's Conv1D weights


def test_on_the_h100_labels_short_k_gemvs_run_as_reductions_with_labelled_blocks_and_beat_cublas():
    from predictor.offline.gemv_eval import read_labels
    from predictor.runtime.lowerings.gemv import takes_reduction_by_table

    labels = read_labels(ROOT / "datasets/nvidia-h100/gemv_blocks.parquet", gemv_blocks_fit.KIND)
    probs = gemv_blocks_fit.problems(labels)
    short = probs[probs["k"] < gemv_table.MIN_K]
    assert len(short) >= 40 and set(short["form"]) >= {"plain", "norm", "add_norm", "pair"}
    scores = gemv_blocks_fit.evaluate(probs)
    row = scores.loc[next(i for i in scores.index if i.startswith("K <= 1024"))]
    assert row["table (held out)"] > row["cublas-only"] + 0.1
    assert row["table (held out)"] >= row["reduction-default"] - 0.005
    assert row["table (held out)"] > row["max-n-rule"]  # wide vocabulary heads included
    table = gemv_blocks_fit.table_rows(probs)
    heads = short[(short["form"] == "plain") & (short["n"] > 40000)]
    assert len(heads) >= 4
    assert all(takes_reduction_by_table(h.n, h.k, h.dtype, "col", table) for h in heads.itertuples())


def test_a_looped_gemv_never_takes_a_step_wider_than_its_reduction():
    """Phi-3's K of 3072: R0_BLOCK 4096 would leave a quarter of every program's lanes idle for the whole kernel;
    the table's favourite among the rest is taken even where the wider step led the labels."""
    kernel = gemv_table.GemvKernel(9216, 3072, "bfloat16")
    assert not gemv_table.fits(gemv_table.parse_config_name("X2_R4096_w16"), kernel)
    assert gemv_table.fits(gemv_table.parse_config_name("X4_R2048_w16"), kernel)
    assert gemv_table.fits(gemv_table.parse_config_name("X1_R4096_w16"), gemv_table.GemvKernel(9216, 4096, "bfloat16"))
    rows = [_row(9216, 3072, 1, {"X2_R4096_w16": 24.8, "X1_R1024_w8": 24.9, "X1_R2048_w8": 25.1})]
    assert _best(kernel, rows) == "X1_R1024_w8"
