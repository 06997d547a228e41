"""gemm-predictor: choose Inductor's GEMM kernels from a model trained on the target GPU.

``predictor.compile(model)`` is the recommended call; ``install``/``pruning`` prune stock max-autotune instead.
"""

from .core.candidate import Candidate
from .runtime.compile import compile
from .runtime.install import install, pruning, stats, uninstall
from .core.problem import Problem

__all__ = ["Candidate", "Problem", "compile", "install", "uninstall", "pruning", "stats"]
