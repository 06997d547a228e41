"""A program's multi-kernel hint list (``suggest_hints``): the union of its dynamic-M GEMMs' predicted hint buckets
(``runtime.choices.hint_buckets``, where the choice of one GEMM's hints is made and explained)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core.device import DeviceInfo
from ...core.problem import Problem
from ..choices.hint_buckets import FIXED_HINTS, HINT_GRID, MAX_HINTS, MIN_GAIN, choose_hints, runtime_sizes

__all__ = ["FIXED_HINTS", "HINT_GRID", "MAX_HINTS", "MIN_GAIN", "suggest_hints"]


def suggest_hints(gemms: Sequence[Problem], model: str | None = None, device: DeviceInfo | None = None,
                  grid: Sequence[int] = HINT_GRID, runtime: tuple[int, int] = (1, 16384),
                  max_hints: int = MAX_HINTS, min_gain: float = MIN_GAIN, load: Any = None,
                  allow_similar_gpu: bool = True) -> list[int]:
    """``config.multi_kernel_hints`` for a program whose dynamic-M GEMMs are ``gemms`` (their M is ignored):
    the union of each GEMM's predicted hints over ``runtime``.

    Inductor compiles one kernel per hint in that global list for every dynamic GEMM, so this, not the
    choice filter, is what cuts the kernels compiled. Each hint's kernel is the model's favourite among
    Inductor's own candidates at M = hint (``predictor.spaces``). ``model``: a model folder (default: the
    shipped one for ``device``, itself defaulting to this GPU). ``load``: how the folder is read (default
    ``model_check.load_text_model``, a LightGBM model as the hook scores it; ``model_folder.load_runtime_model``
    also takes the other rankers). ``allow_similar_gpu``: without a model for ``device``, one made for another GPU
    of its architecture (False: none, and an error naming the GPU)."""
    from dataclasses import replace

    import pandas as pd

    from ...artifacts.model_check import load_text_model
    from ...spaces.enumeration import enumerate_space
    from ..choices.discovery import _this_gpu, find_model

    device = device or _this_gpu()
    if device is None:
        raise RuntimeError("suggest_hints needs the GPU to rank for: no CUDA device, pass device=")
    folder = model or find_model(device, allow_similar=allow_similar_gpu)
    if folder is None:
        raise FileNotFoundError(f"no model for {device.gpu} (cc {device.cc}); pass model=")
    ranker, meta = (load or load_text_model)(Path(folder), None)
    rank_device = DeviceInfo.from_metadata(meta)
    sizes = runtime_sizes(*runtime)
    chosen: set[int] = set()
    for gemm in gemms:
        kernel_at = {}
        for h in grid:
            at_h = replace(gemm, m=int(h))
            # the hint's kernel is a Triton template (multi-kernel never dispatches to cuBLAS)
            cands = [c for c in enumerate_space(at_h, meta.get("space", "default"), device) if c.family != "aten"]
            records = [{**at_h.to_dict(), **c.to_dict()} for c in cands]
            scores = ranker.score(pd.DataFrame(records), rank_device)
            kernel_at[h] = cands[int(np.argmax(scores))]
        chosen.update(choose_hints(ranker, rank_device, gemm, kernel_at, sizes, max_hints, min_gain))
    return sorted(chosen)
