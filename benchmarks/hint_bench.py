"""End to end (GPU): a dynamic-M GEMM compiled with multi-kernel hints, fixed list vs predicted, timed across M.

    python -m benchmarks.hint_bench --out docs/benchmarks/h200-hints

For each GEMM family (N, K, dtype, B layout) the function ``a @ b`` is compiled once with M dynamic
(``torch._dynamo.mark_dynamic``), under max-autotune, in each mode:
  single     no multi-kernel hints (one kernel, autotuned at the first call's M)
  fixed      ``config.multi_kernel_hints = [64, 256, 4096]``
  predicted  ``config.multi_kernel_hints = predictor.runtime.dynamic.hints.suggest_hints([family])``
  plain      plain torch.compile (cuBLAS), the reference
then timed at runtime sizes across [1, 16384] under a CUDA graph (warm L2). Records compile seconds, the number
of kernels each mode compiles for the GEMM (one per hint, plus the unhinted one) and the choices Inductor
benchmarked. Writes results.json (resumable), results.md and hints_bench.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


FAMILIES = [  # (N, K, dtype, layout of B): LLM projections and the M-sweeps of the dataset
    (4096, 4096, "bfloat16", "col"), (3072, 768, "float16", "row"), (896, 4864, "bfloat16", "col"),
    (14336, 4096, "bfloat16", "col"), (4096, 4096, "int8", "row"),
]
RUNTIME_M = [1, 4, 16, 64, 200, 256, 1000, 1024, 4096, 5000, 16384]
MODES = ("plain", "single", "fixed", "predicted")
FIXED = [64, 256, 4096]


def family_name(fam) -> str:
    n, k, dtype, lb = fam
    return f"N{n} K{k} {dtype} B:{lb}"


def hints_for(mode: str, fam) -> list[int]:
    if mode in ("plain", "single"):
        return []
    if mode == "fixed":
        return list(FIXED)
    from predictor.core.problem import Problem
    from predictor.runtime.dynamic.hints import suggest_hints

    n, k, dtype, lb = fam
    return suggest_hints([Problem("int_mm" if dtype == "int8" else "mm", 1, n, k, dtype, layout_b=lb)])


def run_mode(fam, mode: str, compile_m: int) -> dict:
    import torch
    from torch._inductor import config as icfg
    from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers

    from benchmarks.compile_bench import time_compiled

    n, k, dtype, lb = fam
    dt = getattr(torch, dtype)
    int8 = dtype == "int8"

    def operand(rows, cols, transposed=False):
        shape = (cols, rows) if transposed else (rows, cols)
        t = torch.randint(-8, 8, shape, device="cuda", dtype=dt) if int8 else torch.randn(shape, device="cuda", dtype=dt)
        return t.t() if transposed else t

    b = operand(k, n, transposed=lb == "col")
    fn = torch._int_mm if int8 else (lambda x, y: x @ y)
    hints = hints_for(mode, fam)
    benchmarked: list[int] = []
    clear_feedback_savers()
    add_feedback_saver(lambda timings, name, inputs, choices, *rest: benchmarked.append(len(choices)))
    torch._dynamo.reset()
    a0 = operand(compile_m, k)
    torch._dynamo.mark_dynamic(a0, 0)
    patches = {"force_disable_caches": True, "multi_kernel_hints": hints}
    try:
        with icfg.patch(patches):
            compiled = torch.compile(fn, mode=None if mode == "plain" else "max-autotune-no-cudagraphs")
            start = time.time()
            compiled(a0, b)
            torch.cuda.synchronize()
            compile_s = time.time() - start
            times, errors = {}, {}
            for m in RUNTIME_M:
                if int8 and m <= 16:  # torch._int_mm (cuBLASLt) needs M > 16
                    continue
                a = operand(m, k)
                out = compiled(a, b)
                ref = (a.float() @ b.float())
                errors[m] = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-12))
                times[m], _ = time_compiled(compiled, (a, b))
    finally:
        clear_feedback_savers()
    return {"hints": hints, "kernels": (len(hints) + 1) if mode != "plain" else 0, "compile_s": compile_s,
            "benchmarked": sum(benchmarked), "warm_us": times, "max_rel_err": max(errors.values())}


def write_outputs(results: dict, out: Path, device: str) -> str:
    """results[family][mode] = run_mode(...) (JSON keys are strings). Table + plot; returns the markdown."""
    import numpy as np

    # JSON turns the runtime sizes into strings: back to ints once, here
    results = {fam: {mode: {**r, "warm_us": {int(m): t for m, t in r["warm_us"].items()}} for mode, r in modes.items()}
               for fam, modes in results.items()}
    lines = [f"GPU: {device}", "",
             "| family | mode | hints | kernels | compile s | geomean vs best mode per M | worst vs best | vs plain (geomean) |",
             "|---|---|---|---|---|---|---|---|"]
    for fam, modes in results.items():
        sizes = sorted({m for r in modes.values() for m in r["warm_us"]})
        best = {m: min(r["warm_us"][m] for r in modes.values()) for m in sizes}
        for mode, r in modes.items():
            frac = np.array([best[m] / r["warm_us"][m] for m in sizes])
            plain = modes.get("plain")
            vs_plain = (float(np.exp(np.mean(np.log([plain["warm_us"][m] / r["warm_us"][m] for m in sizes]))))
                        if plain else float("nan"))
            lines.append(f"| {fam} | {mode} | {r['hints']} | {r['kernels']} | {r['compile_s']:.1f} | "
                         f"{float(np.exp(np.mean(np.log(frac)))):.3f} | {frac.min():.3f} | {vs_plain:.3f} |")
    text = "\n".join(lines)
    (out / "results.md").write_text(text + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(results), figsize=(3.4 * len(results), 3.2), dpi=110, squeeze=False,
                                 sharey=True)
        for ax, (fam, modes) in zip(axes[0], results.items()):
            sizes = sorted({m for r in modes.values() for m in r["warm_us"]})
            best = [min(r["warm_us"][m] for r in modes.values()) for m in sizes]
            for mode, r in modes.items():
                ax.plot(sizes, [b / r["warm_us"][m] for b, m in zip(best, sizes)], "o-", ms=3, label=f"{mode} {r['hints']}")
            ax.set_xscale("log", base=2)
            ax.set_title(fam, fontsize=8)
            ax.set_xlabel("runtime M")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="lower left")
        axes[0][0].set_ylabel("speed vs the best mode at that M")
        fig.suptitle(device, fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "hints_bench.png")
    except Exception as exc:  # a plot failure must not lose the measurements
        print(f"plot failed: {exc}")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/benchmarks/latest-hints")
    ap.add_argument("--compile-m", type=int, default=512, help="M of the first call (Inductor's size hint)")
    ap.add_argument("--families", type=int, default=len(FAMILIES))
    ap.add_argument("--replot", default=None, help="only rewrite results.md + PNG from this results.json")
    args = ap.parse_args()
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        print(write_outputs(saved["results"], Path(args.replot).parent, saved["device"]))
        return

    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res_file = out / "results.json"
    results = json.loads(res_file.read_text())["results"] if res_file.exists() else {}
    device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {__import__('triton').__version__}"
    for fam in FAMILIES[: args.families]:
        name = family_name(fam)
        for mode in MODES:
            if mode in results.get(name, {}):
                continue
            try:
                results.setdefault(name, {})[mode] = run_mode(fam, mode, args.compile_m)
            except Exception as exc:  # a failed compile is a result too
                print(f"{name} {mode}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            r = results[name][mode]
            print(name, mode, json.dumps({k: r[k] for k in ("hints", "kernels", "compile_s", "benchmarked")}), flush=True)
            res_file.write_text(json.dumps({"device": device, "results": results}, indent=1))
    print(write_outputs(results, out, device))


if __name__ == "__main__":
    main()
