"""Tables and a plot from zoo records: each mode judged per model against plain torch.compile and against the best
stock torch.compile mode timed the same way (what a user would otherwise pick), speed vs compile time.

Fair peers: inference steps are compared by one outer CUDA-graph replay (``timing == "cudagraph-replay"``) among
``REPLAY_PEERS``; a record timed any other way (stock CUDA graph trees, direct calls) never enters that comparison.
As called (the user's own loop, ``called_ms``), inference is compared with the best of ``CALLED_PEERS``, the stock
modes that install CUDA graph trees. Training steps (eager step with backward and optimizer) are compared among
``TRAIN_PEERS``. ``summarize`` holds every figure (the README's come from it); ``write_report`` writes results.md and
speed_vs_compile.png. A mode's own figures count only its correct runs (status "ok"); the peers count whenever they
were timed (status "ok" or "wrong").

A model and mode may have several records: repeated runs, each in its own process (``run.py --add-runs``). Their
figures are the medians of the timed runs. Why: two separate processes of the same model and mode differ by up
to 4% on a 0.2 ms step (bert-base on an H200: 0.185-0.201 ms under plain), and the second run of a pair tends to
be the slower one, so a pair is best run in both orders and its runs pooled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
from pathlib import Path
from typing import Any

from .compile_phases import phase_table
from .floor_report import floor_lines
from .gaps import gpu_time_gaps_section
from .plot import plot, versions
from .timing_checks import TIMED, between_runs_line, disturbed_line, noisy_line

log = logging.getLogger("zoo.report")
# a run the budget's deadline stopped before its result: a placeholder the next call redoes, no result, no failure
STOPPED = "stopped"
REPLAY = "cudagraph-replay"
REPLAY_PEERS = ("plain", "ma-no-cudagraphs", "coordinate-descent")
CALLED_PEERS = ("max-autotune", "cudagraphs")
TRAIN_PEERS = ("plain", "cudagraphs", "max-autotune")
GROUPS = (("vendor_gemm", "gemm"), ("triton_template", "tem"), ("triton", "triton"), ("other", "other"))


def geomean(values: list[float]) -> float | None:
    """Geometric mean (None for an empty list)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _ratio(a: Any, b: Any) -> float | None:
    ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0
    return a / b if ok else None


def _order(modes: list[str]) -> list[str]:
    first = [m for m in ("plain", "ma-no-cudagraphs", "coordinate-descent", "cudagraphs", "max-autotune") if m in modes]
    return first + [m for m in modes if m not in first]


def _pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One model and mode's runs as one record: the median step and compile time of the timed runs (the last run's
    other fields), status "ok" if any run is ok, else the last run's; ``runs`` and the timed runs' step range."""
    timed = [r for r in runs if r.get("status") in TIMED and r.get("step_ms")]
    if len(runs) == 1 or not timed:
        return {**runs[-1], "runs": len(runs)}
    steps = [r["step_ms"] for r in timed]
    compiles = [r["compile_s"] for r in timed if r.get("compile_s")]
    called = [r["called_ms"] for r in timed if r.get("called_ms")]
    ok = [r for r in timed if r.get("status") == "ok"]
    return {**(ok or timed)[-1], "runs": len(runs), "step_ms": statistics.median(steps),
            "called_ms": statistics.median(called) if called else None,
            "compile_s": statistics.median(compiles) if compiles else None, "step_ms_min": min(steps),
            "step_ms_max": max(steps), "status": "ok" if ok else timed[-1]["status"]}


def own_compile(r: dict[str, Any]) -> dict[str, Any]:
    """``r`` with ``compile_s`` net of the time its compile waited for other lanes' turns on the GPU
    (``compile_waited_s``, recorded when lanes share a GPU); the wall time stays as ``compile_wall_s``. Why: an
    autotuning compile waits for every other lane's timing, so its wall time grows with the lanes, not its work."""
    waited = r.get("compile_waited_s")
    if not r.get("compile_s") or not waited:
        return r
    return {**r, "compile_wall_s": r["compile_s"], "compile_s": r["compile_s"] - waited}


