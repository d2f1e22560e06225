"""The corpus tier of the zoo: public architectures from ``transformers``, random weights.

Every entry builds a real ``transformers`` model class from a small configuration (a layer
or two, hidden size 32, CNN stages up to 256 channels, vocabularies of 512, images of
32x32 or 64x64, sequences of 16 tokens; ``"resnet18"`` alone is full size, at 224x224, for
benchmarks) with random weights drawn under a fixed seed: nothing is downloaded. Dropout is
off in every configuration, so that a training step is deterministic. The model is wrapped
in a small module whose ``forward`` takes positional tensors only and returns a tensor or a
tuple of tensors, never a ``ModelOutput`` or a cache object.

Decoder language models are called twice: the first call runs the prompt without a cache;
the second (:attr:`~ortlab.zoo.ZooModel.followup_inputs`) is one decode step, given the
next token, the attention mask of prompt plus token, and the ``DynamicCache`` an eager
prefill of the prompt filled; it updates that cache in place and returns the logits.

Attention runs through ``scaled_dot_product_attention`` (``attn_implementation="sdpa"``,
set explicitly) wherever ``transformers`` offers it, as it does by default; DeBERTa-v2,
LeViT and MobileViT have no SDPA path and spell attention out. Every model also compiles
with ``attn_implementation="eager"`` (matmul + softmax), which gives larger graphs.

The ``ci`` subset (``corpus_names(ci=True)``) is the smallest model of each family, with a
vision transformer next to the batch-norm CNN: ``resnet_tiny``, ``vit_tiny``, ``bert``,
``gpt2`` (and its decode step), ``t5``, ``wav2vec2`` and ``clip``; each compiles with
``backend="aot_eager"`` in a few seconds.

``transformers`` is imported only when a builder runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ortlab import errors
from ortlab.zoo._model import ZooModel, generator, seeded_build

_SEQ = 16
"""Tokens per sequence of the text, decoder and encoder-decoder inputs."""

_VOCAB = 512
"""Vocabulary size of every text model."""

_FIRST_ID = 4
"""Example token ids are drawn from ``[_FIRST_ID, _VOCAB)``, clear of the special tokens."""


def _transformers() -> Any:
    from ortlab import _deps

    return _deps.require("transformers")


def _hf(model_class: str, config_class: str, **config: Any) -> nn.Module:
    """Builds ``transformers.<model_class>`` from ``transformers.<config_class>(**config)``."""
    transformers = _transformers()
    return getattr(transformers, model_class)(getattr(transformers, config_class)(**config))


# --- wrappers: positional tensors in, tensors out ----------------------------------------


class _ImageModel(nn.Module):
    """``(pixel_values,)`` -> the first output: logits, or the last hidden state."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.net(pixel_values, return_dict=False)[0]


class _TextEncoder(nn.Module):
    """``(input_ids, attention_mask)`` -> the last hidden state."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        return self.net(input_ids, attention_mask=attention_mask, return_dict=False)[0]


class _CausalLM(nn.Module):
    """``(input_ids, attention_mask[, past_key_values])`` -> the logits.

    Without a cache the model runs the whole sequence with ``use_cache=False``. With one
    (the decode step) it runs ``use_cache=True``: the cache grows by the new tokens, in
    place, and only the logits come back. :meth:`prefill` fills a fresh cache eagerly.
    """

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        past_key_values: Any = None,
    ) -> torch.Tensor:
        if past_key_values is None:
            return self.lm(
                input_ids, attention_mask=attention_mask, use_cache=False, return_dict=False
            )[0]
        return self.lm(
            input_ids,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            use_cache=True,
        ).logits

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Any:
        """Runs the prompt eagerly and returns the ``DynamicCache`` it filled."""
        return self.lm(
            input_ids, attention_mask=attention_mask, use_cache=True
        ).past_key_values


class _Seq2Seq(nn.Module):
    """``(input_ids, attention_mask, decoder_input_ids)`` -> the decoder's first output."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        decoder_input_ids: torch.Tensor,
    ) -> torch.Tensor:
        return self.net(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
            return_dict=False,
        )[0]


class _SpeechSeq2Seq(nn.Module):
    """``(input_features, decoder_input_ids)`` -> the decoder's last hidden state."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(
        self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> torch.Tensor:
        return self.net(
            input_features,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
            return_dict=False,
        )[0]


class _AudioEncoder(nn.Module):
    """``(input_values,)`` (raw audio) -> the last hidden state."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.net(input_values, return_dict=False)[0]


