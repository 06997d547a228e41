"""The model-zoo benchmark on CPU: registries, mode strings, the worker end to end on tiny-mlp, the runner's
resumability and errors, the report's figures, and (if transformers imports) real-width builds."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.zoo import gaps, modes, processes, report, run, timing_checks
from collectors.programs import builders, census, configs, models, step

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fast_compile(monkeypatch):
    """One compile thread: no Inductor worker pool to start in each tiny subprocess."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown model 'nope'.*tiny-mlp"):
        models.get("nope")
    with pytest.raises(ValueError, match="unknown mode 'fast'.*max-autotune"):
        modes.parse_mode("fast")
    with pytest.raises(ValueError, match="only hook"):
        modes.parse_mode("plain:top_k=3")
    with pytest.raises(ValueError, match="key=value"):
        modes.parse_mode("hook:top_k")
    assert len(models.names()) >= 14 and "tiny-mlp" not in models.names()
    assert "tiny-mlp" in models.names(tests=True) and models.names("train", tests=True)[-1] == "tiny-train"
    assert {"llama-train", "vit-base-train", "bert-train"} <= set(models.names("train"))


def test_mode_strings():
    m = modes.parse_mode("hook:top_k=3,cudagraphs=False,gap=0.5,space=exhaustive,model=None")
    assert m.name == "hook:top_k=3,cudagraphs=False,gap=0.5,space=exhaustive,model=None" and m.base == "hook"
    assert m.kwargs == {"top_k": 3, "cudagraphs": False, "gap": 0.5, "space": "exhaustive", "model": None}
    assert m.cudagraphs is False and modes.parse_mode("hook").cudagraphs is True
    assert modes.parse_mode("hook").replayable and modes.parse_mode("hook-tuned").kwargs == {}
    assert not modes.parse_mode("max-autotune").replayable and not modes.parse_mode("cudagraphs").replayable
    assert modes.parse_mode("hook:cudagraphs=training").cudagraphs is True
    assert modes.parse_mode("max-autotune").cudagraphs and not modes.parse_mode("ma-gemm").cudagraphs
    assert modes.parse_mode("ma-gemm-cudagraphs").cudagraphs and modes.parse_mode("cudagraphs").cudagraphs
    assert modes.split_modes("plain,hook:top_k=3,cudagraphs=False,ma-gemm;hook:top_k=1,plain") == [
        "plain", "hook:top_k=3,cudagraphs=False", "ma-gemm", "hook:top_k=1"]
    assert modes.split_modes("cudagraphs,hook:tune=5,cudagraphs=False,cudagraphs", repeats=True) == [
        "cudagraphs", "hook:tune=5,cudagraphs=False", "cudagraphs"]  # train_host runs a mode named twice twice
    tuned = modes.parse_mode("hook:options.max_autotune_pointwise=True,options.triton.multi_kernel=1,tune=3")
    assert tuned.kwargs == {"options": {"max_autotune_pointwise": True, "triton.multi_kernel": 1}, "tune": 3}
    for bad in ("hook:options.=1", "hook:top.k=3", "hook:options=1,options.x=2"):
        with pytest.raises(ValueError, match="key=value"):
            modes.parse_mode(bad)


def test_kernel_census():
    kernels = [("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", 30.0), ("triton_tem_fused_mm_0", 10.0),
               ("triton_poi_fused_convolution_relu_1", 5.0), ("triton_red_fused_sum_2", 5.0),
               ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, cutlass::half_t>>", 20.0),
               ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", 20.0),
               ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 10.0)]
    c = census.census(kernels)
    g = c["groups"]
    assert (g["vendor_gemm"]["count"], g["triton_template"]["count"], g["triton"]["count"]) == (2, 1, 2)
    assert g["other"]["count"] == 2 and math.isclose(g["vendor_gemm"]["share"], 0.4)
    assert c["kernels"] == 7 and c["top"][0][0].startswith("nvjet")
    assert "gemm 2 (40%)" in report.census_cell(c)
    twice = census.census([("triton_poi_fused_add_0", 2.0), ("nvjet_a", 3.0), ("triton_poi_fused_add_0", 2.5)])
    assert twice["by_name"] == [["triton_poi_fused_add_0", 2, 4.5], ["nvjet_a", 1, 3.0]]


def _worker(tmp_path, model, mode="plain"):
    out = tmp_path / f"{model}.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.zoo.worker", "--model", model, "--mode", mode,
                           "--repeats", "5", "--json-out", str(out)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_census_names_the_blocks_each_loaded_triton_kernel_ran_with(monkeypatch):
    import types

    from torch._inductor.codecache import PyCodeCache

    def kernel(*launchers):
        return types.SimpleNamespace(launchers=[types.SimpleNamespace(config=types.SimpleNamespace(
            kwargs=kw, num_warps=w, num_stages=1)) for kw, w in launchers])

    module = types.ModuleType("output_code")
    module.triton_red_fused_mm_0 = kernel(({"XBLOCK": 8, "R0_BLOCK": 256}, 4))
    module.triton_poi_fused_add_1 = kernel(({"XBLOCK": 1024}, 4), ({"XBLOCK": 256}, 2))  # not yet autotuned
    module.other = kernel(({"XBLOCK": 1}, 1))  # not a Triton kernel's name
    monkeypatch.setattr(PyCodeCache, "modules", [module])
    assert census.triton_kernel_configs() == {"triton_red_fused_mm_0": "XBLOCK=8 R0_BLOCK=256 warps=4 stages=1"}


