"""The hook's way into the features: a Problem and its Candidates straight into numpy, where building a DataFrame
cost more than the model. Same columns, same arithmetic (``features._matrix``), the same features bit for bit as
``features.feature_matrix(features.ranker_rows(...))``."""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from .candidate import Candidate
from .device import DeviceInfo
from .feature_names import N_FEATURES
from .features import _CANDIDATE_NUMERIC, _PROBLEM_NUMERIC, Values, _matrix
from .problem import Problem

_LISTS: dict[tuple[int, ...], tuple] = {}
_LISTS_SIZE = 32


def runtime_feature_matrix(problem: Problem, cands: list[Candidate], hints: list[int | None],
                           device: DeviceInfo) -> np.ndarray:
    """``feature_matrix(ranker_rows(problem, cands, hints), device)`` without building the DataFrame: the same
    columns (a problem field is one value, M each choice's multi-kernel hint where it has one), reduced the way
    ``feature_matrix`` reduces them, so the two agree bit for bit (``tests/test_runtime_features.py``). What depends
    on the candidates alone is computed once per list of Candidates (``_LISTS``)."""
    if not cands:
        return np.zeros((0, N_FEATURES), dtype=np.float32)
    m: Values = float(problem.m)
    if hints.count(None) != len(hints):  # (C-level counts: the exhaustive list has 2400 choices)
        ms = np.array([problem.m if h is None else int(h) for h in hints], dtype=np.float64)
        m = float(ms[0]) if (ms == ms[0]).all() else ms  # as _numeric(scalar_if_constant=True)
    numbers = {"b": float(problem.b), "m": m, "n": float(problem.n), "k": float(problem.k),
               "align": float(problem.align)}
    key = tuple(map(id, cands))
    entry = _LISTS.get(key)
    if entry is None:
        entry = (tuple(cands), *_candidate_columns(cands), {})
        if len(_LISTS) >= _LISTS_SIZE:
            _LISTS.clear()  # (atomic: compiles may run on several threads)
        _LISTS[key] = entry
    _, table, family, aten_op, parts = entry
    strs = {name: (None, [getattr(problem, name)]) for name in ("op", "dtype", "out_dtype", "layout_a", "layout_b")}
    strs["family"], strs["aten_op"] = family, aten_op
    return _matrix(len(cands), [numbers[c] for c in _PROBLEM_NUMERIC], table, strs, device, parts)


def _candidate_columns(cands: list[Candidate]) -> tuple[np.ndarray, tuple, tuple]:
    """The candidates' ``_CANDIDATE_NUMERIC`` as a (7, rows) array, their families and aten ops factorised."""
    # one flat iterator into numpy: a fifth of the time of np.array over a list of tuples
    table = np.fromiter(chain.from_iterable([c.numbers for c in cands]), dtype=np.float64,
                        count=len(cands) * len(_CANDIDATE_NUMERIC)).reshape(len(cands), -1)
    return (np.ascontiguousarray(table.T), _factorise([c.family for c in cands]),
            _factorise([c.aten_op for c in cands]))


def _factorise(values: list) -> tuple[np.ndarray | None, list]:
    """``_string_codes`` for one Python list: (None, [value]) when it holds one value, else codes into the distinct
    values in order of appearance; None (missing) gets code -1. (dict and map work at C speed: 2400 values.)"""
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1 and distinct[0] is not None:
        return None, distinct
    uniques = [v for v in distinct if v is not None]
    index: dict[Any, int] = {v: i for i, v in enumerate(uniques)}
    index[None] = -1
    return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values)), uniques
