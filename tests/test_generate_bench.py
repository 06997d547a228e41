"""The generate benchmark's report: runs pooled into medians per (model, mode), GPU time beside tokens/s (CPU)."""

from benchmarks import generate_bench


def _run(mode: str, tokens_per_s: float, gpu_ms: float, round_: int, tokens=(1, 2)) -> dict:
    return {"model": "llama-4l", "mode": mode, "status": "ok", "round": round_, "tokens_per_s": tokens_per_s,
            "gpu_ms_per_token": gpu_ms, "compile_s": 10.0 + round_, "tokens": list(tokens)}


def test_runs_pool_into_medians_and_the_report_compares_with_auto():
    records = [_run("auto", 600.0, 0.45, 0), _run("gemm_predictor", 500.0, 0.36, 0, tokens=(1, 3)),
               _run("gemm_predictor", 640.0, 0.37, 1), _run("auto", 380.0, 0.46, 1),
               _run("auto", 400.0, 0.44, 2), _run("gemm_predictor", 620.0, 0.38, 2),
               {"model": "llama-4l", "mode": "eager", "status": "error", "error": "CUDA out of memory", "round": 0}]
    table = generate_bench.medians(records)
    auto, gp = table[("llama-4l", "auto")], table[("llama-4l", "gemm_predictor")]
    assert (auto["runs"], auto["tokens_per_s"], auto["gpu_ms_per_token"], auto["compile_s"]) == (3, 400.0, 0.45, 11.0)
    assert gp["tokens_per_s_range"] == (500.0, 640.0) and gp["tokens_per_s"] == 620.0
    assert ("llama-4l", "eager") not in table  # a failed run is listed, never pooled
    md = generate_bench.report(records)
    assert "| llama-4l | `gemm_predictor` | 3 | 620 | 500-640 | 1.550 | 0.370 | 0.822 | 11.0 | yes |" in md
    assert "| llama-4l | eager | round 0 | error: CUDA out of memory |" in md


def test_an_unknown_model_is_refused_in_one_line(tmp_path, capsys):
    assert generate_bench.main(["--out", str(tmp_path / "out"), "--models", "gpt-17"]) == 2
    assert "unknown model 'gpt-17'" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists() and not (tmp_path / "out").exists()


def test_where_tokens_first_differ_the_report_gives_autos_top2_margin_there():
    auto = {**_run("auto", 600.0, 0.45, 0, tokens=(5, 6, 7, 8)), "margins": [2.0, 1.5, 0.004, 3.0],
            "margins_tokens": [5, 6, 7, 8]}
    same = _run("gemm_predictor", 600.0, 0.4, 0, tokens=(5, 6, 7, 8))
    other = _run("gemm_predictor", 600.0, 0.4, 0, tokens=(5, 6, 9, 1))
    assert generate_bench.first_difference(auto, same) == "yes"
    assert generate_bench.first_difference(auto, other) == (
        "no: from token 3, where auto's top-2 logit margin was 0.004 (median 1.75)")
    # margins of another call (its tokens differ from the run's): no margin is claimed
    assert generate_bench.first_difference({**auto, "margins_tokens": [5, 6, 0, 0]}, other) == "no: from token 3"
    md = generate_bench.report([auto, other])
    assert "| no: from token 3, where auto's top-2 logit margin was 0.004 (median 1.75) |" in md
