"""The torch-version-bound part of a space: Inductor's GEMM config lists, read from the installed torch or frozen.

Inductor's ``template_heuristics/triton.py`` lists the Triton configs each GEMM template tries; the lists change
between torch releases (2.13 added ``128x256x64`` to ``mm_configs``), and a model only knows the candidates it
was trained on. So the lists come from the installed torch itself where it can be read (``installed_configs``),
with a frozen copy per torch release as the fallback and as the reference the tests hold the live lists to. A
``fingerprint`` of the lists goes into each model's metadata, and loading a model for the hook warns once when
the installed torch's fingerprint differs (``warn_if_space_changed``).

The rules that turn the lists into a candidate list (scaling, pruning, which templates) are in
``predictor.spaces.enumeration`` and were checked against torch 2.11's lists on an H200.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

SPACES = ("default", "exhaustive")  # the candidate spaces: Inductor's DEFAULT and EXHAUSTIVE search spaces

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
Config = tuple[int, int, int, int, int]


@dataclasses.dataclass(frozen=True)
class InductorConfigs:
    """One torch release's CUDA GEMM config lists (``BaseConfigHeuristic`` and its CUDA template subclasses)."""

    torch: str  # major.minor, e.g. "2.13"
    mm: tuple[Config, ...]  # mm_configs: triton::mm / triton::bmm in the DEFAULT space
    int8_mm: tuple[Config, ...]  # int8_mm_configs: _int_mm in both spaces
    persistent_mm: tuple[Config, ...]  # persistent_mm_configs: the persistent TMA template, DEFAULT space
    exhaustive: tuple[Config, ...]  # exhaustive_configs: every template but int8 in the EXHAUSTIVE space
    group_m: int = 8
    source: str = dataclasses.field(default="frozen", compare=False)  # or "installed torch"; not fingerprinted
    # fp8 ``_scaled_mm``: scaled_mm_configs (triton::mm with the scaling epilogue) and scaled_persistent_mm_configs
    # (the device-TMA scaled templates). None: not known for this release (spaces then refuses scaled_mm). Left out
    # of ``fingerprint`` so that models trained without scaled_mm keep theirs: a change to these lists alone is not
    # detected by ``warn_if_space_changed``.
    scaled_mm: tuple[Config, ...] | None = None
    scaled_persistent_mm: tuple[Config, ...] | None = None

    @property
    def fingerprint(self) -> str:
        """``sha256:<16 hex>`` of the lists (order matters: it is Inductor's candidate order)."""
        doc = {"mm": self.mm, "int8_mm": self.int8_mm, "persistent_mm": self.persistent_mm,
               "exhaustive": self.exhaustive, "group_m": self.group_m}
        digest = hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()
        return f"sha256:{digest[:16]}"


# ---------------------------------------------------------------------------------------------
# Frozen copies (CUDA, not ROCm), transcribed from each release's template_heuristics/triton.py
# ---------------------------------------------------------------------------------------------

_MM_2_11: tuple[Config, ...] = (
    (32, 32, 16, 1, 2), (32, 32, 128, 2, 4), (32, 64, 32, 5, 8), (64, 32, 32, 5, 8), (64, 32, 128, 5, 4),
    (64, 64, 16, 2, 4), (64, 64, 32, 2, 4), (64, 64, 64, 3, 8), (64, 64, 128, 5, 4), (64, 128, 32, 3, 4),
    (64, 128, 32, 4, 8), (64, 128, 64, 3, 4), (64, 128, 128, 4, 4), (128, 64, 32, 3, 4), (128, 64, 32, 4, 8),
    (128, 128, 32, 2, 8), (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8), (128, 128, 128, 4, 8),
)
_INT8_MM: tuple[Config, ...] = (
    (64, 64, 32, 2, 4), (64, 128, 32, 3, 4), (128, 64, 32, 3, 4), (64, 128, 32, 4, 8), (128, 64, 32, 4, 8),
    (64, 32, 32, 5, 8), (32, 64, 32, 5, 8), (128, 128, 32, 2, 8), (64, 64, 64, 3, 8), (128, 256, 128, 3, 8),
    (256, 128, 128, 3, 8),
)
_PERSISTENT_MM: tuple[Config, ...] = (
    (128, 256, 64, 3, 8), (128, 128, 64, 3, 8), (128, 128, 128, 3, 8), (128, 128, 128, 3, 4),
    (128, 128, 64, 4, 8), (128, 128, 64, 5, 8), (256, 128, 64, 4, 8), (128, 128, 64, 5, 4),
)
_EXHAUSTIVE: tuple[Config, ...] = tuple(
    (bm, bn, bk, stages, warps)
    for bm, bn, bk in itertools.product((16, 32, 64, 128, 256), repeat=3)
    for stages in (1, 2, 3, 4, 5)
    for warps in (2, 4, 8)
)

