"""ortlab's own decompositions (convolution_backward in convolutions, avg_pool2d_backward,
adaptive pooling's backward, _weight_norm_interface_backward, as_strided_scatter), exact
against ATen, so that the backward graphs that hold them run in ONNX Runtime whole."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

import ortlab
from ortlab.backend import _decompositions

CASES = [
    # (in, out, kernel, stride, padding, dilation, groups, size)
    (4, 6, 3, 1, 1, 1, 1, 8),
    (4, 6, 3, 2, 1, 1, 1, 9),  # stride 2 on an odd size: output_padding restores it
    (4, 8, 3, 2, 0, 2, 2, 11),  # dilation and groups
    (6, 6, 3, 1, 1, 1, 6, 7),  # depthwise
    (3, 4, 7, 2, 3, 1, 1, 16),  # a ResNet stem
]


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _square_mean(out):
    return out.square().mean()


def _trains_in_one_backward_partition(make, x, loss, exact=False):
    """One step of ``make()``'s model compiled and eager with ``loss``: the gradients
    agree (to float32's default tolerance when ``exact``), and the backward graph ran
    whole in ONNX Runtime. Returns that graph's ONNX op types."""
    model, reference = make(), make()
    compiled = ortlab.compile(model)
    loss(compiled(x)).backward()
    loss(reference(x)).backward()
    tolerance = {} if exact else {"rtol": 1e-4, "atol": 1e-5}
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name, **tolerance)
    (backward,) = [g for g in compiled.ortlab_backend.graphs if g.kind == "backward"]
    assert len(backward.partitions) == 1 and not backward.eager_node_names
    return [n.op_type for n in backward.partitions[0].sessions[0].model.graph.node]


@pytest.fixture(params=["im2col", "convolution"])
def weight_form(request, monkeypatch):
    """Each case in both forms of the weight gradient (the convolution form is the one
    taken past the im2col form's limits)."""
    if request.param == "convolution":
        monkeypatch.setattr(_decompositions, "IM2COL_MAX_OFFSETS", 0)
    return request.param


