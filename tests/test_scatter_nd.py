"""Reducing ``ScatterND`` written as ``ScatterElements`` (``_passes.scatter_nd_as_elements``):
ONNX Runtime's CPU ScatterND loses updates to repeated indices on two threads, which made
every embedding gradient with repeated tokens wrong."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import ortlab
from ortlab.backend import _passes

_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd_model(data_shape, indices_shape, updates_shape, reduction, *, shapes=True):
    """y = ScatterND(d, i, u, reduction); ``shapes=False`` leaves the inputs' shapes out
    of the graph (as inside torchlib's functions) behind an Identity each."""
    values = [
        helper.make_tensor_value_info("d", TensorProto.FLOAT, data_shape),
        helper.make_tensor_value_info("i", TensorProto.INT64, indices_shape),
        helper.make_tensor_value_info("u", TensorProto.FLOAT, updates_shape),
    ]
    nodes = []
    names = ["d", "i", "u"]
    if not shapes:
        nodes = [helper.make_node("Identity", [n], [f"{n}_"]) for n in names]
        names = [f"{n}_" for n in names]
    nodes.append(helper.make_node("ScatterND", names, ["y"], reduction=reduction))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, data_shape)
    graph = helper.make_graph(nodes, "g", values, [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _reference(data, indices, updates, reduction):
    out = data.astype(np.float64).copy()
    depth = indices.shape[-1]
    rows = updates.reshape(-1, *data.shape[depth:]).astype(np.float64)
    for index, row in zip(indices.reshape(-1, depth), rows):
        at = tuple(int(i) for i in index)
        out[at] = _REDUCE[reduction](out[at], row)
    return out


def _run(model: onnx.ModelProto, feeds, threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def _rewritten(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    ir_model = ir.serde.deserialize_model(model)
    replaced = _passes.scatter_nd_as_elements(ir_model)
    return ir.serde.serialize_model(ir_model), replaced


CASES = [
    # data, indices, updates, negative indices: the embedding gradient (every index
    # repeated), several leading dims of indices, two indexed dims, every dim indexed
    ([2, 256], [1024, 1], [1024, 256], False),
    ([50, 16], [4, 32, 1], [4, 32, 16], False),
    ([6, 5, 7], [40, 2], [40, 7], False),
    ([6, 5], [30, 2], [30], False),
    ([9, 4, 3], [12, 1], [12, 4, 3], True),
    ([6, 5, 7], [40, 2], [40, 7], True),
]


@pytest.mark.parametrize("shapes", [True, False], ids=["shapes-known", "shapes-inferred"])
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize(("data", "indices", "updates", "negative"), CASES)
def test_a_reducing_scatter_nd_becomes_a_scatter_elements_with_the_same_result(
    data, indices, updates, negative, reduction, shapes
):
    rng = np.random.default_rng(0)
    lead = data[: indices[-1]]
    index = np.stack([rng.integers(0, min(d, 3), indices[:-1]) for d in lead], axis=-1)
    if negative:  # counted from the end
        index = index - np.array(lead)
    feeds = {
        "d": rng.uniform(0.5, 1.5, data).astype(np.float32),
        "i": index.astype(np.int64),
        "u": rng.uniform(0.9, 1.1, updates).astype(np.float32),
    }
    model, replaced = _rewritten(
        _scatter_nd_model(data, indices, updates, reduction, shapes=shapes)
    )
    assert replaced == 1
    ops = [n.op_type for n in model.graph.node]
    assert "ScatterND" not in ops and "ScatterElements" in ops
    plain = np.where(index < 0, index + np.array(lead), index)
    want = _reference(feeds["d"], plain, feeds["u"], reduction)
    for _ in range(3):  # the race this replaces showed on most runs
        got = _run(model, feeds, threads=2)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)


def test_a_scatter_nd_without_a_reduction_is_kept():
    model, replaced = _rewritten(_scatter_nd_model([4, 3], [2, 1], [2, 3], "none"))
    assert replaced == 0
    assert [n.op_type for n in model.graph.node] == ["ScatterND"]


class _TokenTypes(nn.Module):
    """BERT's token-type embedding: every token reads row 0 of a two-row table."""

    def __init__(self) -> None:
        super().__init__()
        # 256 wide: ONNX Runtime's ScatterND raced on [2, 256] rows, not on [2, 64].
        self.types = nn.Embedding(2, 256)
        self.words = nn.Embedding(100, 256)
        self.out = nn.Linear(256, 3)

    def forward(self, words, types):
        return self.out(self.words(words) + self.types(types)).logsumexp(-1).mean()


def test_an_embedding_read_by_every_token_gets_its_whole_gradient_on_two_threads():
    torch.manual_seed(0)
    model = _TokenTypes()
    reference = copy.deepcopy(model)
    words = torch.randint(0, 100, (8, 128))
    types = torch.zeros(8, 128, dtype=torch.long)
    compiled = ortlab.compile(model, options={"intra_op_threads": 2})
    compiled(words, types).backward()
    reference(words, types).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    backend = compiled.ortlab_backend
    (backward,) = (g for g in backend.graphs if g.kind == "backward")
    assert not backward.eager_node_names
    (session,) = (s for p in backward.partitions for s in p.sessions)
    assert session.threads == 2
    assert session.onnx_passes["ScatterNDAsElements"] is True
    ops = [n.op_type for n in session.model.graph.node]
    assert ops.count("ScatterElements") == 2 and "ScatterND" not in ops


@pytest.mark.parametrize(
    ("data", "bad"),
    [
        ([5, 3], [[0], [5]]),
        ([5, 3], [[0], [-6]]),
        ([6, 5, 3], [[0, 0], [0, 7]]),  # flat, (0, 7) would be row 7: (1, 2)
        ([6, 5, 3], [[0, 0], [1, -6]]),
        ([6, 5, 3], [[6, 0], [0, 0]]),
    ],
    ids=["past-the-end", "before-the-start", "2d-past-a-dim", "2d-before-a-dim", "2d-first"],
)
def test_an_index_out_of_its_dim_is_still_an_error(data, bad):
    index = np.array(bad, dtype=np.int64)
    updates = [len(bad), *data[index.shape[-1] :]]
    model, _ = _rewritten(_scatter_nd_model(data, list(index.shape), updates, "add"))
    feeds = {
        "d": np.zeros(data, np.float32),
        "i": index,
        "u": np.ones(updates, np.float32),
    }
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    with pytest.raises(Exception, match="out of data bounds"):
        session.run(None, feeds)
    plain = np.where(index < 0, index + np.array(data[: index.shape[-1]]), index)
    if (plain >= 0).all() and (plain < np.array(data[: index.shape[-1]])).all():
        pytest.fail("the case must be out of bounds")


def test_a_scatter_nd_into_rows_of_nothing_is_kept_and_runs():
    # Reshape refuses -1 beside a 0; with nothing in a row there is nothing to add.
    model, replaced = _rewritten(_scatter_nd_model([4, 0], [3, 1], [3, 0], "add"))
    assert replaced == 0
    feeds = {
        "d": np.zeros((4, 0), np.float32),
        "i": np.array([[0], [1], [1]], dtype=np.int64),
        "u": np.zeros((3, 0), np.float32),
    }
    assert _run(model, feeds, threads=2).shape == (4, 0)


def test_the_re_tracing_exporters_model_gets_the_same_rewrite(monkeypatch):
    from ortlab.backend import _torch_private

    monkeypatch.setattr(_torch_private, "DIRECT_TRANSLATION_ERROR", "forced by the test")
    table = torch.randn(50, 64)

    def accumulate(index, values):
        return table.index_put((index,), values, accumulate=True)

    compiled = ortlab.compile(accumulate, options={"intra_op_threads": 2})
    index, values = torch.randint(0, 3, (1024,)), torch.rand(1024, 64)
    with torch.no_grad():
        torch.testing.assert_close(compiled(index, values), accumulate(index, values))
    (session,) = compiled.ortlab_backend.sessions
    assert session.export_method == "retrace"
    assert session.onnx_passes == {"ScatterNDAsElements": True}
    ops = [n.op_type for n in session.model.graph.node]
    assert "ScatterElements" in ops and "ScatterND" not in ops


@pytest.mark.parametrize(
    ("data", "indices", "updates"),
    [([3, 0, 4], [2, 1], [2, 0, 4]), ([3, 0], [0, 2], [0])],
    ids=["a-0-in-the-rows", "a-0-in-the-indexed-dims"],
)
def test_a_scatter_nd_into_nothing_is_kept(data, indices, updates):
    model, replaced = _rewritten(_scatter_nd_model(data, indices, updates, "add"))
    assert replaced == 0
    feeds = {
        "d": np.zeros(data, np.float32),
        "i": np.zeros(indices, dtype=np.int64),
        "u": np.zeros(updates, np.float32),
    }
    assert _run(model, feeds, threads=2).shape == tuple(data)


def test_indices_without_a_shape_get_one_from_shape_inference():
    proto = _scatter_nd_model([5, 3], [4, 1], [4, 3], "add", shapes=False)
    ir_model = ir.serde.deserialize_model(proto)
    data = next(n for n in ir_model.graph if n.op_type == "ScatterND").inputs[0]
    data.shape = ir.Shape([5, 3])  # the data's shape known, the indices' not
    assert _passes.scatter_nd_as_elements(ir_model) == 1
