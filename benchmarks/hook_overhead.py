"""What the hook adds to a compile: the filter's wall time per GEMM, for the default and the exhaustive lists.

    python -m benchmarks.hook_overhead [--model models/h100-default-lgbm-all] [--repeats 50]

Builds Inductor-like KernelTemplateChoice stand-ins (template uid + params.to_kwargs(), exactly what the
hook reads) for the candidate lists Inductor 2.11 produces (``predictor.spaces``), then times
``GemmPruner.filter`` with the shipped model: mapping every choice to a Candidate, reading the problem,
features, the tree walk, selection. One CPU thread. Three figures per list: ``first``, a problem's first
sight (the pruner's score cache emptied before every call: features and the model run) with a list of configs
seen before (as for every GEMM after the first of its list in a compile: the Candidates and their own features
are kept, ``runtime_features._LISTS``); ``list``, the same with that list never seen either; ``cached``, a repeat of a
problem already scored (a model's repeated layers).

Issue 18's targets: first sight p50 <= 0.5 ms for ~25 choices and <= 5 ms for ~2400. Measured on the 2-core CPU
machine, both shipped default models (h100- and h200-default-lgbm-all), 50 repeats, p50 in ms:

    choices   first p50             list p50              cached p50
              before      now       before      now       (either)
    22-30     0.67-0.75   0.38-0.43 0.77-0.86   0.50-0.54 0.12-0.15
    926       7.95-8.03   1.96-1.97 8.81-8.85   2.78-2.81 1.04-1.05
    1401      11.9-12.0   2.86-2.88 13.1-13.2   4.06-4.09 1.50-1.54
    2401      18.0-19.6   4.45-4.66 20.0-21.6   6.45-6.67 2.46-2.68

"before": the numpy walk of the 250 trees (~0.35 ms for 30 rows, ~15 ms for 2400; LightGBM's C++ ~0.40 and
~17-19 ms), measured with ``GEMM_PREDICTOR_TREE_WALK=numpy`` at the same commit. "now": the compiled walker
(``predictor/artifacts/tree_walk.c``, ``predictor.artifacts.compiled_walk``: ~0.06 ms and ~1.3 ms), built once per machine with the
system C compiler (~0.45 s in a background thread at the first GEMM, numpy scoring meanwhile; cached on disk) and
loaded with ctypes; without a working compiler the hook runs at the "before" figures. This script waits for the
build before timing. What is left of a first sight is mostly outside the model: features (~0.18 ms for 30 rows,
~0.6 ms for 2400) and mapping Inductor's choices to candidates plus the policy (the ``cached`` column: ~1.6 ms of
its ~2.4 ms for 2400 is ``candidates_from_choices``, reading 2400 ``to_kwargs()`` dicts in Python).
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np


PROBLEMS = [("mm", 333, 1111, 2222, "float16"), ("mm", 4096, 4096, 4096, "bfloat16"), ("mm", 512, 768, 3072, "float16"),
            ("mm", 32, 28672, 4096, "bfloat16"), ("mm", 2048, 16384, 3000, "bfloat16")]


def _inputs(m: int, n: int, k: int, dtype):
    from predictor.testing.fakes import mm_inputs

    return mm_inputs(m, n, k, dtype)


def _choices(problem, space: str, device) -> list:
    from predictor.core.candidate import to_template_kwargs
    from predictor.spaces import enumerate_space

    out = []
    for c in enumerate_space(problem, space, device, tma=True):
        uid, kw = to_template_kwargs(c)
        out.append(SimpleNamespace(template=SimpleNamespace(uid=uid), params=SimpleNamespace(to_kwargs=lambda kw=kw: kw)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/h200-default-lgbm-all")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--top-k", type=int, default=8)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from predictor.artifacts import compiled_walk
    from predictor.core import runtime_features
    from predictor.artifacts.model_folder import read_metadata
    from predictor.core.device import DeviceInfo
    from predictor.core.problem import Problem
    from predictor.runtime.choices.pruner import GemmPruner, HookSettings

    device = DeviceInfo.from_metadata(read_metadata(args.model))
    walker = "compiled" if compiled_walk.library(wait=True) else "numpy"  # (steady state: the compile is once)
    print(f"model {args.model} ({device.gpu}); one CPU thread; {args.repeats} repeats per list; {walker} tree walk")
    print(f"{'space':10s} {'problem':28s} {'choices':>8s} {'kept':>5s} {'first p50':>10s} {'first p99':>10s} "
          f"{'list p50':>9s} {'cached p50':>11s} {'cached p99':>11s}  (ms)")
    for space in ("default", "exhaustive"):
        pruner = GemmPruner(HookSettings(model=args.model, top_k=args.top_k, space=space, device=device)).load()
        for op, m, n, k, dtype in PROBLEMS:
            problem = Problem(op, m, n, k, dtype)
            choices = _choices(problem, space, device)
            inputs = _inputs(m, n, k, getattr(torch, dtype))
            kept = pruner.filter(choices, inputs, op)
            first, new_list, cached = [], [], []
            for _ in range(args.repeats):
                pruner._scores.clear()  # a problem never seen: features and model scoring run
                start = time.perf_counter()
                pruner.filter(choices, inputs, op)
                first.append((time.perf_counter() - start) * 1e3)
                pruner._scores.clear()
                runtime_features._LISTS.clear()  # nor its list of configs
                start = time.perf_counter()
                pruner.filter(choices, inputs, op)
                new_list.append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                pruner.filter(choices, inputs, op)
                cached.append((time.perf_counter() - start) * 1e3)
            figures = [*np.percentile(first, [50, 99]), np.median(new_list), *np.percentile(cached, [50, 99])]
            print(f"{space:10s} {f'{op} {m}x{n}x{k} {dtype}':28s} {len(choices):8d} {len(kept):5d} "
                  + "{:10.3f} {:10.3f} {:9.3f} {:11.3f} {:11.3f}".format(*figures))


if __name__ == "__main__":
    main()