@pytest.mark.parametrize("spatial", [2, 1, 3])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_convolution_backward_decomposed_matches_aten(case, spatial, weight_form):
    cin, cout, k, stride, pad, dil, groups, size = case
    if spatial == 3:
        size, k = min(size, 9), min(k, 3)
    torch.manual_seed(0)
    x = torch.randn(2, cin, *[size] * spatial, dtype=torch.float64)
    w = torch.randn(cout, cin // groups, *[k] * spatial, dtype=torch.float64)
    go = torch.randn_like(CONV[spatial](x, w, None, stride, pad, dil, groups))
    sizes = [[value] * spatial for value in (stride, pad, dil)]
    args = (go, x, w, [cout], *sizes, False, [0] * spatial, groups)
    expected = torch.ops.aten.convolution_backward.default(*args, [True, True, True])
    got = _decompositions.convolution_backward(*args, [True, True, True])
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    only_input = _decompositions.convolution_backward(*args, [True, False, False])
    assert only_input[1] is None and only_input[2] is None


@pytest.mark.parametrize("spatial", [2, 1, 3])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_input_gradient_under_symbolic_sizes_matches_aten(case, spatial):
    """Traced with symbolic sizes (output_padding is then symbolic), the graph gives
    aten's input gradient at its own size and at a size it was not traced at."""
    from torch.fx.experimental.proxy_tensor import make_fx

    cin, cout, k, stride, pad, dil, groups, size = case
    if spatial == 3:
        size, k = min(size, 9), min(k, 3)
    torch.manual_seed(0)
    w = torch.randn(cout, cin // groups, *[k] * spatial, dtype=torch.float64)
    sizes = [[value] * spatial for value in (stride, pad, dil)]

    def example(extent):
        x = torch.randn(2, cin, *[extent] * spatial, dtype=torch.float64)
        go = torch.randn_like(CONV[spatial](x, w, None, stride, pad, dil, groups))
        return go, x

    def grad_input(go, x, w):
        args = (go, x, w, None, *sizes, False, [0] * spatial, groups, [True, False, False])
        return _decompositions.convolution_backward(*args)[0]

    graph = make_fx(grad_input, tracing_mode="symbolic")(*example(size), w)
    convolutions = [
        n for n in graph.graph.nodes if n.target == torch.ops.aten.convolution.default
    ]
    assert all(c.args[7] == [0] * spatial for c in convolutions)  # no output_padding
    for extent in (size, size + 1):
        go, x = example(extent)
        args = (go, x, w, None, *sizes, False, [0] * spatial, groups, [True, False, False])
        expected = torch.ops.aten.convolution_backward.default(*args)[0]
        torch.testing.assert_close(graph(go, x, w), expected, msg=str(extent))


def test_a_strided_cnn_trains_under_dynamic_shapes_in_onnx_runtime():
    """ONNX's ConvTranspose takes output_padding as an attribute: a symbolic one failed
    to export and sent the input gradient to PyTorch with a FallbackWarning."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3),
    )
    reference = copy.deepcopy(model)
    compiled = ortlab.compile(model, dynamic=True)
    for size in (12, 13, 15):
        x = torch.randn(2, 3, size, size + 2)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        compiled(x1).square().mean().backward()
        reference(x2).square().mean().backward()
        torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-6, msg=str(size))
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
            p.grad = q.grad = None
    backward = [g for g in compiled.ortlab_backend.graphs if g.kind == "backward"]
    for graph in backward:
        assert len(graph.partitions) == 1 and not graph.error
        kept = {v.target for v in graph.verdicts if not v.supported}
        assert not any(t.startswith("aten.") for t in kept), kept  # size arithmetic only


TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


# Each case, with an output_padding of 1 where the stride allows one.
TRANSPOSED_CASES = [(c, p) for c in CASES for p in (0, 1) if p < c[3]]


@pytest.mark.parametrize("spatial", [2, 1, 3])
@pytest.mark.parametrize(
    "case", TRANSPOSED_CASES, ids=lambda c: "-".join(map(str, c[0] + (c[1],)))
)
def test_transposed_convolution_backward_decomposed_matches_aten(case, spatial, weight_form):
    (cin, cout, k, stride, pad, dil, groups, size), output_padding = case
    if spatial == 3:
        size, k = min(size, 6), min(k, 3)
    torch.manual_seed(0)
    x = torch.randn(2, cin, *[size] * spatial, dtype=torch.float64)
    w = torch.randn(cin, cout // groups, *[k] * spatial, dtype=torch.float64)
    go = torch.randn_like(
        TRANSPOSED[spatial](x, w, None, stride, pad, output_padding, groups, dil)
    )
    sizes = [[value] * spatial for value in (stride, pad, dil)]
    args = (go, x, w, [cout], *sizes, True, [output_padding] * spatial, groups)
    expected = torch.ops.aten.convolution_backward.default(*args, [True, True, True])
    got = _decompositions.convolution_backward(*args, [True, True, True])
    for name, g, e in zip(("input", "weight", "bias"), got, expected):
        torch.testing.assert_close(g, e, msg=name)


def test_a_transposed_convolution_with_output_padding_past_the_stride_keeps_the_op():
    """output_padding may reach the dilation; the convolution that gives the input
    gradient would then not come back to the input's size."""
    w = torch.randn(4, 2, 3, 3)
    args = (None, None, w, None, [1, 1], [0, 0], [2, 2], True, [1, 1], 1, [True] * 3)
    assert _decompositions.convolution_backward(*args) is NotImplemented


def test_a_transposed_cnn_trains_in_onnx_runtime_whole_and_right():
    """A decoder (as in U-Net, GAN generators, VAEs): its backward graph ran wholly in
    PyTorch, as convolution_backward of a transposed convolution had no translation."""

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1, groups=2),
        )

    ops = _trains_in_one_backward_partition(make, torch.randn(2, 8, 5, 6), _square_mean)
    assert "ConvTranspose" not in ops and ops.count("Conv") == 1  # the second's input grad


