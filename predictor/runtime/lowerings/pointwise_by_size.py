"""A dynamic graph's one-dimensional pointwise kernels launched, at every call, with the block Inductor's heuristic
gives the number of elements that call has.

Why: under dynamic shapes Inductor writes one block size into a pointwise kernel, chosen for one hint of its element
count. Hinted at the first size seen, a server warmed up at batch 2 keeps 256-element blocks at batch 256, where they
run 2x slower than a static compile's; hinted large (``dynamic_hints``), the same kernels run 1.7-2x slower than a
static compile's at a few rows (a Llama decode step at batch 4 on an H100: its attention-mask kernel 10.4 against
5.6 us, its rotary kernel 5.3 against under 1 us; docs/DYNAMIC.md). Inductor's one-dimensional heuristic has three
blocks (``triton_heuristics.pointwise``: ``max(256, min(numel // 128, 1024))`` elements); each is compiled, and each
launch takes the one for the element count it is called with. Nothing is benchmarked, and a CUDA graph captures the
launch of its own size.

And its size arguments are 32-bit. Inductor passes a kernel's symbolic sizes (``ks0``...) as 64-bit integers even
where the kernel indexes in 32 bits (``triton_utils.signature_to_meta``: a product of two sizes might overflow), so each
``xindex // ks0`` and ``% ks0`` is a 64-bit division, which the GPU emulates: a 4096-token OPT prefill's
attention-mask kernel took 191 us in a dynamic graph against 42 us compiled for that size, where the divisor is a
constant (H100, docs/DYNAMIC.md). A kernel Inductor indexes in 32 bits (``xnumel`` 32-bit) has its element count and
every buffer it touches guarded below 2**31 (``SIMDScheduling.can_use_32bit_indexing``), and its size arguments
index those buffers; so they are compiled 32-bit, and each launch checks that they fit. A kernel that multiplies two
of them keeps them 64-bit (the product of two sizes that fit may not).

How: ``by_size_source`` rewrites a generated kernel's ``@triton_heuristics.pointwise(`` into this module's
``pointwise``, which returns an autotuner whose ``run`` picks the launcher by the ``xnumel`` argument
(``BySizeAutotuner``). A kernel without a symbolic element count (``xnumel`` not an argument) or with a 2-D tiling,
and any torch whose internals do not fit, keep Inductor's own heuristic.

Imported by the kernels' generated source, in the compiling process and in Inductor's compile workers.
"""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger(__name__)

BLOCKS = (256, 512, 1024)  # Inductor's 1-D pointwise blocks, in elements
ELEMENTS_PER_BLOCK_STEP = 128  # Inductor's block: numel // 128, within [256, 1024]
SIZE_ARGUMENT_BITS = 32  # a symbolic size argument (``ks0``...) of a kernel indexed in 32 bits
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_SIZE_PRODUCT = re.compile(r"\bks\d+\s*\*\s*ks\d+\b")  # as Inductor prints a product of sizes: ks0*ks1
# a kernel Inductor is asked to tune (or to profile, or that has no x dimension) keeps Inductor's heuristic
INDUCTORS_OWN = ("max_autotune", "max_autotune_pointwise", "coordinate_descent_tuning", "profile_bandwidth", "no_x_dim")
_DECORATOR = "@triton_heuristics.pointwise(\n"
_ONE_D_HEAD = re.compile(re.escape(_DECORATOR) + r"\s*size_hints=\{'x': \d+\},")  # a 2-D tiling has 'y' too
# A compile worker that cannot import this package keeps Inductor's heuristic. The comment keeps the name Inductor
# reads a kernel's category from (``wrapper_benchmark.get_kernel_category_by_source_code``): it stays triton_poi_.
_IMPORT = ("try:  # in place of @triton_heuristics.pointwise\n"
           "    from predictor.runtime.lowerings.pointwise_by_size import pointwise as _pointwise_by_size\n"
           "except ImportError:\n    _pointwise_by_size = triton_heuristics.pointwise\n")


