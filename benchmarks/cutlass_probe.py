"""Can Inductor's CUTLASS backend run on this GPU? (GPU; prints every step's outcome.)

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d wheels nvidia-cutlass==4.2.0.0
    python -m benchmarks.cutlass_probe wheels/nvidia_cutlass-4.2.0.0-py3-none-any.whl

Builds the CUTLASS root Inductor expects (``python/{cutlass_library,cutlass_cppgen,pycute}``, ``include``,
``tools``) from the nvidia-cutlass wheel (which ships the headers under ``cutlass_library/source``), points
``TORCHINDUCTOR_CUTLASS_DIR`` at it, and compiles one fp16 mm and one ``_int_mm`` (1024^3) under max-autotune
with backends ATEN,CUTLASS and ``cutlass_max_profiling_configs=2``. Results: docs/CUTLASS.md."""
import os, sys, time, traceback

from collectors.cutlass_env import prepare_cutlass_root

prepare_cutlass_root(sys.argv[1])
import torch
from torch._inductor import config
print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
os.system("nvcc --version | tail -2")
from torch._inductor.codegen.cutlass.utils import try_import_cutlass
print("try_import_cutlass:", try_import_cutlass(), flush=True)
from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers
for name, dtype, fn in (("fp16 mm 1024x1024x1024", torch.float16, lambda a, b: a @ b),
                        ("int8 _int_mm 1024x1024x1024", torch.int8, torch._int_mm)):
    seen = []
    clear_feedback_savers()
    add_feedback_saver(lambda timings, n, inputs, choices, *r: seen.extend((c.name if hasattr(c, "name") else str(c), round(t, 4)) for c, t in timings.items()))
    if dtype == torch.int8:
        a = torch.randint(-8, 8, (1024, 1024), device="cuda", dtype=dtype); b = torch.randint(-8, 8, (1024, 1024), device="cuda", dtype=dtype)
    else:
        a = torch.randn(1024, 1024, device="cuda", dtype=dtype); b = torch.randn(1024, 1024, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    t = time.time()
    try:
        with config.patch({"max_autotune_gemm_backends": "ATEN,CUTLASS", "cutlass.cutlass_max_profiling_configs": 2,
                           "force_disable_caches": True}):
            out = torch.compile(fn, mode="max-autotune-no-cudagraphs")(a, b)
        torch.cuda.synchronize()
        ref = fn(a, b)
        print(name, "compiled in", round(time.time() - t, 1), "s; max err", (out.float() - ref.float()).abs().max().item(), flush=True)
        print("  timed choices:", seen, flush=True)
    except Exception:
        print(name, "FAILED after", round(time.time() - t, 1), "s", flush=True)
        traceback.print_exc(limit=6)
