"""The corpus's text encoders and encoder-decoders: padded token sequences in.

Text encoders (family ``"text"``) take ``(input_ids, attention_mask)`` and return the last
hidden state (:class:`~ortlab.zoo._hf.TextEncoder`); encoder-decoders take the source, its
mask and 8 decoder tokens and return the decoder's first output
(:class:`~ortlab.zoo._hf.Seq2Seq`). Sequences are :data:`~ortlab.zoo._hf.SEQ` tokens, some
rows padded. DeBERTa-v2 has no SDPA path and spells attention out.

Each trains on its own loss. A text encoder has no training head of its own: it trains as
its ``...ForSequenceClassification`` (the same encoder, a pooler or classification head on
top) with cross-entropy on one of :data:`CLASSES` labels per sequence. An encoder-decoder
trains as its ``...ForConditionalGeneration`` (Marian: ``MarianMTModel``, which it already
is) on 8 target tokens as ``labels``: the model shifts them right into its decoder inputs
and takes the cross-entropy of its LM head's logits against them.
"""

from __future__ import annotations

from typing import Any

from ortlab.zoo import _hf, _model

_SEQ = _hf.SEQ

CLASSES = 3
"""Labels of the text encoders' sequence classification."""

_CLASSIFY = f"cross-entropy on sequence labels ({CLASSES} classes)"
_GENERATE = "cross-entropy on decoder targets (labels, shifted inside)"


def _text(
    name: str,
    architecture: str,
    description: str,
    model_class: str,
    config: dict[str, Any],
    seed: int,
    train_class: str,
    *,
    ci: bool = False,
    train_config: dict[str, Any] | None = None,
) -> _model.ZooModel:
    """A text encoder; it trains as ``train_class`` (a sequence classifier) with
    ``train_config`` over its configuration."""
    make_inputs = _hf.text(seed)
    objective = _hf.objective(
        _CLASSIFY,
        train_class,
        config | dict(num_labels=CLASSES) | _hf.SINGLE_LABEL | (train_config or {}),
        _hf.labeled(make_inputs, ("input_ids", "attention_mask"), _hf.class_labels(CLASSES)),
        note="the encoder with a sequence-classification head (the encoder has no loss)",
    )
    return _hf.model(
        "text",
        _hf.TextEncoder,
        name,
        architecture,
        description,
        model_class,
        config,
        make_inputs,
        ci=ci,
        objective=objective,
    )


