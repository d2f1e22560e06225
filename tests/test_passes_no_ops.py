"""The no-op clean-up: Transposes that keep the dims in order and Casts to the dtype a
value already has are removed (torchlib writes them for ``index_put`` and ``new_zeros``;
ONNX Runtime copies the tensor for each)."""

from __future__ import annotations

import copy

import onnx_ir as ir
import pytest
import torch
from torch import nn

import ortlab
from ortlab.backend import _passes

_FLOAT = ir.TensorType(ir.DataType.FLOAT)


def _chain(op: str, attributes: dict, *, output: bool):
    """y = Relu(op(Relu(x))) (or op(Relu(x)) as the graph output when ``output``)."""
    x = ir.Value(name="x", shape=ir.Shape([2, 3]), type=_FLOAT)
    relu = ir.node("Relu", [x])
    relu.outputs[0].type, relu.outputs[0].shape = _FLOAT, ir.Shape([2, 3])
    inputs = [relu.outputs[0]]
    if op == "CastLike":
        inputs.append(x)
    node = ir.node(op, inputs, attributes=attributes)
    node.outputs[0].name = "y" if output else "mid"
    node.outputs[0].type, node.outputs[0].shape = _FLOAT, ir.Shape([2, 3])
    nodes = [relu, node]
    result = node.outputs[0]
    if not output:
        last = ir.node("Relu", [result])
        last.outputs[0].name = "y"
        last.outputs[0].type, last.outputs[0].shape = _FLOAT, ir.Shape([2, 3])
        nodes.append(last)
        result = last.outputs[0]
    graph = ir.Graph([x], [result], nodes=nodes, opset_imports={"": 20})
    return ir.Model(graph, ir_version=10)


NO_OPS = [
    ("Transpose", {"perm": [0, 1]}),
    ("Cast", {"to": ir.DataType.FLOAT}),
    ("CastLike", {}),
]
KEPT = [
    ("Transpose", {"perm": [1, 0]}),
    ("Transpose", {}),  # no perm: the dims reversed
    ("Cast", {"to": ir.DataType.DOUBLE}),
]


@pytest.mark.parametrize("output", [False, True], ids=["inside", "graph-output"])
@pytest.mark.parametrize(("op", "attributes"), NO_OPS, ids=[o for o, _ in NO_OPS])
def test_a_no_op_is_removed_and_a_graph_output_keeps_its_name_and_type(op, attributes, output):
    model = _chain(op, attributes, output=output)
    assert _passes.remove_no_ops(model) == 1
    assert op not in [n.op_type for n in model.graph]
    (y,) = model.graph.outputs
    assert y.name == "y" and y.dtype == ir.DataType.FLOAT and y.shape == ir.Shape([2, 3])


@pytest.mark.parametrize(("op", "attributes"), KEPT, ids=["transpose", "reverse", "cast"])
def test_an_op_that_changes_its_input_is_kept(op, attributes):
    model = _chain(op, attributes, output=False)
    assert _passes.remove_no_ops(model) == 0
    assert op in [n.op_type for n in model.graph]


def test_a_no_op_between_a_graph_input_and_output_is_kept():
    x = ir.Value(name="x", shape=ir.Shape([2, 3]), type=_FLOAT)
    node = ir.node("Transpose", [x], attributes={"perm": [0, 1]})
    node.outputs[0].name = "y"
    graph = ir.Graph([x], [node.outputs[0]], nodes=[node], opset_imports={"": 20})
    model = ir.Model(graph, ir_version=10)
    assert _passes.remove_no_ops(model) == 0


class _Tagger(nn.Module):
    """Token embeddings into a linear classifier (an embedding's weight gradient is
    zeros, then an accumulating index_put)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(40, 8, padding_idx=0)
        self.head = nn.Linear(8, 5)

    def forward(self, tokens, labels):
        logits = self.head(torch.tanh(self.embedding(tokens)))
        return nn.functional.cross_entropy(logits.view(-1, 5), labels.view(-1))


def test_an_embeddings_weight_gradient_copies_the_table_no_more():
    torch.manual_seed(0)
    model = _Tagger()
    reference = copy.deepcopy(model)
    tokens, labels = torch.randint(0, 40, (3, 6)), torch.randint(0, 5, (3, 6))
    compiled = ortlab.compile(model)
    compiled(tokens, labels).backward()
    reference(tokens, labels).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    backend = compiled.ortlab_backend
    assert all(p.error is None for p in backend.partitions)
    (backward,) = (g for g in backend.graphs if g.kind == "backward")
    assert not backward.eager_node_names
    (session,) = (s for p in backward.partitions for s in p.sessions)
    assert session.onnx_passes["RemoveNoOps"] is True
    graph = session.model.graph
    producers = {out: node for node in graph.node for out in node.output}
    (scatter,) = (
        n
        for n in graph.node
        if n.op_type == "ScatterElements"
        and any(a.name == "reduction" and a.s == b"add" for a in n.attribute)
    )
    # The table of zeros feeds the scatter as it is made (seen as rows: a Reshape), and
    # the scatter's result is the gradient (in the table's shape: a Reshape): no
    # Transpose or Cast of the table on either side.
    table = producers[scatter.input[0]]
    assert table.op_type == "Reshape"
    assert producers[table.input[0]].op_type == "ConstantOfShape"
    users = [n for n in graph.node if scatter.output[0] in n.input]
    assert [n.op_type for n in users] == ["Reshape"]
    assert users[0].output[0] in {o.name for o in graph.output}


def _expand(target: list[int]):
    """y = Relu(Expand(Relu(x), Concat(Constant, Constant))), x of shape [2, 3]."""
    x = ir.Value(name="x", shape=ir.Shape([2, 3]), type=_FLOAT)
    relu = ir.node("Relu", [x])
    relu.outputs[0].type, relu.outputs[0].shape = _FLOAT, ir.Shape([2, 3])
    parts = [ir.node("Constant", [], attributes={"value_ints": [d]}) for d in target]
    shape = ir.node("Concat", [p.outputs[0] for p in parts], attributes={"axis": 0})
    expand = ir.node("Expand", [relu.outputs[0], shape.outputs[0]])
    last = ir.node("Relu", [expand.outputs[0]])
    last.outputs[0].name = "y"
    nodes = [relu, *parts, shape, expand, last]
    graph = ir.Graph([x], [last.outputs[0]], nodes=nodes, opset_imports={"": 20})
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize(
    ("target", "removed"),
    [([2, 3], 1), ([1, 3], 1), ([3], 1), ([4, 3], 0), ([2, 2, 3], 0)],
    ids=["same", "ones", "fewer-dims", "broadcasts", "adds-a-dim"],
)
def test_an_expand_to_the_shape_its_input_has_is_removed(target, removed):
    model = _expand(target)
    assert _passes.remove_no_ops(model) == removed
    assert ("Expand" in [n.op_type for n in model.graph]) is not bool(removed)
