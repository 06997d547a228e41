"""What Inductor's Triton codegen writes for a function, on a machine without a GPU: compiled for CPU tensors with
``cpu_backend="triton"``, each kernel's tiling and source and the graph's wrapper code are kept as written; the
compile then fails where Triton would build the kernels (no CPU backend), which is caught here.

Used by tests that check what a dynamic graph's kernels look like (tilings, stores, how extern ops get their inputs)
where only a GPU could run them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class Written:
    kernels: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (tiling without reductions, source)
    wrappers: list[str] = field(default_factory=list)

    def stores(self) -> list[int]:
        """``tl.store`` calls per kernel, in the order written."""
        return [source.count("tl.store(") for _, source in self.kernels]


def written(fn: Callable[..., Any], *inputs: Any, dynamic_dim: int | None = 0,
            during: contextlib.AbstractContextManager[Any] | None = None) -> Written:
    """Compile ``fn`` for ``inputs`` (the first input's ``dynamic_dim`` marked dynamic; None: static) under
    ``during`` and return what Inductor wrote."""
    import torch.utils._triton as triton_utils
    from torch._inductor import config
    from torch._inductor.codegen.triton import TritonKernel
    from torch._inductor.graph import GraphLowering

    from predictor.runtime.lowerings.tables import wrapped_attribute

    out = Written()

    def record(codegen: Callable[..., Any]) -> Callable[..., Any]:
        def codegen_kernel(self: Any, *args: Any, **kwargs: Any) -> Any:
            source = codegen(self, *args, **kwargs)
            out.kernels.append(({k: v for k, v in self.numels.items() if not k.startswith("r")}, str(source)))
            return source
        return codegen_kernel

    torch._dynamo.reset()
    if dynamic_dim is not None:
        torch._dynamo.mark_dynamic(inputs[0], dynamic_dim)
    hash_with_backend = triton_utils.triton_hash_with_backend
    saved_output_code = GraphLowering.save_output_code
    triton_utils.triton_hash_with_backend = lambda: "cpu"  # no Triton backend to hash on a CPU
    GraphLowering.save_output_code = out.wrappers.append
    try:
        with (config.patch({"cpu_backend": "triton", "fx_graph_cache": False, "compile_threads": 1}),
              wrapped_attribute(TritonKernel, "codegen_kernel", record, "test_record_kernels"),
              during or contextlib.nullcontext(), torch.no_grad()):
            try:
                torch.compile(fn)(*inputs)
            except Exception:  # noqa: BLE001 - the code is written; a CPU has no Triton backend to build it
                pass
    finally:
        triton_utils.triton_hash_with_backend = hash_with_backend
        GraphLowering.save_output_code = saved_output_code
        torch._dynamo.reset()
    return out
