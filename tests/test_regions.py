"""Region models (predictor.core.regions): which GEMMs are short-unaligned, the decide gap there, how the hook finds and
uses the region's model beside the GPU's main model, ``train --region``, and the token-mixing corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from collectors.corpus import build_token_corpus, load_corpus
from collectors.corpus_tokens import TOKEN_FAMILIES
from predictor.artifacts.model_folder import load_model, read_metadata
from predictor.core.candidate import to_template_kwargs
from predictor.core.device import DeviceInfo
from predictor.core.runtime_features import runtime_feature_matrix
from predictor.core.problem import Problem
from predictor.core.regions import SHORT_UNALIGNED, region_of, rows_in_region, short_unaligned
from predictor.runtime.choices import policy
from predictor.runtime.choices.pruner import GemmPruner, HookSettings
from predictor.runtime.choices.discovery import find_model
from predictor.artifacts.schema import read_dataset
from predictor.spaces import enumerate_space
from predictor.testing.fakes import FakeInputs, FakeNode, ktc

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
REGION_MODEL = MODELS / "h100-short-unaligned-lgbm-all"
H100 = DeviceInfo.from_metadata(read_metadata(MODELS / "h100-default-lgbm-all"))
H200 = DeviceInfo.from_metadata(read_metadata(MODELS / "h200-default-lgbm-all"))
TOKEN_DATASET = ROOT / "datasets" / "nvidia-h100" / "token_mixing.parquet"
TOKEN_CORPUS = ROOT / "datasets" / "corpus" / "token_mixing_v1.parquet"


@pytest.mark.parametrize("op, dtype, m, n, k, inside", [
    ("addmm", "float16", 24576, 196, 384, True),    # MLP-Mixer-B/16's token MLP, second layer (finding 73)
    ("addmm", "bfloat16", 24576, 384, 196, True),   # its first layer: the token count is K
    ("mm", "float16", 12288, 196, 196, True),       # ResMLP / gMLP token projection
    ("mm", "float16", 24576, 192, 384, False),      # aligned width
    ("mm", "float16", 24576, 1030, 384, False),     # unaligned but not short
    ("mm", "float32", 24576, 196, 384, False),      # float32 keeps the main model and its own floor
    ("bmm", "float16", 24576, 196, 384, False),     # batched GEMMs are not in the region
    ("addmm", "float16", 768, 196, 384, False),     # too small to matter (< 2**27 multiply-adds)
    ("mm", "float16", 197, 768, 3072, False),       # unaligned M (a ViT's tokens at batch 1) is not short N or K
])
def test_short_unaligned_takes_token_mixing_and_nothing_else(op, dtype, m, n, k, inside):
    problem = Problem(op, m, n, k, dtype)
    assert region_of(problem) == (SHORT_UNALIGNED if inside else None)


def test_the_array_form_agrees_with_the_scalar_form():
    rows = read_dataset(TOKEN_DATASET).drop_duplicates("problem_id")
    mask = rows_in_region(SHORT_UNALIGNED, rows)
    scalar = [short_unaligned(r.op, r.dtype, r.m, r.n, r.k) for r in rows.itertuples()]
    assert mask.tolist() == scalar
    assert 0 < mask.sum() < len(rows)  # float32 and small problems of the corpus lie outside
    with pytest.raises(ValueError, match="unknown region 'nope'"):
        rows_in_region("nope", rows)


def test_the_decide_gap_is_floored_at_zero_where_the_region_model_ranks(monkeypatch):
    token_mixing, aligned = Problem("addmm", 24576, 196, 384, "float16"), Problem("addmm", 24576, 192, 384, "float16")
    assert policy.decide_gap_for(token_mixing, -2.5, SHORT_UNALIGNED) == policy.REGION_GAPS[SHORT_UNALIGNED] == 0.0
    assert policy.decide_gap_for(token_mixing, -2.5) == -2.5  # no region model (the H200): the main model's gap
    assert policy.decide_gap_for(aligned, -2.5, region_of(aligned)) == -2.5
    assert policy.decide_gap_for(token_mixing, 1.0, SHORT_UNALIGNED) == 1.0  # a floor, not a value
    # part of the hook's cache key: a changed region floor is another key
    from predictor.runtime.choices.pruner import GemmPruner
    from predictor.runtime.choices.settings import HookSettings

    before = GemmPruner(HookSettings(model=None)).uuid()
    monkeypatch.setitem(policy.REGION_GAPS, SHORT_UNALIGNED, 1.0)
    assert GemmPruner(HookSettings(model=None)).uuid() != before


def test_a_region_model_is_never_taken_for_the_main_model():
    assert find_model(H100) == MODELS / "h100-default-lgbm-all"
    assert find_model(H100, region=SHORT_UNALIGNED) == REGION_MODEL
    assert find_model(H200, region=SHORT_UNALIGNED) is None  # no token-mixing labels of the H200
    assert read_metadata(REGION_MODEL)["region"] == SHORT_UNALIGNED


def _choices(problem: Problem) -> list:
    return [ktc(uid, **kw) for uid, kw in
            (to_template_kwargs(c) for c in enumerate_space(problem, "default", H100))]


def _inputs(m: int, n: int, k: int) -> FakeInputs:
    """fp16 ``F.linear``: A (m, k) row-major, B (k, n) column-major."""
    return FakeInputs(FakeNode((m, k), (k, 1), torch.float16), FakeNode((k, n), (1, k), torch.float16))


def test_the_hook_scores_region_gemms_with_the_region_model():
    pruner = GemmPruner(HookSettings(device=H100, policy="decide")).load()
    assert pruner.model_path == MODELS / "h100-default-lgbm-all" and set(pruner.region_models) == {SHORT_UNALIGNED}
    region_ranker, region_meta = load_model(REGION_MODEL)
    main_ranker, main_meta = load_model(MODELS / "h100-default-lgbm-all")
    for (m, n, k), inside in (((24576, 196, 384), True), ((24576, 192, 384), False)):
        problem = Problem("mm", m, n, k, "float16", layout_b="col")
        choices = _choices(problem)
        before = pruner.stats()["region_scored"]
        kept = pruner.filter(choices, _inputs(m, n, k), "mm")
        assert len(kept) == 1
        assert pruner.stats()["region_scored"] == before + inside
        key, scores = next((key, v) for key, v in pruner._scores.items() if key[0].n == n)
        ranker, meta = (region_ranker, region_meta) if inside else (main_ranker, main_meta)
        cands = list(enumerate_space(problem, "default", H100))
        expected = ranker.score_features(runtime_feature_matrix(key[0], cands, [None] * len(cands),
                                                                DeviceInfo.from_metadata(meta)))
        np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-6)
        if inside:  # its labels: a Triton template runs this GEMM 1.4x faster than cuBLAS's 2-byte-aligned kernel
            assert "aten" not in kept[0].template.uid


def test_the_region_model_is_in_the_cache_key_and_left_out_for_a_named_model():
    discovered = GemmPruner(HookSettings(device=H100)).load()
    named = GemmPruner(HookSettings(device=H100, model=str(MODELS / "h100-default-lgbm-all"))).load()
    assert named.region_models == {}  # a model the caller names ranks every GEMM
    assert discovered.uuid() != named.uuid()


def test_train_with_a_region_fits_on_the_region_rows_alone(tmp_path):
    from predictor.offline.train import train

    meta = train(TOKEN_DATASET, "tree", tmp_path / "m", region=SHORT_UNALIGNED, progress=False)
    rows = read_dataset(TOKEN_DATASET)
    assert meta["region"] == SHORT_UNALIGNED
    assert meta["dataset"]["problems"] == rows.loc[rows_in_region(SHORT_UNALIGNED, rows), "problem_id"].nunique()
    assert "Region model" in (tmp_path / "m" / "MODEL_CARD.md").read_text()
    assert find_model(H100, roots=[tmp_path]) is None  # never a main model
    assert find_model(H100, roots=[tmp_path], region=SHORT_UNALIGNED) == tmp_path / "m"


def test_the_committed_token_corpus_is_the_one_the_code_builds():
    built = build_token_corpus()
    committed = load_corpus(TOKEN_CORPUS)
    assert sorted(built["problem_id"]) == sorted(committed["problem_id"])
    assert set(committed["family_tag"].str.split(":").str[1]) == {f.name for f in TOKEN_FAMILIES}
    labelled = read_dataset(TOKEN_DATASET)
    assert set(labelled["problem_id"]) == set(committed["problem_id"])
    assert labelled.attrs["metadata"]["corpus_sha256"] == json.loads(
        json.dumps(committed.attrs["metadata"]))["corpus_sha256"]


def test_region_eval_holds_each_group_out_and_scores_both_models():
    from predictor.offline.region_eval import evaluate, markdown

    table = evaluate(MODELS / "h100-default-lgbm-all", [TOKEN_DATASET], SHORT_UNALIGNED)
    rows = read_dataset(TOKEN_DATASET)
    assert set(table["problem_id"]) <= set(rows.loc[rows_in_region(SHORT_UNALIGNED, rows), "problem_id"])
    assert table["group"].nunique() == len(TOKEN_FAMILIES) and table["seen"].all()  # the first dataset counts as seen
    assert ((table.filter(like="gap") > 0) & (table.filter(like="gap") <= 1)).all().all()
    # labels of the other families lift the held-out family above cuBLAS alone (0.78 of the best kernel)
    assert np.exp(np.log(table["region gap 0"]).mean()) > np.exp(np.log(table["cublas"]).mean()) + 0.1
    assert markdown(table).splitlines()[2].startswith("| in the main model's fit | ")
