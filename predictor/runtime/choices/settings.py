"""The hook's settings, defined once: ``install()``, ``predictor.compile``, the pruner and its cache key read them."""

from __future__ import annotations

import dataclasses
import math

from ...core.device import DeviceInfo
from .policy import ATEN_ALONE_BELOW_US, DECIDE_MIN_GAP, FALLBACKS
from ...spaces.configs import SPACES


@dataclasses.dataclass(frozen=True)
class HookSettings:
    """Everything a pruner is built from; also what a pickled pruner carries to another process."""

    model: str | None = None
    top_k: int = 5
    space: str = "default"
    keep_aten: bool = True
    min_confidence: float | None = None
    hints: str | None = None
    device: DeviceInfo | None = None  # test-only override of the GPU (see ``install(_device=...)``)
    margin: float | str | None = "auto"
    allow_similar_gpu: bool = True
    aten_alone_below_us: float | None = ATEN_ALONE_BELOW_US
    override_gap: float | None = None
    cutlass_top_k: int | None = None
    epilogue_templates: int = 0
    # "prune": keep the top k for Inductor to benchmark; "decide": one choice, no benchmark; "tune": decide, then
    # the decided kind's top k for Inductor to benchmark (policy.tuned_choices)
    policy: str = "prune"
    decide_gap: float = DECIDE_MIN_GAP
    fallback: str = "aten"  # what a GEMM the hook cannot rank keeps: "aten" (plain's choice) or "full"

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {self.top_k!r}")
        if self.space not in SPACES:
            raise ValueError(f"unknown space {self.space!r}; expected one of {', '.join(SPACES)}")
        confidence = self.min_confidence
        if confidence is not None and not (isinstance(confidence, (int, float)) and math.isfinite(confidence)
                                           and confidence >= 0):
            raise ValueError(f"min_confidence must be a non-negative number or None, got {self.min_confidence!r}")
        if not (self.margin is None or self.margin == "auto"
                or (isinstance(self.margin, (int, float)) and math.isfinite(self.margin) and self.margin >= 0)):
            raise ValueError(f"margin must be 'auto', None or a non-negative number, got {self.margin!r}")
        below = self.aten_alone_below_us
        if below is not None and not (isinstance(below, (int, float)) and math.isfinite(below) and below >= 0):
            raise ValueError(f"aten_alone_below_us must be a non-negative number or None, got {below!r}")
        gap = self.override_gap
        if gap is not None and not (isinstance(gap, (int, float)) and math.isfinite(gap) and gap >= 0):
            raise ValueError(f"override_gap must be a non-negative number or None, got {gap!r}")
        ck = self.cutlass_top_k
        if ck is not None and (isinstance(ck, bool) or not isinstance(ck, int) or ck < 1):
            raise ValueError(f"cutlass_top_k must be a positive integer or None, got {ck!r}")
        et = self.epilogue_templates
        if isinstance(et, bool) or not isinstance(et, int) or et < 0:
            raise ValueError(f"epilogue_templates must be a non-negative integer, got {et!r}")
        if self.hints not in (None, "predict"):
            raise ValueError(f"unknown hints mode {self.hints!r}; expected None or 'predict'")
        if self.policy not in ("prune", "decide", "tune"):
            raise ValueError(f"unknown policy {self.policy!r}; expected 'prune', 'decide' or 'tune'")
        if self.fallback not in FALLBACKS:
            raise ValueError(f"unknown fallback {self.fallback!r}; expected one of {', '.join(FALLBACKS)}")
        gap = self.decide_gap
        if isinstance(gap, bool) or not (isinstance(gap, (int, float)) and math.isfinite(gap)):
            raise ValueError(f"decide_gap must be a finite number, got {self.decide_gap!r}")