def test_a_cnns_training_step_runs_in_onnx_runtime_whole_and_right():
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 5),
        )

    x, y = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
    ops = _trains_in_one_backward_partition(make, x, lambda out: F.cross_entropy(out, y))
    # The weight gradients ran as matrix products, the input gradient as ConvTranspose.
    assert "Conv" not in ops and ops.count("ConvTranspose") == 1
    assert ops.count("MatMul") + ops.count("Gemm") >= 3


def test_the_weight_gradient_form_follows_the_im2col_limits(monkeypatch):
    def form(input_shape, weight_shape, grad_shape):
        x, w, go = (
            torch.empty(s, device="meta") for s in (input_shape, weight_shape, grad_shape)
        )
        return _decompositions._im2col_fits(go, x, w)

    assert form((8, 64, 28, 28), (64, 64, 3, 3), (8, 64, 28, 28))  # a ResNet block
    assert not form((1, 3, 224, 224), (768, 3, 16, 16), (1, 768, 14, 14))  # 256 offsets
    # 64 channels x 9 offsets x 64 x 112 x 112 positions = 4.6e8 elements: too many
    assert not form((64, 64, 112, 112), (64, 64, 3, 3), (64, 64, 112, 112))
    monkeypatch.setattr(_decompositions, "IM2COL_MAX_ELEMENTS", 2**40)
    assert form((64, 64, 112, 112), (64, 64, 3, 3), (64, 64, 112, 112))


