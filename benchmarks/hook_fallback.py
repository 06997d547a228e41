"""On the GPU: max-autotune compiles with the hook given a broken model file and a model made for another GPU.
Both must compile, match eager, and warn once; prints one line per case.

    python -m benchmarks.hook_fallback
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import logging
from pathlib import Path


SHIPPED = Path(__file__).resolve().parents[1] / "models" / "h200-default-lgbm-all"


def broken_copy(root: Path) -> Path:
    folder = root / "broken"
    shutil.copytree(SHIPPED, folder)
    model_file = next(p for p in folder.iterdir() if p.name.startswith("model."))
    model_file.write_bytes(model_file.read_bytes()[: 200] + b"\x00garbage")
    return folder


def foreign_copy(root: Path) -> Path:
    folder = root / "foreign"
    shutil.copytree(SHIPPED, folder)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["device"].update(gpu="NVIDIA A100-SXM4-80GB", cc="8.0", sm_count=108)
    (folder / "metadata.json").write_text(json.dumps(meta, indent=1))
    return folder


def main() -> None:
    import torch
    from torch._inductor import config

    import predictor

    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    root = Path(tempfile.mkdtemp())
    a = torch.randn(1000, 1536, device="cuda", dtype=torch.float16)
    b = torch.randn(1536, 2048, device="cuda", dtype=torch.float16)
    failures = 0
    for name, folder in (("broken model file", broken_copy(root)), ("model for another GPU", foreign_copy(root))):
        torch._dynamo.reset()
        caught: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: caught.append(record.getMessage())
        handler.setLevel(logging.WARNING)
        logging.getLogger("predictor.runtime.choices.pruner").addHandler(handler)
        with config.patch({"force_disable_caches": True}):
            try:
                with predictor.pruning(model=folder, top_k=5):
                    out = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")(a, b)
                    stats = predictor.stats()
                err = float((out.float() - (a.float() @ b.float())).norm() / (a.float() @ b.float()).norm())
                ours = caught
                ok = err < 1e-2 and len(ours) == 1 and stats["pruned"] == 0
                failures += not ok
                print(f"{name}: compiled, rel err {err:.1e}, pruned {stats['pruned']}, warnings {len(ours)}: "
                      f"{ours[0][:160] if ours else '-'} -> {'OK' if ok else 'FAIL'}")
            except Exception as exc:  # the point: this must not happen
                failures += 1
                print(f"{name}: COMPILE FAILED: {type(exc).__name__}: {exc}")
        logging.getLogger("predictor.runtime.choices.pruner").removeHandler(handler)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
