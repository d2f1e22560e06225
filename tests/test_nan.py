"""NaN through max-like ops (``_nan``): ONNX Runtime's ReduceMax, ArgMax, MaxPool and
TopK skip NaN, PyTorch propagates it; the rewritten graph gives eager's values and
indices, in ONNX Runtime."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ortlab
from ortlab.backend import _nan

NAN, INF = float("nan"), float("inf")
X = torch.tensor(
    [[1.0, NAN, 3.0, -2.0], [0.0, 1.0, INF, 2.0], [-INF, 5.0, 1.0, 0.5], [NAN, 2.0, NAN, 1.0]]
)

CASES = {
    "amax": lambda x: x.amax(-1),
    "amin-keepdim": lambda x: x.amin(0, keepdim=True),
    "amax-dims": lambda x: x.amax((0, 1)),
    "max": lambda x: x.max(),
    "min": lambda x: x.min(),
    "max.dim": lambda x: tuple(x.max(-1)),
    "min.dim-keepdim": lambda x: tuple(x.min(0, keepdim=True)),
    "max.dim-values": lambda x: x.max(1).values * 2,
    "max.dim-indices": lambda x: x.max(1).indices + 1,
    "argmax": lambda x: x.argmax(-1),
    "argmin-keepdim": lambda x: x.argmin(0, keepdim=True),
    "argmax-all": lambda x: x.argmax(),
    "max_pool2d": lambda x: F.max_pool2d(x[None, None], 2, 1),
    "max_pool2d-padded": lambda x: F.max_pool2d(x[None, None], 3, 2, 1),
    "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x[None, None], 1),
    "max_pool3d": lambda x: F.max_pool3d(x.expand(2, -1, -1)[None, None], 2, 1),
    "max_pool1d": lambda x: F.max_pool1d(x[None], 2),
    "topk": lambda x: x.topk(2, -1).values,
    "topk-smallest": lambda x: x.topk(2, 0, largest=False).values,
    "sort-descending": lambda x: tuple(x.sort(-1, descending=True)),
    "sort": lambda x: x.sort(0).values,
}


def _same(a, b):
    return a.dtype == b.dtype and torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(CASES))
def test_nan_comes_out_of_max_like_ops_as_eager_gives_it(name, dtype):
    fn = CASES[name]
    x = X.to(dtype)
    backend = ortlab.OrtBackend()
    got, expected = torch.compile(fn, backend=backend)(x), fn(x)
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        assert _same(g, e), (g, e)
    (graph,) = backend.graphs
    assert not graph.eager_node_names, [graph.verdict(n) for n in graph.eager_node_names]


# Windows (2×2, stride 2) with: +inf and -inf and no NaN (+inf), NaN beside +inf (NaN),
# NaN beside -inf (NaN), finite values only.
MIXED = torch.tensor(
    [[INF, 1.0, NAN, INF, NAN, 2.0, 1.0, 2.0], [-INF, 0.0, 1.0, 0.0, -INF, 3.0, 3.0, 4.0]]
)

POOLS = {
    "2d": lambda x: F.max_pool2d(x[None, None], 2),
    "2d-ceil": lambda x: F.max_pool2d(x[None, None], 3, 2, 1, ceil_mode=True),
    "2d-dilated": lambda x: F.max_pool2d(x[None, None], 2, 1, dilation=(1, 2)),
    "2d-indices": lambda x: F.max_pool2d(x[None, None], 2, 1, return_indices=True)[0] * 2,
    "3d-padded": lambda x: F.max_pool3d(x.expand(3, -1, -1)[None, None], 2, 2, 1),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_max_pools_mark_exactly_the_windows_that_hold_a_nan(name):
    fn = POOLS[name]
    backend = ortlab.OrtBackend()
    got = torch.compile(fn, backend=backend)(MIXED)
    expected = fn(MIXED)
    assert _same(got, expected), (got, expected)
    (graph,) = backend.graphs
    assert not graph.eager_node_names
    (session,) = backend.sessions
    averaged = any(n.op_type == "AveragePool" for n in session.model.graph.node)
    assert averaged is (name != "2d-dilated")  # dilated windows: no average pool has them


GRADIENT_POOLS = {
    "2d": lambda x: F.max_pool2d(x, 2, 2),
    "2d-overlapping": lambda x: F.max_pool2d(x, 2, 1),
    "2d-padded-ceil": lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    "2d-dilated": lambda x: F.max_pool2d(x, 2, 1, dilation=2),
    "3d": lambda x: F.max_pool3d(x[:, :, None].expand(-1, -1, 3, -1, -1), 2, 1, 1),
}


@pytest.mark.parametrize("name", list(GRADIENT_POOLS))
def test_a_nan_windows_gradient_goes_where_eager_sends_it(name):
    fn = GRADIENT_POOLS[name]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 8, generator=generator)
    x[torch.rand(x.shape, generator=generator) < 0.15] = NAN  # some windows hold several
    x[torch.rand(x.shape, generator=generator) < 0.05] = INF
    compiled = torch.compile(fn, backend="ortlab", fullgraph=True)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, expected = compiled(a), fn(b)
    assert _same(got.detach(), expected.detach())
    # A finite gradient into NaN outputs: eager sends it to each window's last NaN.
    upstream = torch.randn(expected.shape, generator=generator)
    got.backward(upstream)
    expected.backward(upstream)
    assert _same(a.grad, b.grad), (a.grad - b.grad).abs().nan_to_num(1.0).gt(0).sum()


def test_rows_without_nan_are_unchanged_and_integers_are_left_alone():
    from torch.fx.experimental.proxy_tensor import make_fx

    ints = make_fx(lambda x: (x.amax(-1), x.argmax(-1)), tracing_mode="fake")(
        torch.tensor([[1, 5], [2, 0]])
    )
    assert _nan.for_onnx(ints) is ints
    floats = make_fx(lambda x: x.amax(-1), tracing_mode="fake")(torch.randn(2, 3))
    rewritten = _nan.for_onnx(floats)
    assert rewritten is not floats and _nan.for_onnx(rewritten) is rewritten  # marked
    x = torch.randn(5, 7)
    for fn in CASES.values():
        got, expected = torch.compile(fn, backend="ortlab")(x), fn(x)
        for g, e in zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]:
            torch.testing.assert_close(g, e)


def test_a_cnn_with_max_pooling_and_top_k_trains_as_eager():
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.MaxPool2d(2), torch.nn.Flatten()
        )

    def loss(out):
        return out.topk(3, -1).values.sum() + out.amax(-1).sum() + out.max(-1).values.mean()

    model, reference = make(), make()
    x = torch.randn(2, 3, 8, 8)
    backend = ortlab.OrtBackend()
    loss(torch.compile(model, backend=backend)(x)).backward()
    loss(reference(x)).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert {g.kind for g in backend.graphs} == {"forward", "backward"}
    assert all(not g.eager_node_names for g in backend.graphs)
