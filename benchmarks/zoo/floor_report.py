"""The memory floor and the census per layer of a decoder at its real depth (records with ``floor_ms``).

Share of floor = floor / step: 1.0 reads every weight once at the copy bandwidth and does nothing else. Per layer
= the step's kernels (the replayed step's census where there is one) over the decoder's layers, so the kernels
between the GEMVs (norms, rotary, attention, residual adds) show per kernel class."""

from __future__ import annotations

from typing import Any

GROUPS = (("vendor_gemm", "gemm"), ("triton_template", "tem"), ("triton", "triton"), ("other", "other"))


def _census(record: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("census_replay", "census"):
        census = record.get(key)
        if isinstance(census, dict) and "groups" in census:
            return census
    return None


def floor_lines(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Markdown lines for one model's (mode, record) pairs; none when no record has a floor."""
    floored = [r for _, r in runs if r.get("floor_ms")]
    if not floored:
        return []
    first = floored[0]
    layers = first.get("layers") or 1
    lines = ["", f"Memory floor: {first['floor_ms']:.3f} ms ({first['weights_read_bytes'] / 1e9:.2f} GB of weights "
             f"per step at the {first['copy_gbps'] / 1e3:.2f} TB/s a device-to-device copy reached in the same run); "
             f"{layers} layers.", "",
             "| mode | step ms | share of floor | kernels / layer | " +
             " | ".join(f"{label} us / layer (count)" for _, label in GROUPS) + " |",
             "|---|---|---|---|" + "---|" * len(GROUPS)]
    for mode, r in runs:
        census, step = _census(r), r.get("step_ms")
        if census is None or not step:
            continue
        cells = [f"{census['groups'][g]['us'] / layers:.1f} ({census['groups'][g]['count'] / layers:.1f})"
                 for g, _ in GROUPS]
        lines.append(f"| `{mode}` | {step:.3f} | {(r.get('floor_ms') or first['floor_ms']) / step:.0%} | "
                     f"{census['kernels'] / layers:.1f} | " + " | ".join(cells) + " |")
    return lines
