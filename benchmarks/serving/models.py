"""The serving benchmark's models, modes and sizes.

Decoders at real widths (2 layers, random weights), called as a server calls them without a KV cache: decode is
one token per sequence at a batch of B (every GEMM has M = B); prefill is one sequence of T tokens (M = T) with
only the last token's logits. ``tiny`` is a small MLP for the CPU tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from collectors.programs import configs

MODES = ("plain-dynamic", "plain-static", "ma-static", "ma-dynamic", "hook-dynamic", "hook-ranges-dynamic",
         "hook-static")
SIZES = {"decode": (1, 2, 4, 8, 16, 32, 64, 128, 256), "prefill": (64, 128, 200, 512, 1000, 1536, 2048, 4096)}


@dataclass(frozen=True)
class ServedModel:
    name: str
    description: str
    build: Callable[[torch.device], nn.Module]
    vocab: int  # input ids are drawn below it; 0: the model takes a float (size, width) tensor
    width: int = 0


class LastLogits(nn.Module):
    """A causal LM called with input ids; returns the last token's logits (what a server samples from)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits


def _causal_lm_from(make_config: Callable[[], Any]) -> Callable[[torch.device], nn.Module]:
    def build(device: torch.device) -> nn.Module:
        import transformers

        torch.manual_seed(0)
        lm = transformers.AutoModelForCausalLM.from_config(make_config())
        return LastLogits(lm.to(device=device, dtype=torch.bfloat16))
    return build


def _causal_lm(config_name: str, **config: Any) -> Callable[[torch.device], nn.Module]:
    def make_config() -> Any:
        import transformers

        return getattr(transformers, config_name)(**config)
    return _causal_lm_from(make_config)


def _tiny(device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)).to(device)


REGISTRY: dict[str, ServedModel] = {m.name: m for m in [
    ServedModel("llama", "Llama (TinyLlama-1.1B widths: 2048/5632, 32 heads, 4 kv: grouped-query attention), 2 layers",
                _causal_lm("LlamaConfig", hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                           num_key_value_heads=4, vocab_size=32000, num_hidden_layers=2), vocab=32000),
    ServedModel("opt", "OPT-1.3b widths (2048/8192, 32 heads: multi-head attention, biases, ReLU), 2 layers, "
                "4096 positions (prefill up to 4096 tokens)",
                _causal_lm("OPTConfig", hidden_size=2048, ffn_dim=8192, num_attention_heads=32, vocab_size=50272,
                           word_embed_proj_dim=2048, num_hidden_layers=2, dropout=0.0,
                           max_position_embeddings=4096), vocab=50272),
    # not in the default --models: architectures kept out of the serving figures, to check that they generalise
    ServedModel("gemma3", "Gemma 3 (1B widths: 1152/6912, 4 heads of 256, 1 kv, sliding window 512, vocab 262144), "
                "2 layers", _causal_lm_from(configs._gemma3_config), vocab=262144),
    ServedModel("olmoe", "OLMoE-1B-7B widths (2048, 64 routed experts of 1024, top-8, 16 heads), 2 layers",
                _causal_lm_from(configs._olmoe_config), vocab=50304),
    # held out of every figure above and of the size rules: added together, before their first run, to check that
    # a dynamic graph generalises (q/k norms; a 7B's widths; fused qkv; 128 small experts; latent attention with
    # shared and routed experts; GPT-2's Conv1D with learned positions; a width that is no multiple of 128)
    ServedModel("qwen3", "Qwen3-1.7B widths (2048/6144, 16 heads of 128, 8 kv, q/k norms), 2 layers",
                _causal_lm_from(configs._qwen3_config), vocab=151936),
    ServedModel("mistral", "Mistral-7B widths (4096/14336, 32 heads, 8 kv), 2 layers",
                _causal_lm_from(configs._mistral_config), vocab=32000),
    ServedModel("phi3", "Phi-3-mini widths (3072/8192, fused qkv 9216 and gate-up 16384), 2 layers",
                _causal_lm_from(configs._phi3_config), vocab=32064),
    ServedModel("qwen3moe", "Qwen3-30B-A3B widths (2048, 128 experts of 768, top-8, 32 heads, 4 kv), 2 layers",
                _causal_lm_from(configs._qwen3_moe_config), vocab=151936),
    ServedModel("deepseek", "DeepSeek-V2-Lite widths in V3's layout (latent attention; a dense layer, then 64 routed "
                "experts of 1408, top-6, and 2 shared), 2 layers", _causal_lm_from(configs._deepseek_config),
                vocab=102400),
    ServedModel("gpt2", "GPT-2 medium widths (1024/4096, 16 heads, Conv1D layers), 4096 learned positions, 2 layers",
                _causal_lm_from(lambda: configs._gpt2_medium_config(n_positions=4096)), vocab=50257),
    ServedModel("falcon", "Falcon-7B widths (4544: 71 heads of 64, multi-query, parallel attention), 2 layers",
                _causal_lm_from(configs._falcon_config), vocab=65024),
    # a second held-out set, added together before any of their runs, served at sizes no figure above used: biases
    # with GELU and two kv heads; eight experts of a 7B, top-2; widths that are no multiple of 128; partial rotary
    ServedModel("starcoder2", "StarCoder2-3B widths (3072/12288, 24 heads, 2 kv, biases, GELU), 2 layers",
                _causal_lm_from(configs._starcoder2_config), vocab=49152),
    ServedModel("mixtral", "Mixtral-8x7B widths (4096, 8 experts of 14336, top-2, 32 heads, 8 kv), 2 layers",
                _causal_lm_from(configs._mixtral_config), vocab=32000),
    ServedModel("smollm2", "SmolLM2-360M widths (960/2560, 15 heads, 5 kv, tied embeddings), 2 layers",
                _causal_lm_from(lambda: configs._smollm2_config(max_position_embeddings=8192)), vocab=49152),
    ServedModel("phi2", "Phi-2 widths (2560/10240, 32 heads, partial rotary, biases, GELU), 2 layers",
                _causal_lm_from(lambda: configs._phi2_config(max_position_embeddings=8192)), vocab=51200),
    ServedModel("tiny", "Linear-GELU-Linear 32/64 (CPU tests)", _tiny, vocab=0, width=32),
]}


def get(name: str) -> ServedModel:
    if name not in REGISTRY:
        raise ValueError(f"unknown serving model {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def inputs(spec: ServedModel, phase: str, size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """decode: (size, 1) ids; prefill: (1, size) ids; ``tiny``: a (size, width) float tensor either way. Drawn from a
    generator seeded by the size, so every mode serves the same tokens (a max-autotune compile draws random numbers
    for its benchmarks, and a mixture of experts' routing, hence its step time, follows the tokens)."""
    generator = torch.Generator(device).manual_seed(size)
    if not spec.vocab:
        return (torch.randn(size, spec.width, device=device, generator=generator),)
    shape = (size, 1) if phase == "decode" else (1, size)
    return (torch.randint(0, spec.vocab, shape, device=device, generator=generator),)


def mark_dynamic(args: tuple[torch.Tensor, ...], phase: str) -> None:
    """Mark the served dimension dynamic (decode: the batch; prefill: the tokens), as a server compiling once does."""
    dim = 0 if phase == "decode" or args[0].dim() == 2 and args[0].dtype.is_floating_point else 1
    torch._dynamo.mark_dynamic(args[0], dim)
