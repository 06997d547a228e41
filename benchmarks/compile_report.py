"""``compile_bench``'s tables and plot: per (GEMM, mode) compile time and kernel speed against full max-autotune and
plain ``torch.compile``, the geomean per mode, and a PNG of speed against compile time.

    python -m benchmarks.compile_bench --replot OUT/results.json   # rewrites results.md and the PNG, no GPU
"""

from __future__ import annotations

from pathlib import Path


def write_outputs(results: dict, gemms: list[dict], modes: list[str], out: Path, device: str) -> str:
    import numpy as np

    lines = [f"GPU: {device}", "", "| gemm | mode | compile s | warm us | cold us (block: eager us) | choices timed | speed vs full (warm) | speed vs plain (warm) |",
             "|---|---|---|---|---|---|---|---|"]
    summary = {}
    for mode in modes:
        ratios_full, ratios_plain, comp = [], [], []
        for g in gemms:
            key = g["problem_id"]
            r, full, plain = results.get(f"{key}|{mode}"), results.get(f"{key}|full"), results.get(f"{key}|plain")
            if not r:
                continue
            vs_full = full["warm_us"] / r["warm_us"] if full else float("nan")
            vs_plain = plain["warm_us"] / r["warm_us"] if plain else float("nan")
            ratios_full.append(vs_full)
            ratios_plain.append(vs_plain)
            comp.append(r["compile_s"])
            lines.append(f"| {g['op']} {g['m']}x{g['n']}x{g['k']} {g['dtype']} {g['layout_a']}/{g['layout_b']} | {mode} | "
                         f"{r['compile_s']:.1f} | {r['warm_us']:.1f} | {r.get('eager_us', r['cold_us']):.1f} | {r['benchmarked']} | "
                         f"{vs_full:.3f} | {vs_plain:.3f} |")
        if comp:
            def gm(xs: list[float]) -> float:  # geomean of the ratios measured; nan where none was (no reference mode)
                finite = [x for x in xs if np.isfinite(x)]
                return float(np.exp(np.mean(np.log(finite)))) if finite else float("nan")

            summary[mode] = {"gemms": len(comp), "compile_s_total": sum(comp), "geomean_speed_vs_full": gm(ratios_full),
                             "geomean_speed_vs_plain": gm(ratios_plain)}
    lines += ["", "| mode | gemms | total compile s | geomean speed vs full max-autotune | geomean speed vs plain |",
              "|---|---|---|---|---|"]
    for mode, s in summary.items():
        lines.append(f"| {mode} | {s['gemms']} | {s['compile_s_total']:.1f} | {s['geomean_speed_vs_full']:.3f} | "
                     f"{s['geomean_speed_vs_plain']:.3f} |")
    text = "\n".join(lines)
    (out / "results.md").write_text(text + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        # speed relative to full max-autotune when it ran, else to plain torch.compile (e.g. the CUTLASS table)
        ref = "full" if "full" in summary else "plain"
        fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=120)
        for i, (mode, s) in enumerate(summary.items()):
            ax.scatter(s["compile_s_total"], s[f"geomean_speed_vs_{ref}"], s=60, label=mode, zorder=3)
            ax.annotate(mode, (s["compile_s_total"], s[f"geomean_speed_vs_{ref}"]), textcoords="offset points",
                        xytext=(6, 8 if i % 2 else -14))
        ax.set_xscale("log")  # compile times span 0.1 s (one candidate) to minutes (full autotune)
        ax.set_xlabel("total compile (autotune) wall time over the GEMMs, s (log)")
        ax.set_ylabel("geomean kernel speed vs " + ("full max-autotune" if ref == "full" else "plain torch.compile"))
        ax.set_title(f"speed vs compile time, {len(gemms)} GEMMs\n{device}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
        fig.savefig(out / "speed_vs_compile.png")
    except Exception as exc:  # a plot failure must not lose the measurements
        print(f"plot failed: {exc}")
    return text