class _ImageText(nn.Module):
    """``(input_ids, pixel_values, attention_mask)`` -> image-text logits and both embeds."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(
        self,
        input_ids: torch.Tensor,
        pixel_values: torch.Tensor,
        attention_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.net(
            input_ids=input_ids,
            pixel_values=pixel_values,
            attention_mask=attention_mask,
            return_dict=True,
        )
        return out.logits_per_image, out.text_embeds, out.image_embeds


def _builder(
    wrapper: Callable[[nn.Module], nn.Module],
    model_class: str,
    config_class: str,
    **config: Any,
) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return seeded_build(lambda: wrapper(_hf(model_class, config_class, **config)))

    build.__qualname__ = build.__name__ = f"build_{model_class}"
    return build


# --- inputs ------------------------------------------------------------------------------


def _images(seed: int, size: int, channels: int = 3) -> Callable[[int], tuple]:
    def make(batch: int) -> tuple:
        return (torch.randn(batch, channels, size, size, generator=generator(seed)),)

    return make


def _token_ids(batch: int, seq: int, seed: int) -> torch.Tensor:
    return torch.randint(
        _FIRST_ID, _VOCAB, (batch, seq), generator=generator(seed), dtype=torch.int64
    )


def _padding_mask(batch: int, seq: int) -> torch.Tensor:
    """Ones, except that row ``r`` ends in ``r % 3`` padding positions (zeros)."""
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for row in range(batch):
        if row % 3:
            mask[row, seq - row % 3 :] = 0
    return mask


def _text(seed: int) -> Callable[[int], tuple]:
    def make(batch: int) -> tuple:
        return (_token_ids(batch, _SEQ, seed), _padding_mask(batch, _SEQ))

    return make


def _prompt(seed: int) -> Callable[[int], tuple]:
    # Decoder prompts are unpadded: a padded prompt would need position ids and a cache
    # that know about the padding, which the plain decode step below does not pass.
    def make(batch: int) -> tuple:
        return (_token_ids(batch, _SEQ, seed), torch.ones(batch, _SEQ, dtype=torch.int64))

    return make


def _decode_step(seed: int) -> Callable[[nn.Module, int], tuple]:
    """The follow-up call of a decoder: one new token after an eager prefill of the prompt."""
    prompt = _prompt(seed)

    def make(model: nn.Module, batch: int) -> tuple:
        # A torch.compile wrapper (OptimizedModule) prefills with the module it wraps.
        lm = getattr(model, "_orig_mod", model)
        if not isinstance(lm, _CausalLM):
            raise errors.UnsupportedOptionError(
                f"The decode step needs the zoo's decoder model, got {type(model).__name__}."
            )
        input_ids, attention_mask = prompt(batch)
        cache = lm.prefill(input_ids, attention_mask)
        next_ids = _token_ids(batch, 1, seed + 1)
        mask = torch.ones(batch, _SEQ + 1, dtype=torch.int64)
        return (next_ids, mask, cache)

    return make


def _seq2seq(seed: int) -> Callable[[int], tuple]:
    def make(batch: int) -> tuple:
        return (
            _token_ids(batch, _SEQ, seed),
            _padding_mask(batch, _SEQ),
            _token_ids(batch, _SEQ // 2, seed + 1),
        )

    return make


def _speech_seq2seq(seed: int, mel_bins: int, frames: int) -> Callable[[int], tuple]:
    def make(batch: int) -> tuple:
        return (
            torch.randn(batch, mel_bins, frames, generator=generator(seed)),
            _token_ids(batch, _SEQ // 2, seed + 1),
        )

    return make


def _audio(seed: int, samples: int) -> Callable[[int], tuple]:
    def make(batch: int) -> tuple:
        return (torch.randn(batch, samples, generator=generator(seed)),)

    return make


def _image_text(seed: int, size: int) -> Callable[[int], tuple]:
    def make(batch: int) -> tuple:
        return (
            _token_ids(batch, _SEQ, seed),
            torch.randn(batch, 3, size, size, generator=generator(seed + 1)),
            _padding_mask(batch, _SEQ),
        )

    return make


# --- shared configuration pieces ---------------------------------------------------------

_BERT_LIKE: dict[str, Any] = dict(
    vocab_size=_VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)

_VIT_LIKE: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    image_size=32,
    patch_size=8,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    num_labels=10,
)

_LLAMA_LIKE: dict[str, Any] = dict(
    vocab_size=_VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    attention_dropout=0.0,
    attn_implementation="sdpa",
)

_BART_LIKE: dict[str, Any] = dict(
    vocab_size=_VOCAB,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    attn_implementation="sdpa",
)

_WAV2VEC2_LIKE: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    conv_dim=(32, 32),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_conv_pos_embeddings=8,
    num_conv_pos_embedding_groups=4,
    hidden_dropout=0.0,
    activation_dropout=0.0,
    attention_dropout=0.0,
    feat_proj_dropout=0.0,
    final_dropout=0.0,
    layerdrop=0.0,
    # SpecAugment draws its masks with numpy while training: off, for determinism.
    apply_spec_augment=False,
    vocab_size=32,
)
_AUDIO_SAMPLES = 800
"""Raw-audio samples per example (50 ms at 16 kHz): 79 frames after the feature convs."""

_CLIP_TEXT: dict[str, Any] = dict(
    vocab_size=_VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    max_position_embeddings=_SEQ,
    attention_dropout=0.0,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
_CLIP_VISION: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=32,
    patch_size=8,
    attention_dropout=0.0,
)


def _model(
    name: str,
    family: str,
    architecture: str,
    description: str,
    build: Callable[[], nn.Module],
    make_inputs: Callable[[int], tuple],
    *,
    batch_sizes: tuple[int, ...] = (1, 2, 4),
    default_batch: int = 2,
    trainable: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    ci: bool = False,
    followup_inputs: Callable[[nn.Module, int], tuple] | None = None,
) -> ZooModel:
    return ZooModel(
        name=name,
        description=description,
        build=build,
        make_inputs=make_inputs,
        batch_sizes=batch_sizes,
        default_batch=default_batch,
        trainable=trainable,
        atol=atol,
        rtol=rtol,
        tier="corpus",
        family=family,
        architecture=architecture,
        ci=ci,
        followup_inputs=followup_inputs,
    )


def _decoder(
    name: str,
    architecture: str,
    description: str,
    model_class: str,
    config_class: str,
    seed: int,
    *,
    ci: bool = False,
    **config: Any,
) -> ZooModel:
    return _model(
        name,
        "decoder",
        architecture,
        description,
        _builder(_CausalLM, model_class, config_class, **config),
        _prompt(seed),
        ci=ci,
        followup_inputs=_decode_step(seed),
    )


# --- the corpus --------------------------------------------------------------------------

_VISION: tuple[ZooModel, ...] = (
    _model(
        "resnet_tiny",
        "vision",
        "ResNet",
        "ResNet, basic blocks, 2 stages (16, 32 ch), batch norm, 3x32x32, 10 classes",
        _builder(
            _ImageModel,
            "ResNetForImageClassification",
            "ResNetConfig",
            embedding_size=16,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            layer_type="basic",
            num_labels=10,
        ),
        _images(100, 32),
        ci=True,
    ),
    _model(
        "resnet18",
        "vision",
        "ResNet",
        "ResNet-18 layout (basic blocks 2-2-2-2, 64-512 ch), 3x224x224, 1000 classes",
        _builder(
            _ImageModel,
            "ResNetForImageClassification",
            "ResNetConfig",
            embedding_size=64,
            hidden_sizes=[64, 128, 256, 512],
            depths=[2, 2, 2, 2],
            layer_type="basic",
            num_labels=1000,
        ),
        _images(101, 224),
        batch_sizes=(1, 2, 8),
    ),
    _model(
        "resnet_bottleneck",
        "vision",
        "ResNet",
        "ResNet-50 style bottleneck blocks, 4 stages (32-256 ch), 3x64x64, 10 classes",
        _builder(
            _ImageModel,
            "ResNetForImageClassification",
            "ResNetConfig",
            embedding_size=16,
            hidden_sizes=[32, 64, 128, 256],
            depths=[1, 1, 1, 1],
            layer_type="bottleneck",
            num_labels=10,
        ),
        _images(102, 64),
    ),
    _model(
        "convnext",
        "vision",
        "ConvNeXt",
        "ConvNeXt, 4 stages (16-128 ch), depthwise 7x7, layer norm, 3x64x64",
        _builder(
            _ImageModel,
            "ConvNextForImageClassification",
            "ConvNextConfig",
            hidden_sizes=[16, 32, 64, 128],
            depths=[1, 1, 1, 1],
            num_labels=10,
        ),
        _images(103, 64),
    ),
    _model(
        "convnextv2",
        "vision",
        "ConvNeXt V2",
        "ConvNeXt V2 (global response norm), 4 stages (16-128 ch), 3x64x64",
        _builder(
            _ImageModel,
            "ConvNextV2ForImageClassification",
            "ConvNextV2Config",
            hidden_sizes=[16, 32, 64, 128],
            depths=[1, 1, 1, 1],
            num_labels=10,
        ),
        _images(104, 64),
    ),
    _model(
        "mobilenet_v2",
        "vision",
        "MobileNetV2",
        "MobileNetV2 at width 0.25 (inverted residuals, ReLU6, batch norm), 3x64x64",
        _builder(
            _ImageModel,
            "MobileNetV2ForImageClassification",
            "MobileNetV2Config",
            depth_multiplier=0.25,
            image_size=64,
            num_labels=10,
            classifier_dropout_prob=0.0,
        ),
        _images(105, 64),
    ),
    _model(
        "efficientnet",
        "vision",
        "EfficientNet",
        "EfficientNet-B0 layout at width 0.25, depth 0.25 (SE, SiLU, batch norm), 3x64x64",
        _builder(
            _ImageModel,
            "EfficientNetForImageClassification",
            "EfficientNetConfig",
            image_size=64,
            width_coefficient=0.25,
            depth_coefficient=0.25,
            # The top conv has round_filters(1280) = 320 channels at width 0.25, and
            # hidden_dim must match it (it sizes the batch norm and the classifier).
            hidden_dim=320,
            dropout_rate=0.0,
            drop_connect_rate=0.0,
            num_labels=10,
        ),
        _images(106, 64),
    ),
    _model(
        "regnet",
        "vision",
        "RegNet",
        "RegNetY (grouped convs, squeeze-excitation), 4 stages (16-128 ch), 3x64x64",
        _builder(
            _ImageModel,
            "RegNetForImageClassification",
            "RegNetConfig",
            embedding_size=16,
            hidden_sizes=[16, 32, 64, 128],
            depths=[1, 1, 1, 1],
            groups_width=8,
            layer_type="y",
            num_labels=10,
        ),
        _images(107, 64),
    ),
    _model(
        "mobilevit",
        "vision",
        "MobileViT",
        "MobileViT (MobileNetV2 blocks + unfold/attention/fold), 3x64x64, eager attention",
        _builder(
            _ImageModel,
            "MobileViTForImageClassification",
            "MobileViTConfig",
            image_size=64,
            hidden_sizes=[32, 48, 64],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            classifier_dropout_prob=0.0,
            num_labels=10,
        ),
        _images(108, 64),
    ),
    _model(
        "vit_tiny",
        "vision",
        "ViT",
        "ViT, 2 layers, hidden 32, patch 8 on 3x32x32 (16 patches + CLS), SDPA",
        _builder(
            _ImageModel,
            "ViTForImageClassification",
            "ViTConfig",
            attn_implementation="sdpa",
            **_VIT_LIKE,
        ),
        _images(109, 32),
        ci=True,
    ),
    _model(
        "deit",
        "vision",
        "DeiT",
        "DeiT with distillation token, 2 layers, hidden 32, 3x32x32, SDPA",
        _builder(
            _ImageModel,
            "DeiTForImageClassificationWithTeacher",
            "DeiTConfig",
            attn_implementation="sdpa",
            **_VIT_LIKE,
        ),
        _images(110, 32),
    ),
    _model(
        "beit",
        "vision",
        "BEiT",
        "BEiT (relative position bias, layer scale), 2 layers, hidden 32, 3x32x32, SDPA",
        _builder(
            _ImageModel,
            "BeitForImageClassification",
            "BeitConfig",
            attn_implementation="sdpa",
            use_relative_position_bias=True,
            use_mean_pooling=True,
            **_VIT_LIKE,
        ),
        _images(111, 32),
    ),
    _model(
        "dinov2",
        "vision",
        "DINOv2",
        "DINOv2 (layer scale, CLS + mean-patch head), 2 layers, 3x32x32, SDPA",
        _builder(
            _ImageModel,
            "Dinov2ForImageClassification",
            "Dinov2Config",
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            mlp_ratio=2,
            image_size=32,
            patch_size=8,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            num_labels=10,
            attn_implementation="sdpa",
        ),
        _images(112, 32),
    ),
    _model(
        "swin",
        "vision",
        "Swin Transformer",
        "Swin (shifted 4x4 windows, patch merging), 2 stages, dim 16, 3x32x32, SDPA",
        _builder(
            _ImageModel,
            "SwinForImageClassification",
            "SwinConfig",
            attn_implementation="sdpa",
            image_size=32,
            patch_size=2,
            embed_dim=16,
            depths=[2, 1],
            num_heads=[2, 2],
            window_size=4,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            num_labels=10,
        ),
        _images(113, 32),
    ),
    _model(
        "segformer",
        "vision",
        "SegFormer",
        "SegFormer (reduced-key attention, mix-FFN, MLP decoder), 4 stages, 3x64x64, SDPA",
        _builder(
            _ImageModel,
            "SegformerForSemanticSegmentation",
            "SegformerConfig",
            attn_implementation="sdpa",
            hidden_sizes=[8, 16, 32, 64],
            depths=[1, 1, 1, 1],
            num_attention_heads=[1, 2, 2, 4],
            decoder_hidden_size=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            classifier_dropout_prob=0.0,
            num_labels=4,
        ),
        _images(114, 64),
    ),
    _model(
        "poolformer",
        "vision",
        "PoolFormer",
        "PoolFormer (average pooling as token mixer, group norm), 4 stages, 3x64x64",
        _builder(
            _ImageModel,
            "PoolFormerForImageClassification",
            "PoolFormerConfig",
            hidden_sizes=[16, 32, 64, 128],
            depths=[1, 1, 1, 1],
            num_labels=10,
        ),
        _images(115, 64),
    ),
    _model(
        "levit",
        "vision",
        "LeViT",
        "LeViT (conv stem, attention biases, subsampling attention), 3x64x64, eager attn",
        _builder(
            _ImageModel,
            "LevitForImageClassification",
            "LevitConfig",
            image_size=64,
            hidden_sizes=[32, 48, 64],
            num_attention_heads=[2, 3, 4],
            depths=[1, 1, 1],
            key_dim=[8, 8, 8],
            num_labels=10,
        ),
        _images(116, 64),
    ),
)

_TEXT: tuple[ZooModel, ...] = (
    _model(
        "bert",
        "text",
        "BERT",
        f"BertModel, 2 layers, hidden 32, seq {_SEQ} with padding, SDPA",
        _builder(
            _TextEncoder,
            "BertModel",
            "BertConfig",
            attn_implementation="sdpa",
            **_BERT_LIKE,
        ),
        _text(200),
        ci=True,
    ),
    _model(
        "roberta",
        "text",
        "RoBERTa",
        f"RobertaModel, 2 layers, hidden 32, seq {_SEQ} with padding, SDPA",
        _builder(
            _TextEncoder,
            "RobertaModel",
            "RobertaConfig",
            attn_implementation="sdpa",
            pad_token_id=1,
            **{**_BERT_LIKE, "max_position_embeddings": 64 + 2},
        ),
        _text(201),
    ),
    _model(
        "albert",
        "text",
        "ALBERT",
        f"AlbertModel (factorised embeddings, shared layer), seq {_SEQ} with padding, SDPA",
        _builder(
            _TextEncoder,
            "AlbertModel",
            "AlbertConfig",
            attn_implementation="sdpa",
            embedding_size=16,
            classifier_dropout_prob=0.0,
            **_BERT_LIKE,
        ),
        _text(202),
    ),
    _model(
        "deberta_v2",
        "text",
        "DeBERTa-v2",
        f"DebertaV2Model (disentangled relative attention, eager), seq {_SEQ} with padding",
        _builder(
            _TextEncoder,
            "DebertaV2Model",
            "DebertaV2Config",
            relative_attention=True,
            position_buckets=8,
            max_relative_positions=32,
            pos_att_type=["p2c", "c2p"],
            **_BERT_LIKE,
        ),
        _text(203),
    ),
    _model(
        "electra",
        "text",
        "ELECTRA",
        f"ElectraModel (embedding 16 -> hidden 32), seq {_SEQ} with padding, SDPA",
        _builder(
            _TextEncoder,
            "ElectraModel",
            "ElectraConfig",
            embedding_size=16,
            attn_implementation="sdpa",
            **_BERT_LIKE,
        ),
        _text(204),
    ),
    _model(
        "distilbert",
        "text",
        "DistilBERT",
        f"DistilBertModel, 2 layers, dim 32, seq {_SEQ} with padding, SDPA",
        _builder(
            _TextEncoder,
            "DistilBertModel",
            "DistilBertConfig",
            vocab_size=_VOCAB,
            dim=32,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
            attn_implementation="sdpa",
        ),
        _text(205),
    ),
)

_DECODERS: tuple[ZooModel, ...] = (
    _decoder(
        "gpt2",
        "GPT-2",
        f"GPT2LMHeadModel, 2 layers, hidden 32, seq {_SEQ} + a cached decode step, SDPA",
        "GPT2LMHeadModel",
        "GPT2Config",
        300,
        ci=True,
        vocab_size=_VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=1,
        eos_token_id=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="sdpa",
    ),
    _decoder(
        "opt",
        "OPT",
        f"OPTForCausalLM, 2 layers, hidden 32, seq {_SEQ} + a cached decode step, SDPA",
        "OPTForCausalLM",
        "OPTConfig",
        301,
        vocab_size=_VOCAB,
        hidden_size=32,
        word_embed_proj_dim=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        layerdrop=0.0,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=2,
        attn_implementation="sdpa",
    ),
    _decoder(
        "llama",
        "Llama",
        f"LlamaForCausalLM, 2 layers, hidden 32, GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "LlamaForCausalLM",
        "LlamaConfig",
        302,
        **_LLAMA_LIKE,
    ),
    _decoder(
        "phi",
        "Phi",
        f"PhiForCausalLM (Phi-2: partial rotary, parallel block), seq {_SEQ} + decode, SDPA",
        "PhiForCausalLM",
        "PhiConfig",
        303,
        partial_rotary_factor=0.5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        **{**_LLAMA_LIKE, "num_key_value_heads": 4},
    ),
    _decoder(
        "phi3",
        "Phi-3",
        f"Phi3ForCausalLM (fused qkv and gate-up), seq {_SEQ} + a decode step, SDPA",
        "Phi3ForCausalLM",
        "Phi3Config",
        304,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        **_LLAMA_LIKE,
    ),
    _decoder(
        "gemma",
        "Gemma",
        f"GemmaForCausalLM (GeGLU, scaled embeddings, MQA), seq {_SEQ} + a decode step, SDPA",
        "GemmaForCausalLM",
        "GemmaConfig",
        305,
        head_dim=16,
        **{**_LLAMA_LIKE, "num_key_value_heads": 1, "num_attention_heads": 2},
    ),
    _decoder(
        "gemma3",
        "Gemma 3",
        f"Gemma3ForCausalLM (q/k norm, sliding window 8 + global), seq {_SEQ} + decode, SDPA",
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        306,
        head_dim=16,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        **{**_LLAMA_LIKE, "num_key_value_heads": 1, "num_attention_heads": 2},
    ),
    _decoder(
        "qwen2",
        "Qwen2",
        f"Qwen2ForCausalLM (qkv bias), GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "Qwen2ForCausalLM",
        "Qwen2Config",
        307,
        **_LLAMA_LIKE,
    ),
    _decoder(
        "qwen3",
        "Qwen3",
        f"Qwen3ForCausalLM (q/k RMS norm), GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "Qwen3ForCausalLM",
        "Qwen3Config",
        308,
        head_dim=8,
        **_LLAMA_LIKE,
    ),
    _decoder(
        "mistral",
        "Mistral",
        f"MistralForCausalLM, GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "MistralForCausalLM",
        "MistralConfig",
        309,
        **_LLAMA_LIKE,
    ),
)

_ENCODER_DECODERS: tuple[ZooModel, ...] = (
    _model(
        "t5",
        "encoder-decoder",
        "T5",
        f"T5Model (relative position buckets, RMS norm), 1+1 layers, seq {_SEQ}/8, SDPA",
        _builder(
            _Seq2Seq,
            "T5Model",
            "T5Config",
            attn_implementation="sdpa",
            vocab_size=_VOCAB,
            d_model=32,
            d_kv=16,
            d_ff=64,
            num_layers=1,
            num_decoder_layers=1,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=32,
            dropout_rate=0.0,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        ),
        _seq2seq(400),
        ci=True,
    ),
    _model(
        "bart",
        "encoder-decoder",
        "BART",
        f"BartModel, 1+1 layers, d 32, seq {_SEQ} with padding / 8 decoder tokens, SDPA",
        _builder(_Seq2Seq, "BartModel", "BartConfig", **_BART_LIKE),
        _seq2seq(401),
    ),
    _model(
        "marian",
        "encoder-decoder",
        "Marian",
        f"MarianMTModel (sinusoidal positions, LM head), 1+1 layers, seq {_SEQ}/8, SDPA",
        _builder(
            _Seq2Seq,
            "MarianMTModel",
            "MarianConfig",
            **{**_BART_LIKE, "pad_token_id": 0, "decoder_start_token_id": 0},
        ),
        _seq2seq(402),
    ),
    _model(
        "pegasus",
        "encoder-decoder",
        "Pegasus",
        f"PegasusModel (pre-norm, sinusoidal positions), 1+1 layers, seq {_SEQ}/8, SDPA",
        _builder(
            _Seq2Seq,
            "PegasusModel",
            "PegasusConfig",
            **{**_BART_LIKE, "pad_token_id": 0, "decoder_start_token_id": 0},
        ),
        _seq2seq(403),
    ),
)

_WHISPER_MELS = 16
_WHISPER_SOURCE_POSITIONS = 16

_AUDIO: tuple[ZooModel, ...] = (
    _model(
        "whisper",
        "audio",
        "Whisper",
        "WhisperModel, 1+1 layers, d 32, 16 mel bins x 32 frames, 8 decoder tokens, SDPA",
        _builder(
            _SpeechSeq2Seq,
            "WhisperModel",
            "WhisperConfig",
            vocab_size=_VOCAB,
            num_mel_bins=_WHISPER_MELS,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_source_positions=_WHISPER_SOURCE_POSITIONS,
            max_target_positions=32,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
            suppress_tokens=None,
            begin_suppress_tokens=None,
            apply_spec_augment=False,
            attn_implementation="sdpa",
        ),
        _speech_seq2seq(500, _WHISPER_MELS, 2 * _WHISPER_SOURCE_POSITIONS),
    ),
    _model(
        "wav2vec2",
        "audio",
        "Wav2Vec2",
        f"Wav2Vec2Model (conv features, conv positions), {_AUDIO_SAMPLES} raw samples, SDPA",
        _builder(
            _AudioEncoder,
            "Wav2Vec2Model",
            "Wav2Vec2Config",
            attn_implementation="sdpa",
            **_WAV2VEC2_LIKE,
        ),
        _audio(501, _AUDIO_SAMPLES),
        ci=True,
    ),
    _model(
        "hubert",
        "audio",
        "HuBERT",
        f"HubertModel (wav2vec2-style encoder), {_AUDIO_SAMPLES} raw samples, SDPA",
        _builder(
            _AudioEncoder,
            "HubertModel",
            "HubertConfig",
            attn_implementation="sdpa",
            **_WAV2VEC2_LIKE,
        ),
        _audio(502, _AUDIO_SAMPLES),
    ),
)

_MULTIMODAL: tuple[ZooModel, ...] = (
    _model(
        "clip",
        "multimodal",
        "CLIP",
        f"CLIPModel (text seq {_SEQ} + ViT on 3x32x32): logits and both embeds, SDPA",
        _builder(
            _ImageText,
            "CLIPModel",
            "CLIPConfig",
            text_config=_CLIP_TEXT,
            vision_config=_CLIP_VISION,
            projection_dim=16,
            attn_implementation="sdpa",
        ),
        _image_text(600, 32),
        ci=True,
    ),
    _model(
        "siglip",
        "multimodal",
        "SigLIP",
        f"SiglipModel (attention-pooling head), text {_SEQ} + 3x32x32: logits, embeds, SDPA",
        _builder(
            _ImageText,
            "SiglipModel",
            "SiglipConfig",
            text_config=_CLIP_TEXT,
            vision_config=_CLIP_VISION,
            attn_implementation="sdpa",
        ),
        _image_text(601, 32),
    ),
)

MODELS: tuple[ZooModel, ...] = (
    *_VISION,
    *_TEXT,
    *_DECODERS,
    *_ENCODER_DECODERS,
    *_AUDIO,
    *_MULTIMODAL,
)
