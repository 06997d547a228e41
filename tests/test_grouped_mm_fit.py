"""The grouped-GEMM band fit (CPU): the best geomean config per band, a config Inductor does not offer counted at
aten's speed, held out by decoder, and the shipped bands above the decode band equal to the fit of the committed
labels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from predictor.offline import grouped_mm_fit
from predictor.runtime.lowerings import grouped_mm


def _row(pid, tag, b, m, config, time_us, active=None):
    block_m, block_n, block_k, stages, warps = config or (None,) * 5
    return {"problem_id": pid, "family_tag": tag, "b": b, "m": m, "n": 256, "k": 256, "active": active,
            "family": "aten" if config is None else "triton", "BLOCK_M": block_m, "BLOCK_N": block_n,
            "BLOCK_K": block_k, "num_stages": stages, "num_warps": warps, "time_us": time_us, "status": "ok"}


A, B = (16, 64, 256, 4, 4), (64, 128, 128, 4, 4)


def _labels():
    return pd.DataFrame([
        # band 1-16 rows per expert: A wins on decoder x, B on decoder y by less
        _row("p1", "x", 8, 4, None, 20.0), _row("p1", "x", 8, 4, A, 10.0), _row("p1", "x", 8, 4, B, 15.0),
        _row("p2", "y", 8, 8, None, 20.0), _row("p2", "y", 8, 8, A, 11.0), _row("p2", "y", 8, 8, B, 10.0),
        # band 16-160: B not offered on z (Inductor pruned it): it counts at aten's speed there
        _row("p3", "z", 8, 64, None, 10.0), _row("p3", "z", 8, 64, A, 12.0),
        _row("p4", "x", 8, 64, None, 10.0), _row("p4", "x", 8, 64, A, 12.0), _row("p4", "x", 8, 64, B, 5.0),
        # decode: 2 routed rows over 8 experts
        _row("p5", "x", 8, 1, None, 30.0, active=2), _row("p5", "x", 8, 1, A, 10.0, active=2),
    ])


def test_fit_takes_each_bands_best_geomean_and_counts_a_missing_config_at_atens_speed():
    table, meta = grouped_mm_fit.speeds(_labels())
    assert meta.loc["p5", "rows_per_expert"] == 0  # 2 routed rows over 8 experts
    assert table.at["p3", "64,128,128,4,4"] == table.at["p3", "aten"] == 1.0
    fitted = grouped_mm_fit.fit(table, meta)
    assert fitted[1] == "16,64,256,4,4"  # geomean(1.0, 10/11) beats geomean(10/15, 1.0)
    assert fitted[2] == "64,128,128,4,4"  # geomean(1.0 as aten on p3, 1.0) beats geomean(10/12, 5/12)
    assert fitted[0] == "16,64,256,4,4"


def test_held_out_scores_choose_on_the_other_decoders():
    table, meta = grouped_mm_fit.speeds(_labels())
    scores = grouped_mm_fit.per_problem(table, meta).set_index("problem_id")
    assert scores.at["p1", "held out"] == pytest.approx(10 / 15)  # chosen on p2 alone: B
    assert scores.at["p2", "held out"] == pytest.approx(10 / 11)  # chosen on p1 alone: A
    assert scores.at["p5", "held out"] == pytest.approx(10 / 30)  # no other decoder in its band: aten
    summary = grouped_mm_fit.evaluate(table, meta)
    assert summary.loc["all", "problems"] == 5


def test_shipped_bands_above_decode_are_the_fit_of_the_committed_labels():
    labels = grouped_mm_fit.read_labels("datasets/nvidia-h100/grouped_mm.parquet", grouped_mm_fit.KIND)
    fitted = grouped_mm_fit.fit(*grouped_mm_fit.speeds(labels))
    rule = grouped_mm.read_table(Path("models") / grouped_mm.TABLE_FOLDER / "nvidia-h100.json")
    shipped = {band: ",".join(map(str, config)) for band, (_, config) in enumerate(rule.bands)}
    assert [limit for limit, _ in rule.bands[:-1]] == list(grouped_mm_fit.EDGES)
    assert {band: fitted[band] for band in (1, 2, 3)} == {band: shipped[band] for band in (1, 2, 3)}
    assert fitted[0] != shipped[0]  # the decode band was chosen in whole steps (finding 67)


def test_the_fit_writes_the_table_the_runtime_reads(tmp_path):
    """``grouped-fit --out`` with the whole-step decode band and bound reproduces the shipped table's rule."""
    out = tmp_path / "nvidia-h100.json"
    report = grouped_mm_fit.run("datasets/nvidia-h100/grouped_mm.parquet", str(out), "16,64,256,4,4", 64)
    assert "wrote" in report
    shipped = grouped_mm.read_table(Path("models") / grouped_mm.TABLE_FOLDER / "nvidia-h100.json")
    assert grouped_mm.read_table(out) == shipped
    fitted_only = tmp_path / "fit.json"
    grouped_mm_fit.run("datasets/nvidia-h100/grouped_mm.parquet", str(fitted_only))
    rule = grouped_mm.read_table(fitted_only)
    assert rule.bands[1:] == shipped.bands[1:] and rule.max_decode_experts is None
    with pytest.raises(ValueError, match="decode-config"):
        grouped_mm_fit.run("datasets/nvidia-h100/grouped_mm.parquet", None, "16,64")
