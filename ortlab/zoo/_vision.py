"""The corpus's vision family: CNNs and vision transformers, images in, logits out.

Each model is a ``transformers`` image classifier (SegFormer: a segmenter) in
:class:`~ortlab.zoo._hf.ImageModel`, on RGB images of 32x32 or 64x64 (``"resnet18"``: the
full ResNet-18 at 224x224, for benchmarks). MobileViT and LeViT have no SDPA path and
spell attention out.

Each trains on its own loss: cross-entropy on one class label per image (SegFormer: on a
class per pixel, its logits upsampled to the image inside the model). DeiT trains as
``DeiTForImageClassification``: the distillation model it runs for inference
(``...WithTeacher``) takes no labels in ``transformers`` (inference only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ortlab.zoo import _hf, _model

_CLASSIFY = "cross-entropy on class labels"


def _vision(
    name: str,
    architecture: str,
    description: str,
    model_class: str,
    config: dict[str, Any],
    make_inputs: Callable[[int], tuple],
    *,
    batch_sizes: tuple[int, ...] = (1, 2, 4),
    ci: bool = False,
    train_class: str | None = None,
    note: str = "",
    labels: Callable[[dict[str, Any]], torch.Tensor] | None = None,
    loss: str = _CLASSIFY,
) -> _model.ZooModel:
    """A vision model; it trains as ``train_class`` (default: its own class) on ``labels``
    (default: a class id per image), with cross-entropy."""
    objective = _hf.objective(
        loss,
        train_class or model_class,
        config | _hf.SINGLE_LABEL,
        _hf.labeled(
            make_inputs,
            ("pixel_values",),
            labels or _hf.class_labels(config["num_labels"]),
        ),
        note=note,
    )
    return _hf.model(
        "vision",
        _hf.ImageModel,
        name,
        architecture,
        description,
        model_class,
        config,
        make_inputs,
        batch_sizes=batch_sizes,
        ci=ci,
        objective=objective,
    )


def _resnet(
    layer_type: str, stem: int, widths: list[int], depths: list[int], labels: int = 10
) -> dict[str, Any]:
    """A ResNet configuration: a ``stem``-channel stem, stages of ``layer_type`` blocks."""
    return dict(
        layer_type=layer_type,
        embedding_size=stem,
        hidden_sizes=widths,
        depths=depths,
        num_labels=labels,
    )


_FOUR_STAGES = dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10)
"""Four stages of one block each, 16 to 128 channels, 10 classes."""

_VIT_LIKE = (
    dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_labels=10)
    | dict(image_size=32, patch_size=8, attn_implementation="sdpa")
    | _hf.NO_DROPOUT
)
"""Two layers of width 32 on 3x32x32 in 16 patches, 10 classes, SDPA: the ViT family."""

_VIT = _VIT_LIKE | dict(intermediate_size=64)

_RESNET_TINY = _resnet("basic", 16, [16, 32], [1, 1])
_RESNET18 = _resnet("basic", 64, [64, 128, 256, 512], [2, 2, 2, 2], labels=1000)
_RESNET_BOTTLENECK = _resnet("bottleneck", 16, [32, 64, 128, 256], [1, 1, 1, 1])
_MOBILENET_V2 = dict(
    depth_multiplier=0.25, image_size=64, num_labels=10, classifier_dropout_prob=0.0
)
_EFFICIENTNET = (
    dict(image_size=64, width_coefficient=0.25, depth_coefficient=0.25, num_labels=10)
    # The top conv has round_filters(1280) = 320 channels at width 0.25, and hidden_dim
    # must match it (it sizes the batch norm and the classifier).
    | dict(hidden_dim=320)
    | dict(dropout_rate=0.0, drop_connect_rate=0.0)
)
_REGNET = _FOUR_STAGES | dict(embedding_size=16, groups_width=8, layer_type="y")
_MOBILEVIT = dict(
    image_size=64,
    hidden_sizes=[32, 48, 64],
    neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
    num_attention_heads=2,
    classifier_dropout_prob=0.0,
    num_labels=10,
    **_hf.NO_DROPOUT,
)
_BEIT = _VIT | dict(use_relative_position_bias=True, use_mean_pooling=True) | _hf.NO_DROP_PATH
_DINOV2 = _VIT_LIKE | dict(mlp_ratio=2)
_SWIN = dict(
    image_size=32,
    patch_size=2,
    embed_dim=16,
    depths=[2, 1],
    num_heads=[2, 2],
    window_size=4,
    num_labels=10,
    attn_implementation="sdpa",
    **_hf.NO_DROPOUT,
    **_hf.NO_DROP_PATH,
)
_SEGFORMER = dict(
    hidden_sizes=[8, 16, 32, 64],
    depths=[1, 1, 1, 1],
    num_attention_heads=[1, 2, 2, 4],
    decoder_hidden_size=32,
    classifier_dropout_prob=0.0,
    num_labels=4,
    attn_implementation="sdpa",
    **_hf.NO_DROPOUT,
    **_hf.NO_DROP_PATH,
)
_LEVIT = dict(
    image_size=64,
    hidden_sizes=[32, 48, 64],
    num_attention_heads=[2, 3, 4],
    depths=[1, 1, 1],
    key_dim=[8, 8, 8],
    num_labels=10,
)

MODELS = (
    _vision(
        "resnet_tiny",
        "ResNet",
        "ResNet, basic blocks, 2 stages (16, 32 ch), batch norm, 3x32x32, 10 classes",
        "ResNetForImageClassification",
        _RESNET_TINY,
        _hf.images(100, 32),
        ci=True,
    ),
    _vision(
        "resnet18",
        "ResNet",
        "ResNet-18 layout (basic blocks 2-2-2-2, 64-512 ch), 3x224x224, 1000 classes",
        "ResNetForImageClassification",
        _RESNET18,
        _hf.images(101, 224),
        batch_sizes=(1, 2, 8),
    ),
    _vision(
        "resnet_bottleneck",
        "ResNet",
        "ResNet-50 style bottleneck blocks, 4 stages (32-256 ch), 3x64x64, 10 classes",
        "ResNetForImageClassification",
        _RESNET_BOTTLENECK,
        _hf.images(102, 64),
    ),
    _vision(
        "convnext",
        "ConvNeXt",
        "ConvNeXt, 4 stages (16-128 ch), depthwise 7x7, layer norm, 3x64x64",
        "ConvNextForImageClassification",
        _FOUR_STAGES,
        _hf.images(103, 64),
    ),
    _vision(
        "convnextv2",
        "ConvNeXt V2",
        "ConvNeXt V2 (global response norm), 4 stages (16-128 ch), 3x64x64",
        "ConvNextV2ForImageClassification",
        _FOUR_STAGES,
        _hf.images(104, 64),
    ),
    _vision(
        "mobilenet_v2",
        "MobileNetV2",
        "MobileNetV2 at width 0.25 (inverted residuals, ReLU6, batch norm), 3x64x64",
        "MobileNetV2ForImageClassification",
        _MOBILENET_V2,
        _hf.images(105, 64),
    ),
    _vision(
        "efficientnet",
        "EfficientNet",
        "EfficientNet-B0 layout at width 0.25, depth 0.25 (SE, SiLU, batch norm), 3x64x64",
        "EfficientNetForImageClassification",
        _EFFICIENTNET,
        _hf.images(106, 64),
    ),
    _vision(
        "regnet",
        "RegNet",
        "RegNetY (grouped convs, squeeze-excitation), 4 stages (16-128 ch), 3x64x64",
        "RegNetForImageClassification",
        _REGNET,
        _hf.images(107, 64),
    ),
    _vision(
        "mobilevit",
        "MobileViT",
        "MobileViT (MobileNetV2 blocks + unfold/attention/fold), 3x64x64, eager attention",
        "MobileViTForImageClassification",
        _MOBILEVIT,
        _hf.images(108, 64),
    ),
    _vision(
        "vit_tiny",
        "ViT",
        "ViT, 2 layers, hidden 32, patch 8 on 3x32x32 (16 patches + CLS), SDPA",
        "ViTForImageClassification",
        _VIT,
        _hf.images(109, 32),
        ci=True,
    ),
    _vision(
        "deit",
        "DeiT",
        "DeiT with distillation token, 2 layers, hidden 32, 3x32x32, SDPA",
        "DeiTForImageClassificationWithTeacher",
        _VIT,
        _hf.images(110, 32),
        train_class="DeiTForImageClassification",
        note="the distillation model (...WithTeacher) is inference-only in transformers",
    ),
    _vision(
        "beit",
        "BEiT",
        "BEiT (relative position bias, layer scale), 2 layers, hidden 32, 3x32x32, SDPA",
        "BeitForImageClassification",
        _BEIT,
        _hf.images(111, 32),
    ),
    _vision(
        "dinov2",
        "DINOv2",
        "DINOv2 (layer scale, CLS + mean-patch head), 2 layers, 3x32x32, SDPA",
        "Dinov2ForImageClassification",
        _DINOV2,
        _hf.images(112, 32),
    ),
    _vision(
        "swin",
        "Swin Transformer",
        "Swin (shifted 4x4 windows, patch merging), 2 stages, dim 16, 3x32x32, SDPA",
        "SwinForImageClassification",
        _SWIN,
        _hf.images(113, 32),
    ),
    _vision(
        "segformer",
        "SegFormer",
        "SegFormer (reduced-key attention, mix-FFN, MLP decoder), 4 stages, 3x64x64, SDPA",
        "SegformerForSemanticSegmentation",
        _SEGFORMER,
        _hf.images(114, 64),
        labels=_hf.pixel_labels(_SEGFORMER["num_labels"], 64, block=16),
        loss="cross-entropy on a class per pixel",
    ),
    _vision(
        "poolformer",
        "PoolFormer",
        "PoolFormer (average pooling as token mixer, group norm), 4 stages, 3x64x64",
        "PoolFormerForImageClassification",
        _FOUR_STAGES,
        _hf.images(115, 64),
    ),
    _vision(
        "levit",
        "LeViT",
        "LeViT (conv stem, attention biases, subsampling attention), 3x64x64, eager attn",
        "LevitForImageClassification",
        _LEVIT,
        _hf.images(116, 64),
    ),
)
