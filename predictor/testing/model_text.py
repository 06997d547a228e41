"""Edit LightGBM text models in tests: ``tree_sizes`` recomputed after an edit, as LightGBM itself writes it, so a
test reaches the check it means to probe (a length, a value) instead of the size check."""

from __future__ import annotations

import re


def with_tree_sizes(text: str) -> str:
    """``text`` with its ``tree_sizes=`` header line matching its trees' text (byte counts from each ``Tree=``
    line to the next, the last up to ``end of trees``)."""
    start = text.index("\nTree=") + 1
    end = text.index("end of trees", start)
    starts = [m.start() for m in re.finditer(r"^Tree=", text[start:end], re.M)] + [end - start]
    sizes = " ".join(str(b - a) for a, b in zip(starts, starts[1:]))
    return re.sub(r"^tree_sizes=.*$", f"tree_sizes={sizes}", text, count=1, flags=re.M)
