"""The hook's decisions as the in-program collector records them: per GEMM the chosen kernel and its runner-up
(``AlternativeLog``, the hook's ``decision_observer``), which decisions to flip (``select``), and a table with one
decision flipped (``flipped_table``)."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any


class AlternativeLog:
    """``GemmPruner.decision_observer``: per lookup key (first decision wins) the chosen and the runner-up entry.
    ``key_choices``: what keys (default torch's ``LookupTableChoices``; a stand-in in CPU tests)."""

    def __init__(self, key_choices: Any = None) -> None:
        self.key_choices = key_choices
        self.rows: dict[str, dict[str, Any]] = {}
        self.skipped: Counter = Counter()

    def _keyer(self) -> Any:
        from predictor.offline.export import lookup_keyer

        self.key_choices = lookup_keyer(self.key_choices)
        return self.key_choices

    def __call__(self, choices: list[Any], scores: Any, is_aten: list[bool], chosen: int, problem: Any,
                 kernel_inputs: Any, op_name: str) -> None:
        from predictor.offline.export import lookup_entry
        from predictor.runtime.choices.policy import runner_up

        key = self._keyer().make_lookup_key(kernel_inputs, op_name, include_device=True)
        if key is None:
            self.skipped["no_key"] += 1
            return
        if key in self.rows:
            self.rows[key]["count"] += 1
            return
        from predictor.runtime.choices.gemm_inputs import _lowering_node, output_consumers, output_feeds_pointwise

        alternative, gap = runner_up(scores, is_aten, chosen)
        node = _lowering_node()
        row = {"key": key, "op_name": op_name, "problem": str(problem), "count": 1,
               "dims": {f: getattr(problem, f) for f in ("b", "m", "n", "k")}, "dtype": problem.dtype,
               "out_dtype": problem.out_dtype or problem.dtype, "chosen": lookup_entry(choices[chosen]),
               "chosen_side": "cublas" if is_aten[chosen] else "triton", "gap": gap, "alternative": None,
               "feeds_pointwise": output_feeds_pointwise(node), "consumers": sorted(set(output_consumers(node)))}
        if alternative is not None:
            try:
                row["alternative"] = lookup_entry(choices[alternative])
            except ValueError as exc:
                row["alternative_error"] = str(exc)
        self.rows[key] = row

    def finish(self, device: Any) -> list[dict[str, Any]]:
        """The rows with each GEMM's ideal time on ``device`` (the model's DeviceInfo; None leaves it out)."""
        from predictor.core.features import ideal_time_us

        out = []
        for row in self.rows.values():
            d = row["dims"]
            row["ideal_us"] = (None if device is None else
                               ideal_time_us(d["b"], d["m"], d["n"], d["k"], row["dtype"], row["out_dtype"], device))
            out.append(row)
        return out


def select(rows: list[dict[str, Any]], max_gemms: int) -> list[int]:
    """Indices of the rows to flip: those with a runner-up, largest ideal time first, at most ``max_gemms``."""
    flippable = [i for i, r in enumerate(rows) if r.get("alternative") is not None]
    flippable.sort(key=lambda i: -(rows[i].get("ideal_us") or 0.0))
    return flippable[:max_gemms]


def flipped_table(table: dict[str, list], row: dict[str, Any]) -> dict[str, list]:
    """``table`` with ``row``'s key served by its runner-up alone (a deep copy; the original is untouched)."""
    if row["key"] not in table:
        raise ValueError(f"{row['key'][:80]!r} is not in the table: the flip would not apply")
    out = copy.deepcopy(table)
    out[row["key"]] = [copy.deepcopy(row["alternative"])]
    return out