def test_worker_end_to_end(tmp_path, fast_compile):
    r = _worker(tmp_path, "tiny-mlp")
    assert r["status"] == "ok", r["error"]
    assert r["compile_s"] > 0 and r["compile_s_total"] >= r["compile_s"] and r["step_ms"] > 0
    assert r["step_ms_p10"] <= r["step_ms"] <= r["step_ms_p90"] and r["eager_launch_ms"] > 0
    assert r["correct"] is True and r["rel_err"] < 1e-3 and r["timing"] == "direct"
    assert r["schema_version"] == 1 and r["torch"] and r["census"] is None and r["device"] == "cpu"


def test_warm_up_steps_take_turns_with_other_lanes(monkeypatch):
    """The eager reference, the two warm-up steps and the timed steps hold the GPU lock; the first step (the compile)
    does not, so compiles overlap while no lane's kernels run beside another's autotuning benchmarks."""
    import torch

    held, seen = {"depth": 0}, []

    class counting_lock:
        def __enter__(self):
            held["depth"] += 1
            return self

        def __exit__(self, *exc):
            held["depth"] -= 1

    class Recorded(modes.Mode):
        def compile(self, module):
            def call(*args):
                seen.append(held["depth"] > 0)
                return module(*args)
            return call

    monkeypatch.setattr(step, "timing_lock", counting_lock)
    record: dict = {}
    step.measure(record, models.get("tiny-mlp"), Recorded("plain", "plain", False), 3, torch.device("cpu"))
    assert record["step_ms"] > 0 and len(seen) > 3
    assert seen[:3] == [False, True, True] and all(seen[1:])


def test_worker_records_errors(tmp_path):
    r = _worker(tmp_path, "not-a-model")
    assert r["status"] == "error" and "unknown model 'not-a-model'" in r["error"]


def test_runner_resumes(tmp_path, fast_compile, capsys):
    out = tmp_path / "zoo"
    argv = ["--models", "tiny-mlp", "--modes", "plain", "--out", str(out), "--repeats", "5"]
    assert run.main(argv) == 0
    first = json.loads((out / "results.json").read_text())
    assert [(r["model"], r["mode"], r["status"]) for r in first] == [("tiny-mlp", "plain", "ok")]
    assert (out / "results.md").exists() and (out / "speed_vs_compile.png").exists()
    capsys.readouterr()
    assert run.main(argv) == 0  # nothing left: launches no worker
    assert "0 run(s) to do" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text()) == first
    # seeded from an earlier results file, with a failed run: skipped unless --retry-failed
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"model": "tiny-train", "mode": "plain", "status": "timeout"}]))
    assert run.main(["--models", "tiny-mlp,tiny-train", "--modes", "plain", "--out", str(out),
                     "--resume-from", str(seed)]) == 0
    assert "0 run(s) to do" in capsys.readouterr().out
    assert len(json.loads((out / "results.json").read_text())) == 2
    assert run.main(["--report-only", "--out", str(out)]) == 0


def test_runner_errors(tmp_path, capsys):
    out = tmp_path / "zoo"
    out.mkdir()
    (out / "results.json").write_text("[{broken")
    for argv, message in [(["--models", "tiny-mlp"], "cannot read"), (["--models", "nope"], "unknown model"),
                          (["--modes", "fast"], "unknown mode"), (["--lanes", "x"], "--lanes x")]:
        assert run.main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert (out / "results.json").read_text() == "[{broken"  # nothing overwritten
    (out / "results.json").unlink()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "x"}))
    assert run.main(["--models", "tiny-mlp", "--out", str(out), "--resume-from", str(bad)]) == 2
    assert "not a zoo results file" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run.main(["--models", "tiny-mlp", "--out", str(blocker / "sub")]) == 2
    assert "cannot write to --out" in capsys.readouterr().err


def _rec(model, mode, compile_s, step_ms, status="ok", kind="infer", timing=None, called=None):
    timing = timing or ("eager-step" if kind == "train" else "cudagraph-replay")
    return {"model": model, "mode": mode, "compile_s": compile_s, "step_ms": step_ms, "status": status, "kind": kind,
            "timing": timing, "called_ms": called}


