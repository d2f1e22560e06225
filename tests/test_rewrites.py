"""The ATen-graph rewrites of ``_rewrites``: each rewritten graph computes what the
original computes (run in PyTorch), and has the form whose translation is right."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from ortlab.backend import _rewrites

aten = torch.ops.aten


def _aten_graph(fn, *args):
    """``fn`` traced to ATen with fake values in every node's ``meta["val"]``."""
    return make_fx(fn, tracing_mode="fake")(*args)


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _qkv(q_heads=4, kv_heads=2, batch=(2,)):
    torch.manual_seed(0)
    q = torch.randn(*batch, q_heads, 5, 8)
    k = torch.randn(*batch, kv_heads, 5, 8)
    v = torch.randn(*batch, kv_heads, 5, 8)
    return q, k, v


@pytest.mark.parametrize(("q_heads", "batch"), [(4, (2,)), (6, (2,)), (8, (1,))], ids=str)
def test_gqa_attention_gets_its_key_and_value_heads_repeated(q_heads, batch):
    q, k, v = _qkv(q_heads, 2, batch)
    gm = _aten_graph(_gqa, q, k, v)
    rewritten = _rewrites.for_onnx(gm)
    assert rewritten is not gm
    attention = [n for n in rewritten.graph.nodes if n.target in _rewrites._ATTENTION_OPS]
    assert len(attention) == 1
    for kv in attention[0].args[1:3]:
        assert kv.meta["val"].shape == q.shape  # as many heads as the query
    torch.testing.assert_close(rewritten(q, k, v), _gqa(q, k, v))
    # Head i of the query reads key/value head i // n_rep (repeat_interleave).
    repeats = q_heads // 2
    expected = F.scaled_dot_product_attention(
        q,
        k.repeat_interleave(repeats, dim=-3),
        v.repeat_interleave(repeats, dim=-3),
        is_causal=True,
    )
    torch.testing.assert_close(rewritten(q, k, v), expected)


def test_math_attention_with_enable_gqa_is_rewritten_with_it_turned_off():
    q, k, v = _qkv()

    def math(q, k, v):
        return aten._scaled_dot_product_attention_math.default(
            q, k, v, None, 0.0, True, None, enable_gqa=True
        )[0]

    graph = torch.fx.Graph()
    nodes = [graph.placeholder(name) for name in "qkv"]
    attention = graph.call_function(
        aten._scaled_dot_product_attention_math.default,
        (*nodes, None, 0.0, True, None),
        {"enable_gqa": True},
    )
    graph.output(graph.call_function(operator.getitem, (attention, 0)))
    fake = _aten_graph(math, q, k, v)  # for fake values of the same shapes
    values = [n.meta["val"] for n in fake.graph.nodes if n.op == "placeholder"]
    for node, value in zip(nodes, values):
        node.meta["val"] = value
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert _rewrites.expand_kv_heads(gm) == 1
    assert attention.kwargs["enable_gqa"] is False
    torch.testing.assert_close(gm(q, k, v), math(q, k, v))


def test_attention_with_as_many_key_as_query_heads_is_left_alone():
    q, k, v = _qkv(4, 4)
    gm = _aten_graph(_gqa, q, k, v)
    assert _rewrites.for_onnx(gm) is gm


def test_for_onnx_leaves_the_graph_it_receives_unchanged():
    q, k, v = _qkv()
    gm = _aten_graph(_gqa, q, k, v)
    before = _targets(gm)
    _rewrites.for_onnx(gm)
    assert _targets(gm) == before