def test_symbolic_sizes_keep_the_convolution_form():
    """Choosing by size would add a guard on the symbolic sizes: the convolution form
    is taken instead."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def weight_gradient(go, x, w):
        args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])
        return _decompositions.convolution_backward(go, x, w, *args)[1]

    example = (torch.randn(2, 4, 8, 8), torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3))
    aten = torch.ops.aten
    for mode, form in (("symbolic", aten.convolution.default), ("real", aten.mm.default)):
        graph = make_fx(weight_gradient, tracing_mode=mode)(*example).graph
        targets = {n.target for n in graph.nodes if n.op == "call_function"}
        assert form in targets, mode


# -- avg_pool2d_backward ------------------------------------------------------------------

POOLS = [
    # (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    (3, 1, 1, False, False, None),  # PoolFormer's token mixer
    (2, 2, 0, False, True, None),
    (2, None, 0, True, True, None),  # stride defaults to the kernel; ceil's extra window
    (3, 2, 1, True, False, None),
    (3, 2, 1, True, True, None),
    (3, 2, 1, False, True, 4),
]


@pytest.mark.parametrize("size", [7, 8])
@pytest.mark.parametrize("pool", POOLS, ids=lambda c: "-".join(map(str, c)))
def test_avg_pool2d_backward_decomposed_matches_aten(pool, size):
    kernel, stride, pad, ceil_mode, include_pad, divisor = pool
    torch.manual_seed(0)
    x = torch.randn(2, 3, size, size + 1, dtype=torch.float64)
    go = torch.randn_like(
        F.avg_pool2d(x, kernel, stride, pad, ceil_mode, include_pad, divisor)
    )
    strides = [] if stride is None else [stride] * 2
    args = (go, x, [kernel] * 2, strides, [pad] * 2, ceil_mode, include_pad, divisor)
    expected = torch.ops.aten.avg_pool2d_backward.default(*args)
    torch.testing.assert_close(_decompositions.avg_pool2d_backward(*args), expected)
    unbatched = (go[0], x[0], *args[2:])  # [C, H, W]
    torch.testing.assert_close(
        _decompositions.avg_pool2d_backward(*unbatched), expected[0], msg="unbatched"
    )


def test_symbolic_sizes_keep_avg_pool2d_backward():
    from torch.fx.experimental.proxy_tensor import make_fx

    kept = []

    def grad(go, x):
        args = ([2, 2], [2, 2], [0, 0], False, True, None)
        out = _decompositions.avg_pool2d_backward(go, x, *args)
        kept.append(out is NotImplemented)
        return x if out is NotImplemented else out

    example = (torch.randn(2, 3, 4, 4), torch.randn(2, 3, 8, 8))
    for mode in ("real", "symbolic"):
        make_fx(grad, tracing_mode=mode)(*example)
    assert kept == [False, True]


def test_a_pooling_cnns_training_step_runs_in_onnx_runtime_whole_and_right():
    class TokenMixer(torch.nn.Module):  # PoolFormer's
        def __init__(self):
            super().__init__()
            self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)

        def forward(self, x):
            return self.pool(x) - x

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            TokenMixer(),
            torch.nn.ReLU(),
            torch.nn.AvgPool2d(2, ceil_mode=True),
            torch.nn.Conv2d(8, 8, 1),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 5),
        )

    x, y = torch.randn(4, 3, 15, 15), torch.tensor([0, 1, 2, 3])
    ops = _trains_in_one_backward_partition(make, x, lambda out: F.cross_entropy(out, y))
    assert ops.count("ConvTranspose") == 3  # two average pools, the 1x1 convolution's input


# -- adaptive pooling's backward ------------------------------------------------------------

ADAPTIVE = [
    ((8, 8), (4, 4)),  # windows that tile the input
    ((8, 9), (3, 5)),  # overlapping windows of unequal lengths
    ((10, 3), (4, 2)),
    ((3, 3), (6, 5)),  # more outputs than inputs
    ((5, 6), (1, 1)),
]


@pytest.mark.parametrize("lead", [(2, 3), (3,)], ids=["batched", "unbatched"])
@pytest.mark.parametrize("size,out", ADAPTIVE, ids=lambda c: "x".join(map(str, c)))
def test_adaptive_pool2d_backward_decomposed_matches_aten(size, out, lead):
    torch.manual_seed(0)
    x = torch.randn(*lead, *size, dtype=torch.float64)
    go = torch.randn(*lead, *out, dtype=torch.float64)
    torch.testing.assert_close(
        _decompositions.adaptive_avg_pool2d_backward(go, x),
        torch.ops.aten._adaptive_avg_pool2d_backward.default(go, x),
    )
    _, indices = F.adaptive_max_pool2d(x, out, return_indices=True)
    torch.testing.assert_close(
        _decompositions.adaptive_max_pool2d_backward(go, x, indices),
        torch.ops.aten.adaptive_max_pool2d_backward.default(go, x, indices),
    )


def test_symbolic_sizes_keep_adaptive_pool2d_backward():
    from torch.fx.experimental.proxy_tensor import make_fx

    kept = []

    def grad(go, x, indices):
        outs = [
            _decompositions.adaptive_avg_pool2d_backward(go, x),
            _decompositions.adaptive_max_pool2d_backward(go, x, indices),
        ]
        kept.append([out is NotImplemented for out in outs])
        return x

    x = torch.randn(2, 3, 8, 8)
    _, indices = F.adaptive_max_pool2d(x, 3, return_indices=True)
    for mode in ("real", "symbolic"):
        make_fx(grad, tracing_mode=mode)(torch.randn(2, 3, 3, 3), x, indices)
    assert kept == [[False, False], [True, True]]


def test_a_pyramid_pooling_cnn_trains_in_onnx_runtime_whole_and_right():
    class Pyramid(torch.nn.Module):  # PSPNet's pooling module, with a max-pooled branch
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.head = torch.nn.Conv2d(20, 5, 1)

        def forward(self, x):
            x = self.stem(x).relu()
            size = x.shape[-2:]
            branches = [F.adaptive_avg_pool2d(x, bins) for bins in (2, 3, 6)]
            branches.append(F.adaptive_max_pool2d(x, 4))
            ups = [
                F.interpolate(b, size, mode="bilinear", align_corners=False) for b in branches
            ]
            return self.head(torch.cat([x, *ups], 1))

    def make():
        torch.manual_seed(0)
        return Pyramid()

    ops = _trains_in_one_backward_partition(make, torch.randn(2, 3, 13, 11), _square_mean)
    assert "ScatterElements" in ops and ops.count("MatMul") >= 6


# -- _weight_norm_interface_backward -------------------------------------------------------


@pytest.mark.parametrize("shape,dim", [((4, 3, 5), 0), ((4, 3, 5), 2), ((6, 7), 1)])
def test_weight_norm_backward_decomposed_matches_aten(shape, dim):
    torch.manual_seed(0)
    v = torch.randn(shape, dtype=torch.float64)
    g = torch.randn([size if d == dim else 1 for d, size in enumerate(shape)], dtype=v.dtype)
    w, norms = torch.ops.aten._weight_norm_interface(v, g, dim)
    args = (torch.randn_like(w), v, g, norms, dim)
    expected = torch.ops.aten._weight_norm_interface_backward.default(*args)
    got = _decompositions.weight_norm_interface_backward(*args)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_a_weight_normed_convolution_trains_in_onnx_runtime_whole():
    """wav2vec2's positional convolution: weight norm over the kernel dim."""

    def make():
        torch.manual_seed(0)
        conv = torch.nn.Conv1d(8, 8, 5, padding=2, groups=2)
        return torch.nn.utils.parametrizations.weight_norm(conv, dim=2)

    _trains_in_one_backward_partition(make, torch.randn(2, 8, 12), _square_mean, exact=True)


