"""The teaching tier of the zoo: seven small models written for the lab.

Each is a :class:`~ortlab.zoo.ZooModel` with a deterministic builder, deterministic example
inputs for any batch size, the batch-size sweep the notebooks and benchmarks use, and the
tolerances an ONNX Runtime result is expected to meet against eager PyTorch. Two models are
deliberately awkward for the backend: ``"custom_op"`` holds an op with no ONNX translation
and ``"data_dependent"`` has a data-dependent output shape, so parts of both stay in eager.

Importing this module is cheap: ``transformers`` is imported only when ``"tiny_llama"``
is built, and the custom op is registered only when ``"custom_op"`` is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ortlab import errors
from ortlab.zoo import _hf, _model

# --- two linear layers: mlp, custom_op, data_dependent -----------------------------------


class _TwoLinear(nn.Module):
    """Two linear layers, ``fc1`` and ``fc2``; subclasses say what runs around them."""

    def __init__(self, features: int, hidden: int, outputs: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, outputs)


# --- mlp ---------------------------------------------------------------------------------


class _TinyMLP(_TwoLinear):
    """The classic 2-4-2 MLP with sigmoid activations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc2(torch.sigmoid(self.fc1(x))))


def _build_mlp() -> nn.Module:
    return _model.seeded_build(lambda: _TinyMLP(2, 4, 2))


def _mlp_inputs(batch: int) -> tuple:
    return (torch.randn(batch, 2, generator=_model.generator(1)),)


# --- gelu_mlp ----------------------------------------------------------------------------


def _build_gelu_mlp() -> nn.Module:
    return _model.seeded_build(
        lambda: nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
    )


def _gelu_mlp_inputs(batch: int) -> tuple:
    return (torch.randn(batch, 512, generator=_model.generator(2)),)


# --- cnn ---------------------------------------------------------------------------------


def _build_cnn() -> nn.Module:
    return _model.seeded_build(
        lambda: nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
    )


def _cnn_inputs(batch: int) -> tuple:
    return (torch.randn(batch, 3, 32, 32, generator=_model.generator(3)),)


# --- transformer_layer -------------------------------------------------------------------


class _EncoderLayerNoFastPath(nn.Module):
    """Runs an ``nn.TransformerEncoderLayer`` on its composite ("slow") path only.

    ``TransformerEncoderLayer.forward`` takes a fused fast path
    (``torch._transformer_encoder_layer_fwd``) whenever the layer is in eval mode and grad
    is off, and ``MultiheadAttention.forward`` likewise takes
    ``torch._native_multi_head_attention``. Dynamo evaluates those checks while tracing, so
    a model compiled under ``torch.no_grad()`` becomes one fused op that has no ONNX
    translation. The switch that turns both off, ``torch.backends.mha``, is process-wide,
    so instead this forward spells out the layer's slow path with its own submodules and
    ``F.multi_head_attention_forward``, which has no fast path. The weights stay in a real
    ``TransformerEncoderLayer`` (attribute ``layer``), so its state_dict keys are the
    usual ones.
    """

    def __init__(self, layer: nn.TransformerEncoderLayer) -> None:
        super().__init__()
        if not layer.self_attn.batch_first or not layer.self_attn._qkv_same_embed_dim:
            raise errors.UnsupportedOptionError(
                "_EncoderLayerNoFastPath needs a batch_first layer whose query, key and value "
                "share one embedding size."
            )
        self.layer = layer

    def _self_attention(self, x: torch.Tensor) -> torch.Tensor:
        attn = self.layer.self_attn
        # multi_head_attention_forward wants (seq, batch, embed); the layer is batch_first.
        q = x.transpose(0, 1)
        out, _ = F.multi_head_attention_forward(
            q,
            q,
            q,
            attn.embed_dim,
            attn.num_heads,
            attn.in_proj_weight,
            attn.in_proj_bias,
            attn.bias_k,
            attn.bias_v,
            attn.add_zero_attn,
            attn.dropout,
            attn.out_proj.weight,
            attn.out_proj.bias,
            training=attn.training,
            need_weights=False,
        )
        return self.layer.dropout1(out.transpose(0, 1))

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        layer = self.layer
        return layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        layer = self.layer
        x = src
        if layer.norm_first:
            x = x + self._self_attention(layer.norm1(x))
            return x + self._feed_forward(layer.norm2(x))
        x = layer.norm1(x + self._self_attention(x))
        return layer.norm2(x + self._feed_forward(x))


