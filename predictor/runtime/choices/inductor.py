"""The ``InductorChoices`` subclass Inductor calls for every GEMM's choices.

Kept apart from the pruner so that the pruner's logic is testable without Inductor.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger("predictor.runtime.choices.pruner")  # one logger for everything the hook says


@functools.cache
def _choices_class() -> type:
    """The ``InductorChoices`` subclass, built on first use so that importing predictor needs no torch."""
    from torch._inductor.choices import InductorChoices

    class PredictorChoices(InductorChoices):
        """Stock heuristics, with max-autotune GEMM choices pruned by a :class:`GemmPruner`."""

        def __init__(self, pruner: Any) -> None:
            super().__init__()
            self.pruner = pruner

        def uuid(self) -> str:
            return self.pruner.uuid()

        def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name,
                                       kwarg_overrides=None):
            choices = super()._finalize_template_configs(template_choices, kernel_inputs, templates, op_name,
                                                         kwarg_overrides)
            return self.pruner.filter(choices, kernel_inputs, op_name)

        def override_best_choice(self, best_choice, timings):  # torch >= 2.13 calls this after benchmarking
            try:
                return self.pruner.pick(best_choice, timings)
            except Exception:  # never break a compile: keep Inductor's pick
                log.debug("gemm-predictor: override_best_choice failed", exc_info=True)
                return best_choice

    PredictorChoices.__module__ = __name__
    return PredictorChoices
