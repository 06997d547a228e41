"""The shape corpus's tables: the real model families (layer shapes, token counts, dtypes) and the M sweeps.

``collectors.corpus`` turns them into problems; the names are re-exported there.
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL_KINDS = ("llm", "enc", "vit", "speech")

# (k, n, dtype, layout_b): real layer shapes whose n*k <= 2**23, so M = 16384 stays inside MAX_MNKB.
MSWEEPS: tuple[tuple[int, int, str, str], ...] = (
    (4096, 1024, "bfloat16", "col"),  # llama3-8b k/v proj, forward
    (2048, 2048, "float16", "col"),  # llama3.2-1b q/o proj, forward
    (768, 3072, "float32", "col"),  # bert-base / vit-b16 fc1, forward
    (896, 4864, "bfloat16", "col"),  # qwen2-0.5b gate/up, forward
    (3072, 768, "float16", "row"),  # bert-base fc1, grad wrt input (dY @ W)
    (4864, 896, "bfloat16", "row"),  # qwen2-0.5b gate/up, grad wrt input
)
# Powers of two 1..16384, odd values between them (incl. just past a power of two), and 3*2^j.
MSWEEP_M: tuple[int, ...] = tuple(sorted(
    [2**i for i in range(15)]
    + [3, 7, 13, 25, 47, 77, 129, 197, 333, 777, 1025, 1499, 2049, 3001, 4097, 8191, 12289]
    + [24, 96, 384, 1536, 6144]
))


# ---------------------------------------------------------------------------------------------
# Model families (dimensions from each model's published config; see CORPUS.md for the sources)


@dataclass(frozen=True)
class Linear:
    """One linear layer: ``in_f`` -> ``out_f`` features.

    ``train=False`` marks fused projections as inference engines run them (forward only);
    ``m_div`` divides the family's token count (Swin stages see 1/4 of the tokens of the previous one);
    ``weight`` overrides the family's weight storage (GPT-2's tied lm_head is an F.linear among Conv1Ds).
    """

    name: str
    in_f: int
    out_f: int
    bias: bool = False
    train: bool = True
    m_div: int = 1
    weight: str = ""


@dataclass(frozen=True)
class Attention:
    """Attention scores as batched GEMMs: b = batch*heads, QK^T (m=n=seq, k=head_dim) and PV."""

    heads: int
    head_dim: int
    seq_batch: tuple[tuple[int, int], ...]  # (seq, batch) pairs


@dataclass(frozen=True)
class ModelFamily:
    kind: str  # llm | enc | vit | speech
    name: str
    source: str  # where the dimensions come from
    layers: tuple[Linear, ...]
    train_m: tuple[int, ...]  # token counts run forward + both backward GEMMs
    infer_m: tuple[int, ...]  # token counts run forward only
    int8_m: tuple[int, ...] = ()  # forward token counts also run as int8 ``_int_mm`` (w8a8)
    weight: str = "linear"  # linear: W stored (out, in), F.linear -> B col; conv1d: W stored (in, out), B row
    attention: Attention | None = None
    dtype_weights: tuple[tuple[str, float], ...] = (("bfloat16", 0.45), ("float16", 0.37), ("float32", 0.18))

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"model family {self.name}: kind {self.kind!r} is not one of {', '.join(MODEL_KINDS)}")
        weights = {self.weight} | {layer.weight for layer in self.layers if layer.weight}
        if not weights <= {"linear", "conv1d"}:
            raise ValueError(f"model family {self.name}: weight storage must be linear or conv1d, got {sorted(weights)}")

    @property
    def group(self) -> str:
        return f"{self.kind}:{self.name}"


def _llama(q: int, kv: int, hidden: int, inter: int, qkv_bias: bool = False) -> tuple[Linear, ...]:
    """HF Llama-style decoder layer: separate q/k/v/o and gate/up/down projections (``kv_proj`` stands for
    k_proj and v_proj, ``gate_proj`` for gate_proj and up_proj: same shapes), plus the fused qkv and gate_up
    projections inference engines run (forward only)."""
    return (
        Linear("q_proj", hidden, q, qkv_bias), Linear("kv_proj", hidden, kv, qkv_bias),
        Linear("o_proj", q, hidden), Linear("gate_proj", hidden, inter), Linear("down_proj", inter, hidden),
        Linear("qkv_proj", hidden, q + 2 * kv, qkv_bias, train=False),
        Linear("gate_up_proj", hidden, 2 * inter, train=False),
    )


def _encoder(hidden: int, ffn: int, bias: bool = True, fused_qkv: bool = False) -> tuple[Linear, ...]:
    """Transformer encoder block; without a fused qkv, ``attn_proj`` stands for q/k/v/out (all hidden -> hidden)."""
    if fused_qkv:
        attn: tuple[Linear, ...] = (Linear("qkv", hidden, 3 * hidden, bias), Linear("out_proj", hidden, hidden, bias))
    else:
        attn = (Linear("attn_proj", hidden, hidden, bias),)
    return (*attn, Linear("fc1", hidden, ffn, bias), Linear("fc2", ffn, hidden, bias))


LLM_TRAIN = (512, 1000, 2047, 3333, 4096, 6143, 8192, 12000, 16384)  # batch x seq; 2047 = packed sequences
LLM_INFER = (1, 2, 4, 7, 8, 16, 24, 33, 64, 100, 128, 255, 333, 512, 1023, 2048, 4097)  # decode batches and prefill lengths
LLM_INT8 = (32, 128, 333, 2048)

MODEL_FAMILIES: tuple[ModelFamily, ...] = (
    # ---- LLMs
    ModelFamily("llm", "gpt2-small", "openai-community/gpt2 (n_embd 768, n_inner 3072, vocab 50257; HF Conv1D)",
                (Linear("c_attn", 768, 2304, True), Linear("attn_c_proj", 768, 768, True), Linear("c_fc", 768, 3072, True),
                 Linear("mlp_c_proj", 3072, 768, True), Linear("lm_head", 768, 50257, train=False, weight="linear")),
                train_m=(333, 1024, 2047, 4096, 8192, 16384), infer_m=(1, 3, 7, 16, 64, 200, 1023, 2048, 4001),
                int8_m=(333, 1024), weight="conv1d",
                attention=Attention(12, 64, ((1024, 8), (1024, 1), (77, 16)))),
    ModelFamily("llm", "gpt2-medium", "openai-community/gpt2-medium (n_embd 1024, n_inner 4096; HF Conv1D)",
                (Linear("c_attn", 1024, 3072, True), Linear("attn_c_proj", 1024, 1024, True), Linear("c_fc", 1024, 4096, True),
                 Linear("mlp_c_proj", 4096, 1024, True)),
                train_m=(1023, 2048, 4096, 6000, 12288), infer_m=(1, 5, 32, 77, 512, 1024, 3000), weight="conv1d",
                attention=Attention(16, 64, ((1024, 4), (511, 2)))),
    ModelFamily("llm", "llama2-7b", "meta-llama/Llama-2-7b-hf (hidden 4096, intermediate 11008, 32 heads MHA)",
                _llama(4096, 4096, 4096, 11008), LLM_TRAIN, LLM_INFER, LLM_INT8,
                attention=Attention(32, 128, ((2048, 1), (4096, 1), (333, 4)))),
    ModelFamily("llm", "llama3-8b", "meta-llama/Meta-Llama-3-8B (hidden 4096, intermediate 14336, 32 q / 8 kv heads x 128)",
                _llama(4096, 1024, 4096, 14336), LLM_TRAIN, LLM_INFER, LLM_INT8),
    ModelFamily("llm", "llama3-70b", "meta-llama/Meta-Llama-3-70B (hidden 8192, intermediate 28672, 64 q / 8 kv heads x 128)",
                _llama(8192, 1024, 8192, 28672), (256, 511, 1024, 2048, 4096), (1, 2, 8, 16, 31, 64, 129, 255, 512, 1000), (32, 200)),
    ModelFamily("llm", "llama3.2-1b", "meta-llama/Llama-3.2-1B (hidden 2048, intermediate 8192, 32 q / 8 kv heads x 64, vocab 128256)",
                _llama(2048, 512, 2048, 8192) + (Linear("lm_head", 2048, 128256, train=False),),
                LLM_TRAIN, (1, 4, 8, 17, 32, 100, 128, 257, 999, 2049, 4096), LLM_INT8),
    ModelFamily("llm", "qwen2-0.5b", "Qwen/Qwen2-0.5B (hidden 896, intermediate 4864, 14 q / 2 kv heads x 64, qkv bias, vocab 151936)",
                _llama(896, 128, 896, 4864, qkv_bias=True) + (Linear("lm_head", 896, 151936, train=False),),
                (1000, 2048, 4096, 8191, 16384), (1, 3, 16, 24, 64, 77, 256, 500, 2047, 8000), LLM_INT8),
    ModelFamily("llm", "qwen2-7b", "Qwen/Qwen2-7B (hidden 3584, intermediate 18944, 28 q / 4 kv heads x 128, qkv bias)",
                _llama(3584, 512, 3584, 18944, qkv_bias=True), LLM_TRAIN, (1, 9, 32, 96, 256, 500, 1500, 4096), LLM_INT8),
    ModelFamily("llm", "phi3-mini", "microsoft/Phi-3-mini-4k-instruct (hidden 3072, intermediate 8192, fused qkv 9216 / gate_up 16384)",
                (Linear("qkv_proj", 3072, 9216), Linear("o_proj", 3072, 3072), Linear("gate_up_proj", 3072, 16384),
                 Linear("down_proj", 8192, 3072)),
                (1024, 2047, 4096, 8192, 12345), (1, 6, 16, 65, 128, 257, 1234, 4096), LLM_INT8),
    ModelFamily("llm", "gemma-2b", "google/gemma-2b (hidden 2048, intermediate 16384, 8 q / 1 kv heads x 256)",
                _llama(2048, 256, 2048, 16384), (1024, 3000, 4096, 8192, 16384), (1, 2, 11, 32, 64, 511, 2048, 5000), LLM_INT8),
    ModelFamily("llm", "tinyllama-1.1b", "TinyLlama/TinyLlama-1.1B (hidden 2048, intermediate 5632, 32 q / 4 kv heads x 64)",
                _llama(2048, 256, 2048, 5632), (2048, 3999, 6000, 16384), (1, 12, 48, 128, 700, 2048), (64, 700)),
    # ---- encoders
    ModelFamily("enc", "bert-base", "google-bert/bert-base-uncased (hidden 768, intermediate 3072, separate q/k/v)",
                _encoder(768, 3072), (1232, 2048, 4096, 8192, 16384), (1, 8, 77, 128, 384, 512, 999, 4096), (128, 512, 1232),
                attention=Attention(12, 64, ((128, 32), (512, 8), (77, 16))),
                dtype_weights=(("float16", 0.5), ("bfloat16", 0.25), ("float32", 0.25))),
    ModelFamily("enc", "bert-large", "google-bert/bert-large-uncased (hidden 1024, intermediate 4096)",
                _encoder(1024, 4096), (1000, 2048, 4096, 7168, 16384), (1, 16, 128, 509, 1024, 3333),
                dtype_weights=(("float16", 0.5), ("bfloat16", 0.25), ("float32", 0.25))),
    ModelFamily("enc", "flan-t5-base", "google/flan-t5-base (d_model 768, d_ff 2048 gated-gelu, 12 heads x 64, no bias)",
                (Linear("attn_proj", 768, 768), Linear("wi", 768, 2048), Linear("wo", 2048, 768)),
                (1024, 2600, 4096, 9000, 16384), (1, 8, 37, 512, 2000, 4096),
                dtype_weights=(("bfloat16", 0.5), ("float16", 0.2), ("float32", 0.3))),
    ModelFamily("enc", "modernbert-base", "answerdotai/ModernBERT-base (hidden 768, intermediate 1152 GLU, fused Wqkv (= Wi shape), no bias)",
                (Linear("Wqkv", 768, 2304), Linear("attn_Wo", 768, 768), Linear("mlp_Wo", 1152, 768)),
                (2500, 4096, 8192, 16000), (1, 100, 512, 1111, 8192)),
    # ---- vision
    ModelFamily("vit", "vit-b16", "timm vit_base_patch16_224 (768, mlp 3072, fused qkv, 197 tokens, 1000 classes)",
                _encoder(768, 3072, fused_qkv=True) + (Linear("head", 768, 1000, True, m_div=197),),
                (1576, 3152, 6304, 12608), (197, 591, 788, 2561, 25216), (197, 788),
                attention=Attention(12, 64, ((197, 8), (197, 64), (197, 1)))),
    ModelFamily("vit", "vit-l16", "timm vit_large_patch16_224 (1024, mlp 4096, fused qkv, 197 tokens)",
                _encoder(1024, 4096, fused_qkv=True), (1576, 3152, 6304, 12608), (197, 985, 3152, 6304),
                attention=Attention(16, 64, ((197, 32),)),
                dtype_weights=(("bfloat16", 0.4), ("float16", 0.4), ("float32", 0.2))),
    ModelFamily("vit", "clip-vit-l14", "openai/clip-vit-large-patch14(-336) vision tower (1024, mlp 4096, 257/577 tokens, proj 768)",
                _encoder(1024, 4096) + (Linear("visual_projection", 1024, 768, m_div=257),),
                (2056, 4112, 8224), (257, 577, 1285, 2885, 4616)),
    ModelFamily("vit", "deit-s16", "facebook/deit-small-distilled-patch16-224 (384, mlp 1536, fused qkv, 198 tokens)",
                _encoder(384, 1536, fused_qkv=True), (1584, 6336, 12672, 25344), (198, 594, 1386, 3168),
                attention=Attention(6, 64, ((198, 16), (198, 128)))),
    ModelFamily("vit", "swin-t", "microsoft/swin-tiny-patch4-window7-224 (C=96, depths 2/2/6/2, 3136/784/196/49 tokens)",
                (Linear("s1_qkv", 96, 288, True), Linear("s1_fc1", 96, 384, True), Linear("s1_fc2", 384, 96, True),
                 Linear("merge1", 384, 192, m_div=4),
                 Linear("s2_qkv", 192, 576, True, m_div=4), Linear("s2_fc1", 192, 768, True, m_div=4),
                 Linear("s2_fc2", 768, 192, True, m_div=4), Linear("merge2", 768, 384, m_div=16),
                 Linear("s3_qkv", 384, 1152, True, m_div=16), Linear("s3_proj", 384, 384, True, m_div=16),
                 Linear("s3_fc1", 384, 1536, True, m_div=16), Linear("s3_fc2", 1536, 384, True, m_div=16),
                 Linear("merge3", 1536, 768, m_div=64), Linear("s4_qkv", 768, 2304, True, m_div=64),
                 Linear("s4_fc1", 768, 3072, True, m_div=64), Linear("s4_fc2", 3072, 768, True, m_div=64)),
                (3136 * 8, 3136 * 3), (3136, 3136 * 5, 3136 * 16)),
    # ---- speech
    ModelFamily("speech", "whisper-small", "openai/whisper-small (d_model 768, ffn 3072, 1500 encoder frames, vocab 51865)",
                _encoder(768, 3072) + (Linear("proj_out", 768, 51865, train=False),),
                (1500, 3000, 6000, 12000), (1, 5, 16, 448, 3000, 7500), (1500,),
                attention=Attention(12, 64, ((1500, 4), (1500, 1), (448, 8)))),
    ModelFamily("speech", "whisper-large-v3", "openai/whisper-large-v3 (d_model 1280, ffn 5120, 1500 encoder frames, vocab 51866)",
                _encoder(1280, 5120) + (Linear("proj_out", 1280, 51866, train=False),),
                (1500, 4500, 6000), (1, 3, 32, 224, 3000), (1500, 3000)),
    ModelFamily("speech", "wav2vec2-large", "facebook/wav2vec2-large-lv60 (hidden 1024, intermediate 4096, feature proj 512, 49 frames/s)",
                _encoder(1024, 4096) + (Linear("feature_projection", 512, 1024, True),),
                (998, 2996, 5992, 7984), (249, 499, 1499, 3992)),
    ModelFamily("speech", "wav2vec2-base", "facebook/wav2vec2-base (hidden 768, intermediate 3072, feature proj 512, 49 frames/s)",
                _encoder(768, 3072) + (Linear("feature_projection", 512, 768, True),),
                (1996, 5988, 11976), (149, 749, 2495)),
)