def test_summarize_compares_every_mode_with_the_best_stock_mode_timed_alike():
    """Inference: replay among plain, ma-no-cudagraphs, coordinate-descent (a trees-timed max-autotune record never
    enters that comparison, however fast); as called: against the best of max-autotune and cudagraphs. Training:
    eager steps among plain, cudagraphs, max-autotune. A timed-out peer and a wrong hook run are left out."""
    trees = "cudagraph-trees"
    records = [
        _rec("a", "plain", 10.0, 2.0, called=3.0), _rec("a", "ma-no-cudagraphs", 40.0, 1.0, called=2.5),
        _rec("a", "max-autotune", 40.0, 0.5, timing=trees, called=0.5),
        _rec("a", "cudagraphs", 9.0, 0.8, timing=trees, called=0.8), _rec("a", "hook", 20.0, 1.6, called=0.6),
        _rec("b", "plain", 5.0, 1.0, kind="train"), _rec("b", "cudagraphs", 5.0, 0.5, kind="train"),
        _rec("b", "max-autotune", 50.0, 0.1, "timeout", kind="train"), _rec("b", "hook", 5.0, 0.5, kind="train"),
        _rec("c", "plain", 8.0, 4.0), _rec("c", "coordinate-descent", 8.0, None, "timeout"),
        _rec("c", "hook", 80.0, 1.0, "wrong")]
    s = report.summarize(records)
    a, b = s["models"]["a"], s["models"]["b"]
    assert s["best"]["a"] == {"step": 1.0, "step_mode": "ma-no-cudagraphs", "called": 0.5,
                              "called_mode": "max-autotune", "not_run": ["coordinate-descent"]}
    assert s["best"]["b"]["not_run"] == [] and s["best"]["c"]["not_run"] == ["ma-no-cudagraphs"]  # a timeout ran
    assert math.isclose(a["hook"]["speed_vs_best"], 0.625) and math.isclose(a["hook"]["called_vs_best"], 0.5 / 0.6)
    assert a["max-autotune"]["speed_vs_best"] is None and a["max-autotune"]["speed_vs_plain"] is None
    assert math.isclose(a["max-autotune"]["called_vs_best"], 1.0)
    assert s["best"]["b"]["step_mode"] == "cudagraphs" and math.isclose(b["hook"]["speed_vs_best"], 1.0)
    assert b["hook"]["called_vs_best"] is None and math.isclose(b["hook"]["speed_vs_plain"], 2.0)
    assert s["best"]["c"]["step_mode"] == "plain" and math.isclose(s["models"]["c"]["hook"]["speed_vs_best"], 4.0)
    hook = s["modes"]["hook"]  # c's hook run is wrong: left out of the hook's own figures
    assert math.isclose(hook["geomean_speed_vs_best"], math.sqrt(0.625 * 1.0)) and hook["models_vs_best"] == 2
    assert math.isclose(hook["geomean_called_vs_best"], 0.5 / 0.6) and hook["models_called"] == 1
    assert math.isclose(hook["geomean_compile_vs_plain"], math.sqrt(2.0)) and hook["max_compile_vs_plain"] == 2.0
    assert (hook["runs"], hook["not_ok"]) == (3, 1)
    assert s["mode_order"][:5] == ["plain", "ma-no-cudagraphs", "coordinate-descent", "cudagraphs", "max-autotune"]
    md = report.markdown(records, s, ["python -m benchmarks.zoo.run --models a"])
    assert "| `hook` | 1.581 | 0.791 | 0.625 | 2 | 0.833 | 0.833 | 1 | 1.41x | 2.00x | 1 |" in md
    assert "**timeout**" in md and "Best stock mode timed alike: ma-no-cudagraphs; as called: max-autotune; " \
        "peers not run: coordinate-descent" in md
    assert "counts as run): a (coordinate-descent); c (ma-no-cudagraphs)." in md


def test_where_hook_is_slower_its_gpu_time_is_split_by_kernel_group_without_the_trees_input_copy():
    """A model where hook is slower than the best stock mode gets a row: census GPU time per group, hook minus best;
    the CUDA-graph trees' input copy of hook's direct-call census is left out; a faster model gets none."""
    def census(gemm, tem, triton, other, copy=None):
        groups = {"vendor_gemm": {"us": gemm}, "triton_template": {"us": tem}, "triton": {"us": triton},
                  "other": {"us": other}}
        out = {"groups": groups, "total_us": gemm + tem + triton + other}
        if copy is not None:
            out["by_name"] = [["void at::native::multi_tensor_apply_kernel<...>", 1, copy], ["nvjet_x", 2, gemm]]
        return out
    records = [{**_rec("a", "plain", 10.0, 1.0), "census": census(500, 0, 200, 100)},
               {**_rec("a", "hook", 10.0, 1.1), "census": census(300, 250, 190, 116, copy=16), "cudagraphs": True},
               {**_rec("b", "plain", 10.0, 1.0), "census": census(500, 0, 200, 100)},
               {**_rec("b", "hook", 10.0, 0.9), "census": census(400, 0, 200, 100)}]
    summary = report.summarize(records)
    [row] = gaps.gpu_time_gaps(report.pooled_records(records), summary)
    assert row["model"] == "a" and row["best"] == "plain" and math.isclose(row["speed_vs_best"], 1 / 1.1)
    assert (row["gemm_us"], row["pointwise_us"], row["other_us"], row["total_us"]) == (50, -10, 0, 40)
    assert row["best_total_us"] == 800 and row["copy_unknown"] is False
    md = report.markdown(records, summary, [])
    assert "| a | plain | 0.909 | +50 | -10 | +0 | +40 (800) |" in md and "| b |" not in md
    records[1]["census"] = census(300, 250, 190, 116)  # a trees mode's census without the copy's name
    [row] = gaps.gpu_time_gaps(report.pooled_records(records), report.summarize(records))
    assert row["copy_unknown"] is True and row["other_us"] == 16
    # both runs censused their replayed step: those are compared as they are
    records[0]["census_replay"], records[1]["census_replay"] = census(500, 0, 200, 90), census(300, 250, 180, 90)
    [row] = gaps.gpu_time_gaps(report.pooled_records(records), report.summarize(records))
    assert (row["gemm_us"], row["pointwise_us"], row["other_us"], row["copy_unknown"]) == (50, -20, 0, False)


