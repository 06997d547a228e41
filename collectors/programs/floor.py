"""The memory floor of a decode step: every weight is read once per step, so no kernel choice runs it faster than
the bytes of its weights over the GPU's memory bandwidth.

The bandwidth is what a device-to-device copy reaches in the same process (read and write counted: 2 x bytes / time,
the median of several copies of a 1 GiB buffer), so the floor and the step it bounds are measured on the same GPU
under the same clocks. The bytes are the unique parameters' (a tied head and embedding count once: the head reads
the matrix whole); an untied input embedding counts as the rows a step looks up, not the table.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

COPY_BYTES = 1 << 30
COPY_REPEATS = 20


def weights_read_bytes(module: nn.Module, tokens: int = 1) -> int:
    """Bytes of weights one forward of ``tokens`` tokens must read: every unique parameter once, an untied input
    embedding table as ``tokens`` of its rows."""
    embedding = None
    for sub in module.modules():  # a transformers model inside the zoo's wrapper
        if hasattr(sub, "get_input_embeddings") and callable(sub.get_input_embeddings):
            found = sub.get_input_embeddings()
            embedding = getattr(found, "weight", None)
            head = sub.get_output_embeddings() if hasattr(sub, "get_output_embeddings") else None
            if head is not None and getattr(head, "weight", None) is embedding:
                embedding = None  # tied: the head reads the whole matrix every step
            break
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        size = p.numel() * p.element_size()
        if embedding is not None and p is embedding:
            size = min(size, tokens * p.shape[-1] * p.element_size())
        total += size
    return total


def copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> float:
    """Bytes per second a device-to-device copy moves (read + write), median of ``repeats`` copies."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / sorted(times)[len(times) // 2]


def floor_record(module: nn.Module, device: torch.device, tokens: int = 1) -> dict[str, Any]:
    """``weights_read_bytes``, ``copy_gbps`` and ``floor_ms`` (bytes / bandwidth) for one step of ``module``."""
    nbytes = weights_read_bytes(module, tokens)
    bandwidth = copy_bandwidth(device)
    return {"weights_read_bytes": nbytes, "copy_gbps": round(bandwidth / 1e9, 1),
            "floor_ms": 1e3 * nbytes / bandwidth}
