"""``gemm-predictor calibrate`` for the per-GPU tables: label a new GPU's GEMV blocks, few-rows kernels and grouped
GEMMs within a share of the budget, then fit each table where the runtime finds it.

Every table the runtime reads per GPU has a collector and a fit (the ranker's are ``collectors.calibrate`` and
``predictor.offline.calibrate_fit``):

| kind | collector | fit | runtime |
|---|---|---|---|
| ``gemv-blocks`` | ``collectors.gemv_blocks`` | ``gemm-predictor gemv-fit`` | ``lowerings.gemv_table`` |
| ``few-rows`` | ``collectors.few_rows`` | ``gemm-predictor few-rows-fit`` | ``lowerings.few_rows`` |
| ``grouped-mm`` | ``collectors.grouped_mm`` | ``gemm-predictor grouped-fit`` | ``lowerings.grouped_mm`` |

Budget: each kind gets its ``share`` of the minutes (normalised over the kinds asked for); a kind that labels its
whole corpus early hands the rest on, and the ranker, calibrated last, takes what is left. The seconds spent per
kind are kept in ``<parts>/calibration/tables.json``, so a rerun after a kill resumes each collection (its labels
file is resumed problem by problem) within what is left of its share. A cut collection still covers every form,
model and band: the corpus is taken round-robin over ``interleave_by``.

Tables are written as ``<out root>/<folder>/<gpu slug>.json``: with ``$GEMM_PREDICTOR_MODELS`` naming the root,
the runtime takes them for that GPU (``predictor.artifacts.roots``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from collectors.selection import interleaved

log = logging.getLogger(__name__)

RANKER = "ranker"
LEDGER = "tables.json"


@dataclasses.dataclass(frozen=True)
class TableKind:
    """One per-GPU table: where its labels and table live, its share of a budget, and its collector and fit."""

    name: str
    folder: str  # <root>/<folder>/<gpu slug>.json
    labels: str  # <parts>/<labels>
    share: float
    interleave_by: str  # problems taken round-robin by this field, so a cut collection covers each value
    collector: str  # module with labelling(), KIND (the labels file's metadata "kind") and ATEN_KEY
    fit: Callable[[str, str], str]  # (labels file, table file) -> report
    parallel: bool = False  # its collector times with collectors.timing (under the GPU lock): shards may overlap


def _fit_gemv(labels: str, out: str) -> str:
    from predictor.offline.gemv_blocks_fit import run

    return run(labels, out)


def _fit_few_rows(labels: str, out: str) -> str:
    from predictor.offline.few_rows_fit import run

    return run(labels, out)


def _fit_grouped(labels: str, out: str) -> str:
    from predictor.offline.grouped_mm_fit import run

    return run(labels, out)


TABLES: dict[str, TableKind] = {t.name: t for t in (
    TableKind("gemv-blocks", "gemv-blocks", "gemv_blocks.parquet", 0.3, "form", "collectors.gemv_blocks", _fit_gemv,
              parallel=True),
    TableKind("few-rows", "few-rows", "few_rows.parquet", 0.15, "family_tag", "collectors.few_rows", _fit_few_rows,
              parallel=True),
    TableKind("grouped-mm", "grouped-mm", "grouped_mm.parquet", 0.15, "family_tag", "collectors.grouped_mm",
              _fit_grouped),
)}
RANKER_SHARE = 0.4
KINDS = (*TABLES, RANKER)


def parse_only(text: str | None) -> list[str]:
    """``--only`` as kinds in calibration order (tables first, the ranker last); every kind without it."""
    if not text:
        return list(KINDS)
    asked = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in asked if k not in KINDS]
    if unknown or not asked:
        raise ValueError(f"--only {text!r}: unknown kind(s) {', '.join(unknown) or '(none given)'}; expected a "
                         f"comma list of {', '.join(KINDS)}")
    return [k for k in KINDS if k in asked]


def shares(kinds: Sequence[str]) -> dict[str, float]:
    """Each kind's fraction of the budget, normalised over ``kinds``."""
    raw = {k: RANKER_SHARE if k == RANKER else TABLES[k].share for k in kinds}
    total = sum(raw.values())
    return {k: v / total for k, v in raw.items()}


