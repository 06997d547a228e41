"""Whether a zoo run's timings can be read: one run's spread (``noisy``), separate runs of one model and mode
(``between_runs_line``), and the two kernel censuses of one run (``disturbed``). Used by the zoo's and the serving
benchmark's reports."""

from __future__ import annotations

import statistics
from typing import Any, Callable

TIMED = ("ok", "wrong")  # records with a step time (a wrong output is still timed)

NOISY_SPREAD = 0.10  # p10-p90 of one run's timings over its median: above it, something else ran on the GPU


def _model_mode(r: dict[str, Any]) -> str:
    return f"{r['model']} `{r['mode']}`"


def noisy(records: list[dict[str, Any]], label: Callable[[dict[str, Any]], str] = _model_mode) -> list[str]:
    """``label (spread)`` for each ok record whose timings spread over ``NOISY_SPREAD`` of their median: a figure to
    rerun before it is read (another run's GPU work during the timing, clocks changing)."""
    out = []
    for r in records:
        p10, p90, median = r.get("step_ms_p10"), r.get("step_ms_p90"), r.get("step_ms")
        if r.get("status") == "ok" and p10 and p90 and median and (p90 - p10) / median > NOISY_SPREAD:
            out.append(f"{label(r)} ({(p90 - p10) / median:.0%})")
    return out


def noisy_line(records: list[dict[str, Any]], label: Callable[[dict[str, Any]], str] = _model_mode) -> str:
    """The reports' sentence listing the ``noisy`` records."""
    spread = noisy(records, label)
    return (f"Noisy timings (p10-p90 over {NOISY_SPREAD:.0%} of the median; rerun before reading them): "
            + (", ".join(spread) if spread else "none") + ".")


def between_runs_line(records: list[dict[str, Any]]) -> str:
    """The reports' sentence on how far separate runs of one model and mode (repeats, the other order) differ:
    max/min - 1 of their step times, the median over such pairs and the largest, or "" when nothing ran twice.
    Why: within one run the p10-p90 spread is small, but each process compiles (and autotunes) anew."""
    steps: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.get("status") in TIMED and r.get("step_ms"):
            steps.setdefault((r["model"], r["mode"]), []).append(r["step_ms"])
    spreads = sorted((max(v) / min(v) - 1, key) for key, v in steps.items() if len(v) > 1)
    if not spreads:
        return ""
    worst, (model, mode) = spreads[-1]
    return (f"Between runs (separate processes of one model and mode, {len(spreads)} such): step times differ by "
            f"{statistics.median(s for s, _ in spreads):.1%} at the median, {worst:.1%} at most ({model} `{mode}`).")


# A kernel this many times slower in one census of a step than in the other, by at least DISTURBED_US: the GPU ran
# another process's work mid-kernel (the zoo's lanes lock their timings, not another lane's first call)
DISTURBED_FACTOR = 5.0
DISTURBED_US = 200.0


def disturbed(records: list[dict[str, Any]]) -> list[str]:
    """``model `mode` (kernel: us against us)`` for each timed record whose two censuses of one step (the direct call,
    ``census``, and the replayed graph, ``census_replay``) disagree on a kernel by ``DISTURBED_FACTOR`` and
    ``DISTURBED_US``. Why: both run the same compiled kernels; a kernel 15-30x slower in one of them, and a different
    one in the other, is what another process on the GPU looks like (held-out set 9, mobilevitv2-100)."""
    out = []
    for r in records:
        first, second = r.get("census"), r.get("census_replay")
        if r.get("status") not in TIMED or not isinstance(first, dict) or not isinstance(second, dict):
            continue
        times = [{name: us for name, _count, us in c.get("by_name", [])} for c in (first, second)]
        worst = None
        for name in times[0].keys() & times[1].keys():
            slow, fast = sorted((times[0][name], times[1][name]), reverse=True)
            if slow - fast >= DISTURBED_US and slow >= DISTURBED_FACTOR * fast and (worst is None or slow > worst[1]):
                worst = (name, slow, fast)
        if worst:
            out.append(f"{_model_mode(r)} ({worst[0][:90]}: {worst[1]:.0f} us against {worst[2]:.0f} us)")
    return out


def disturbed_line(records: list[dict[str, Any]]) -> str:
    """The report's sentence listing the ``disturbed`` records."""
    listed = disturbed(records)
    return (f"Censuses that disagree (a kernel {DISTURBED_FACTOR:.0f}x and {DISTURBED_US:.0f} us slower in one census "
            "of the step than in the other: another process had the GPU; rerun before reading them): "
            + ("; ".join(listed) if listed else "none") + ".")
