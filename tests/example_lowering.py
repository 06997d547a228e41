"""The worked example of docs/ARCHITECTURE.md, "Adding a lowering": a lowering module as it would sit in
``predictor/runtime/lowerings/``. It counts the ``aten.mm`` calls AOTAutograd decomposes and leaves each to the
decomposition (or lowering) that was there before, so the compiled graph is unchanged."""

from __future__ import annotations

import contextlib
from typing import Any

from predictor.runtime.lowerings.base import CompileFlags, Lowering
from predictor.runtime.lowerings.tables import added_entries, decomposition_tables

SEEN: list[tuple[int, ...]] = []


def _count(a: Any, b: Any) -> Any:
    SEEN.append((*a.shape, b.shape[-1]))
    return NotImplemented  # the entry that was there (or Inductor's own lowering) does the work


def mm_counted(flags: CompileFlags) -> contextlib.AbstractContextManager[None]:
    import torch

    return added_entries(decomposition_tables(), {torch.ops.aten.mm.default: _count}, "predictor_mm_counted")


LOWERING = Lowering("mm_counted", "every aten.mm is counted, then decomposed as before", "trace", mm_counted,
                    __name__)