class TableLedger:
    """Seconds spent collecting each table kind over all runs of one ``--parts`` folder (plain JSON, replaced
    atomically after every kind)."""

    def __init__(self, parts: Path) -> None:
        from predictor.offline.calibration import calibration_dir

        self.path = calibration_dir(parts) / LEDGER
        self.spent: dict[str, float] = {}
        if self.path.exists():
            try:
                self.spent = {str(k): float(v) for k, v in json.loads(self.path.read_text())["spent_s"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{self.path}: unreadable table ledger ({exc})") from None

    def add(self, kind: str, seconds: float) -> None:
        from predictor.artifacts.atomic import write_text

        self.spent[kind] = round(self.spent.get(kind, 0.0) + seconds, 3)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text(self.path, json.dumps({"spent_s": self.spent}, indent=1))

    def ticker(self, kind: str) -> Callable[[], None]:
        """A callable that adds to ``kind`` the seconds since it was made or last called."""
        last = [time.perf_counter()]

        def tick() -> None:
            now = time.perf_counter()
            self.add(kind, now - last[0])
            last[0] = now

        return tick


def collect_tables(kinds: Sequence[str], parts: Path, minutes: float,
                   collect_one: Callable[[TableKind, Path, float, Callable[[], None]], int] | None = None,
                   processes: int = 1) -> dict[str, Any]:
    """Collect every table kind of ``kinds`` within its share of ``minutes`` (less what earlier runs spent; the
    ranker, if among ``kinds``, keeps its share for later); returns per kind the seconds spent. ``collect_one(kind,
    labels file, seconds, tick)`` runs one collector (default: on this GPU) and calls ``tick()`` after each problem
    it keeps, so the ledger holds the time spent even when the run is killed mid-kind; ``processes``: label
    processes per table kind that allows several (``collect_on_gpu``)."""
    collect_one = collect_one or functools.partial(collect_on_gpu, processes=processes)
    ledger = TableLedger(parts)
    split = shares(kinds)
    report: dict[str, Any] = {}
    carried = 0.0  # seconds a kind finished under its share hands to the next
    for name in (k for k in kinds if k != RANKER):
        kind = TABLES[name]
        budget = split[name] * minutes * 60 + carried
        left = budget - ledger.spent.get(name, 0.0)
        if left <= 0:
            report[name] = {"spent_s": ledger.spent.get(name, 0.0), "skipped": "its share is spent"}
            continue
        log.info("calibrate %s: %.0f s left of its %.0f s (labels %s)", name, left, budget, parts / kind.labels)
        started = time.perf_counter()
        tick = ledger.ticker(name)
        status = collect_one(kind, parts / kind.labels, left, tick)
        tick()
        spent = time.perf_counter() - started
        carried = max(0.0, left - spent)
        report[name] = {"spent_s": round(spent, 1), "status": status, "labels": str(parts / kind.labels)}
    return report


def collect_on_gpu(kind: TableKind, labels: Path, seconds: float, tick: Callable[[], None],
                   processes: int = 1) -> int:
    """Run ``kind``'s collector on this GPU for at most ``seconds`` (resuming ``labels``), the corpus interleaved;
    ``tick()`` after each problem written. ``processes`` > 1: that many processes compile at once, taking turns to
    time (``collectors.parallel_labels``), for the kinds whose collector times under the GPU lock; the grouped GEMMs
    (timed by Inductor's own benchmark, outside the lock) stay in one."""
    import importlib

    from collectors.gemv import collect

    if processes > 1 and kind.parallel:
        from collectors.parallel_labels import collect_in_parallel

        return collect_in_parallel(kind.collector, labels, processes, seconds, kind.interleave_by, tick)
    module = importlib.import_module(kind.collector)
    problems, measure_one = module.labelling()
    return collect(interleaved(problems, kind.interleave_by), measure_one, labels, module.KIND,
                   kind.collector.split(".")[-1], module.ATEN_KEY, seconds=seconds, after_each=tick)


def fit_tables(kinds: Sequence[str], parts: Path, root: Path) -> dict[str, str]:
    """Fit every table kind of ``kinds`` whose labels are in ``parts`` into ``root/<folder>/<gpu slug>.json``;
    returns kind -> the file written, or why none was (a fit that cannot be made is said, the others go on)."""
    from predictor.artifacts.roots import gpu_slug
    from predictor.artifacts.schema import file_metadata

    written: dict[str, str] = {}
    for name in (k for k in kinds if k != RANKER):
        kind = TABLES[name]
        labels = parts / kind.labels
        if not labels.exists():
            written[name] = f"not fitted: no labels ({labels})"
            continue
        try:
            out = root / kind.folder / f"{gpu_slug(str(file_metadata(labels).get('gpu') or ''))}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            kind.fit(str(labels), str(out))
            written[name] = str(out)
        except ValueError as exc:
            written[name] = f"not fitted: {exc}"
            log.warning("calibrate %s: %s", name, exc)
    return written