def test_two_censuses_that_disagree_on_a_kernel_are_listed_as_disturbed():
    """The direct call's and the replay's census run the same kernels: one kernel 15x slower in one of them (another
    process on the GPU mid-step, as mobilevitv2-100's hook run in held-out set 9) lists the run; a few percent apart,
    a kernel only one census names, or a single census do not."""
    def census(**us):
        return {"by_name": [[name, 1, t] for name, t in us.items()]}

    calm = {**_rec("a", "plain", 10.0, 2.0), "census": census(k59=90.0, k60=70.0),
            "census_replay": census(k59=92.0, k60=69.0, copy=5.0)}
    hit = {**_rec("a", "hook", 10.0, 4.8), "census": census(k59=1324.0, k60=70.0),
           "census_replay": census(k59=90.0, k60=2495.0)}
    small = {**_rec("b", "hook", 10.0, 0.1), "census": census(k=30.0), "census_replay": census(k=3.0)}  # < 200 us
    single = {**_rec("c", "max-autotune", 10.0, 1.0), "census": census(k=5000.0), "census_replay": None}
    assert timing_checks.disturbed([calm, hit, small, single]) == ["a `hook` (k60: 2495 us against 70 us)"]
    md = report.markdown([calm, hit], report.summarize([calm, hit]), [])
    assert "another process had the GPU; rerun before reading them): a `hook` (k60: 2495 us against 70 us)." in md


def test_a_timing_that_spread_over_a_tenth_of_its_median_is_listed_as_noisy():
    calm = {**_rec("a", "plain", 10.0, 2.0), "step_ms_p10": 1.98, "step_ms_p90": 2.05}
    spoiled = {**_rec("a", "hook", 10.0, 2.0), "step_ms_p10": 1.9, "step_ms_p90": 2.4}  # 25% of the median
    failed = {**_rec("b", "hook", 10.0, None, "timeout"), "step_ms_p10": 1.0, "step_ms_p90": 9.0}
    assert timing_checks.noisy([calm, spoiled, failed]) == ["a `hook` (25%)"]
    md = report.markdown([calm, spoiled], report.summarize([calm, spoiled]), [])
    assert "rerun before reading them): a `hook` (25%)." in md
    assert "median; rerun before reading them): none." in report.markdown([calm], report.summarize([calm]), [])


def test_as_called_is_also_compared_by_each_runs_fastest_tenth_of_calls():
    trees = "cudagraph-trees"
    records = [{**_rec("a", "hook", 1.0, 0.2, called=0.50), "called_ms_p10": 0.30},
               {**_rec("a", "cudagraphs", 1.0, 0.45, timing=trees, called=0.45), "called_ms_p10": 0.36},
               {**_rec("a", "max-autotune", 1.0, 0.60, timing=trees, called=0.60), "called_ms_p10": 0.33},
               {**_rec("b", "hook", 1.0, 0.2, called=0.5), "called_ms_p10": 0.4},  # no peer: not counted
               {**_rec("c", "hook", 1.0, 0.2, called=0.5)}]  # an older record without the field
    line = report.called_p10_line(report.pooled_records(records))
    assert line.endswith("`hook` 1.100x the best of max-autotune, cudagraphs in geomean over 1 models, worst 1.100 (a).")
    assert line in report.markdown(records, report.summarize(records), [])
    assert report.called_p10_line(report.pooled_records(records[3:])) is None


def test_older_records_without_called_ms_count_by_their_direct_calls():
    old = [{**_rec("a", "max-autotune", 40.0, 0.5, timing="cudagraph-trees"), "called_ms": None},
           {**_rec("a", "hook", 10.0, 0.4), "called_ms": None, "eager_launch_ms": 1.0}]
    s = report.summarize(old)
    assert s["best"]["a"]["called"] == 0.5 and math.isclose(s["models"]["a"]["hook"]["called_vs_best"], 0.5)
    assert s["best"]["a"]["step"] is None  # no replay peer timed: nothing to compare the replay with


def test_repeated_runs_count_by_their_medians(tmp_path):
    """Runs of one model and mode in separate processes (e.g. both orders) pool into medians; --add-runs merges
    them without running anything, and a later resume keeps them."""
    first = [_rec("a", "plain", 10.0, 2.0), _rec("a", "hook", 12.0, 1.8)]
    second = [_rec("a", "hook", 11.0, 2.2), _rec("a", "plain", 9.0, 2.4)]
    third = [_rec("a", "hook", 10.0, 2.0), _rec("a", "hook", 30.0, None, "timeout")]
    s = report.summarize(first + second + third)
    hook, plain = s["models"]["a"]["hook"], s["models"]["a"]["plain"]
    assert (hook["step_ms"], hook["compile_s"], hook["runs"]) == (2.0, 11.0, 4)  # medians of the 3 timed runs
    assert math.isclose(plain["step_ms"], 2.2) and math.isclose(hook["speed_vs_plain"], 1.1)
    md = report.markdown(first + second + third, s, [])
    assert "| `hook` | ok | 11.0 |" in md and "4 runs: 1.800-2.200" in md
    paths = [tmp_path / "r0.json", tmp_path / "r1.json"]
    for path, recs in zip(paths, (first, second)):  # as the runner wrote them for the CPU test model
        path.write_text(json.dumps([{**r, "model": "tiny-mlp"} for r in recs]))
    out = tmp_path / "merged"
    argv = ["--models", "tiny-mlp", "--modes", "plain", "--out", str(out)]
    assert run.main([*argv, "--add-runs", str(paths[0]), "--add-runs", str(paths[1])]) == 0  # nothing to run
    merged = json.loads((out / "results.json").read_text())
    assert sorted((r["mode"], r["step_ms"]) for r in merged) == [("hook", 1.8), ("hook", 2.2), ("plain", 2.0),
                                                                   ("plain", 2.4)]
    assert run.main(argv) == 0 and len(json.loads((out / "results.json").read_text())) == 4  # resumed: kept
    assert "2 runs: 2.000-2.400" in (out / "results.md").read_text()
    assert timing_checks.between_runs_line(first + second) == ("Between runs (separate processes of one model and mode, 2 "
                                                         "such): step times differ by 21.1% at the median, 22.2% at "
                                                         "most (a `hook`).")
    assert timing_checks.between_runs_line(first) == ""  # nothing ran twice: no sentence
    only = tmp_path / "report-only"  # a report pooling another order's runs, leaving results.json as it was
    only.mkdir()
    (only / "results.json").write_text(paths[0].read_text())
    assert run.main(["--out", str(only), "--add-runs", str(paths[1]), "--report-only"]) == 0
    assert "2 runs: 2.000-2.400" in (only / "results.md").read_text()
    assert (only / "results.json").read_text() == paths[0].read_text()


