"""The kernel census of a step: its GPU kernels grouped (vendor GEMM, Triton template, other Triton, other), with
counts, GPU-time shares, the longest kernels and each Inductor Triton kernel's launch config."""

from __future__ import annotations

from typing import Any, Callable

from .harness import one_line


# Kernel groups, checked in order (first match wins). Inductor names every Triton kernel triton_<kind>_...; of
# the rest, attention and convolution kernels go to "other" before the GEMM patterns, since flash /
# memory-efficient attention and cuDNN convs carry "cutlass" / "xmma" / "gemm" in their names.
KERNEL_GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("triton_template", ("triton_tem_",)),
    ("triton", ("triton_",)),
    ("other", ("flash", "fmha", "attention", "sdpa", "conv", "fprop", "dgrad", "wgrad", "memcpy", "memset")),
    ("vendor_gemm", ("gemm", "gemv", "cublas", "cutlass", "nvjet", "xmma", "splitkreduce")),
]


def classify_kernel(name: str) -> str:
    """vendor_gemm (cuBLAS/cuBLASLt/CUTLASS), triton_template, triton (poi/red/per/...), or other."""
    low = name.lower()
    for group, needles in KERNEL_GROUPS:
        if any(n in low for n in needles):
            return group
    return "other"


# kernels kept by name in a census: enough to tell two modes' steps apart kernel by kernel
BY_NAME_KEPT = 80


def census(kernels: list[tuple[str, float]]) -> dict[str, Any]:
    """Counts and GPU-time shares per group of (kernel name, us) pairs, the 5 longest kernels, and launches and
    time per kernel name (``by_name``, the ``BY_NAME_KEPT`` longest in total: which kernels differ between modes)."""
    total = sum(us for _, us in kernels) or 1.0
    groups = {g: {"count": 0, "us": 0.0, "share": 0.0} for g in ("vendor_gemm", "triton_template", "triton",
                                                                  "other")}
    for name, us in kernels:
        g = groups[classify_kernel(name)]
        g["count"] += 1
        g["us"] += us
    for g in groups.values():
        g["share"] = g["us"] / total
    top = sorted(kernels, key=lambda k: -k[1])[:5]
    by_name: dict[str, list[float]] = {}
    for name, us in kernels:
        entry = by_name.setdefault(name[:120], [0, 0.0])
        entry[0] += 1
        entry[1] += us
    named = sorted(by_name.items(), key=lambda item: -item[1][1])[:BY_NAME_KEPT]
    return {"kernels": len(kernels), "total_us": sum(us for _, us in kernels), "groups": groups,
            "top": [[n[:120], round(us, 2)] for n, us in top],
            "by_name": [[name, count, round(us, 2)] for name, (count, us) in named]}


def triton_kernel_configs() -> dict[str, str]:
    """The launch config of every Triton kernel Inductor has loaded in this process, by kernel name
    (``XBLOCK=8 R0_BLOCK=256 warps=4 stages=1``), where autotuning has left one launcher: which blocks each mode's
    kernels ran with, beside their times in the census."""
    from torch._inductor.codecache import PyCodeCache

    found = {}
    for module in [*PyCodeCache.modules, *PyCodeCache.modules_no_attr.values()]:
        for name, kernel in list(vars(module).items()):
            launchers = getattr(kernel, "launchers", None)
            if name.startswith("triton_") and isinstance(launchers, list) and len(launchers) == 1:
                config = launchers[0].config
                found[name] = " ".join([*(f"{k}={v}" for k, v in config.kwargs.items()),
                                        f"warps={config.num_warps}", f"stages={config.num_stages}"])
    return found


def profile_census(step: Callable[[], Any]) -> dict[str, Any]:
    """The census of one step's GPU kernels under torch.profiler (CUDA activity only), with the launch config of
    each Inductor Triton kernel among them (``blocks``)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA]
    result = census(kernels)
    try:
        configs = triton_kernel_configs()
        result["blocks"] = {name: configs[name] for name in sorted({n for n, _ in kernels}) if name in configs}
    except Exception as exc:  # noqa: BLE001 - Inductor internals may move; the census stands without blocks
        result["blocks"] = {"error": one_line(exc)}
    if not kernels:
        result["note"] = "the profiler saw no kernels (graph replays may hide them)"
    return result


