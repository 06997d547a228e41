"""The memory floor of a decode step (CPU): the weights a step reads, tied heads counted once and an untied
embedding as the rows looked up; and the report's floor and per-layer census table."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.zoo.floor_report import floor_lines
from collectors.programs import models
from collectors.programs.floor import weights_read_bytes


class TinyLM(nn.Module):
    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 8, dtype=torch.bfloat16)
        self.layer = nn.Linear(8, 8, bias=False, dtype=torch.bfloat16)
        self.head = nn.Linear(8, 100, bias=False, dtype=torch.bfloat16)
        if tied:
            self.head.weight = self.embed.weight

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def get_output_embeddings(self) -> nn.Module:
        return self.head


class Wrapper(nn.Module):  # the zoo's HFOut holds the transformers model one level down
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model


def test_a_tied_head_reads_the_matrix_once():
    assert weights_read_bytes(Wrapper(TinyLM(tied=True))) == 2 * (100 * 8 + 8 * 8)


def test_an_untied_embedding_counts_the_rows_a_step_looks_up():
    head_and_layer = 2 * (100 * 8 + 8 * 8)
    assert weights_read_bytes(Wrapper(TinyLM(tied=False))) == head_and_layer + 2 * 8
    assert weights_read_bytes(Wrapper(TinyLM(tied=False)), tokens=4) == head_and_layer + 4 * 2 * 8


def test_full_depth_decoders_declare_their_layers():
    full = [m for m in models.REGISTRY.values() if m.name.endswith("-full-b1")]
    assert len(full) >= 4
    assert all(16 <= m.layers <= 40 and m.family == "llm-decode" for m in full)
    assert all(str(m.layers) in m.description for m in full)


def _record(step_ms: float, gemm_us: float) -> dict:
    groups = {"vendor_gemm": {"count": 40, "us": gemm_us}, "triton_template": {"count": 0, "us": 0.0},
              "triton": {"count": 80, "us": 200.0}, "other": {"count": 20, "us": 40.0}}
    return {"floor_ms": 0.5, "weights_read_bytes": 2.0e9, "copy_gbps": 4000.0, "layers": 20, "step_ms": step_ms,
            "census_replay": {"kernels": 140, "groups": groups}}


def test_the_report_says_the_share_of_floor_and_the_kernels_per_layer():
    lines = floor_lines([("plain", _record(1.0, 600.0)), ("hook", _record(0.625, 400.0))])
    text = "\n".join(lines)
    assert "Memory floor: 0.500 ms (2.00 GB" in text and "4.00 TB/s" in text and "20 layers" in text
    plain = next(line for line in lines if line.startswith("| `plain`"))
    hook = next(line for line in lines if line.startswith("| `hook`"))
    assert "| 50% |" in plain and "| 80% |" in hook
    assert "| 7.0 |" in plain and "30.0 (2.0)" in plain and "20.0 (2.0)" in hook  # kernels and gemm us per layer


def test_no_floor_no_lines():
    assert floor_lines([("plain", {"step_ms": 1.0})]) == []
