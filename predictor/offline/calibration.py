"""The calibration ledger: how much of a ``gemm-predictor calibrate`` budget is spent, and when each problem was
labelled, in cumulative calibration seconds.

It lives in ``<parts>/calibration/`` beside the collector's parts (a sub-folder, so ``merge`` and the collector's
resume, which read ``<parts>/*.parquet``, never see it). Collection writes it (``collectors.calibrate``); fitting
reads it to take the prefix labelled by 5, 10 or 15 minutes (:func:`labelled_within`). Plain JSON, rewritten
atomically after every problem, so a run killed at any moment loses at most the seconds since its last problem.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..artifacts.reading import DOCUMENT_BYTES, InputError, read_json

log = logging.getLogger(__name__)

CALIBRATION_DIR = "calibration"
LEDGER_FILE = "ledger.json"
PLAN_FILE = "plan.parquet"
LEDGER_VERSION = 1


def calibration_dir(parts: str | Path) -> Path:
    return Path(parts) / CALIBRATION_DIR


class Ledger:
    """``spent_s``: calibration wall seconds of all runs so far; ``labelled``: problem_id -> cumulative seconds at
    which its labels were handed to the part writer (a problem re-collected after a crash keeps its later time)."""

    def __init__(self, parts: str | Path) -> None:
        self.path = calibration_dir(parts) / LEDGER_FILE
        self.spent_s = 0.0
        self.runs: list[dict[str, Any]] = []
        self.labelled: dict[str, float] = {}
        self.settings: dict[str, Any] = {}
        if os.path.lexists(self.path):
            try:  # a regular file under the cap (a FIFO would wait forever), parsed as JSON
                doc = read_json(self.path, DOCUMENT_BYTES, "calibration ledger")
                if doc.get("ledger_version") != LEDGER_VERSION:
                    raise ValueError(f"ledger_version {doc.get('ledger_version')!r}, expected {LEDGER_VERSION}")
                self.spent_s = float(doc["spent_s"])
                self.runs = list(doc["runs"])
                self.labelled = {str(k): float(v) for k, v in doc["labelled"].items()}
                self.settings = dict(doc.get("settings", {}))
            except InputError as exc:
                raise ValueError(str(exc)) from None
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{self.path}: unreadable calibration ledger ({exc})") from None

    def start_run(self) -> None:
        self.runs.append({"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": 0.0,
                          "problems": 0})

    def advance(self, run_seconds: float, problem_id: str | None = None) -> float:
        """Set the current run's seconds; record ``problem_id`` as labelled now. Returns cumulative seconds."""
        if not self.runs:
            self.start_run()
        before = self.spent_s - self.runs[-1]["seconds"]
        self.runs[-1]["seconds"] = round(run_seconds, 3)
        self.spent_s = before + run_seconds
        if problem_id is not None:
            self.labelled[problem_id] = round(self.spent_s, 3)
            self.runs[-1]["problems"] += 1
        self.save()
        return self.spent_s

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"ledger_version": LEDGER_VERSION, "spent_s": round(self.spent_s, 3), "settings": self.settings,
               "runs": self.runs, "labelled": self.labelled}
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.path)


def labelled_within(parts: str | Path, minutes: float | None = None) -> dict[str, float]:
    """problem_id -> elapsed seconds for the problems whose labels are in the parts and were labelled within
    ``minutes`` of calibration time (all of them for None): the training prefix of a model "after N minutes"."""
    import pyarrow.parquet as pq

    ledger = Ledger(parts)
    stored: set[str] = set()
    for part in sorted(Path(parts).glob("*.parquet")):
        stored.update(pq.read_table(part, columns=["problem_id"]).column("problem_id").to_pylist())
    limit = float("inf") if minutes is None else 60.0 * minutes
    return {pid: t for pid, t in ledger.labelled.items() if pid in stored and t <= limit}
