"""The learn-from-use table: per model the three runs and the acceptance's ratios, set B compared after vs before."""

import json

from benchmarks.zoo import learn_report


def _rec(model, mode, step_ms, compile_s, status="ok", waited=None):
    return {"model": model, "mode": mode, "status": status, "step_ms": step_ms, "compile_s": compile_s,
            "compile_waited_s": waited}


def _write(tmp_path, name, records):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(records))
    return path


def test_ratios_per_model_and_geomean_per_set(tmp_path, capsys):
    before = _write(tmp_path, "before", [_rec("a", "hook", 1.0, 10.0), _rec("b", "hook", 2.0, 20.0)])
    tuned = _write(tmp_path, "tuned", [_rec("a", "hook-tuned", 0.8, 40.0, waited=10.0)])
    after = _write(tmp_path, "after", [_rec("a", "hook", 0.9, 11.0), _rec("b", "hook", 2.5, 20.0)])
    assert learn_report.main([str(before), str(tuned), str(after), "--set-b", "b"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row_a = next(line for line in lines if line.startswith("| a (A)"))
    # the tuned compile is net of its wait; after is 0.8/0.9 of the tuned speed, 1/0.9 of before's, compile 1.1x
    assert "| 30.0 |" in row_a and "| 0.889 | 1.111 | 1.100 |" in row_a
    row_b = next(line for line in lines if line.startswith("| b (B)"))
    assert "| – | – |" in row_b and "| – | 0.800 | 1.000 |" in row_b
    assert any(line.startswith("| geomean, set B") and "0.800 (1)" in line for line in lines)


def test_a_failed_run_is_left_out_and_a_missing_file_is_one_line(tmp_path, capsys):
    before = _write(tmp_path, "before", [_rec("a", "hook", None, None, status="error")])
    tuned = _write(tmp_path, "tuned", [])
    after = _write(tmp_path, "after", [_rec("a", "hook", 0.9, 11.0)])
    assert learn_report.main([str(before), str(tuned), str(after)]) == 0
    assert "| a (A) | – | – | – | – | 0.900 | 11.0 | – | – | – |" in capsys.readouterr().out
    assert learn_report.main([str(tmp_path / "nope.json"), str(tuned), str(after)]) == 2
    assert "nope.json" in capsys.readouterr().err
