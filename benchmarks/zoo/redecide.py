"""What another model or decide gap would have chosen on the GEMMs the in-program harness measured, and the
agreement it would have reached (CPU only; both sides of every flipped GEMM were timed in the program).

    python -m benchmarks.zoo.redecide --inprog docs/benchmarks/zoo/nvidia-h100/in_program --gap -1.5
    python -m benchmarks.zoo.redecide --inprog docs/benchmarks/zoo/nvidia-h100/in_program \\
        --model models/h100-default-lgbm --gap 2.0

Without ``--model``, each GEMM's side follows from the score gap recorded in the program (the model that ran
there): Triton/decompose-K when it is at least ``--gap``. With ``--model``: for each flipped GEMM of
``agreement.json`` it rebuilds the candidate list from ``predictor.spaces`` (the installed
torch's lists: on another torch than the GPU's, a candidate may differ from the one Inductor offered), scores it
with ``--model`` and takes ``policy.decide_one`` at ``--gap``. A GEMM whose decision lands on the other side
(cuBLAS vs Triton/decompose-K) than the hook took in the program is counted with the runner-up's measured time.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

from predictor.artifacts import load_runtime_model
from predictor.device import DeviceInfo
from predictor.features import runtime_feature_matrix
from predictor.problem import Problem
from predictor.runtime.policy import decide_one, trusted_kind
from predictor.spaces import enumerate_space


def side_of(model_folder: str, gap: float, problem: Problem) -> str:
    """``"cublas"`` or ``"triton"``: the side the decide policy takes for ``problem`` with this model and gap."""
    model, meta = _load_model(model_folder)
    device = DeviceInfo.from_metadata(meta)
    cands = enumerate_space(problem, "default", device, tma=True)
    features = runtime_feature_matrix(problem, cands, [None] * len(cands), device)
    is_aten = [c.family == "aten" for c in cands]
    chosen = decide_one(model.score_features(features), is_aten, trusted_kind(meta.get("problem_ranges"), problem), gap)
    return "cublas" if is_aten[chosen] else "triton"


_load_model = functools.cache(load_runtime_model)  # one parse per model folder, not one per GEMM


def counted(summary: dict, models: set[str] | None = None) -> list[dict]:
    """The measured GEMMs the figure counts: those the harness resolved, of ``models`` (None: all)."""
    return [g for g in summary["gemms"]
            if g.get("resolved", True) and (models is None or g["model"] in models)]


def redecide(summary: dict, model_folder: str | None, gap: float, tolerance: float,
             models: set[str] | None = None) -> dict:
    """Per measured GEMM (those the harness resolved) the new side and whether it is within ``tolerance`` of the
    better measured side. ``model_folder`` None: the side the recorded gap gives at ``gap``."""
    rows = []
    for g in counted(summary, models):
        if model_folder is None:
            side = "triton" if g["gap"] >= gap else "cublas"
        else:
            problem = eval(g["problem"], {"Problem": Problem})  # noqa: S307 -- the harness's own repr of a Problem
            side = side_of(model_folder, gap, problem)
        ms = g["hook_ms"] if side == g["hook"] else g["alternative_ms"]
        best = min(g["hook_ms"], g["alternative_ms"])
        rows.append({"model": g["model"], "problem": g["problem"], "was": g["hook"], "now": side,
                     "agrees": ms <= best * (1 + tolerance)})
    share = sum(r["agrees"] for r in rows) / len(rows) if rows else None
    return {"model": model_folder, "gap": gap, "n": len(rows), "agreement": share,
            "changed": [r for r in rows if r["now"] != r["was"]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inprog", required=True, help="an in_program output folder (its agreement.json)")
    p.add_argument("--model", help="a model folder to re-score with (default: the gaps recorded in the program)")
    p.add_argument("--gap", type=float, required=True)
    p.add_argument("--models", help="comma-separated: only these zoo models' GEMMs")
    args = p.parse_args(argv)
    summary = json.loads((Path(args.inprog) / "agreement.json").read_text())
    models = set(args.models.split(",")) if args.models else None
    result = redecide(summary, args.model, args.gap, summary["tolerance"], models)
    measured = [g["agrees"] for g in counted(summary, models)]
    print(f"measured policy: {sum(measured) / len(measured):.1%} of {len(measured)} GEMMs; "
          f"{args.model or 'the recorded gaps'} at gap {args.gap}: {result['agreement']:.1%}; "
          f"decisions changed on {len(result['changed'])}:")
    for r in result["changed"]:
        print(f"  {r['model']:<18} {r['problem'][:90]}  {r['was']} -> {r['now']}  "
              f"{'agrees' if r['agrees'] else 'DISAGREES'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
