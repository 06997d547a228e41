"""gemm-predictor: rank Inductor GEMM candidates so max-autotune benchmarks only the few that win."""

from .candidate import Candidate
from .problem import Problem

__all__ = ["Candidate", "Problem"]