def block_for(numel: int) -> int:
    """The block Inductor's 1-D pointwise heuristic gives a kernel hinted at ``numel`` elements (the hint rounded up
    to a power of two, as Inductor rounds its size hints)."""
    hint = 1 << max(int(numel) - 1, 0).bit_length()
    return max(BLOCKS[0], min(hint // ELEMENTS_PER_BLOCK_STEP, BLOCKS[-1]))


def by_size_source(source: str) -> str:
    """``source`` (a generated Triton kernel module) with a 1-D pointwise heuristic whose element count is an
    argument replaced by ``pointwise`` here; any other source unchanged."""
    head = _ONE_D_HEAD.search(source)
    if head is None or "'xnumel': 'i" not in source:  # a static element count is a constant, not an argument
        return source
    return source[:head.start()] + _IMPORT + "@_pointwise_by_size(\n" + source[head.start() + len(_DECORATOR):]


def narrowed_signature(signature: dict[str, str], body: str | None) -> tuple[dict[str, str], tuple[str, ...]]:
    """(``signature`` with Inductor's 64-bit size arguments ``ks*`` 32-bit, their names) for a kernel indexed in 32
    bits (``xnumel`` 32-bit; module docstring) whose ``body`` (its source) multiplies no two of them; otherwise, and
    without a body to read, ``signature`` as it is and no names. A product of two sizes can exceed 32 bits where each
    fits (a mean's divisor: the element count of a tensor this kernel never touches), and a launch checks each
    argument, not products."""
    if signature.get("xnumel") != "i32" or not body or _SIZE_PRODUCT.search(body):
        return signature, ()
    names = tuple(name for name, kind in signature.items() if kind == "i64" and name.startswith("ks"))
    return {name: "i32" if name in names else kind for name, kind in signature.items()}, names


def _triton_heuristics() -> Any:
    from torch._inductor.runtime import triton_heuristics

    return triton_heuristics


_CLASSES: dict[str, type] = {}


def _autotuner_class() -> type:
    """``BySizeAutotuner``, defined on first use: Inductor's ``CachingAutotuner`` is imported only where kernels are
    compiled and run."""
    if "BySizeAutotuner" in _CLASSES:
        return _CLASSES["BySizeAutotuner"]
    th = _triton_heuristics()

    class BySizeAutotuner(th.CachingAutotuner):  # type: ignore[misc, name-defined]
        """Every config stays compiled; each launch runs the one whose block ``block_for`` gives its ``xnumel``
        (the launcher table is built once per set of launchers: a launch is on the hot path). ``narrowed``: the
        names of the size arguments compiled 32-bit (``narrowed_signature``), checked at each launch."""

        narrowed: tuple[str, ...] = ()

        def run(self, *args: Any, stream: Any, **kwargs: Any) -> Any:
            table = self.__dict__.get("_by_size")
            if table is None or table[0] is not self.launchers:
                if not self.launchers:
                    self.precompile()
                # launchers are compiled in the configs' order, one per block; any other shape: Inductor's run
                names = list(self.triton_meta["signature"])
                fits = len(self.launchers) == len(BLOCKS) and "xnumel" in names
                position = names.index("xnumel") if fits else -1
                checked = tuple(names.index(name) for name in self.narrowed)
                table = self._by_size = (self.launchers, position, dict(zip(BLOCKS, self.launchers)), checked)
            _, position, by_block, checked = table
            for i in checked:
                if not INT32_MIN <= args[i] <= INT32_MAX:
                    raise OverflowError(f"gemm-predictor: kernel {self.inductor_meta.get('kernel_name')}: size "
                                        f"argument {list(self.triton_meta['signature'])[i]} = {args[i]} exceeds the "
                                        f"32 bits it was compiled with (Inductor guards this kernel's sizes "
                                        f"below 2**31); please report it with the model")
            if kwargs or position < 0 or position >= len(args):
                return super().run(*args, stream=stream, **kwargs)
            return by_block[block_for(args[position])](*args, stream=stream)

    BySizeAutotuner.__module__, BySizeAutotuner.__qualname__ = __name__, "BySizeAutotuner"  # picklable by name
    _CLASSES["BySizeAutotuner"] = BySizeAutotuner
    return BySizeAutotuner


def __getattr__(name: str) -> Any:
    """``BySizeAutotuner`` by name: a compile worker pickles its kernels back to the compiling process."""
    if name == "BySizeAutotuner":
        return _autotuner_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pointwise(size_hints: Any, triton_meta: dict[str, Any], tile_hint: Any = None, filename: Any = None,
              min_elem_per_thread: int = 0, inductor_meta: dict[str, Any] | None = None, **extra: Any) -> Any:
    """Inductor's ``triton_heuristics.pointwise`` with its three 1-D blocks compiled and picked per launch, and its
    size arguments 32-bit where the kernel indexes in 32 bits (module docstring); Inductor's own where the kernel is
    not a plain 1-D one, or where another torch passes an argument this does not know (``extra``)."""
    th = _triton_heuristics()
    inductor_meta = {} if inductor_meta is None else inductor_meta
    own = dict(tile_hint=tile_hint, filename=filename, min_elem_per_thread=min_elem_per_thread,
               inductor_meta=inductor_meta, **extra)
    if (extra or list(size_hints) != ["x"] or "xnumel" not in triton_meta.get("signature", {})
            or any(inductor_meta.get(flag) for flag in INDUCTORS_OWN)):
        return th.pointwise(size_hints, triton_meta, **own)

    def decorator(fn: Any) -> Any:
        signature, narrowed = narrowed_signature(triton_meta["signature"], getattr(fn, "src", None))
        try:
            configs = [th.triton_config({"x": block * ELEMENTS_PER_BLOCK_STEP}, block,
                                        min_elem_per_thread=min_elem_per_thread) for block in BLOCKS]
            tuner = th.cached_autotune(size_hints, configs, triton_meta={**triton_meta, "signature": signature},
                                       heuristic_type=th.HeuristicType.POINTWISE, filename=filename,
                                       inductor_meta=inductor_meta, caching_autotuner_cls=_autotuner_class())(fn)
        except TypeError as exc:  # another torch's signatures: Inductor's own heuristic
            log.debug("gemm-predictor: pointwise blocks by size unavailable (%s)", exc)
            return th.pointwise(size_hints, triton_meta, **own)(fn)
        tuner.narrowed = narrowed
        return tuner
    return decorator
