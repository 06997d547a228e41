"""Synthetic context blocks: the GEMMs every transformer has, inside the program around them, at sampled widths.

Why: the in-program harness (``in_program.py --paired``) times each of the hook's decisions in a whole step, which
is the truth the product answers to, but the zoo gives only ~90 such GEMMs, all at the widths of a few published
architectures. A context block is the part of a model those decisions live in, a pre-norm MLP layer (LayerNorm,
up projection + GELU/ReLU or RMSNorm, gate and up projections + SiLU * up, down projection + residual add),
repeated twice, optionally followed by a head GEMM (norm + projection whose output is the result, like an LM or
classifier head), with widths and token counts sampled from ranges real models span rather than copied from them.
Each block gives the harness 2-3 decisions in their epilogue context (bias + activation, residual, gated product,
nothing), with the norms and the program's L2 state around them.

A block's name says everything that builds it, so the harness's fresh processes rebuild it from the name alone:
``ctx-<act>-m<tokens>-d<width>-h<hidden>[-v<head width>]-<dtype>`` with act ``gelu``, ``relu`` or ``swiglu`` and dtype
``bf16``, ``fp16`` or ``fp32`` (e.g. ``ctx-swiglu-m512-d2048-h5632-v32000-bf16``). ``sampled_names(n)`` is the fixed,
seeded sample the context dataset was measured on (``datasets/<gpu>/CONTEXT.md``).
"""

from __future__ import annotations

import random
import re

import torch
from torch import nn

DTYPE_CODES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ACTS = ("gelu", "relu", "swiglu")
NAME = re.compile(r"ctx-(?P<act>gelu|relu|swiglu)-m(?P<m>\d+)-d(?P<d>\d+)-h(?P<h>\d+)(?:-v(?P<v>\d+))?"
                  r"-(?P<dtype>bf16|fp16|fp32)")
LAYERS = 2  # repeated layers share their GEMMs' shapes, so the harness flips them together, as the hook decides


class MLPLayer(nn.Module):
    """Pre-norm MLP with a residual: LayerNorm + up (bias) + GELU/ReLU + down (bias), or RMS-style norm + gate and up
    (no bias) + SiLU(gate) * up + down (no bias), as Llama-family models have it."""

    def __init__(self, act: str, d: int, h: int) -> None:
        super().__init__()
        self.act = act
        gated = act == "swiglu"
        self.norm = nn.RMSNorm(d) if gated else nn.LayerNorm(d)
        self.up = nn.Linear(d, h, bias=not gated)
        self.gate = nn.Linear(d, h, bias=False) if gated else None
        self.down = nn.Linear(h, d, bias=not gated)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        if self.gate is not None:
            hidden = nn.functional.silu(self.gate(y)) * self.up(y)
        elif self.act == "gelu":
            hidden = nn.functional.gelu(self.up(y), approximate="tanh")
        else:
            hidden = nn.functional.relu(self.up(y))
        return x + self.down(hidden)


class ContextBlock(nn.Module):
    """``LAYERS`` MLP layers, then (``head`` > 0) a norm and a bias-free head projection whose output is returned."""

    def __init__(self, act: str, d: int, h: int, head: int = 0) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(MLPLayer(act, d, h) for _ in range(LAYERS)))
        self.head_norm = nn.LayerNorm(d) if head else None
        self.head = nn.Linear(d, head, bias=False) if head else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(x)
        return self.head(self.head_norm(x)) if self.head is not None else x


def parse(name: str) -> dict | None:
    """The fields of a context block's name (act, m, d, h, v, dtype), or None when ``name`` is not one."""
    match = NAME.fullmatch(name)
    if not match:
        return None
    fields = match.groupdict()
    return {"act": fields["act"], "m": int(fields["m"]), "d": int(fields["d"]), "h": int(fields["h"]),
            "v": int(fields["v"] or 0), "dtype": DTYPE_CODES[fields["dtype"]]}


def name_of(act: str, m: int, d: int, h: int, v: int, dtype_code: str) -> str:
    return f"ctx-{act}-m{m}-d{d}-h{h}{f'-v{v}' if v else ''}-{dtype_code}"


def build_from_name(name: str):
    """The zoo ``Build`` of a context block named ``name`` (ValueError when the name does not parse)."""
    spec = parse(name)
    if spec is None:
        raise ValueError(f"{name!r} is not a context block name (ctx-<act>-m<M>-d<D>-h<H>[-v<V>]-<bf16|fp16|fp32>)")

    def build(device: torch.device, dtype: torch.dtype | None = None):
        torch.manual_seed(0)
        wdtype = dtype or getattr(torch, spec["dtype"])
        module = ContextBlock(spec["act"], spec["d"], spec["h"], spec["v"]).to(device=device, dtype=wdtype)
        for p in module.parameters():  # keep activations O(1) through the layers: a fair numeric comparison
            if p.dim() == 2:
                nn.init.normal_(p, std=p.shape[1] ** -0.5)
        x = torch.randn(spec["m"], spec["d"], device=device, dtype=wdtype)
        return module, (x,), "forward"
    return build


# The sampled ranges: token counts from single-token decode batches to long prefills (log-uniform), widths of
# small to 7B-class models, the hidden ratios of GELU (4x) and gated (8/3 rounded, 3.5x) MLPs, head widths of
# classifiers and vocabularies. Sizes are capped so one block compiles and runs in seconds.
WIDTHS = (384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560, 3072, 4096)
RATIOS = {"gelu": (4.0, 4.0, 3.0, 2.0), "relu": (4.0, 2.0), "swiglu": (8 / 3, 8 / 3, 3.5, 3.0)}
HEADS = (1000, 8192, 32000, 50272, 65024, 128256)
MAX_MLP_FLOP = 2 ** 37  # 2*M*D*H per GEMM: ~0.3 ms at H100 bf16 rate
MAX_HEAD_ELEMENTS = 2 ** 28  # M x V logits: 512 MB in bf16


def _sample(rng: random.Random) -> str:
    act = rng.choice(("gelu", "gelu", "relu", "swiglu", "swiglu"))
    dtype_code = rng.choice(("bf16", "bf16", "fp16", "fp16", "fp32"))
    d = rng.choice(WIDTHS)
    multiple = 256 if act == "swiglu" else 64
    h = max(multiple, round(d * rng.choice(RATIOS[act]) / multiple) * multiple)
    m = round(2 ** rng.uniform(3, 14))  # 8 .. 16384 tokens
    if rng.random() < 0.5:
        m = max(8, m // 8 * 8)  # half aligned (batch x seq of powers of two), half not (197, 257 tokens ...)
    while 2 * m * d * h > MAX_MLP_FLOP * (0.25 if dtype_code == "fp32" else 1):
        m //= 2
    v = rng.choice(HEADS) if rng.random() < 0.4 else 0
    if v and m * v > MAX_HEAD_ELEMENTS:
        v = 0
    return name_of(act, m, d, h, v, dtype_code)


def sampled_names(n: int, seed: int = 15) -> list[str]:
    """The first ``n`` names of the seeded sample (stable: the same ``seed`` gives the same list and order)."""
    rng = random.Random(seed)
    names: list[str] = []
    while len(names) < n:
        name = _sample(rng)
        if name not in names:
            names.append(name)
    return names