def _build_transformer_layer() -> nn.Module:
    return _model.seeded_build(
        lambda: _EncoderLayerNoFastPath(
            nn.TransformerEncoderLayer(
                d_model=256, nhead=4, dim_feedforward=512, dropout=0.0, batch_first=True
            )
        )
    )


def _transformer_layer_inputs(batch: int) -> tuple:
    return (torch.randn(batch, 128, 256, generator=_model.generator(4)),)


# --- tiny_llama --------------------------------------------------------------------------

_LLAMA_SEQ = 8

_TINY_LLAMA = (
    dict(vocab_size=1024, hidden_size=16, intermediate_size=16, max_position_embeddings=256)
    | dict(num_hidden_layers=1, num_attention_heads=2, attention_dropout=0.0)
    # Eager attention is plain matmul/softmax; the SDPA path adds masking heuristics.
    | dict(attn_implementation="eager")
)


class _TinyLlama(nn.Module):
    """One-layer LlamaModel: ``(input_ids, attention_mask, position_ids)`` -> hidden states."""

    def __init__(self) -> None:
        super().__init__()
        transformers = _hf.transformers()
        self.llama = transformers.LlamaModel(transformers.LlamaConfig(**_TINY_LLAMA))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: _hf.Mask, position_ids: torch.Tensor
    ) -> torch.Tensor:
        # use_cache=False: otherwise LlamaModel builds a DynamicCache (a Python object the
        # compiled graph would have to return) although only the hidden states are wanted.
        return self.llama(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            return_dict=False,
        )[0]


def _build_tiny_llama() -> nn.Module:
    return _model.seeded_build(_TinyLlama)


def _tiny_llama_inputs(batch: int) -> tuple:
    seq = _LLAMA_SEQ
    input_ids = torch.randint(
        0, 7, (batch, seq), generator=_model.generator(5), dtype=torch.int64
    )
    position_ids = torch.arange(seq).unsqueeze(0).view(-1, seq)
    return (input_ids, None, position_ids)


# --- custom_op ---------------------------------------------------------------------------

_SOFT_CLIP_LIMIT = 2.0


def _soft_clip_op() -> Any:
    """Returns ``torch.ops.ortlab_zoo.soft_clip``, registering it on first use.

    Registration is lazy (the first ``"custom_op"`` build) and checks the op registry first,
    so importing or reloading this module never registers the op twice.
    """
    if not hasattr(torch.ops.ortlab_zoo, "soft_clip"):
        _register_soft_clip()
    return torch.ops.ortlab_zoo.soft_clip


def _register_soft_clip() -> None:
    @torch.library.custom_op("ortlab_zoo::soft_clip", mutates_args=())
    def soft_clip(x: torch.Tensor, limit: float) -> torch.Tensor:
        """Smoothly clips ``x`` to ``(-limit, limit)``: ``limit * tanh(x / limit)``."""
        return limit * torch.tanh(x / limit)

    @soft_clip.register_fake
    def _(x: torch.Tensor, limit: float) -> torch.Tensor:
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output) -> None:
        x, limit = inputs
        ctx.save_for_backward(x)
        ctx.limit = limit

    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        t = torch.tanh(x / ctx.limit)
        return grad * (1 - t * t), None

    soft_clip.register_autograd(backward, setup_context=setup_context)


