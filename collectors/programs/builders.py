"""How zoo models are built: the wrappers that give every model one contract (positional tensors in, one tensor
out), the builders of architectures that take more than a config, and the factories the registry
(``models.py``) names per entry. transformers/timm are imported inside each ``build``, so that the registry and the
CPU tests work without them.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .configs import _bert_config

# build(device, dtype=None) -> (module, inputs, step_kind); dtype=None means the entry's own dtype.
# step_kind "forward": the module returns the tensor compared with eager (logits / last hidden state);
# step_kind "loss": the module returns a scalar training loss (a train step backpropagates it).
Build = Callable[..., tuple[nn.Module, tuple[torch.Tensor, ...], str]]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _weights_dtype(entry_dtype: str, override: torch.dtype | None) -> torch.dtype:
    if override is not None:
        return override
    return torch.float32 if entry_dtype.startswith("amp-") else DTYPES[entry_dtype]


class HFOut(nn.Module):
    """Calls a transformers model with named tensors and returns one output field as a plain tensor, so that
    every zoo module has the same contract (positional tensors in, one tensor out)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], out: str, **kwargs: Any) -> None:
        super().__init__()
        self.model, self.names, self.out, self.kwargs = model, names, out, kwargs

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(**dict(zip(self.names, args)), **self.kwargs), self.out)


