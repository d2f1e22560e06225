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


def _strided(a):
    return (a + 1).t().as_strided((2, 3), (1, 4)) * 2


def _as_strided_inputs(gm):
    return [n.args[0] for n in gm.graph.nodes if n.target is aten.as_strided.default]


def test_as_strided_on_a_view_reads_the_value_the_view_shares_its_memory_with():
    x = torch.arange(12.0).reshape(3, 4)
    gm = _aten_graph(_strided, x)
    assert _rewrites.storage_readers_kept_in_pytorch(gm)  # not rewritten: not right in ORT
    rewritten = _rewrites.for_onnx(gm)
    (source,) = _as_strided_inputs(rewritten)
    assert source.target is aten.add.Tensor
    assert aten.t.default not in _targets(rewritten)  # the view had no other user
    torch.testing.assert_close(rewritten(x), _strided(x))
    assert _rewrites.storage_readers_kept_in_pytorch(rewritten) == {}


def test_as_strided_rebased_gets_the_views_storage_offset():
    def fn(a):
        return (a + 1)[1:].t().as_strided((2, 2), (1, 4)) * 2

    x = torch.arange(12.0).reshape(3, 4)
    rewritten = _rewrites.for_onnx(_aten_graph(fn, x))
    (node,) = [n for n in rewritten.graph.nodes if n.target is aten.as_strided.default]
    assert node.args[0].target is aten.add.Tensor
    assert node.args[3] == 4
    torch.testing.assert_close(rewritten(x), fn(x))


def test_as_strided_through_split_outputs_is_rebased():
    def fn(a):
        return (a + 1).split(2, dim=1)[1].as_strided((2, 2), (1, 3), 1) * 2

    x = torch.arange(12.0).reshape(3, 4)
    rewritten = _rewrites.for_onnx(_aten_graph(fn, x))
    (source,) = _as_strided_inputs(rewritten)
    assert source.target is aten.add.Tensor
    torch.testing.assert_close(rewritten(x), fn(x))


def test_as_strided_on_a_non_contiguous_graph_input_is_kept_in_pytorch():
    def fn(a):
        return a.t().as_strided((2, 3), (1, 4)) * 2

    x = torch.arange(12.0).reshape(4, 3).t()  # non-contiguous input
    gm = _aten_graph(fn, x)
    assert _rewrites.for_onnx(gm) is gm
    kept = _rewrites.storage_readers_kept_in_pytorch(gm)
    assert set(kept) == {"t", "as_strided"}  # the input itself is read as it is
    assert "not contiguous" in kept["as_strided"]


def test_as_strided_with_an_explicit_offset_into_a_graph_input_is_kept_in_pytorch():
    def fn(a):
        return a.as_strided((2, 3), (1, 4), 1) * 2

    gm = _aten_graph(fn, torch.arange(12.0).reshape(3, 4))
    kept = _rewrites.storage_readers_kept_in_pytorch(gm)
    assert list(kept) == ["as_strided"]
    assert "storage offset" in kept["as_strided"]


def test_as_strided_on_a_channels_last_value_keeps_its_producer_in_pytorch():
    def fn(a):
        b = (a + 1).contiguous(memory_format=torch.channels_last)
        return b.permute(0, 2, 3, 1).as_strided((2, 3), (1, 4)) * 2

    gm = _aten_graph(fn, torch.arange(24.0).reshape(2, 3, 2, 2))
    assert _rewrites.for_onnx(gm) is gm
    kept = _rewrites.storage_readers_kept_in_pytorch(gm)
    assert set(kept) == {"clone", "permute", "as_strided"}


def test_as_strided_reading_beyond_its_input_is_kept_in_pytorch():
    def fn(a):
        return a[:2].as_strided((2, 3), (1, 4)) * 2  # reads a[2, 1]: beyond a[:2]

    gm = _aten_graph(fn, torch.arange(12.0).reshape(3, 4))
    rewritten = _rewrites.for_onnx(gm)  # rebased onto the whole input: within it
    assert _rewrites.storage_readers_kept_in_pytorch(rewritten) == {}

    def beyond(a):
        return a.as_strided((2, 3), (1, 5)) * 2  # element 11 of 8

    kept = _rewrites.storage_readers_kept_in_pytorch(
        _aten_graph(beyond, torch.arange(8.0).reshape(2, 4))
    )
    assert "beyond" in kept["as_strided"]


def test_as_strided_on_a_contiguous_value_is_left_alone():
    def fn(a):
        return (a + 1).as_strided((2, 3), (1, 4)) * 2

    gm = _aten_graph(fn, torch.arange(12.0).reshape(3, 4))
    assert _rewrites.for_onnx(gm) is gm
    assert _rewrites.storage_readers_kept_in_pytorch(gm) == {}


def test_as_strided_after_an_in_place_write_is_not_rebased_past_it():
    # How the lowering regenerates an output that views a mutated input.
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    doubled = graph.call_function(aten.mul.Tensor, (x, 2))
    written = graph.call_function(aten.copy_.default, (x, doubled))
    strided = graph.call_function(aten.as_strided.default, (written, [3, 3], [4, 1], 1))
    graph.output(strided)
    fake = _aten_graph(lambda a: a * 2, torch.arange(12.0).reshape(3, 4))
    (value,) = [n.meta["val"] for n in fake.graph.nodes if n.op == "placeholder"]
    for node in (x, doubled, written):
        node.meta["val"] = value
    strided.meta["val"] = value.as_strided([3, 3], [4, 1], 1)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert _rewrites.for_onnx(gm) is gm
    kept = _rewrites.storage_readers_kept_in_pytorch(gm)
    assert set(kept) == {strided.name, written.name}
    assert "in place" in kept[strided.name]


def _bags(indices, weight, offsets):
    return F.embedding_bag(indices, weight, offsets, mode="max", padding_idx=None)


def test_embedding_bag_whose_bags_alone_are_read_becomes_gathers_and_scatters():
    weight = torch.randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    offsets = torch.tensor([0, 4, 4, 7])
    with torch.no_grad():
        gm = _aten_graph(_bags, indices, weight, offsets)
    assert aten._embedding_bag_forward_only.default in _targets(gm)
    rewritten = _rewrites.for_onnx(gm)
    targets = _targets(rewritten)
    assert not set(targets) & _rewrites._EMBEDDING_BAG_OPS
    assert aten.scatter_reduce.two in targets
    torch.testing.assert_close(
        rewritten(indices, weight, offsets), _bags(indices, weight, offsets)
    )


def test_embedding_bag_whose_auxiliary_outputs_are_read_is_left_alone():
    def fn(indices, weight, offsets):
        out, offset2bag, bag_size, _ = torch.embedding_bag(
            weight, indices, offsets, False, 0, False, None, False, -1
        )
        return out, offset2bag, bag_size

    gm = _aten_graph(fn, torch.tensor([1, 2, 3]), torch.randn(5, 2), torch.tensor([0, 2]))
    assert _rewrites.for_onnx(gm) is gm
