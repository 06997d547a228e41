"""The accumulated-gradient guard ``predictor.compile`` registers on a module whose graphs run under CUDA graph
trees with a backward: a gradient accumulated across steps must not live in memory the next replay overwrites."""

from __future__ import annotations

from typing import Any

_OWNED = "_gemm_predictor_owned_grad"


class AccumulatedGradGuard:
    """Forward pre-hook: before a forward with grad on, move every gradient autograd took over from a backward's
    output into memory of its own (once per accumulation; later backwards add into it in place), so that the
    forward's CUDA graph replay cannot overwrite a gradient still being accumulated.

    Per call it reads every parameter's ``.grad`` from a list taken once, at the first call (walking
    ``module.parameters()`` would cost ~0.7 ms per call for 300 parameters; the list, tens of us). Every
    parameter is in it, frozen ones too (one unfrozen later is guarded), and none stands for the others: the
    first one may get no gradient (unused, frozen) while the rest accumulate. A parameter added to the module
    after the first call is not guarded."""

    def __init__(self) -> None:
        self.params: list | None = None

    def __call__(self, module: Any, _args: Any) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        if self.params is None:
            self.params = list(module.parameters())
        if not any([p.grad is not None for p in self.params]):
            return
        for param in self.params:
            grad = param.grad
            if grad is not None and not getattr(grad, _OWNED, False):
                owned = grad.clone()
                setattr(owned, _OWNED, True)
                param.grad = owned
