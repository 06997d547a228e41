"""What another model or decide gap would have chosen on the GEMMs the in-program harness measured, and the
agreement it would have reached (CPU only; both sides of every flipped GEMM were timed in the program).

    python -m collectors.in_program.redecide --inprog docs/benchmarks/zoo/nvidia-h100/in_program --gap -1.5
    python -m collectors.in_program.redecide --inprog docs/benchmarks/zoo/nvidia-h100/in_program \\
        --model models/h100-default-lgbm --gap 2.0
    python -m collectors.in_program.redecide --inprog docs/benchmarks/zoo/nvidia-h100/in_program \\
        --inprog docs/benchmarks/zoo/nvidia-h100/in_program/held_out_set2 --gap -1.5 --lomo

Without ``--model``, each GEMM's side follows from the score gap recorded in the program (the model that ran
there): Triton/decompose-K when it is at least ``policy.decide_gap_for`` of ``--gap`` (the shipped floors: 0.0 for
int8/fp8, 2.0 for few rows with a long K); ``--gap-only`` compares with ``--gap`` alone (the policy before
the gap -2.5 runs). With ``--model``: for each flipped GEMM of
``agreement.json`` it rebuilds the candidate list from ``predictor.spaces`` (the installed
torch's lists: on another torch than the GPU's, a candidate may differ from the one Inductor offered), scores it
with ``--model`` and takes ``policy.decide_one`` at ``--gap``. A GEMM whose decision lands on the other side
(cuBLAS vs Triton/decompose-K) than the hook took in the program is counted with the runner-up's measured time.

``--lomo``: what choosing the gap on these measurements would generalise to, leaving one zoo model out at a time:
the gap of ``LOMO_GAPS`` with the best agreement on the other models' GEMMs (ties: the nearest to 0) decides the
left-out model's GEMMs (recorded gaps). Several ``--inprog`` folders are pooled.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import sys
from pathlib import Path

from predictor.artifacts.model_folder import load_runtime_model
from predictor.artifacts.reading import DOCUMENT_BYTES, read_json
from predictor.core.device import DeviceInfo
from predictor.core.runtime_features import runtime_feature_matrix
from predictor.core.problem import Problem
from predictor.runtime.choices.policy import decide_gap_for, decide_one, trusted_kind
from predictor.spaces import enumerate_space


def side_of(model_folder: str, gap: float, problem: Problem) -> str:
    """``"cublas"`` or ``"triton"``: the side the decide policy takes for ``problem`` with this model and gap."""
    model, meta = _load_model(model_folder)
    device = DeviceInfo.from_metadata(meta)
    cands = enumerate_space(problem, "default", device, tma=True)
    features = runtime_feature_matrix(problem, cands, [None] * len(cands), device)
    is_aten = [c.family == "aten" for c in cands]
    chosen = decide_one(model.score_features(features), is_aten, trusted_kind(meta.get("problem_ranges"), problem),
                        decide_gap_for(problem, gap))
    return "cublas" if is_aten[chosen] else "triton"


_load_model = functools.cache(load_runtime_model)  # one parse per model folder, not one per GEMM


def counted(summary: dict, models: set[str] | None = None) -> list[dict]:
    """The measured GEMMs the figure counts: those the harness resolved, of ``models`` (None: all)."""
    return [g for g in summary["gemms"]
            if g.get("resolved", True) and (models is None or g["model"] in models)]


_PROBLEM_FIELDS = {f.name for f in dataclasses.fields(Problem)}


def problem_of(gemm: dict) -> Problem:
    """The Problem of an ``agreement.json`` GEMM. The harness writes its repr (``Problem(op='mm', m=1, ...)``),
    which is read as data: one call of ``Problem`` with keyword arguments whose values are literals, each a field of
    Problem; anything else (a name, an attribute, another call) is refused with one line. Never evaluated: the file
    is text a user may be handed."""
    text = gemm.get("problem") if isinstance(gemm, dict) else None
    shown = repr(text)[:80]
    try:
        if not isinstance(text, str):
            raise ValueError("not a string")
        call = ast.parse(text, mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Problem"
                and not call.args):
            raise ValueError("not Problem(field=value, ...)")
        fields = {}
        for keyword in call.keywords:
            if keyword.arg not in _PROBLEM_FIELDS or keyword.arg in fields:
                raise ValueError(f"{keyword.arg!r} is not a field of Problem (or comes twice)")
            fields[keyword.arg] = ast.literal_eval(keyword.value)  # literals only: no names, calls or attributes
        return Problem(**fields)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise ValueError(f"agreement.json problem {shown}: not a Problem ({type(exc).__name__}: "
                         f"{(str(exc).splitlines() or [''])[0][:120]})") from None


def recorded_takes_triton(problem: Problem, recorded_gap: float, gap: float, gap_only: bool = False) -> bool:
    """Whether the decide policy at ``gap`` takes Triton for a GEMM whose score gap was ``recorded_gap``: the
    shipped floors applied (``decide_gap_for``), or ``gap`` alone with ``gap_only``."""
    return recorded_gap >= (gap if gap_only else decide_gap_for(problem, gap))


def redecide(summary: dict, model_folder: str | None, gap: float, tolerance: float,
             models: set[str] | None = None, gap_only: bool = False) -> dict:
    """Per measured GEMM (those the harness resolved) the new side and whether it is within ``tolerance`` of the
    better measured side. ``model_folder`` None: the side the recorded gap gives at ``gap`` (``gap_only``: without
    the policy's floors)."""
    rows = []
    for g in counted(summary, models):
        problem = problem_of(g)
        if model_folder is None:
            side = "triton" if recorded_takes_triton(problem, g["gap"], gap, gap_only) else "cublas"
        else:
            side = side_of(model_folder, gap, problem)
        ms = g["hook_ms"] if side == g["hook"] else g["alternative_ms"]
        best = min(g["hook_ms"], g["alternative_ms"])
        rows.append({"model": g["model"], "problem": g["problem"], "was": g["hook"], "now": side,
                     "agrees": ms <= best * (1 + tolerance)})
    share = sum(r["agrees"] for r in rows) / len(rows) if rows else None
    return {"model": model_folder, "gap": gap, "n": len(rows), "agreement": share,
            "changed": [r for r in rows if r["now"] != r["was"]]}


LOMO_GAPS = tuple(x / 2 for x in range(-12, 7))  # -6.0 .. 3.0 in steps of 0.5


def leave_one_model_out(summary: dict, tolerance: float, gaps: tuple[float, ...] = LOMO_GAPS,
                        gap_only: bool = False) -> dict:
    """The agreement of a gap chosen without the model it decides (recorded gaps): per zoo model, the gap of
    ``gaps`` best on the other models' GEMMs; the pooled share of GEMMs within ``tolerance``, and each choice."""
    names = sorted({g["model"] for g in counted(summary)})
    hits, total, chosen = 0, 0, {}
    for held in names:
        others = set(names) - {held}
        best = max(gaps, key=lambda gap: (redecide(summary, None, gap, tolerance, others, gap_only)["agreement"],
                                          -abs(gap)))
        result = redecide(summary, None, best, tolerance, {held}, gap_only)
        hits, total, chosen[held] = hits + round(result["agreement"] * result["n"]), total + result["n"], best
    return {"agreement": hits / total if total else None, "n": total, "gaps": chosen}


def pooled(folders: list[str]) -> dict:
    """The agreement.json of several in-program folders as one (their GEMMs together; one tolerance)."""
    docs = [read_json(Path(f) / "agreement.json", DOCUMENT_BYTES, "agreement.json") for f in folders]
    for f, d in zip(folders, docs):
        if not (isinstance(d, dict) and isinstance(d.get("gemms"), list) and "tolerance" in d):
            raise ValueError(f"{Path(f) / 'agreement.json'}: not an in-program agreement document (no gemms list "
                             "and tolerance)")
    if len({d["tolerance"] for d in docs}) > 1:
        raise SystemExit(f"--inprog folders measured with different tolerances: {[d['tolerance'] for d in docs]}")
    return {"tolerance": docs[0]["tolerance"], "gemms": [g for d in docs for g in d["gemms"]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inprog", required=True, action="append",
                   help="an in_program output folder (its agreement.json); repeat to pool several")
    p.add_argument("--model", help="a model folder to re-score with (default: the gaps recorded in the program)")
    p.add_argument("--gap", type=float, required=True)
    p.add_argument("--models", help="comma-separated: only these zoo models' GEMMs")
    p.add_argument("--lomo", action="store_true", help="also the leave-one-model-out agreement of choosing the gap")
    p.add_argument("--gap-only", action="store_true",
                   help="recorded gaps against --gap alone, without the policy's floors (the policy before the gap -2.5 runs)")
    args = p.parse_args(argv)
    try:
        summary = pooled(args.inprog)
        for g in summary["gemms"]:
            problem_of(g)  # every problem read before any work: a bad one is one line, never a traceback
    except ValueError as exc:  # InputError too (a FIFO, a file over the cap, bad JSON)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    models = set(args.models.split(",")) if args.models else None
    if args.gap_only and args.model:
        p.error("--gap-only applies to the recorded gaps; drop --model")
    result = redecide(summary, args.model, args.gap, summary["tolerance"], models, args.gap_only)
    measured = [g["agrees"] for g in counted(summary, models)]
    print(f"measured policy: {sum(measured) / len(measured):.1%} of {len(measured)} GEMMs; "
          f"{args.model or 'the recorded gaps'} at gap {args.gap}: {result['agreement']:.1%}; "
          f"decisions changed on {len(result['changed'])}:")
    for r in result["changed"]:
        print(f"  {r['model']:<18} {r['problem'][:90]}  {r['was']} -> {r['now']}  "
              f"{'agrees' if r['agrees'] else 'DISAGREES'}")
    if args.lomo:
        lomo = leave_one_model_out(summary, summary["tolerance"], gap_only=args.gap_only)
        print(f"leave one model out, the gap chosen on the others ({LOMO_GAPS[0]}..{LOMO_GAPS[-1]}): "
              f"{lomo['agreement']:.1%} of {lomo['n']} GEMMs; gaps chosen: {sorted(set(lomo['gaps'].values()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
