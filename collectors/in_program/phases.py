"""The in-program collector's phases, each run in a fresh process (``collect.spawn``): ``record`` (compile with the
hook, observe every decision, time the step), ``base``/``flip`` (the recorded table, one entry flipped, timed as the
zoo worker times a step) and ``paired`` (every table compiled in one process, replays interleaved)."""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any, Callable

from collectors.programs.harness import environment, timing_lock, write_json

from .decisions import AlternativeLog, flipped_table, select

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1



class _Mode:
    """What ``collectors.programs.step.measure`` needs of a mode: ``name``, ``base``, ``cudagraphs``, ``replayable`` and compile. The
    step is timed by one outer CUDA-graph replay, so inference graphs compile without CUDA graph trees."""

    cudagraphs = False
    replayable = True

    def __init__(self, name: str, base: str, compile_fn: Callable[[Any], Any]) -> None:
        self.name, self.base, self.compile = name, base, compile_fn


def phase_record(model: str, repeats: int, table_out: Path) -> dict[str, Any]:
    """Compile with ``predictor.compile``, observe every decision, time the step; write the table document."""
    import torch

    import predictor
    from predictor.offline.export import DecisionRecorder
    from predictor.runtime.choices import installed

    from collectors.programs import models
    from collectors.programs import step as program_step

    zm = models.get(model)
    recorder, alternatives, holder = DecisionRecorder(), AlternativeLog(), {}

    def compile_(module: Any) -> Any:
        compiled = predictor.compile(module, cudagraphs="training")
        pruner = holder["pruner"] = installed._STACK[-1].pruner
        pruner.recorder, pruner.decision_observer = recorder, alternatives
        return compiled

    record: dict[str, Any] = {}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    program_step.measure(record, zm, _Mode("hook", "hook", compile_), repeats, device)
    pruner = holder["pruner"]
    pruner.recorder = pruner.decision_observer = None
    table, conflicts = recorder.table()
    rows = alternatives.finish(pruner.device)
    mismatched = [r["key"] for r in rows if table.get(r["key"]) != [r["chosen"]]]
    doc = {"schema_version": SCHEMA_VERSION, "model": model, "table": table, "rows": rows, "conflicts": conflicts,
           "skipped": {**recorder.skipped, **{f"observer_{k}": v for k, v in alternatives.skipped.items()}},
           "chosen_not_in_table": mismatched, **environment()}
    table_out.parent.mkdir(parents=True, exist_ok=True)
    write_json(str(table_out), doc)
    record.update(gemm_keys=len(table), decided=len(rows), flippable=sum(r["alternative"] is not None for r in rows),
                  chosen_not_in_table=len(mismatched))
    return record


def table_compiler(table: dict[str, list]) -> Callable[[Any], Any]:
    """torch.compile with ``LookupTableChoices`` serving ``table``, on ``predictor.compile``'s backend and options
    (CUDA graph trees for training graphs only: the step is timed by one outer replay; the accumulated-gradient guard),
    so only the GEMM choices differ."""
    def compile_(module: Any) -> Any:
        from torch._inductor import config

        from .table_choices import table_choices_class
        from predictor.runtime.compile import RECOMMENDED_OPTIONS, compile_without_hook

        config.lookup_table.table = table
        config.inductor_choices_class = table_choices_class()
        return compile_without_hook(module, dict(RECOMMENDED_OPTIONS), "training")
    return compile_


def phase_time(model: str, run: str, repeats: int, table_path: Path) -> dict[str, Any]:
    """One ``base:<i>`` or ``flip:<row>`` run: the recorded table (one entry flipped), timed as the worker times."""
    import torch

    from collectors.programs import models
    from collectors.programs import step as program_step

    from .table_choices import table_choices_class

    doc = json.loads(table_path.read_text())
    table, record = doc["table"], {}
    kind, _, index = run.partition(":")
    if kind == "flip":
        row = doc["rows"][int(index)]
        table = flipped_table(table, row)
        record.update(key=row["key"], flipped_to=row["alternative"].get("template_id"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    program_step.measure(record, models.get(model), _Mode(run, "table", table_compiler(table)), repeats, device)
    counts = table_choices_class().counts
    record.update(lookup_hits=counts["hits"], lookup_misses=counts["misses"], missed=counts["missed"][:20])
    return record


def phase_paired(model: str, repeats: int, table_path: Path, max_gemms: int, rounds: int) -> dict[str, Any]:
    """The base table and each flipped table compiled in this one process, each step captured in a CUDA graph,
    then replayed in turns (``rounds`` rounds of ``repeats`` replays each, the order rotating per round; a round's
    replays are queued back to back and timed as one, ``program_step.batched_step_ms``).

    Why: timed in separate processes, two runs of the same table differ by 1-6% on a shared host, more than most
    decisions are worth; replays interleaved in one process see the same clocks and the same neighbours, so the
    comparison is paired. Inference models only (a training step mutates its weights)."""
    import torch
    from torch._inductor import config

    from collectors.programs import models
    from collectors.programs import step as program_step

    from .table_choices import table_choices_class

    zm = models.get(model)
    if zm.kind != "infer":
        raise ValueError(f"{model}: paired timing needs an inference model (kind {zm.kind!r})")
    if not torch.cuda.is_available():
        raise RuntimeError("paired timing captures CUDA graphs: no CUDA device")
    doc = json.loads(table_path.read_text())
    flips = select(doc["rows"], max_gemms)
    variants = {"base": doc["table"], **{f"flip:{i}": flipped_table(doc["table"], doc["rows"][i]) for i in flips}}
    device = torch.device("cuda")
    module, inputs, _ = zm.build(device)
    module.eval()
    amp = program_step.autocast_of(zm, device)
    config.force_disable_caches = True  # each variant compiles afresh, never from the previous variant's code
    graphs, lookups, outputs = {}, {}, {}
    for name, table in variants.items():
        torch._dynamo.reset()
        table_choices_class().counts.update(hits=0, misses=0, missed=[])  # counts per variant
        compiled = table_compiler(table)(module)

        def step(compiled: Any = compiled) -> Any:
            with torch.no_grad(), amp():
                return compiled(*inputs)
        outputs[name] = step().detach().float().clone()
        graphs[name] = program_step.capture(step)
        counts = table_choices_class().counts
        lookups[name] = {"hits": counts["hits"], "misses": counts["misses"]}
        log.info("captured %s (%d lookup hits, %d misses)", name, counts["hits"], counts["misses"])
    samples: dict[str, list[float]] = {name: [] for name in graphs}  # per round: the mean of `repeats` replays
    names = list(graphs)
    with timing_lock():
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for _ in range(program_step.WARMUP):
                    graphs[name].replay()
                samples[name].append(program_step.batched_step_ms(graphs[name].replay, repeats, device))
    ref = outputs["base"]
    variants_out = {name: {"step_ms": statistics.median(samples[name]), "round_ms": samples[name],
                           "rel_diff_vs_base": program_step.errors(outputs[name], ref)[1], **lookups[name]}
                    for name in names}
    base_rounds = variants_out["base"]["round_ms"]
    return {"variants": variants_out, "rounds": rounds, "repeats": repeats, "step_ms": variants_out["base"]["step_ms"],
            "noise": (max(base_rounds) - min(base_rounds)) / statistics.median(base_rounds),
            "lookup_misses": sum(v["misses"] for v in lookups.values())}
