"""Views of a graph input returned with size arithmetic under dynamic shapes.

AOTAutograd (grad-enabled calls) rebuilds an output aliasing an input with as_strided from
the compiled output's strides when its views have symbolic inputs; ONNX Runtime's output
was a contiguous copy, so the result read the wrong elements (or, for expand, raised).
Such views stay in PyTorch, on both lowerings. So does a view of another output returned
beside it, with symbolic sizes or, without autograd (nothing rebuilds it then), static."""

import contextlib

import pytest
import torch

import ortlab

CASES = {
    "slice_sub": lambda x: x[:, 1 : x.shape[1] - 1],
    "slice_floordiv": lambda x: x[:, : x.shape[1] // 2],
    "narrow": lambda x: x.narrow(1, 1, x.shape[1] - 2),
    "split_uneven": lambda x: torch.split(x, [1, x.shape[1] - 1], 1),
    "chunk": lambda x: x.chunk(2, 1),
    "expand": lambda x: x[None].expand(x.shape[0] + 1, -1, -1),
}


def _outputs_on_two_shapes(fn, grad):
    """``fn`` compiled with dynamic shapes and eager, called in grad mode ``grad`` on two
    shapes: yields each input and the pairs (eager output, compiled output)."""
    compiled = ortlab.compile(fn, dynamic=True)
    ctx = torch.no_grad() if grad == "no_grad" else contextlib.nullcontext()
    for shape in [(4, 6), (3, 8)]:
        x = torch.arange(float(shape[0] * shape[1])).reshape(shape)
        x.requires_grad_(grad == "requires_grad")
        with ctx:
            expected, got = fn(x), compiled(x)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(expected)
        for e, g in zip(expected, got):
            torch.testing.assert_close(g.detach(), e.detach(), rtol=0, atol=0)
        yield x, list(zip(expected, got))


@pytest.mark.parametrize("grad", ["no_grad", "grad", "requires_grad"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_view_of_an_input_with_symbolic_sizes_is_eagers_view(name, grad):
    for x, pairs in _outputs_on_two_shapes(CASES[name], grad):
        for e, g in pairs:
            assert g.stride() == e.stride()
            assert g.storage_offset() == e.storage_offset()
            assert g.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_views_of_inputs_saved_for_the_backward_stay_in_onnx_runtime():
    """Only the user's outputs are kept as views: a view of an input that AOTAutograd
    saves for the backward (here x[:, 1:], for w's gradient) is an output of the forward
    graph too, and stays in the ONNX Runtime partition."""
    w = torch.randn(3, requires_grad=True)
    compiled = ortlab.compile(lambda x: (x[:, 1:] * w).sum(), dynamic=True)
    x = torch.randn(4, 4)
    compiled(x).backward()
    torch.testing.assert_close(w.grad, x[:, 1:].sum(0))
    forward = compiled.ortlab_backend.graphs[0]
    assert forward.kind == "forward" and not forward.eager_node_names


OF_OUTPUTS = {
    "slice_floordiv": lambda x: (lambda y: (y, y[:, : x.shape[1] // 2]))(x * 2),
    "narrow": lambda x: (lambda y: (y, y.narrow(1, 1, x.shape[1] - 2)))(x + 1),
    "split_uneven": lambda x: (lambda y: (y, *torch.split(y, [1, x.shape[1] - 1], 1)))(x * 5),
}


@pytest.mark.parametrize("grad", ["no_grad", "grad", "requires_grad"])
@pytest.mark.parametrize("name", sorted(OF_OUTPUTS))
def test_a_view_of_another_output_with_symbolic_sizes_is_eagers(name, grad):
    """``y, y[:, : n // 2]``: AOTAutograd rebuilds the view from ``y`` with the compiled
    view's strides, which ONNX Runtime's copy did not have (the values were wrong)."""
    for _, pairs in _outputs_on_two_shapes(OF_OUTPUTS[name], grad):
        for e, g in pairs:
            if grad != "no_grad":
                assert g.stride() == e.stride()


STATIC_OF_OUTPUTS = {
    "last_position": lambda y: y[:, -1],
    "flat": lambda y: y.view(-1),
    "row": lambda y: y[0],
    "transposed": lambda y: y.t(),
    "unsqueezed": lambda y: y.unsqueeze(0),
}


@pytest.mark.parametrize("grad", ["no_grad", "grad"])
@pytest.mark.parametrize("name", sorted(STATIC_OF_OUTPUTS))
def test_a_view_of_another_output_shares_its_memory(name, grad):
    """``logits, logits[:, -1]`` then ``logits.div_(t)``: under ``no_grad`` nothing
    rebuilds the view after ONNX Runtime, whose two outputs were two copies (the write
    did not show in the view: off by 2)."""
    view = STATIC_OF_OUTPUTS[name]

    def fn(x):
        y = x * 2 + 1
        return y, view(y)

    x = torch.arange(12.0).reshape(3, 4).requires_grad_(grad == "grad")
    compiled = ortlab.compile(fn)
    with torch.no_grad() if grad == "no_grad" else contextlib.nullcontext():
        (y, v), (ey, ev) = compiled(x), fn(x)
    with torch.no_grad():
        y.div_(0.5)
        ey.div_(0.5)
    torch.testing.assert_close(v, ev, rtol=0, atol=0)
    assert v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    (graph,) = compiled.ortlab_backend.graphs[:1]
    assert len(graph.partitions) == 1  # the arithmetic still runs in ONNX Runtime