def test_tolerances_cover_dtypes():
    for name in models.names(tests=True):
        assert models.get(name).compute_dtype in step.TOLERANCE


def test_transformers_builds():
    pytest.importorskip("transformers")
    import torch

    for name in ("gpt2-decode", "bert-train", "opt-decode-b4", "t5-encoder"):
        module, inputs, kind = models.get(name).build(torch.device("cpu"), torch.float32)
        out = module(*inputs)
        assert torch.isfinite(out).all() and kind == ("loss" if name.endswith("train") else "forward")
        assert (out.dim() == 0) == (kind == "loss")


def test_held_out_set3_architectures_build():
    """The third held-out set's transformers configs build and run (widths shrunk: the real ones are GPU-sized)."""
    pytest.importorskip("transformers")
    import torch

    cpu, ids = torch.device("cpu"), torch.randint(0, 1000, (2, 16))
    falcon = configs._falcon_config(hidden_size=128, num_attention_heads=2, vocab_size=1000)
    starcoder2 = configs._starcoder2_config(hidden_size=128, intermediate_size=256, num_attention_heads=4,
                                           num_key_value_heads=2, vocab_size=1000)
    for config, kw in ((falcon, {"logits_to_keep": 1}), (starcoder2, {})):
        lm = builders._hf("AutoModelForCausalLM", config, cpu, torch.float32)
        logits = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False, **kw)(ids)
        assert logits.shape == (2, 1 if kw else 16, 1000) and torch.isfinite(logits).all()
    module, (real_ids,), kind = builders._deberta(cpu, torch.float32, hidden_size=128, intermediate_size=256,
                                                num_attention_heads=4, vocab_size=1000)
    assert kind == "forward" and real_ids.shape == (8, 256)
    assert module(ids).shape == (2, 16, 128)


def test_held_out_set4_architectures_build():
    """The fourth held-out set's transformers configs build and run at shrunk widths: Qwen2-MoE routes each token to
    4 of 60 experts beside its shared expert, Gemma 2 soft-caps its logits, GPT-2's training step returns a loss."""
    pytest.importorskip("transformers")
    import torch

    cpu, one_token = torch.device("cpu"), torch.randint(0, 1000, (1, 1))
    moe = configs._qwen2_moe_config(hidden_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=4, vocab_size=1000)
    assert (moe.num_experts, moe.num_experts_per_tok) == (60, 4)
    gemma2 = configs._gemma2_config(hidden_size=64, intermediate_size=128, num_attention_heads=2,
                                   num_key_value_heads=1, head_dim=32, vocab_size=1000)
    smollm2 = configs._smollm2_config(hidden_size=60, intermediate_size=160, num_attention_heads=3,
                                     num_key_value_heads=1, vocab_size=1000)
    for config in (moe, gemma2, smollm2):
        lm = builders._hf("AutoModelForCausalLM", config, cpu, torch.float32)
        logits = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False)(one_token)
        assert logits.shape == (1, 1, 1000) and torch.isfinite(logits).all()
        if config is gemma2:
            assert logits.abs().max() < gemma2.final_logit_softcapping
    gpt2 = builders._hf("AutoModelForCausalLM", configs._gpt2_medium_config(n_embd=64, n_head=2, vocab_size=1000), cpu,
                      torch.float32)
    ids = torch.randint(0, 1000, (2, 16))
    loss = builders.HFOut(gpt2, ("input_ids", "labels"), "loss", use_cache=False)(ids, ids.clone())
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert [models.get(n).held_out_set for n in ("qwen2-moe-decode-b1", "levit-128", "gpt2-medium-train")] == [4] * 3


def test_held_out_set5_moe_builds():
    """The fifth held-out set's Qwen3-MoE config builds and runs at shrunk widths: each token routed to 8 of 128
    experts, no shared expert."""
    pytest.importorskip("transformers")
    import torch

    moe = configs._qwen3_moe_config(hidden_size=64, moe_intermediate_size=32, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, vocab_size=1000)
    assert (moe.num_experts, moe.num_experts_per_tok) == (128, 8)
    lm = builders._hf("AutoModelForCausalLM", moe, torch.device("cpu"), torch.float32)
    logits = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False)(torch.randint(0, 1000, (1, 3)))
    assert logits.shape == (1, 3, 1000) and torch.isfinite(logits).all()
    names = ("qwen3-moe-decode-b1", "qwen3-moe-prefill", "qwen3-moe-train")
    assert [models.get(n).held_out_set for n in names] == [5] * 3


