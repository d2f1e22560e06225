"""PyTorch's numbers at the edges (``_accurate``; sigmoid's tail by ``_passes``):
log1p/expm1 near 0, logaddexp's overflow, float remainder and floor division, integer
division with a rounding mode and fmod, NaN through sign/heaviside/angle/xlogy, the
infinity norms and logit, atan2's signed zeros and corners, histc's bin edges, var/std
with a correction at least the count, and negative indices where eager raises, each run
whole in ONNX Runtime."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import ortlab

INF, NAN = math.inf, math.nan


def _run(f, *args):
    """``f`` compiled, its result, and whether every node ran in ONNX Runtime."""
    compiled = ortlab.compile(f)
    got = compiled(*args)
    graphs = compiled.ortlab_backend.graphs
    assert graphs and all(not g.eager_node_names for g in graphs)
    return got


def _same(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def test_sigmoid_keeps_its_tail_where_onnx_runtimes_kernel_gives_zero():
    x = torch.cat([torch.linspace(-87, 87, 2001), torch.tensor([-20.0, -30.0, INF, -INF])])
    got = _run(torch.sigmoid, x)
    # ONNX Runtime's Sigmoid: 0 below about -18, 2x off at -17, 1e-5 relative at -5.
    torch.testing.assert_close(got, torch.sigmoid(x), rtol=1e-6, atol=0)
    assert got[-4] > 2e-9  # sigmoid(-20) = 2.06e-9


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_sigmoid_is_computed_in_float32_and_rounded_once(dtype):
    x = torch.linspace(-20, 20, 801).to(dtype)
    compiled = ortlab.compile(torch.sigmoid)
    _same(compiled(x), torch.sigmoid(x))
    # Spelled out (rounding hides the kernel's error at these sizes): no Sigmoid left.
    (session,) = compiled.ortlab_backend.sessions
    ops = [n.op_type for n in session.model.graph.node]
    assert "Sigmoid" not in ops and ops.count("Cast") == 2, ops


def test_a_sigmoid_and_bce_discriminator_gives_its_generator_a_gradient():
    # DCGAN's nn.Sigmoid + nn.BCELoss: a confident "fake" (logit -25) still gives the
    # generator a gradient of -1 per logit; through ONNX Runtime's Sigmoid it was 0 and
    # the loss 100 instead of 25.
    torch.manual_seed(0)
    discriminator = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
    with torch.no_grad():
        discriminator[0].weight.fill_(5.0)
        discriminator[0].bias.fill_(-5.0)
    fake = torch.full((8, 4), -1.0) + 0.01 * torch.randn(8, 4)

    def generator_loss(z):
        return nn.functional.binary_cross_entropy(discriminator(z), torch.ones(8, 1))

    z_eager = fake.clone().requires_grad_()
    expected = generator_loss(z_eager)
    expected.backward()
    z = fake.clone().requires_grad_()
    compiled = ortlab.compile(generator_loss)
    loss = compiled(z)
    loss.backward()
    torch.testing.assert_close(loss, expected)
    assert 24 < loss.item() < 26
    torch.testing.assert_close(z.grad, z_eager.grad)
    assert z.grad.abs().min() > 0.5
    assert all(not g.eager_node_names for g in compiled.ortlab_backend.graphs)


@pytest.mark.parametrize("op", [torch.logaddexp, torch.logaddexp2])
def test_logaddexp_neither_overflows_nor_underflows(op):
    a = torch.tensor([1000.0, -1000.0, 100.0, INF, -INF, INF, NAN, 3.0, -2.0, 0.5])
    b = torch.tensor([1000.0, -1000.0, 100.0, INF, -INF, 1.0, 1.0, -50.0, 7.0, 0.5])
    got = _run(op, a, b)
    torch.testing.assert_close(got, op(a, b), equal_nan=True)
    assert math.isfinite(got[0]) and math.isfinite(got[1])


def test_float_remainder_and_floor_division_are_atens():
    torch.manual_seed(0)
    a = torch.cat([torch.randn(2000) * 100, torch.tensor([1.0, -1.0, 1.0, -1.0, 0.3, -0.7])])
    b = torch.cat([torch.randn(2000), torch.tensor([0.1, 0.1, INF, INF, 0.1, 0.1])])

    def f(a, b):
        return (a % b, a.remainder(-0.37), a // b, a // 0.1,
                torch.div(a, b, rounding_mode="floor"))  # fmt: skip

    for got, expected in zip(_run(f, a, b), f(a, b), strict=True):
        _same(got, expected)  # 1.0 // 0.1 is 9, 1.0 % 0.1 is 0.0999999866, -1 % inf inf


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_with_a_rounding_mode_and_fmod_are_exact(dtype):
    big = torch.iinfo(dtype).max
    a = torch.tensor([2**24 + 1, -(2**24) - 1, big, -big, 7, -7, 0], dtype=dtype)
    b = torch.tensor([1, 3, 2, 3, -2, 2, 5], dtype=dtype)

    def f(a, b):
        trunc, floor = (torch.div(a, b, rounding_mode=m) for m in ("trunc", "floor"))
        rows = a.reshape(1, -1).expand(2, -1)  # broadcast against b
        broadcast = torch.div(rows, b, rounding_mode="trunc"), rows.fmod(b)
        return trunc, floor, torch.div(a, 3, rounding_mode="trunc"), a.fmod(b), *broadcast

    # torchlib divided in float32 (2**24 + 1 came back 2**24) and fmod'ed in float.
    for got, expected in zip(_run(f, a, b), f(a, b), strict=True):
        _same(got, expected)


def test_integer_division_by_zero_with_a_rounding_mode_raises_as_eager():
    f = lambda a, b: torch.div(a, b, rounding_mode="trunc")  # noqa: E731
    a, b = torch.tensor([5, -5]), torch.tensor([0, 2])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # was INT64_MIN
        ortlab.compile(f)(a, b)


def test_nan_through_sign_heaviside_angle_and_xlogy():
    x = torch.tensor([NAN, 2.0, -3.0, 0.0])
    y = torch.tensor([NAN, 0.5, 2.0, NAN])

    def f(x, y):
        half = torch.full_like(x, 0.5)
        return (torch.sign(x), torch.sgn(x), torch.heaviside(x, half), torch.angle(x),
                torch.xlogy(x, y), torch.xlogy(0.0, y), torch.xlogy(2, y))  # fmt: skip

    for got, expected in zip(_run(f, x, y), f(x, y), strict=True):
        _same(got, expected)


def test_atan2_turns_by_the_sign_of_zero_and_keeps_nan_and_the_infinite_corners():
    y = torch.tensor([0.0, -0.0, 0.0, -0.0, 2.0, INF, -INF, INF, 1.0, NAN, 1.0, 0.0])
    x = torch.tensor([-1.0, -1.0, 0.0, -0.0, -0.0, INF, -INF, 2.0, -INF, 1.0, NAN, 3.0])
    # torchlib's: atan2(0, -1) = -pi, atan2(2, -0.0) = -pi/2, (inf, inf) = 0, NaN -> 0.
    _same(_run(torch.atan2, y, x), torch.atan2(y, x))
    for other in (torch.tensor(-1.0, dtype=torch.float64), torch.tensor(-0.0)):  # promoted
        for narrow in (y, y.half()):
            _same(_run(torch.atan2, narrow, other), torch.atan2(narrow, other))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_atan2_of_ordinary_values_is_within_an_ulp(dtype):
    g = torch.Generator().manual_seed(0)
    y = (torch.randn(20000, generator=g) * torch.logspace(-3, 3, 20000)).to(dtype)
    x = torch.randn(20000, generator=g).to(dtype)
    got, expected = _run(torch.atan2, y, x), torch.atan2(y, x)
    ulp = torch.finfo(dtype).eps * math.pi  # results are at most pi
    assert (got.double() - expected.double()).abs().max() <= ulp
    if dtype != torch.float32:  # computed in float32 and rounded once, as eager
        assert (got != expected).float().mean() < 1e-3


@pytest.mark.parametrize(
    ("x", "bounds"),
    [
        (torch.linspace(-2, 2, 401), dict(min=-2, max=2)),  # values on the edges
        (torch.tensor([-1.2, 1.2, 2.0, 2.5, -3.0, NAN]), dict(min=-2, max=2)),
        (torch.full((7,), 3.0), {}),  # no bounds: the data's, widened by 1
        (torch.linspace(-2, 2, 401, dtype=torch.float16), dict(min=-1, max=1.5)),
    ],
    ids=["edges", "outside-and-nan", "no-bounds", "float16"],
)
def test_histc_bins_as_atens_arithmetic(x, bounds):
    # torchlib's compares with float64 edges rounded to float32: -1.2 fell in bin 1.
    f = lambda x: torch.histc(x * 1, bins=5, **bounds)  # noqa: E731
    _same(_run(f, x), f(x))


def test_histc_without_bounds_over_data_that_is_not_finite_raises_as_eager():
    """Also the first call of a new graph (another shape) on such data: the first run of
    its session fails, PyTorch's run too, and the partition stays in ONNX Runtime."""
    f = lambda x: torch.histc(x * 1, bins=4)  # noqa: E731
    good, bad, good_too = [torch.tensor(v) for v in ([1.0, 2.0, 3.0], [1.0, INF], [1.0, 2.0])]
    with pytest.raises(RuntimeError):
        f(bad)
    compiled = ortlab.compile(f)
    _same(compiled(good), f(good))
    with pytest.raises(RuntimeError):  # PyTorch's run of the partition: its index error
        compiled(bad)
    _same(compiled(good_too), f(good_too))
    partitions = compiled.ortlab_backend.partitions
    assert [(p.state, p.error, p.run_count) for p in partitions] == [("ort", None, 1)] * 2


