"""Few-rows labels -> the runtime's block table (``models/few-rows/<gpu>.json``) and how its choice does on each
labelled weight held out.

    gemm-predictor few-rows-fit datasets/nvidia-h100/few_rows.parquet --out models/few-rows/nvidia-h100.json
    gemm-predictor few-rows-fit datasets/nvidia-h100/few_rows.parquet \
        --repeat datasets/nvidia-h100/few_rows_repeat.parquet
    gemm-predictor few-rows-fit datasets/nvidia-h100/few_rows.parquet --rows 32

The table keeps, per labelled weight (n, k), cuBLAS's time and the time of a shortlist of block configs
(``shortlist``) at the row counts the kernel serves (``predictor.runtime.lowerings.few_rows.ROWS``: 2-16); ``few_rows.choose``
reads it. Held out: each weight's config is chosen from the other weights' labels alone (their own shortlist), and
timed with that weight's own labels (cuBLAS where the choice is cuBLAS, or where the chosen config was not measured
there); against cuBLAS (plain) and the best label per row count (the oracle, cuBLAS included).

With a repeat (a second collection of the same problems on the same GPU): the choices made from one collection timed
with the other's labels, both ways. A choice that only won on its own collection's noise would fall there.

With ``rows=32`` (``--rows 32``): the same held-out report for a second tier the runtime does not serve, 17-32 rows
(the labels' 32, the kernel's rows padded to 32), to say whether one would pay; no table is written for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.artifacts.atomic import check_output_file, claim_output, write_text
from predictor.runtime.lowerings.few_rows import ROWS, choose, config_name, geomean, parse_table

KIND = "few_rows_labels"
SHORTLIST = 3  # configs a table keeps (``shortlist``)
ATEN = "aten/mm"
PREFIX = "few_rows/"
TIERS = {ROWS: 0, 32: ROWS}  # rows a kernel serves -> the rows the tier below serves (its labels lie above them)


def problems(frame: pd.DataFrame, max_rows: int = ROWS, above_rows: int = 0) -> list[dict[str, Any]]:
    """One entry per weight: its row counts above ``above_rows`` and up to ``max_rows``, cuBLAS's time at each, and the
    time of every config measured ``ok`` at all of them."""
    ok = frame[(frame["status"] == "ok") & (frame["m"] > above_rows) & (frame["m"] <= max_rows)]
    wide = ok.pivot_table(index=["n", "k", "m"], columns="candidate", values="time_us")
    out = []
    for (n, k), rows in wide.groupby(level=["n", "k"]):
        rows = rows.droplevel(["n", "k"]).sort_index()
        if ATEN not in rows or rows[ATEN].isna().any():
            continue
        configs = rows.drop(columns=ATEN).dropna(axis=1)
        out.append({"n": int(n), "k": int(k), "m": [int(m) for m in rows.index],
                    "cublas_us": [round(float(t), 3) for t in rows[ATEN]],
                    "times": {c.removeprefix(PREFIX): [round(float(t), 3) for t in configs[c]]
                              for c in configs.columns if c.startswith(PREFIX)}})
    return out


def shortlist(probs: list[dict[str, Any]], size: int = SHORTLIST) -> list[str]:
    """The ``size`` configs that together come closest to every weight's own best (greedy: each added config the
    one that raises most the geomean over weights of own best / best in the list). A model's GEMMs then compile at
    most ``size`` kernels (each a Triton compile at first use) instead of one per weight shape, for ~1% of kernel
    time (H100 labels: one config 0.969 of each weight's best, two 0.984, three 0.990)."""
    names = sorted(set().union(*(p["times"] for p in probs)))
    own = [min(geomean(t) for t in p["times"].values()) for p in probs]

    def closeness(chosen: list[str]) -> float:
        return geomean([o / min((geomean(p["times"][c]) for c in chosen if c in p["times"]), default=o * 2)
                         for o, p in zip(own, probs)])

    chosen: list[str] = []
    for _ in range(min(size, len(names))):
        chosen.append(max((n for n in names if n not in chosen), key=lambda n: closeness([*chosen, n])))
    return chosen


def restricted(probs: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """``probs`` with only the configs ``names``."""
    return [{**p, "times": {n: t for n, t in p["times"].items() if n in names}} for p in probs]


def choice_times(p: dict[str, Any], choice: str | None) -> list[float]:
    """A choice's times on weight ``p``'s labels, per row count: cuBLAS's where the choice is cuBLAS (None or
    ``"cuBLAS"``) or was not measured there."""
    return p["times"].get(choice, p["cublas_us"]) if choice else p["cublas_us"]


def vs_cublas(p: dict[str, Any], times: list[float]) -> float:
    """cuBLAS's time over ``times`` on weight ``p``, geomean over its row counts (> 1: faster than plain)."""
    return geomean([c / t for c, t in zip(p["cublas_us"], times)])


def held_out(probs: list[dict[str, Any]], size: int = SHORTLIST, rows_served: int = ROWS) -> pd.DataFrame:
    """Per weight: the config chosen without its labels (the shortlist of ``size`` configs, too, made from the
    other weights) for up to ``rows_served`` rows, and (geomean over its row counts) cuBLAS's time over the
    choice's (``vs_cublas``) and the best label's over the choice's (``vs_oracle``)."""
    rows = []
    for i, p in enumerate(probs):
        others = probs[:i] + probs[i + 1:]
        config = choose(p["n"], p["k"], restricted(others, shortlist(others, size)), rows_served)
        name = None if config is None else config_name(config)
        chosen = choice_times(p, name)
        best = [min(c, *(t[j] for t in p["times"].values())) for j, c in enumerate(p["cublas_us"])]
        rows.append({"n": p["n"], "k": p["k"], "choice": name or "cuBLAS", "vs_cublas": vs_cublas(p, chosen),
                     "worst_vs_cublas": min(c / t for c, t in zip(p["cublas_us"], chosen)),
                     "vs_oracle": geomean([b / t for b, t in zip(best, chosen)]),
                     "oracle_vs_cublas": geomean([c / b for c, b in zip(p["cublas_us"], best)])})
    return pd.DataFrame(rows)


def timed_with(choices: pd.DataFrame, probs: list[dict[str, Any]]) -> pd.Series:
    """Each weight's choice (``held_out``'s ``choice`` column, by n and k) timed with ``probs``' labels: cuBLAS's time
    over the choice's, geomean over row counts (cuBLAS where the choice is cuBLAS or was not measured there; a weight
    ``probs`` lacks is left out)."""
    labels = {(p["n"], p["k"]): p for p in probs}
    out = {}
    for row in choices.itertuples():
        p = labels.get((row.n, row.k))
        if p is not None:
            out[(row.n, row.k)] = vs_cublas(p, choice_times(p, row.choice))
    return pd.Series(out, dtype=float)


def repeat_report(probs: list[dict[str, Any]], repeat: list[dict[str, Any]]) -> list[str]:
    """Markdown: the held-out choices of each collection timed with its own labels and with the other's."""
    first, second = held_out(probs), held_out(repeat)
    same = first.merge(second, on=["n", "k"], suffixes=("", "_repeat"))
    lines = ["", "Held-out choices timed with each collection's labels "
                 "(vs cuBLAS, geomean over weights; worst weight):",
             "", "| choices from | timed with the labels of | vs cuBLAS | worst weight |", "|---|---|---|---|"]
    for name, choices in (("the dataset", first), ("the repeat", second)):
        for labels_name, labels in (("the dataset", probs), ("the repeat", repeat)):
            timed = timed_with(choices, labels)
            lines.append(f"| {name} | {labels_name} | {geomean(list(timed)):.3f} | {timed.min():.3f} |")
    lines += ["", f"weights in both: {len(same)}; the same choice from both: "
                  f"{(same['choice'] == same['choice_repeat']).mean():.2f}"]
    return lines


def write_table(probs: list[dict[str, Any]], path: Path, metadata: dict[str, Any], dataset: str) -> None:
    payload = {"what": "few-rows kernel block configs per labelled weight (predictor.runtime.lowerings.few_rows)",
               "dataset": dataset, **{k: metadata.get(k) for k in ("gpu", "cc", "torch", "triton")},
               "problems": probs}
    text = json.dumps(payload, separators=(",", ":")) + "\n"
    parse_table(text.encode(), path)  # what the runtime will read, before it replaces anything
    write_text(path, text)  # a unique staged file beside it, renamed over it (predictor.artifacts.atomic)


def _problems_of(dataset: str, rows: int = ROWS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from predictor.offline.gemv_eval import read_labels

    frame = read_labels(dataset, KIND)
    probs = problems(frame, rows, TIERS[rows])
    if not probs:
        raise ValueError(f"{dataset}: no weight has both cuBLAS and block-config timings at "
                         f"{TIERS[rows] + 1}-{rows} rows")
    return probs, frame.attrs["metadata"]


def run(dataset: str, out: str | None, repeat: str | None = None, rows: int = ROWS) -> str:
    """The markdown report (and the table written to ``out`` when given; with ``repeat``, a second collection of
    the same problems, the choices of each timed with the other's labels; with ``rows`` 32, the report for a
    17-32-row tier, which writes no table)."""
    if rows not in TIERS:
        raise ValueError(f"rows {rows}: the labels time the kernel for {' or '.join(map(str, TIERS))} rows")
    if rows != ROWS and (out or repeat):
        raise ValueError(f"rows {rows}: the runtime serves {ROWS} rows; a {rows}-row tier is a report only "
                         "(no --out, no --repeat)")
    if out:  # checked and claimed before any work
        out = check_output_file(out)
        with claim_output(out):
            return _run(dataset, out, repeat, rows)
    return _run(dataset, None, repeat, rows)


def _run(dataset: str, out: Path | None, repeat: str | None, rows: int) -> str:
    probs, meta = _problems_of(dataset, rows)
    repeated = None
    if repeat:
        repeated, repeat_meta = _problems_of(repeat)
        if repeat_meta.get("gpu") != meta.get("gpu"):
            raise ValueError(f"{repeat}: collected on {repeat_meta.get('gpu')}, {dataset} on {meta.get('gpu')}: "
                             "a repeat is the same GPU's")
    kept = shortlist(probs)
    if out:
        write_table(restricted(probs, kept), out, meta, dataset)
    result = held_out(probs, rows_served=rows)
    taken = result[result["choice"] != "cuBLAS"]
    counts = ", ".join(map(str, sorted({m for p in probs for m in p["m"]})))
    lines = [f"Few rows: {len(probs)} weights at {counts} rows (the kernel's rows padded to {max(16, rows)}), "
             f"{meta.get('gpu')}, torch {meta.get('torch')}",
             "", "Each weight held out (geomean over its row counts; vs cuBLAS > 1: faster than plain):", "",
             "| | weights | vs cuBLAS | worst weight vs cuBLAS | worst row count vs cuBLAS | vs oracle |",
             "|---|---|---|---|---|---|"]
    for label, part in (("all", result), ("kernel chosen", taken)):
        if len(part):
            lines.append(f"| {label} | {len(part)} | {geomean(list(part['vs_cublas'])):.3f} | "
                         f"{part['vs_cublas'].min():.3f} | {part['worst_vs_cublas'].min():.3f} | "
                         f"{geomean(list(part['vs_oracle'])):.3f} |")
    lines += ["", f"oracle (best label per row count) vs cuBLAS: {geomean(list(result['oracle_vs_cublas'])):.3f}",
              f"the shortlist ({SHORTLIST} configs from every weight{'; the table' * (rows == ROWS)}): "
              f"{', '.join(kept)}",
              "", "| n | k | choice | vs cuBLAS | worst row count | vs oracle |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.n} | {r.k} | {r.choice} | {r.vs_cublas:.3f} | {r.worst_vs_cublas:.3f} | {r.vs_oracle:.3f} |"
              for r in result.itertuples()]
    if repeated is not None:
        lines += repeat_report(probs, repeated)
    return "\n".join(lines)
