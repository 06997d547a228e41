"""Where a mode is slower than the best stock mode, in GPU time per step by kernel group (the zoo report's table).

Why: a step-time ratio alone cannot tell a loss in the GEMMs the product chooses from one in the pointwise and
reduction kernels Inductor generates around them, or from run-to-run noise (the kernels then take the same time).
"""

from __future__ import annotations

from typing import Any


def gpu_time_gaps(by_key: dict[tuple[str, str], dict[str, Any]], summary: dict[str, Any], mode: str = "hook",
                  below: float = 1.0) -> list[dict[str, Any]]:
    """Where ``mode`` is slower than the best stock mode timed alike (speed under ``below``): the kernel census's GPU
    time per step of both, by group, ``mode`` minus best (us; GEMMs = cuBLAS/CUTLASS and Triton templates,
    pointwise/reduction = Inductor's other Triton kernels, other = attention, convolutions, copies). Tells a loss in
    GEMMs (the product's choice) from one in the kernels around them. Slowest first; one run's census each.
    ``by_key``: (model, mode) -> pooled record (``report.pooled_records``); ``summary``: ``report.summarize``'s."""
    gaps = []
    for model, runs in summary["models"].items():
        speed, best = runs.get(mode, {}).get("speed_vs_best"), summary["best"][model].get("step_mode")
        if speed is None or speed >= below or best is None:
            continue
        replayed = [_usable(by_key[(model, m)].get("census_replay")) for m in (mode, best)]
        ours, theirs = replayed if all(replayed) else [_usable(by_key[(model, m)].get("census")) for m in (mode, best)]
        if not (ours and theirs):
            continue

        def us(census: dict[str, Any], *groups: str) -> float:
            return sum(census["groups"].get(g, {}).get("us", 0.0) for g in groups)
        # a direct call's census of a mode with trees holds their input copy; a replay's and a training step's
        # (its foreach AdamW is no copy) are taken as they are
        inference = by_key[(model, mode)].get("kind") != "train" and not all(replayed)
        copy_ours, copy_theirs = (trees_input_copy_us(ours), trees_input_copy_us(theirs)) if inference else (0.0, 0.0)
        gemms = ("vendor_gemm", "triton_template")
        gaps.append({"model": model, "best": best, "speed_vs_best": speed,
                     "gemm_us": us(ours, *gemms) - us(theirs, *gemms),
                     "pointwise_us": us(ours, "triton") - us(theirs, "triton"),
                     "other_us": us(ours, "other") - copy_ours - us(theirs, "other") + copy_theirs,
                     "total_us": ours.get("total_us", 0.0) - copy_ours - theirs.get("total_us", 0.0) + copy_theirs,
                     "best_total_us": theirs.get("total_us", 0.0) - copy_theirs,
                     # a mode with trees always copies its inputs: none found means a census without the names
                     # (older records) or with the copy beyond the longest kernels it keeps
                     "copy_unknown": inference and bool(by_key[(model, mode)].get("cudagraphs")) and not copy_ours})
    return sorted(gaps, key=lambda g: g["speed_vs_best"])


def _usable(census: Any) -> dict[str, Any] | None:
    """A census with kernel groups (not an error, not an empty profile), else None."""
    return census if isinstance(census, dict) and "groups" in census and census.get("kernels", 1) else None


def trees_input_copy_us(census: dict[str, Any]) -> float:
    """GPU time of the CUDA-graph trees' copy of the inputs into their memory (one ``multi_tensor_apply`` kernel,
    from ``by_name``; 0 without it) in an inference census. The census profiles a direct call, which runs the trees
    of a mode that has them; its replayed step, which the comparison times, runs no such copy."""
    return sum(us for name, _, us in census.get("by_name", []) if "multi_tensor_apply" in name)


def gpu_time_gaps_section(by_key: dict[tuple[str, str], dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    """results.md's table of ``gpu_time_gaps`` for ``hook`` (nothing when it is never slower)."""
    gaps = gpu_time_gaps(by_key, summary)
    if not gaps:
        return []
    lines = ["", "## Where `hook` is slower than the best stock mode: GPU time per step by kernel group", "",
             "The kernel census of one run of each (us per step, `hook` minus the best stock mode; + is `hook` "
             "slower): GEMMs are cuBLAS/CUTLASS and Triton templates (the product's choice); pointwise/reduction "
             "are Inductor's other Triton kernels (fused around the GEMMs); other is attention, convolutions, "
             "copies. The census of the replayed step where both runs have one; otherwise of a direct call, with "
             "the CUDA-graph trees' copy of the inputs it then includes (`multi_tensor_apply`) left out, as the "
             "replayed step runs none (* : a census without kernel names, where it could not be).", "",
             "| model | best stock | `hook` vs best | GEMMs | pointwise/reduction | other | total (of the best's) |",
             "|---|---|---|---|---|---|---|"]
    for g in gaps:
        star = "*" if g["copy_unknown"] else ""
        lines.append(f"| {g['model']}{star} | {g['best']} | {g['speed_vs_best']:.3f} | {g['gemm_us']:+.0f} | "
                     f"{g['pointwise_us']:+.0f} | {g['other_us']:+.0f} | {g['total_us']:+.0f} "
                     f"({g['best_total_us']:.0f}) |")
    return lines
