"""Registry of zoo models: real architectures' layer widths, random weights, built from configs (no downloads).

Why reduced depth: compile time is the budget of a run (one GPU call is 10 minutes), and a transformer's layers
repeat the same GEMM shapes, so 2 layers keep every distinct kernel of the architecture while compiling several
times faster. Each entry's description says what was reduced. The builders are in ``builders.py``, the
architectures' configs in ``configs.py``; transformers/timm are imported inside ``build``, so that the registry (and
the CPU tests) work without them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from collectors.in_program import context_blocks
from .builders import (DTYPES, Build, _bart_train, _bert, _bert_train, _causal_lm, _causal_lm_train, _clip_vision,
                       _deberta, _gpt2_decode, _quantized_lm, _t5_encoder, _timm, _tiny, _wav2vec2, _whisper)
from .configs import (_deepseek_config, _falcon_config, _gemma2_config, _gemma3_config, _gemma_config,
                      _gpt2_medium_config, _gptoss_config, _llama32_config, _llama_config, _mistral_config,
                      _mixtral_config, _neox_config, _olmoe_config, _opt_config, _phi2_config, _phi3_config,
                      _qwen25_config, _qwen2_config, _qwen2_moe_config, _qwen3_config, _qwen3_moe_config,
                      _smollm2_config, _starcoder2_config, _granite_config, _qwen2_7b_config, _qwen25_3b_config)


@dataclass(frozen=True)
class ZooModel:
    """One benchmark model. ``dtype`` is the weights' dtype, or ``amp-bfloat16`` (fp32 weights under autocast)."""

    name: str
    family: str
    kind: str  # "infer" | "train"
    dtype: str
    build: Build = field(repr=False)
    description: str = ""
    # rel-error bound against eager where the dtype's (step.TOLERANCE) does not fit: quantised models quantise
    # activations per token, so the last bf16 bit of a compiled activation (fp32 inside fused kernels) can move a
    # value across a quantisation step (e4m3: 1/8 relative; int8: 1/127 of the row's max) and that spreads
    # through the layers. Measured on an H100, the same under plain torch.compile and the hook: 0.103 for
    # llama-fp8-prefill, 0.054 for llama-w8a8-prefill (0.035 at decode).
    tolerance: float | None = None
    # 0: in the zoo the policy was tuned on; N: the Nth held-out set, added after the policy of its day was fixed
    # and never used to tune anything (the report's figures per set say how the hook generalises)
    held_out_set: int = 0
    # decoder layers, where the entry is a decoder at its real depth: the record carries the memory floor
    # (``floor.floor_record``) and the report the census per layer
    layers: int | None = None

    @property
    def summary(self) -> str:
        """The description as the records and reports carry it, the held-out set said."""
        return f"{self.description} (held out, set {self.held_out_set})" if self.held_out_set else self.description

    @property
    def amp_dtype(self) -> torch.dtype | None:
        """The autocast dtype for AMP entries, else None."""
        return DTYPES[self.dtype[4:]] if self.dtype.startswith("amp-") else None

    @property
    def compute_dtype(self) -> str:
        """The dtype the matmuls run in (sets the correctness tolerance)."""
        return self.dtype[4:] if self.dtype.startswith("amp-") else self.dtype


