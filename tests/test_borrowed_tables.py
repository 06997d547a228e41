"""A per-GPU table taken from another GPU of the same architecture is said in one line, naming the file; a GPU's own
table is used without a word."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from predictor.runtime.lowerings import few_rows, gemv_table

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
