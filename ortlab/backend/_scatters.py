"""Slice gradients, writes into slices and embedding gradients, written so that ONNX
Runtime's CUDA kernels run them in parallel: a slice's gradient as a ``Pad``, a write
into a slice as a ``Concat``, and an embedding's weight gradient (on CUDA) as a
``ScatterElements`` over every element.

# NOTE: ONNX Runtime's CUDA ``ScatterND`` runs one thread per index, and each thread
# copies (or atomically adds) its whole update row in a loop. torchlib writes
# ``slice_scatter`` as a ``ScatterND`` along the sliced dim moved to the front, so the
# gradient of ``x[..., :32]`` (rotary embeddings' ``rotate_half``, in every Llama-family
# layer) became 32 threads each copying 32K values one after the other. On an H200, a
# 4-layer Llama's training step (8x256 tokens) spent 34 ms of its 62 ms of GPU time in
# 19 scatter kernels, and took 2.5x eager's step. Written here:
#
# - ``slice_backward`` with step 1: the gradient padded with zeros before and after the
#   slice along its dim (``constant_pad_nd``, ONNX's ``Pad``; a ``Concat`` with zeros
#   for dtypes ONNX Runtime has no ``Pad`` kernel for, bfloat16 among them).
# - ``slice_scatter`` with step 1: the input's parts before and after the slice,
#   concatenated with ``src`` between them.
# - ``embedding_dense_backward`` on CUDA: ``scatter_add`` of each gradient row into the
#   zero table at its index, with the index expanded over the row, so that every element
#   is its own (atomic) add. On the CPU the ``ScatterND`` form stays: there each index's
#   row is one vectorized add.
#
# Other steps, symbolic bounds, a non-contiguous input of ``slice_scatter`` (the
# ``Concat`` would not keep its strides), ``scale_grad_by_freq`` and an embedding's
# gradient off CUDA keep their previous forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ortlab.backend import _torch_private

aten = torch.ops.aten


_PADDED = (torch.float32, torch.float64, torch.float16)
"""The dtypes both ONNX Runtime providers have a ``Pad`` kernel for (neither pads
bfloat16; the CPU's pads no int16): others are padded by a ``Concat`` with zeros."""


def _bounds(size: Any, start: Any, end: Any, step: Any) -> tuple[int, int] | None:
    """A step-1 slice's ``[start, end)`` within ``[0, size)``, as Python slicing clamps it;
    ``None`` for another step or for bounds that are not plain ints."""
    if any(not isinstance(v, (int, type(None))) for v in (size, start, end, step)):
        return None
    if step != 1 or size is None:
        return None
    first, stop, _ = slice(start, end).indices(size)
    return first, max(stop, first)


def slice_backward(
    grad_output: torch.Tensor,
    input_sizes: Sequence[Any],
    dim: int,
    start: Any,
    end: Any,
    step: Any,
) -> Any:
    """``aten.slice_backward`` as a zero ``Pad`` of the gradient (see the module's NOTE)."""
    rank = len(input_sizes)
    dim = dim % rank if rank else 0
    bounds = _bounds(input_sizes[dim], start, end, step) if rank else None
    if bounds is None:
        return _torch_private.torch_decomposition(aten.slice_backward.default)(
            grad_output, input_sizes, dim, start, end, step
        )
    before, after = bounds[0], input_sizes[dim] - bounds[1]
    if not before and not after:
        grad_input = grad_output
    elif grad_output.dtype in _PADDED:
        pads = [0] * (2 * (rank - dim))
        # constant_pad_nd's pads run from the last dim: (before, after) of dim rank-1 first
        pads[-2], pads[-1] = before, after
        grad_input = aten.constant_pad_nd.default(grad_output, pads, 0)
    else:
        pieces = []
        for width in (before, None, after):
            if width is None:
                pieces.append(grad_output)
            elif width:
                shape = list(grad_output.shape)
                shape[dim] = width
                pieces.append(aten.new_zeros.default(grad_output, shape))
        grad_input = aten.cat.default(pieces, dim)
    # contiguous, as ATen's (a Pad keeps a channels-last gradient's strides)
    return aten.clone.default(grad_input, memory_format=torch.contiguous_format)


def slice_scatter(
    input: torch.Tensor,
    src: torch.Tensor,
    dim: int = 0,
    start: Any = None,
    end: Any = None,
    step: Any = 1,
) -> Any:
    """``aten.slice_scatter`` with step 1 as a ``Concat`` (see the module's NOTE)."""
    rank = input.dim()
    bounds = _bounds(input.shape[dim % rank], start, end, step) if rank else None
    if bounds is None or not input.is_contiguous():
        # A Concat is contiguous, where slice_scatter keeps its input's strides, which a
        # later view may rely on (Longformer's chunked attention did).
        return NotImplemented
    dim %= rank
    size = input.shape[dim]
    if src.dtype != input.dtype:
        src = aten._to_copy.default(src, dtype=input.dtype)
    pieces = []
    if bounds[0] > 0:
        pieces.append(aten.slice.Tensor(input, dim, 0, bounds[0]))
    if bounds[1] > bounds[0]:
        pieces.append(src)
    if bounds[1] < size:
        pieces.append(aten.slice.Tensor(input, dim, bounds[1], size))
    if len(pieces) <= 1:  # the whole dim written (src alone), or a dim of size 0
        # contiguous, as the input is (src may be a transposed view)
        return aten.clone.default(
            pieces[0] if pieces else input, memory_format=torch.contiguous_format
        )
    return aten.cat.default(pieces, dim)


def embedding_dense_backward(
    grad_output: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> Any:
    """``aten.embedding_dense_backward`` on CUDA as an element-wise ``scatter_add`` (see
    the module's NOTE)."""
    width = grad_output.shape[indices.dim() :]
    plain = isinstance(num_weights, int) and all(isinstance(w, int) for w in width)
    if not scatters_by_element(grad_output.device) or scale_grad_by_freq or not plain:
        return _torch_private.torch_decomposition(aten.embedding_dense_backward.default)(
            grad_output, indices, num_weights, padding_idx, scale_grad_by_freq
        )
    return _rows_added(grad_output, indices, num_weights, padding_idx, list(width))


def scatters_by_element(device: torch.device) -> bool:
    """Whether an embedding's gradient is scattered element by element on ``device``."""
    return device.type == "cuda"


def _rows_added(
    grad_output: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int,
    width: list[int],
) -> torch.Tensor:
    """Each row of ``grad_output`` added into a zero table at its index, one
    ``scatter_add`` element per value; indices out of range and ``padding_idx`` add
    nothing, as in ATen."""
    result_dtype = grad_output.dtype
    if result_dtype in (torch.float16, torch.bfloat16):  # as ATen: summed in float32
        grad_output = aten._to_copy.default(grad_output, dtype=torch.float32)
    row = 1
    for w in width:
        row *= w
    rows = aten.reshape.default(grad_output, [-1, row])
    index = aten.reshape.default(aten._to_copy.default(indices, dtype=torch.int64), [-1])
    kept = aten.logical_and.default(
        aten.logical_and.default(aten.ge.Scalar(index, 0), aten.lt.Scalar(index, num_weights)),
        aten.ne.Scalar(index, padding_idx),
    )
    zero_rows = aten.zeros_like.default(rows)
    rows = aten.where.self(aten.unsqueeze.default(kept, 1), rows, zero_rows)
    index = aten.where.self(kept, index, aten.zeros_like.default(index))
    spread = aten.expand.default(aten.unsqueeze.default(index, 1), [-1, row])
    table = aten.new_zeros.default(rows, [num_weights, row])
    grad_weight = aten.scatter_add.default(table, 0, spread, rows)
    grad_weight = aten.reshape.default(grad_weight, [num_weights, *width])
    if grad_weight.dtype != result_dtype:
        grad_weight = aten._to_copy.default(grad_weight, dtype=result_dtype)
    return grad_weight


def table() -> dict[Any, Any]:
    """The decompositions, by op."""
    return {
        aten.slice_backward.default: slice_backward,
        aten.slice_scatter.default: slice_scatter,
        aten.embedding_dense_backward.default: embedding_dense_backward,
    }
