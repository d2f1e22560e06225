"""What every corpus model shares: ``transformers`` classes built from small configurations.

This module owns the lazy ``transformers`` import, the wrappers that give each model a
``forward`` of positional tensors in and tensors out (never a ``ModelOutput``), the
builder that draws random weights under a fixed seed, the deterministic example inputs of
images, token sequences and raw audio, the configuration pieces several families share,
the training objectives (:func:`objective`: the ``transformers`` class with its training
head, called as users call it, ``model(**inputs, labels=y).loss``, and the labels that go
with the inputs), and :func:`model`, the one factory of corpus
:class:`~ortlab.zoo.ZooModel` records. The families' modules (``_vision``, ``_text``,
``_decoders``, ``_audio_multimodal``) hold the models themselves.

``transformers`` is imported only when a builder runs.
"""

# NOTE: a training step's inputs are the inference inputs of the same seed, as keywords,
# plus labels drawn with a seed of their own (LABEL_SEED): the inference inputs the rest
# of the corpus uses are untouched. Where the inference model has no training head (a
# BertModel), the objective builds the class that has one from the same configuration.

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import torch
from torch import nn

from ortlab import _deps
from ortlab.zoo import _model

SEQ = 16
"""Tokens per sequence of the text, decoder and encoder-decoder inputs."""

VOCAB = 512
"""Vocabulary size of every text model."""

FIRST_ID = 4
"""Example token ids are drawn from ``[FIRST_ID, VOCAB)``, clear of the special tokens."""

LABEL_SEED = 7
"""The seed of every training step's labels (class ids, pixel classes, CTC targets)."""

IGNORE = -100
"""The label ``transformers``' losses skip (a padded target position)."""

SINGLE_LABEL = dict(problem_type="single_label_classification")
"""Cross-entropy for a classifier, said in its configuration: left unset, the first
forward with labels writes it into the configuration, and a compiled model's guard on it
fails on the second step (one recompile per model, whatever the backend)."""


Mask: TypeAlias = torch.Tensor | None
"""An attention mask (1 attends to a position, 0 pads it out), or ``None`` for none."""


def transformers() -> Any:
    """Imports ``transformers``, or raises ``MissingDependencyError`` naming the extra."""
    return _deps.require("transformers")


# --- shared configuration pieces ---------------------------------------------------------

NO_DROPOUT: dict[str, Any] = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
"""Dropout off, in the spelling of BERT, ViT and their relatives."""

NO_DROP_PATH: dict[str, Any] = dict(drop_path_rate=0.0)
"""Stochastic depth off (BEiT, Swin, SegFormer default to 0.1): in training it drops a
sample's residual branch at random, and eager, float64 and a compiled copy draw
differently, so one training step's gradients would be compared across different
networks."""

ENCODER_DECODER: dict[str, Any] = (
    dict(vocab_size=VOCAB, d_model=32, attn_implementation="sdpa")
    | dict(encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64)
    | dict(decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64)
    | dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
)
"""One encoder and one decoder layer, width 32, SDPA, no dropout: BART's family, Whisper."""


# --- wrappers: positional tensors in, tensors out ----------------------------------------


class _Wrapper(nn.Module):
    """Holds the ``transformers`` model as ``net``; subclasses define ``forward``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def _first_output(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The first output of ``net(*args, **kwargs)``, asked for as a tuple."""
        return self.net(*args, **kwargs, return_dict=False)[0]


class ImageModel(_Wrapper):
    """``(pixel_values,)`` -> the first output: logits, or the last hidden state."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self._first_output(pixel_values)


class AudioEncoder(_Wrapper):
    """``(input_values,)`` (raw audio) -> the last hidden state."""

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self._first_output(input_values)


class TextEncoder(_Wrapper):
    """``(input_ids, attention_mask)`` -> the last hidden state."""

    def forward(self, input_ids: torch.Tensor, attention_mask: Mask) -> torch.Tensor:
        return self._first_output(input_ids, attention_mask=attention_mask)


class Seq2Seq(_Wrapper):
    """``(input_ids, attention_mask, decoder_input_ids)`` -> the decoder's first output."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: Mask, decoder_input_ids: torch.Tensor
    ) -> torch.Tensor:
        return self._first_output(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
        )