def pooled_records(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, mode) -> its runs pooled (``_pooled``; compile times net of waits, ``own_compile``), in first-seen
    order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["model"], r["mode"]), []).append(own_compile(r))
    # a run stopped by a deadline stands only where its model and mode have no other run
    groups = {key: [r for r in runs if r.get("status") != STOPPED] or runs[-1:] for key, runs in groups.items()}
    return {key: _pooled(runs) for key, runs in groups.items()}


def called_ms(r: dict[str, Any]) -> float | None:
    """An inference record's time as called: ``called_ms``, or for records without it the direct calls they were
    timed by (stock trees: ``step_ms``; older records: ``eager_launch_ms``)."""
    if r.get("called_ms"):
        return r["called_ms"]
    if r.get("timing") == "cudagraph-trees":
        return r.get("step_ms")
    return r.get("eager_launch_ms")


def best_stock(runs: dict[str, dict[str, Any]], kind: str | None) -> dict[str, Any]:
    """The best stock mode of one model, timed alike: ``step`` (ms) and ``step_mode`` by outer replay among
    REPLAY_PEERS (inference) or by eager step among TRAIN_PEERS (training); ``called`` and ``called_mode`` among
    CALLED_PEERS as called (inference). None where no peer was timed that way. ``not_run``: the peers (of
    REPLAY_PEERS or TRAIN_PEERS) with no record, or stopped by a budget's deadline before any result; a timeout or
    an error counts as run."""
    timed = {m: r for m, r in runs.items() if r.get("status") in TIMED and r.get("step_ms")}
    if kind == "train":
        steps = {m: timed[m]["step_ms"] for m in TRAIN_PEERS if m in timed}
        called: dict[str, float] = {}
    else:
        steps = {m: timed[m]["step_ms"] for m in REPLAY_PEERS if m in timed and timed[m].get("timing") == REPLAY}
        called = {m: called_ms(timed[m]) for m in CALLED_PEERS if m in timed and called_ms(timed[m])}
    step_mode = min(steps, key=steps.get) if steps else None
    called_mode = min(called, key=called.get) if called else None
    peers = TRAIN_PEERS if kind == "train" else REPLAY_PEERS
    return {"step": steps.get(step_mode), "step_mode": step_mode, "called": called.get(called_mode),
            "called_mode": called_mode,
            "not_run": [m if m not in runs else f"{m} stopped by the deadline" for m in peers
                        if runs.get(m, {}).get("status", STOPPED) == STOPPED]}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model and mode: compile_s, step_ms, speed_vs_plain (plain step / step), speed_vs_best (the best stock
    mode's step / step, timed alike: ``best_stock``; None for a record timed otherwise), called_vs_best (as called:
    the best of CALLED_PEERS / this mode's called_ms), compile_vs_plain, runs. Per mode: geomeans and minima of
    those. Repeated runs of a model and mode count by their medians (``pooled_records``)."""
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for (model, mode), r in pooled_records(records).items():
        by_model.setdefault(model, {})[mode] = r
    mode_names = _order(list(dict.fromkeys(r["mode"] for r in records)))
    models: dict[str, dict[str, dict[str, Any]]] = {}
    best: dict[str, dict[str, Any]] = {}
    for model, runs in by_model.items():
        timed = {m: r for m, r in runs.items() if r.get("status") in TIMED and r.get("step_ms")}
        plain = timed.get("plain", {})
        kind = next((r.get("kind") for r in runs.values() if r.get("kind")), None)
        best[model] = best_stock(runs, kind)
        models[model] = {}
        for mode, r in runs.items():
            alike = kind == "train" or r.get("timing") == REPLAY
            plain_alike = plain if (kind == "train" or plain.get("timing") == r.get("timing")) else {}
            called = called_ms(r) if kind != "train" else None
            models[model][mode] = {
                "status": r.get("status"), "correct": r.get("correct"), "compile_s": r.get("compile_s"),
                "step_ms": r.get("step_ms"), "timing": r.get("timing"), "called_ms": called,
                "speed_vs_plain": _ratio(plain_alike.get("step_ms"), r.get("step_ms")),
                "speed_vs_best": _ratio(best[model]["step"], r.get("step_ms")) if alike else None,
                "called_vs_best": _ratio(best[model]["called"], called),
                "compile_vs_plain": _ratio(r.get("compile_s"), plain.get("compile_s")), "runs": r["runs"]}
    per_mode: dict[str, dict[str, Any]] = {}
    for mode in mode_names:
        # a run stopped by a deadline is no result and no failure: left for the next call, out of these counts
        rows = [runs[mode] for runs in models.values() if mode in runs and runs[mode]["status"] != STOPPED]
        ok = [row for row in rows if row["status"] == "ok"]
        vs_plain = [row["speed_vs_plain"] for row in ok if row["speed_vs_plain"]]
        vs_best = [row["speed_vs_best"] for row in ok if row["speed_vs_best"]]
        vs_called = [row["called_vs_best"] for row in ok if row["called_vs_best"]]
        compile_ratio = [row["compile_vs_plain"] for row in ok if row["compile_vs_plain"]]
        per_mode[mode] = {
            "geomean_speed_vs_plain": geomean(vs_plain), "geomean_speed_vs_best": geomean(vs_best),
            "min_speed_vs_best": min(vs_best) if vs_best else None, "models_vs_best": len(vs_best),
            "geomean_called_vs_best": geomean(vs_called), "min_called_vs_best": min(vs_called) if vs_called else None,
            "models_called": len(vs_called), "geomean_compile_vs_plain": geomean(compile_ratio),
            "max_compile_vs_plain": max(compile_ratio) if compile_ratio else None,
            "models": len(vs_plain), "runs": len(rows), "not_ok": len(rows) - len(ok)}
    return {"models": models, "modes": per_mode, "mode_order": mode_names, "best": best}


def model_groups(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Group name -> models, in registry order: all, inference, training (the records' kind), the held-out sets
    together and one by one (``models.ZooModel.held_out_set``). Empty groups are left out; a model not in the
    registry (a test's) counts in all and by kind only."""
    from collectors.programs import models as registry

    kinds = {r["model"]: r.get("kind") for r in records}
    held = {name: getattr(registry.REGISTRY.get(name), "held_out_set", 0) for name in kinds}
    groups = {"all": list(kinds), "inference": [m for m, k in kinds.items() if k == "infer"],
              "training": [m for m, k in kinds.items() if k == "train"],
              "held out (every set)": [m for m in kinds if held[m]]}
    for n in sorted({n for n in held.values() if n}):
        groups[f"held-out set {n}"] = [m for m in kinds if held[m] == n]
    return {name: members for name, members in groups.items() if members}


def group_figures(summary: dict[str, Any], groups: dict[str, list[str]], mode: str) -> dict[str, dict[str, Any]]:
    """Per group, ``mode``'s figures over the group's models where the mode ran correctly: models, geomean speed
    vs plain, geomean and worst speed vs the best stock mode timed alike (and its model), geomean as called vs the
    best stock trees, geomean and max compile vs plain. Groups where the mode has no correct run are left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, members in groups.items():
        rows = {m: summary["models"][m][mode] for m in members
                if mode in summary["models"].get(m, {}) and summary["models"][m][mode]["status"] == "ok"}
        vs_plain = [r["speed_vs_plain"] for r in rows.values() if r["speed_vs_plain"]]
        if not vs_plain:
            continue
        worst = min(((r["speed_vs_best"], m) for m, r in rows.items() if r["speed_vs_best"]), default=(None, "-"))
        compiles = [r["compile_vs_plain"] for r in rows.values() if r["compile_vs_plain"]]
        out[name] = {"models": len(vs_plain), "geomean_speed_vs_plain": geomean(vs_plain),
                     "geomean_speed_vs_best": geomean([r["speed_vs_best"] for r in rows.values() if r["speed_vs_best"]]),
                     "geomean_called_vs_best": geomean([r["called_vs_best"] for r in rows.values()
                                                        if r["called_vs_best"]]),
                     "min_speed_vs_best": worst[0], "worst_model": worst[1],
                     "geomean_compile_vs_plain": geomean(compiles), "max_compile_vs_plain": max(compiles, default=None)}
    return out


def _f(v: Any, fmt: str = ".2f", suffix: str = "") -> str:
    return f"{v:{fmt}}{suffix}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def census_cell(census: Any) -> str:
    """``gemm 12 (41%) · tem 3 (10%) · ...`` (kernel count and GPU-time share per group)."""
    if not isinstance(census, dict) or "groups" not in census:
        return "-"
    parts = []
    for key, label in GROUPS:
        g = census["groups"].get(key, {})
        if g.get("count"):
            parts.append(f"{label} {g['count']} ({100 * g.get('share', 0):.0f}%)")
    return " · ".join(parts) or "no kernels"


def _correct_cell(r: dict[str, Any]) -> str:
    if r.get("correct") is None:
        return "-"
    return f"{'yes' if r['correct'] else 'NO'} ({_f(r.get('rel_err'), '.1e')})"


def called_p10_line(by_key: dict[tuple[str, str], dict[str, Any]], mode: str = "hook") -> str | None:
    """As called by each run's fastest tenth of direct calls (``called_ms_p10``): ``mode`` against the best of
    CALLED_PEERS, geomean and worst. Why: direct calls of sub-millisecond steps are host-bound, and lanes compiling
    on the same host slow some of them; the fastest tenth is what a call costs on a quiet host. ``by_key``: the
    pooled records (``pooled_records``). None without data."""
    ratios = {}
    for model in dict.fromkeys(model for model, _ in by_key):
        ours = by_key.get((model, mode), {}).get("called_ms_p10")
        peers = [by_key[(model, m)].get("called_ms_p10") for m in CALLED_PEERS if (model, m) in by_key
                 and by_key[(model, m)].get("status") == "ok"]
        if ours and peers and all(peers):
            ratios[model] = min(peers) / ours
    if not ratios:
        return None
    worst = min(ratios, key=ratios.get)
    return (f"As called by each run's fastest tenth of calls (a quiet host's cost): `{mode}` "
            f"{geomean(list(ratios.values())):.3f}x the best of {', '.join(CALLED_PEERS)} in geomean over "
            f"{len(ratios)} models, worst {ratios[worst]:.3f} ({worst}).")


def shared_host_training_line(records: list[dict[str, Any]]) -> str:
    """Which training models were timed while other runs compiled on the same host (``lanes_per_gpu`` > 1), or "".
    Why: an eager training step is host-bound (AdamW runs eagerly), and compiling neighbours slow it whatever the GPU
    lock does: gpt2-medium-train ran 0.92x ``reduce-overhead`` in lanes with the same kernels, 1.00x alone
    (docs/DESIGN.md; ``python -m benchmarks.zoo.host`` times modes one at a time)."""
    shared = sorted({r["model"] for r in records if r.get("kind") == "train" and r.get("status") in TIMED
                     and (r.get("lanes_per_gpu") or 1) > 1})
    if not shared:
        return ""
    return ("Training steps timed while other runs compiled on the same host (host-bound: their comparisons carry "
            f"host contention; `python -m benchmarks.zoo.host` times modes alone): {', '.join(shared)}.")


def not_run_line(summary: dict[str, Any]) -> str:
    """Which models' "vs best stock" lacks a peer that never ran (no record: not reached, or stopped by the
    budget), so the reader knows which comparisons are incomplete."""
    gaps = [f"{model} ({', '.join(b['not_run'])})" for model, b in summary["best"].items() if b.get("not_run")]
    return ("Stock peers not run (their best stock is the best of the others; a timeout or an error counts as run): "
            + ("; ".join(gaps) if gaps else "none") + ".")


def markdown(records: list[dict[str, Any]], summary: dict[str, Any], commands: list[str]) -> str:
    """results.md: header, summary per mode, one table per model."""
    lines = ["# Model zoo: compile time and step time per mode", "",
             f"GPU: {versions(records, 'gpu')} · torch {versions(records, 'torch')} · triton "
             f"{versions(records, 'triton')} · transformers {versions(records, 'transformers')} · timm "
             f"{versions(records, 'timm')} · python {versions(records, 'python')}", ""]
    if commands:
        lines += ["```", *commands, "```", ""]
    lines += ["Speeds are step-time ratios (> 1: faster); compile ratios are compile-time ratios (< 1: faster). "
              "vs best stock = the best stock mode's step / this step, timed alike: inference by one outer CUDA-graph "
              f"replay among {', '.join(REPLAY_PEERS)}; training by an eager step (backward and AdamW) among "
              f"{', '.join(TRAIN_PEERS)}. As called = direct calls in the user's own loop, against the best of "
              f"{', '.join(CALLED_PEERS)} (the stock modes with CUDA graph trees), which are never replayed in an "
              "outer graph. Geomeans count a mode's correct runs only; a mode run several times (separate processes) "
              "counts by its median. Records with lanes_per_gpu > 1 compiled while other runs compiled on the same "
              "host; their timings never overlapped one another, and where the record says benchmarks_took_turns "
              "no other run's autotuning benchmark ran on the GPU during them either. Where a record says "
              "compile_waited_s, its compile time leaves out the time its benchmarks waited for the other runs' turns "
              "on the GPU.", "",
              "## Summary per mode", "",
              "| mode | geomean speed vs plain | geomean vs best stock (timed alike) | min vs best stock | models | "
              "geomean as called vs best trees | min as called | models | geomean compile vs plain | "
              "max compile vs plain | not ok |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode in summary["mode_order"]:
        s = summary["modes"][mode]
        lines.append(f"| `{mode}` | {_f(s['geomean_speed_vs_plain'], '.3f')} | "
                     f"{_f(s['geomean_speed_vs_best'], '.3f')} | {_f(s['min_speed_vs_best'], '.3f')} | "
                     f"{s['models_vs_best']} | {_f(s['geomean_called_vs_best'], '.3f')} | "
                     f"{_f(s['min_called_vs_best'], '.3f')} | {s['models_called']} | "
                     f"{_f(s['geomean_compile_vs_plain'], '.2f', 'x')} | {_f(s['max_compile_vs_plain'], '.2f', 'x')}"
                     f" | {s['not_ok']} |")
    by_key = pooled_records(records)
    between_runs = between_runs_line(records)
    quiet = called_p10_line(by_key)
    shared_host = shared_host_training_line(records)
    lines += ["", noisy_line(records), "", disturbed_line(records)] + (["", between_runs] if between_runs else [])
    lines += ["", not_run_line(summary)]
    lines += ["", shared_host] if shared_host else []
    lines += ["", quiet] if quiet else []
    if "hook" in summary["mode_order"]:
        lines += ["", "## `hook` by group", "", "Held-out sets: architectures added after the policy of their day was "
                  "fixed and never used to tune anything (`models.ZooModel.held_out_set`).", "",
                  "| group | models | geomean speed vs plain | geomean vs best stock | worst vs best stock (model) | "
                  "geomean as called vs best trees | geomean compile vs plain | max compile vs plain |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, g in group_figures(summary, model_groups(records), "hook").items():
            lines.append(f"| {name} | {g['models']} | {_f(g['geomean_speed_vs_plain'], '.3f')} | "
                         f"{_f(g['geomean_speed_vs_best'], '.3f')} | "
                         f"{_f(g['min_speed_vs_best'], '.3f')} ({g['worst_model']}) | "
                         f"{_f(g['geomean_called_vs_best'], '.3f')} | "
                         f"{_f(g['geomean_compile_vs_plain'], '.2f', 'x')} | "
                         f"{_f(g['max_compile_vs_plain'], '.2f', 'x')} |")
    lines += gpu_time_gaps_section(by_key, summary)
    if any(r.get("compile_phases_s") for r in records):
        with contextlib.suppress(ValueError):  # no model with both an ok hook and an ok plain run: no section
            lines += ["", "## Where `hook`'s compile goes beyond plain's (torch's compile timers, seconds)", "",
                      *phase_table(records, "hook")]
    for model, runs in summary["models"].items():
        first = next(r for (m, _), r in by_key.items() if m == model)
        b = summary["best"].get(model, {})
        lines += ["", f"## {model}", "", f"{first.get('description') or ''} ({first.get('kind')}, "
                  f"{first.get('dtype')}). Best stock mode timed alike: {b.get('step_mode') or '-'}"
                  + (f"; as called: {b['called_mode']}" if b.get("called_mode") else "")
                  + (f"; peers not run: {', '.join(b['not_run'])}" if b.get("not_run") else ""), "",
                  "| mode | status | compile s | compile vs plain | step ms (p10-p90, or runs' range) "
                  "| timing | speed vs plain | vs best stock | called ms | as called vs best trees | census | "
                  "correct (rel err) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for mode in [m for m in summary["mode_order"] if m in runs]:
            r, s = by_key[(model, mode)], runs[mode]
            status = r.get("status") if r.get("status") == "ok" else f"**{r.get('status')}**: {r.get('error')}"
            spread = (f"{r['runs']} runs: {_f(r.get('step_ms_min'), '.3f')}-{_f(r.get('step_ms_max'), '.3f')}"
                      if r.get("step_ms_min") else f"{_f(r.get('step_ms_p10'), '.3f')}-{_f(r.get('step_ms_p90'), '.3f')}")
            step = f"{_f(r.get('step_ms'), '.3f')} ({spread})" if r.get("step_ms") else "-"
            lines.append(f"| `{mode}` | {status.replace('|', '/')} | {_f(r.get('compile_s'), '.1f')} | "
                         f"{_f(s['compile_vs_plain'], '.2f', 'x')} | {step} | "
                         f"{r.get('timing') or '-'} | {_f(s['speed_vs_plain'], '.3f')} | "
                         f"{_f(s['speed_vs_best'], '.3f')} | {_f(s['called_ms'], '.3f')} | "
                         f"{_f(s['called_vs_best'], '.3f')} | {census_cell(r.get('census'))} | {_correct_cell(r)} |")
        lines += floor_lines([(mode, by_key[(model, mode)]) for mode in summary["mode_order"] if mode in runs])
    lines += ["", "Census: GPU kernels of one step by group (count, share of GPU time): gemm = cuBLAS/cuBLASLt/"
              "CUTLASS, tem = Triton templates, triton = other Triton kernels, other = aten, attention, cuDNN."]
    return "\n".join(lines) + "\n"


def write_report(records: list[dict[str, Any]], out: Path) -> Path:
    """Write results.md and speed_vs_compile.png into ``out``; the commands come from out/meta.json."""
    out = Path(out)
    summary = summarize(records)
    try:
        commands = list(json.loads((out / "meta.json").read_text()).get("commands", []))
    except (OSError, ValueError, AttributeError):
        commands = []
    path = out / "results.md"
    path.write_text(markdown(records, summary, commands))
    plot(records, summary, out / "speed_vs_compile.png")
    log.info("wrote %s", path)
    return path
