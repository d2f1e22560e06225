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

This module puts the families together in presentation order; ``_hf`` holds what they
share, and ``_vision``, ``_text`` (text encoders and encoder-decoders), ``_decoders`` and
``_audio_multimodal`` hold the models. ``transformers`` is imported only when a builder
runs.
"""

from __future__ import annotations

from ortlab.zoo import _audio_multimodal, _decoders, _model, _text, _vision

MODELS: tuple[_model.ZooModel, ...] = tuple(
    sorted(
        (*_vision.MODELS, *_text.MODELS, *_decoders.MODELS, *_audio_multimodal.MODELS),
        key=lambda m: _model.FAMILIES.index(m.family),
    )
)
"""Every corpus model, grouped by family in the order of :data:`~ortlab.zoo.FAMILIES`."""
