"""The shape corpus: which GEMM problems the collectors time, each tagged with the family it came from.

Five kinds of shapes, so the predictor sees both the GEMMs real models run and the space around them:

* linear layers (and some attention ``bmm``) of real model families -- LLMs, encoders, vision
  transformers, speech -- forward plus both backward GEMMs, at real token counts (odd ones included);
* ``random``: log-uniform shapes, some batched, some ``int8``;
* ``splitk``: small M and N with K up to 65536 (where decompose-K candidates appear);
* ``unaligned``: N and/or K not a multiple of 8;
* ``msweep:<k>x<n>``: M over 1..16384 for fixed K, N (the hint buckets are learned from these).

Every problem is bounded (``m*n*k*b <= 2**37``, every operand <= 1 GiB) so ~20 candidates x 10
reps of the whole corpus fit the GPU budget. The build is deterministic: randomness comes only from
``random.Random`` seeded with ``(seed, stream name)`` and only ``.random()`` is drawn, whose stream
Python keeps stable across versions. ``datasets/corpus/CORPUS.md`` documents the committed build.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from predictor.problem import DTYPE_BYTES, PROBLEM_FIELDS, Problem
from predictor.schema import DatasetError, read_parquet, write_parquet
from predictor.split import problem_group

log = logging.getLogger(__name__)

CORPUS_VERSION = 1
CORPUS_COLUMNS = (*PROBLEM_FIELDS, "problem_id", "family_tag", "group")
KINDS = ("llm", "enc", "vit", "speech", "random", "splitk", "unaligned", "msweep")
MODEL_KINDS = ("llm", "enc", "vit", "speech")

MAX_MNKB = 2**37  # m*n*k*b (= FLOPs / 2) per problem
MAX_OPERAND_BYTES = 2**30  # per operand (A, B, C)

N_RANDOM = 1100
N_SPLITK = 360
N_UNALIGNED = 480
SECOND_DTYPE_P = 0.3  # share of model token counts also run in a second dtype

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


class CorpusError(ValueError):
    """A corpus file that does not follow the corpus contract."""


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


# ---------------------------------------------------------------------------------------------
# helpers


def _rng(seed: int, stream: str) -> random.Random:
    return random.Random(f"corpus-v{CORPUS_VERSION}:{seed}:{stream}")


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    """Weighted choice from one ``rng.random()`` draw (stable across Python versions)."""
    total = sum(w for _, w in weighted)
    u = rng.random() * total
    for value, w in weighted:
        u -= w
        if u < 0:
            return value
    return weighted[-1][0]


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, max(lo, int(math.exp(math.log(lo) + rng.random() * (math.log(hi + 1) - math.log(lo))))))


def _round_to(value: int, multiple: int) -> int:
    return max(multiple, int(round(value / multiple)) * multiple)


def _lowbit_bytes(elements: int, nbytes: int) -> int:
    stride = elements * nbytes
    return min(16, stride & -stride)


def alignment(b: int, m: int, n: int, k: int, dtype: str, layout_a: str, layout_b: str) -> int:
    """``align`` for contiguous operands on 16-byte-aligned bases: the largest power of two <= 16 bytes
    dividing every stride (A, B and the output), as the collectors will allocate them."""
    size = DTYPE_BYTES[dtype]
    out = DTYPE_BYTES["int32" if dtype == "int8" else dtype]
    strides = [(k if layout_a == "row" else m, size), (n if layout_b == "row" else k, size), (n, out)]
    if b > 1:
        strides += [(m * k, size), (k * n, size), (m * n, out)]
    return min(_lowbit_bytes(e, s) for e, s in strides)


def within_budget(b: int, m: int, n: int, k: int, dtype: str) -> bool:
    """The cost bound every corpus problem obeys: m*n*k*b <= 2**37 and every operand <= 1 GiB."""
    size = DTYPE_BYTES[dtype]
    out = DTYPE_BYTES["int32" if dtype == "int8" else dtype]
    return (m * n * k * b <= MAX_MNKB and b * m * k * size <= MAX_OPERAND_BYTES
            and b * k * n * size <= MAX_OPERAND_BYTES and b * m * n * out <= MAX_OPERAND_BYTES)


def int_mm_ok(m: int, n: int, k: int) -> bool:
    """torch._int_mm's constraints (CUDA): m > 16, k and n multiples of 8."""
    return m > 16 and k % 8 == 0 and n % 8 == 0


