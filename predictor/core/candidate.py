"""Candidate: one kernel Inductor could run for a problem, with one canonical string key.

Keys: ``triton_mm/128x64x32/s3/w4/g8``, ``triton_tma/128x64x32/s3/w4/g8``, ``decompose_k/k32``,
``aten/mm``, ``cutlass/128x128x64/s0/c1x1x1_tnn_align2_cpasync_warpspecialized_epi_nosmem/sw4`` (a CUTLASS 3.x
kernel as Inductor's CUTLASS backend names it: tile, stages (0 = auto), cluster + layout/alignment/schedule, and
the L2 swizzle; for this family ``aten_op`` holds the schedule descriptor and ``group_m`` the swizzle). The two mappings from Inductor objects (a ``KernelTemplateChoice`` before codegen and
an autotune ``ChoiceCaller`` after) live here so there is exactly one of each.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

FAMILIES = ("triton_mm", "triton_tma", "decompose_k", "aten", "cutlass")
CANDIDATE_FIELDS = ("family", "block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m", "k_split", "aten_op")
NUMERIC_FIELDS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m", "k_split")

# Inductor template uid -> our family. The persistent TMA template is named differently across versions.
TEMPLATE_FAMILY = {
    "triton::mm": "triton_mm",
    "triton::bmm": "triton_mm",
    "triton::mm_persistent_tma": "triton_tma",
    "triton::mm_persistent": "triton_tma",
    "decompose_k": "decompose_k",
    # fp8 _scaled_mm (the Problem's op says it is scaled): torch 2.13 offers the mm template with a scaling epilogue
    # (uid triton::mm, above) and, on Hopper, a persistent device-TMA template that scales in its epilogue
    # (tensorwise/rowwise); earlier releases named them scaled_mm / scaled_mm_device_tma. The main-loop-scaling
    # template (blockwise 1x128/128x128 scales) is left unknown: no problem of ours has those scales.
    "triton::scaled_mm": "triton_mm",
    "triton::scaled_mm_device_tma": "triton_tma",
    "triton::scaled_mm_device_tma_epilogue_scaling": "triton_tma",
}


@dataclass(frozen=True)
class Candidate:
    family: str
    block_m: int = 0
    block_n: int = 0
    block_k: int = 0
    num_stages: int = 0
    num_warps: int = 0
    group_m: int = 0
    k_split: int = 0
    aten_op: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown candidate family {self.family!r}; expected one of {', '.join(FAMILIES)}")

    # Cached (in the instance's __dict__, outside the frozen fields, so equality and hashing are unchanged): the
    # hook reads both for every choice of every GEMM, and its Candidates are shared between GEMMs
    # (``candidates_from_choices``), so each is computed once per distinct kernel rather than per choice.
    @cached_property
    def key(self) -> str:
        if self.family == "aten":
            return f"aten/{self.aten_op}"
        if self.family == "decompose_k":
            return f"decompose_k/k{self.k_split}"
        if self.family == "cutlass":
            return (f"cutlass/{self.block_m}x{self.block_n}x{self.block_k}/s{self.num_stages}/{self.aten_op}"
                    f"/sw{self.group_m}")
        return (f"{self.family}/{self.block_m}x{self.block_n}x{self.block_k}"
                f"/s{self.num_stages}/w{self.num_warps}/g{self.group_m}")

    @cached_property
    def numbers(self) -> tuple[int, ...]:
        """The ``NUMERIC_FIELDS``, in order (a row of the features' candidate table)."""
        return tuple(getattr(self, name) for name in NUMERIC_FIELDS)

    @property
    def is_triton(self) -> bool:
        return self.family in ("triton_mm", "triton_tma")

    def to_dict(self) -> dict:
        return {**asdict(self), "candidate": self.key}


_TILE_KEY = re.compile(r"^(triton_mm|triton_tma)/(\d+)x(\d+)x(\d+)/s(\d+)/w(\d+)/g(\d+)$")
_CUTLASS_KEY = re.compile(r"^cutlass/(\d+)x(\d+)x(\d+)/s(\d+)/(\w+)/sw(\d+)$")
# Inductor's CUTLASS 3.x op names: ..._<tile MxNxK>_<cluster>_<stages>_<layouts, alignment, schedule, epilogue>
_CUTLASS_OP = re.compile(r"_(\d+)x(\d+)x(\d+)_(\d+x\d+x\d+)_(\d+)_(\w+?)(?:\s+swizzle=(\d+))?\s*$")


def parse_key(key: str) -> Candidate:
    """Inverse of ``Candidate.key``."""
    if key.startswith("aten/") and len(key) > 5:
        return Candidate("aten", aten_op=key[5:])
    if key.startswith("decompose_k/k") and key[13:].isdigit():
        return Candidate("decompose_k", k_split=int(key[13:]))
    cutlass = _CUTLASS_KEY.match(key)
    if cutlass:
        bm, bn, bk, stages = (int(x) for x in cutlass.groups()[:4])
        return Candidate("cutlass", bm, bn, bk, stages, 0, int(cutlass.group(6)), aten_op=cutlass.group(5))
    match = _TILE_KEY.match(key)
    if not match:
        raise ValueError(f"not a candidate key: {key!r}")
    family, *nums = match.groups()
    bm, bn, bk, s, w, g = map(int, nums)
    return Candidate(family, bm, bn, bk, s, w, g)


def from_template_kwargs(template_uid: str, kwargs: dict[str, Any]) -> Candidate:
    """Map an Inductor ``KernelTemplateChoice`` (template uid + ``params.to_kwargs()``) to a Candidate."""
    if template_uid.startswith("aten::"):
        return Candidate("aten", aten_op=template_uid[len("aten::"):])
    family = TEMPLATE_FAMILY.get(template_uid)
    if family is None:
        raise ValueError(f"unknown Inductor template {template_uid!r}")
    if family == "decompose_k":
        return Candidate("decompose_k", k_split=int(kwargs["k_split"]))
    return Candidate(
        family,
        block_m=int(kwargs["BLOCK_M"]),
        block_n=int(kwargs["BLOCK_N"]),
        block_k=int(kwargs["BLOCK_K"]),
        num_stages=int(kwargs["num_stages"]),
        num_warps=int(kwargs["num_warps"]),
        group_m=int(kwargs.get("GROUP_M", 8)),
    )


# (template uid, every kwarg from_template_kwargs reads) -> its Candidate, shared by every GEMM's list
_FROM_TEMPLATE: dict[tuple, Candidate] = {}
_FROM_TEMPLATE_SIZE = 1 << 16  # distinct kernels remembered (Inductor's exhaustive list has ~2400)


def candidates_from_choices(choices: list[Any]) -> tuple[list[Candidate], list[Any]]:
    """``from_template_kwargs`` for each ``KernelTemplateChoice`` of a list, and each one's multi-kernel hint
    (``hint_override``). Inductor offers the same configs to GEMM after GEMM (2400 in the exhaustive space), so each
    distinct (template, config) becomes a Candidate once and is looked up after that: building them was most of the
    hook's time on a problem it had already scored."""
    # list comprehensions and map (the cheapest loops here: explicit .get beats map/methodcaller over the keys);
    # per choice, Python code beyond them runs only for a config not seen before
    kwargs = [ktc.params.to_kwargs() for ktc in choices]
    hints = [kw.get("hint_override") for kw in kwargs]
    signatures = [(ktc.template.uid, kw.get("BLOCK_M"), kw.get("BLOCK_N"), kw.get("BLOCK_K"), kw.get("num_stages"),
                   kw.get("num_warps"), kw.get("GROUP_M"), kw.get("k_split")) for ktc, kw in zip(choices, kwargs)]
    try:
        cands = list(map(_FROM_TEMPLATE.get, signatures))
    except TypeError:  # an unhashable value: built every time
        return [from_template_kwargs(ktc.template.uid, kw) for ktc, kw in zip(choices, kwargs)], hints
    if all(cands):  # (Candidates are always true: a C-level check that every one was found)
        return cands, hints
    for i, cand in enumerate(cands):
        if cand is None:
            cands[i] = cand = from_template_kwargs(signatures[i][0], kwargs[i])
            if len(_FROM_TEMPLATE) >= _FROM_TEMPLATE_SIZE:
                _FROM_TEMPLATE.clear()
            _FROM_TEMPLATE[signatures[i]] = cand
    return cands, hints


def to_template_kwargs(c: Candidate, hint: int | None = None) -> tuple[str, dict[str, Any]]:
    """The inverse of ``from_template_kwargs``: the template uid and ``params.to_kwargs()`` Inductor builds for
    ``c`` (what the hook reads; benchmarks and tests make Inductor-like stand-ins from it)."""
    if c.family == "aten":
        return f"aten::{c.aten_op}", {}
    if c.family == "decompose_k":
        return "decompose_k", {"k_split": c.k_split}
    if c.family not in ("triton_mm", "triton_tma"):
        raise ValueError(f"{c.key}: no Inductor template reaches _finalize_template_configs for {c.family}")
    uid = "triton::mm" if c.family == "triton_mm" else "triton::mm_persistent_tma"
    return uid, {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k, "num_stages": c.num_stages,
                 "num_warps": c.num_warps, "GROUP_M": c.group_m, "EVEN_K": True, "hint_override": hint}


_DESC_FIELD = re.compile(r"(\w+)=([^,]+)")
_DECOMPOSE_NAME = re.compile(r"decompose_k_mm_(\d+)_split")


def from_choice_caller(name: str, description: str) -> Candidate:
    """Map an Inductor autotune ``ChoiceCaller`` (its ``name`` and ``description``) to a Candidate.

    Triton template callers are named ``triton_mm_3`` / ``triton_mm_persistent_tma_1`` and describe
    their config as ``BLOCK_K=32, BLOCK_M=64, ..., num_stages=3, num_warps=4``; extern (aten) callers
    carry the aten op name; decompose-K subgraphs are named ``decompose_k_mm_<split>_split``.
    """
    match = _DECOMPOSE_NAME.search(name)
    if match:
        return Candidate("decompose_k", k_split=int(match.group(1)))
    if name.startswith("cutlass"):
        op = _CUTLASS_OP.search(description or "")
        if not op:
            raise ValueError(f"CUTLASS choice {name!r} has no kernel name in its description {description!r}")
        bm, bn, bk = (int(x) for x in op.groups()[:3])
        return Candidate("cutlass", bm, bn, bk, num_stages=int(op.group(5)), group_m=int(op.group(7) or 1),
                         aten_op=f"c{op.group(4)}_{op.group(6)}")
    if name.startswith("triton_") or "BLOCK_M" in (description or ""):
        fields = {k: v.strip().strip("'") for k, v in _DESC_FIELD.findall(description or "")}
        if "BLOCK_M" not in fields:
            raise ValueError(f"Triton choice {name!r} has no block sizes in its description {description!r}")
        # scaled-mm callers: triton_scaled_mm_device_tma_epilogue_scaling_<i> (TMA), triton_mm_<i> (epilogue)
        family = "triton_tma" if ("persistent" in name or "tma" in name) else "triton_mm"
        return Candidate(
            family,
            block_m=int(fields["BLOCK_M"]),
            block_n=int(fields["BLOCK_N"]),
            block_k=int(fields["BLOCK_K"]),
            num_stages=int(fields["num_stages"]),
            num_warps=int(fields["num_warps"]),
            group_m=int(fields.get("GROUP_M", 8)),
        )
    if name.startswith(("aten", "extern")) or re.fullmatch(r"[a-z_]+", name or ""):
        op = name.split(".")[-1]
        for prefix in ("extern_kernels.", "aten::", "aten_"):
            if op.startswith(prefix):
                op = op[len(prefix):]
        return Candidate("aten", aten_op=op)
    raise ValueError(f"unknown Inductor choice {name!r} ({description!r})")
