"""ortlab's own decompositions, for ops of backward graphs that have no ONNX translation,
and for ops whose translation gives wrong numbers: written in ATen ops that torchlib
translates right, and added to the lowerings' table.

# NOTE: ``aten.convolution_backward`` has neither a translation nor a decomposition in
# torch, so every convolution of a CNN's backward graph ran in PyTorch, cutting it into a
# partition per layer (ResNet-18: 17 partitions, 59 nodes in PyTorch). Its three outputs
# are written as a transposed convolution, a matrix product and a sum:
#
#   grad_input  = conv_transpose(grad_output, weight)   same stride, padding, dilation,
#                                                        groups; output_padding restores
#                                                        the input's size (symbolic: the
#                                                        whole transposed convolution,
#                                                        padded and cut to the input)
#   grad_weight = grad_output' @ patches'^T         im2col: each kernel offset's strided
#                 grad_output' [g, C_out/g, N*Ho*Wo]  slice of the padded input, stacked
#                 patches'     [g, C_in/g*kh*kw, N*Ho*Wo]  -> one (batched) MatMul
#                 where the kernel has at most 64 offsets and the patches stay under 2**26
#                 elements; otherwise a convolution in which the batch becomes the
#                 channels (input' [C_in/g, g*N, H, W], grad_output' as its weight,
#                 stride and dilation swap roles, the result cut to kh, kw).
#                 Measured on ResNet-18's training step (b8, 112², 2 threads): the
#                 convolution form spent 266 ms a step in ONNX Runtime's Conv and made
#                 the step 1.72-1.97x eager; the MatMul form made it 0.98-1.41x eager
#                 (five runs), still one partition (PyTorch's own kernel, 17 partitions:
#                 1.13-1.28x).
#   grad_bias   = grad_output summed over all but the channel dim
#
# A transposed convolution's backward is the same three with the roles turned round: it
# is the adjoint of the convolution with its weight, so its input gradient is that
# convolution of grad_output, and its weight gradient that convolution's weight gradient
# with grad_output as the input (U-Net decoders, GAN generators and VAEs ran their whole
# backward graph in PyTorch before).
#
# NOTE: ``aten.avg_pool2d_backward`` has no translation or decomposition either
# (EfficientNet's and PoolFormer's backward graphs were cut at every average pool). The
# gradient spreads each output's gradient, divided by its window's divisor, evenly over
# the window: a transposed convolution of ``grad_output / divisor`` with a kernel of
# ones, one per channel (groups = channels), cut to the input's extent. The divisor is
# ATen's, per output position, and separable: along each dim a window covers
# ``[o*s - p, min(o*s - p + k, size + p))``, clamped to ``[0, size)`` unless
# ``count_include_pad``; ``divisor_override`` replaces it. Symbolic sizes keep the op.
#
# Adaptive pooling's backward had neither a translation nor a decomposition either
# (PSPNet's pyramid pooling, ``interpolate(mode="area")``; to size 1 it is a mean, which
# runs). Average pooling is separable and linear: along each dim, output ``i`` averages
# ``[floor(i*n/m), ceil((i+1)*n/m))``, so ``out = P_h @ x @ P_w^T`` with ``P`` the
# ``[m, n]`` matrix holding ``1 / window length`` inside each window, and the gradient is
# ``P_h^T @ grad_output @ P_w``: two MatMuls with matrices computed in the graph. Max
# pooling's gradient is a scatter-add of ``grad_output`` at the saved indices (flat over
# the last two dims; windows can overlap), in float32 for narrower floats.
#
# ``aten._weight_norm_interface_backward`` (wav2vec2's and HuBERT's positional
# convolution) is written out as ATen computes it, with ``n`` the saved norms:
# ``grad_g = sum(grad_w * v) / n`` over every dim but ``dim`` (all of them for -1),
# ``grad_v = (g / n) * (grad_w - v * grad_g / n)``.
#
# Wrong translations, each found by running a training workflow against eager:
# - ``aten.mv`` on a transposed matrix (``W.t() @ v``: spectral norm's power iteration)
#   is translated right, as Transpose + MatMul, but ONNX Runtime's MatmulTransposeFusion
#   turns that into a FusedMatMul(transA=1) with a 1-D second input, which it computes
#   as ``W.reshape(n, m) @ v`` (off by 4 on outputs of 6; spectral_norm's weight
#   gradient by 18.7). As ``mm`` of the vector as a column, the fused op is right.
# - ``aten.hardtanh_backward`` (ReLU6's too) passes the gradient at the clip bounds,
#   where ATen passes it strictly inside them only.
# - ``aten.signbit`` is ``x < 0``: false for -0.0. ``aten.copysign`` decomposes to
#   ``prims.signbit``, whose fake tensor is float32 while the real one is bool (ONNX
#   Runtime read the bool buffer as float32). Both are written with ``1 / x < 0`` for
#   zeros; a NaN's sign bit is not seen (PyTorch reads it).
# - A one-sided ``clamp`` (``clamp_min``, ``clamp_max``) is a Clip whose missing bound
#   ONNX Runtime takes as the largest finite float: -inf came out as -3.4e38. As
#   ``maximum``/``minimum`` with the bound, infinities and NaN pass as in PyTorch.
#
# ``aten.as_strided_scatter`` (functionalization's form of writing through a strided
# view; Swin's backward) became ``prims.as_strided_scatter``, which has no translation.
# It writes ``src`` at storage positions ``offset + sum(i_k * stride_k)`` of a copy of
# ``input``. Where ``input`` is contiguous at storage offset 0 its storage *is* its
# values in order, so that is an ``index_put`` of ``src``'s values at those positions
# of the flattened input. Anything else (a strided or offset input, positions that
# overlap, symbolic sizes) keeps the op.
#
# ``aten.diagonal_scatter`` (the backward of ``diagonal`` and ``trace``, through
# ``diagonal_backward``; functionalization's form of a write into a diagonal) has no
# translation, and torch's reference writes ``src`` into a diagonal view of a clone with
# ``prims.copy_to``: a mutation, traced after functionalization, which AOTAutograd
# rejects ("expected to have an entirely functional graph"), so the whole training graph
# ran in PyTorch. It is a ``where`` over the diagonal's positions (``j - i == offset``
# along ``dim1``, ``dim2``) of ``src``'s values gathered there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ortlab.backend import _dtypes, _foreach, _torch_private

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """A convolution's stride, padding and dilation (one per spatial dim) and groups."""

    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int


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
    spatial = weight.dim() - 2
    geometry = _Geometry(
        _expand(stride, spatial), _expand(padding, spatial), _expand(dilation, spatial), groups
    )
    if transposed:
        return _transposed_backward(
            grad_output, input, weight, geometry, output_padding, output_mask
        )
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        restore = []
        for d in range(spatial):
            kernel = weight.shape[2 + d]
            produced = (
                (grad_output.shape[2 + d] - 1) * geometry.stride[d]
                - 2 * geometry.padding[d]
                + geometry.dilation[d] * (kernel - 1)
                + 1
            )
            restore.append(input.shape[2 + d] - produced)
        if all(isinstance(r, int) for r in restore):
            same = (geometry.stride, geometry.padding, geometry.dilation)
            grad_input = aten.convolution.default(
                grad_output, weight, None, *same, True, restore, groups
            )
        else:
            grad_input = _grad_input_symbolic(grad_output, input, weight, geometry, restore)
    if output_mask[1]:
        fits = _im2col_fits(grad_output, input, weight)
        form = _grad_weight_im2col if fits else _grad_weight_conv
        grad_weight = form(grad_output, input, weight, geometry)
    if output_mask[2]:
        dims = [0, *range(2, grad_output.dim())]
        grad_bias = aten.sum.dim_IntList(grad_output, dims)
    return grad_input, grad_weight, grad_bias