# -- as_strided_scatter -------------------------------------------------------------------

SCATTERS = [
    # (input shape, size, stride, storage offset)
    ((4, 6), (3, 2), (6, 1), 0),
    ((4, 6), (2, 3), (1, 4), 1),  # a transposed window
    ((24,), (3, 4), (8, 2), 1),
    ((2, 3, 4), (3, 2), (4, 1), 5),
    ((5, 5), (5,), (6,), 0),  # the diagonal
]


@pytest.mark.parametrize("case", SCATTERS, ids=str)
def test_as_strided_scatter_decomposed_matches_aten(case):
    shape, size, stride, offset = case
    torch.manual_seed(0)
    x, src = torch.randn(shape, dtype=torch.float64), torch.randn(size, dtype=torch.float64)
    expected = torch.as_strided_scatter(x, src, size, stride, offset)
    got = _decompositions.as_strided_scatter(x, src, size, stride, offset)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "x,size,stride",
    [
        (torch.randn(6, 4).t(), (2, 2), (4, 1)),  # a strided input: storage is not values
        (torch.randn(4, 6)[1:], (2, 2), (6, 1)),  # an input at a storage offset
        (torch.randn(4, 6), (3, 3), (2, 1)),  # positions that overlap
        (torch.randn(4, 6), (2, 2), (0, 1)),
    ],
    ids=["strided", "offset", "overlap", "stride-0"],
)
def test_as_strided_scatter_keeps_the_op_where_values_are_not_storage(x, size, stride):
    src = torch.randn(size)
    assert _decompositions.as_strided_scatter(x, src, size, stride, 0) is NotImplemented