def test_nan_through_the_infinity_norms_and_logit_with_eps():
    x = torch.tensor([[5.0, 1.0, NAN, 0.0], [NAN, 1.0, 2.0, 0.0], [-7.0, 1.0, 2.0, 3.0]])

    def f(x):
        norms = torch.linalg.vector_norm(x, INF, dim=1), torch.linalg.vector_norm(x, -INF)
        logits = torch.logit(x / 8, eps=1e-6), torch.logit(x / 8, eps=0.7)  # lower bound first
        return *norms, torch.nn.functional.normalize(x, p=INF), *logits

    # ReduceMax skipped NaN ([5, 1, nan, 0] gave 5); Clip made logit(nan) 13.8.
    for got, expected in zip(_run(f, x), f(x), strict=True):  # log's last bit may differ
        torch.testing.assert_close(got, expected, rtol=2.4e-7, atol=0, equal_nan=True)


def test_var_and_std_with_a_correction_at_least_the_count():
    x = torch.tensor([[1.0, 2.0], [3.0, 3.0]])

    def f(x):
        return (x.var(dim=1, correction=3), x.std(dim=1, correction=2),
                x.var(correction=1), x.var(dim=0, correction=2, keepdim=True))  # fmt: skip

    for got, expected in zip(_run(f, x), f(x), strict=True):
        _same(got, expected)  # inf, or NaN where the values do not spread


