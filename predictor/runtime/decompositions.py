"""What a compile's traced graph owes to this package: the decompositions ``predictor.compile`` adds (GEMVs as
reductions, ``gemv``, where the GEMV block table's reading in ``gemv_blocks`` says so; patch embeddings as GEMMs,
``patchify``; short reductions padded, ``pad_k``), as a digest of their source for cache keys.

Why: AOTAutograd's cache key hashes torch's source and Inductor's config but not this package's code, so a graph
traced under an older rule would be reused after an upgrade; the hook puts this digest into its cache key.
"""

from __future__ import annotations

import functools
import hashlib

from . import gemv, gemv_blocks, pad_k, patchify


@functools.cache
def decompositions_digest() -> str:
    """A digest of the source files of the modules whose decompositions ``predictor.compile`` traces with."""
    digest = hashlib.sha256()
    for module in (gemv, gemv_blocks, pad_k, patchify):
        with open(module.__file__, "rb") as source:
            digest.update(source.read())
    return digest.hexdigest()[:16]