def _seq2seq(
    name: str,
    architecture: str,
    description: str,
    model_class: str,
    config: dict[str, Any],
    seed: int,
    train_class: str,
    *,
    ci: bool = False,
) -> _model.ZooModel:
    """An encoder-decoder; it trains as ``train_class`` (with an LM head) on 8 target
    tokens."""
    make_inputs = _hf.seq2seq(seed)
    objective = _hf.objective(
        _GENERATE,
        train_class,
        config,
        # The source and its mask; the decoder inputs come from the labels, as in training.
        _hf.labeled(
            lambda batch: make_inputs(batch)[:2],
            ("input_ids", "attention_mask"),
            _hf.target_tokens(_SEQ // 2),
        ),
        note=""
        if train_class == model_class
        else "the model with its LM head (the bare model has no loss)",
    )
    return _hf.model(
        "encoder-decoder",
        _hf.Seq2Seq,
        name,
        architecture,
        description,
        model_class,
        config,
        make_inputs,
        ci=ci,
        objective=objective,
    )


_BERT_LIKE = (
    dict(vocab_size=_hf.VOCAB, max_position_embeddings=64)
    | dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    | _hf.NO_DROPOUT
)
"""Two layers, hidden 32, 2 heads, no dropout, in BERT's spelling."""

_BERT = _BERT_LIKE | dict(attn_implementation="sdpa")
# RoBERTa's positions start after the padding id: two more position embeddings.
_ROBERTA = _BERT | dict(max_position_embeddings=64 + 2, pad_token_id=1)
_ALBERT = _BERT | dict(embedding_size=16, classifier_dropout_prob=0.0)
_DEBERTA_V2 = _BERT_LIKE | dict(
    relative_attention=True,
    position_buckets=8,
    max_relative_positions=32,
    pos_att_type=["p2c", "c2p"],
)
_ELECTRA = _BERT | dict(embedding_size=16)
_DISTILBERT = (
    dict(vocab_size=_hf.VOCAB, dim=32, hidden_dim=64, max_position_embeddings=64)
    | dict(n_layers=2, n_heads=2, dropout=0.0, attention_dropout=0.0)
    | dict(attn_implementation="sdpa")
)

_T5 = (
    dict(vocab_size=_hf.VOCAB, d_model=32, d_kv=16, d_ff=64, dropout_rate=0.0)
    | dict(num_layers=1, num_decoder_layers=1, num_heads=2, attn_implementation="sdpa")
    | dict(relative_attention_num_buckets=8, relative_attention_max_distance=32)
    | dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
)
_BART_LIKE = (
    _hf.ENCODER_DECODER
    | dict(max_position_embeddings=64)
    | dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
)
"""BART's configuration; Marian and Pegasus pad with, and start decoding at, id 0."""

_BART_PAD_ZERO = _BART_LIKE | dict(pad_token_id=0, decoder_start_token_id=0)

MODELS = (
    _text(
        "bert",
        "BERT",
        f"BertModel, 2 layers, hidden 32, seq {_SEQ} with padding, SDPA",
        "BertModel",
        _BERT,
        200,
        "BertForSequenceClassification",
        ci=True,
    ),
    _text(
        "roberta",
        "RoBERTa",
        f"RobertaModel, 2 layers, hidden 32, seq {_SEQ} with padding, SDPA",
        "RobertaModel",
        _ROBERTA,
        201,
        "RobertaForSequenceClassification",
    ),
    _text(
        "albert",
        "ALBERT",
        f"AlbertModel (factorised embeddings, shared layer), seq {_SEQ} with padding, SDPA",
        "AlbertModel",
        _ALBERT,
        202,
        "AlbertForSequenceClassification",
    ),
    _text(
        "deberta_v2",
        "DeBERTa-v2",
        f"DebertaV2Model (disentangled relative attention, eager), seq {_SEQ} with padding",
        "DebertaV2Model",
        _DEBERTA_V2,
        203,
        "DebertaV2ForSequenceClassification",
    ),
    _text(
        "electra",
        "ELECTRA",
        f"ElectraModel (embedding 16 -> hidden 32), seq {_SEQ} with padding, SDPA",
        "ElectraModel",
        _ELECTRA,
        204,
        "ElectraForSequenceClassification",
    ),
    _text(
        "distilbert",
        "DistilBERT",
        f"DistilBertModel, 2 layers, dim 32, seq {_SEQ} with padding, SDPA",
        "DistilBertModel",
        _DISTILBERT,
        205,
        "DistilBertForSequenceClassification",
        train_config=dict(seq_classif_dropout=0.0),
    ),
    _seq2seq(
        "t5",
        "T5",
        f"T5Model (relative position buckets, RMS norm), 1+1 layers, seq {_SEQ}/8, SDPA",
        "T5Model",
        _T5,
        400,
        "T5ForConditionalGeneration",
        ci=True,
    ),
    _seq2seq(
        "bart",
        "BART",
        f"BartModel, 1+1 layers, d 32, seq {_SEQ} with padding / 8 decoder tokens, SDPA",
        "BartModel",
        _BART_LIKE,
        401,
        "BartForConditionalGeneration",
    ),
    _seq2seq(
        "marian",
        "Marian",
        f"MarianMTModel (sinusoidal positions, LM head), 1+1 layers, seq {_SEQ}/8, SDPA",
        "MarianMTModel",
        _BART_PAD_ZERO,
        402,
        "MarianMTModel",
    ),
    _seq2seq(
        "pegasus",
        "Pegasus",
        f"PegasusModel (pre-norm, sinusoidal positions), 1+1 layers, seq {_SEQ}/8, SDPA",
        "PegasusModel",
        _BART_PAD_ZERO,
        403,
        "PegasusForConditionalGeneration",
    ),
)
