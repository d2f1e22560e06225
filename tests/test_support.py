"""Verdict rules: every call_function node is decided with a reason a person can act on."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ortlab.backend import _support, _torch_private


@pytest.fixture(scope="module")
def registry():
    return _torch_private.onnx_registry()


def _verdicts(fn, *args, registry, **support_kwargs):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    support = _support.OrtOperatorSupport(registry, **support_kwargs)
    return {n.name: support.verdict(n) for n in gm.graph.nodes if n.op == "call_function"}, gm


def test_registered_ops_are_supported(registry):
    verdicts, _ = _verdicts(lambda x: x.sin() + 1, torch.randn(3), registry=registry)
    assert all(v.supported for v in verdicts.values())
    assert {v.target for v in verdicts.values()} == {"aten.sin.default", "aten.add.Tensor"}


def test_getitem_follows_its_producer(registry):
    def f(x):
        values, indices = torch.sort(x)
        return values, indices

    verdicts, gm = _verdicts(f, torch.randn(5), registry=registry)
    getitems = [n for n in gm.graph.nodes if n.target is operator.getitem]
    assert getitems and all(verdicts[n.name].supported for n in getitems)
    assert "supported node" in verdicts[getitems[0].name].reason

    excluded, gm2 = _verdicts(f, torch.randn(5), registry=registry, excluded_ops=["aten.sort"])
    for n in gm2.graph.nodes:
        if n.target is operator.getitem:
            assert not excluded[n.name].supported
            assert "runs in PyTorch" in excluded[n.name].reason


def test_mutating_ops_stay_eager(registry):
    def f(x):
        y = x.clone()
        y.add_(1)
        return y

    verdicts, _ = _verdicts(f, torch.randn(3), registry=registry)
    add_ = next(v for v in verdicts.values() if v.target == "aten.add_.Tensor")
    assert not add_.supported and "in place" in add_.reason


def test_unmappable_dtypes_stay_eager(registry):
    verdicts, _ = _verdicts(
        lambda x: x * 2, torch.randn(3, dtype=torch.bfloat16), registry=registry
    )
    (v,) = verdicts.values()
    assert not v.supported and "bfloat16" in v.reason


def test_random_ops_stay_eager_but_attention_without_dropout_runs(registry):
    verdicts, _ = _verdicts(
        lambda x: torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x),
        torch.randn(4),
        registry=registry,
    )
    rng = [v for v in verdicts.values() if "random op" in v.reason]
    assert rng, verdicts

    q = torch.randn(1, 2, 4, 8)
    attn, _ = _verdicts(
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
        q,
        q,
        q,
        registry=registry,
    )
    sdpa = [v for v in attn.values() if "scaled_dot_product" in v.target]
    assert sdpa and all(v.supported for v in sdpa), attn


def test_symbolic_scalars_and_assertions_stay_in_python(registry):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def f(x):
        n = x.shape[0]
        return x.view(n * 2, -1)

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(4, 6), static_shapes=False)
    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 6))
    support = _support.OrtOperatorSupport(registry)
    verdicts = [support.verdict(n) for n in gm.graph.nodes if n.op == "call_function"]
    scalar = [v for v in verdicts if "Python/symbolic scalar" in v.reason]
    assert scalar and all(not v.supported for v in scalar)
    del x


def test_unregistered_ops_name_the_registry(registry):
    from torch.fx import Graph, GraphModule

    graph = Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten._cdist_forward.default, (x, x, 2.0, None))
    node.meta["val"] = torch.empty(2, 2, device="meta")
    graph.output(node)
    gm = GraphModule(torch.nn.Module(), graph)
    support = _support.OrtOperatorSupport(registry)
    verdict = support.verdict(next(n for n in gm.graph.nodes if n.op == "call_function"))
    assert not verdict.supported and "torchlib" in verdict.reason


@pytest.mark.parametrize(
    "excluded",
    [
        torch.ops.aten.sin.default,
        torch.ops.aten.sin,
        "aten.sin",
        "aten::sin",
        "aten.sin.default",
    ],
)
def test_excluded_ops_accept_overloads_packets_and_names(registry, excluded):
    verdicts, _ = _verdicts(
        lambda x: x.sin().cos(), torch.randn(3), registry=registry, excluded_ops=[excluded]
    )
    by_target = {v.target: v for v in verdicts.values()}
    assert not by_target["aten.sin.default"].supported
    assert by_target["aten.cos.default"].supported


def test_attention_whose_logsumexp_is_used_stays_eager(registry):
    """torchlib returns zeros for logsumexp; if backward reads it, ORT would be wrong."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    q = torch.randn(1, 2, 4, 8)

    def only_output(q):
        return op(q, q, q)[0]

    def with_logsumexp(q):
        out, lse = op(q, q, q)
        return out, lse

    used, _ = _verdicts(with_logsumexp, q, registry=registry)
    attn = next(v for v in used.values() if "flash_attention" in v.target)
    assert not attn.supported and "logsumexp" in attn.reason
    unused, _ = _verdicts(only_output, q, registry=registry)
    assert next(v for v in unused.values() if "flash_attention" in v.target).supported


def test_source_is_the_innermost_frame_outside_torch(tmp_path):
    import os

    graph = torch.fx.Graph()
    node = graph.call_function(torch.ops.aten.relu.default, ())
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py")
    node.meta["stack_trace"] = (
        f'  File "{tmp_path / "project" / "model.py"}", line 12, in forward\n'
        "    h = self.block(x)\n"
        f'  File "{tmp_path / "project" / "blocks.py"}", line 40, in forward\n'
        "    return F.relu(self.fc(x))\n"
        "           ^^^^^^^^^^^^^^^^^^\n"
        f'  File "{torch_file}", line 1700, in relu\n'
        "    result = torch.relu(input)\n"
    )
    assert _support.user_source(node) == "blocks.py:40 in forward: return F.relu(self.fc(x))"
    node.meta["stack_trace"] = f'  File "{torch_file}", line 1700, in relu\n'
    assert _support.user_source(node) == "torch/nn/functional.py:1700 in relu"
    del node.meta["stack_trace"]
    assert _support.user_source(node) == ""


def test_dynamo_resume_functions_and_notebook_cells_read_as_people_name_them(tmp_path):
    assert _support.function_name("forward") == "forward"
    assert (
        _support.function_name("torch_dynamo_resume_in_forward_at_11")
        == "forward (resumed after line 11)"
    )
    # ipykernel compiles a cell to <tmp>/ipykernel_<pid>/<hash>.py
    assert _support.short_path(str(tmp_path / "ipykernel_4242" / "497510299.py")) == "cell"
