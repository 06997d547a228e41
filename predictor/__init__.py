"""gemm-predictor: rank Inductor GEMM candidates so max-autotune benchmarks only the few that win."""

from .candidate import Candidate
from .hook import install, pruning, stats, uninstall
from .problem import Problem

__all__ = ["Candidate", "Problem", "install", "uninstall", "pruning", "stats"]
