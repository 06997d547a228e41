"""What a compile's traced graph owes to this package: the decompositions ``predictor.compile`` adds (GEMVs as
reductions, ``gemv``, where the GEMV block table's reading in ``gemv_blocks`` says so; GEMMs of a symbolic few rows
as the few-rows op, ``few_rows``; patch embeddings as GEMMs,
``patchify``; short reductions padded, ``pad_k``) and the rules that pick each GEMM's kernels (``hook``, ``policy``,
``split_addmm``), as a digest of their source for cache keys.

Why: AOTAutograd's and Inductor's cache keys hash torch's source and Inductor's config but not this package's code,
so a graph traced or lowered under an older rule would be reused after an upgrade; the hook puts this digest into
its cache key.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from . import few_rows, gemv, gemv_blocks, pad_k, patchify


@functools.cache
def decompositions_digest() -> str:
    """A digest of the source files of the modules whose decompositions ``predictor.compile`` traces with, and of
    the modules that decide the GEMMs (read by name: the hook imports this module)."""
    digest = hashlib.sha256()
    choices = Path(__file__).parents[1] / "choices"
    for path in [Path(m.__file__) for m in (few_rows, gemv, gemv_blocks, pad_k, patchify)] + [
            choices / name for name in ("pruner.py", "policy.py", "split_addmm.py")]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
