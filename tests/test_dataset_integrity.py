"""Datasets cannot change silently: page checksums and the footer sha256 catch flipped bits, and rows that cannot be
true (duplicates, one id for two shapes, infinite times, missing values, two GPUs in one dataset) are refused with
one line naming the file (issue 17)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from predictor.offline import gemv_eval
from predictor.testing.synthetic import METADATA, synthetic_dataset

from collectors.in_program import context_dataset
from collectors.corpus import CorpusError, load_corpus
from collectors.store import merge_parts
from collectors.cli import main  # the whole CLI, collection subcommands included
from predictor.artifacts.schema import FOOTER_DIGEST, DatasetError, read_dataset, write_dataset

ROOT = Path(__file__).resolve().parents[1]
# labelled datasets and corpora; a calibration folder holds the plan of a calibrate run (an order, not labels)
SHIPPED = sorted(p for p in (ROOT / "datasets").rglob("*.parquet") if p.parent.name != "calibration")


def _metadata_kind(path: Path):
    try:
        return json.loads((pq.read_schema(path).metadata or {}).get(b"kind", b"null"))
    except Exception:  # noqa: BLE001 -- unreadable here: the dataset reader below says how, in one line
        return None


def load(path: Path):
    if path.parent.name == "corpus":
        return load_corpus(path)
    if _metadata_kind(path) == context_dataset.KIND:
        return context_dataset.read_context(path)  # in-program decisions (datasets/<gpu>/CONTEXT.md), not GEMM labels
    if _metadata_kind(path) in gemv_eval.KINDS:  # GEMV, few-rows and grouped-GEMM labels (GEMV.md, FEW_ROWS.md, ...)
        return gemv_eval.read_labels(path, _metadata_kind(path))
    return read_dataset(path)


def refused(path: Path, match: str = "") -> str:
    with pytest.raises((DatasetError, CorpusError), match=match) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    return message


def page_positions(path: Path, columns: int = 4) -> list[int]:
    """Byte offsets inside the page data (away from the page headers, whose statistics the reader ignores) of
    the largest numeric column chunks: the dictionary page where it is large, and the data pages."""
    meta = pq.ParquetFile(path).metadata
    chunks = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            if col.physical_type in ("DOUBLE", "INT64"):
                chunks.append((col.total_compressed_size, col.dictionary_page_offset, col.data_page_offset))
    positions = []
    for size, dictionary, data in sorted(chunks, reverse=True)[:columns]:
        end = (dictionary or data) + size
        if dictionary and data - dictionary > 512:
            positions.append((dictionary + data) // 2)
        positions += [data + 128 + (end - data - 128) * i // 3 for i in (1, 2)]
    return positions


def flipped(src: Path, dest: Path, position: int, bit: int = 3) -> Path:
    data = bytearray(src.read_bytes())
    data[position] ^= 1 << bit
    dest.write_bytes(bytes(data))
    return dest


@pytest.mark.skipif(not SHIPPED, reason="no shipped datasets")
@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_flipped_bytes_in_every_shipped_dataset_are_detected(path, tmp_path):
    meta = pq.read_schema(path).metadata
    assert FOOTER_DIGEST.encode() in meta  # written by predictor.artifacts.schema.write_parquet
    copy = tmp_path / path.parent.name / path.name  # same folder name: the corpus is read as a corpus
    copy.parent.mkdir()
    reference = load(path)
    positions = page_positions(path)
    detected = 0
    for position in positions:  # refused; or, where the flip hit a page header's statistics (not covered by the
        try:                     # page CRC and never used to read), read back exactly the same
            got = load(flipped(path, copy, position))
        except (DatasetError, CorpusError) as exc:
            assert "\n" not in str(exc) and "CRC checksum verification failed" in str(exc), str(exc)
            detected += 1
            continue
        assert got.equals(reference) and got.attrs["metadata"] == reference.attrs["metadata"], position
    # >= 8 probes: the smallest shipped file (datasets/corpus/quant_v1.parquet, 28 KB, small dictionaries) has 8
    assert detected >= len(positions) - 1 >= 7
    data = path.read_bytes()
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    schema_copy = data.index(b"ARROW:schema", footer)  # the metadata and columns pyarrow reads back
    for position in (schema_copy + 100, schema_copy + 700):
        refused(flipped(path, copy, position), "corrupt")
    # anywhere in the footer: refused, or read back exactly the same
    for position in range(footer + 7, len(data) - 8, (len(data) - 8 - footer) // 6):
        try:
            got = load(flipped(path, copy, position))
        except (DatasetError, CorpusError) as exc:
            assert "\n" not in str(exc)
            continue
        assert got.equals(reference) and got.attrs["metadata"] == reference.attrs["metadata"], position


def test_every_byte_of_a_small_dataset_is_protected(tmp_path):
    """Flip one bit at every 29th byte of a whole file: each read is refused or gives back exactly the same rows
    and metadata; none is silently different."""
    src = write_dataset(synthetic_dataset(4, seed=3), tmp_path / "small.parquet", METADATA)
    ref = read_dataset(src)
    data = src.read_bytes()
    copy = tmp_path / "copy.parquet"
    outcomes = {"refused": 0, "same": 0}
    for position in range(0, len(data), 29):
        try:
            got = read_dataset(flipped(src, copy, position, bit=position % 8))
        except DatasetError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
            continue
        assert got.equals(ref) and got.attrs["metadata"] == ref.attrs["metadata"], f"silent change at byte {position}"
        outcomes["same"] += 1
    assert outcomes["refused"] > outcomes["same"]


def write_raw(df: pd.DataFrame, path: Path) -> Path:
    """Rows written without write_dataset's checks (as another tool, or an older version, might have)."""
    df.to_parquet(path)
    return path