def test_held_out_set8_architectures_build():
    """The eighth held-out set's configs build and run at shrunk widths: OLMoE routes each token to 8 of exactly 64
    experts (the many-experts bound of the H100's grouped-GEMM table), Llama 3.2 ties its head to the embedding."""
    pytest.importorskip("transformers")
    import torch

    from predictor.runtime.lowerings import grouped_mm

    cpu, ids = torch.device("cpu"), torch.randint(0, 1000, (1, 3))
    olmoe = configs._olmoe_config(hidden_size=64, intermediate_size=32, num_attention_heads=4, num_key_value_heads=4,
                                 vocab_size=1000)
    h100 = grouped_mm.read_table(Path(__file__).resolve().parents[1] / "models" / grouped_mm.TABLE_FOLDER / "nvidia-h100.json")
    assert (olmoe.num_experts, olmoe.num_experts_per_tok) == (h100.max_decode_experts, 8)
    llama32 = configs._llama32_config(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=16, vocab_size=1000)
    for config in (olmoe, llama32):
        lm = builders._hf("AutoModelForCausalLM", config, cpu, torch.float32)
        logits = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False)(ids)
        assert logits.shape == (1, 3, 1000) and torch.isfinite(logits).all()
        if config is llama32:
            assert lm.lm_head.weight.data_ptr() == lm.model.embed_tokens.weight.data_ptr()
    names = ("mistral-decode-b1", "llama32-decode-b1", "olmoe-decode-b1", "olmoe-prefill", "vit-tiny-b8", "pvt-v2-b1",
             "llama32-train")
    assert [models.get(n).held_out_set for n in names] == [8] * 7


def test_ninth_held_out_set_builds_at_shrunk_widths():
    """The ninth held-out set's configs build and run at shrunk widths: Gemma 3 with one kv head, DeepSeek-V3's
    latent attention with a dense first layer then routed and shared experts, gpt-oss (eager attention: transformers
    has no SDPA path for its sinks), Phi-2's partial rotary."""
    pytest.importorskip("transformers")
    import torch

    cpu, ids = torch.device("cpu"), torch.randint(0, 1000, (1, 3))
    small = dict(hidden_size=64, num_attention_heads=4, vocab_size=1000)
    gemma3 = configs._gemma3_config(**small, intermediate_size=128, num_key_value_heads=1, head_dim=16)
    deepseek = configs._deepseek_config(**small, intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8,
                                        num_experts_per_tok=2, num_key_value_heads=4, kv_lora_rank=16,
                                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8)
    gptoss = configs._gptoss_config(**small, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                    num_key_value_heads=2, head_dim=16)
    phi2 = configs._phi2_config(**small, intermediate_size=256, num_key_value_heads=4)
    assert (gemma3.num_key_value_heads, deepseek.first_k_dense_replace, deepseek.n_shared_experts) == (1, 1, 2)
    # newer transformers keep the factor among the rope parameters only
    rotary = getattr(phi2, "partial_rotary_factor", None) or phi2.rope_parameters["partial_rotary_factor"]
    assert (gptoss._attn_implementation, rotary) == ("eager", 0.4)
    for config in (gemma3, deepseek, gptoss, phi2):
        lm = builders._hf("AutoModelForCausalLM", config, cpu, torch.float32)
        logits = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False)(ids)
        assert logits.shape == (1, 3, 1000) and torch.isfinite(logits).all()
    names = ("gemma3-decode-b1", "deepseek-moe-decode-b1", "gptoss-moe-prefill", "phi2-decode-b32", "twins-svt-small",
             "mobilevitv2-100", "phi2-train")
    assert [models.get(n).held_out_set for n in names] == [9] * 7


def test_tenth_held_out_set_builds_at_shrunk_widths():
    """The tenth set's decoders (Granite, Qwen2-7B, Qwen2.5-3B widths) build and run at shrunk widths, and the set
    holds both halves of the learn-from-use comparison: six tuned models and four only timed after the refit."""
    pytest.importorskip("transformers")
    import torch

    cpu, ids = torch.device("cpu"), torch.randint(0, 1000, (1, 3))
    small = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000, intermediate_size=128)
    for make in (configs._granite_config, configs._qwen2_7b_config, configs._qwen25_3b_config):
        lm = builders._hf("AutoModelForCausalLM", make(**small), cpu, torch.float32)
        logits = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False)(ids)
        assert logits.shape == (1, 3, 1000) and torch.isfinite(logits).all()
    assert configs._qwen25_3b_config().tie_word_embeddings
    tuned = ("granite-decode-b1", "qwen2-7b-decode-b8", "mixtral-moe-decode-b8", "deit-tiny-b16",
             "qwen25-3b-decode-b1", "cait-xxs24-b8")
    timed_after = ("granite-decode-b4", "qwen2-7b-decode-b2", "deit-small-b8", "qwen25-3b-decode-b4")
    assert [models.get(n).held_out_set for n in tuned + timed_after] == [10] * 10


