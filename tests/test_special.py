"""lgamma and digamma run in ONNX Runtime (ONNX has no op for either; see _special), as
accurate as eager or more, with eager's poles, infinities and NaN."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import ortlab


def _points(dtype: torch.dtype) -> torch.Tensor:
    edges = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, -0.5, 1e-30, -1e-30, -12345.25]
    edges += [3e38, -3e38, 4.0371103e36, 4.03e36, math.inf, -math.inf, math.nan]
    values = torch.cat(
        [
            torch.linspace(-30, 30, 20001),
            torch.logspace(-20, 36, 400),
            -torch.logspace(-20, 7, 400) - 0.3,
            torch.tensor(edges),
        ]
    )
    return values.to(dtype)


def _in_onnx_runtime(backend: ortlab.OrtBackend) -> None:
    for graph in backend.graphs:
        assert len(graph.partitions) == 1
        assert not graph.eager_node_names, [graph.verdict(n) for n in graph.eager_node_names]


@pytest.mark.parametrize("op", ["lgamma", "digamma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gamma_functions_run_in_onnx_runtime_as_accurately_as_eager(op, dtype):
    fn = getattr(torch, op)
    x = _points(dtype)
    backend = ortlab.OrtBackend()
    got = torch.compile(lambda x: fn(x) * 1, backend=backend)(x)
    _in_onnx_runtime(backend)
    expected = fn(x)
    assert got.dtype == expected.dtype
    # Poles, infinities and NaN where eager has them.
    assert torch.equal(got.isnan(), expected.isnan())
    special = ~torch.isfinite(expected)
    assert torch.equal(got[special & ~expected.isnan()], expected[special & ~expected.isnan()])
    # Elsewhere within half an ulp of the exact value (float64's result, rounded), and
    # never more than an ulp further from it than eager (whose float32 digamma is up to
    # 4e5 ulps off near its roots).
    finite = ~special
    exact = fn(x.double())[finite]
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(torch.finfo(dtype).tiny)
    ours = (got[finite].double() - exact).abs() / ulp
    eagers = (expected[finite].double() - exact).abs() / ulp
    assert bool((ours <= eagers + 1).all()), float((ours - eagers).max())
    if dtype == torch.float32:
        assert float(ours.max()) <= 1.0


@pytest.mark.parametrize("op", ["lgamma", "digamma"])
def test_float64_gamma_functions_keep_the_op_in_pytorch(op):
    # The float64 forms are 1e-15 relative, not float64's last digit: eager's numbers.
    fn = getattr(torch, op)
    x = _points(torch.float64)
    backend = ortlab.OrtBackend()
    got = torch.compile(lambda x: fn(x) * 1, backend=backend)(x)
    assert torch.equal(got.nan_to_num(), fn(x).nan_to_num())
    (graph,) = backend.graphs
    assert [graph.verdict(n).target for n in graph.eager_node_names] == [f"aten.{op}.default"]


def test_a_student_t_likelihood_trains_in_one_partition_per_graph():
    # The StudentT head of transformers' time-series models: lgamma of the learned
    # degrees of freedom in the forward, digamma in the backward. Both cut the graphs.
    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 3)

        def forward(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            df, loc, scale = self.proj(h).unbind(-1)
            dist = torch.distributions.StudentT(
                2.0 + F.softplus(df), loc, F.softplus(scale) + 1e-3, validate_args=False
            )
            return -dist.log_prob(y).mean()

    torch.manual_seed(0)
    eager = Head()
    model = copy.deepcopy(eager)
    backend = ortlab.OrtBackend()
    h, y = torch.randn(64, 8), torch.randn(64) * 3
    loss = torch.compile(model, backend=backend)(h, y)
    loss.backward()
    expected = eager(h, y)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert [g.kind for g in backend.graphs] == ["forward", "backward"]
    _in_onnx_runtime(backend)
