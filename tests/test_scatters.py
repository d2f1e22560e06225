"""Slice gradients, writes into slices and embedding gradients without a per-index
``ScatterND`` (``_scatters``): the numbers are eager's and ONNX Runtime runs them."""

from __future__ import annotations

import sys

import pytest
import torch

import ortlab
from ortlab.backend import _scatters

aten = torch.ops.aten

SLICES = [
    # (size, start, end): Python's clamping, negative and open bounds
    (8, 0, 4),
    (8, 4, sys.maxsize),  # x[..., 4:], as Dynamo spells it
    (8, -3, None),
    (8, 2, -2),
    (8, None, 20),  # end past the size
    (8, 5, 3),  # empty
    (8, 0, 8),  # the whole dim
    (8, -20, 3),
]


def _op_types(compiled, kind):
    (graph,) = [g for g in compiled.ortlab_backend.graphs if g.kind == kind]
    assert len(graph.partitions) == 1 and not graph.eager_node_names
    return [n.op_type for n in graph.partitions[0].sessions[0].model.graph.node]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int16])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize(("size", "start", "end"), SLICES)
def test_slice_backward_decomposed_matches_aten(size, start, end, dim, dtype):
    shape = [size, size, size]
    length = len(range(size)[slice(start, end)])
    grad_shape = list(shape)
    grad_shape[dim] = length
    grad = torch.randn(grad_shape).mul(100).to(dtype)
    args = (grad, shape, dim, start if start is not None else 0, end, 1)
    if end is None:
        args = (grad, shape, dim, args[3], sys.maxsize, 1)
    torch.testing.assert_close(
        _scatters.slice_backward(*args), aten.slice_backward.default(*args), rtol=0, atol=0
    )


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize(("size", "start", "end"), SLICES)
def test_slice_scatter_decomposed_matches_aten(size, start, end, dim):
    x = torch.randn(size, size)
    length = len(range(size)[slice(start, end)])
    src_shape = [size, size]
    src_shape[dim] = length
    src = torch.randn(src_shape)
    expected = aten.slice_scatter.default(x, src, dim, start, end, 1)
    torch.testing.assert_close(
        _scatters.slice_scatter(x, src, dim, start, end, 1), expected, rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_slice_gradient_is_contiguous_as_aten_s(dtype):
    # A Pad keeps a channels-last gradient's strides; ATen's slice_backward is contiguous,
    # and a view after it in the backward graph may rely on that.
    grad = torch.randn(2, 3, 5, 5, dtype=dtype).to(memory_format=torch.channels_last)
    args = (grad, [2, 8, 5, 5], 1, 2, 5, 1)
    padded = _scatters.slice_backward(*args)
    assert padded.stride() == aten.slice_backward.default(*args).stride()
    torch.testing.assert_close(padded, aten.slice_backward.default(*args), rtol=0, atol=0)


def test_a_write_into_a_dim_of_size_zero_runs_in_onnx_runtime():
    def write(x, z):
        return torch.slice_scatter(x, z, 1, 0, 0) + 1

    x, z = torch.randn(3, 0), torch.randn(3, 0)
    assert _scatters.slice_scatter(x, z, 1, 0, 0).shape == (3, 0)
    compiled = ortlab.compile(write)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, z), write(x, z))
    assert _op_types(compiled, "inference")


def test_a_write_over_the_whole_dim_keeps_the_input_s_strides():
    # src alone is the result: a transposed src gave its strides, where ATen's are the
    # input's, and a view after it failed (the graph ran in PyTorch)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    expected = aten.slice_scatter.default(x, y.t(), 0, 0, 4)
    written = _scatters.slice_scatter(x, y.t(), 0, 0, 4)
    assert written.stride() == expected.stride()
    torch.testing.assert_close(written, expected, rtol=0, atol=0)

    def write(x, y):
        return torch.slice_scatter(x, y.t(), 0, 0, 4).view(-1) + 1

    compiled = ortlab.compile(write)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y), write(x, y))
    assert _op_types(compiled, "inference")