_TABLE = torch.randn(10, 4)
_ROWS = torch.randn(4, 6)


@pytest.mark.parametrize(
    "op",
    [
        lambda i: nn.functional.embedding(i, _TABLE),
        lambda i: _ROWS.index_select(1, i),
        lambda i: _ROWS.gather(1, i.expand(4, -1)),
        lambda i: _ROWS.index_add(1, i, torch.ones(4, 3)),
        lambda i: _ROWS.index_copy(1, i, torch.ones(4, 3)),
    ],
    ids=["embedding", "index_select", "gather", "index_add", "index_copy"],
)
def test_a_negative_index_that_eager_rejects_raises_and_onnx_runtime_keeps_running(op):
    # ONNX takes -1 from the end: an embedding of -100 (labels copied into input_ids)
    # read a row where eager raises.
    good, bad = torch.tensor([0, 2, 5]), torch.tensor([0, -1, 5])
    with pytest.raises((IndexError, RuntimeError)):
        op(bad)
    compiled = ortlab.compile(op)
    _same(compiled(good), op(good))
    with pytest.raises((IndexError, RuntimeError)):
        compiled(bad)
    _same(compiled(good), op(good))
    (partition,) = compiled.ortlab_backend.partitions
    assert partition.state == "ort" and partition.run_count == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log1p_expm1_and_logsigmoid_keep_every_digit_near_zero(dtype):
    small = torch.logspace(-30, 0, 200)
    x = torch.cat([small, -small[:-1], torch.linspace(-120, 88, 500)]).to(dtype)
    specials = torch.tensor([0.0, -0.0, INF, -INF, NAN, -1.0], dtype=dtype)

    def f(x, specials):
        below = -x.abs().clamp(max=0.999)
        return (torch.log1p(x.abs()), torch.log1p(below), torch.expm1(x),
                nn.functional.logsigmoid(x),
                torch.log1p(specials), torch.expm1(specials))  # fmt: skip

    tolerance = 1e-6 if dtype == torch.float32 else 1e-15
    got, expected = _run(f, x, specials), f(x, specials)
    for g, e in zip(got[:4], expected[:4], strict=True):  # log1p(1e-10) was 0
        torch.testing.assert_close(g, e, rtol=tolerance, atol=0)
    for g, e in zip(got[4:], expected[4:], strict=True):
        _same(g, e)