def test_plot_without_plain_runs(tmp_path):
    """A folder of max-autotune runs alone (its plain runs kept elsewhere) plots a note, not an empty legend."""
    import warnings

    records = [_rec("a", "max-autotune", 30.0, 1.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.plot(records, report.summarize(records), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_hook_figures_by_group():
    """The report's per-group table: kinds from the records, held-out sets from the registry, worst vs best named."""
    def rec(model, mode, kind, compile_s, step_ms):
        return _rec(model, mode, compile_s, step_ms, kind=kind)

    records = [rec("gpt2-decode", "plain", "infer", 10.0, 1.0), rec("gpt2-decode", "hook", "infer", 10.0, 0.8),
               rec("mistral-prefill", "plain", "infer", 10.0, 1.0),
               rec("mistral-prefill", "hook", "infer", 20.0, 1.25),
               rec("falcon-prefill", "plain", "infer", 10.0, 2.0),
               rec("falcon-prefill", "ma-no-cudagraphs", "infer", 40.0, 1.0),
               rec("falcon-prefill", "hook", "infer", 10.0, 1.0),
               rec("resnet26-train", "plain", "train", 10.0, 3.0), rec("resnet26-train", "hook", "train", 5.0, 1.0)]
    groups = report.model_groups(records)
    assert groups == {"all": ["gpt2-decode", "mistral-prefill", "falcon-prefill", "resnet26-train"],
                      "inference": ["gpt2-decode", "mistral-prefill", "falcon-prefill"], "training": ["resnet26-train"],
                      "held out (every set)": ["mistral-prefill", "falcon-prefill", "resnet26-train"],
                      "held-out set 1": ["mistral-prefill"], "held-out set 3": ["falcon-prefill", "resnet26-train"]}
    s = report.summarize(records)
    g = report.group_figures(s, groups, "hook")
    set3 = g["held-out set 3"]
    assert set3["models"] == 2 and math.isclose(set3["geomean_speed_vs_plain"], math.sqrt(6))
    assert (g["held-out set 1"]["min_speed_vs_best"], g["held-out set 1"]["worst_model"]) == (0.8, "mistral-prefill")
    assert g["all"]["worst_model"] == "mistral-prefill" and g["all"]["max_compile_vs_plain"] == 2.0
    assert math.isclose(g["held-out set 3"]["min_speed_vs_best"], 1.0)  # falcon: ma-no-cudagraphs is its best
    md = report.markdown(records, s, [])
    assert "| held-out set 1 | 1 | 0.800 | 0.800 | 0.800 (mistral-prefill) | - | 2.00x | 2.00x |" in md


def test_batch_one_and_mixture_of_experts_entries_build():
    """The batch-1 decoders run one token at batch 1 (every GEMM has M=1) and the MoE entries build Mixtral's
    routed experts; shrunk widths on the CPU."""
    pytest.importorskip("transformers")
    import torch

    for name in ("llama-decode-b1", "qwen2-decode-b1", "phi3-decode-b1", "mixtral-moe-decode-b1"):
        assert models.get(name).kind == "infer" and name in models.names()
    cpu = torch.device("cpu")
    config = configs._mixtral_config(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=100)
    assert (config.num_local_experts, config.num_experts_per_tok) == (8, 2)
    lm = builders._hf("AutoModelForCausalLM", config, cpu, torch.float32)
    out = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False)(torch.randint(0, 100, (1, 1)))
    assert out.shape == (1, 1, 100) and torch.isfinite(out).all()


def test_compile_ratios_leave_out_the_time_spent_waiting_for_other_lanes():
    """A compile that waited for other lanes' turns on the GPU counts by its own work (``compile_s`` minus
    ``compile_waited_s``); the wall time stays in the record."""
    plain = {**_rec("a", "plain", 10.0, 2.0), "compile_waited_s": 0.0}
    tuned = {**_rec("a", "ma-no-cudagraphs", 70.0, 1.8), "compile_waited_s": 30.0}
    s = report.summarize([plain, tuned])
    assert math.isclose(s["models"]["a"]["ma-no-cudagraphs"]["compile_vs_plain"], 4.0)
    assert report.own_compile(tuned)["compile_wall_s"] == 70.0 and tuned["compile_s"] == 70.0
    assert report.own_compile(plain) is plain  # nothing waited: unchanged


def test_a_run_the_deadline_stops_is_recorded_as_stopped_and_redone(tmp_path, fast_compile, capsys):
    """The budget's deadline stops a run in flight: its record says so (and how long it ran), it is no result (the
    report names the peer as not run) and the next call redoes it; a stopped run never replaces a real result."""
    out = tmp_path / "zoo"
    argv = ["--models", "tiny-mlp", "--modes", "plain", "--out", str(out), "--repeats", "3"]
    assert run.main([*argv, "--budget-s", "1"]) == 0  # the worker is still importing torch at the deadline
    [stopped] = json.loads((out / "results.json").read_text())
    assert stopped["status"] == run.STOPPED and "stopped by the budget's deadline after" in stopped["error"]
    assert "1 run(s) left" in capsys.readouterr().out
    assert "peers not run: plain stopped by the deadline" in (out / "results.md").read_text()
    assert run.main(argv) == 0
    [done] = json.loads((out / "results.json").read_text())
    assert done["status"] == "ok"
    store = run.Store(tmp_path / "r.json", [{"model": "a", "mode": "plain", "status": "timeout"}])
    store.add({"model": "a", "mode": "plain", "status": run.STOPPED})
    assert store.records[("a", "plain")]["status"] == "timeout" and store.done("a", "plain", False)
    # loaded beside a result (--add-runs, either order): the placeholder is dropped, never a repeat
    real, stop = {**_rec("a", "plain", 1.0, 2.0)}, {"model": "a", "mode": "plain", "status": run.STOPPED}
    for order in ([stop, real], [real, stop]):
        store = run.Store(tmp_path / "r.json", order)
        assert store.all() == [real] and store.done("a", "plain", False)
    # --resume-from fills a pair whose only record is a placeholder
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{**real, "model": "tiny-mlp"}]))
    (out / "results.json").write_text(json.dumps([{**stop, "model": "tiny-mlp"}]))
    assert run.main([*argv, "--resume-from", str(seed)]) == 0
    assert [r["status"] for r in json.loads((out / "results.json").read_text())] == ["ok"]
    assert "0 run(s) to do" in capsys.readouterr().out
    summary = report.summarize([{**stop, "model": "b"}, {**_rec("b", "hook", 1.0, 1.0)}])
    assert summary["modes"]["plain"]["not_ok"] == 0 and summary["modes"]["plain"]["runs"] == 0