def test_other_steps_keep_torch_s_forms():
    x = torch.randn(6, 6)
    assert _scatters.slice_scatter(x, torch.randn(6, 3), 1, 0, 6, 2) is NotImplemented
    grad = torch.randn(6, 3)
    torch.testing.assert_close(
        _scatters.slice_backward(grad, [6, 6], 1, 0, 6, 2),
        aten.slice_backward.default(grad, [6, 6], 1, 0, 6, 2),
    )


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(torch.nn.Module):
    """A linear layer followed by rotary embeddings' ``rotate_half`` (slices of the last
    dim, as every Llama-family layer has them)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        y = self.proj(x)
        return y * 0.5 + _rotate_half(y) * 0.25 + y[:, 1:3].float().mean()


@pytest.mark.parametrize(
    ("dtype", "form"), [(torch.float32, "Pad"), (torch.bfloat16, "Concat")]
)
def test_slice_gradients_train_without_scatters_in_onnx_runtime(dtype, form):
    # ONNX Runtime pads no bfloat16 (on either provider; on the CPU a Pad would run in
    # float32 between Casts, on CUDA the session was refused): the zeros are concatenated.
    torch.manual_seed(0)
    model, reference = Rotary().to(dtype), Rotary().to(dtype)
    reference.load_state_dict(model.state_dict())
    compiled = ortlab.compile(model)
    x = torch.randn(4, 6, 16, dtype=dtype)
    compiled(x).float().square().mean().backward()
    reference(x).float().square().mean().backward()
    # bfloat16: ONNX Runtime's sums round other than eager's (6e-5 on gradients of 0.02,
    # as much with the ScatterND form)
    tolerance = {"atol": 1e-3, "rtol": 1.6e-2} if dtype == torch.bfloat16 else {}
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name, **tolerance)
    ops = _op_types(compiled, "backward")
    assert "ScatterND" not in ops and ("Pad" in ops) == (form == "Pad")


def test_a_write_into_a_slice_runs_as_a_concat():
    def write(x, y):
        out = x.clone()
        out[:, 2:5] = y * 2
        return out + 1

    compiled = ortlab.compile(write)
    x, y = torch.randn(3, 8), torch.randn(3, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y), write(x, y), rtol=0, atol=0)
    assert "ScatterND" not in _op_types(compiled, "inference")


EMBEDDINGS = [
    # (num_weights, width, indices' shape, padding_idx)
    (10, (4,), (3, 5), -1),
    (10, (4,), (3, 5), 2),
    (7, (6,), (6,), 0),
    (5, (8,), (2, 3, 4), -1),  # repeated indices
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("num", "width", "shape", "padding"), EMBEDDINGS)
def test_the_element_wise_embedding_gradient_matches_aten(num, width, shape, padding, dtype):
    """Against torch's decomposition, which sums narrow floats in float32 as ATen's CUDA
    kernel does (its CPU kernel sums bfloat16 in bfloat16), and ATen's float32."""
    from ortlab.backend import _torch_private

    torch.manual_seed(0)
    indices = torch.randint(0, num, shape)
    grad = torch.randn(*shape, *width, dtype=dtype)
    args = (grad, indices, num, padding, False)
    decomposed = _torch_private.torch_decomposition(aten.embedding_dense_backward.default)
    added = _scatters._rows_added(grad, indices, num, padding, list(width))
    assert added.dtype == dtype
    torch.testing.assert_close(added, decomposed(*args))
    if dtype == torch.float32:
        expected = aten.embedding_dense_backward.default(*args)
        torch.testing.assert_close(added, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_embedding_gradients_are_summed_in_float32(dtype):
    # As ATen's CUDA kernel sums them. ONNX Runtime's ScatterElements would add in the
    # tensor's dtype (bfloat16 sums stall at 256: 256 + 1 is not a bfloat16); ATen's CPU
    # scatter_add does not, so the traced graph is what shows it.
    from torch.fx.experimental.proxy_tensor import make_fx

    def added(grad, indices):
        return _scatters._rows_added(grad, indices, 3, -1, [4])

    grad, indices = torch.ones(300, 4, dtype=dtype), torch.zeros(300, dtype=torch.int64)
    graph = make_fx(added)(grad, indices)
    (scatter,) = [n for n in graph.graph.nodes if n.target == aten.scatter_add.default]
    assert scatter.meta["val"].dtype == torch.float32
    assert graph(grad, indices).dtype == dtype


def test_indices_out_of_range_add_nothing():
    from ortlab.backend import _torch_private

    indices = torch.tensor([0, 5, 2, 7, 2])
    grad = torch.randn(5, 3)
    decomposed = _torch_private.torch_decomposition(aten.embedding_dense_backward.default)
    added = _scatters._rows_added(grad, indices, 5, -1, [3])
    torch.testing.assert_close(added, decomposed(grad, indices, 5, -1, False))
    assert added[0].equal(grad[0]) and added[2].equal(grad[2] + grad[4])


def test_the_embedding_gradient_is_added_by_element_on_cuda_only():
    assert _scatters.scatters_by_element(torch.device("cuda", 0))
    assert not _scatters.scatters_by_element(torch.device("cpu"))


def test_an_embedding_trained_with_the_element_wise_gradient_in_onnx_runtime(monkeypatch):
    """The CUDA form, run here by the CPU provider: ``ScatterElements`` adds each value."""
    monkeypatch.setattr(_scatters, "scatters_by_element", lambda device: True)
    torch.manual_seed(0)
    model = torch.nn.Embedding(50, 8, padding_idx=3)
    reference = torch.nn.Embedding(50, 8, padding_idx=3)
    reference.load_state_dict(model.state_dict())
    ids = torch.tensor([[1, 3, 7, 7, 49], [3, 0, 1, 1, 1]])
    compiled = ortlab.compile(model)
    compiled(ids).square().sum().backward()
    reference(ids).square().sum().backward()
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)
    ops = _op_types(compiled, "backward")
    assert "ScatterElements" in ops and "ScatterND" not in ops


def test_a_write_into_a_slice_of_a_transposed_tensor_keeps_its_strides():
    # slice_scatter's result has its input's strides, and a view after it may rely on
    # them: a Concat (contiguous) broke Longformer's chunked attention.
    x = torch.randn(4, 6).t()
    assert _scatters.slice_scatter(x, torch.randn(2, 4), 0, 1, 3) is NotImplemented

    def write(x, y):
        t = x.transpose(0, 1).clone(memory_format=torch.preserve_format)
        t[1:3] = y
        return t.t().view(-1)[:5] + 1  # a view only the transposed strides allow

    compiled = ortlab.compile(write)
    x, y = torch.randn(4, 6), torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y), write(x, y), rtol=0, atol=0)
