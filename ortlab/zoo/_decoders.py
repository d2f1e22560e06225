"""The corpus's decoder language models, called twice: a prompt, then a cached decode step.

The first call runs an unpadded prompt of :data:`~ortlab.zoo._hf.SEQ` tokens without a
cache and returns the logits. The second (:attr:`~ortlab.zoo.ZooModel.followup_inputs`) is
one decode step: the next token, the attention mask of prompt plus token, and the
``DynamicCache`` an eager prefill of the prompt filled; it updates that cache in place and
returns the logits. This module owns the wrapper that makes both calls positional
(:class:`CausalLM`), the two input makers and the ten decoders.

Each trains as language models are trained: the prompt's tokens are also its labels
(``labels=input_ids``), and the model takes the cross-entropy of each position's logits
against the next token (the shift is inside ``transformers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ortlab import errors
from ortlab.zoo import _hf, _model

_SEQ = _hf.SEQ


class CausalLM(nn.Module):
    """``(input_ids, attention_mask[, past_key_values])`` -> the logits.

    Without a cache the model runs the whole sequence with ``use_cache=False``. With one
    (the decode step) it runs ``use_cache=True``: the cache grows by the new tokens, in
    place, and only the logits come back. :meth:`prefill` fills a fresh cache eagerly.
    """

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(
        self, input_ids: torch.Tensor, attention_mask: _hf.Mask, past_key_values: Any = None
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
    def prefill(self, input_ids: torch.Tensor, attention_mask: _hf.Mask) -> Any:
        """Runs the prompt eagerly and returns the ``DynamicCache`` it filled."""
        return self.lm(
            input_ids, attention_mask=attention_mask, use_cache=True
        ).past_key_values


def _prompt(seed: int) -> Callable[[int], tuple]:
    # Decoder prompts are unpadded: a padded prompt would need position ids and a cache
    # that know about the padding, which the plain decode step below does not pass.
    def make(batch: int) -> tuple:
        return (_hf.token_ids(batch, _SEQ, seed), torch.ones(batch, _SEQ, dtype=torch.int64))

    return make


def _decode_step(seed: int) -> Callable[[nn.Module, int], tuple]:
    """The follow-up call of a decoder: one new token after an eager prefill of the prompt."""
    prompt = _prompt(seed)

    def make(model: nn.Module, batch: int) -> tuple:
        # A torch.compile wrapper (OptimizedModule) prefills with the module it wraps.
        lm = getattr(model, "_orig_mod", model)
        if not isinstance(lm, CausalLM):
            raise errors.UnsupportedOptionError(
                f"The decode step needs the zoo's decoder model, got {type(model).__name__}."
            )
        input_ids, attention_mask = prompt(batch)
        cache = lm.prefill(input_ids, attention_mask)
        next_ids = _hf.token_ids(batch, 1, seed + 1)
        mask = torch.ones(batch, _SEQ + 1, dtype=torch.int64)
        return (next_ids, mask, cache)

    return make


def _decoder(
    name: str,
    architecture: str,
    description: str,
    model_class: str,
    config: dict[str, Any],
    seed: int,
    *,
    ci: bool = False,
) -> _model.ZooModel:
    """A decoder; its prompt and its decode step draw their tokens with ``seed``; it
    trains on the prompt as its own labels."""
    objective = _hf.objective(
        "next-token cross-entropy (labels = input_ids, shifted inside)",
        model_class,
        config,
        _hf.labeled(_prompt(seed), ("input_ids", "attention_mask"), _hf.next_tokens),
    )
    return _hf.model(
        "decoder",
        CausalLM,
        name,
        architecture,
        description,
        model_class,
        config,
        _prompt(seed),
        ci=ci,
        followup_inputs=_decode_step(seed),
        objective=objective,
    )


_GPT2 = (
    dict(vocab_size=_hf.VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    | dict(bos_token_id=1, eos_token_id=2, attn_implementation="sdpa")
    | dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
)
_OPT = (
    dict(vocab_size=_hf.VOCAB, hidden_size=32, word_embed_proj_dim=32, ffn_dim=64)
    | dict(num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)
    | dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0)
    | dict(pad_token_id=1, bos_token_id=2, eos_token_id=2, attn_implementation="sdpa")
)
_LLAMA_LIKE = (
    dict(vocab_size=_hf.VOCAB, max_position_embeddings=64, attention_dropout=0.0)
    | dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    | dict(num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
)
"""Two layers, hidden 32, grouped-query attention 4/2, SDPA: Llama and its relatives."""

_PHI = _LLAMA_LIKE | dict(
    num_key_value_heads=4, partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0
)
_PHI3 = _LLAMA_LIKE | dict(
    pad_token_id=0, bos_token_id=1, eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0
)
_GEMMA = _LLAMA_LIKE | dict(num_attention_heads=2, num_key_value_heads=1, head_dim=16)
_QWEN3 = _LLAMA_LIKE | dict(head_dim=8)
_GEMMA3 = _GEMMA | dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"])

MODELS = (
    _decoder(
        "gpt2",
        "GPT-2",
        f"GPT2LMHeadModel, 2 layers, hidden 32, seq {_SEQ} + a cached decode step, SDPA",
        "GPT2LMHeadModel",
        _GPT2,
        300,
        ci=True,
    ),
    _decoder(
        "opt",
        "OPT",
        f"OPTForCausalLM, 2 layers, hidden 32, seq {_SEQ} + a cached decode step, SDPA",
        "OPTForCausalLM",
        _OPT,
        301,
    ),
    _decoder(
        "llama",
        "Llama",
        f"LlamaForCausalLM, 2 layers, hidden 32, GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "LlamaForCausalLM",
        _LLAMA_LIKE,
        302,
    ),
    _decoder(
        "phi",
        "Phi",
        f"PhiForCausalLM (Phi-2: partial rotary, parallel block), seq {_SEQ} + decode, SDPA",
        "PhiForCausalLM",
        _PHI,
        303,
    ),
    _decoder(
        "phi3",
        "Phi-3",
        f"Phi3ForCausalLM (fused qkv and gate-up), seq {_SEQ} + a decode step, SDPA",
        "Phi3ForCausalLM",
        _PHI3,
        304,
    ),
    _decoder(
        "gemma",
        "Gemma",
        f"GemmaForCausalLM (GeGLU, scaled embeddings, MQA), seq {_SEQ} + a decode step, SDPA",
        "GemmaForCausalLM",
        _GEMMA,
        305,
    ),
    _decoder(
        "gemma3",
        "Gemma 3",
        f"Gemma3ForCausalLM (q/k norm, sliding window 8 + global), seq {_SEQ} + decode, SDPA",
        "Gemma3ForCausalLM",
        _GEMMA3,
        306,
    ),
    _decoder(
        "qwen2",
        "Qwen2",
        f"Qwen2ForCausalLM (qkv bias), GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "Qwen2ForCausalLM",
        _LLAMA_LIKE,
        307,
    ),
    _decoder(
        "qwen3",
        "Qwen3",
        f"Qwen3ForCausalLM (q/k RMS norm), GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "Qwen3ForCausalLM",
        _QWEN3,
        308,
    ),
    _decoder(
        "mistral",
        "Mistral",
        f"MistralForCausalLM, GQA 4/2, seq {_SEQ} + a decode step, SDPA",
        "MistralForCausalLM",
        _LLAMA_LIKE,
        309,
    ),
)
