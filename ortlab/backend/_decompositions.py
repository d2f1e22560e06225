"""ortlab's own decompositions, for ops whose backward has no ONNX translation: written in
ATen ops that torchlib translates, and added to the lowerings' table.

# NOTE: ``aten.convolution_backward`` has neither a translation nor a decomposition in
# torch, so every convolution of a CNN's backward graph ran in PyTorch, cutting it into a
# partition per layer (ResNet-18: 17 partitions, 59 nodes in PyTorch). Its three outputs
# are convolutions themselves (ONNX ``ConvTranspose`` and ``Conv``):
#
#   grad_input  = conv_transpose(grad_output, weight)   same stride, padding, dilation,
#                                                        groups; output_padding restores
#                                                        the input's size
#   grad_weight = conv(input', grad_output')             the batch becomes the channels:
#                 input'  [C_in/g, g*N, H, W]            stride and dilation swap roles;
#                 grad_output' [g*C_out/g, N, Ho, Wo]    groups g keep each group's
#                 -> [C_in/g, C_out, kh', kw'] -> swap   channels apart; the result is cut
#                    the first two dims, cut to kh, kw    to the kernel's size
#   grad_bias   = grad_output summed over all but the channel dim
#
# Transposed convolutions keep the op (the decomposition returns NotImplemented).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten


def convolution_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: Sequence[int] | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> Any:
    """``aten.convolution_backward`` in convolutions (see the module's NOTE)."""
    if transposed:
        return NotImplemented
    spatial = weight.dim() - 2
    stride, padding, dilation = (_expand(v, spatial) for v in (stride, padding, dilation))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        restore = []
        for d in range(spatial):
            kernel = weight.shape[2 + d]
            produced = (
                (grad_output.shape[2 + d] - 1) * stride[d]
                - 2 * padding[d]
                + dilation[d] * (kernel - 1)
                + 1
            )
            restore.append(input.shape[2 + d] - produced)
        grad_input = aten.convolution.default(
            grad_output, weight, None, stride, padding, dilation, True, restore, groups
        )
    if output_mask[1]:
        grad_weight = _grad_weight(
            grad_output, input, weight, stride, padding, dilation, groups
        )
    if output_mask[2]:
        dims = [0, *range(2, grad_output.dim())]
        grad_bias = aten.sum.dim_IntList(grad_output, dims)
    return grad_input, grad_weight, grad_bias


def _grad_weight(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    batch, in_channels = input.shape[0], input.shape[1]
    spatial_in = list(input.shape[2:])
    per_group_in = in_channels // groups
    # input [N, g*cig, *S] -> [cig, g*N, *S]: each group's batch becomes its channels.
    x = aten.view.default(input, [batch, groups, per_group_in, *spatial_in])
    x = aten.permute.default(x, [2, 1, 0, *range(3, 3 + len(spatial_in))])
    x = aten.reshape.default(x, [per_group_in, groups * batch, *spatial_in])
    # grad_output [N, g*cog, *So] -> [g*cog, N, *So]: the weight of that convolution.
    w = aten.permute.default(grad_output, [1, 0, *range(2, grad_output.dim())])
    result = aten.convolution.default(
        x, w, None, dilation, padding, stride, False, [0] * len(spatial_in), groups
    )
    # [cig, g*cog, *K'] -> [g*cog, cig, *K], cut to the kernel's size.
    result = aten.permute.default(result, [1, 0, *range(2, result.dim())])
    for d, size in enumerate(weight.shape[2:]):
        if result.shape[2 + d] != size:
            result = aten.slice.Tensor(result, 2 + d, 0, size)
    return result


def _expand(value: Sequence[int], count: int) -> list[int]:
    values = list(value)
    return values * count if len(values) == 1 else values


def table() -> dict[Any, Any]:
    """ortlab's decompositions, by op."""
    return {aten.convolution_backward.default: convolution_backward}
