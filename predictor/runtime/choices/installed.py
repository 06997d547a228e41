"""The pruners installed now, innermost last: state shared by ``installing`` (which pushes and pops) and the
pruner's unpickling (which reuses an installed pruner), kept apart so that neither imports the other."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class _Installed:
    pruner: Any  # a predictor.runtime.choices.pruner.GemmPruner
    previous_class: Any
    previous_space: Any
    previous_default: Any  # virtualized._choices._default


_STACK: list[_Installed] = []
_LAST: list[Any] = []  # the most recent pruner, so stats() still answers after uninstall