# scaled_mm_configs, the same in torch 2.11 to 2.14: 17 hand-picked configs, a (BLOCK_M 16/32) x (BLOCK_N 32..256)
# x (BLOCK_K 32/64) grid over stages 2..6 (warps 2 for BLOCK_N <= 64, else 4), then 8 more hand-picked ones.
_SCALED_GRID: tuple[Config, ...] = tuple(
    (bm, bn, bk, stages, 2 if bn <= 64 else 4)
    for stages in (2, 3, 4, 5, 6) for bm in (16, 32) for bk in (32, 64) for bn in (32, 64, 128, 256)
)
_SCALED_MM: tuple[Config, ...] = (
    (128, 256, 32, 3, 8), (256, 128, 32, 3, 8), (256, 64, 32, 4, 4), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4),
    (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (256, 128, 128, 3, 8),
    (256, 64, 128, 4, 4), (64, 256, 128, 4, 4), (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
    (128, 32, 64, 4, 4), (64, 32, 64, 5, 2),
) + _SCALED_GRID + (
    (64, 16, 256, 5, 4), (64, 32, 256, 5, 4), (64, 128, 128, 2, 4), (64, 128, 128, 3, 4), (128, 128, 128, 2, 4),
    (128, 256, 128, 4, 8), (256, 128, 128, 2, 4), (256, 128, 128, 2, 8),
)
_SCALED_PERSISTENT_MM: tuple[Config, ...] = (
    (128, 128, 64, 3, 8), (128, 128, 128, 3, 8), (128, 128, 128, 4, 8), (128, 128, 128, 4, 4), (128, 128, 128, 3, 4),
    (128, 128, 128, 5, 4), (128, 128, 128, 5, 8), (128, 128, 128, 6, 8), (128, 128, 64, 4, 8), (64, 32, 256, 5, 4),
    (128, 256, 128, 3, 8), (64, 128, 256, 4, 4), (64, 256, 128, 4, 4),
)

_MM_2_13 = _MM_2_11 + ((128, 256, 64, 4, 8),)

FROZEN: dict[str, InductorConfigs] = {
    "2.11": InductorConfigs("2.11", _MM_2_11, _INT8_MM, _PERSISTENT_MM, _EXHAUSTIVE,
                            scaled_mm=_SCALED_MM, scaled_persistent_mm=_SCALED_PERSISTENT_MM),
    # 2.12 (checked on 2.12.1): every list is 2.11's
    "2.12": InductorConfigs("2.12", _MM_2_11, _INT8_MM, _PERSISTENT_MM, _EXHAUSTIVE,
                            scaled_mm=_SCALED_MM, scaled_persistent_mm=_SCALED_PERSISTENT_MM),
    # 2.13 appends 128x256x64 (4 stages, 8 warps) to mm_configs; the other lists are 2.11's
    "2.13": InductorConfigs("2.13", _MM_2_13, _INT8_MM, _PERSISTENT_MM, _EXHAUSTIVE,
                            scaled_mm=_SCALED_MM, scaled_persistent_mm=_SCALED_PERSISTENT_MM),
    # 2.14 (checked on 2.14.1) moves the file to heuristics/template/triton.py; every list is 2.13's
    "2.14": InductorConfigs("2.14", _MM_2_13, _INT8_MM, _PERSISTENT_MM, _EXHAUSTIVE,
                            scaled_mm=_SCALED_MM, scaled_persistent_mm=_SCALED_PERSISTENT_MM),
}


def _version_key(version: str) -> tuple[int, int]:
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        raise ValueError(f"torch version {version!r} is not of the form 'major.minor[.patch]'") from None
    return major, minor


def release(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13"``: config lists change with releases, not patches."""
    major, minor = _version_key(version)
    return f"{major}.{minor}"


def frozen_configs(version: str) -> InductorConfigs:
    """The frozen copy for ``version``'s release; for a release without one, the newest copy before it
    (or the oldest, for a release before every copy), with a warning: the lists may differ."""
    wanted = release(version)
    if wanted in FROZEN:
        return FROZEN[wanted]
    older = [v for v in FROZEN if _version_key(v) <= _version_key(wanted)]
    nearest = max(older, key=_version_key) if older else min(FROZEN, key=_version_key)
    log.warning("no frozen Inductor config lists for torch %s; using torch %s's (known: %s)",
                wanted, nearest, ", ".join(FROZEN))
    return FROZEN[nearest]


def newest_tested() -> str:
    """The newest torch release with a frozen copy: the newest the suite runs on (``tests/torch_matrix.sh``)."""
    return max(FROZEN, key=_version_key)


def untested_torch(version: str | None = None) -> str | None:
    """One line when ``version`` (default: the installed torch) is a release newer than every tested one, else None.

    Its Inductor may lower, order or name GEMM candidates in ways no model and no rewrite here was checked against
    (torch 2.14 reordered the size-range lowerings), so such a torch gets plain ``torch.compile``'s choices: a wrong
    kernel costs more than the few percent a right one gains."""
    if version is None:
        import torch

        version = torch.__version__
    if _version_key(version) <= _version_key(newest_tested()):
        return None
    return (f"torch {version} is newer than every torch gemm-predictor was tested with "
            f"({', '.join(sorted(FROZEN, key=_version_key))}); every GEMM keeps plain torch.compile's choice")


def warn_if_untested_torch() -> bool:
    """True when the installed torch is newer than every tested one; the first call in a process logs the line."""
    message = untested_torch()
    if message is None:
        return False
    with _warned_lock:
        first = ("untested_torch", "", "") not in _warned
        _warned.add(("untested_torch", "", ""))
    if first:
        log.warning("gemm-predictor: %s", message)
    return True


# ---------------------------------------------------------------------------------------------
# The installed torch
# ---------------------------------------------------------------------------------------------

def _as_configs(items: Any, what: str) -> tuple[Config, ...]:
    """GemmConfig objects as plain tuples; anything this module cannot describe raises (-> frozen fallback)."""
    out = []
    for c in items:
        if getattr(c, "hint_override", None) is not None or getattr(c, "group_m", 8) != 8:
            raise ValueError(f"{what} holds {c!r}, which a Candidate (GROUP_M 8, no hint) cannot describe")
        out.append((int(c.block_m), int(c.block_n), int(c.block_k), int(c.num_stages), int(c.num_warps)))
    return tuple(out)


def read_installed() -> InductorConfigs:
    """The installed torch's CUDA lists, read from the template heuristics Inductor itself uses.

    Raises (ImportError, AttributeError, ValueError) when this torch has no such classes or lists this module
    cannot describe; ``installed_configs`` then falls back to a frozen copy."""
    import torch

    try:  # torch 2.14 moved the heuristics; the old path is a shim it says it will remove
        from torch._inductor.heuristics.template import triton as th
    except ImportError:
        from torch._inductor.template_heuristics import triton as th

    mm = th.CUDAMMTemplateConfigHeuristic()  # singletons: Inductor shares these instances
    tma = th.CUDAPersistentTMATemplateConfigHeuristic()
    int8 = th.CUDAInt8MMTemplateConfigHeuristic()
    exhaustive = _as_configs(mm.exhaustive_configs, "exhaustive_configs")
    if _as_configs(tma.exhaustive_configs, "TMA exhaustive_configs") != exhaustive:
        raise ValueError("the persistent TMA template has exhaustive configs of its own, which spaces does not model")
    scaled = _scaled_lists(th)
    return InductorConfigs(release(torch.__version__), _as_configs(mm.mm_configs, "mm_configs"),
                           _as_configs(int8.mm_configs, "int8 mm_configs"),
                           _as_configs(tma.mm_configs, "persistent_mm_configs"), exhaustive, source="installed torch",
                           scaled_mm=scaled[0], scaled_persistent_mm=scaled[1])


def _scaled_lists(th: Any) -> tuple[tuple[Config, ...] | None, tuple[Config, ...] | None]:
    """The installed torch's fp8 scaled-mm lists, from the CUDA base heuristic that the scaled templates' heuristics
    copy them from (``CUDAScaledMMTemplateConfigHeuristic.mm_configs = self.scaled_mm_configs``, 2.13); (None, None)
    where this torch has no such lists, so the mm lists stay readable whatever happens to the scaled ones."""
    try:
        base = th.CUDAConfigHeuristic()
        return (_as_configs(base.scaled_mm_configs, "scaled_mm_configs"),
                _as_configs(base.scaled_persistent_mm_configs, "scaled_persistent_mm_configs"))
    except (AttributeError, ValueError, TypeError) as exc:
        log.warning("cannot read the installed torch's fp8 scaled-mm configs (%s); scaled_mm spaces are unavailable", exc)
        return None, None


@functools.lru_cache(maxsize=1)
def installed_configs() -> InductorConfigs:
    """The lists the installed torch's Inductor tries: read live, else the frozen copy for its release."""
    import torch

    try:
        return read_installed()
    except Exception as exc:  # noqa: BLE001 -- any torch whose heuristics moved: the frozen copy is the answer
        log.warning("cannot read the installed torch %s's Inductor GEMM configs (%s: %s); using the frozen copy",
                    torch.__version__, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return frozen_configs(torch.__version__)


def configs_for(torch_version: str | None = None) -> InductorConfigs:
    """``None``: the installed torch's lists; a version: its frozen copy, or the installed lists when the
    installed torch is that release (the live read is the more faithful one)."""
    if torch_version is None:
        return installed_configs()
    import torch

    if release(torch_version) == release(torch.__version__):
        return installed_configs()
    return frozen_configs(torch_version)


# ---------------------------------------------------------------------------------------------
# Model metadata
# ---------------------------------------------------------------------------------------------

TORCH_KEY = "torch_version"  # the torch release whose lists the training data was collected with
FINGERPRINT_KEY = "space_fingerprint"

_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def space_metadata(torch_version: str | None) -> dict[str, str | None]:
    """What ``train`` records: the torch the training data was collected with (its dataset metadata; None: the
    installed one) and the fingerprint of that release's lists; null for a release with neither a frozen copy
    nor the installed torch to read (a nearby release's fingerprint would claim lists nobody checked)."""
    import torch

    version = torch_version or torch.__version__
    if release(version) == release(torch.__version__):
        fingerprint: str | None = installed_configs().fingerprint
    elif release(version) in FROZEN:
        fingerprint = FROZEN[release(version)].fingerprint
    else:
        fingerprint = None
        log.warning("no Inductor config lists known for torch %s (frozen: %s; installed: %s); the model's space "
                    "fingerprint is left null", version, ", ".join(FROZEN), torch.__version__)
    return {TORCH_KEY: version, FINGERPRINT_KEY: fingerprint}


def warn_if_space_changed(meta: dict[str, Any], where: str) -> bool:
    """Warn once per model and fingerprint pair when the installed torch lists other configs than the model's
    training data had: the hook still prunes (it ranks whatever Inductor offers), but candidates the model never
    saw are extrapolation. True when they differ; False when equal or the metadata records no fingerprint."""
    recorded = meta.get(FINGERPRINT_KEY)
    if not isinstance(recorded, str):
        return False
    here = installed_configs()
    if here.fingerprint == recorded:
        return False
    key = (where, recorded, here.fingerprint)
    with _warned_lock:
        if key in _warned:
            return True
        _warned.add(key)
    log.warning("%s was trained on torch %s's GEMM configs (space %s); the installed torch %s lists others (%s): "
                "candidates it never saw are ranked by extrapolation; retrain on data collected with this torch",
                where, meta.get(TORCH_KEY, "?"), recorded, here.torch, here.fingerprint)
    return True
