"""The table of where a mode's compile time goes beyond plain's, from zoo records."""

import json

import pytest

from benchmarks.zoo.compile_phases import main, phase_table


def _record(model, mode, compile_s, **phases):
    return {"model": model, "mode": mode, "status": "ok", "compile_s": compile_s, "compile_phases_s": phases}


RECORDS = [
    _record("a", "plain", 10.0, **{"GraphLowering.run": 1.0, "async_compile.wait": 4.0}),
    _record("a", "hook", 12.0, **{"GraphLowering.run": 1.5, "async_compile.wait": 5.5, "build_guards": 0.01}),
    _record("b", "plain", 20.0, **{"async_compile.wait": 8.0}),
    _record("b", "hook", 20.0, **{"async_compile.wait": 8.1}),
    _record("c", "hook", 5.0),  # no plain run: left out
    {**_record("b", "coordinate-descent", 30.0), "status": "error"},
]


def test_each_model_in_both_modes_gets_its_ratio_and_phase_deltas():
    lines = phase_table(RECORDS, "hook")
    assert lines[0].startswith("| model | `plain` compile s | `hook` compile s | ratio | Δ async_compile.wait s | "
                               "Δ GraphLowering.run s |")  # largest move first; build_guards moves < SHOWN_S: not shown
    assert lines[2] == "| a | 10.0 | 12.0 | 1.20x | +1.5 | +0.5 |"
    assert lines[3] == "| b | 20.0 | 20.0 | 1.00x | +0.1 | +0.0 |"
    assert lines[4].startswith(f"| geomean (2 models) | | | {1.2 ** 0.5:.2f}x |")


def test_no_model_in_both_modes_is_an_error(tmp_path, capsys):
    with pytest.raises(ValueError, match="no model has ok runs of both 'coordinate-descent' and 'plain'"):
        phase_table(RECORDS, "coordinate-descent")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RECORDS))
    assert main([str(path), "--mode", "coordinate-descent"]) == 2
    assert "compile_phases: error:" in capsys.readouterr().err
    assert main([str(path)]) == 0 and "| a | 10.0 | 12.0 | 1.20x |" in capsys.readouterr().out


def test_the_zoo_report_holds_the_phase_table_where_records_carry_phases():
    from benchmarks.zoo.report import markdown, summarize

    records = [{**r, "kind": "infer", "step_ms": 1.0, "correct": True} for r in RECORDS]
    text = markdown(records, summarize(records), [])
    assert "## Where `hook`'s compile goes beyond plain's" in text and "| a | 10.0 | 12.0 | 1.20x |" in text
    bare = [{k: v for k, v in r.items() if k != "compile_phases_s"} for r in records]
    assert "compile goes beyond" not in markdown(bare, summarize(bare), [])