_TWO = "2 layers (real widths)"
_ENTRIES = [
    ZooModel("llama-prefill", "llm-prefill", "infer", "bfloat16", _causal_lm(_llama_config, 1, 512, "bfloat16"),
             f"Llama (TinyLlama-1.1B widths: 2048/5632, 32 heads, 4 kv), {_TWO}; 1x512 prefill, all logits"),
    ZooModel("qwen2-prefill", "llm-prefill", "infer", "float16",
             _causal_lm(_qwen2_config, 1, 512, "float16", logits_to_keep=1),
             f"Qwen2 (1.5B widths: 1536/8960, 12 heads, 2 kv, vocab 151936), {_TWO}; 1x512 prefill, "
             "last-token logits only (logits_to_keep=1, as generate does)"),
    ZooModel("llama-decode-b8", "llm-decode", "infer", "bfloat16", _causal_lm(_llama_config, 8, 1, "bfloat16"),
             f"Llama (TinyLlama widths), {_TWO}; one token x batch 8, no KV cache (decode-shaped GEMMs, M=8)"),
    ZooModel("llama-decode-b32", "llm-decode", "infer", "bfloat16", _causal_lm(_llama_config, 32, 1, "bfloat16"),
             f"Llama (TinyLlama widths), {_TWO}; one token x batch 32, no KV cache (M=32)"),
    ZooModel("gpt2-decode", "llm-decode", "infer", "float16", _gpt2_decode,
             f"GPT-2 small widths (768, 12 heads), {_TWO}; one token x batch 16, no KV cache"),
    ZooModel("bert-base", "encoder", "infer", "float16", _bert("float16"),
             f"BERT-base widths (768/3072, 12 heads), {_TWO}; 8x128, last hidden state"),
    ZooModel("bert-base-fp32", "encoder", "infer", "float32", _bert("float32"),
             f"BERT-base widths, {_TWO}; 8x128 in fp32 (TF32 at torch defaults, recorded)"),
    ZooModel("vit-base", "vision-transformer", "infer", "bfloat16",
             _timm("vit_base_patch16_224", 32, "bfloat16", depth=2),
             "timm vit_base_patch16_224, depth 12 -> 2; batch 32"),
    ZooModel("vit-base-full", "vision-transformer", "infer", "bfloat16", _timm("vit_base_patch16_224", 32, "bfloat16"),
             "timm vit_base_patch16_224 at full depth (12 blocks): the stem's share of a real ViT step; batch 32"),
    ZooModel("deit-small", "vision-transformer", "infer", "float16",
             _timm("deit_small_patch16_224", 32, "float16", depth=2),
             "timm deit_small_patch16_224 (384 wide, 6 heads), depth 12 -> 2; batch 32"),
    ZooModel("swin-tiny", "vision-transformer", "infer", "float16",
             _timm("swin_tiny_patch4_window7_224", 32, "float16", depths=(2, 2, 2, 2)),
             "timm swin_tiny_patch4_window7_224, depths (2,2,6,2) -> (2,2,2,2); batch 32"),
    ZooModel("resnet50", "vision-conv", "infer", "float16", _timm("resnet50", 32, "float16"),
             "timm resnet50, full depth; batch 32"),
    ZooModel("convnext-tiny", "vision-conv", "infer", "bfloat16",
             _timm("convnext_tiny", 32, "bfloat16", depths=(2, 2, 2, 2)),
             "timm convnext_tiny, depths (3,3,9,3) -> (2,2,2,2); batch 32"),
    ZooModel("whisper-base", "speech", "infer", "float16", _whisper,
             "Whisper-base widths (512/2048, 8 heads), 2 encoder + 2 decoder layers; batch 4 x 80 mel x 3000 "
             "frames, 64 decoder tokens, logits"),
    ZooModel("llama-train", "train", "train", "bfloat16", _causal_lm_train(_llama_config, 4, 256, "bfloat16"),
             f"Llama (TinyLlama widths), {_TWO}; bf16 weights, 4x256 tokens, causal-LM loss, AdamW"),
    ZooModel("vit-base-train", "train", "train", "amp-bfloat16",
             _timm("vit_base_patch16_224", 32, "amp-bfloat16", train=True, depth=2),
             "timm vit_base_patch16_224 depth 2; fp32 weights + bf16 autocast, batch 32, cross-entropy, AdamW"),
    ZooModel("bert-train", "train", "train", "bfloat16", _bert_train,
             f"BERT-base widths masked LM, {_TWO}, dropout 0; bf16 weights, 8x128, AdamW"),
    # quantized LLMs (issue 16): torchao's recipes reproduced by quant.py, decoder-layer Linears only
    ZooModel("llama-w8a8-prefill", "llm-quant", "infer", "bfloat16",
             _quantized_lm(_llama_config, 1, 512, "w8a8"),
             f"llama-prefill with torchao Int8DynamicActivationInt8WeightConfig (int8 per-channel weights, per-token "
             f"dynamic int8 activations, _int_mm with B column-major) in the decoder layers, {_TWO}; 1x512, all "
             "logits", tolerance=0.08),
    ZooModel("llama-w8a8-decode", "llm-quant", "infer", "bfloat16",
             _quantized_lm(_llama_config, 32, 1, "w8a8"),
             f"Llama (TinyLlama widths) int8 w8a8 as llama-w8a8-prefill, {_TWO}; one token x batch 32, no KV cache "
             "(M=32: cuBLAS _int_mm needs M > 16)", tolerance=0.08),
    ZooModel("qwen2-w8a8-decode", "llm-quant", "infer", "bfloat16",
             _quantized_lm(_qwen2_config, 32, 1, "w8a8"),
             f"Qwen2 (1.5B widths, q/k/v biases) int8 w8a8 as llama-w8a8-prefill, bf16, {_TWO}; one token x batch "
             "32, no KV cache (M=32)", tolerance=0.08),
    ZooModel("llama-fp8-prefill", "llm-quant", "infer", "bfloat16",
             _quantized_lm(_llama_config, 1, 512, "fp8-rowwise"),
             f"llama-prefill with torchao Float8DynamicActivationFloat8WeightConfig(PerRow()) (e4m3 per-row weights, "
             f"per-token dynamic e4m3 activations, rowwise _scaled_mm, fast accumulation) in the decoder layers, "
             f"{_TWO}; 1x512, all logits", tolerance=0.15),
    ZooModel("qwen2-fp8-prefill", "llm-quant", "infer", "bfloat16",
             _quantized_lm(_qwen2_config, 1, 512, "fp8-rowwise", logits_to_keep=1),
             f"Qwen2 (1.5B widths) fp8 rowwise as llama-fp8-prefill (bias into _scaled_mm), bf16, {_TWO}; 1x512 "
             "prefill, last-token logits", tolerance=0.15),
    ZooModel("llama-fp8-train", "train", "train", "bfloat16",
             _quantized_lm(_llama_config, 4, 256, "fp8-train"),
             f"llama-train with torchao float8 training (Float8Linear, tensorwise dynamic scaling: e4m3 forward, "
             f"e5m2 grads, _scaled_mm in forward and both backward GEMMs) in the decoder layers, {_TWO}; bf16 "
             "weights, 4x256 tokens, AdamW"),
    # held out (see _mistral_config): not used to tune any policy
    ZooModel("mistral-prefill", "llm-prefill", "infer", "bfloat16", _causal_lm(_mistral_config, 1, 512, "bfloat16"),
             f"Mistral (7B widths: 4096/14336, 32 heads, 8 kv), {_TWO}; 1x512 prefill, all logits",
             held_out_set=1),
    ZooModel("phi3-decode-b16", "llm-decode", "infer", "bfloat16", _causal_lm(_phi3_config, 16, 1, "bfloat16"),
             f"Phi-3-mini widths (3072/8192, fused qkv and gate_up), {_TWO}; one token x batch 16, no KV cache",
             held_out_set=1),
    ZooModel("opt-decode-b4", "llm-decode", "infer", "float16", _causal_lm(_opt_config, 4, 1, "float16"),
             f"OPT-1.3b widths (2048/8192, biases, ReLU), {_TWO}; one token x batch 4, no KV cache",
             held_out_set=1),
    ZooModel("t5-encoder", "encoder", "infer", "bfloat16", _t5_encoder,
             f"T5-base encoder widths (768/3072, 12 heads, relative position bias), {_TWO}; 8x256",
             held_out_set=1),
    ZooModel("mixer-b16", "vision-mlp", "infer", "float16", _timm("mixer_b16_224", 32, "float16"),
             "timm mixer_b16_224 (token- and channel-mixing MLPs), full depth (timm fixes num_blocks); batch 32",
             held_out_set=1),
    ZooModel("neox-train", "train", "train", "bfloat16", _causal_lm_train(_neox_config, 8, 256, "bfloat16"),
             f"GPT-NeoX (Pythia-410m widths: 1024/4096, parallel residual), {_TWO}; bf16 weights, 8x256 tokens, "
             "causal-LM loss, AdamW", held_out_set=1),
    # held out, second set (see _gemma_config): not used to tune any policy
    ZooModel("gemma-prefill", "llm-prefill", "infer", "bfloat16",
             _causal_lm(_gemma_config, 2, 256, "bfloat16", logits_to_keep=1),
             f"Gemma (2B widths: 2048/16384, 8 heads, 1 kv, head_dim 256, GeGLU, vocab 256000), {_TWO}; 2x256 "
             "prefill, last-token logits", held_out_set=2),
    ZooModel("qwen3-decode-b64", "llm-decode", "infer", "bfloat16", _causal_lm(_qwen3_config, 64, 1, "bfloat16"),
             f"Qwen3 (1.7B widths: 2048/6144, 16 heads, 8 kv, q/k norms), {_TWO}; one token x batch 64, no KV "
             "cache", held_out_set=2),
    ZooModel("clip-vit-l", "vision-transformer", "infer", "float16", _clip_vision,
             f"CLIP vision tower (ViT-L/14 widths: 1024/4096, 16 heads), {_TWO}; batch 16 at 224 px, 257 tokens",
             held_out_set=2),
    ZooModel("wav2vec2", "speech", "infer", "float16", _wav2vec2,
             f"wav2vec2-base widths (conv feature encoder, 768/3072, 12 heads), {_TWO}; batch 4 x 2 s of 16 kHz "
             "audio", held_out_set=2),
    ZooModel("bart-train", "train", "train", "bfloat16", _bart_train,
             "BART-base widths (768/3072, 12 heads), 2 encoder + 2 decoder layers, dropout 0; bf16 weights, 8x128 "
             "in, 8x64 labels, AdamW", held_out_set=2),
    # held out, third set (see _falcon_config): not used to tune anything
    ZooModel("falcon-prefill", "llm-prefill", "infer", "bfloat16",
             _causal_lm(_falcon_config, 1, 512, "bfloat16", logits_to_keep=1),
             f"Falcon (7B widths: 4544, 71 heads, multi-query, parallel attention), {_TWO}; 1x512 prefill, "
             "last-token logits", held_out_set=3),
    ZooModel("deberta-base", "encoder", "infer", "float16", _deberta,
             f"DeBERTa-v3-base widths (768/3072, 12 heads, disentangled relative attention), {_TWO}; 8x256",
             held_out_set=3),
    ZooModel("starcoder2-decode-b64", "llm-decode", "infer", "float16",
             _causal_lm(_starcoder2_config, 64, 1, "float16"),
             f"StarCoder2-3B widths (3072/12288, 24 heads, 2 kv, biases, GELU), {_TWO}; one token x batch 64, no "
             "KV cache", held_out_set=3),
    ZooModel("efficientnet-b0", "vision-conv", "infer", "float16", _timm("efficientnet_b0", 32, "float16"),
             "timm efficientnet_b0 (depthwise-separable convolutions, squeeze-excite), full depth; batch 32",
             held_out_set=3),
    ZooModel("resnet26-train", "train", "train", "amp-bfloat16", _timm("resnet26", 32, "amp-bfloat16", train=True),
             "timm resnet26, full depth; fp32 weights + bf16 autocast, batch 32, cross-entropy, AdamW",
             held_out_set=3),
    # batch-1 decode (every GEMM has M=1: the GEMV path) and mixture-of-experts layers (grouped GEMMs), added with
    # the GEMV rule and before any of their runs
    ZooModel("llama-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_llama_config, 1, 1, "bfloat16"),
             f"Llama (TinyLlama widths: 2048/5632, 32 heads, 4 kv), {_TWO}; one token at batch 1, no KV cache (M=1)"),
    ZooModel("qwen2-decode-b1", "llm-decode", "infer", "float16", _causal_lm(_qwen2_config, 1, 1, "float16"),
             f"Qwen2 (1.5B widths: 1536/8960, vocab 151936, tied embeddings), {_TWO}; one token at batch 1, no KV "
             "cache (M=1)"),
    ZooModel("phi3-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_phi3_config, 1, 1, "bfloat16"),
             f"Phi-3-mini widths (3072/8192, fused qkv and gate_up), {_TWO}; one token at batch 1, no KV cache (M=1)"),
    ZooModel("mixtral-moe-prefill", "llm-moe", "infer", "bfloat16",
             _causal_lm(_mixtral_config, 1, 512, "bfloat16", logits_to_keep=1),
             f"Mixtral (8x7B widths: 4096/14336, 8 experts, top-2 routing, grouped GEMMs), {_TWO}; 1x512 prefill, "
             "last-token logits"),
    ZooModel("mixtral-moe-decode-b1", "llm-moe", "infer", "bfloat16", _causal_lm(_mixtral_config, 1, 1, "bfloat16"),
             f"Mixtral (8x7B widths, 8 experts, top-2), {_TWO}; one token at batch 1, no KV cache"),
    # held out, fourth set (see _qwen2_moe_config): added before any of their runs, not used to tune anything
    ZooModel("qwen2-moe-decode-b1", "llm-moe", "infer", "bfloat16", _causal_lm(_qwen2_moe_config, 1, 1, "bfloat16"),
             f"Qwen1.5-MoE-A2.7B widths (2048, 60 routed experts of 1408, top-4, gated shared expert of 5632, vocab "
             f"151936), {_TWO}; one token at batch 1, no KV cache", held_out_set=4),
    ZooModel("qwen2-moe-prefill", "llm-moe", "infer", "bfloat16",
             _causal_lm(_qwen2_moe_config, 1, 512, "bfloat16", logits_to_keep=1),
             f"Qwen1.5-MoE-A2.7B widths as qwen2-moe-decode-b1, {_TWO}; 1x512 prefill, last-token logits",
             held_out_set=4),
    ZooModel("gemma2-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_gemma2_config, 1, 1, "bfloat16"),
             f"Gemma-2-2B widths (2304/9216, 8 heads, 4 kv, head_dim 256, logit soft-capping, vocab 256000), {_TWO}; "
             "one token at batch 1, no KV cache (M=1)", held_out_set=4),
    ZooModel("smollm2-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_smollm2_config, 1, 1, "bfloat16"),
             f"SmolLM2-360M widths (960/2560, 15 heads, 5 kv, tied embeddings), {_TWO}; one token at batch 1, no KV "
             "cache (M=1)", held_out_set=4),
    # a decoder whose GEMVs reduce K <= 1024 in one persistent block (labelled: datasets/nvidia-h100/GEMV_BLOCKS.md)
    ZooModel("qwen25-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_qwen25_config, 1, 1, "bfloat16"),
             f"Qwen2.5-0.5B widths (896/4864, 14 heads, 2 kv, vocab 151936, tied embeddings), {_TWO}; one token at "
             "batch 1, no KV cache (M=1)"),
    ZooModel("levit-128", "vision-transformer", "infer", "float16", _timm("levit_128", 32, "float16"),
             "timm levit_128 (attention and MLPs 128-384 wide on 196-16 tokens, Linear + BatchNorm), full depth; "
             "batch 32", held_out_set=4),
    ZooModel("tiny-vit-5m", "vision-transformer", "infer", "float16", _timm("tiny_vit_5m_224", 32, "float16"),
             "timm tiny_vit_5m_224 (convolutional stem, windowed attention 64-320 wide), full depth; batch 32",
             held_out_set=4),
    ZooModel("gpt2-medium-train", "train", "train", "bfloat16",
             _causal_lm_train(_gpt2_medium_config, 8, 256, "bfloat16"),
             f"GPT-2 medium widths (1024/4096, 16 heads, Conv1D layers: the weight stored K x N), {_TWO}, dropout 0; "
             "bf16 weights, 8x256 tokens, causal-LM loss, AdamW", held_out_set=4),
    # held out, fifth set (see _qwen3_moe_config): added before any of their runs, not used to tune anything
    ZooModel("qwen3-moe-decode-b1", "llm-moe", "infer", "bfloat16", _causal_lm(_qwen3_moe_config, 1, 1, "bfloat16"),
             f"Qwen3-30B-A3B widths (2048, 128 routed experts of 768, top-8, 32 heads, 4 kv, vocab 151936), {_TWO}; "
             "one token at batch 1, no KV cache", held_out_set=5),
    ZooModel("qwen3-moe-prefill", "llm-moe", "infer", "bfloat16",
             _causal_lm(_qwen3_moe_config, 1, 512, "bfloat16", logits_to_keep=1),
             f"Qwen3-30B-A3B widths as qwen3-moe-decode-b1, {_TWO}; 1x512 prefill, last-token logits",
             held_out_set=5),
    ZooModel("qwen3-moe-train", "train", "train", "bfloat16", _causal_lm_train(_qwen3_moe_config, 4, 256, "bfloat16"),
             f"Qwen3-30B-A3B widths as qwen3-moe-decode-b1, {_TWO}; bf16 weights, 4x256 tokens (64 routed rows per "
             "expert on average), causal-LM loss, AdamW", held_out_set=5),
    # held out, sixth set: vision models with patch-embedding stems, added after the patch rule (runtime.patchify)
    # was fixed, not used to tune anything; full depth
    ZooModel("beit-base", "vision-transformer", "infer", "float16", _timm("beit_base_patch16_224", 32, "float16"),
             "timm beit_base_patch16_224 (relative position bias, layer scale), full depth; batch 32", held_out_set=6),
    ZooModel("dinov2-small", "vision-transformer", "infer", "bfloat16",
             _timm("vit_small_patch14_dinov2", 32, "bfloat16", img_size=224),
             "timm vit_small_patch14_dinov2 at 224 px (14-pixel patches, 256 tokens), full depth; batch 32",
             held_out_set=6),
    ZooModel("eva02-small", "vision-transformer", "infer", "float16", _timm("eva02_small_patch14_224", 32, "float16"),
             "timm eva02_small_patch14_224 (rotary positions, SwiGLU), full depth; batch 32", held_out_set=6),
    ZooModel("convnextv2-tiny", "vision-conv", "infer", "bfloat16", _timm("convnextv2_tiny", 32, "bfloat16"),
             "timm convnextv2_tiny (global response norm), full depth (3,3,9,3); batch 32", held_out_set=6),
    # held out, seventh set: token-mixing models at image sizes whose token counts (324, 225) no label has, added
    # with the short-unaligned region model (predictor.core.regions) and not used to fit it; full depth
    ZooModel("gmlp-s16-288", "vision-mlp", "infer", "float16", _timm("gmlp_s16_224", 32, "float16", img_size=288),
             "timm gmlp_s16_224 at 288 px (324 tokens; spatial gating unit), full depth; batch 32", held_out_set=7),
    ZooModel("resmlp-24-240", "vision-mlp", "infer", "bfloat16", _timm("resmlp_24_224", 32, "bfloat16", img_size=240),
             "timm resmlp_24_224 at 240 px (225 tokens; affine norms, token linear), full depth; batch 32",
             held_out_set=7),
    # held out, eighth set (see _llama32_config): added before any of their runs, not used to tune anything
    ZooModel("mistral-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_mistral_config, 1, 1, "bfloat16"),
             f"Mistral (7B widths: 4096/14336, 32 heads, 8 kv), {_TWO}; one token at batch 1, no KV cache (M=1)",
             held_out_set=8),
    ZooModel("llama32-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_llama32_config, 1, 1, "bfloat16"),
             f"Llama 3.2 (1B widths: 2048/8192, 32 heads, 8 kv, vocab 128256, tied embeddings), {_TWO}; one token "
             "at batch 1, no KV cache (M=1)", held_out_set=8),
    ZooModel("olmoe-decode-b1", "llm-moe", "infer", "bfloat16", _causal_lm(_olmoe_config, 1, 1, "bfloat16"),
             f"OLMoE-1B-7B widths (2048, 64 routed experts of 1024, top-8, no shared expert), {_TWO}; one token at "
             "batch 1, no KV cache", held_out_set=8),
    ZooModel("olmoe-prefill", "llm-moe", "infer", "bfloat16",
             _causal_lm(_olmoe_config, 1, 512, "bfloat16", logits_to_keep=1),
             f"OLMoE-1B-7B widths as olmoe-decode-b1, {_TWO}; 1x512 prefill, last-token logits", held_out_set=8),
    ZooModel("vit-tiny-b8", "vision-transformer", "infer", "float16", _timm("vit_tiny_patch16_224", 8, "float16"),
             "timm vit_tiny_patch16_224 (192 wide, 3 heads), full depth; batch 8", held_out_set=8),
    ZooModel("pvt-v2-b1", "vision-transformer", "infer", "float16", _timm("pvt_v2_b1", 32, "float16"),
             "timm pvt_v2_b1 (spatial-reduction attention, 64-512 wide, overlapping patch embeddings), full depth; "
             "batch 32", held_out_set=8),
    ZooModel("llama32-train", "train", "train", "bfloat16", _causal_lm_train(_llama32_config, 4, 256, "bfloat16"),
             f"Llama 3.2 (1B widths, vocab 128256, tied embeddings), {_TWO}; bf16 weights, 4x256 tokens, causal-LM "
             "loss, AdamW", held_out_set=8),
    # held out, ninth set (see _gemma3_config): added before any of their runs, not used to tune anything
    ZooModel("gemma3-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_gemma3_config, 1, 1, "bfloat16"),
             f"Gemma 3 (1B widths: 1152/6912, 4 heads of 256, 1 kv, vocab 262144), {_TWO}; one token at batch 1, "
             "no KV cache (M=1)", held_out_set=9),
    ZooModel("deepseek-moe-decode-b1", "llm-moe", "infer", "bfloat16", _causal_lm(_deepseek_config, 1, 1, "bfloat16"),
             f"DeepSeek-V3 layout at V2-Lite widths (MLA with kv rank 512; one dense layer, one of 64 routed experts "
             f"of 1408, top-6, 2 shared), {_TWO}; one token at batch 1, no KV cache", held_out_set=9),
    ZooModel("gptoss-moe-prefill", "llm-moe", "infer", "bfloat16",
             _causal_lm(_gptoss_config, 1, 512, "bfloat16", logits_to_keep=1),
             f"gpt-oss-20b widths (2880, 32 experts of 2880, top-4, attention sinks, eager attention), {_TWO}; "
             "1x512 prefill, last-token logits", held_out_set=9),
    ZooModel("phi2-decode-b32", "llm-decode", "infer", "bfloat16", _causal_lm(_phi2_config, 32, 1, "bfloat16"),
             f"Phi-2 (2560/10240, 32 heads, partial rotary, biases, GELU), {_TWO}; one token at batch 32, no KV "
             "cache (M=32)", held_out_set=9),
    ZooModel("twins-svt-small", "vision-transformer", "infer", "float16", _timm("twins_svt_small", 32, "float16"),
             "timm twins_svt_small (locally-grouped and global sub-sampled attention, 64-512 wide), full depth; "
             "batch 32", held_out_set=9),
    ZooModel("mobilevitv2-100", "vision-hybrid", "infer", "float16", _timm("mobilevitv2_100", 32, "float16"),
             "timm mobilevitv2_100 (inverted residual convolutions, separable linear attention), full depth; batch 32",
             held_out_set=9),
    ZooModel("phi2-train", "train", "train", "bfloat16", _causal_lm_train(_phi2_config, 4, 256, "bfloat16"),
             f"Phi-2 widths, {_TWO}; bf16 weights, 4x256 tokens, causal-LM loss, AdamW", held_out_set=9),
    # tenth set (configs._granite_config): set A is tuned (its labels refit the model), set B only timed after.
    # A: granite-decode-b1, qwen2-7b-decode-b8, mixtral-moe-decode-b8, deit-tiny-b16, qwen25-3b-decode-b1,
    # cait-xxs24-b8; B (other batch sizes and widths of A's families): granite-decode-b4, qwen2-7b-decode-b2,
    # deit-small-b8, qwen25-3b-decode-b4
    ZooModel("granite-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_granite_config, 1, 1, "bfloat16"),
             f"Granite-3.0-2B widths (2048/8192, 32 heads, 8 kv, vocab 49155), {_TWO}; one token at batch 1, no KV "
             "cache (M=1)", held_out_set=10),
    ZooModel("qwen2-7b-decode-b8", "llm-decode", "infer", "bfloat16", _causal_lm(_qwen2_7b_config, 8, 1, "bfloat16"),
             f"Qwen2-7B widths (3584/18944, 28 heads, 4 kv, vocab 152064), {_TWO}; one token at batch 8 (M=8)",
             held_out_set=10),
    ZooModel("mixtral-moe-decode-b8", "llm-moe", "infer", "bfloat16", _causal_lm(_mixtral_config, 8, 1, "bfloat16"),
             f"Mixtral (8x7B widths, 8 experts, top-2), {_TWO}; one token at batch 8", held_out_set=10),
    ZooModel("deit-tiny-b16", "vision-transformer", "infer", "float16", _timm("deit_tiny_patch16_224", 16, "float16"),
             "timm deit_tiny_patch16_224 (192 wide, 3 heads), full depth; batch 16", held_out_set=10),
    ZooModel("granite-decode-b4", "llm-decode", "infer", "bfloat16", _causal_lm(_granite_config, 4, 1, "bfloat16"),
             f"Granite-3.0-2B widths as granite-decode-b1, {_TWO}; one token at batch 4 (M=4)", held_out_set=10),
    ZooModel("qwen2-7b-decode-b2", "llm-decode", "infer", "bfloat16", _causal_lm(_qwen2_7b_config, 2, 1, "bfloat16"),
             f"Qwen2-7B widths as qwen2-7b-decode-b8, {_TWO}; one token at batch 2 (M=2)", held_out_set=10),
    ZooModel("deit-small-b8", "vision-transformer", "infer", "float16", _timm("deit_small_patch16_224", 8, "float16"),
             "timm deit_small_patch16_224 (384 wide, 6 heads), full depth; batch 8", held_out_set=10),
    ZooModel("qwen25-3b-decode-b1", "llm-decode", "infer", "bfloat16", _causal_lm(_qwen25_3b_config, 1, 1, "bfloat16"),
             f"Qwen2.5-3B widths (2048/11008, 16 heads, 2 kv, vocab 151936, tied), {_TWO}; one token at batch 1, no "
             "KV cache (M=1)", held_out_set=10),
    ZooModel("cait-xxs24-b8", "vision-transformer", "infer", "float16", _timm("cait_xxs24_224", 8, "float16"),
             "timm cait_xxs24_224 (192 wide, talking-heads attention, layer scale, class-attention layers), full "
             "depth; batch 8", held_out_set=10),
    ZooModel("qwen25-3b-decode-b4", "llm-decode", "infer", "bfloat16", _causal_lm(_qwen25_3b_config, 4, 1, "bfloat16"),
             f"Qwen2.5-3B widths as qwen25-3b-decode-b1, {_TWO}; one token at batch 4 (M=4)", held_out_set=10),
    # eleventh set: decoders at their real depth, batch-1 decode; the floor is their weights' bytes over the copy
    # bandwidth (``floor.py``): what sits between the GEMVs (norms, rotary, attention at one token) shows here
    ZooModel("llama-full-b1", "llm-decode", "infer", "bfloat16",
             _causal_lm(functools.partial(_llama_config, num_hidden_layers=22), 1, 1, "bfloat16"),
             "TinyLlama-1.1B at full depth (22 layers, 2048/5632, 32 heads, 4 kv); one token at batch 1, no KV cache",
             held_out_set=11, layers=22),
    ZooModel("qwen2-full-b1", "llm-decode", "infer", "float16",
             _causal_lm(functools.partial(_qwen2_config, num_hidden_layers=28), 1, 1, "float16"),
             "Qwen2-1.5B at full depth (28 layers, 1536/8960, vocab 151936, tied); one token at batch 1, no KV cache",
             held_out_set=11, layers=28),
    ZooModel("smollm2-full-b1", "llm-decode", "infer", "bfloat16",
             _causal_lm(functools.partial(_smollm2_config, num_hidden_layers=32), 1, 1, "bfloat16"),
             "SmolLM2-360M at full depth (32 layers, 960/2560, 15 heads, 5 kv, tied); one token at batch 1, no KV "
             "cache", held_out_set=11, layers=32),
    ZooModel("granite-full-b1", "llm-decode", "infer", "bfloat16",
             _causal_lm(functools.partial(_granite_config, num_hidden_layers=40), 1, 1, "bfloat16"),
             "Granite-3.0-2B at full depth (40 layers, 2048/8192, 32 heads, 8 kv, vocab 49155, tied); one token at "
             "batch 1, no KV cache", held_out_set=11, layers=40),
    ZooModel("tiny-mlp", "test", "infer", "float32", _tiny(False), "Linear-GELU-Linear 64 wide, batch 8 (CPU tests)"),
    ZooModel("tiny-train", "test", "train", "float32", _tiny(True), "tiny-mlp + MSE loss, AdamW (CPU tests)"),
]
REGISTRY: dict[str, ZooModel] = {m.name: m for m in _ENTRIES}


def names(kind: str | None = None, tests: bool = False) -> list[str]:
    """Registered model names in registry order; ``kind`` filters infer/train; the CPU test models
    (family "test") only with ``tests=True`` (``--models all`` means the real ones)."""
    return [m.name for m in _ENTRIES if (kind is None or m.kind == kind) and (tests or m.family != "test")]


def get(name: str) -> ZooModel:
    """The entry called ``name``; ValueError naming it and the known ones otherwise."""
    if name in REGISTRY:
        return REGISTRY[name]
    spec = context_blocks.parse(name)
    if spec is None:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(REGISTRY)}, or a context block "
                         "ctx-<gelu|relu|swiglu>-m<M>-d<D>-h<H>[-v<V>]-<bf16|fp16|fp32>")
    head = f", head {spec['d']}x{spec['v']}" if spec["v"] else ""
    return ZooModel(name, "context", "infer", spec["dtype"], context_blocks.build_from_name(name),
                    f"context block: {context_blocks.LAYERS} {spec['act']} MLP layers {spec['d']}/{spec['h']}{head}, "
                    f"{spec['m']} tokens")
