"""benchmarks.zoo.redecide: another model or gap re-decides the GEMMs the in-program harness measured."""

from __future__ import annotations

from benchmarks.zoo.redecide import redecide

GPT2_FC = ("Problem(op='addmm', m=16, n=3072, k=768, dtype='float16', b=1, out_dtype='float16', layout_a='row', "
           "layout_b='row', align=16)")


def summary(hook_ms: float, alternative_ms: float) -> dict:
    return {"tolerance": 0.01, "agreement": 0.0, "n": 1,
            "gemms": [{"model": "gpt2-decode", "problem": GPT2_FC, "hook": "cublas", "hook_ms": hook_ms,
                       "alternative_ms": alternative_ms}]}


def test_a_changed_decision_takes_the_runner_ups_measured_time():
    # measured on an H100: Triton (the runner-up) 0.1053 ms against cuBLAS's 0.1091 for the whole step
    now = redecide(summary(0.1091, 0.1053), "models/h100-default-lgbm-all", 0.0, 0.01)
    assert [r["now"] for r in now["changed"]] == ["triton"] and now["agreement"] == 1.0
    # the policy the program ran (score gap 0.33 < 2.0) keeps cuBLAS: it disagrees with the measurement
    then = redecide(summary(0.1091, 0.1053), "models/h100-default-lgbm", 2.0, 0.01)
    assert then["changed"] == [] and then["agreement"] == 0.0
    # had cuBLAS been faster in the program, the new pick would disagree
    assert redecide(summary(0.1000, 0.1100), "models/h100-default-lgbm-all", 0.0, 0.01)["agreement"] == 0.0


def test_without_a_model_the_recorded_gap_decides_and_unresolved_gemms_are_left_out():
    doc = summary(0.1091, 0.1053)
    doc["gemms"][0]["gap"] = -0.91
    doc["gemms"].append({**doc["gemms"][0], "gap": -0.5, "resolved": False})  # too noisy: not counted
    assert redecide(doc, None, 0.0, 0.01) == {"model": None, "gap": 0.0, "n": 1, "agreement": 0.0, "changed": []}
    at_margin = redecide(doc, None, -1.5, 0.01)  # -0.91 >= -1.5: Triton, measured faster
    assert at_margin["agreement"] == 1.0 and [r["now"] for r in at_margin["changed"]] == ["triton"]
    assert redecide(doc, None, -0.9, 0.01)["agreement"] == 0.0  # -0.91 < -0.9: cuBLAS, measured slower
