"""The AutoHeuristic baseline: torch's shipped learned decision tree for mm config ranking on H100.

torch ships ``torch/_inductor/autoheuristic/artifacts/_MMRankingH100.py`` (identical tree in torch
2.11 and 2.13). With ``TORCHINDUCTOR_AUTOHEURISTIC_USE=mm`` (opt-in; off by default) ``tuned_mm``
builds an ``AHContext`` (m, k, n, operand dtypes, strides, contiguity, tf32), augments it with
``mm_operations()`` (m*k, m*n, k*n, arith_intensity), asks the tree for a ranked list of choice
names (``extern_mm`` or ``type=triton_BLOCK-M=.._BLOCK-K=.._BLOCK-N=.._numstages=.._numwarps=..``),
keeps those present among the offered choices, takes the first ``top_k=10``, appends ``extern_mm``
if missing, and autotunes only that list. This ranker replays that ordering on dataset rows.

Reproduced exactly (given the rows):
- the context features, computed as ``kernel/mm.py::mm_autoheuristic`` does, with strides derived
  from ``layout_a``/``layout_b`` for densely packed operands (A ``row``: (k, 1), ``col``: (1, m);
  B ``row``: (n, 1), ``col``: (1, k)) and the same ``mm_operations()`` augmentation (torch's own
  code is called for the context, the precondition and the tree);
- the precondition (``metadata.name == "mm"``, shared memory 232448 B and capability (9, 0), read
  from the ``DeviceInfo``) and that only ``tuned_mm`` consults the tree: other ops (addmm, bmm,
  int_mm) and ``out_dtype != dtype`` get no ranking;
- the choice names (Inductor's ``TritonTemplateCaller.autoheuristic_id``: tile shape as
  (BLOCK_M, BLOCK_K, BLOCK_N), stages, warps; GROUP_M is not part of the name) and the ordering:
  tree order filtered to the candidates present, first ``top_k``, then ``extern_mm`` if it was
  not among them; the tree's remaining available choices follow (torch drops them; keeping them
  in tree order only matters for k > top_k + 1).

Not reproduced:
- Inductor offers the tree the union of the ``default`` configs and its extra ``mm-ah`` configs;
  a dataset holds only the configs of its space, so a tree choice outside it cannot be ranked and
  the next available one moves up (torch would have benchmarked the extra config instead);
- real strides: padded or sliced operands (non-dense strides) are not in the dataset contract;
- persistent-TMA rows (same ``autoheuristic_id`` as a ``triton::mm`` config in torch, which keeps
  only one caller per id) and decompose-K rows (``subgraph_*``, never in the tree) are unranked,
  as are all rows the tree does not name: they get the lowest score, so among them the
  evaluation's tie-break (row order) decides; torch would not benchmark them at all;
- ``using_tf32`` (fp32 only) follows the ``allow_tf32`` hyper-parameter, not the process setting
  (the H100 tree does not branch on it, so rankings are unaffected).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
import pandas as pd

from ..core.device import DeviceInfo

logger = logging.getLogger(__name__)

ARTIFACT = "torch._inductor.autoheuristic.artifacts._MMRankingH100"
UNRANKED_SCORE = -1.0e6


class AutoHeuristicUnavailable(RuntimeError):
    """The installed torch does not ship the MMRankingH100 artifact (or torch is not installed)."""


@functools.lru_cache(maxsize=1)
def _load_tree() -> Any:
    try:
        import importlib

        module = importlib.import_module(ARTIFACT)
    except ImportError as exc:
        raise AutoHeuristicUnavailable(
            f"the autoheuristic baseline needs torch with {ARTIFACT.replace('.', '/')}.py ({exc})") from None
    return module.MMRankingH100()


def choice_name(row: Any) -> str | None:
    """Inductor's ``autoheuristic_id`` of a dataset row, or None where no tree choice can name it."""
    if row.family == "aten":
        return "extern_mm" if row.aten_op == "mm" else None
    if row.family != "triton_mm":
        return None
    return (f"type=triton_BLOCK-M={int(row.block_m)}_BLOCK-K={int(row.block_k)}_BLOCK-N={int(row.block_n)}"
            f"_numstages={int(row.num_stages)}_numwarps={int(row.num_warps)}")


