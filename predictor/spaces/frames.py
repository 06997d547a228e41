"""Spaces as one long DataFrame (one row per problem x candidate), for the collectors and the baselines. pandas is
imported where a frame is built, never by the hook."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.candidate import CANDIDATE_FIELDS, Candidate
from ..core.device import DeviceInfo
from ..core.problem import PROBLEM_FIELDS, Problem
from .enumeration import _check_space, enumerate_space

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

_PROBLEM_COLUMNS = PROBLEM_FIELDS + ("problem_id",)
_CANDIDATE_COLUMNS = CANDIDATE_FIELDS + ("candidate",)


def space_frame(problems: Iterable[Problem], space: str = "default", device: Optional[DeviceInfo] = None,
                tma: bool = True, hint: Optional[int] = None, torch_version: Optional[str] = None) -> pd.DataFrame:
    """One row per problem x candidate: problem fields (+ ``problem_id``), candidate fields
    (+ ``candidate`` key) and ``inductor_rank`` (position in Inductor's list, 0 = first).

    Built as two small tables (distinct problems, distinct candidates) gathered by integer index,
    so an EXHAUSTIVE frame of a million rows costs array takes, not a million Python dicts.
    """
    import pandas as pd

    _check_space(space)
    problem_rows: list[tuple] = []
    candidate_ids: dict[Candidate, int] = {}
    cidx: list[int] = []
    counts: list[int] = []
    for p in problems:
        cands = enumerate_space(p, space, device, tma, hint, torch_version=torch_version)
        problem_rows.append(tuple(getattr(p, f) for f in PROBLEM_FIELDS) + (p.problem_id,))
        cidx.extend([candidate_ids.setdefault(c, len(candidate_ids)) for c in cands])
        counts.append(len(cands))
    ptable = pd.DataFrame(problem_rows, columns=list(_PROBLEM_COLUMNS))
    ctable = pd.DataFrame([tuple(getattr(c, f) for f in CANDIDATE_FIELDS) + (c.key,) for c in candidate_ids],
                          columns=list(_CANDIDATE_COLUMNS))
    count_arr = np.asarray(counts, dtype=np.int64)
    pidx = np.repeat(np.arange(len(counts)), count_arr)
    starts = np.repeat(np.cumsum(count_arr) - count_arr, count_arr)
    frame = pd.concat([ptable.take(pidx).reset_index(drop=True),
                       ctable.take(np.asarray(cidx, dtype=np.int64)).reset_index(drop=True)], axis=1)
    frame["inductor_rank"] = np.arange(len(pidx), dtype=np.int64) - starts
    log.debug("space_frame: %d problems, %d rows, %d distinct candidates (%s)",
              len(counts), len(frame), len(candidate_ids), space)
    return frame