class ClassifyLoss(nn.Module):
    """Image classifier + cross-entropy, the loss inside the compiled region as a user's training step has it."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.model(x).float(), y)


class TinyMLP(nn.Module):
    """Linear-GELU-Linear, 64 wide: the CPU test model."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyLoss(nn.Module):
    """TinyMLP with a mean-squared loss: the CPU test of a training step."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = TinyMLP()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(self.mlp(x), y)


# ---- architectures built from more than a config (real widths; 2 layers) ----

def _t5_encoder(device: torch.device, dtype: torch.dtype | None = None):
    from transformers import T5Config  # t5-base widths: 768/3072, 12 heads, relative position bias
    config = T5Config(d_model=768, d_ff=3072, num_heads=12, d_kv=64, num_layers=2, vocab_size=32128,
                      dropout_rate=0.0)
    model = _hf("T5EncoderModel", config, device, _weights_dtype("bfloat16", dtype))
    return HFOut(model, ("input_ids",), "last_hidden_state"), (_ids(32128, (8, 256), device),), "forward"


def _clip_vision(device: torch.device, dtype: torch.dtype | None = None, **kw: Any):
    from transformers import CLIPVisionConfig  # ViT-L/14 widths: 1024/4096, 16 heads; 224 px -> 257 tokens
    config = CLIPVisionConfig(**{**dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                                        num_hidden_layers=2, patch_size=14, image_size=224), **kw})
    wdtype = _weights_dtype("float16", dtype)
    model = _hf("CLIPVisionModel", config, device, wdtype)
    pixels = torch.randn(16, 3, config.image_size, config.image_size, device=device, dtype=wdtype)
    return HFOut(model, ("pixel_values",), "last_hidden_state"), (pixels,), "forward"


def _wav2vec2(device: torch.device, dtype: torch.dtype | None = None, **kw: Any):
    from transformers import Wav2Vec2Config  # wav2vec2-base widths: 768/3072, 12 heads, 7 conv feature layers
    config = Wav2Vec2Config(**{**dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                                      num_hidden_layers=2, hidden_dropout=0.0, attention_dropout=0.0,
                                      activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
                                      mask_time_prob=0.0), **kw})
    wdtype = _weights_dtype("float16", dtype)
    model = _hf("Wav2Vec2Model", config, device, wdtype)
    audio = torch.randn(4, 32000, device=device, dtype=wdtype)  # 2 s at 16 kHz: 99 frames per clip
    return HFOut(model, ("input_values",), "last_hidden_state"), (audio,), "forward"


def _bart_train(device: torch.device, dtype: torch.dtype | None = None, **kw: Any):
    from transformers import BartConfig  # bart-base widths: 768/3072, 12 heads
    config = BartConfig(**{**dict(d_model=768, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
                                  encoder_attention_heads=12, decoder_attention_heads=12, encoder_layers=2,
                                  decoder_layers=2, vocab_size=50265, dropout=0.0, attention_dropout=0.0,
                                  activation_dropout=0.0), **kw})
    model = _hf("BartForConditionalGeneration", config, device, _weights_dtype("bfloat16", dtype))
    ids, labels = _ids(config.vocab_size, (8, 128), device), _ids(config.vocab_size, (8, 64), device)
    return HFOut(model, ("input_ids", "labels"), "loss"), (ids, labels), "loss"


def _deberta(device: torch.device, dtype: torch.dtype | None = None, **kw: Any):
    from transformers import DebertaV2Config  # deberta-v3-base widths: 768/3072, 12 heads, relative attention
    config = DebertaV2Config(**{**dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                                       num_hidden_layers=2, vocab_size=128100, relative_attention=True,
                                       position_buckets=256, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                                       pos_att_type=["p2c", "c2p"], position_biased_input=False,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), **kw})
    model = _hf("DebertaV2Model", config, device, _weights_dtype("float16", dtype))
    return HFOut(model, ("input_ids",), "last_hidden_state"), (_ids(config.vocab_size, (8, 256), device),), "forward"


def _hf(auto: str, config, device: torch.device, dtype: torch.dtype) -> nn.Module:
    import transformers
    torch.manual_seed(0)
    cls = getattr(transformers, auto)  # Auto classes build from a config; model classes take it directly
    model = cls.from_config(config) if auto.startswith("Auto") else cls(config)
    return model.to(device=device, dtype=dtype)


def _ids(vocab: int, shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    return torch.randint(0, vocab, shape, device=device)


def _causal_lm(config_fn: Callable, batch: int, seq: int, entry_dtype: str, **out_kw: Any) -> Build:
    def build(device: torch.device, dtype: torch.dtype | None = None):
        config = config_fn()
        model = _hf("AutoModelForCausalLM", config, device, _weights_dtype(entry_dtype, dtype))
        wrapped = HFOut(model, ("input_ids",), "logits", use_cache=False, **out_kw)
        return wrapped, (_ids(config.vocab_size, (batch, seq), device),), "forward"
    return build


def _causal_lm_train(config_fn: Callable, batch: int, seq: int, entry_dtype: str) -> Build:
    def build(device: torch.device, dtype: torch.dtype | None = None):
        config = config_fn()
        model = _hf("AutoModelForCausalLM", config, device, _weights_dtype(entry_dtype, dtype))
        ids = _ids(config.vocab_size, (batch, seq), device)
        return HFOut(model, ("input_ids", "labels"), "loss", use_cache=False), (ids, ids.clone()), "loss"
    return build


def _quantized_lm(config_fn: Callable, batch: int, seq: int, scheme: str, **out_kw: Any) -> Build:
    """A bf16 causal LM whose decoder-layer Linears are replaced by ``quant.SCHEMES[scheme]`` (lm_head and the
    embeddings stay bf16; see quant.py). ``config_kw`` overrides config fields (the CPU tests' tiny widths)."""
    def build(device: torch.device, dtype: torch.dtype | None = None, **config_kw: Any):
        from . import quant
        config = config_fn(**config_kw)
        model = _hf("AutoModelForCausalLM", config, device, _weights_dtype("bfloat16", dtype))
        quant.quantize_linears(model.model.layers, scheme)
        ids = _ids(config.vocab_size, (batch, seq), device)
        if scheme == "fp8-train":
            return HFOut(model, ("input_ids", "labels"), "loss", use_cache=False), (ids, ids.clone()), "loss"
        return HFOut(model, ("input_ids",), "logits", use_cache=False, **out_kw), (ids,), "forward"
    return build


def _gpt2_decode(device: torch.device, dtype: torch.dtype | None = None):
    from transformers import GPT2Config
    config = GPT2Config(n_embd=768, n_head=12, n_layer=2)
    model = _hf("AutoModelForCausalLM", config, device, _weights_dtype("float16", dtype))
    return HFOut(model, ("input_ids",), "logits", use_cache=False), (_ids(50257, (16, 1), device),), "forward"


def _bert(entry_dtype: str) -> Build:
    def build(device: torch.device, dtype: torch.dtype | None = None):
        model = _hf("BertModel", _bert_config(), device, _weights_dtype(entry_dtype, dtype))
        return HFOut(model, ("input_ids",), "last_hidden_state"), (_ids(30522, (8, 128), device),), "forward"
    return build


def _bert_train(device: torch.device, dtype: torch.dtype | None = None):
    model = _hf("BertForMaskedLM", _bert_config(), device, _weights_dtype("bfloat16", dtype))
    ids = _ids(30522, (8, 128), device)
    return HFOut(model, ("input_ids", "labels"), "loss"), (ids, ids.clone()), "loss"


def _whisper(device: torch.device, dtype: torch.dtype | None = None):
    from transformers import WhisperConfig  # whisper-base widths
    config = WhisperConfig(d_model=512, encoder_layers=2, decoder_layers=2, encoder_attention_heads=8,
                           decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                           num_mel_bins=80, max_source_positions=1500, vocab_size=51865)
    wdtype = _weights_dtype("float16", dtype)
    model = _hf("WhisperForConditionalGeneration", config, device, wdtype)
    mel = torch.randn(4, 80, 3000, device=device, dtype=wdtype)
    names = ("input_features", "decoder_input_ids")
    return HFOut(model, names, "logits", use_cache=False), (mel, _ids(51865, (4, 64), device)), "forward"


def _timm(arch: str, batch: int, entry_dtype: str, train: bool = False, **kw: Any) -> Build:
    def build(device: torch.device, dtype: torch.dtype | None = None):
        import timm
        torch.manual_seed(0)
        wdtype = _weights_dtype(entry_dtype, dtype)
        model = timm.create_model(arch, pretrained=False, **kw).to(device=device, dtype=wdtype)
        size = kw.get("img_size", 224)
        x = torch.randn(batch, 3, size, size, device=device, dtype=wdtype)
        if train:
            return ClassifyLoss(model), (x, torch.randint(0, 1000, (batch,), device=device)), "loss"
        return model, (x,), "forward"
    return build


def _tiny(train: bool) -> Build:
    def build(device: torch.device, dtype: torch.dtype | None = None):
        torch.manual_seed(0)
        wdtype = dtype or torch.float32
        module = (TinyLoss() if train else TinyMLP()).to(device=device, dtype=wdtype)
        x = torch.randn(8, 64, device=device, dtype=wdtype)
        if train:
            return module, (x, torch.randn(8, 64, device=device, dtype=wdtype)), "loss"
        return module, (x,), "forward"
    return build
