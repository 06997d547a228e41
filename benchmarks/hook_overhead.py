"""What the hook adds to a compile: the filter's wall time per GEMM, for the default and the exhaustive lists.

    python -m benchmarks.hook_overhead [--model models/h200-default-lgbm-all] [--repeats 50]

Builds Inductor-like KernelTemplateChoice stand-ins (template uid + params.to_kwargs(), exactly what the
hook reads) for the candidate lists Inductor 2.11 produces (``predictor.spaces``), then times
``GemmPruner.filter`` with the shipped model: mapping every choice to a Candidate, reading the problem,
features, LightGBM scoring, selection. One CPU thread. Two figures per list: ``first`` is a problem's first
sight (the pruner's score cache emptied before every call: features and the model run), ``cached`` a repeat of
a problem already scored (a model's repeated layers). Targets (issue 18): first sight p50 <= 0.5 ms for ~25
choices and <= 5 ms for ~2400.
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
    from predictor.candidate import to_template_kwargs
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
    from predictor.artifacts import read_metadata
    from predictor.device import DeviceInfo
    from predictor.problem import Problem
    from predictor.runtime.hook import GemmPruner, HookSettings

    device = DeviceInfo.from_metadata(read_metadata(args.model))
    print(f"model {args.model} ({device.gpu}); one CPU thread; {args.repeats} repeats per list")
    print(f"{'space':10s} {'problem':28s} {'choices':>8s} {'kept':>5s} {'first p50':>10s} {'first p99':>10s} "
          f"{'cached p50':>11s} {'cached p99':>11s}  (ms)")
    for space in ("default", "exhaustive"):
        pruner = GemmPruner(HookSettings(model=args.model, top_k=args.top_k, space=space, device=device)).load()
        for op, m, n, k, dtype in PROBLEMS:
            problem = Problem(op, m, n, k, dtype)
            choices = _choices(problem, space, device)
            inputs = _inputs(m, n, k, getattr(torch, dtype))
            kept = pruner.filter(choices, inputs, op)
            first, cached = [], []
            for _ in range(args.repeats):
                pruner._scores.clear()  # a problem never seen: features and model scoring run
                start = time.perf_counter()
                pruner.filter(choices, inputs, op)
                first.append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                pruner.filter(choices, inputs, op)
                cached.append((time.perf_counter() - start) * 1e3)
            figures = [*np.percentile(first, [50, 99]), *np.percentile(cached, [50, 99])]
            print(f"{space:10s} {f'{op} {m}x{n}x{k} {dtype}':28s} {len(choices):8d} {len(kept):5d} "
                  + "{:10.3f} {:10.3f} {:11.3f} {:11.3f}".format(*figures))


if __name__ == "__main__":
    main()