def operand_strides(m: int, n: int, k: int, layout_a: str, layout_b: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Strides of densely packed A (m x k) and B (k x n); ``col`` = transpose of a contiguous tensor."""
    stride_a = (k, 1) if layout_a == "row" else (1, m)
    stride_b = (n, 1) if layout_b == "row" else (1, k)
    return stride_a, stride_b


def _is_contiguous(size: tuple[int, int], stride: tuple[int, int]) -> bool:
    """``is_contiguous_strides_for_shape`` as Inductor's layouts use it (size-1 dims ignore their stride)."""
    expected = (size[1], 1)
    return all(s == 1 or a == e for a, e, s in zip(stride, expected, size))


def build_context(m: int, n: int, k: int, dtype: str, layout_a: str, layout_b: str, allow_tf32: bool = False) -> Any:
    """The ``AHContext`` ``mm_autoheuristic`` builds, augmented with ``mm_operations()``."""
    import torch
    from torch._inductor.autoheuristic.autoheuristic_utils import AHContext, mm_operations

    torch_dtype = getattr(torch, dtype)
    stride_a, stride_b = operand_strides(m, n, k, layout_a, layout_b)
    context = AHContext()
    context.add_feature("m", m)
    context.add_feature("k", k)
    context.add_feature("n", n)
    context.add_feature("mat1_dtype", torch_dtype, is_categorical=True)
    context.add_feature("mat2_dtype", torch_dtype, is_categorical=True)
    for i, s in enumerate(stride_a):
        context.add_feature(f"mat1_stride_{i}", s)
    for i, s in enumerate(stride_b):
        context.add_feature(f"mat2_stride_{i}", s)
    context.add_feature("mat1_iscontig", _is_contiguous((m, k), stride_a), is_categorical=True)
    context.add_feature("mat2_iscontig", _is_contiguous((k, n), stride_b), is_categorical=True)
    using_tf32: Any = "not_float_32" if dtype != "float32" else bool(allow_tf32)
    context.add_feature("using_tf32", using_tf32, is_categorical=True)
    context.apply_operations(mm_operations())
    return context


class AutoHeuristicRanker:
    """Ranks rows by torch's MMRankingH100 tree; ``fit`` is a no-op (the tree ships with torch).

    ``top_k`` is the number of tree choices ``tuned_mm`` keeps before appending ``extern_mm``
    (10 in torch 2.11/2.13). ``check_device=False`` applies the tree on any GPU (for studies; torch
    itself refuses a device other than 232448 B shared memory and capability 9.0).
    """

    name = "autoheuristic"

    def __init__(self, top_k: int = 10, check_device: bool = True, allow_tf32: bool = False) -> None:
        self.top_k = top_k
        self.check_device = check_device
        self.allow_tf32 = allow_tf32

    def fit(self, rows: pd.DataFrame, device: DeviceInfo) -> "AutoHeuristicRanker":
        self.fitted_ = True
        return self

    # the saved form (predictor.artifacts.model_folder): the tree ships with torch, nothing learned is saved
    def state_json(self) -> dict:
        return {}

    def load_state_json(self, state) -> "AutoHeuristicRanker":
        if state != {}:
            raise ValueError("ranker 'autoheuristic' learns nothing; its saved state must be {}")
        return self.fit(pd.DataFrame(), None)

    def device_ok(self, device: DeviceInfo) -> bool:
        """torch's precondition for this tree, evaluated with torch's own check on our DeviceInfo."""
        if not self.check_device:
            return True
        from torch._inductor.autoheuristic.autoheuristic_utils import AHMetadata

        tree = _load_tree()
        try:
            capability = tuple(int(x) for x in str(device.cc).split("."))
        except ValueError:
            return False
        meta = AHMetadata(shared_memory=device.smem_per_block, device_capa=capability, choices=[], name="mm")
        return bool(tree.check_precondition(meta, None))

    def _ranked_names(self, problem: pd.Series) -> list[str] | None:
        """The tree's ordered choice names for one problem, or None where torch would not ask it."""
        op, dtype, out_dtype = problem["op"], problem["dtype"], problem["out_dtype"]
        if op != "mm" or dtype not in ("float16", "bfloat16", "float32") or out_dtype not in ("", dtype):
            return None
        context = build_context(int(problem["m"]), int(problem["n"]), int(problem["k"]), dtype,
                                problem["layout_a"], problem["layout_b"], self.allow_tf32)
        tree = _load_tree()
        ranked = tree.get_best_choices(context)
        if ranked is None:
            return None
        return [c for c in (tree.get_choice(idx) for _, idx in ranked) if c is not None]

    def _order(self, ranked: list[str], present: set[str]) -> list[str]:
        """torch's kept list (first top_k available + extern_mm), then the remaining available ones."""
        available = [c for c in dict.fromkeys(ranked) if c in present]
        kept = available[: self.top_k]
        if "extern_mm" in present and "extern_mm" not in kept:
            kept.append("extern_mm")
        return kept + [c for c in available if c not in kept]

    def score(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        scores = np.full(len(rows), UNRANKED_SCORE)
        if len(rows) == 0:
            return scores
        if not self.device_ok(device):
            logger.warning("autoheuristic: torch's MMRankingH100 does not apply on %s (cc %s, %s B shared memory); "
                           "all rows unranked", device.gpu, device.cc, device.smem_per_block)
            return scores
        names = np.array([choice_name(r) for r in rows[["family", "aten_op", "block_m", "block_n", "block_k",
                                                         "num_stages", "num_warps"]].itertuples(index=False)],
                         dtype=object)
        positions = pd.Series(np.arange(len(rows))).groupby(rows["problem_id"].to_numpy(), sort=False)
        first = rows.drop_duplicates("problem_id").set_index("problem_id")
        for pid, idx in positions.indices.items():
            ranked = self._ranked_names(first.loc[pid])
            if not ranked:
                continue
            present = {n for n in names[idx] if n is not None}
            rank_of = {c: i for i, c in enumerate(self._order(ranked, present))}
            for i in idx:
                if names[i] in rank_of:
                    scores[i] = -float(rank_of[names[i]])
        return scores

    def applies(self, rows: pd.DataFrame, device: DeviceInfo) -> np.ndarray:
        """Per row: did the tree rank it? A problem "applies" when any of its rows is ranked."""
        return self.score(rows, device) > UNRANKED_SCORE
