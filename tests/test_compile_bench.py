"""The end-to-end benchmark's bookkeeping (modes, ratios, tables) on recorded numbers, without a GPU."""

import math

import pytest

from benchmarks import compile_bench


def test_modes():
    assert compile_bench.parse_mode("plain") is None and compile_bench.parse_mode("full") is None
    assert compile_bench.parse_mode("hook-k8") == {"top_k": 8, "margin": "auto"}
    assert compile_bench.parse_mode("hook-k1-nomargin") == {"top_k": 1, "margin": None}
    assert compile_bench.parse_mode("hook-k5-benchaten") == {"top_k": 5, "margin": "auto", "aten_alone_below_us": None}
    assert compile_bench.parse_mode("hook-k8-exhaustive") == {"top_k": 8, "margin": "auto", "space": "exhaustive"}
    assert compile_bench.parse_mode("hook-k1-epi") == {"top_k": 1, "margin": "auto", "epilogue_templates": 1}
    for bad in ("hook-k", "hook-k3-x", "fast", "hook-k0", "hook-k2-nomargin-nomargin"):
        with pytest.raises(ValueError, match="unknown mode"):
            compile_bench.parse_mode(bad)


def test_cutlass_modes():
    split = compile_bench.split_cutlass
    assert split("full") == ("full", {}, None)
    assert split("full+cutlass") == ("full", {"max_autotune_gemm_backends": "ATEN,TRITON,CUTLASS"}, None)
    assert split("full+cutlass4")[1]["cutlass.cutlass_max_profiling_configs"] == 4
    assert split("hook-k5+cutlass2") == ("hook-k5", {"max_autotune_gemm_backends": "ATEN,TRITON,CUTLASS"}, 2)
    for bad in ("full+cuda", "hook-k5+cutlass", "plain+cutlass", "full+cutlassX"):
        with pytest.raises(ValueError):
            split(bad)


def test_summary_ratios_and_outputs(tmp_path):
    gemms = [{"problem_id": "a", "op": "mm", "m": 1, "n": 2, "k": 3, "dtype": "float16", "layout_a": "row", "layout_b": "col"},
             {"problem_id": "b", "op": "mm", "m": 4, "n": 5, "k": 6, "dtype": "bfloat16", "layout_a": "row", "layout_b": "row"}]
    r = lambda c, w: {"compile_s": c, "warm_us": w, "cold_us": w, "benchmarked": 0, "rel_err": 0.0}
    results = {"a|plain": r(1, 10), "a|full": r(20, 20), "a|hook-k1": r(0.5, 10),
               "b|plain": r(1, 10), "b|full": r(30, 10), "b|hook-k1": r(0.5, 40)}
    text = compile_bench.write_outputs(results, gemms, ["plain", "full", "hook-k1"], tmp_path, "Test GPU")
    # hook-k1: speed vs full = 20/10 = 2 and 10/40 = 0.25 -> geomean sqrt(0.5); vs plain 1 and 0.25 -> 0.5
    row = next(line for line in text.splitlines() if line.startswith("| hook-k1 | 2 |"))
    assert f"{math.sqrt(0.5):.3f}" in row and "| 0.500 |" in row and "| 1.0 |" in row
    assert (tmp_path / "results.md").read_text().startswith("GPU: Test GPU")
    assert (tmp_path / "speed_vs_compile.png").stat().st_size > 1000
    # without a full max-autotune run (the CUTLASS table) the plot is against plain, not an empty NaN axis
    no_full = tmp_path / "no_full"
    no_full.mkdir()
    without = {key: v for key, v in results.items() if not key.endswith("|full")}
    text = compile_bench.write_outputs(without, gemms, ["plain", "hook-k1"], no_full, "Test GPU")
    assert "| hook-k1 | 2 | 1.0 | nan | 0.500 |" in text
    assert (no_full / "speed_vs_compile.png").stat().st_size > 1000


def test_gemms_come_from_the_groups_the_model_held_out(tmp_path):
    """Not from a fresh split of the dataset: once the dataset grows, that would pick other (trained-on) groups."""
    import json

    from predictor.testing.synthetic import METADATA, synthetic_dataset

    from predictor.offline.split import groups_of
    from predictor.artifacts.schema import write_dataset

    rows = synthetic_dataset(60, groups=6)
    rows["family_tag"] = rows["family_tag"].str.replace("synthetic:", "llm:model-")
    data = tmp_path / "d.parquet"
    write_dataset(rows, data, METADATA)
    held_out = ["llm:model-g1", "llm:model-g4"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "metadata.json").write_text(json.dumps({"split": {"test_groups": held_out}}))
    picked = compile_bench.pick_gemms(str(tmp_path / "m"), str(data), 50, 0)
    expected = rows[groups_of(rows).isin(held_out) & (rows.m > 1)]["problem_id"].unique()
    assert picked and {g["problem_id"] for g in picked} == set(expected)