def _row(tag: str, op: str, m: int, n: int, k: int, dtype: str, b: int = 1,
         layout_a: str = "row", layout_b: str = "row") -> dict[str, Any] | None:
    """One corpus row, or None when the problem is outside the cost bound."""
    if not within_budget(b, m, n, k, dtype):
        return None
    p = Problem(op, m, n, k, dtype, b=b, layout_a=layout_a, layout_b=layout_b,
                align=alignment(b, m, n, k, dtype, layout_a, layout_b))
    return {**p.to_dict(), "family_tag": tag}


# ---------------------------------------------------------------------------------------------
# generators (each yields candidate rows; build_corpus dedupes by problem_id in kind priority order)


def _runs(family: ModelFamily, rng: random.Random) -> Iterator[tuple[int, bool, str]]:
    """(tokens, train, dtype): one dtype per token count, and with probability SECOND_DTYPE_P a second one
    (the same model run by another user in another precision)."""
    runs = [(m, True) for m in family.train_m] + [(m, False) for m in family.infer_m]
    for tokens, train in runs:
        dtype = _pick(rng, family.dtype_weights)
        yield tokens, train, dtype
        if rng.random() < SECOND_DTYPE_P:
            yield tokens, train, _pick(rng, [(d, w) for d, w in family.dtype_weights if d != dtype])


