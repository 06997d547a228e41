"""The shape corpus: deterministic, big and varied enough, every row a valid bounded Problem, committed file fresh."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors import corpus as C
from predictor.offline.split import problem_group
from predictor.core.problem import Problem

COMMITTED = Path(__file__).resolve().parents[1] / "datasets" / "corpus" / "corpus_v1.parquet"


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return C.build_corpus(seed=0)


def _kind(df: pd.DataFrame) -> pd.Series:
    return df["family_tag"].str.split(":").str[0]


def test_deterministic(df):
    again = C.build_corpus(seed=0)
    pd.testing.assert_frame_equal(df, again)
    assert C.corpus_sha256(df) == C.corpus_sha256(again)
    assert C.corpus_sha256(df.iloc[::-1]) == C.corpus_sha256(df)  # the hash names the set, not the order
    assert C.corpus_sha256(C.build_corpus(seed=1)) != C.corpus_sha256(df)


def test_size_and_distinct(df):
    assert df["problem_id"].is_unique
    assert 4000 <= len(df) <= 6000
    assert list(df.columns) == list(C.CORPUS_COLUMNS)


def test_families_and_kinds(df):
    kinds = set(_kind(df))
    assert kinds == set(C.KINDS)
    models = df.loc[_kind(df).isin(C.MODEL_KINDS), "group"].unique()
    assert len(models) >= 15
    for kind in C.MODEL_KINDS:
        assert any(g.startswith(kind + ":") for g in models), kind
    model = df[_kind(df).isin(C.MODEL_KINDS)]
    passes = set(model["family_tag"].str.split(":").str[-1])
    assert {"fwd", "bwd_in", "bwd_w"} <= passes
    assert set(df["op"]) == {"mm", "addmm", "bmm", "int_mm"}


def test_groups(df):
    expected = [problem_group(t, p) for t, p in zip(df["family_tag"], df["problem_id"])]
    assert df["group"].tolist() == expected
    model = df[_kind(df).isin(C.MODEL_KINDS)]
    assert (model["group"] == model["family_tag"].str.split(":").str[:2].str.join(":")).all()
    assert df.loc[_kind(df) == "random", "group"].nunique() > 1  # random shapes are split in blocks


def test_odd_token_counts(df):
    model = df[_kind(df).isin(C.MODEL_KINDS) & df["family_tag"].str.endswith(":fwd")]
    odd = set(model.loc[model["m"] % 2 == 1, "m"])
    assert {1, 7, 77, 197, 333, 1499, 2047, 4097} <= odd
    assert len(odd) >= 20


def test_layouts(df):
    fwd = df[df["family_tag"].str.endswith(":fwd") & df["op"].isin(["mm", "addmm"])]
    assert (fwd["layout_b"] == "col").any() and (fwd["layout_b"] == "row").any()  # F.linear and GPT-2 Conv1D
    bwd_w = df[df["family_tag"].str.endswith(":bwd_w")]
    assert len(bwd_w) > 0 and (bwd_w["layout_a"] == "col").all()
    bwd_in = df[df["family_tag"].str.endswith(":bwd_in")]
    assert (bwd_in["layout_a"] == "row").all() and (bwd_in["layout_b"] == "row").any()
    assert {"row", "col"} == set(df["layout_a"]) == set(df["layout_b"])
    gpt2 = df.set_index("family_tag")["layout_b"]
    assert set(gpt2["llm:gpt2-small:c_fc:fwd"]) == {"row"}  # HF Conv1D stores W as (in, out)
    assert set(gpt2["llm:gpt2-small:c_fc:bwd_in"]) == {"col"}
    assert set(gpt2["llm:gpt2-small:lm_head:fwd"]) == {"col"}  # the tied lm_head is an F.linear


def test_family_definitions_fail_early():
    with pytest.raises(ValueError, match="kind 'audio'"):
        C.ModelFamily("audio", "x", "", (C.Linear("fc", 8, 8),), (64,), ())
    with pytest.raises(ValueError, match="linear or conv1d"):
        C.ModelFamily("llm", "x", "", (C.Linear("fc", 8, 8, weight="dense"),), (64,), ())


def test_dtypes_and_int8(df):
    share = df["dtype"].value_counts(normalize=True)
    assert share["float16"] + share["bfloat16"] > 0.5 and share["float32"] > 0.05
    assert 0.05 <= share["int8"] <= 0.10
    i8 = df[df["dtype"] == "int8"]
    assert (i8["op"] == "int_mm").all() and (df.loc[df["op"] == "int_mm", "dtype"] == "int8").all()
    assert (i8["m"] > 16).all() and (i8["k"] % 8 == 0).all() and (i8["n"] % 8 == 0).all()
    assert (i8["layout_a"] == "row").all() and (i8["layout_b"] == "row").all()
    assert (i8["out_dtype"] == "int32").all() and (i8["b"] == 1).all()


def test_rows_are_valid_bounded_problems(df):
    for row in df.itertuples(index=False):
        p = Problem(row.op, row.m, row.n, row.k, row.dtype, b=row.b, out_dtype=row.out_dtype,
                    layout_a=row.layout_a, layout_b=row.layout_b, align=row.align)
        assert p.problem_id == row.problem_id
        assert C.within_budget(row.b, row.m, row.n, row.k, row.dtype)
        assert row.align in (1, 2, 4, 8, 16)
    assert ((df["op"] == "bmm") | (df["b"] == 1)).all()


def test_special_families(df):
    kind = _kind(df)
    sk = df[kind == "splitk"]
    assert sk["m"].between(16, 256).all() and sk["n"].between(16, 256).all()
    assert sk["k"].max() == 65536 and (sk["k"] >= 16 * sk[["m", "n"]].max(axis=1)).all()
    un = df[kind == "unaligned"]
    assert ((un["n"] % 8 != 0) | (un["k"] % 8 != 0)).all() and (un["k"] % 2 == 1).any() and (un["n"] % 2 == 1).any()
    ms = df[kind == "msweep"]
    assert ms["group"].nunique() >= 6
    for group, rows in ms.groupby("group"):
        assert 30 <= len(rows) <= 45, group
        assert rows[["k", "n", "dtype", "layout_b"]].drop_duplicates().shape[0] == 1, group
        ms_m = set(rows["m"])
        assert {2**i for i in range(15)} <= ms_m and any(m % 2 and m > 1 for m in ms_m)
        assert rows["family_tag"].iloc[0] == f"msweep:{rows['k'].iloc[0]}x{rows['n'].iloc[0]}" == group


def test_committed_file_is_fresh(df):
    committed = C.load_corpus(COMMITTED)
    meta = committed.attrs["metadata"]
    assert meta["seed"] == 0 and meta["count"] == len(df) == len(committed)
    assert meta["corpus_sha256"] == C.corpus_sha256(df) == C.corpus_sha256(committed)
    pd.testing.assert_frame_equal(committed, df)


def test_cli_roundtrip(tmp_path, capsys):
    out = tmp_path / "c.parquet"
    assert C.main(["--out", str(out), "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert "problems, seed 3" in text and "per op" in text
    loaded = C.load_corpus(out)
    assert loaded.attrs["metadata"]["seed"] == 3
    assert loaded.attrs["metadata"]["corpus_sha256"] == C.corpus_sha256(loaded)


def test_load_refuses_bad_files(tmp_path, df):
    missing = tmp_path / "missing.parquet"
    pq.write_table(pa.Table.from_pandas(df.drop(columns=["group"]), preserve_index=False), missing)
    with pytest.raises(C.CorpusError, match="missing corpus columns group"):
        C.load_corpus(missing)
    tampered = tmp_path / "tampered.parquet"
    C.write_corpus(df, tampered, seed=0)
    table = pq.read_table(tampered)
    pq.write_table(table.slice(1), tampered)  # keeps the metadata, loses a problem: the footer digest sees it
    with pytest.raises(C.CorpusError, match="row count do not match the recorded footer_sha256"):
        C.load_corpus(tampered)
    kept = {k: v for k, v in table.schema.metadata.items() if k != b"footer_sha256"}
    pq.write_table(table.slice(1).replace_schema_metadata(kept), tampered)  # another tool that keeps our keys
    with pytest.raises(C.CorpusError, match="corpus_sha256"):
        C.load_corpus(tampered)
    with pytest.raises(C.CorpusError, match="not a readable corpus parquet"):
        C.load_corpus(tmp_path / "nope.parquet")
