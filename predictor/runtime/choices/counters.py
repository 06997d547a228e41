"""What a pruner counts and says: its counters, the filter's own time per GEMM, and each warning said once."""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from typing import Any

import numpy as np

log = logging.getLogger("predictor.runtime.choices.pruner")  # one logger for everything the hook says

STAT_KEYS = ("gemms_seen", "pruned", "passed_through", "kept_total", "considered_total", "overridden",
             "hints_considered", "hints_kept", "cutlass_considered", "cutlass_kept", "epilogue_templates_added",
             "region_scored")


def empty_stats() -> dict[str, Any]:
    """``Counters.stats()`` of a pruner that saw nothing."""
    return {**{key: 0 for key in STAT_KEYS}, "fallbacks": {}, "filter_ms_max": 0.0, "filter_ms_median": 0.0}


class Counters:
    """Thread-safe: Inductor compiles a backward in autograd's thread while the forward's may still run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stats_: Counter = Counter()
        self.fallbacks_: Counter = Counter()
        self.filter_ms_: deque = deque(maxlen=100_000)  # the filter's own time per GEMM (the model's load in the first)
        self._warned: set[str] = set()

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.stats_[key] += n

    def fallback(self, reason: str) -> None:
        with self.lock:
            self.fallbacks_[reason] += 1

    def gemm(self, elapsed_ms: float, considered: int, kept: int, fallback: str | None) -> None:
        """One GEMM's filtering: its time, its choices before and after, and why it fell back, if it did."""
        with self.lock:
            self.filter_ms_.append(elapsed_ms)
            self.stats_["gemms_seen"] += 1
            self.stats_["considered_total"] += considered
            self.stats_["kept_total"] += kept
            self.stats_["pruned" if kept < considered else "passed_through"] += 1
            if fallback is not None:
                self.fallbacks_[fallback] += 1

    def warn_once(self, key: str, message: str) -> None:
        with self.lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning("gemm-predictor: %s", message)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            out: dict[str, Any] = {key: int(self.stats_[key]) for key in STAT_KEYS}
            out["fallbacks"] = dict(self.fallbacks_)
            out["filter_ms_max"] = round(max(self.filter_ms_), 3) if self.filter_ms_ else 0.0
            out["filter_ms_median"] = round(float(np.median(self.filter_ms_)), 3) if self.filter_ms_ else 0.0
        return out
