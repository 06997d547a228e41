"""The serving benchmark on the CPU: a dynamic and a static mode over three sizes in fresh workers, the records,
the resume, the report and the one-line refusals. (The GPU runs: docs/benchmarks/serving.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.serving import report, run

REPO = Path(__file__).resolve().parents[1]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks.serving.run", "--models", "tiny", "--phases", "decode", "--modes",
           "plain-dynamic,plain-static", "--decode-sizes", "1,3,8", "--repeats", "3", "--out", str(out), *extra]
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=400)


def test_one_dynamic_compile_serves_every_size_and_a_rerun_resumes(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads((tmp_path / "results.json").read_text())
    by = {(r["mode"], r["size"]): r for r in records}
    assert sorted(by) == [(m, s) for m in ("plain-dynamic", "plain-static") for s in (1, 3, 8)]
    assert all(r["status"] == "ok" and r["step_ms"] > 0 and r["timing"] == "direct" and r["process"] == 0
               for r in records)
    dynamic = [by[("plain-dynamic", s)] for s in (1, 3, 8)]
    assert len({r["compile_s"] for r in dynamic}) == 1  # the one graph's whole compile, over every size
    assert dynamic[-1]["recompiles"] == 1  # size 1 is specialised; 3 and 8 share the dynamic graph
    assert all(r["compile_waited_s"] == 0.0 for r in records)  # one lane: nothing to wait for
    assert all(0 <= r["max_rel_err"] < 1e-4 for r in records)  # float32 on the CPU: eager's output
    assert all(by[("plain-static", s)]["recompiles"] == 0 for s in (1, 3, 8))
    md = (tmp_path / "results.md").read_text()
    assert "Outputs against eager's" in md and "`plain-static` " in md
    assert "## tiny, decode" in md and "| `plain-dynamic` |" in md and (tmp_path / "step_vs_size.png").exists()
    again = _run(tmp_path)
    assert again.returncode == 0 and len(json.loads((tmp_path / "results.json").read_text())) == 6


@pytest.mark.parametrize(("args", "words"), [(["--modes", "fast"], "unknown mode 'fast'"),
                                             (["--decode-sizes", "1,x"], "expected positive integers"),
                                             (["--models", "gpt5"], "unknown model 'gpt5'"),
                                             (["--processes", "0"], "--processes 0: expected 1 or more")])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, args, words):
    base = ["--models", "tiny", "--phases", "decode", "--out", str(tmp_path)]
    assert run.main(base + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_report_compares_hook_dynamic_with_the_best_peer_at_each_size():
    rec = lambda mode, size, ms, compile_s=10.0: {"model": "tiny", "phase": "decode", "mode": mode, "size": size,  # noqa: E731
                                                  "status": "ok", "step_ms": ms, "compile_s": compile_s}
    records = [rec("plain-dynamic", 1, 1.0), rec("plain-dynamic", 8, 2.0), rec("ma-static", 1, 0.5, 30.0),
               rec("ma-static", 8, 2.5, 30.0), rec("hook-dynamic", 1, 0.8, 12.0), rec("hook-dynamic", 8, 1.6, 12.0)]
    t = report.table(records)[("tiny", "decode")]
    assert t["vs_best"] == {"hook-dynamic": {1: 0.5 / 0.8, 8: 2.0 / 1.6}}
    assert t["vs_plain"] == {"hook-dynamic": {1: 1.0 / 0.8, 8: 2.0 / 1.6}}
    assert t["compile"] == {"plain-dynamic": 10.0, "ma-static": 60.0, "hook-dynamic": 12.0}  # static: one per size
    waited = [{**r, "compile_waited_s": 5.0} if r["mode"] == "ma-static" else r for r in records]
    assert report.table(waited)[("tiny", "decode")]["compile"]["ma-static"] == 50.0  # other lanes' turns left out
    assert "`hook-dynamic`: geomean over sizes vs plain-dynamic 1.250; worst vs the best peer 0.625; compile vs " \
           "plain-dynamic 1.20x" in report.markdown(records)
    # the per-range mode is compared the same way, beside the default
    ranged = records + [rec("hook-ranges-dynamic", 1, 0.5, 14.0), rec("hook-ranges-dynamic", 8, 2.0, 14.0)]
    t = report.table(ranged)[("tiny", "decode")]
    assert t["vs_best"]["hook-ranges-dynamic"] == {1: 1.0, 8: 1.0}
    assert "`hook-ranges-dynamic`: geomean over sizes vs plain-dynamic 1.414" in report.markdown(ranged)
    # the default compiled once per size (a server's compile sizes): compared alike, its compiles summed over sizes
    per_size = records + [rec("hook-static", 1, 0.4, 5.0), rec("hook-static", 8, 1.0, 6.0)]
    t = report.table(per_size)[("tiny", "decode")]
    assert t["vs_best"]["hook-static"] == {1: 0.5 / 0.4, 8: 2.0 / 1.0} and t["compile"]["hook-static"] == 11.0
    # replays back to back, where the records have them: the same comparison on that timing
    queued = [{**r, "step_ms_b2b": r["step_ms"] * (0.5 if r["mode"] == "plain-dynamic" else 1.0)} for r in records]
    assert report.table(queued, "step_ms_b2b")[("tiny", "decode")]["vs_plain"]["hook-dynamic"] == {1: 0.625, 8: 0.625}
    assert "Replays back to back (`step_ms_b2b`): 0.625 vs plain-dynamic, worst 0.625 vs the best peer." in \
        report.markdown(queued)
    assert "back to back" not in report.markdown(records)
    spoiled = records + [{**rec("plain-static", 8, 2.0), "step_ms_p10": 1.8, "step_ms_p90": 2.6}]
    assert "rerun before reading them): tiny decode 8 `plain-static` (40%)." in report.markdown(spoiled)


def test_pending_runs_a_dynamic_mode_whole_and_a_static_modes_missing_sizes_in_chunks():
    jobs = [("tiny", "decode", "plain-dynamic", "1,2,4,8"), ("tiny", "decode", "ma-static", "1,2,4,8,16")]
    rec = lambda mode, size: {"model": "tiny", "phase": "decode", "mode": mode, "size": size}  # noqa: E731
    static = [("tiny", "decode", "ma-static", sizes, 0) for sizes in ("1,2", "4,8", "16")]
    assert run.pending(jobs, [], 2) == [("tiny", "decode", "plain-dynamic", "1,2,4,8", 0), *static]
    # a stopped static worker kept sizes 2 and 8; the dynamic mode, once there, is done
    done = [rec("plain-dynamic", s) for s in (1, 2, 4, 8)] + [rec("ma-static", 2), rec("ma-static", 8)]
    assert run.pending(jobs, done, 2) == [("tiny", "decode", "ma-static", "1,4", 0),
                                          ("tiny", "decode", "ma-static", "16", 0)]
    # in two processes: the dynamic mode's second process is left (records without `process` are process 0's),
    # the static mode's sizes run once
    assert run.pending(jobs, done, 2, processes=2) == [("tiny", "decode", "ma-static", "1,4", 0),
                                                       ("tiny", "decode", "ma-static", "16", 0),
                                                       ("tiny", "decode", "plain-dynamic", "1,2,4,8", 1)]
    second = [{**rec("plain-dynamic", s), "process": 1} for s in (1, 2, 4, 8)]
    assert ("tiny", "decode", "plain-dynamic", "1,2,4,8", 1) not in run.pending(jobs, done + second, 2, processes=2)


def test_a_mode_run_in_several_processes_reports_the_median_per_size():
    rec = lambda mode, size, ms, process, compile_s=10.0: {  # noqa: E731
        "model": "tiny", "phase": "decode", "mode": mode, "size": size, "status": "ok", "step_ms": ms,
        "compile_s": compile_s, "process": process}
    records = [rec("plain-dynamic", 8, ms, p, c) for p, (ms, c) in enumerate([(2.0, 10.0), (2.4, 14.0), (2.1, 11.0)])]
    records += [rec("hook-dynamic", 8, 2.0, 0, 12.0)]
    t = report.table(records)[("tiny", "decode")]
    assert t["steps"]["plain-dynamic"] == {8: 2.1} and t["compile"]["plain-dynamic"] == 11.0
    assert t["vs_plain"]["hook-dynamic"] == {8: 2.1 / 2.0}
    assert "median per size" in report.markdown(records)
    assert "median per size" not in report.markdown(records[:1] + records[3:])


def test_kernel_classes_follow_inductor_prefixes_then_library_names():
    from benchmarks.serving.kernels import kind_of

    assert kind_of("triton_poi_fused_mul_silu_7") == "pointwise"
    assert kind_of("triton_red_fused_mean_pow_rsqrt_0") == kind_of("triton_per_fused_softmax_1") == "reduction"
    assert kind_of("triton_unk_fused_mm_mul_13") == "gemv"
    assert kind_of("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT") == "gemm"
    assert kind_of("_few_rows_kernel") == "gemm"  # the few-rows op's kernel: a GEMM of its own
    assert kind_of("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert kind_of("void at::native::vectorized_elementwise_kernel") == "other"


def test_inductor_settings_are_read_as_literals_and_a_bad_one_is_named():
    from benchmarks.serving.kernels import inductor_settings

    assert inductor_settings(["triton.prefer_nd_tiling=True", "max_autotune=False"]) == {
        "triton.prefer_nd_tiling": True, "max_autotune": False}
    with pytest.raises(SystemExit, match="no setting 'triton.no_such_flag'"):
        inductor_settings(["triton.no_such_flag=1"])
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        inductor_settings(["triton.prefer_nd_tiling"])


def test_every_mode_serves_the_same_tokens_at_a_size_whatever_was_drawn_before():
    import torch

    from benchmarks.serving import models

    spec = models.get("llama")
    first = models.inputs(spec, "prefill", 64, torch.device("cpu"))[0]
    torch.randn(1000)  # a max-autotune compile's benchmark inputs
    assert torch.equal(models.inputs(spec, "prefill", 64, torch.device("cpu"))[0], first)
    assert not torch.equal(models.inputs(spec, "prefill", 64 + 1, torch.device("cpu"))[0][:, :64], first)


def test_an_output_launched_wrong_shows_as_order_one_beside_bf16_rounding():
    import torch

    from benchmarks.serving.worker import relative_error

    eager = torch.randn(4, 1, 1000)
    assert relative_error(eager.clone(), eager) == 0.0
    assert relative_error(eager.to(torch.bfloat16), eager) < 1e-2  # a compiled bf16 step: rounding
    assert relative_error(eager.flip(0), eager) > 0.3  # rows swapped, as a launch with the wrong size would


def test_the_norms_probe_drops_a_reductions_row_mask_only():
    from benchmarks.serving.norms import without_row_mask

    reduction = "@triton_heuristics.reduction(\n...\n    xmask = xindex < xnumel\n"
    pointwise = "@triton_heuristics.pointwise(\n...\n    xmask = xindex < xnumel\n"
    probe = without_row_mask(lambda kernel, source: source)
    assert probe(None, reduction).endswith("xmask = tl.full([XBLOCK, 1], True, tl.int1)\n")
    assert probe(None, pointwise) == pointwise  # a pointwise kernel's rows are [XBLOCK]: left alone
