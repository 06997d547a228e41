"""transformers configs of the zoo's architectures at their real widths, 2 layers (keyword arguments override: the
CPU tests shrink the widths). Held-out sets: ``models.ZooModel.held_out_set``; the comment above each group of configs
says what its architectures add."""

from __future__ import annotations

from typing import Any


# keyword arguments override the defaults (the CPU tests shrink the widths)
def _llama_config(**kw: Any):
    from transformers import LlamaConfig  # TinyLlama-1.1B widths
    return LlamaConfig(**{**dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                                 num_key_value_heads=4, vocab_size=32000, num_hidden_layers=2,
                                 max_position_embeddings=2048), **kw})


def _qwen2_config(**kw: Any):
    from transformers import Qwen2Config  # Qwen2-1.5B widths
    return Qwen2Config(**{**dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                                 num_key_value_heads=2, vocab_size=151936, num_hidden_layers=2,
                                 tie_word_embeddings=True), **kw})


def _qwen25_config(**kw: Any):
    from transformers import Qwen2Config  # Qwen2.5-0.5B widths: 896/4864, every K but the down projection's <= 1024
    return Qwen2Config(**{**dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14,
                                 num_key_value_heads=2, vocab_size=151936, num_hidden_layers=2,
                                 tie_word_embeddings=True), **kw})


def _bert_config(**kw: Any):
    from transformers import BertConfig  # bert-base widths; dropout off so compiled and eager losses compare
    return BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=2,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw)


# Held-out architectures, first set: added after the decide policy was fixed, never used to tune it; they check
# that the hook generalises to layer shapes, fusions and widths the labels and the other zoo models do not have.
def _mistral_config(**kw: Any):
    from transformers import MistralConfig  # Mistral-7B widths: 4096/14336, 32 heads, 8 kv
    return MistralConfig(**{**dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=32000, num_hidden_layers=2), **kw})


def _phi3_config(**kw: Any):
    from transformers import Phi3Config  # Phi-3-mini widths: 3072/8192, fused qkv (9216) and gate_up (16384)
    return Phi3Config(**{**dict(hidden_size=3072, intermediate_size=8192, num_attention_heads=32,
                                num_key_value_heads=32, vocab_size=32064, num_hidden_layers=2,
                                pad_token_id=0), **kw})


def _opt_config(**kw: Any):
    from transformers import OPTConfig  # OPT-1.3b widths: 2048/8192, 32 heads, biases everywhere, ReLU
    return OPTConfig(**{**dict(hidden_size=2048, ffn_dim=8192, num_attention_heads=32, vocab_size=50272,
                               word_embed_proj_dim=2048, num_hidden_layers=2, dropout=0.0), **kw})


def _neox_config(**kw: Any):
    from transformers import GPTNeoXConfig  # Pythia-410m widths: 1024/4096, 16 heads, parallel residual
    return GPTNeoXConfig(**{**dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                                   vocab_size=50304, num_hidden_layers=2, hidden_dropout=0.0,
                                   attention_dropout=0.0), **kw})


# Held-out architectures, second set: added after DECIDE_MIN_GAP = -1.5 was fixed and never used to
# tune anything. New here: head_dim 256 with one kv head and GeGLU (Gemma), q/k norms and 64-token decode (Qwen3),
# 257-token images (CLIP ViT-L/14), a conv feature encoder feeding a transformer (wav2vec2), an encoder-decoder
# training step (BART).
def _gemma_config(**kw: Any):
    from transformers import GemmaConfig  # Gemma-2B widths: 2048/16384, 8 heads, 1 kv, head_dim 256, vocab 256000
    return GemmaConfig(**{**dict(hidden_size=2048, intermediate_size=16384, num_attention_heads=8,
                                 num_key_value_heads=1, head_dim=256, vocab_size=256000, num_hidden_layers=2), **kw})


def _qwen3_config(**kw: Any):
    from transformers import Qwen3Config  # Qwen3-1.7B widths: 2048/6144, 16 heads, 8 kv, head_dim 128, q/k norms
    return Qwen3Config(**{**dict(hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, vocab_size=151936, num_hidden_layers=2,
                                 tie_word_embeddings=True), **kw})


