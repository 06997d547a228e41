"""Step time per compile mode as a user's own loop runs it, one mode per fresh process, one at a time on a quiet host.

Why beside the zoo: an eager training step (forward, backward, AdamW) and a small model's inference call are
host-bound at a few ms or less, so the zoo's lanes -- other runs compiling on the same host while one is timed --
move them by up to 10% with identical kernels (gpt2-medium-train, H100: the zoo's lanes gave `hook` 0.92x
`reduce-overhead` in both orders; here, alone, 1.00x). This times each mode alone, the steps back to back with one
synchronisation per round (a training loop, or an inference loop that does not wait for each result), and splits the
host time by phase, so a host overhead of the product's shows. An inference model's step is its forward alone, under
``torch.no_grad`` as the zoo calls it.

    python -m benchmarks.zoo.host --model gpt2-medium-train --modes cudagraphs,hook,cudagraphs
    python -m benchmarks.zoo.host --model llama-decode-b1 --modes cudagraphs,hook,cudagraphs,hook --steps 500
    python -m benchmarks.zoo.host --model llama-decode-b1 --modes cudagraphs,hook --steps 500 --profile 300

``--profile N`` then runs N more steps under cProfile and prints the functions that took the most host time: the
same calls in two modes, each slower in one process, is host variance; an extra call per step is the mode's work.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def measure(model: str, mode: str, rounds: int, steps: int, profile: int = 0) -> dict:
    """One zoo mode in this process: median step time over ``rounds`` x ``steps`` and the host time per phase;
    with ``profile``, that many more steps under cProfile (function calls and host seconds per step, top functions)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp())  # empty caches: a compile like a user's
    import torch

    from collectors.programs import models
    from collectors.programs.harness import environment

    from . import modes

    module, inputs, kind = models.get(model).build(torch.device("cuda"))
    training = kind == "loss"
    module.train(training)
    compiled = modes.parse_mode(mode).compile(module)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4) if training else None
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []} if training else {"forward": []}

    def step(record: bool) -> None:
        t0 = time.perf_counter()
        if not training:
            with torch.no_grad():
                compiled(*inputs)
            if record:
                phases["forward"].append((time.perf_counter() - t0) * 1e3)
            return
        loss = compiled(*inputs)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if record:
            for name, took in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
                phases[name].append(took * 1e3)

    start = time.perf_counter()
    for _ in range(5):  # compile, then the CUDA-graph trees' warm-up and recording
        step(False)
    torch.cuda.synchronize()
    first_steps_s = time.perf_counter() - start
    step_ms = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step(True)
        torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - t0) * 1e3 / steps)
    record = {"model": model, "mode": mode, "step_ms": statistics.median(step_ms), "step_ms_rounds": step_ms,
              "first_steps_s": first_steps_s,
              **{f"host_{name}_ms": statistics.median(v) for name, v in phases.items()}, **environment()}
    if profile:
        record.update(_profiled(lambda: step(False), profile))
    return record


def _profiled(step: Callable[[], Any], steps: int, top: int = 12) -> dict:
    """``steps`` steps under cProfile: Python function calls per step, profiled host ms per step, and the ``top``
    functions by their own time (name, calls per step, own us per step)."""
    import torch

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]  # (file, line, name) -> (cc, nc, tt, ct, _)
    return {"profile_calls_per_step": stats.total_calls / steps, "profile_host_ms": stats.total_tt * 1e3 / steps,
            "profile_top": [[f"{Path(f).name}:{line}({name})", nc / steps, tt * 1e6 / steps]
                            for (f, line, name), (_cc, nc, tt, _ct, _callers) in rows]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.zoo.host", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2-medium-train", help="a zoo model (training: forward, backward, AdamW)")
    p.add_argument("--modes", default="cudagraphs,hook,cudagraphs",
                   help="comma list of zoo modes (cudagraphs is reduce-overhead); a mode named twice runs twice")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="then N more steps under cProfile: calls and host time per step, the top functions")
    p.add_argument("--out", type=Path, help="write the records here as JSON")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child process: measure this mode and print its record
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.model, args.one, args.rounds, args.steps, args.profile)))
        return 0
    from . import modes

    names = modes.split_modes(args.modes, repeats=True)
    try:
        for name in names:
            modes.parse_mode(name)
    except ValueError as exc:
        p.error(str(exc))
    records = []
    for mode in names:
        cmd = [sys.executable, "-m", "benchmarks.zoo.host", "--model", args.model, "--one", mode,
               "--rounds", str(args.rounds), "--steps", str(args.steps), "--profile", str(args.profile)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if done.returncode or not lines:
            print(f"{mode}: failed (rc {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            continue
        rec = json.loads(lines[-1])
        records.append(rec)
        host = ", ".join(f"{key[5:-3]} {value:.3f}" for key, value in rec.items() if key.startswith("host_"))
        print(f"{mode:16s} step {rec['step_ms']:.3f} ms | host {host} ms | {rec['gpu']}, torch {rec['torch']}")
        if "profile_top" in rec:
            print(f"{'':16s} profiled: {rec['profile_calls_per_step']:.0f} Python calls, "
                  f"{rec['profile_host_ms']:.3f} host ms per step; most own time:")
            for name, calls, own_us in rec["profile_top"]:
                print(f"{'':18s}{own_us:8.1f} us {calls:6.1f}x {name}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