class SpeechSeq2Seq(_Wrapper):
    """``(input_features, decoder_input_ids)`` -> the decoder's last hidden state."""

    def forward(
        self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> torch.Tensor:
        return self._first_output(
            input_features, decoder_input_ids=decoder_input_ids, use_cache=False
        )


class ImageText(_Wrapper):
    """``(input_ids, pixel_values, attention_mask)`` -> image-text logits and both embeds."""

    def forward(
        self, input_ids: torch.Tensor, pixel_values: torch.Tensor, attention_mask: Mask
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.net(
            input_ids=input_ids,
            pixel_values=pixel_values,
            attention_mask=attention_mask,
            return_dict=True,
        )
        return out.logits_per_image, out.text_embeds, out.image_embeds


def builder(
    wrapper: Callable[[nn.Module], nn.Module], model_class: str, config: dict[str, Any]
) -> Callable[[], nn.Module]:
    """Returns a builder of ``wrapper(transformers.<model_class>(<its config>(**config)))``.

    Args:
        wrapper: One of this module's wrappers (or the decoders'), around the model.
        model_class: The ``transformers`` model class, e.g. ``"BertModel"``; its
            ``config_class`` takes ``config``.
        config: The configuration's keyword arguments.

    Returns:
        A function that builds the wrapped model under seed 0, in eval mode.
    """

    def make() -> nn.Module:
        net_class = getattr(transformers(), model_class)
        return wrapper(net_class(net_class.config_class(**config)))

    def build() -> nn.Module:
        return _model.seeded_build(make)

    build.__qualname__ = build.__name__ = f"build_{model_class}"
    return build


def model(
    family: str,
    wrapper: Callable[[nn.Module], nn.Module],
    name: str,
    architecture: str,
    description: str,
    model_class: str,
    config: dict[str, Any],
    make_inputs: Callable[[int], tuple],
    *,
    batch_sizes: tuple[int, ...] = (1, 2, 4),
    ci: bool = False,
    followup_inputs: Callable[[nn.Module, int], tuple] | None = None,
    objective: _model.Objective | None = None,
) -> _model.ZooModel:
    """Returns the corpus model ``name``: ``transformers.<model_class>`` in ``wrapper``.

    Every corpus model is trainable, runs batch 2 by default (dynamo specialises size 1)
    and is held to 1e-4 absolute and relative against eager.

    Args:
        family: One of :data:`~ortlab.zoo.FAMILIES`.
        wrapper: The module around the ``transformers`` model (see :func:`builder`).
        name: The zoo name.
        architecture: The public architecture, e.g. ``"ResNet"``.
        description: One line for tables.
        model_class: The ``transformers`` model class.
        config: Its configuration's keyword arguments.
        make_inputs: The example inputs for a batch size.
        batch_sizes: The batch-size sweep.
        ci: Whether the model belongs to the fast subset the test suite compiles.
        followup_inputs: The inputs of a second call (decoders' decode step).
        objective: How it trains with its own loss (:func:`objective`).

    Returns:
        The :class:`~ortlab.zoo.ZooModel`.
    """
    return _model.ZooModel(
        name=name,
        description=description,
        build=builder(wrapper, model_class, config),
        make_inputs=make_inputs,
        batch_sizes=batch_sizes,
        default_batch=2,
        trainable=True,
        atol=1e-4,
        rtol=1e-4,
        tier="corpus",
        family=family,
        architecture=architecture,
        ci=ci,
        followup_inputs=followup_inputs,
        objective=objective,
    )


# --- training objectives -----------------------------------------------------------------


def _bare(net: nn.Module) -> nn.Module:
    """No wrapper: a training step calls the ``transformers`` model as users do."""
    return net


def objective(
    loss: str,
    model_class: str,
    config: dict[str, Any],
    make_inputs: Callable[[int], dict[str, Any]],
    *,
    note: str = "",
) -> _model.Objective:
    """Returns the training objective computed by ``transformers.<model_class>`` itself.

    Args:
        loss: The loss in a few words.
        model_class: The class with the training head (its forward takes the labels).
        config: Its configuration's keyword arguments.
        make_inputs: The keyword inputs of a training step for a batch size, labels
            included (:func:`labeled`).
        note: Why the training class is not the inference one, where it is not.

    Returns:
        The :class:`~ortlab.zoo.Objective`; its model is built under seed 0, unwrapped.
    """
    return _model.Objective(
        loss=loss,
        model_class=model_class,
        build=builder(_bare, model_class, config),
        make_inputs=make_inputs,
        note=note,
    )


def labeled(
    make_inputs: Callable[[int], tuple],
    names: tuple[str, ...],
    labels: Callable[[dict[str, Any]], torch.Tensor] | None = None,
    **extra: Any,
) -> Callable[[int], dict[str, Any]]:
    """Keyword inputs of a training step: the positional inference inputs named, plus
    ``labels`` made from them (``None``: no labels) and ``extra`` keywords.

    Args:
        make_inputs: The inference inputs for a batch size (one of this module's makers).
        names: The keyword of each positional input.
        labels: Makes the labels from the named inputs (``input_ids`` gives a causal LM
            its targets; the others read the batch size only).
        **extra: More keywords, e.g. ``return_loss=True``.
    """

    def make(batch: int) -> dict[str, Any]:
        inputs = dict(zip(names, make_inputs(batch), strict=True))
        if labels is not None:
            inputs["labels"] = labels(inputs)
        return inputs | extra

    return make


def _batch(inputs: dict[str, Any]) -> int:
    return int(next(iter(inputs.values())).shape[0])


def class_labels(classes: int) -> Callable[[dict[str, Any]], torch.Tensor]:
    """One class id in ``[0, classes)`` per example."""
    return lambda inputs: torch.randint(
        0, classes, (_batch(inputs),), generator=_model.generator(LABEL_SEED)
    )


def pixel_labels(
    classes: int, size: int, block: int
) -> Callable[[dict[str, Any]], torch.Tensor]:
    """A class id in ``[0, classes)`` per pixel of a ``size`` x ``size`` image, one per
    ``block`` x ``block`` square (a class per pixel drawn at random could not be learnt:
    a model starting near uniform would already sit at its best loss, and a training step
    would hardly move it)."""

    def make(inputs: dict[str, Any]) -> torch.Tensor:
        cells = size // block
        coarse = torch.randint(
            0, classes, (_batch(inputs), cells, cells), generator=_model.generator(LABEL_SEED)
        )
        return coarse.repeat_interleave(block, dim=1).repeat_interleave(block, dim=2)

    return make


def next_tokens(inputs: dict[str, Any]) -> torch.Tensor:
    """A causal LM's labels: its input ids (``transformers`` shifts them inside)."""
    return inputs["input_ids"].clone()


def target_tokens(length: int) -> Callable[[dict[str, Any]], torch.Tensor]:
    """Decoder targets of ``length`` tokens (the model shifts them right into its
    decoder inputs)."""
    return lambda inputs: token_ids(_batch(inputs), length, LABEL_SEED)


def ctc_targets(length: int, vocab: int) -> Callable[[dict[str, Any]], torch.Tensor]:
    """CTC targets of up to ``length`` symbols in ``[1, vocab)`` (0 is the blank); row
    ``r`` ends in ``r % 3`` padded positions (:data:`IGNORE`), as a batch of transcripts
    of different lengths is."""

    def make(inputs: dict[str, Any]) -> torch.Tensor:
        batch = _batch(inputs)
        targets = torch.randint(
            1, vocab, (batch, length), generator=_model.generator(LABEL_SEED)
        )
        for row in range(batch):
            if row % 3:
                targets[row, length - row % 3 :] = IGNORE
        return targets

    return make


# --- inputs ------------------------------------------------------------------------------


def token_ids(batch: int, seq: int, seed: int) -> torch.Tensor:
    """Token ids in ``[FIRST_ID, VOCAB)``, shape ``(batch, seq)``, drawn with ``seed``."""
    return torch.randint(
        FIRST_ID, VOCAB, (batch, seq), generator=_model.generator(seed), dtype=torch.int64
    )


def padding_mask(batch: int, seq: int) -> torch.Tensor:
    """Ones, except that row ``r`` ends in ``r % 3`` padding positions (zeros)."""
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for row in range(batch):
        if row % 3:
            mask[row, seq - row % 3 :] = 0
    return mask


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_model.generator(seed))


def images(seed: int, size: int) -> Callable[[int], tuple]:
    """``(pixel_values,)``: RGB images of ``size`` x ``size``."""
    return lambda batch: (_randn(seed, batch, 3, size, size),)


def text(seed: int) -> Callable[[int], tuple]:
    """``(input_ids, attention_mask)``: :data:`SEQ` tokens with some padding."""
    return lambda batch: (token_ids(batch, SEQ, seed), padding_mask(batch, SEQ))


def seq2seq(seed: int) -> Callable[[int], tuple]:
    """``(input_ids, attention_mask, decoder_input_ids)``: padded source, 8 target tokens."""
    return lambda batch: (
        token_ids(batch, SEQ, seed),
        padding_mask(batch, SEQ),
        token_ids(batch, SEQ // 2, seed + 1),
    )


def speech_seq2seq(seed: int, mel_bins: int, frames: int) -> Callable[[int], tuple]:
    """``(input_features, decoder_input_ids)``: a log-mel spectrogram, 8 target tokens."""
    return lambda batch: (
        _randn(seed, batch, mel_bins, frames),
        token_ids(batch, SEQ // 2, seed + 1),
    )


def audio(seed: int, samples: int) -> Callable[[int], tuple]:
    """``(input_values,)``: raw audio of ``samples`` samples."""
    return lambda batch: (_randn(seed, batch, samples),)


def image_text(seed: int, size: int) -> Callable[[int], tuple]:
    """``(input_ids, pixel_values, attention_mask)``: padded text and an RGB image."""
    return lambda batch: (
        token_ids(batch, SEQ, seed),
        _randn(seed + 1, batch, 3, size, size),
        padding_mask(batch, SEQ),
    )
