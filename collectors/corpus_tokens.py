"""The token-mixing shape corpus's table: GEMMs that multiply across an image's tokens, whose widths are token counts.

A corpus of its own (``datasets/corpus/token_mixing_v1.parquet``), not rows added to ``corpus_v1``: that file, its
hash and every dataset labelled from it stay valid.

MLP-Mixer, ResMLP and gMLP mix tokens with a linear layer over the token axis: the rows of that GEMM are
batch x channels (thousands to a hundred thousand), and its N or K is the token count (49, 196, ...), whose
fp16 rows are not 16-byte aligned. corpus_v1 holds almost no GEMM with that many rows and so short an unaligned
side, and there cuBLAS's 2-byte-aligned kernels lose to Triton's templates by up to 1.7x
(mixer-b16's 24576 x 196 x 384). The GEMMs are laid out as ``F.linear`` runs them (forward B
column-major, both backward GEMMs at the training batches): ``collectors.corpus.build_token_corpus`` runs these
families through ``model_rows``.

Each family's token count doubles as ``m_div`` = 1 and its "tokens" are the GEMM's rows: batch x channels. No
randomness beyond ``model_rows``' dtype draw (seeded by the family name).
"""

from __future__ import annotations

from .corpus_families import Linear, ModelFamily

TOKEN_CORPUS_VERSION = 1
TRAIN_BATCHES = (8, 32)  # images per training step
INFER_BATCHES = (1, 16, 64, 128)  # images per inference call


def _mixing_family(name: str, source: str, tokens: int, channels: int, layers: tuple[Linear, ...]) -> ModelFamily:
    """A token-mixing family: its GEMMs' rows are batch x ``channels`` (the token count is in ``layers``)."""
    return ModelFamily("vit", name, f"{source} ({tokens} tokens)", layers,
                       train_m=tuple(b * channels for b in TRAIN_BATCHES),
                       infer_m=tuple(b * channels for b in INFER_BATCHES))


def _token_mlp(tokens: int, hidden: int) -> tuple[Linear, ...]:
    """MLP-Mixer's token MLP: tokens -> hidden -> tokens, with biases."""
    return Linear("tok_fc1", tokens, hidden, bias=True), Linear("tok_fc2", hidden, tokens, bias=True)


def _token_linear(tokens: int) -> tuple[Linear, ...]:
    """ResMLP's and gMLP's single token-to-token linear layer, with a bias."""
    return (Linear("tok_proj", tokens, tokens, bias=True),)


TOKEN_FAMILIES: tuple[ModelFamily, ...] = (
    _mixing_family("mixer-s32", "timm mixer_s32_224: 512 channels, token MLP 256", 49, 512, _token_mlp(49, 256)),
    _mixing_family("mixer-s16", "timm mixer_s16_224: 512 channels, token MLP 256", 196, 512, _token_mlp(196, 256)),
    _mixing_family("mixer-b32", "timm mixer_b32_224: 768 channels, token MLP 384", 49, 768, _token_mlp(49, 384)),
    _mixing_family("mixer-b16", "timm mixer_b16_224: 768 channels, token MLP 384", 196, 768, _token_mlp(196, 384)),
    _mixing_family("mixer-l16", "timm mixer_l16_224: 1024 channels, token MLP 512", 196, 1024, _token_mlp(196, 512)),
    _mixing_family("resmlp-12", "timm resmlp_12_224: 384 channels, linear_tokens", 196, 384, _token_linear(196)),
    _mixing_family("gmlp-s16", "timm gmlp_s16_224: spatial gating unit over 768 of 1536 channels", 196, 768,
                   _token_linear(196)),
    _mixing_family("gmlp-b16", "timm gmlp_b16_224: spatial gating unit over 1536 of 3072 channels", 196, 1536,
                   _token_linear(196)),
    # widths no published mixer uses, so the labels also cover the token counts of ViT-style grids: a class
    # token (197), CLIP-L/14 (257) and 336-pixel ViT-B/16 (577)
    _mixing_family("mixer-odd197", "a token MLP over ViT-B/16's 197 tokens, 768 channels", 197, 768,
                   _token_mlp(197, 384)),
    _mixing_family("mixer-odd257", "a token MLP over CLIP-L/14's 257 tokens, 1024 channels", 257, 1024,
                   _token_mlp(257, 512)),
    _mixing_family("mixer-odd577", "a token MLP over 336-pixel ViT-B/16's 577 tokens, 768 channels", 577, 768,
                   _token_mlp(577, 384)),
)
