"""``predictor.compile(dynamic=True)`` on held-out decoder architectures, end to end through Inductor on the CPU:
one compile serves every size, as plain's does (batch 1 a graph of its own, as Dynamo specialises it), and every
size matches eager. Why on the CPU: what breaks a dynamic compile of an unseen architecture (a guard on a size, a
decomposition reading a symbolic width) breaks it on any device, and the GEMV decomposition is given CPU tensors
here so that its decisions run too."""

from __future__ import annotations

import pytest
import torch

import predictor
from predictor.artifacts.roots import shipped_roots, table_path
from predictor.runtime.lowerings import gemv, gemv_table
from predictor.runtime.choices import installed

pytest.importorskip("transformers")

from collectors.programs import builders, configs  # noqa: E402 -- needs transformers

SMALL = dict(hidden_size=64, num_attention_heads=4, vocab_size=1000)
CONFIGS = {
    # one kv head, sliding-window layers, q and k norms
    "gemma3": lambda: configs._gemma3_config(**SMALL, intermediate_size=128, num_key_value_heads=1, head_dim=16),
    # multi-head latent attention; a dense layer, then routed and shared experts
    "deepseek": lambda: configs._deepseek_config(**SMALL, intermediate_size=128, moe_intermediate_size=32,
                                                 n_routed_experts=8, num_experts_per_tok=2, num_key_value_heads=4,
                                                 kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                                                 v_head_dim=8),
    # partial rotary, biases, GELU
    "phi2": lambda: configs._phi2_config(**SMALL, intermediate_size=256, num_key_value_heads=4),
    # multi-query attention with a parallel block, a width of no multiple of 16 (72: 4 heads of 18)
    "falcon": lambda: configs._falcon_config(hidden_size=72, num_attention_heads=4, vocab_size=1000),
    # Conv1D layers (weights stored K x N), learned positions
    "gpt2": lambda: configs._gpt2_medium_config(n_embd=64, n_head=4, vocab_size=1000),
}


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(gemv, "DEVICES", ("cpu", "cuda"))  # the GEMV decisions on CPU tensors too
    # ... decided by a GPU's table, as on that GPU (without a table of its own a GPU keeps every GEMV on cuBLAS)
    path = table_path("NVIDIA H100 80GB HBM3", shipped_roots(), folder=gemv_table.TABLE_FOLDER)  # as found there
    h100 = tuple(gemv_table.read_table(path))
    monkeypatch.setattr(gemv_table, "table_for_this_gpu", lambda allow_similar=True: h100)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    while installed._STACK:
        predictor.uninstall()


def _graphs_for(name: str, shapes: list[tuple[int, int]], how: str = "predictor", dynamic: bool | None = True) -> int:
    """Compile the shrunk decoder ``name`` once (``how``: ``predictor.compile`` or plain ``torch.compile``), call it
    at ``shapes`` (batch, tokens), check each output against eager; the number of graphs Dynamo compiled."""
    lm = builders._hf("AutoModelForCausalLM", CONFIGS[name](), torch.device("cpu"), torch.float32).eval()
    model = builders.HFOut(lm, ("input_ids",), "logits", use_cache=False, logits_to_keep=1)
    if how == "plain":
        compiled = torch.compile(model, dynamic=dynamic)
    else:
        compiled = predictor.compile(model, dynamic=dynamic, cudagraphs=False)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for batch, tokens in shapes:
            ids = torch.randint(0, 1000, (batch, tokens))
            torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-3, atol=1e-3)
    return torch._dynamo.utils.counters["stats"]["unique_graphs"] - before


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_served_decode_batch_compiles_batch_one_and_one_graph_for_the_rest(fresh, name):
    gemvs = gemv.gemv_count()
    assert _graphs_for(name, [(1, 1), (2, 1), (5, 1), (9, 1), (1, 1), (3, 1)]) == 2
    assert gemv.gemv_count() > gemvs  # batch 1's graph took the GEMV path


def test_a_prefill_token_count_compiles_once(fresh):
    assert _graphs_for("deepseek", [(1, 7), (1, 19), (1, 40), (1, 7)]) == 1


def test_without_dynamic_a_changing_batch_recompiles_as_often_as_under_plain(fresh):
    """A server that never says ``dynamic=True``: Dynamo compiles the first batch static, then one dynamic graph at
    the second size (automatic dynamic shapes); ``predictor.compile`` adds no graph to plain's."""
    shapes = [(1, 1), (2, 1), (5, 1), (9, 1), (1, 1), (3, 1)]
    plain = _graphs_for("phi2", shapes, how="plain", dynamic=None)
    torch._dynamo.reset()
    assert _graphs_for("phi2", shapes, dynamic=None) == plain == 2