# Held-out architectures, third set: added after the policy (decide gap -2.5, the long-K
# floor) and the convolution fix were fixed, never used to tune anything. New here: a hidden width that is not a
# multiple of 128 with multi-query attention and a parallel block (Falcon), disentangled relative attention
# (DeBERTa-v2), a GELU decoder with biases and 64-row fp16 decode (StarCoder2), depthwise-separable convolutions
# with squeeze-excite (EfficientNet), and a convolutional training step under AMP (ResNet-26).
def _falcon_config(**kw: Any):
    from transformers import FalconConfig  # Falcon-7B widths: 4544 (71 heads of 64), multi-query, parallel attn
    return FalconConfig(**{**dict(hidden_size=4544, num_attention_heads=71, multi_query=True,
                                  new_decoder_architecture=False, parallel_attn=True, bias=False,
                                  vocab_size=65024, num_hidden_layers=2, hidden_dropout=0.0,
                                  attention_dropout=0.0), **kw})


def _starcoder2_config(**kw: Any):
    from transformers import Starcoder2Config  # StarCoder2-3B widths: 3072/12288, 24 heads, 2 kv, biases, GELU
    return Starcoder2Config(**{**dict(hidden_size=3072, intermediate_size=12288, num_attention_heads=24,
                                      num_key_value_heads=2, vocab_size=49152, num_hidden_layers=2, use_bias=True,
                                      residual_dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0), **kw})


def _mixtral_config(**kw: Any):
    from transformers import MixtralConfig  # Mixtral-8x7B widths: 4096/14336, 8 experts, top-2, 32 heads, 8 kv
    return MixtralConfig(**{**dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                                   vocab_size=32000, num_hidden_layers=2), **kw})


# Held-out architectures, fourth set: added after every policy above was fixed and before any of their runs, never
# used to tune anything. New here: many small routed experts (60, top-4, 1408 wide) beside a gated shared expert
# (Qwen2-MoE), logit soft-capping with head_dim 256 and a 256000 vocabulary at batch 1 (Gemma 2), widths that are
# not multiples of 128 at batch 1 (SmolLM2: 960/2560), GPT-2's Conv1D layers (the weight stored K x N) in a training
# step, and vision models built from many small GEMMs (LeViT, TinyViT: 64-384 wide).
def _qwen2_moe_config(**kw: Any):
    from transformers import Qwen2MoeConfig  # Qwen1.5-MoE-A2.7B widths: 2048, 60 experts of 1408, top-4, shared 5632
    return Qwen2MoeConfig(**{**dict(hidden_size=2048, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                                    num_experts=60, num_experts_per_tok=4, num_attention_heads=16,
                                    num_key_value_heads=16, vocab_size=151936, num_hidden_layers=2), **kw})


def _gemma2_config(**kw: Any):
    from transformers import Gemma2Config  # Gemma-2-2B widths: 2304/9216, 8 heads, 4 kv, head_dim 256, soft-capping
    return Gemma2Config(**{**dict(hidden_size=2304, intermediate_size=9216, num_attention_heads=8,
                                  num_key_value_heads=4, head_dim=256, vocab_size=256000, num_hidden_layers=2), **kw})


def _smollm2_config(**kw: Any):
    from transformers import LlamaConfig  # SmolLM2-360M widths: 960/2560, 15 heads, 5 kv, tied embeddings
    return LlamaConfig(**{**dict(hidden_size=960, intermediate_size=2560, num_attention_heads=15,
                                 num_key_value_heads=5, vocab_size=49152, num_hidden_layers=2,
                                 tie_word_embeddings=True), **kw})


def _gpt2_medium_config(**kw: Any):
    from transformers import GPT2Config  # GPT-2 medium widths: 1024 (4096 MLP), 16 heads, Conv1D layers
    return GPT2Config(**{**dict(n_embd=1024, n_head=16, n_layer=2, vocab_size=50257, resid_pdrop=0.0,
                                embd_pdrop=0.0, attn_pdrop=0.0), **kw})


# Held-out architecture, fifth set: added with the grouped-GEMM labels of other MoE decoders and before any of its
# runs; its expert shape is left out of those labels (collectors/grouped_mm.py). New here: 128 routed experts of 768,
# top-8, no shared expert.
def _qwen3_moe_config(**kw: Any):
    from transformers import Qwen3MoeConfig  # Qwen3-30B-A3B widths: 2048, 128 experts of 768, top-8, 32 heads, 4 kv
    return Qwen3MoeConfig(**{**dict(hidden_size=2048, moe_intermediate_size=768, num_experts=128,
                                    num_experts_per_tok=8, num_attention_heads=32, num_key_value_heads=4,
                                    head_dim=128, vocab_size=151936, num_hidden_layers=2), **kw})


