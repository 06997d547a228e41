"""The one per-user cache folder (``$XDG_CACHE_HOME/gemm-predictor``, else ``~/.cache/gemm-predictor``): the compiled
tree walker, the label store and the local models each keep a folder under it, or where their variable points."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemm-predictor"


def folder_in_cache(env: str, name: str) -> Path:
    """``$env`` when set (``~`` expanded), else ``cache_dir() / name``."""
    value = os.environ.get(env)
    return Path(value).expanduser() if value else cache_dir() / name
