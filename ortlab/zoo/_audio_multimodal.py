"""The corpus's audio and multimodal families: speech in, and images with text in.

Audio: Whisper, an encoder-decoder on a log-mel spectrogram
(:class:`~ortlab.zoo._hf.SpeechSeq2Seq`), and two encoders of raw audio, wav2vec 2.0 and
HuBERT (:class:`~ortlab.zoo._hf.AudioEncoder`). Multimodal: CLIP and SigLIP, a text
encoder and a vision transformer side by side, returning the image-text logits and both
embeddings (:class:`~ortlab.zoo._hf.ImageText`).

Each trains on its own loss: Whisper as ``WhisperForConditionalGeneration`` on 8 target
tokens (cross-entropy, the decoder inputs shifted from the labels inside); wav2vec 2.0
and HuBERT as their ``...ForCTC`` on character targets of different lengths (CTC with
``ctc_loss_reduction="mean"``, as fine-tuning recipes set it; ``transformers``' default
sums); CLIP and SigLIP on their contrastive losses (``return_loss=True``: CLIP's
symmetric cross-entropy over the image-text logits, SigLIP's pairwise sigmoid loss).
"""

from __future__ import annotations

from typing import Any

from ortlab.zoo import _hf, _model

_SEQ = _hf.SEQ

_MEL_BINS = 16
"""Mel bins of Whisper's log-mel spectrogram."""

_SOURCE_POSITIONS = 16
"""Whisper's encoder positions; its second conv has stride 2, so it takes twice the frames."""

_AUDIO_SAMPLES = 800
"""Raw-audio samples per example (50 ms at 16 kHz): 79 frames after the feature convs."""

_WHISPER = (
    _hf.ENCODER_DECODER
    | dict(num_mel_bins=_MEL_BINS, max_source_positions=_SOURCE_POSITIONS)
    | dict(max_target_positions=32, apply_spec_augment=False)
    | dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3)
    | dict(suppress_tokens=None, begin_suppress_tokens=None)
)

_CTC_VOCAB = 32
"""Characters of wav2vec 2.0's and HuBERT's CTC head, the blank (0) included."""

_WAV2VEC2_LIKE = (
    dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    | dict(conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3))
    | dict(vocab_size=_CTC_VOCAB)
    | dict(num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)
    | dict(hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0)
    | dict(feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0)
    # SpecAugment draws its masks with numpy while training: off, for determinism.
    | dict(apply_spec_augment=False, attn_implementation="sdpa")
)
"""Feature convs, convolutional positions and one layer of width 32: wav2vec 2.0, HuBERT."""

_CLIP_LAYER = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
)
_CLIP_TEXT = (
    _CLIP_LAYER
    | dict(vocab_size=_hf.VOCAB, max_position_embeddings=_SEQ, attention_dropout=0.0)
    | dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
)
_CLIP_VISION = _CLIP_LAYER | dict(image_size=32, patch_size=8, attention_dropout=0.0)
_TOWERS = dict(text_config=_CLIP_TEXT, vision_config=_CLIP_VISION, attn_implementation="sdpa")
"""A text and a vision transformer of one layer each: SigLIP; CLIP adds a projection."""

_CLIP = _TOWERS | dict(projection_dim=16)

_WHISPER_INPUTS = _hf.speech_seq2seq(500, _MEL_BINS, 2 * _SOURCE_POSITIONS)

_CTC_TARGET = 8
"""Symbols of the longest CTC target (79 frames of audio carry them easily)."""


def _ctc(model_class: str, seed: int) -> _model.Objective:
    return _hf.objective(
        "CTC on character targets (mean over targets)",
        model_class,
        _WAV2VEC2_LIKE | dict(ctc_loss_reduction="mean"),
        _hf.labeled(
            _hf.audio(seed, _AUDIO_SAMPLES),
            ("input_values",),
            _hf.ctc_targets(_CTC_TARGET, _CTC_VOCAB),
        ),
        note="the encoder with its CTC head (the encoder has no loss)",
    )


def _contrastive(
    loss: str, model_class: str, config: dict[str, Any], seed: int
) -> _model.Objective:
    return _hf.objective(
        loss,
        model_class,
        config,
        _hf.labeled(
            _hf.image_text(seed, 32),
            ("input_ids", "pixel_values", "attention_mask"),
            return_loss=True,
        ),
    )


MODELS = (
    _hf.model(
        "audio",
        _hf.SpeechSeq2Seq,
        "whisper",
        "Whisper",
        "WhisperModel, 1+1 layers, d 32, 16 mel bins x 32 frames, 8 decoder tokens, SDPA",
        "WhisperModel",
        _WHISPER,
        _WHISPER_INPUTS,
        objective=_hf.objective(
            "cross-entropy on decoder targets (labels, shifted inside)",
            "WhisperForConditionalGeneration",
            _WHISPER,
            _hf.labeled(
                lambda batch: _WHISPER_INPUTS(batch)[:1],  # the decoder's come from labels
                ("input_features",),
                _hf.target_tokens(_SEQ // 2),
            ),
            note="the model with its LM head (the bare model has no loss)",
        ),
    ),
    _hf.model(
        "audio",
        _hf.AudioEncoder,
        "wav2vec2",
        "Wav2Vec2",
        f"Wav2Vec2Model (conv features, conv positions), {_AUDIO_SAMPLES} raw samples, SDPA",
        "Wav2Vec2Model",
        _WAV2VEC2_LIKE,
        _hf.audio(501, _AUDIO_SAMPLES),
        ci=True,
        objective=_ctc("Wav2Vec2ForCTC", 501),
    ),
    _hf.model(
        "audio",
        _hf.AudioEncoder,
        "hubert",
        "HuBERT",
        f"HubertModel (wav2vec2-style encoder), {_AUDIO_SAMPLES} raw samples, SDPA",
        "HubertModel",
        _WAV2VEC2_LIKE,
        _hf.audio(502, _AUDIO_SAMPLES),
        objective=_ctc("HubertForCTC", 502),
    ),
    _hf.model(
        "multimodal",
        _hf.ImageText,
        "clip",
        "CLIP",
        f"CLIPModel (text seq {_SEQ} + ViT on 3x32x32): logits and both embeds, SDPA",
        "CLIPModel",
        _CLIP,
        _hf.image_text(600, 32),
        ci=True,
        objective=_contrastive(
            "contrastive cross-entropy (return_loss=True)", "CLIPModel", _CLIP, 600
        ),
    ),
    _hf.model(
        "multimodal",
        _hf.ImageText,
        "siglip",
        "SigLIP",
        f"SiglipModel (attention-pooling head), text {_SEQ} + 3x32x32: logits, embeds, SDPA",
        "SiglipModel",
        _TOWERS,
        _hf.image_text(601, 32),
        objective=_contrastive(
            "pairwise sigmoid contrastive loss (return_loss=True)", "SiglipModel", _TOWERS, 601
        ),
    ),
)