def test_a_killed_worker_that_does_not_exit_is_left_behind_not_waited_for():
    """After its kill the runner waits a bounded time for a worker (one whose GPU work drains can take minutes), so
    the budget's deadline holds; a worker not killed is waited for to its end."""
    import time

    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # stands for a kill not yet done
    t0 = time.monotonic()
    assert processes.reap(stuck, killed=True, wait_s=0.3) is None
    assert time.monotonic() - t0 < 5
    stuck.kill()
    assert processes.reap(stuck, killed=True, wait_s=5) == -9
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert processes.reap(quick, killed=False) == 0


def test_a_run_times_out_on_its_own_time_not_on_its_waits_for_other_lanes(tmp_path):
    """The run timeout counts wall time less what the worker says it waited for other lanes' turns; the budget's
    deadline stops it whatever it waited."""
    import time

    waited = tmp_path / "waited_s"

    def sleeper(seconds: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])

    slow = sleeper(30)
    assert processes.wait_own_time(slow, 0.3, None, waited, poll_s=0.05) == "timeout"  # no waits: its own 0.3 s ran out
    slow.kill()
    slow.wait()
    waited.write_text("10.0")  # it waited 10 s for other lanes: 1 s of wall time is not its own yet
    quick = sleeper(1.0)
    assert processes.wait_own_time(quick, 0.5, None, waited, poll_s=0.05) is None
    slow = sleeper(30)
    t0 = time.monotonic()
    assert processes.wait_own_time(slow, 60.0, time.monotonic() + 0.3, waited, poll_s=0.05) == "deadline"
    assert time.monotonic() - t0 < 5
    slow.kill()
    slow.wait()


def test_train_host_profile_counts_python_calls_per_step():
    """--profile: cProfile's count of Python calls per step and the functions with the most own time."""
    from benchmarks.zoo import host as train_host

    def inner() -> int:
        return sum(range(1000))

    def step() -> None:
        inner()
        inner()

    got = train_host._profiled(step, 10, top=10)
    assert got["profile_calls_per_step"] >= 3  # step and inner twice, besides the builtins they call
    assert got["profile_host_ms"] > 0 and len(got["profile_top"]) <= 10
    calls = {name.rsplit("(", 1)[-1].rstrip(")"): n for name, n, _us in got["profile_top"]}
    assert calls["inner"] == 2 and calls["step"] == 1


def test_train_host_refuses_an_unknown_mode_naming_it(capsys):
    """The quiet-host training benchmark checks its modes before starting any GPU process."""
    from benchmarks.zoo import host as train_host

    with pytest.raises(SystemExit) as exc:
        train_host.main(["--modes", "reduce-overhead,max-autotun"])
    assert exc.value.code == 2
    assert "max-autotun" in capsys.readouterr().err


def test_the_report_names_training_steps_timed_beside_compiling_runs():
    """A training record made with other lanes on the host is named (its comparison carries host contention); an
    inference record in lanes, or a training record timed alone, is not."""
    lanes = lambda rec, n: {**rec, "lanes_per_gpu": n}  # noqa: E731
    records = [lanes(_rec("gpt2-medium-train", "hook", 10.0, 4.7, kind="train"), 2),
               lanes(_rec("bert-train", "hook", 10.0, 2.0, kind="train"), 1),
               lanes(_rec("bert-base", "hook", 10.0, 0.2), 4)]
    line = report.shared_host_training_line(records)
    assert "gpt2-medium-train" in line and "bert-train" not in line and "bert-base" not in line
    assert report.shared_host_training_line(records[1:]) == ""
    assert line in report.markdown(records, report.summarize(records), [])


def test_held_out_set7_feeds_images_of_the_size_the_model_is_built_for(monkeypatch):
    """The seventh held-out set runs token-mixing models at 288 and 240 px (324 and 225 tokens): the input image has
    the size timm builds the model for (a 224 px image would not fit their fixed token-mixing widths)."""
    import sys
    import types

    import torch

    built = {}

    def create_model(arch, pretrained, **kw):
        built.update(arch=arch, **kw)
        return torch.nn.Identity()

    monkeypatch.setitem(sys.modules, "timm", types.SimpleNamespace(create_model=create_model))
    for name, size in (("gmlp-s16-288", 288), ("resmlp-24-240", 240)):
        entry = models.get(name)
        _, (x,), kind = entry.build(torch.device("cpu"), torch.float32)
        assert (entry.held_out_set, built["img_size"], tuple(x.shape), kind) == (7, size, (32, 3, size, size), "forward")
