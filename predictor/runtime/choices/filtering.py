"""The filter proper: from one GEMM's choices, what ``settings.policy`` keeps, in Inductor's own order.

``prune`` reads the GEMM (op, problem, candidates), refuses what the model cannot judge (``PassThrough``), scores
the candidates, then either decides one choice (``policy="decide"``/``"tune"``) or keeps the top k per hint group
with the prune policy's widenings (aten beside, aten alone on small GEMMs, epilogue templates).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ...core.candidate import Candidate, candidates_from_choices
from ...core.features import ideal_time_us
from ...core.problem import Problem
from ..compile_state import tf32_enabled
from .gemm_inputs import _lowering_node, output_feeds_pointwise, problem_from_inputs, scaled_op
from .policy import (EXPLICIT_KIND_OPS, aten_alone_if_small, decide_one, decided_choices, keep_best,
                     out_of_training_range, untrained_kind, with_aten_fallback, with_epilogue_templates)
from .region_models import model_for

# the pruner is passed in, never imported: pruner imports this module
GemmPruner = Any

log = logging.getLogger("predictor.runtime.choices.pruner")

# Optional model metadata section with the training problems' extent ({"m": [1, 28672], "ops": ["mm", ...], ...}).
RANGES_KEY = "problem_ranges"
# Inductor's op_name -> Problem.op. Anything else (baddbmm, "mm-ah", ...) is passed through. scaled_mm's Problem.op
# depends on its scales (gemm_inputs.scaled_op).
INDUCTOR_OPS = {"mm": "mm", "addmm": "addmm", "bmm": "bmm", "int_mm": "int_mm", "scaled_mm": "scaled_mm"}


class PassThrough(Exception):
    """The hook cannot rank this GEMM, for ``reason`` (a stats key): it keeps the fallback (the aten choice alone,
    or the whole list with ``fallback="full"``), or the whole list with ``keep_all``."""

    def __init__(self, reason: str, message: str, warn: bool = True, keep_all: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.warn = warn
        self.keep_all = keep_all  # not ours to judge (a CPU GEMM): the whole list whatever the fallback


def prune(pruner: GemmPruner, choices: list[Any], kernel_inputs: Any, op_name: str) -> list[Any]:
    """The choices ``pruner``'s policy keeps for one GEMM; raises ``PassThrough`` where it cannot judge."""
    s, model = pruner.settings, pruner.model
    if model.ranker is None:
        raise PassThrough(model.disabled or "no_model", "no usable model", warn=False)
    if s.device is None and getattr(kernel_inputs, "device_type", "cuda") != "cuda":
        raise PassThrough("not_cuda", f"{op_name} on {kernel_inputs.device_type}", warn=False, keep_all=True)
    op = INDUCTOR_OPS.get(op_name)
    if op == "scaled_mm":
        op = scaled_op(kernel_inputs)
    if op is None:
        raise PassThrough("unknown_op", f"unknown GEMM op {op_name!r}")
    if op in EXPLICIT_KIND_OPS:  # checked before any choice is mapped: untrained, it gets the fallback
        why = untrained_kind(model.metadata.get(RANGES_KEY), problem_from_inputs(kernel_inputs, op))
        if why:
            raise PassThrough("untrained_kind", f"{op_name}: {why}")
    try:
        cands, hints = candidates_from_choices(choices)
    except (ValueError, KeyError) as exc:
        raise PassThrough("unknown_template", f"{op_name}: {exc}") from None
    groups: dict[int | None, list[int]] = {}
    if hints.count(None) == len(hints):  # no multi-kernel hints (the usual case): no loop over 2400 choices
        groups[None] = list(range(len(hints)))
    else:
        for i, hint in enumerate(hints):
            groups.setdefault(hint, []).append(i)
    hinted = any(h is not None for h in groups)
    choosing_hints = hinted and s.hints == "predict"
    deciding = s.policy in ("decide", "tune") and not hinted
    if len(choices) == 1 or (not deciding and not choosing_hints
                             and all(len(members) <= s.top_k for members in groups.values())):
        return choices  # nothing to prune: skip the problem and the model

    problem = problem_from_inputs(kernel_inputs, op)
    # an op or dtype the model never trained on is always passed through; sizes only when asked to be careful
    outside = out_of_training_range(model.metadata.get(RANGES_KEY), problem, sizes=s.min_confidence is not None)
    if outside:
        raise PassThrough("out_of_distribution", outside, warn=False)
    if problem.dtype == "float32" and tf32_enabled():
        # labels time float32 with TF32 off (Inductor's default); with TF32 on, cuBLAS and the Triton
        # templates run other instructions and the ranking does not carry over
        raise PassThrough("tf32", f"{problem}: float32 with TF32 enabled was never measured", warn=False)
    region = model_for(model.region_models, problem)  # a region model ranks its region's GEMMs
    pruner.counters.add("region_scored", region is not None)
    scores = model.scores(problem, cands, hints, region)
    if scores.shape != (len(choices),) or not np.isfinite(scores).all():
        raise ValueError(f"the ranker returned {scores.shape} scores, not {len(choices)} finite ones")
    is_aten = [c.family == "aten" for c in cands]
    if deciding:
        return _decided(pruner, choices, kernel_inputs, op_name, problem, cands, scores, is_aten, region)
    return _top_k(pruner, choices, kernel_inputs, op_name, problem, cands, scores, is_aten, groups, choosing_hints)


