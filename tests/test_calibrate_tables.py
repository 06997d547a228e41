"""``gemm-predictor calibrate`` for every per-GPU table (CPU): the budget split and its resume, a cut collection
covering every form, and the fit writing tables the runtime reads -- from the H100's committed labels, the same
tables the H100 ships."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from collectors import calibrate_tables as ct
from collectors.cli import main
from predictor.runtime.lowerings import few_rows, gemv_table, grouped_mm

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "datasets" / "nvidia-h100"


def test_only_takes_kinds_in_calibration_order_and_refuses_unknown_ones():
    assert ct.parse_only(None) == ["gemv-blocks", "few-rows", "grouped-mm", "ranker"]
    assert ct.parse_only("ranker,few-rows") == ["few-rows", "ranker"]
    with pytest.raises(ValueError, match="gemv-block.*expected a comma list"):
        ct.parse_only("gemv-block")


def test_shares_split_the_whole_budget():
    assert sum(ct.shares(ct.KINDS).values()) == pytest.approx(1.0)
    assert ct.shares(["few-rows"]) == {"few-rows": 1.0}
    both = ct.shares(["gemv-blocks", "ranker"])
    assert both["ranker"] > both["gemv-blocks"] and sum(both.values()) == pytest.approx(1.0)


def test_a_cut_collection_covers_every_form():
    from collectors import gemv_blocks

    problems = gemv_blocks.corpus()
    forms = {p["form"] for p in problems}
    first = ct.interleaved(problems, "form")[:len(forms)]
    assert {p["form"] for p in first} == forms and len(ct.interleaved(problems, "form")) == len(problems)


def test_each_kind_gets_its_share_and_a_rerun_resumes_within_what_is_left(tmp_path):
    calls = []

    def fake(kind, labels, seconds, tick):
        calls.append((kind.name, round(seconds)))
        return 0

    report = ct.collect_tables(["gemv-blocks", "few-rows", "ranker"], tmp_path, 10.0, collect_one=fake)
    # 10 minutes: gemv-blocks 0.3/0.85, few-rows 0.15/0.85 of them; what the fake did not spend carries on
    assert calls[0] == ("gemv-blocks", round(600 * 0.3 / 0.85))
    assert calls[1][0] == "few-rows" and calls[1][1] >= round(600 * 0.15 / 0.85)
    assert set(report) == {"gemv-blocks", "few-rows"}
    ledger = ct.TableLedger(tmp_path)
    ledger.add("gemv-blocks", 1e6)  # as if a run spent it all
    calls.clear()
    report = ct.collect_tables(["gemv-blocks", "few-rows"], tmp_path, 10.0, collect_one=fake)
    assert report["gemv-blocks"]["skipped"] == "its share is spent" and [c[0] for c in calls] == ["few-rows"]


def test_a_run_killed_mid_kind_keeps_the_seconds_of_the_problems_it_wrote(tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 30))  # every reading of the clock is 30 s after the last
    monkeypatch.setattr(ct.time, "perf_counter", lambda: float(next(clock)))

    def killed(kind, labels, seconds, tick):
        tick()
        tick()  # two problems written, then the process dies before the kind ends
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ct.collect_tables(["gemv-blocks"], tmp_path, 10.0, collect_one=killed)
    assert ct.TableLedger(tmp_path).spent == {"gemv-blocks": 60.0}


def _parts_with_h100_labels(tmp_path: Path) -> Path:
    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("gemv_blocks.parquet", "few_rows.parquet", "grouped_mm.parquet"):
        shutil.copy(H100 / name, parts / name)
    return parts


def test_fitting_the_h100s_labels_rebuilds_the_tables_the_h100_ships(tmp_path):
    parts, out = _parts_with_h100_labels(tmp_path), tmp_path / "root"
    written = ct.fit_tables(["gemv-blocks", "few-rows", "grouped-mm", "ranker"], parts, out)
    slug = "nvidia-h100-80gb-hbm3"
    assert written == {k: str(out / TABLE / f"{slug}.json") for k, TABLE in
                       (("gemv-blocks", "gemv-blocks"), ("few-rows", "few-rows"), ("grouped-mm", "grouped-mm"))}
    shipped = ROOT / "models"
    assert gemv_table.read_table(Path(written["gemv-blocks"])) == gemv_table.read_table(
        shipped / "gemv-blocks" / "nvidia-h100.json")
    assert few_rows.read_table(Path(written["few-rows"])) == few_rows.read_table(shipped / "few-rows" / "nvidia-h100.json")
    calibrated = grouped_mm.read_table(Path(written["grouped-mm"]))
    h100 = grouped_mm.read_table(shipped / "grouped-mm" / "nvidia-h100.json")
    # the decode band and the many-experts bound came from whole decode steps, which calibration does not run
    assert calibrated.bands[1:] == h100.bands[1:] and calibrated.max_decode_experts is None


def test_a_kind_without_labels_is_said_and_the_rest_are_fitted(tmp_path):
    parts = _parts_with_h100_labels(tmp_path)
    (parts / "few_rows.parquet").unlink()
    written = ct.fit_tables(["gemv-blocks", "few-rows"], parts, tmp_path / "root")
    assert written["few-rows"].startswith("not fitted: no labels") and written["gemv-blocks"].endswith(".json")


def test_the_command_fits_every_table_into_a_root_the_runtime_reads(tmp_path, capsys):
    parts, out = _parts_with_h100_labels(tmp_path), tmp_path / "root"
    assert main(["calibrate", "--minutes", "20", "--parts", str(parts), "--out-root", str(out), "--fit-only",
                 "--only", "gemv-blocks,few-rows,grouped-mm"]) == 0
    tables = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tables"]
    assert all(Path(v).is_file() for v in tables.values()) and len(tables) == 3
    from predictor.artifacts.roots import table_path

    assert table_path("NVIDIA H100 80GB HBM3", [out], folder=grouped_mm.TABLE_FOLDER) == \
        out / "grouped-mm" / "nvidia-h100-80gb-hbm3.json"


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "x", "--only", "gemv-blocks"], "give --out-root for the tables"),
    (["--out-root", "models", "--only", "few-rows"], "holds the shipped models and tables"),
    (["--out-root", "r", "--only", "gemv"], "unknown kind"),
    (["--out-root", "r", "--minutes", "0"], "must be positive"),
])
def test_bad_calls_are_refused_in_one_line_before_any_work(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    minutes = [] if "--minutes" in args else ["--minutes", "5"]
    assert main(["calibrate", "--parts", str(tmp_path / "p"), *minutes, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "p").exists()


def test_collecting_without_a_gpu_is_refused_before_any_file_is_written(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the command would collect")
    assert main(["calibrate", "--minutes", "5", "--parts", str(tmp_path / "p"), "--out-root", str(tmp_path / "r"),
                 "--only", "few-rows"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err and not any(tmp_path.iterdir())
