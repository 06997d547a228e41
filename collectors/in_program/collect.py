"""In-program agreement (issue 15, item 3): is the hook's pick within 1% of the better side of each decision,
timed as the whole step of a zoo model?

    PYTHONUNBUFFERED=1 python -m collectors.in_program.collect --models gpt2-decode,whisper-base,llama-train \\
        --out OUT/in_program --max-gemms 8 --noise-repeats 3 --run-timeout 240 --budget-s 540   # rerun to continue
    python -m collectors.in_program.collect --out OUT/in_program --report-only

Per model, every run in a fresh process with empty Inductor/Triton caches (as ``run.py``'s workers):

1. ``record``: ``predictor.compile`` and one zoo-worker measurement (``worker.measure``); meanwhile the hook's
   ``decision_observer`` gets every GEMM the decide policy settles and keeps, keyed by torch's own
   ``LookupTableChoices.make_lookup_key``, the chosen choice and its runner-up (``policy.runner_up``: cuBLAS when
   the hook took a Triton/decompose-K kernel, the model's favourite of those when it kept cuBLAS) as lookup-table
   entries, plus the score gap; ``predictor.offline.export.DecisionRecorder`` keeps the table of all final decisions.
   Written to ``OUT/tables/<model>.json``.
2. ``base:<i>`` (``--noise-repeats`` runs): torch with ``LookupTableChoices`` serving that table, compiled with
   ``predictor.compile``'s backend and options (same CUDA-graph rule), timed as the zoo worker times a step. The
   spread of these medians is the run-to-run noise.
3. ``flip:<i>``: the same with one key's entry replaced by its runner-up, for the ``--max-gemms`` keys with the
   largest ideal time (``features.ideal_time_us``). A key is a problem (sizes, strides, dtypes): repeated layers
   with the same GEMM flip together, as the hook decides them together.

A GEMM agrees when the hook's step time (median of the base runs) is within 1% of the better of the two
(``agreement.py`` computes the figure). ``OUT/results.json`` is a list of records keyed (model, run), rewritten atomically after every run (GPU,
torch, triton in each); a rerun skips recorded runs (``--retry-failed`` redoes errors and timeouts).
``OUT/agreement.json``/``.md``: the figure and the per-GEMM table. ``--lanes N`` runs N processes at once on
the one GPU; only their compiles overlap (the timed part holds ``OUT/gpu.lock``), and the base runs' spread
shows whether the overlap costs precision (measured on an H100 with 3 lanes: 0.6-5.7%, too much for a 1% figure).
``--paired`` (inference models): one ``paired`` run per model compiles the base and every flipped table in one
process and replays their CUDA graphs in turns (``phase_paired``), a paired comparison.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from benchmarks.zoo.worker import GPU_LOCK_ENV, environment, one_line, write_json

from .agreement import report

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
# each phase in a process group of its own, so a timeout kills its compile workers too
OWN_PROCESS_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
SCHEMA_VERSION = 1
RETRYABLE = ("error", "timeout")


# ---------------------------------------------------------------------------------------------
# Recording the decisions and their runner-ups (the hook's decision_observer)
# ---------------------------------------------------------------------------------------------

class AlternativeLog:
    """``GemmPruner.decision_observer``: per lookup key (first decision wins) the chosen and the runner-up entry.
    ``key_choices``: what keys (default torch's ``LookupTableChoices``; a stand-in in CPU tests)."""

    def __init__(self, key_choices: Any = None) -> None:
        self.key_choices = key_choices
        self.rows: dict[str, dict[str, Any]] = {}
        self.skipped: Counter = Counter()

    def _keyer(self) -> Any:
        from predictor.offline.export import lookup_keyer

        self.key_choices = lookup_keyer(self.key_choices)
        return self.key_choices

    def __call__(self, choices: list[Any], scores: Any, is_aten: list[bool], chosen: int, problem: Any,
                 kernel_inputs: Any, op_name: str) -> None:
        from predictor.offline.export import lookup_entry
        from predictor.runtime.choices.policy import runner_up

        key = self._keyer().make_lookup_key(kernel_inputs, op_name, include_device=True)
        if key is None:
            self.skipped["no_key"] += 1
            return
        if key in self.rows:
            self.rows[key]["count"] += 1
            return
        from predictor.runtime.choices.gemm_inputs import _lowering_node, output_consumers, output_feeds_pointwise

        alternative, gap = runner_up(scores, is_aten, chosen)
        node = _lowering_node()
        row = {"key": key, "op_name": op_name, "problem": str(problem), "count": 1,
               "dims": {f: getattr(problem, f) for f in ("b", "m", "n", "k")}, "dtype": problem.dtype,
               "out_dtype": problem.out_dtype or problem.dtype, "chosen": lookup_entry(choices[chosen]),
               "chosen_side": "cublas" if is_aten[chosen] else "triton", "gap": gap, "alternative": None,
               "feeds_pointwise": output_feeds_pointwise(node), "consumers": sorted(set(output_consumers(node)))}
        if alternative is not None:
            try:
                row["alternative"] = lookup_entry(choices[alternative])
            except ValueError as exc:
                row["alternative_error"] = str(exc)
        self.rows[key] = row

    def finish(self, device: Any) -> list[dict[str, Any]]:
        """The rows with each GEMM's ideal time on ``device`` (the model's DeviceInfo; None leaves it out)."""
        from predictor.core.features import ideal_time_us

        out = []
        for row in self.rows.values():
            d = row["dims"]
            row["ideal_us"] = (None if device is None else
                               ideal_time_us(d["b"], d["m"], d["n"], d["k"], row["dtype"], row["out_dtype"], device))
            out.append(row)
        return out


def select(rows: list[dict[str, Any]], max_gemms: int) -> list[int]:
    """Indices of the rows to flip: those with a runner-up, largest ideal time first, at most ``max_gemms``."""
    flippable = [i for i, r in enumerate(rows) if r.get("alternative") is not None]
    flippable.sort(key=lambda i: -(rows[i].get("ideal_us") or 0.0))
    return flippable[:max_gemms]


def flipped_table(table: dict[str, list], row: dict[str, Any]) -> dict[str, list]:
    """``table`` with ``row``'s key served by its runner-up alone (a deep copy; the original is untouched)."""
    if row["key"] not in table:
        raise ValueError(f"{row['key'][:80]!r} is not in the table: the flip would not apply")
    out = copy.deepcopy(table)
    out[row["key"]] = [copy.deepcopy(row["alternative"])]
    return out


def plan(doc: dict[str, Any] | None, max_gemms: int, noise_repeats: int, paired: bool = False) -> list[str]:
    """The runs of one model: ``record`` until its document exists, then either one ``paired`` run or
    ``base:<i>`` and ``flip:<row index>`` runs."""
    if doc is None:
        return ["record"]
    if paired:
        return ["paired"]
    return [f"base:{i}" for i in range(noise_repeats)] + [f"flip:{i}" for i in select(doc["rows"], max_gemms)]


# ---------------------------------------------------------------------------------------------
# The phases (one per process)
# ---------------------------------------------------------------------------------------------

class _Mode:
    """What ``worker.measure`` needs of a mode: ``name``, ``base``, ``cudagraphs``, ``replayable`` and compile. The
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

    from benchmarks.zoo import models, worker

    zm = models.get(model)
    recorder, alternatives, holder = DecisionRecorder(), AlternativeLog(), {}

    def compile_(module: Any) -> Any:
        compiled = predictor.compile(module, cudagraphs="training")
        pruner = holder["pruner"] = installed._STACK[-1].pruner
        pruner.recorder, pruner.decision_observer = recorder, alternatives
        return compiled

    record: dict[str, Any] = {}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    worker.measure(record, zm, _Mode("hook", "hook", compile_), repeats, device)
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

        from benchmarks.export_check import table_choices_class
        from predictor.runtime.compile import RECOMMENDED_OPTIONS, compile_without_hook

        config.lookup_table.table = table
        config.inductor_choices_class = table_choices_class()
        return compile_without_hook(module, dict(RECOMMENDED_OPTIONS), "training")
    return compile_


def phase_time(model: str, run: str, repeats: int, table_path: Path) -> dict[str, Any]:
    """One ``base:<i>`` or ``flip:<row>`` run: the recorded table (one entry flipped), timed as the worker times."""
    import torch

    from benchmarks.export_check import table_choices_class

    from benchmarks.zoo import models, worker

    doc = json.loads(table_path.read_text())
    table, record = doc["table"], {}
    kind, _, index = run.partition(":")
    if kind == "flip":
        row = doc["rows"][int(index)]
        table = flipped_table(table, row)
        record.update(key=row["key"], flipped_to=row["alternative"].get("template_id"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    worker.measure(record, models.get(model), _Mode(run, "table", table_compiler(table)), repeats, device)
    counts = table_choices_class().counts
    record.update(lookup_hits=counts["hits"], lookup_misses=counts["misses"], missed=counts["missed"][:20])
    return record


def phase_paired(model: str, repeats: int, table_path: Path, max_gemms: int, rounds: int) -> dict[str, Any]:
    """The base table and each flipped table compiled in this one process, each step captured in a CUDA graph,
    then replayed in turns (``rounds`` rounds of ``repeats`` replays each, the order rotating per round; a round's
    replays are queued back to back and timed as one, ``worker.batched_step_ms``).

    Why: timed in separate processes, two runs of the same table differ by 1-6% on a shared host, more than most
    decisions are worth; replays interleaved in one process see the same clocks and the same neighbours, so the
    comparison is paired. Inference models only (a training step mutates its weights)."""
    import torch
    from torch._inductor import config

    from benchmarks.export_check import table_choices_class

    from benchmarks.zoo import models, worker

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
    amp = worker.autocast_of(zm, device)
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
        graphs[name] = worker.capture(step)
        counts = table_choices_class().counts
        lookups[name] = {"hits": counts["hits"], "misses": counts["misses"]}
        log.info("captured %s (%d lookup hits, %d misses)", name, counts["hits"], counts["misses"])
    samples: dict[str, list[float]] = {name: [] for name in graphs}  # per round: the mean of `repeats` replays
    names = list(graphs)
    with worker.timing_lock():
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for _ in range(worker.WARMUP):
                    graphs[name].replay()
                samples[name].append(worker.batched_step_ms(graphs[name].replay, repeats, device))
    ref = outputs["base"]
    variants_out = {name: {"step_ms": statistics.median(samples[name]), "round_ms": samples[name],
                           "rel_diff_vs_base": worker.errors(outputs[name], ref)[1], **lookups[name]}
                    for name in names}
    base_rounds = variants_out["base"]["round_ms"]
    return {"variants": variants_out, "rounds": rounds, "repeats": repeats, "step_ms": variants_out["base"]["step_ms"],
            "noise": (max(base_rounds) - min(base_rounds)) / statistics.median(base_rounds),
            "lookup_misses": sum(v["misses"] for v in lookups.values())}


def run_phase(args: argparse.Namespace) -> int:
    record: dict[str, Any] = {"model": args.model, "run": args.run, "status": "ok", "schema_version": SCHEMA_VERSION}
    try:
        record.update(environment())
        table_path = Path(args.table)
        if args.run == "record":
            record.update(phase_record(args.model, args.repeats, table_path))
        elif args.run == "paired":
            record.update(phase_paired(args.model, args.repeats, table_path, args.max_gemms, args.rounds))
        else:
            record.update(phase_time(args.model, args.run, args.repeats, table_path))
        if record.get("correct") is False:
            record["status"] = "wrong"
    except Exception as exc:  # noqa: BLE001 -- every failure becomes a record
        traceback.print_exc()
        record.update(status="error", error=one_line(exc))
    write_json(args.json_out, record)
    return 0


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------

def spawn(model: str, run: str, out: Path, repeats: int, timeout: float, max_gemms: int = 8,
          rounds: int = 10) -> dict[str, Any]:
    """One run in a fresh process with empty caches; a timeout kills its process group. Parallel runs (``--lanes``)
    share ``OUT/gpu.lock``: their compiles overlap, their timings never do (``worker.timing_lock``)."""
    tmp = Path(tempfile.mkdtemp(prefix="zoo-inprog-"))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "TRITON_CACHE_DIR": str(tmp / "triton"),
           "PYTHONUNBUFFERED": "1", GPU_LOCK_ENV: str(out / "gpu.lock")}
    log_path = out / "logs" / re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model}__{run}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "collectors.in_program.collect", "--phase", "--out", str(out), "--model", model,
           "--run", run, "--repeats", str(repeats), "--table", str(out / "tables" / f"{model}.json"),
           "--json-out", str(tmp / "record.json"), "--max-gemms", str(max_gemms), "--rounds", str(rounds)]
    t0 = time.monotonic()
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=logf, stderr=subprocess.STDOUT, **OWN_PROCESS_GROUP)
        try:
            proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"model": model, "run": run, "status": "timeout", "wall_s": time.monotonic() - t0}
    try:
        record = json.loads((tmp / "record.json").read_text())
    except (OSError, ValueError):
        record = {"model": model, "run": run, "status": "error", "error": f"no record (exit {proc.returncode})"}
    record["wall_s"] = time.monotonic() - t0
    return record


def run_all(names: list[str], out: Path, args: argparse.Namespace) -> None:
    """Every model's missing runs, ``args.lanes`` at a time: first the ``record`` runs (they write the tables the
    other runs read), then all ``base``/``flip`` runs. Results are saved after every run; no run starts after the
    budget, and one the budget cut short is not recorded (the next call redoes it)."""
    from benchmarks.zoo import models

    deadline = time.monotonic() + args.budget_s if args.budget_s is not None else None
    results = out / "results.json"
    store = {(r["model"], r["run"]): r for r in (json.loads(results.read_text()) if results.exists() else [])}
    lock = threading.Lock()

    def todo(name: str) -> list[str]:
        table = out / "tables" / f"{name}.json"
        doc = json.loads(table.read_text()) if table.exists() else None
        paired = args.paired and models.get(name).kind == "infer"
        return [r for r in plan(doc, args.max_gemms, args.noise_repeats, paired) if (name, r) not in store
                or args.retry_failed and store[(name, r)]["status"] in RETRYABLE]

    def one(name: str, run: str) -> None:
        left = float("inf") if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return
        record = spawn(name, run, out, args.repeats, min(args.run_timeout, left), args.max_gemms, args.rounds)
        if record["status"] == "timeout" and left < args.run_timeout:
            return  # cut by the budget
        with lock:
            store[(name, run)] = record
            write_json(str(results), list(store.values()))
        print(f"{name:<18} {run:<10} {record['status']:<8} step {record.get('step_ms') or float('nan'):.4f} ms"
              f"  ({record['wall_s']:.0f} s)", flush=True)

    for stage in ("record", "timed"):
        jobs = [(name, run) for name in names for run in todo(name) if (run == "record") == (stage == "record")]
        with ThreadPoolExecutor(max_workers=max(1, args.lanes)) as pool:
            list(pool.map(lambda job: one(*job), jobs))
    if deadline is not None and time.monotonic() >= deadline:
        print("in_program: budget spent: rerun the same command to continue", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="", help="comma-separated zoo model names")
    p.add_argument("--context-sample", type=int, default=0, metavar="N",
                   help="also the first N context blocks of the seeded sample (context_blocks.sampled_names)")
    p.add_argument("--out", required=True)
    p.add_argument("--max-gemms", type=int, default=8, help="flipped GEMMs per model, largest ideal time first")
    p.add_argument("--noise-repeats", type=int, default=3, help="unflipped runs per model (noise and the hook's time)")
    p.add_argument("--repeats", type=int, default=50, help="timed steps per run")
    p.add_argument("--run-timeout", type=float, default=240.0)
    p.add_argument("--budget-s", type=float, default=None, help="start no run after this many seconds")
    p.add_argument("--lanes", type=int, default=1,
                   help="runs at once on the one GPU: compiles overlap, timings take turns (a file lock)")
    p.add_argument("--paired", action="store_true",
                   help="inference models: base and flips compiled in one process, replays interleaved (phase_paired)")
    p.add_argument("--rounds", type=int, default=10, help="--paired: rounds of --repeats replays per table")
    p.add_argument("--retry-failed", action="store_true")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--phase", action="store_true", help=argparse.SUPPRESS)  # one run in this process (spawn)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--run", help=argparse.SUPPRESS)
    p.add_argument("--table", help=argparse.SUPPRESS)
    p.add_argument("--json-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    if args.phase:
        return run_phase(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        from benchmarks.zoo import models
        from .context_blocks import sampled_names

        names = [m.strip() for m in args.models.split(",") if m.strip()] + sampled_names(args.context_sample)
        for name in names:
            models.get(name)  # an unknown name fails before any run
        run_all(names, out, args)
    summary = report(out)
    share = summary["agreement"]
    print(f"agreement: {'n/a' if share is None else f'{share:.1%}'} of {summary['n']} GEMMs within "
          f"{summary['tolerance']:.0%}; noise {summary['noise']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
