"""A per-GPU table taken from another GPU of the same architecture is said in one line, naming the file; a GPU's own
table is used without a word; with ``allow_similar_gpu=False`` no other GPU's file is read, and a GPU with no table
of a kind keeps plain torch.compile's choice for those GEMMs, said in one line."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

from predictor.artifacts.roots import tables_decided
from predictor.runtime import registry
from predictor.runtime.lowerings import few_rows, gemv, gemv_table

MODELS = Path(__file__).resolve().parents[1] / "models"


def _root(tmp_path: Path, folder: str, *gpus: str) -> tuple[str, ...]:
    (tmp_path / folder).mkdir(parents=True)
    for gpu in gpus:
        shutil.copy(MODELS / folder / f"{gpu}.json", tmp_path / folder / f"{gpu}.json")
    return (str(tmp_path),)


def test_a_few_rows_table_of_another_gpu_is_named_once(tmp_path, caplog):
    roots = _root(tmp_path, few_rows.TABLE_FOLDER, "nvidia-h100")
    with caplog.at_level(logging.WARNING, logger=few_rows.__name__):
        problems, _ = few_rows._table("NVIDIA H200", "9.0", roots)
    assert problems, "a table of the same architecture is still used"
    lines = [r.getMessage() for r in caplog.records if "few-rows table" in r.getMessage()]
    assert len(lines) == 1 and "NVIDIA H200" in lines[0] and "nvidia-h100.json" in lines[0], lines


def test_a_gpus_own_few_rows_table_is_used_without_a_word(tmp_path, caplog):
    roots = _root(tmp_path, few_rows.TABLE_FOLDER, "nvidia-h100", "nvidia-h200")
    with caplog.at_level(logging.WARNING, logger=few_rows.__name__):
        problems, _ = few_rows._table("NVIDIA H200", "9.0", roots)
    assert problems and not [r for r in caplog.records if "few-rows" in r.getMessage()]


def test_gemv_forms_taken_from_a_sibling_are_named(tmp_path, caplog):
    roots = _root(tmp_path, gemv_table.TABLE_FOLDER, "nvidia-h100", "nvidia-h200")
    own = gemv_table.read_table(tmp_path / gemv_table.TABLE_FOLDER / "nvidia-h200.json")
    with caplog.at_level(logging.WARNING, logger=gemv_table.__name__):
        rows, _ = gemv_table._table("NVIDIA H200", "9.0", roots)
    lines = [r.getMessage() for r in caplog.records]
    assert len(rows) > len(own)  # the H200's shipped labels lack forms the H100's have (plain and pair only)
    assert any("nvidia-h200.json has no labels of the GEMV forms" in m and "nvidia-h100.json" in m
               for m in lines), lines
    assert not any("no GEMV block table for" in m for m in lines)  # its own table is its own


def test_a_gemv_table_of_another_gpu_is_named(tmp_path, caplog):
    roots = _root(tmp_path, gemv_table.TABLE_FOLDER, "nvidia-h100")
    with caplog.at_level(logging.WARNING, logger=gemv_table.__name__):
        rows, _ = gemv_table._table("NVIDIA H200", "9.0", roots)
    assert rows
    assert any("no GEMV block table for NVIDIA H200" in r.getMessage() and "nvidia-h100.json" in r.getMessage()
               for r in caplog.records)


# --- allow_similar_gpu=False: nothing per-GPU is read from another GPU's file (the capability is left out, "") ---

def test_without_allow_similar_no_few_rows_table_of_another_gpu_is_read(tmp_path, caplog):
    roots = _root(tmp_path, few_rows.TABLE_FOLDER, "nvidia-h100")
    with caplog.at_level(logging.WARNING, logger=few_rows.__name__):
        problems, digest = few_rows._table("NVIDIA H200", "", roots)
    assert problems == () and digest is None
    lines = [r.getMessage() for r in caplog.records if "few-rows table" in r.getMessage()]
    assert len(lines) == 1 and "allow_similar_gpu=False" in lines[0] and "plain torch.compile" in lines[0], lines
    assert tables_decided(False)[few_rows.TABLE_FOLDER].startswith("none")
    # its own table is still read
    roots = _root(tmp_path / "own", few_rows.TABLE_FOLDER, "nvidia-h100", "nvidia-h200")
    problems, _ = few_rows._table("NVIDIA H200", "", roots)
    assert problems and "(this GPU's)" in tables_decided(False)[few_rows.TABLE_FOLDER]


def test_without_allow_similar_no_gemv_table_or_form_of_another_gpu_is_read(tmp_path, caplog):
    roots = _root(tmp_path, gemv_table.TABLE_FOLDER, "nvidia-h100")
    with caplog.at_level(logging.WARNING, logger=gemv_table.__name__):
        rows, digest = gemv_table._table("NVIDIA H200", "", roots)
    assert rows == () and digest is None
    assert any("allow_similar_gpu=False" in r.getMessage() and "cuBLAS" in r.getMessage() for r in caplog.records)
    # with its own table beside the sibling's: its own rows alone, no borrowed form
    roots = _root(tmp_path / "both", gemv_table.TABLE_FOLDER, "nvidia-h100", "nvidia-h200")
    own = gemv_table.read_table(tmp_path / "both" / gemv_table.TABLE_FOLDER / "nvidia-h200.json")
    rows, _ = gemv_table._table("NVIDIA H200", "", roots)
    assert len(rows) == len(own)
    borrowed, _ = gemv_table._table("NVIDIA H200", "9.0", roots)
    assert len(borrowed) > len(own)
    assert "borrowed" not in tables_decided(False)[gemv_table.TABLE_FOLDER]


def test_a_gpu_without_a_gemv_table_keeps_every_gemv_on_cublas(monkeypatch):
    """No table (none of its own, none borrowed): plain's cuBLAS, not the width rule measured on other GPUs."""
    monkeypatch.setattr(gemv_table, "table_for_this_gpu", lambda allow_similar=True: ())
    rule = gemv.runtime_rule(allow_similar=False)
    assert not rule(2048, 2048, "bfloat16", "col") and gemv.takes_reduction(2048, 2048, "bfloat16", "col")


