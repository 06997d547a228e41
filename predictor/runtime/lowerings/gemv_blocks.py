"""Block sizes for the GEMV reductions, written into the kernels Inductor generates.

A GEMV kernel is a Triton reduction whose every reduction is the sum of a decomposed ``mm``/``addmm`` (one, or two
when Inductor fuses the gate and up projections that read the same input); pointwise work fused ahead of it may
share the kernel. Each such kernel gets the configs the caller's ``choose`` returns for it (``gemv_table``: the
blocks that won on the nearest labelled problems), emitted as Inductor's own ``fixed_config`` heuristic: one config,
compiled once, nothing benchmarked. Any other kernel keeps Inductor's heuristic.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any, Callable

from .gemv_table import MIN_K, Config, GemvKernel, config_name
from .tables import wrapped_attribute

log = logging.getLogger(__name__)


_GEMM_OPS = ("aten.mm.default", "aten.addmm.default")
_SUM = "aten.sum.dim_IntList"


def count_vector_loads(source: str) -> int:
    """How many inputs a generated reduction kernel loads with an index along the reduction only (``r0_1``, no
    ``x0``): what every program reads again, whichever rows it computes. At least 1 (the vector)."""
    found = set()
    for match in re.finditer(r"tl\.load\((in_ptr\d+) \+ \(", source):
        depth, end = 1, match.end()
        while depth and end < len(source):
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        index = source[match.end():end - 1]
        if re.search(r"\br0_\d+\b", index) and not re.search(r"\bx\d+\b", index):
            found.add(match.group(1))
    return max(1, len(found))


_ACTIVATIONS = re.compile(r"\b(?:tl\.sigmoid|(?:libdevice|tl_math|tl)\.(?:exp|exp2|tanh|erf))\(")


def count_activations_ahead(source: str) -> int:
    """Activation calls ahead of the product: in the reduction loop's body (indented deeper than the kernel's top
    level), or in a persistent kernel (no loop) ahead of its first sum. An activation after the reduction, a pair's
    SiLU on its products, is computed once per row and not counted."""
    body = re.split(r"\n    for r0_offset in ", source, maxsplit=1)
    if len(body) < 2:
        return len(_ACTIVATIONS.findall(source.split("tl.sum(", 1)[0])) if "tl.sum(" in source else 0
    loop = re.split(r"\n    (?=\S)", body[1], maxsplit=1)[0]
    return len(_ACTIVATIONS.findall(loop))


def describe(kernel: Any, source: str | None = None) -> GemvKernel | None:
    """The GEMV a ``TritonKernel`` computes, or None when it is anything else (a pointwise kernel, a cooperative
    reduction, a reduction that is not a decomposed GEMM's sum, sizes that are not static). A looped reduction has
    K >= ``MIN_K`` and a persistent one K below it (``persistent``); any other pairing is left to Inductor. With the
    kernel's generated ``source``, its ``vector_loads`` too."""
    if not getattr(kernel, "inside_reduction", False):
        return None
    if getattr(kernel, "cooperative_reduction", False) or set(kernel.numels) != {"x", "r0_"}:
        return None
    try:
        n, k = int(kernel.numels["x"]), int(kernel.numels["r0_"])
    except TypeError:  # a symbolic size
        return None
    sums, dtypes = set(), set()
    for node in kernel.features.scheduler_nodes():
        if not node.is_reduction():
            continue
        gemm_sums = [o for o in node.node.origins
                     if str(o.target) == _SUM and str(o.meta.get("original_aten")) in _GEMM_OPS]
        if not gemm_sums:
            # another reduction shares the kernel (a norm's mean recomputed beside the GEMV): blocks that won on
            # plain GEMVs are not known to fit it, so Inductor keeps it
            return None
        sums.update(gemm_sums)
        dtypes.update(str(o.meta["val"].dtype).removeprefix("torch.") for o in gemm_sums if "val" in o.meta)
    if not sums or len(dtypes) != 1:
        return None
    if bool(getattr(kernel, "persistent_reduction", True)) != (k < MIN_K):
        return None
    if not source:
        return GemvKernel(n, k, dtypes.pop(), len(sums))
    return GemvKernel(n, k, dtypes.pop(), len(sums), count_vector_loads(source), count_activations_ahead(source) > 0)


_HEURISTIC = re.compile(
    r"@triton_heuristics\.(?:persistent_)?reduction\(\s*size_hints=[^\n]*\n\s*reduction_hint=[^\n]*\n")


def with_configs(source: str, configs: Sequence[Config]) -> str | None:
    """``source`` (a generated reduction kernel) with its heuristic replaced: one config becomes Inductor's
    ``fixed_config`` (launched statically, never benchmarked); several become ``user_autotune`` (Inductor benchmarks
    them on first call: the collector's way of timing every candidate). None when the heuristic line is not the
    expected one (the kernel then keeps Inductor's)."""
    if not configs:
        return None
    # a persistent kernel defines R0_BLOCK itself (the whole K): its configs carry rows and warps only
    configs = [{key: v for key, v in c.items() if not (key == "R0_BLOCK" and v == 0)} for c in configs]
    if len(configs) == 1:
        head = f"@triton_heuristics.fixed_config(\n    config={configs[0]!r},\n"
    else:
        head = f"@triton_heuristics.user_autotune(\n    configs={configs!r},\n"
    new, count = _HEURISTIC.subn(lambda _: head, source, count=1)
    return new if count == 1 else None


_STATS = {"gemv_kernels_fixed": 0, "gemv_kernels_default": 0}
_CHOSEN: list[str] = []


def fixed_count() -> dict[str, Any]:
    """GEMV kernels given table blocks / left at Inductor's default in this process, and each kernel's decision
    (``2048x5632 bfloat16 w1 v2 -> X8_R256_w8``; reported by the zoo beside the kernel census)."""
    return {**_STATS, "gemv_kernels": list(_CHOSEN)}


@contextlib.contextmanager
def gemv_blocks(choose: Callable[[GemvKernel], Sequence[Config] | None]) -> Iterator[None]:
    """While active, every GEMV kernel Inductor generates gets the configs ``choose`` returns for it (None or
    empty: Inductor's heuristic). Restored on exit, also on an error; nested uses keep the outer choice."""
    from torch._inductor.codegen.triton import TritonKernel

    def wrap(original: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(original)
        def codegen_kernel(self: Any, name: Any = None) -> str:
            source = original(self, name)
            try:
                kernel = describe(self, source)
            except Exception as exc:  # noqa: BLE001 - an Inductor internals change must not break the compile
                log.debug("gemm-predictor: GEMV kernel not recognised (%s)", exc)
                return source
            if kernel is None:
                return source
            configs = choose(kernel) or ()
            new = with_configs(source, configs)
            _STATS["gemv_kernels_fixed" if new else "gemv_kernels_default"] += 1
            _CHOSEN.append(f"{kernel.n}x{kernel.k} {kernel.dtype} w{kernel.weights} v{kernel.vector_loads}"
                           f"{' act' if kernel.activation_ahead else ''} -> "
                           + (",".join(config_name(c) for c in configs) if new else "default"))
            return new or source
        return codegen_kernel

    with wrapped_attribute(TritonKernel, "codegen_kernel", wrap, "predictor_gemv_blocks"):
        yield