# Held-out architectures, eighth set: added after every rule above was fixed and before any of their runs, never used
# to tune anything. New here: a 7B decoder at batch 1 (GEMVs with K = 14336), a 128256-word tied vocabulary at batch 1
# (Llama 3.2), exactly 64 routed experts of 1024, top-8, with no shared expert (OLMoE), and a Llama 3.2 training step.
def _llama32_config(**kw: Any):
    from transformers import LlamaConfig  # Llama-3.2-1B widths: 2048/8192, 32 heads, 8 kv, vocab 128256, tied
    return LlamaConfig(**{**dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                 num_key_value_heads=8, head_dim=64, vocab_size=128256, num_hidden_layers=2,
                                 tie_word_embeddings=True, rope_theta=500000.0), **kw})


def _olmoe_config(**kw: Any):
    from transformers import OlmoeConfig  # OLMoE-1B-7B widths: 2048, 64 experts of 1024, top-8, 16 heads
    return OlmoeConfig(**{**dict(hidden_size=2048, intermediate_size=1024, num_experts=64, num_experts_per_tok=8,
                                 num_attention_heads=16, num_key_value_heads=16, vocab_size=50304,
                                 num_hidden_layers=2), **kw})


# Held-out architectures, ninth set: added after every rule above was fixed and before any of their runs, never used
# to tune anything. New here: a 262144-word vocabulary at batch 1 with one kv head of 256 (Gemma 3), multi-head
# latent attention with shared and routed experts (DeepSeek-V3's layout), widths that are no multiple of 128 with
# attention sinks (gpt-oss), partial rotary with biases and GELU (Phi-2) at a serving batch and in training.
def _gemma3_config(**kw: Any):
    from transformers import Gemma3TextConfig  # Gemma-3-1B widths: 1152/6912, 4 heads of 256, 1 kv, vocab 262144
    return Gemma3TextConfig(**{**dict(hidden_size=1152, intermediate_size=6912, num_attention_heads=4,
                                      num_key_value_heads=1, head_dim=256, vocab_size=262144, num_hidden_layers=2,
                                      sliding_window=512), **kw})


def _deepseek_config(**kw: Any):
    from transformers import DeepseekV3Config  # DeepSeek-V2-Lite widths in V3's layout: MLA, 64 experts of 1408
    return DeepseekV3Config(**{**dict(hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
                                      n_routed_experts=64, num_experts_per_tok=6, n_shared_experts=2, n_group=1,
                                      topk_group=1, first_k_dense_replace=1, num_attention_heads=16,
                                      num_key_value_heads=16, q_lora_rank=None, kv_lora_rank=512,
                                      qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                                      vocab_size=102400, num_hidden_layers=2), **kw})


def _gptoss_config(**kw: Any):
    from transformers import GptOssConfig  # gpt-oss-20b widths: 2880, 32 experts of 2880, top-4, 64 heads, 8 kv
    return GptOssConfig(**{**dict(hidden_size=2880, intermediate_size=2880, num_local_experts=32,
                                  num_experts_per_tok=4, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                                  vocab_size=201088, num_hidden_layers=2,
                                  attn_implementation="eager"), **kw})  # no SDPA path in transformers


def _phi2_config(**kw: Any):
    from transformers import PhiConfig  # Phi-2 widths: 2560/10240, 32 heads, partial rotary 0.4, biases, GELU
    return PhiConfig(**{**dict(hidden_size=2560, intermediate_size=10240, num_attention_heads=32,
                               num_key_value_heads=32, vocab_size=51200, partial_rotary_factor=0.4,
                               num_hidden_layers=2), **kw})


# Held-out architectures, tenth set (learning from use: a tuned run's labels refit the model, then the default is
# timed on these and on other sizes of the same families): added before any of their runs, never used to tune a rule.
def _granite_config(**kw: Any):
    from transformers import GraniteConfig  # Granite-3.0-2B widths: 2048/8192, 32 heads, 8 kv, vocab 49155
    return GraniteConfig(**{**dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=49155, num_hidden_layers=2,
                                   tie_word_embeddings=True), **kw})


def _qwen2_7b_config(**kw: Any):
    from transformers import Qwen2Config  # Qwen2-7B widths: 3584/18944, 28 heads, 4 kv, vocab 152064
    return Qwen2Config(**{**dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                                 num_key_value_heads=4, vocab_size=152064, num_hidden_layers=2), **kw})


def _qwen25_3b_config(**kw: Any):
    from transformers import Qwen2Config  # Qwen2.5-3B widths: 2048/11008, 16 heads, 2 kv, vocab 151936, tied
    return Qwen2Config(**{**dict(hidden_size=2048, intermediate_size=11008, num_attention_heads=16,
                                 num_key_value_heads=2, vocab_size=151936, num_hidden_layers=2,
                                 tie_word_embeddings=True), **kw})
