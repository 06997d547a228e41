"""gemm-predictor: choose Inductor's GEMM kernels from a model trained on the target GPU.

``predictor.compile(model)`` is the recommended call; ``install``/``pruning`` prune stock max-autotune instead.
"""

from .candidate import Candidate
from .runtime.compiling import compile
from .runtime.installing import install, pruning, stats, uninstall
from .problem import Problem

__all__ = ["Candidate", "Problem", "compile", "install", "uninstall", "pruning", "stats"]
