"""Spaces: the candidate list Inductor's max-autotune builds for a GEMM, reproduced from the Problem alone.

``enumeration``: the rules (which templates, scaling, pruning, order); ``configs``: the torch-release-bound
config lists, read from the installed torch with frozen per-release copies as the fallback, and their
fingerprint, recorded in model metadata; ``frames``: spaces as one long DataFrame (collectors, baselines).
"""

from .configs import (
    FROZEN,
    SPACES,
    InductorConfigs,
    configs_for,
    installed_configs,
    untested_torch,
    warn_if_space_changed,
    warn_if_untested_torch,
)
from .enumeration import (
    _smem_bytes,
    enumerate_space,
    k_splits,
    tma_compatible,
    use_decompose_k,
    use_tma_template,
    use_triton_templates,
)
from .frames import space_frame

__all__ = ["FROZEN", "SPACES", "InductorConfigs", "configs_for", "enumerate_space", "installed_configs", "k_splits",
           "space_frame", "tma_compatible", "use_decompose_k", "use_tma_template", "use_triton_templates",
           "untested_torch", "warn_if_space_changed", "warn_if_untested_torch"]