def model_rows(family: ModelFamily, seed: int) -> Iterator[dict[str, Any]]:
    """Forward + grad-input + grad-weight GEMMs of every layer at each training token count, the forward
    GEMM at inference token counts, w8a8 int8 forwards, and attention bmm's. One dtype per token count
    (a run uses one dtype throughout)."""
    rng = _rng(seed, family.name)
    for tokens, train, dtype in _runs(family, rng):
        for layer in family.layers:
            if train and not layer.train:
                continue
            conv1d = (layer.weight or family.weight) == "conv1d"
            m = max(1, tokens // layer.m_div)
            tag = f"{family.group}:{layer.name}"
            fwd_op = "addmm" if layer.bias else "mm"
            # forward: X[m, in] @ W^T -> F.linear gives B col; GPT-2 Conv1D stores W as (in, out), B row
            yield _row(f"{tag}:fwd", fwd_op, m, layer.out_f, layer.in_f, dtype, layout_b="row" if conv1d else "col")
            if not train:
                continue
            # grad wrt input: dY[m, out] @ W[out, in] (B row for F.linear; Conv1D needs W^T, B col)
            yield _row(f"{tag}:bwd_in", "mm", m, layer.in_f, layer.out_f, dtype, layout_b="col" if conv1d else "row")
            # grad wrt weight (A col): F.linear weight is column-major in the forward mm, so autograd computes
            # dY^T @ X (m=out, n=in); Conv1D's row-major weight gives X^T @ dY (m=in, n=out). k = tokens.
            if conv1d:
                yield _row(f"{tag}:bwd_w", "mm", layer.in_f, layer.out_f, m, dtype, layout_a="col")
            else:
                yield _row(f"{tag}:bwd_w", "mm", layer.out_f, layer.in_f, m, dtype, layout_a="col")
    for tokens in family.int8_m:
        for layer in family.layers:
            m = tokens // layer.m_div
            if int_mm_ok(m, layer.out_f, layer.in_f):
                yield _row(f"{family.group}:{layer.name}:fwd", "int_mm", m, layer.out_f, layer.in_f, "int8")
    if family.attention is not None:
        att = family.attention
        for seq, batch in att.seq_batch:
            dtype = _pick(rng, family.dtype_weights)
            b = batch * att.heads
            # scores = Q @ K^T: K stored (b, seq, d) -> B col; out = P @ V: V row
            yield _row(f"{family.group}:attn_qk:fwd", "bmm", seq, seq, att.head_dim, dtype, b=b, layout_b="col")
            yield _row(f"{family.group}:attn_pv:fwd", "bmm", seq, att.head_dim, seq, dtype, b=b)


def msweep_rows() -> Iterator[dict[str, Any]]:
    for k, n, dtype, layout_b in MSWEEPS:
        for m in MSWEEP_M:
            yield _row(f"msweep:{k}x{n}", "mm", m, n, k, dtype, layout_b=layout_b)


FLOAT_DTYPES = (("bfloat16", 0.4), ("float16", 0.38), ("float32", 0.22))
LAYOUTS_AB = ((("row", "col"), 0.4), (("row", "row"), 0.4), (("col", "row"), 0.15), (("col", "col"), 0.05))


def random_rows(rng: random.Random) -> Iterator[dict[str, Any]]:
    """Log-uniform sizes with a mix of roundings; some addmm, bmm and int8. Endless; the caller takes enough."""
    grains_nk = ((1, 0.15), (8, 0.25), (16, 0.2), (64, 0.2), (128, 0.2))
    grains_m = ((1, 0.5), (8, 0.2), (64, 0.3))
    while True:
        op = _pick(rng, (("mm", 0.7), ("addmm", 0.12), ("bmm", 0.1), ("int_mm", 0.08)))
        if op == "bmm":
            b = _log_uniform(rng, 2, 256)
            m, n, k = (_log_uniform(rng, 16, 4096) for _ in range(3))
        else:
            b, m = 1, _log_uniform(rng, 1, 16384)
            n, k = (_log_uniform(rng, 16, 16384) for _ in range(2))
        m = _round_to(m, _pick(rng, grains_m))
        n = _round_to(n, _pick(rng, grains_nk))
        k = _round_to(k, _pick(rng, grains_nk))
        if op == "int_mm":
            m, n, k = max(m, 17), _round_to(n, 8), _round_to(k, 8)
            yield _row("random", op, m, n, k, "int8")
            continue
        layout_a, layout_b = _pick(rng, LAYOUTS_AB)
        yield _row("random", op, m, n, k, _pick(rng, FLOAT_DTYPES), b=b, layout_a=layout_a, layout_b=layout_b)


def splitk_rows(rng: random.Random) -> Iterator[dict[str, Any]]:
    """M, N in [16, 256] and K in [max(2048, 16*max(M, N)), 65536]: the decompose-K regime."""
    while True:
        m = _log_uniform(rng, 16, 256)
        n = _log_uniform(rng, 16, 256)
        if rng.random() < 0.5:
            m = min(256, _round_to(m, 16))
        if rng.random() < 0.7:
            n = min(256, _round_to(n, 8))
        lo = max(2048, 16 * max(m, n))
        k = _log_uniform(rng, lo, 65536)
        if rng.random() < 0.15:
            k = 2 ** math.ceil(math.log2(k))  # powers of two, up to 65536 itself
        grain = 256 if rng.random() < 0.7 else 8
        k = min(65536, math.ceil(k / grain) * grain)
        if rng.random() < 0.07 and int_mm_ok(m, n, k):
            yield _row("splitk", "int_mm", m, n, k, "int8")
            continue
        layout_a, layout_b = _pick(rng, LAYOUTS_AB)
        yield _row("splitk", "mm", m, n, k, _pick(rng, FLOAT_DTYPES), layout_a=layout_a, layout_b=layout_b)


def unaligned_rows(rng: random.Random) -> Iterator[dict[str, Any]]:
    """N and/or K not a multiple of 8 (often odd), M anything; float dtypes only (int8 needs multiples of 8)."""
    while True:
        op = _pick(rng, (("mm", 0.75), ("addmm", 0.15), ("bmm", 0.1)))
        if op == "bmm":
            b = _log_uniform(rng, 2, 128)
            m, n, k = (_log_uniform(rng, 8, 4096) for _ in range(3))
        else:
            b, m = 1, _log_uniform(rng, 1, 8192)
            n, k = (_log_uniform(rng, 8, 16384) for _ in range(2))
        which = _pick(rng, (("k", 1.0), ("n", 1.0), ("nk", 1.0)))
        if "n" in which:
            n = (n // 8) * 8 + 1 + int(rng.random() * 7)
        if "k" in which:
            k = (k // 8) * 8 + 1 + int(rng.random() * 7)
        layout_a, layout_b = _pick(rng, LAYOUTS_AB)
        yield _row("unaligned", op, m, n, k, _pick(rng, FLOAT_DTYPES), b=b, layout_a=layout_a, layout_b=layout_b)


# ---------------------------------------------------------------------------------------------
# build, hash, save, load


def _take(rows: Iterable[dict[str, Any] | None], seen: set[str], out: list[dict[str, Any]],
          limit: int | None = None) -> int:
    """Append rows whose problem_id is new (first tag wins); stop after ``limit`` new ones. Returns the count."""
    added = dropped = 0
    for row in rows:
        if limit is not None and added >= limit:
            break
        if row is None:
            dropped += 1
            continue
        if row["problem_id"] in seen:
            continue
        seen.add(row["problem_id"])
        out.append(row)
        added += 1
    if dropped:
        log.debug("dropped %d problems over the cost bound", dropped)
    return added


def build_corpus(seed: int = 0) -> pd.DataFrame:
    """The corpus as one row per distinct problem: Problem fields, problem_id, family_tag, group.

    Duplicates keep the first tag in this order: msweep (a sweep must stay complete), model
    families, splitk, unaligned, random.
    """
    seed = int(seed)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    counts = {"msweep": _take(msweep_rows(), seen, rows)}
    counts["models"] = sum(_take(model_rows(f, seed), seen, rows) for f in MODEL_FAMILIES)
    counts["splitk"] = _take(splitk_rows(_rng(seed, "splitk")), seen, rows, N_SPLITK)
    counts["unaligned"] = _take(unaligned_rows(_rng(seed, "unaligned")), seen, rows, N_UNALIGNED)
    counts["random"] = _take(random_rows(_rng(seed, "random")), seen, rows, N_RANDOM)
    log.info("corpus seed %d: %s", seed, ", ".join(f"{k} {v}" for k, v in counts.items()))
    df = pd.DataFrame(rows)
    df["group"] = [problem_group(t, p) for t, p in zip(df["family_tag"], df["problem_id"])]
    df = df.sort_values(["family_tag", "dtype", "op", "b", "m", "n", "k", "layout_a", "layout_b"], kind="stable")
    return _typed(df.reset_index(drop=True)[list(CORPUS_COLUMNS)])


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    types = {c: ("int64" if c in ("b", "m", "n", "k", "align") else "string") for c in CORPUS_COLUMNS}
    return df.astype(types)


def corpus_sha256(df: pd.DataFrame) -> str:
    """sha256 over the sorted problem ids: names the set of problems, whatever the row order."""
    ids = sorted(map(str, df["problem_id"]))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def kind_of(family_tag: str) -> str:
    return family_tag.split(":", 1)[0]


def summary(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Counts per family kind, model group, dtype, op and layout pair (for the CLI and the card)."""
    layouts = "A " + df["layout_a"].astype(str) + " / B " + df["layout_b"].astype(str)
    return {
        "kind": df["family_tag"].map(kind_of).value_counts().reindex(KINDS, fill_value=0).rename_axis("kind"),
        "dtype": df["dtype"].value_counts().rename_axis("dtype"),
        "op": df["op"].value_counts().rename_axis("op"),
        "layout": layouts.value_counts().rename_axis("layout"),
    }


def write_corpus(df: pd.DataFrame, path: str | Path, seed: int) -> Path:
    """zstd parquet with metadata (seed, corpus_sha256, count), page checksums and ``footer_sha256``
    (``predictor.schema.write_parquet``), written atomically."""
    path = Path(path)
    table = pa.Table.from_pandas(df[list(CORPUS_COLUMNS)], preserve_index=False)
    meta = {"corpus_version": CORPUS_VERSION, "seed": int(seed), "corpus_sha256": corpus_sha256(df), "count": len(df),
            "generator": "python -m collectors.corpus"}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           **{k.encode(): json.dumps(v).encode() for k, v in meta.items()}})
    write_parquet(table, path)
    log.info("wrote %d problems to %s (sha256 %s)", len(df), path, meta["corpus_sha256"][:12])
    return path


def load_corpus(path: str | Path) -> pd.DataFrame:
    """Read a corpus file, check its columns and that its problem ids match the recorded hash."""
    path = Path(path)
    try:
        table, meta = read_parquet(path, what="corpus parquet")  # page checksums and footer_sha256 verified
    except DatasetError as exc:
        raise CorpusError(str(exc)) from None
    missing = [c for c in CORPUS_COLUMNS if c not in table.column_names]
    if missing:
        raise CorpusError(f"{path}: missing corpus columns {', '.join(missing)}")
    df = _typed(table.to_pandas()[list(CORPUS_COLUMNS)])
    if df["problem_id"].duplicated().any():
        raise CorpusError(f"{path}: {int(df['problem_id'].duplicated().sum())} duplicate problem ids")
    if "corpus_sha256" in meta and meta["corpus_sha256"] != corpus_sha256(df):
        raise CorpusError(f"{path}: problem ids do not match the recorded corpus_sha256 {meta['corpus_sha256'][:12]}")
    df.attrs["metadata"] = meta
    df.attrs["source"] = str(path)
    return df


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="parquet file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    df = build_corpus(args.seed)
    write_corpus(df, args.out, args.seed)
    print(f"{len(df)} problems, seed {args.seed}, corpus_sha256 {corpus_sha256(df)}")
    for name, counts in summary(df).items():
        print(f"\nper {name}:")
        print(counts.rename("problems").to_string())
    print(f"\n{args.out}: {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