def _decided(pruner: GemmPruner, choices: list[Any], kernel_inputs: Any, op_name: str, problem: Problem,
             cands: list[Candidate], scores: np.ndarray, is_aten: list[bool], region: Any) -> list[Any]:
    """The decide and tune policies: one choice (tune: the decided kind's top k), no benchmark."""
    s = pruner.settings
    chosen = decide_one(scores, is_aten, pruner.may_pick_triton(problem, kernel_inputs),
                        pruner.decide_gap(problem, region))
    log.debug("gemm-predictor: %s (%s): decided %s of %d", op_name, problem, cands[chosen].key, len(cands))
    if pruner.decision_observer is not None:
        try:  # observing must never break a compile
            pruner.decision_observer(choices, scores, is_aten, chosen, problem, kernel_inputs, op_name)
        except Exception as exc:  # noqa: BLE001
            pruner.counters.warn_once("observe", f"observing the decision for {op_name} failed "
                                      f"({type(exc).__name__}: {exc})")
    return [choices[i] for i in decided_choices(scores, is_aten, chosen, s.policy, s.top_k)]


def _top_k(pruner: GemmPruner, choices: list[Any], kernel_inputs: Any, op_name: str, problem: Problem,
           cands: list[Candidate], scores: np.ndarray, is_aten: list[bool], groups: dict[int | None, list[int]],
           choosing_hints: bool) -> list[Any]:
    """The prune policy: the top k per hint group for Inductor to benchmark, with its widenings."""
    s, model = pruner.settings, pruner.model
    hinted = any(h is not None for h in groups)
    # Inductor's scheduler needs a Triton kernel for every hint in config.multi_kernel_hints (it takes the
    # min over each hint group's Triton timings), so a hint not worth autotuning keeps its favourite alone
    # rather than nothing
    predicted = pruner.predicted_hints(problem, cands, scores, groups) if choosing_hints else None
    margin = model.margin()
    kept: list[np.ndarray] = []
    for hint, members in groups.items():
        idx = np.asarray(members)
        k = s.top_k if predicted is None or hint is None or hint in predicted else 1
        if s.min_confidence is not None and len(idx) > k:
            ordered = np.sort(scores[idx])[::-1]
            confidence = ordered[0] - ordered[k]
            if confidence < s.min_confidence:
                k = 2 * s.top_k
                pruner.counters.fallback("low_confidence")
                log.debug("gemm-predictor: %s hint=%s: margin %.3g < %.3g, keeping top %d",
                          problem, hint, confidence, s.min_confidence, k)
        kept.append(idx[keep_best(scores[idx], k, margin)])
    keep_idx = np.concatenate(kept)
    if s.keep_aten:
        keep_idx = with_aten_fallback(keep_idx, scores, is_aten)
    if s.aten_alone_below_us is not None and not hinted:  # scores of other hints' M do not compare with aten's
        ideal = ideal_time_us(problem.b, problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype,
                              model.device)
        keep_idx = aten_alone_if_small(keep_idx, scores, is_aten, ideal, s.aten_alone_below_us)
        if len(keep_idx) == 1 and cands[int(keep_idx[0])].family == "aten" and ideal < s.aten_alone_below_us:
            pruner.remember_aten_alone(kernel_inputs)
    if s.epilogue_templates and not hinted and output_feeds_pointwise(_lowering_node()):
        before = len(keep_idx)
        keep_idx = with_epilogue_templates(keep_idx, scores, [c.family == "triton_mm" for c in cands],
                                           s.epilogue_templates)
        if len(keep_idx) > before:
            pruner.counters.add("epilogue_templates_added", len(keep_idx) - before)
    keep = {int(i) for i in keep_idx}
    if s.override_gap is not None:
        pruner.remember_scores({cands[i].key: float(scores[i]) for i in keep})
    if log.isEnabledFor(logging.DEBUG):
        ranked = sorted(range(len(cands)), key=lambda i: -scores[i])
        log.debug("gemm-predictor: %s (%s): kept %d/%d %s; scores %s", op_name, problem, len(keep), len(cands),
                  [cands[i].key for i in sorted(keep)],
                  ", ".join(f"{cands[i].key}={scores[i]:.3f}" for i in ranked))
    return [choices[i] for i in sorted(keep)]
