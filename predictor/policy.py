"""What the hook keeps of one GEMM's choices when it decides alone (``policy="decide"``) or cannot decide.

Why decide rather than prune: whatever survives beside cuBLAS goes through Inductor's benchmark, which
overstates cuBLAS on small GEMMs and times bare kernels out of the program's context, so a Triton kernel kept
"just in case" tends to win the benchmark and lose in the program (measured: w8a8 int8 decode 0.86x plain
``torch.compile``; a transformer training step 0.91x), and every survivor costs compile time. One choice per
GEMM is used without any benchmark: plain ``torch.compile``'s compile time, and the model's pick where it is
confident.

Runtime code: numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Score gap (LambdaRank units) by which the model's favourite non-aten candidate must beat the best aten one
# before the hook picks it over cuBLAS. Calibrated on the 1534 held-out problems of models/h200-default-lgbm
# (python benchmarks/decide_gap.py): among problems whose favourite is a Triton/decompose-K kernel, at a gap
# >= 2.0 3.4% of the picks run > 3% slower than cuBLAS (12% with no gap, 5.8% at 1.5), and the picks keep a
# 1.83x geomean gain over cuBLAS; the policy reaches 0.972 of the per-problem best in geomean (cuBLAS always:
# 0.917, the favourite always: 0.979, where 12% of Triton picks would lose).
DECIDE_MIN_GAP = 2.0

FALLBACKS = ("aten", "full")


def is_aten_choice(choice: Any) -> bool:
    """A ``KernelTemplateChoice`` of an extern (aten/cuBLAS) kernel: what plain ``torch.compile`` runs."""
    template = getattr(choice, "template", None)
    uid = str(getattr(template, "uid", "") or "")
    return uid.startswith("aten::") or type(template).__name__ == "ExternKernelChoice"


def fallback_choices(choices: list[Any], fallback: str) -> list[Any]:
    """The choices a GEMM keeps when the hook cannot rank them (unknown op or template, no model, an error).

    ``"aten"``: the aten choices alone, i.e. what plain ``torch.compile`` would run, with no benchmark (a list
    without any aten choice is left whole: nothing safer exists). ``"full"``: Inductor's whole list (stock
    max-autotune, minutes of compile)."""
    if fallback == "full":
        return choices
    aten = [c for c in choices if is_aten_choice(c)]
    return aten[:1] if aten else choices


def decide_one(scores: np.ndarray, is_aten: Sequence[bool], trusted: bool, min_gap: float = DECIDE_MIN_GAP) -> int:
    """Index of the single candidate a GEMM runs.

    The model's favourite when it is aten, or when it beats the best aten candidate by at least ``min_gap``
    and the problem is of a kind the model was trained on (``trusted``); otherwise the best aten candidate
    (cuBLAS: plain ``torch.compile``'s choice). Without any aten candidate, the favourite."""
    scores = np.asarray(scores, dtype=float)
    is_aten = np.asarray(is_aten, dtype=bool)
    favourite = int(np.argmax(scores))
    if not is_aten.any() or is_aten[favourite]:
        return favourite
    best_aten = int(np.flatnonzero(is_aten)[np.argmax(scores[is_aten])])
    if trusted and scores[favourite] - scores[best_aten] >= min_gap:
        return favourite
    return best_aten


def problem_kind(op: str, dtype: str, layout_a: str, layout_b: str) -> str:
    """The key of a problem's kind in a model's ``problem_ranges.kinds`` (e.g. ``int_mm/int8/row/col``)."""
    return f"{op}/{dtype}/{layout_a}/{layout_b}"
