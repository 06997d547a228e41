"""collectors.in_program.redecide: another model or gap re-decides the GEMMs the in-program harness measured."""

from __future__ import annotations

from collectors.in_program.redecide import leave_one_model_out, redecide

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


def _gemm(model: str, gap: float, triton_faster: bool) -> dict:
    """A cuBLAS pick measured against its Triton runner-up, 5% apart."""
    return {"model": model, "problem": GPT2_FC, "gap": gap, "hook": "cublas", "hook_ms": 1.0,
            "alternative_ms": 0.95 if triton_faster else 1.05}


def test_leave_one_model_out_scores_each_model_with_a_gap_chosen_on_the_others():
    # a and b: Triton wins above -2.0, cuBLAS below; chosen on the others, the gap carries over
    consistent = [_gemm(m, gap, gap > -2.0) for m in ("a", "b", "c") for gap in (-3.0, -1.0)]
    lomo = leave_one_model_out({"gemms": consistent}, 0.01, gaps=(-4.0, -2.5, -0.5))
    assert lomo == {"agreement": 1.0, "n": 6, "gaps": {"a": -2.5, "b": -2.5, "c": -2.5}}
    # model c wants the opposite: left out, it gets a and b's gap and misses both; without a (or b), every gap
    # fits half of the rest, the tie goes to the gap nearest 0, and that misses one of a's (b's) two
    outlier = consistent[:4] + [_gemm("c", -3.0, True), _gemm("c", -1.0, False)]
    lomo = leave_one_model_out({"gemms": outlier}, 0.01, gaps=(-4.0, -2.5, -0.5))
    assert lomo == {"agreement": 2 / 6, "n": 6, "gaps": {"a": -0.5, "b": -0.5, "c": -2.5}}
