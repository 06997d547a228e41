"""Grouped GEMMs decided without a benchmark (CPU): the band's one Triton config, plain's aten lowering for
symbolic rows or when the template refuses, and Inductor's lowering table restored."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._inductor import config
from torch._inductor.kernel import mm_grouped

from predictor.runtime.lowerings import grouped_mm

TABLE = Path(__file__).resolve().parents[1] / "models" / grouped_mm.TABLE_FOLDER / "nvidia-h100.json"
H100 = grouped_mm.read_table(TABLE)  # the shipped rule of the GPU its labels were measured on


class Node:
    def __init__(self, *size):
        self.size = list(size)

    def get_size(self):
        return self.size


@pytest.mark.parametrize(("rows", "expected"), [(0, (16, 64, 256, 4, 4)), (1, (16, 128, 128, 4, 4)),
                                                (16, (16, 128, 128, 4, 4)), (17, (64, 128, 128, 4, 4)),
                                                (128, (64, 128, 128, 4, 4)), (4096, (128, 256, 64, 4, 8))])
def test_bands(rows, expected):
    assert H100.config_for(rows) == expected


def _seen_lower(seen, fail_on_triton=False):
    def lower(a, b, *args, **kwargs):
        configs = mm_grouped.grouped_mm_configs()
        seen.append((config.max_autotune_gemm, config.max_autotune_gemm_backends,
                     [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_stages, c.num_warps)
                      for c in configs] if len(configs) == 1 else len(configs)))
        if fail_on_triton and config.max_autotune_gemm_backends == "TRITON":
            raise RuntimeError("no valid choice")
        return "node"
    return lower


def test_few_rows_per_expert_get_the_bands_one_config_and_nothing_else():
    seen = []
    with config.patch(max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"):
        assert grouped_mm._decided(_seen_lower(seen), H100)(Node(8 * 4, 4096), Node(8, 4096, 14336)) == "node"
    assert seen == [(True, "TRITON", [(16, 128, 128, 4, 4)])]
    assert len(mm_grouped.grouped_mm_configs()) > 1  # Inductor's own list is back


def test_rows_per_expert_round_down_as_inductors_pruning_counts_them():
    """17 * 8 - 1 routed rows over 8 experts: Inductor's pruning counts 16 per expert and allows BLOCK_M up to 32
    only, so the band for 16 applies, not the one above (BLOCK_M 64, which Inductor would prune)."""
    seen = []
    with config.patch(max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"):
        grouped_mm._decided(_seen_lower(seen), H100)(Node(17 * 8 - 1, 4096), Node(8, 4096, 14336))
    assert seen == [(True, "TRITON", [(16, 128, 128, 4, 4)])]


def test_decode_routes_fewer_rows_than_experts_to_the_decode_band():
    """Batch-1 decode routes a token to 4 of 60 experts: A has 4 rows, under one per expert."""
    seen = []
    with config.patch(max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"):
        grouped_mm._decided(_seen_lower(seen), H100)(Node(4, 2048), Node(60, 2816, 2048))
    assert seen == [(True, "TRITON", [(16, 64, 256, 4, 4)])]


def test_decode_over_many_experts_lowers_as_plain():
    """A token's 8 of 128 experts: every program of the template would walk 128 experts' offsets; aten's grouped
    GEMM (plain's lowering). Prefill over as many experts keeps its band's Triton config."""
    assert H100.config_for(0, 128) is None
    assert H100.config_for(0, H100.max_decode_experts) == (16, 64, 256, 4, 4)
    assert H100.config_for(4, 128) == (16, 128, 128, 4, 4)
    seen = []
    with config.patch(max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"):
        grouped_mm._decided(_seen_lower(seen), H100)(Node(8, 2048), Node(128, 2048, 1536))
        grouped_mm._decided(_seen_lower(seen), H100)(Node(4 * 128, 2048), Node(128, 2048, 1536))
    assert [s[:2] for s in seen] == [(False, "ATEN,TRITON"), (True, "TRITON")]
    assert seen[1][2] == [(16, 128, 128, 4, 4)]


def test_symbolic_rows_or_a_refusing_template_lower_as_plain():
    seen = []
    with config.patch(max_autotune_gemm=True):
        grouped_mm._decided(_seen_lower(seen), H100)(Node("s0", 4096), Node(8, 4096, 14336))
        grouped_mm._decided(_seen_lower(seen, fail_on_triton=True), H100)(Node(8, 4096), Node(8, 4096, 14336))
    assert [s[0] for s in seen] == [False, True, False]  # the second: Triton refused, then plain


def test_full_max_autotune_keeps_its_own_search():
    seen = []
    with config.patch(max_autotune=True, max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"):
        grouped_mm._decided(_seen_lower(seen), H100)(Node(8, 4096), Node(8, 4096, 14336))
    assert seen[0][1] == "ATEN,TRITON" and seen[0][2] == len(mm_grouped.grouped_mm_configs())


def test_lowering_table_restored_after_an_error():
    from torch._inductor import lowering

    key = torch.ops.aten._grouped_mm.default
    before = lowering.lowerings[key]
    with pytest.raises(RuntimeError):
        with grouped_mm.grouped_mm_decided(H100):
            assert getattr(lowering.lowerings[key], "predictor_grouped", False)
            raise RuntimeError("compile failed")
    assert lowering.lowerings[key] is before


def test_a_gpu_without_a_table_lowers_every_grouped_gemm_as_plain():
    """No grouped-GEMM table for this GPU (and none borrowed): plain's aten lowering, not the H100's bands."""
    seen = []
    with config.patch(max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"):
        grouped_mm._decided(_seen_lower(seen), None)(Node(8 * 4, 4096), Node(8, 4096, 14336))
    assert seen == [(False, "ATEN,TRITON", len(mm_grouped.grouped_mm_configs()))]


def test_a_table_of_another_gpu_is_read_only_with_allow_similar(tmp_path, caplog):
    import logging
    import shutil

    from predictor.artifacts.roots import tables_decided

    (tmp_path / grouped_mm.TABLE_FOLDER).mkdir()
    shutil.copy(TABLE, tmp_path / grouped_mm.TABLE_FOLDER / TABLE.name)
    roots = (str(tmp_path),)
    with caplog.at_level(logging.WARNING, logger=grouped_mm.__name__):
        rule, digest = grouped_mm._table("NVIDIA H200", "9.0", roots)
        assert rule == H100 and digest
        assert "borrowed" in tables_decided(True)[grouped_mm.TABLE_FOLDER]
        assert grouped_mm._table("NVIDIA H200", "", roots) == (None, None)  # allow_similar_gpu=False
        assert tables_decided(False)[grouped_mm.TABLE_FOLDER].startswith("none")
        assert grouped_mm._table("NVIDIA A100-SXM4-80GB", "8.0", roots) == (None, None)  # another architecture
    lines = [r.getMessage() for r in caplog.records]
    assert any("NVIDIA H200" in m and "nvidia-h100.json" in m for m in lines)
    assert any("allow_similar_gpu=False" in m and "aten" in m for m in lines)


@pytest.mark.parametrize("bad", ['{"bands": []}', '{"bands": [{"up_to_rows_per_expert": 0, "config": [16, 64]}]}',
                                 '{"bands": [{"up_to_rows_per_expert": 4, "config": [16, 64, 256, 4, 4]}]}',
                                 '{"bands": [{"up_to_rows_per_expert": null, "config": [16, 64, 256, 0, 4]}]}',
                                 'not json'])
def test_a_malformed_table_is_refused_naming_the_file(tmp_path, bad):
    path = tmp_path / "nvidia-x.json"
    path.write_text(bad)
    with pytest.raises(ValueError, match="nvidia-x.json"):
        grouped_mm.read_table(path)
