"""Shared by the GPU case benchmarks (``patchify_bench``, ``pad_k_bench``): time compiled functions of one input by
CUDA-graph replay, and run a list of cases into ``results.json`` with the GPU and versions, one failure at a time."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def time_compiled(compiled: dict[str, Callable[[Any], Any]], x: Any, reference: Any, rep: int) -> dict[str, float]:
    """Per ``<name>_us`` key of ``compiled``: its median time in us (``do_bench_cudagraph``) and, as
    ``<name>_max_err``, its largest absolute difference from ``reference`` (float32). Afterwards, also on an error,
    no gemm-predictor hook stays installed and Dynamo is reset, so the next case compiles from scratch."""
    import torch
    import triton.testing

    import predictor
    from predictor.runtime.choices import installed

    record: dict[str, float] = {}
    try:
        with torch.no_grad():
            for key, fn in compiled.items():
                out = fn(x)
                record[key.replace("_us", "_max_err")] = float((out.float() - reference).abs().max())
                record[key] = 1000.0 * triton.testing.do_bench_cudagraph(lambda: fn(x), rep=rep,
                                                                          return_mode="median")
    finally:
        while installed._STACK:
            predictor.uninstall()
        torch._dynamo.reset()
    return record


def run_cases(out: Path, cases: Iterable[tuple[str, Callable[[], dict[str, Any]]]],
              extra_meta: dict[str, Any] | None = None) -> None:
    """Run each ``(name, time_case)``; a case that raises is recorded with its error and the rest still run.
    ``out/results.json`` is rewritten after every case (records plus GPU and versions); each record is printed."""
    import torch
    import triton

    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), **(extra_meta or {})}
    records: list[dict[str, Any]] = []
    for name, time_case in cases:
        try:
            record = time_case()
        except Exception as error:  # noqa: BLE001 -- one failing case is recorded, the rest still run
            record = {"case": name, "error": f"{type(error).__name__}: {error}"[:500]}
        records.append(record)
        path.write_text(json.dumps({**meta, "records": records}, indent=1))
        print(" | ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()),
              flush=True)
