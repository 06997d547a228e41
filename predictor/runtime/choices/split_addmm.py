"""One choice per ``addmm`` where Inductor offers its choices in several calls.

torch >= 2.13 lowers ``addmm`` in three ``_finalize_template_configs`` calls for the same operands, one after the
other on one thread: the aten choices (with the 1-D bias), a contiguous-bias subgraph, the Triton templates; torch
2.11 in one call. Deciding each call alone would keep an aten choice, the subgraph and a Triton pick, which
Inductor then benchmarks against each other: compile time, and its biased benchmark deciding. Only
``policy="decide"`` or ``"tune"`` with ``fallback="aten"`` acts on it. The aten call keeps cuBLAS before the Triton
call is decided; where the decision is Triton, Inductor's preprocessing step, which sees the three calls' choices
together before any benchmark, drops that cuBLAS choice (``without_aten``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ...core.candidate import Candidate, from_template_kwargs
from ..compile_state import tf32_enabled
from .gemm_inputs import _lowering_node, _operands_key, problem_from_inputs
from .policy import decide_one, decided_choices, is_aten_choice, out_of_training_range
from .region_models import model_for
from .settings import HookSettings

# the aten choices Inductor offers for addmm, scored in place of the ones offered in the earlier call
_ATEN_ADDMM = (Candidate("aten", aten_op="addmm"), Candidate("aten", aten_op="bias_addmm"))


class SplitAddmm:
    """Remembers, per compiling thread, the operands of the last ``addmm`` call that offered aten choices, and of
    the last one decided for Triton in a later call."""

    def __init__(self) -> None:
        self._thread = threading.local()

    def is_later_part(self, settings: HookSettings, choices: list[Any], kernel_inputs: Any, op_name: str) -> bool:
        """Whether ``choices`` is the non-aten part of an ``addmm`` whose aten choices came in the call just
        before, on this thread, for the same operands."""
        if op_name != "addmm" or settings.policy not in ("decide", "tune") or settings.fallback != "aten":
            return False
        key = _operands_key(list(kernel_inputs.nodes()) if hasattr(kernel_inputs, "nodes") else [])
        # the FX node being lowered ties the calls to one lowering: operand names, sizes and strides repeat across
        # graphs (the same model compiled again, with aten GEMMs turned off, would otherwise keep no choice at all)
        node = _lowering_node()
        if any(map(is_aten_choice, choices)):
            self._thread.aten_key = key
            try:
                self._thread.aten_node = None if node is None else weakref.ref(node)
            except TypeError:  # not an FX node: the operands alone
                self._thread.aten_node = None
            return False
        if key is None or getattr(self._thread, "aten_key", None) != key:
            return False
        aten_node = getattr(self._thread, "aten_node", None)
        return aten_node is None or aten_node() is node

    def decide(self, pruner: Any, choices: list[Any], kernel_inputs: Any) -> list[Any]:
        """Nothing (the aten choice kept in the earlier call stands, as plain ``torch.compile`` runs it) unless the
        model's favourite here beats cuBLAS, scored as a virtual aten candidate, by the decide gap: then that one, or
        under ``policy="tune"`` the model's top k here. An unknown template (the contiguous-bias subgraph) keeps
        nothing."""
        self._thread.triton_key = None
        if pruner.ranker is None:
            return []
        try:
            cands = [from_template_kwargs(c.template.uid, c.params.to_kwargs()) for c in choices]
        except (ValueError, KeyError, AttributeError):
            return []
        problem = problem_from_inputs(kernel_inputs, "addmm")
        # the gates the aten call's own decision went through (GemmPruner._prune): a dtype or op the model never
        # saw, float32 under TF32 (never measured) keep the earlier call's cuBLAS choice
        ranges = pruner.metadata.get("problem_ranges")
        if (out_of_training_range(ranges, problem, sizes=pruner.settings.min_confidence is not None)
                or (problem.dtype == "float32" and tf32_enabled())):
            return []
        every = [*cands, *_ATEN_ADDMM]
        region = model_for(pruner.region_models, problem)
        scores = pruner.scores(problem, every, [None] * len(every), region)
        if scores.shape != (len(every),) or not np.isfinite(scores).all():
            return []
        is_aten = [c.family == "aten" for c in every]
        chosen = decide_one(scores, is_aten, pruner.may_pick_triton(problem, kernel_inputs),
                            pruner.decide_gap(problem, region))
        if chosen >= len(cands):
            return []
        self._thread.triton_key = getattr(self._thread, "aten_key", None)
        s = pruner.settings
        return [choices[i] for i in decided_choices(scores, is_aten, chosen, s.policy, s.top_k)]

    def without_aten(self, callers: list[Any]) -> list[Any]:
        """Inductor's ChoiceCallers of one GEMM, less the aten ones where they belong to the ``addmm`` just decided
        for Triton (``decide``), so that cuBLAS is not benchmarked beside the decision; else as they are."""
        key = getattr(self._thread, "triton_key", None)
        if key is None or not callers or _operands_key(getattr(callers[0], "input_nodes", None) or []) != key:
            return callers
        self._thread.triton_key = None
        rest = [c for c in callers if type(c).__name__ != "ExternKernelCaller"]
        return rest or callers