def test_the_stats_say_which_gpus_table_decided(tmp_path):
    roots = _root(tmp_path, few_rows.TABLE_FOLDER, "nvidia-h100")
    few_rows._table("NVIDIA H200", "9.0", roots)
    said = tables_decided(True)[few_rows.TABLE_FOLDER]
    assert "nvidia-h100.json" in said and "borrowed" in said


def test_the_lowerings_cache_key_follows_allow_similar(monkeypatch):
    """A compile that may not borrow must not reuse a graph lowered with a borrowed table: the registry hands the
    flag to every lowering that reads a per-GPU table."""
    seen = []
    monkeypatch.setattr(few_rows, "table_digest", lambda allow_similar_gpu=True: seen.append(allow_similar_gpu))
    lowering = next(lw for lw in registry.LOWERINGS if lw.name == "few_rows")
    monkeypatch.setattr(registry, "LOWERINGS", [dataclasses.replace(lowering, cache_key=few_rows.table_digest)])
    registry.digest(allow_similar_gpu=False)
    registry.digest()
    assert seen == [False, True]


def test_the_stats_name_the_rankers_gpu():
    import predictor
    from predictor.artifacts.model_folder import read_metadata
    from predictor.core.device import DeviceInfo

    h200 = DeviceInfo.from_metadata(read_metadata(MODELS / "h200-default-lgbm"))
    with predictor.pruning(model=str(MODELS / "h100-default-lgbm"), _device=h200) as pruner:
        pruner.load()
        said = predictor.stats()["tables"]["ranker"]
        assert "h100-default-lgbm" in said and "borrowed from NVIDIA H100" in said
    with predictor.pruning(model=str(MODELS / "h200-default-lgbm"), _device=h200) as pruner:
        pruner.load()
        assert predictor.stats()["tables"]["ranker"].endswith("(this GPU's)")


def test_predictor_compile_passes_allow_similar_gpu_to_its_pruner_and_refuses_a_non_bool():
    import pytest
    import torch

    import predictor
    from predictor.runtime import compile as compile_module

    try:
        predictor.compile(torch.nn.Linear(4, 4), allow_similar_gpu=False)
        assert compile_module.installed._STACK[-1].pruner.settings.allow_similar_gpu is False
        with pytest.raises(ValueError, match="allow_similar_gpu must be True or False"):
            predictor.compile(torch.nn.Linear(4, 4), allow_similar_gpu="no")
    finally:
        predictor.uninstall()


def test_without_allow_similar_no_model_of_another_gpu_is_found_for_any_region_or_the_hints():
    """The ranker, every region model and the hint suggestion: an H200-like GPU never takes the H100's folders."""
    import pytest

    from predictor.artifacts.model_folder import read_metadata
    from predictor.core.device import DeviceInfo
    from predictor.core.regions import REGIONS
    from predictor.core.problem import Problem
    from predictor.runtime.choices.discovery import find_model
    from predictor.runtime.dynamic.hints import suggest_hints

    h100 = DeviceInfo.from_metadata(read_metadata(MODELS / "h100-default-lgbm"))
    sibling = dataclasses.replace(h100, gpu="NVIDIA H100 NVL-like sibling")
    for region in (None, *REGIONS):
        assert find_model(sibling, region=region, roots=[MODELS]) is None, region
    assert find_model(sibling, roots=[MODELS], allow_similar=True) is not None
    with pytest.raises(FileNotFoundError, match="sibling"):
        suggest_hints([Problem(m=64, n=4096, k=4096, dtype="bfloat16", op="mm")], device=sibling,
                      allow_similar_gpu=False)