def _transposed_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    geometry: _Geometry,
    output_padding: Sequence[int],
    output_mask: Sequence[bool],
) -> Any:
    """A transposed convolution is the adjoint of the convolution with the same weight
    and geometry: its input gradient is that convolution of ``grad_output``, and its
    weight gradient is that convolution's weight gradient with ``grad_output`` as the
    input and ``input`` as the output's gradient."""
    spatial = len(geometry.stride)
    if any(op >= s for op, s in zip(_expand(output_padding, spatial), geometry.stride)):
        return NotImplemented  # the convolution would not give the input's size back
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        same = (geometry.stride, geometry.padding, geometry.dilation)
        grad_input = aten.convolution.default(
            grad_output, weight, None, *same, False, [0] * spatial, geometry.groups
        )
    if output_mask[1]:
        fits = _im2col_fits(input, grad_output, weight)
        form = _grad_weight_im2col if fits else _grad_weight_conv
        grad_weight = form(input, grad_output, weight, geometry)
    if output_mask[2]:
        grad_bias = aten.sum.dim_IntList(grad_output, [0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias


def _grad_input_symbolic(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    geometry: _Geometry,
    restore: Sequence[Any],
) -> torch.Tensor:
    """The input gradient when ``output_padding`` is symbolic (a strided convolution under
    dynamic shapes): ONNX's ``ConvTranspose`` takes it as an attribute, so the transposed
    convolution is computed whole (no padding, no output padding), the input's rows that
    no window reached are added as zeros at the end, and the padding is cut off::

        full [.. (Ho-1)*s + d*(k-1) + 1 ..] -> pad end by restore -> [p : p + H]
    """
    spatial = len(restore)
    zeros = [0] * spatial
    full = aten.convolution.default(
        grad_output,
        weight,
        None,
        geometry.stride,
        zeros,
        geometry.dilation,
        True,
        zeros,
        geometry.groups,
    )
    full = aten.constant_pad_nd.default(full, [p for r in reversed(restore) for p in (0, r)])
    for d in range(spatial):
        start = geometry.padding[d]
        full = aten.slice.Tensor(full, 2 + d, start, start + input.shape[2 + d])
    return full


# The im2col form's limits: kernel offsets (one slice each) and elements of the patches.
IM2COL_MAX_OFFSETS = 64
IM2COL_MAX_ELEMENTS = 2**26


def _im2col_fits(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor) -> bool:
    shapes = (grad_output.shape, input.shape, weight.shape)
    if not all(isinstance(size, int) for shape in shapes for size in shape):
        return False  # symbolic sizes: no guard is added to choose
    offsets = math.prod(weight.shape[2:])
    elements = input.shape[1] * offsets * math.prod(grad_output.shape) // grad_output.shape[1]
    return offsets <= IM2COL_MAX_OFFSETS and elements <= IM2COL_MAX_ELEMENTS


def _grad_weight_im2col(
    grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, geometry: _Geometry
) -> torch.Tensor:
    batch, in_channels = input.shape[0], input.shape[1]
    out_channels, kernel = weight.shape[0], list(weight.shape[2:])
    spatial_out = list(grad_output.shape[2:])
    positions = batch * math.prod(spatial_out)
    # input [N, C, *S] -> [C, N, *S], padded: each offset's slice is then [C, N, *So].
    x = aten.permute.default(input, [1, 0, *range(2, input.dim())])
    groups = geometry.groups
    if any(geometry.padding):
        pads = [p for p in reversed(geometry.padding) for _ in (0, 1)]
        x = aten.constant_pad_nd.default(x, pads)
    slices = _offset_slices(x, 0, kernel, spatial_out, geometry)
    patches = aten.stack.default(slices, 1)  # [C, K, N, *So]
    g = aten.permute.default(grad_output, [1, 0, *range(2, grad_output.dim())])
    if groups == 1:  # a plain MatMul (a select of the group would copy the patches)
        patches = aten.reshape.default(patches, [in_channels * len(slices), positions])
        g = aten.reshape.default(g, [out_channels, positions])
        product = aten.mm.default(g, aten.permute.default(patches, [1, 0]))
    else:
        patches = aten.reshape.default(
            patches, [groups, in_channels // groups * len(slices), positions]
        )
        g = aten.reshape.default(g, [groups, out_channels // groups, positions])
        product = aten.bmm.default(g, aten.permute.default(patches, [0, 2, 1]))
    return aten.reshape.default(product, [out_channels, in_channels // groups, *kernel])


def _offset_slices(
    x: torch.Tensor,
    d: int,
    kernel: list[int],
    spatial_out: list[int],
    geometry: _Geometry,
) -> list[torch.Tensor]:
    """The strided slice of ``x`` [C, N, *S] under each kernel offset, in the kernel's
    order; the slices of dim ``d`` are shared by every offset below it (a 3x3 kernel:
    3 + 9 slices, not 18). A slice that keeps the whole dim is skipped."""
    if d == len(kernel):
        return [x]
    found = []
    stride, dilation = geometry.stride[d], geometry.dilation[d]
    for k in range(kernel[d]):
        start = k * dilation
        end = start + (spatial_out[d] - 1) * stride + 1
        piece = x
        if (start, end, stride) != (0, x.shape[2 + d], 1):
            piece = aten.slice.Tensor(x, 2 + d, start, end, stride)
        found.extend(_offset_slices(piece, d + 1, kernel, spatial_out, geometry))
    return found


def _grad_weight_conv(
    grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, geometry: _Geometry
) -> torch.Tensor:
    batch, in_channels = input.shape[0], input.shape[1]
    groups, spatial_in = geometry.groups, list(input.shape[2:])
    per_group_in = in_channels // groups
    # input [N, g*cig, *S] -> [cig, g*N, *S]: each group's batch becomes its channels.
    x = aten.view.default(input, [batch, groups, per_group_in, *spatial_in])
    x = aten.permute.default(x, [2, 1, 0, *range(3, 3 + len(spatial_in))])
    x = aten.reshape.default(x, [per_group_in, groups * batch, *spatial_in])
    # grad_output [N, g*cog, *So] -> [g*cog, N, *So]: the weight of that convolution.
    w = aten.permute.default(grad_output, [1, 0, *range(2, grad_output.dim())])
    swapped = (geometry.dilation, geometry.padding, geometry.stride)  # stride <-> dilation
    result = aten.convolution.default(
        x, w, None, *swapped, False, [0] * len(spatial_in), groups
    )
    # [cig, g*cog, *K'] -> [g*cog, cig, *K], cut to the kernel's size.
    result = aten.permute.default(result, [1, 0, *range(2, result.dim())])
    for d, size in enumerate(weight.shape[2:]):
        if result.shape[2 + d] != size:
            result = aten.slice.Tensor(result, 2 + d, 0, size)
    return result


def avg_pool2d_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> Any:
    """``aten.avg_pool2d_backward`` as a transposed convolution with a kernel of ones
    (see the module's NOTE)."""
    del ceil_mode  # the output's size says it all
    shapes = (grad_output.shape, input.shape)
    if not all(isinstance(size, int) for shape in shapes for size in shape):
        return NotImplemented
    unbatched = input.dim() == 3
    if unbatched:
        grad_output, input = grad_output.unsqueeze(0), input.unsqueeze(0)
    channels, extent = input.shape[1], list(input.shape[2:])
    kernel = _expand(kernel_size, 2)
    steps = _expand(stride, 2) if len(stride) else kernel
    pads = _expand(padding, 2)
    outputs = list(grad_output.shape[2:])
    if divisor_override:
        scaled = grad_output / divisor_override
    else:
        counts = [
            _window_counts(
                outputs[d],
                extent[d],
                kernel[d],
                steps[d],
                pads[d],
                count_include_pad,
                grad_output.device,
            )
            for d in (0, 1)
        ]
        divisor = counts[0].unsqueeze(1) * counts[1]  # whole numbers: exact in any float
        scaled = grad_output / aten._to_copy.default(divisor, dtype=grad_output.dtype)
    ones = aten.ones.default(
        [channels, 1, *kernel], dtype=grad_output.dtype, device=grad_output.device
    )
    # Windows start at -padding: spread over the padded extent, then cut to the input.
    spread = aten.convolution.default(
        scaled, ones, None, steps, [0, 0], [1, 1], True, [0, 0], channels
    )
    for d in (0, 1):
        short = pads[d] + extent[d] - spread.shape[2 + d]
        if short > 0:  # the last positions no window covers: gradient 0
            widths = [0, 0, 0, short] if d == 0 else [0, short]
            spread = aten.constant_pad_nd.default(spread, widths)
        spread = aten.slice.Tensor(spread, 2 + d, pads[d], pads[d] + extent[d])
    return spread.squeeze(0) if unbatched else spread


def _window_counts(
    outputs: int,
    size: int,
    kernel: int,
    stride: int,
    pad: int,
    include_pad: bool,
    device: torch.device,
) -> torch.Tensor:
    """ATen's divisor along one dim: how many positions each output's window covers
    (computed in the graph: a tensor constant made here would not trace functionally)."""
    start = aten.arange.default(outputs, dtype=torch.float32, device=device) * stride - pad
    end = aten.clamp_max.default(start + kernel, size + pad)
    if not include_pad:
        start = aten.clamp_min.default(start, 0)
        end = aten.clamp_max.default(end, size)
    return end - start


def adaptive_avg_pool2d_backward(grad_output: torch.Tensor, input: torch.Tensor) -> Any:
    """``aten._adaptive_avg_pool2d_backward`` as two matrix products with the pooling's
    spread matrices (see the module's NOTE); symbolic sizes keep the op."""
    shapes = (grad_output.shape, input.shape)
    if not all(isinstance(size, int) for shape in shapes for size in shape):
        return NotImplemented
    (rows, cols), (height, width) = grad_output.shape[-2:], input.shape[-2:]
    along_h = _adaptive_spread(rows, height, grad_output)  # [rows, height]
    along_w = _adaptive_spread(cols, width, grad_output)  # [cols, width]
    spread = aten.matmul.default(aten.t.default(along_h), grad_output)
    return aten.matmul.default(spread, along_w)


def _adaptive_spread(outputs: int, size: int, like: torch.Tensor) -> torch.Tensor:
    """``[outputs, size]``: ``1 / window length`` where ATen's adaptive window of each
    output covers the position, 0 elsewhere (computed in the graph, as
    :func:`_window_counts`)."""
    index = aten.arange.default(outputs, dtype=torch.int64, device=like.device)
    start = aten.div.Tensor_mode(index * size, outputs, rounding_mode="floor")
    end = aten.div.Tensor_mode(
        (index + 1) * size + outputs - 1, outputs, rounding_mode="floor"
    )
    position = aten.arange.default(size, dtype=torch.int64, device=like.device)
    inside = (position >= start.unsqueeze(1)) & (position < end.unsqueeze(1))
    length = aten._to_copy.default(end - start, dtype=like.dtype).unsqueeze(1)
    return aten._to_copy.default(inside, dtype=like.dtype) / length


def adaptive_max_pool2d_backward(
    grad_output: torch.Tensor, input: torch.Tensor, indices: torch.Tensor
) -> Any:
    """``aten.adaptive_max_pool2d_backward``: each output's gradient added at the input
    position its index names (flat over the last two dims), in float32 for narrower
    floats as ATen accumulates."""
    if not all(isinstance(size, int) for size in input.shape):
        return NotImplemented
    lead, plane = list(input.shape[:-2]), input.shape[-2] * input.shape[-1]
    dtype = grad_output.dtype
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    source = aten._to_copy.default(aten.flatten.using_ints(grad_output, -2), dtype=wide)
    zeros = aten.zeros.default([*lead, plane], dtype=wide, device=grad_output.device)
    added = aten.scatter_add.default(zeros, -1, aten.flatten.using_ints(indices, -2), source)
    return aten._to_copy.default(aten.view.default(added, list(input.shape)), dtype=dtype)


def weight_norm_interface_backward(
    grad_w: torch.Tensor,
    saved_v: torch.Tensor,
    saved_g: torch.Tensor,
    saved_norms: torch.Tensor,
    dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten._weight_norm_interface_backward``: the gradients of ``v`` and ``g`` (see
    the module's NOTE)."""
    dims = [d for d in range(saved_v.dim()) if dim == -1 or d != dim]
    grad_g = aten.sum.dim_IntList(grad_w * saved_v, dims, True) / saved_norms
    grad_v = (saved_g / saved_norms) * (grad_w - saved_v * (grad_g / saved_norms))
    return grad_v, grad_g


def as_strided_scatter(
    input: torch.Tensor,
    src: torch.Tensor,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None = None,
) -> Any:
    """``aten.as_strided_scatter`` as an ``index_put`` into the flattened input (see the
    module's NOTE)."""
    offset = storage_offset or 0
    plain = (*input.shape, *size, *stride, offset, input.storage_offset())
    if not all(isinstance(v, int) for v in plain):
        return NotImplemented
    if not input.is_contiguous() or input.storage_offset() != 0 or _overlaps(size, stride):
        return NotImplemented
    device = input.device
    positions = aten.full.default([1] * len(size), offset, dtype=torch.int64, device=device)
    for d, (count, step) in enumerate(zip(size, stride)):
        along = aten.arange.default(count, dtype=torch.int64, device=device) * step
        shape = [1] * len(size)
        shape[d] = count
        positions = positions + aten.view.default(along, shape)
    flat = aten.reshape.default(input, [-1])
    values = aten.reshape.default(src, [-1])
    written = aten.index_put.default(flat, [aten.reshape.default(positions, [-1])], values)
    return aten.view.default(written, list(input.shape))


def diagonal_scatter(
    input: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1
) -> Any:
    """``aten.diagonal_scatter`` as a ``where`` (see the module's NOTE)."""
    rank = input.dim()
    if rank < 2:
        return NotImplemented
    dim1, dim2 = dim1 % rank, dim2 % rank
    if dim1 == dim2 or src.dim() != rank - 1:
        return NotImplemented
    device = input.device
    rows = aten.arange.default(input.shape[dim1], dtype=torch.int64, device=device)
    cols = aten.arange.default(input.shape[dim2], dtype=torch.int64, device=device)
    rows, cols = aten.unsqueeze.default(rows, 1), aten.unsqueeze.default(cols, 0)
    on_diagonal = aten.eq.Scalar(aten.sub.Tensor(cols, rows), offset)  # [n1, n2]
    length = src.shape[-1]
    if length == 0:
        return aten.clone.default(input)
    # the diagonal's k-th element is at (k, k + offset), or (k - offset, k) below it
    k = aten.clamp.default(rows if offset >= 0 else cols, 0, length - 1)
    k = aten.expand.default(k, [input.shape[dim1], input.shape[dim2]])
    gathered = aten.index.Tensor(src, [*([None] * (src.dim() - 1)), k])  # [..., n1, n2]
    # gathered's dims are input's others, then dim1 and dim2: put those back in place
    others = [d for d in range(rank) if d not in (dim1, dim2)]
    order = [*others, dim1, dim2]
    gathered = aten.permute.default(gathered, [order.index(d) for d in range(rank)])
    mask_shape = [1] * rank
    mask_shape[dim1], mask_shape[dim2] = input.shape[dim1], input.shape[dim2]
    if dim1 > dim2:  # the mask's dims in input's order
        on_diagonal = aten.t.default(on_diagonal)
    on_diagonal = aten.reshape.default(on_diagonal, mask_shape)
    if gathered.dtype != input.dtype:
        gathered = aten._to_copy.default(gathered, dtype=input.dtype)
    return aten.where.self(on_diagonal, gathered, input)


def _overlaps(size: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether two positions of a strided view can be the same element (dims of size 1
    aside, each stride must clear the extent of the smaller ones)."""
    extent = 1
    for step, count in sorted((s, c) for c, s in zip(size, stride) if c > 1):
        if step < extent:
            return True
        extent = step * (count - 1) + extent
    return False


def _expand(value: Sequence[int], count: int) -> list[int]:
    values = list(value)
    return values * count if len(values) == 1 else values


def mv(matrix: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    return aten.squeeze.dim(aten.mm.default(matrix, aten.unsqueeze.default(vector, 1)), 1)


def addmv(
    input: torch.Tensor,
    matrix: torch.Tensor,
    vector: torch.Tensor,
    *,
    beta: float = 1,
    alpha: float = 1,
) -> torch.Tensor:
    product = mv(matrix, vector)
    if alpha != 1:
        product = aten.mul.Scalar(product, alpha)
    if beta == 0:  # ATen ignores input then, NaN included
        return product
    return aten.add.Tensor(aten.mul.Scalar(input, beta) if beta != 1 else input, product)


def hardtanh_backward(
    grad_output: torch.Tensor, input: torch.Tensor, min_val: float, max_val: float
) -> torch.Tensor:
    outside = aten.logical_or.default(
        aten.le.Scalar(input, min_val), aten.ge.Scalar(input, max_val)
    )
    return aten.where.self(outside, aten.zeros_like.default(grad_output), grad_output)


def signbit(input: torch.Tensor) -> torch.Tensor:
    if not input.is_floating_point():
        return aten.lt.Scalar(input, 0)
    negative_zero = aten.logical_and.default(
        aten.eq.Scalar(input, 0), aten.lt.Scalar(aten.reciprocal.default(input), 0)
    )
    return aten.logical_or.default(aten.lt.Scalar(input, 0), negative_zero)


def copysign(input: torch.Tensor, other: torch.Tensor) -> Any:
    if not input.is_floating_point() or not other.is_floating_point():
        return NotImplemented  # integer inputs promote: PyTorch's own path
    magnitude = aten.abs.default(input)
    result = aten.where.self(signbit(other), aten.neg.default(magnitude), magnitude)
    return (
        aten._to_copy.default(result, dtype=torch.result_type(input, other))
        if result.dtype != torch.result_type(input, other)
        else result
    )


def clamp(input: torch.Tensor, min: Any = None, max: Any = None) -> Any:
    if not input.is_floating_point() or (min is None) == (max is None):
        # Both bounds: Clip (a NaN bound is not propagated, as PyTorch does; left);
        # integers have no infinities.
        return NotImplemented
    if min is not None:
        return clamp_min(input, min)
    return clamp_max(input, max)


def clamp_min(input: torch.Tensor, min: Any) -> Any:
    if not input.is_floating_point() or isinstance(min, torch.Tensor):
        return NotImplemented
    bound = aten.scalar_tensor.default(min, dtype=input.dtype, device=input.device)
    return aten.maximum.default(input, bound)


def clamp_max(input: torch.Tensor, max: Any) -> Any:
    if not input.is_floating_point() or isinstance(max, torch.Tensor):
        return NotImplemented
    bound = aten.scalar_tensor.default(max, dtype=input.dtype, device=input.device)
    return aten.minimum.default(input, bound)


def copysign_scalar(input: torch.Tensor, other: Any) -> Any:
    if not input.is_floating_point() or not isinstance(other, (int, float)):
        return NotImplemented  # integers promote; a symbolic number is not known here
    magnitude = aten.abs.default(input)
    return aten.neg.default(magnitude) if math.copysign(1.0, other) < 0 else magnitude


def native_layer_norm(
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> Any:
    """Float64 only: ONNX Runtime has no double ``LayerNormalization`` kernel and refused
    every float64 layer norm, which cut a float64 transformer's partition at each one
    (a FallbackWarning per norm). torch's decomposition (mean, variance, rsqrt) runs in
    ONNX Runtime in double; other dtypes keep the op."""
    if input.dtype != torch.float64:
        return NotImplemented
    return _torch_private.torch_decomposition(aten.native_layer_norm.default)(
        input, normalized_shape, weight, bias, eps
    )


def _float64_rounded(op: Any, *names: str) -> Callable[..., Any]:
    """A decomposition of ``op`` by torch's own, for float64 calls one of whose named
    number arguments float32 cannot hold exactly (``"approximate"``: GELU's tanh
    form, whose constants the translation holds as float32). torchlib passes those
    numbers as ONNX float attributes, which are 32-bit: a float64 graph was off by
    1.5e-9 to 3.9e-8 relative. Decomposed, the numbers are double constants. Other
    calls keep the op."""
    positions = {a.name: i for i, a in enumerate(op._schema.arguments)}

    def argument(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        i = positions[name]
        return args[i] if i < len(args) else kwargs.get(name)

    def decompose(*args: Any, **kwargs: Any) -> Any:
        first = args[0]
        if not isinstance(first, torch.Tensor) or first.dtype != torch.float64:
            return NotImplemented
        for name in names:
            value = argument(name, args, kwargs)
            if name == "approximate" and value == "tanh":
                break
            if isinstance(value, float) and not _dtypes.float32_holds(value):
                break
        else:
            return NotImplemented
        return _torch_private.torch_decomposition(op)(*args, **kwargs)

    return decompose


def native_multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim: int,
    num_head: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    mask: torch.Tensor | None = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    mask_type: int | None = None,
) -> Any:
    """``nn.MultiheadAttention``'s fast path (batch first, eval, no grad), which has no
    translation. The packed projections, the heads' scores scaled by
    ``1/sqrt(head_dim)``, a softmax with the boolean mask's positions set to -inf (a
    row with every key masked is NaN, as in ATen), the output projection; the weights
    (summed over heads and divided by their count when averaged) or an empty tensor."""
    if query.is_nested or query.dim() != 3 or _torch_private.surely_empty(query):
        return NotImplemented  # empty: ATen returns no weights at all
    batch, length = query.shape[0], query.shape[1]
    head_dim = embed_dim // num_head
    if query is key and key is value:
        q, k, v = aten.split.Tensor(
            aten.linear.default(query, qkv_weight, qkv_bias), embed_dim, -1
        )
    else:
        weights = aten.split.Tensor(qkv_weight, embed_dim, 0)
        biases = aten.split.Tensor(qkv_bias, embed_dim, 0)
        q, k, v = (
            aten.linear.default(x, w, b)
            for x, w, b in zip((query, key, value), weights, biases)
        )

    def heads(x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, H, T, D/H)
        shape = [batch, x.shape[1], num_head, head_dim]
        return aten.transpose.int(aten.view.default(x, shape), 1, 2)

    scores = aten.matmul.default(
        aten.mul.Tensor(heads(q), 1.0 / math.sqrt(head_dim)),
        aten.transpose.int(heads(k), -2, -1),
    )
    if mask is not None:
        hidden = mask if mask.dtype == torch.bool else aten.ne.Scalar(mask, 0)
        if mask_type == 1:  # key padding, (B, S)
            hidden = aten.view.default(hidden, [batch, 1, 1, -1])
        scores = aten.masked_fill.Scalar(scores, hidden, float("-inf"))
    probs = aten._softmax.default(scores, -1, False)
    context = aten.matmul.default(probs, heads(v))
    context = aten.reshape.default(
        aten.transpose.int(context, 1, 2), [batch, length, embed_dim]
    )
    out = aten.linear.default(context, proj_weight, proj_bias)
    if not need_weights:
        return out, aten.new_empty.default(out, [0])
    if average_attn_weights:
        probs = aten.div.Scalar(aten.sum.dim_IntList(probs, [1]), num_head)
    return out, probs


def transformer_encoder_layer_fwd(
    src: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor,
    mask: torch.Tensor | None = None,
    mask_type: int | None = None,
) -> Any:
    """``nn.TransformerEncoderLayer``'s fast path (eval, no grad), which has no
    translation: the whole layer ran in PyTorch. Self-attention through
    ``_native_multi_head_attention`` (which the lowerings decompose), the residual, the
    layer norms before or after each block, and the feed-forward block with ReLU or
    GELU, as ATen's kernel computes them."""
    if src.is_nested:
        return NotImplemented
    if _torch_private.surely_empty(src):
        return aten.clone.default(src)

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return aten.layer_norm.default(x, [embed_dim], weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = aten._native_multi_head_attention.default(
        x,
        x,
        x,
        embed_dim,
        num_heads,
        qkv_weight,
        qkv_bias,
        proj_weight,
        proj_bias,
        mask,
        False,
        True,
        mask_type,
    )[0]
    x = aten.add.Tensor(x, src)
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = aten.linear.default(x, ffn_weight_1, ffn_bias_1)
    hidden = aten.gelu.default(hidden) if use_gelu else aten.relu.default(hidden)
    x = aten.add.Tensor(aten.linear.default(hidden, ffn_weight_2, ffn_bias_2), residual)
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


def multilabel_margin_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """``F.multilabel_margin_loss`` in torch ops. torch's decomposition (which every
    ``torch.compile`` backend gets, as the op's Autograd kernel) leaves the target slots
    after a row's first -1 unmasked: ``x=[[.1,.2,.4,.8]]``, ``y=[[3,0,-1,1]]`` gave 2.05
    for eager's 0.85. Each row's targets are its slots before the first -1; the loss is
    the mean over classes ``i`` that are not targets of ``max(0, 1 - (x[j] - x[i]))``,
    summed over target slots ``j``."""
    if size_average is not None or reduce is not None:
        reduction = _torch_private.legacy_reduction(size_average, reduce)
    x = input if input.dim() == 2 else input.reshape(1, -1)
    slots = target if target.dim() == 2 else target.reshape(1, -1)
    classes = x.shape[-1]
    index = torch.arange(classes, device=slots.device)
    first_stop = torch.where(slots == -1, index, classes).amin(-1, keepdim=True)
    valid = index < first_stop  # (N, slots)
    safe = torch.where(valid, slots, 0)
    is_target = ((safe.unsqueeze(-1) == index) & valid.unsqueeze(-1)).any(1)  # (N, C)
    at_targets = torch.gather(x, 1, safe)  # (N, slots)
    margins = (1 - at_targets.unsqueeze(-1) + x.unsqueeze(1)).clamp_min(0)  # (N, slots, C)
    counted = valid.unsqueeze(-1) & ~is_target.unsqueeze(1)
    loss = torch.where(counted, margins, 0).sum((1, 2)) / classes
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss if input.dim() == 2 else loss.reshape(())


def python_functions() -> dict[Any, Any]:
    """Functions Dynamo keeps whole in its graph whose torch decomposition is wrong, and
    their replacements (swapped in before the graph is lowered)."""
    return {torch.nn.functional.multilabel_margin_loss: multilabel_margin_loss}


def table() -> dict[Any, Any]:
    """ortlab's decompositions, by op."""
    return {
        aten.convolution_backward.default: convolution_backward,
        aten.avg_pool2d_backward.default: avg_pool2d_backward,
        aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
        aten.adaptive_max_pool2d_backward.default: adaptive_max_pool2d_backward,
        aten._weight_norm_interface_backward.default: weight_norm_interface_backward,
        aten.as_strided_scatter.default: as_strided_scatter,
        aten.diagonal_scatter.default: diagonal_scatter,
        aten.mv.default: mv,
        aten.addmv.default: addmv,
        aten.hardtanh_backward.default: hardtanh_backward,
        aten.signbit.default: signbit,
        aten.copysign.Tensor: copysign,
        aten.copysign.Scalar: copysign_scalar,
        aten.clamp.default: clamp,
        aten.clamp_min.default: clamp_min,
        aten.clamp_max.default: clamp_max,
        aten.native_layer_norm.default: native_layer_norm,
        aten.hardtanh.default: _float64_rounded(aten.hardtanh.default, "min_val", "max_val"),
        aten.addcmul.default: _float64_rounded(aten.addcmul.default, "value"),
        aten.addmm.default: _float64_rounded(aten.addmm.default, "beta", "alpha"),
        aten.celu.default: _float64_rounded(aten.celu.default, "alpha"),
        aten.gelu.default: _float64_rounded(aten.gelu.default, "approximate"),
        aten._native_multi_head_attention.default: native_multi_head_attention,
        aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
    } | _foreach.table()