def test_pooling_a_transposed_sequence_trains_in_onnx_runtime_whole():
    """Swin's pooler: its backward wrote through a strided view (as_strided_scatter)."""

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.LayerNorm(32))
            self.pool = torch.nn.AdaptiveAvgPool1d(1)
            self.head = torch.nn.Linear(32, 3)

        def forward(self, x):
            return self.head(torch.flatten(self.pool(self.body(x).transpose(1, 2)), 1))

    def make():
        torch.manual_seed(0)
        return Pooled()

    _trains_in_one_backward_partition(make, torch.randn(2, 5, 8), _square_mean, exact=True)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_decompositions_keep_their_inputs_device_and_dtype(device, dtype):
    x = torch.randn(2, 3, 8, 8, dtype=dtype, device=device)
    go = torch.randn(2, 3, 4, 4, dtype=dtype, device=device)
    pooled = _decompositions.avg_pool2d_backward(
        go, x, [2, 2], [2, 2], [0, 0], False, True, None
    )
    assert pooled.device == x.device and pooled.dtype == dtype
    flat = torch.randn(24, dtype=dtype, device=device)
    src = torch.randn(3, 4, dtype=dtype, device=device)
    scattered = _decompositions.as_strided_scatter(flat, src, [3, 4], [8, 2], 1)
    assert scattered.device == flat.device and scattered.dtype == dtype
    spread = _decompositions.adaptive_avg_pool2d_backward(go[..., :3, :3], x)
    assert spread.device == x.device and spread.dtype == dtype
    indices = torch.zeros(2, 3, 4, 4, dtype=torch.int64, device=device)
    gathered = _decompositions.adaptive_max_pool2d_backward(go, x, indices)
    assert gathered.device == x.device and gathered.dtype == dtype


def test_a_pooling_cnn_trains_under_bfloat16_autocast_in_onnx_runtime():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.AvgPool2d(2), torch.nn.Flatten()
    )
    x = torch.randn(2, 3, 8, 8)
    backend = ortlab.OrtBackend()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.compile(model, backend=backend)(x).float().square().mean().backward()
    assert {g.kind for g in backend.graphs} == {"forward", "backward"}
    assert all(g.error is None and not g.eager_node_names for g in backend.graphs)


# -- diagonal_scatter (the backward of diagonal and trace) ---------------------------------


class _Gram(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.l(x)
        return (h @ h.t()).diagonal().tanh().sum() + torch.trace(h @ h.t())


class _DiagonalOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(2, 4, 3))

    def forward(self, x):
        return torch.diagonal(x * self.p, -1, 2, 1)  # an output view, dims out of order


@pytest.mark.parametrize("cls,shape", [(_Gram, (3, 4)), (_DiagonalOut, (2, 4, 3))])
def test_diagonal_and_trace_train_in_onnx_runtime(cls, shape):
    torch.manual_seed(0)
    model = cls()
    torch.manual_seed(0)
    reference = cls()
    x = torch.randn(shape)
    backend = ortlab.OrtBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert [g.kind for g in backend.graphs] == ["forward", "backward"]
    for g in backend.graphs:
        assert g.error is None and g.lowering == "aot_autograd"
        assert g.eager_node_names == () and len(g.partitions) == 1


def test_a_write_into_a_diagonal_is_right_without_grad():
    def f(x):
        y = x * 2
        y.diagonal(1).mul_(3)
        return torch.diagonal_scatter(y, x.diagonal() + 7)

    x = torch.arange(12.0).reshape(3, 4)
    with torch.no_grad():
        got = torch.compile(f, backend=ortlab.OrtBackend())(x)
        torch.testing.assert_close(got, f(x), rtol=0, atol=0)


def test_diagonal_scatter_decomposed_matches_aten():
    torch.manual_seed(0)
    for shape in [(3, 4), (4, 3), (5, 5), (2, 3, 4), (1, 1)]:
        rank = len(shape)
        for d1, d2 in itertools.permutations(range(-rank, rank), 2):
            if d1 % rank == d2 % rank:
                continue
            for offset in range(-5, 6):
                x = torch.randn(shape, dtype=torch.float64)
                src = torch.randn(x.diagonal(offset, d1, d2).shape, dtype=torch.float64)
                expected = torch.diagonal_scatter(x, src, offset, d1, d2)
                got = _decompositions.diagonal_scatter(x, src, offset, d1, d2)
                torch.testing.assert_close(got, expected, rtol=0, atol=0)