def one_row_changed(column: str, value) -> pd.DataFrame:
    df = synthetic_dataset(8, seed=1)
    df[column] = df[column].astype(object)
    df.loc[3, column] = value
    return df


@pytest.mark.parametrize("name, frame, needle", [
    ("duplicate", lambda: pd.concat([synthetic_dataset(8, seed=1), synthetic_dataset(8, seed=1).iloc[[5]]]),
     "1 duplicate problem x candidate rows \\(first: problem_id [0-9a-f]{12}, candidate "),
    ("two_shapes", lambda: one_row_changed("m", 4096), "problem_id [0-9a-f]{12} names 2 different problems"),
    ("foreign_id", lambda: synthetic_dataset(8, seed=1).assign(
        problem_id=lambda d: d.problem_id.where(d.problem_id != d.problem_id.iloc[0], "0123456789ab")),
     "problem_id 0123456789ab does not match its fields"),
    ("non_hex", lambda: one_row_changed("problem_id", "xyz!"), "problem_id 'xyz!' is not a 12-digit hex"),
    ("inf_time", lambda: one_row_changed("time_us", float("inf")), "infinite time_us"),
    ("null_tag", lambda: one_row_changed("family_tag", None), "1 rows have no family_tag"),
    ("null_status", lambda: one_row_changed("status", None), "1 rows have no status"),
    ("two_tags", lambda: synthetic_dataset(8, seed=1).assign(family_tag=lambda d: [f"t{i}" for i in range(len(d))]),
     "names \\d+ different family_tags"),
    ("two_gpus", lambda: one_row_changed("gpu", "NVIDIA H100"), "several GPUs"),
])
def test_impossible_rows_refused(name, frame, needle, tmp_path, capsys):
    path = write_raw(frame(), tmp_path / f"{name}.parquet")
    with pytest.raises(DatasetError, match=needle):
        write_dataset(frame(), tmp_path / "never.parquet", METADATA) if name != "two_gpus" else read_dataset(path)
    assert not (tmp_path / "never.parquet").exists()
    refused(path, needle)
    code = main(["train", "--dataset", str(path), "--ranker", "roofline", "--out", str(tmp_path / "m")])
    err = [line for line in capsys.readouterr().err.splitlines() if "gemm-predictor: error:" in line]
    assert code != 0 and len(err) == 1 and path.name in err[0]
    assert not (tmp_path / "m").exists()


def parts_folder(tmp_path: Path, second_gpu: str | None = None, overlap: bool = False) -> Path:
    parts = tmp_path / "parts"
    rows = synthetic_dataset(12, seed=4)
    ids = sorted(rows.problem_id.unique())
    first, second = rows[rows.problem_id.isin(ids[:6])], rows[rows.problem_id.isin(ids[6 - overlap:])]
    write_dataset(first, parts / "part-s0of1-g0-00000.parquet", METADATA)
    meta = dict(METADATA)
    if second_gpu:
        second = second.assign(gpu=second_gpu)
        meta.update(gpu=second_gpu, device={**METADATA["device"], "gpu": second_gpu})
    write_dataset(second, parts / "part-s0of1-g1-00000.parquet", meta)
    return parts


def test_parts_of_two_gpus_are_not_merged(tmp_path, capsys):
    parts = parts_folder(tmp_path, second_gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(DatasetError, match="measured on 'NVIDIA H100 80GB HBM3'.*one dataset holds one GPU's rows"):
        merge_parts(parts, tmp_path / "merged.parquet")
    code = main(["merge", str(parts), str(tmp_path / "merged.parquet")])
    err = [line for line in capsys.readouterr().err.splitlines() if "gemm-predictor: error:" in line]
    assert code != 0 and len(err) == 1 and "part-s0of1-g1-00000.parquet" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]  # nothing written, no temporary file left


def test_a_problem_in_two_parts_is_a_duplicate(tmp_path, capsys):
    parts = parts_folder(tmp_path, overlap=True)
    refused_message = str(pytest.raises(DatasetError, read_dataset, parts).value)
    assert "duplicate problem x candidate rows" in refused_message and str(parts) in refused_message
    code = main(["train", "--dataset", str(parts), "--out", str(tmp_path / "m")])
    err = [line for line in capsys.readouterr().err.splitlines() if "gemm-predictor: error:" in line]
    assert code != 0 and len(err) == 1 and "duplicate" in err[0]


def test_shipped_rows_pass_every_check():
    """The checks refuse nothing in the shipped data (the rewrite with checksums kept every label)."""
    for path in SHIPPED:
        df = load(path)
        assert len(df) and not df.empty


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