class _SoftClipMLP(_TwoLinear):
    """MLP with a custom op in the middle, so that eager fallback splits it in two."""

    def __init__(self, features: int, hidden: int, outputs: int) -> None:
        super().__init__(features, hidden, outputs)
        _soft_clip_op()  # registers the op before the first forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.ops.ortlab_zoo.soft_clip(torch.relu(self.fc1(x)), _SOFT_CLIP_LIMIT)
        return torch.sigmoid(self.fc2(h))


def _build_custom_op() -> nn.Module:
    return _model.seeded_build(lambda: _SoftClipMLP(8, 16, 4))


def _custom_op_inputs(batch: int) -> tuple:
    return (torch.randn(batch, 8, generator=_model.generator(6)),)


# --- data_dependent ----------------------------------------------------------------------


class _MaskedSumMLP(_TwoLinear):
    """Boolean-mask indexing (``nonzero``) in the middle of an otherwise static model."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        # The number of picked elements depends on the values: a data-dependent shape.
        picked = h[h > 0.5]
        return self.fc2(h) + (picked * 2).sum() + h.mean()


def _build_data_dependent() -> nn.Module:
    return _model.seeded_build(lambda: _MaskedSumMLP(8, 16, 4))


def _data_dependent_inputs(batch: int) -> tuple:
    return (torch.randn(batch, 8, generator=_model.generator(7)),)


# --- registry ----------------------------------------------------------------------------


def _teaching(
    name: str,
    description: str,
    build: Callable[[], nn.Module],
    make_inputs: Callable[[int], tuple],
    batch_sizes: tuple[int, ...],
    *,
    default_batch: int,
    tolerance: float = 1e-4,
    trainable: bool = True,
    **options: Any,
) -> _model.ZooModel:
    """A teaching model, held to ``tolerance`` (absolute and relative) against eager."""
    return _model.ZooModel(
        name,
        description,
        build,
        make_inputs,
        batch_sizes,
        default_batch=default_batch,
        trainable=trainable,
        atol=tolerance,
        rtol=tolerance,
        **options,
    )


MODELS: tuple[_model.ZooModel, ...] = (
    _teaching(
        "mlp",
        "2-4-2 MLP with sigmoids (the smallest possible graph)",
        _build_mlp,
        _mlp_inputs,
        (1, 2, 4, 6, 8),
        default_batch=4,
        tolerance=1e-5,
    ),
    _teaching(
        "gelu_mlp",
        "512-2048-512 MLP with GELU (matmul-bound)",
        _build_gelu_mlp,
        _gelu_mlp_inputs,
        (1, 8, 32, 64),
        default_batch=64,
    ),
    _teaching(
        "cnn",
        "Two-conv CNN classifier for 3x32x32 images",
        _build_cnn,
        _cnn_inputs,
        (1, 2, 8),
        default_batch=8,
    ),
    _teaching(
        "transformer_layer",
        "TransformerEncoderLayer d=256, 4 heads, seq 128 (fused fast path off)",
        _build_transformer_layer,
        _transformer_layer_inputs,
        (1, 2, 8),
        default_batch=8,
    ),
    _teaching(
        "tiny_llama",
        "One-layer transformers LlamaModel, hidden 16, seq 8 (needs transformers)",
        _build_tiny_llama,
        _tiny_llama_inputs,
        (2, 4, 9),
        default_batch=2,
    ),
    _teaching(
        "custom_op",
        "MLP around a custom op with no ONNX translation (stays in eager)",
        _build_custom_op,
        _custom_op_inputs,
        (1, 4, 16),
        default_batch=4,
        tolerance=1e-5,
        expects_fallback=True,
    ),
    _teaching(
        "data_dependent",
        "MLP with boolean-mask indexing (data-dependent shape, stays in eager)",
        _build_data_dependent,
        _data_dependent_inputs,
        (1, 4, 16),
        default_batch=4,
        trainable=False,
        dynamo_config={"capture_dynamic_output_shape_ops": True},
        expects_fallback=True,
    ),
)
