"""ONNX clean-ups applied to exported partitions, and the opset they are exported with."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch
from torch import nn

import ortlab
from ortlab.backend import _passes, records


def _gemm_model(*, transposed_uses: int, perm: list[int] | None, trans_b: int | None):
    """Y = Gemm(A, Transpose(W)); the transposed W optionally also feeds an Identity."""
    a = ir.Value(name="a", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    w = ir.Value(name="w", shape=ir.Shape([4, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    attrs = {} if perm is None else {"perm": perm}
    transpose = ir.node("Transpose", [w], attributes=attrs)
    gemm_attrs = {} if trans_b is None else {"transB": trans_b}
    gemm = ir.node("Gemm", [a, transpose.outputs[0]], attributes=gemm_attrs)
    nodes = [transpose, gemm]
    outputs = [gemm.outputs[0]]
    if transposed_uses > 1:
        extra = ir.node("Identity", [transpose.outputs[0]])
        nodes.append(extra)
        outputs.append(extra.outputs[0])
    graph = ir.Graph([a, w], outputs, nodes=nodes, opset_imports={"": 20})
    return ir.Model(graph, ir_version=10), gemm


@pytest.mark.parametrize(("perm", "trans_b", "expected"), [([1, 0], None, 1), (None, 1, 0)])
def test_a_matrix_transpose_feeding_only_gemm_becomes_its_trans_attribute(
    perm, trans_b, expected
):
    model, gemm = _gemm_model(transposed_uses=1, perm=perm, trans_b=trans_b)
    assert _passes.fold_transpose_into_gemm(model) == 1
    assert [n.op_type for n in model.graph] == ["Gemm"]
    assert gemm.attributes["transB"].as_int() == expected
    assert gemm.inputs[1].name == "w"


def test_a_transpose_with_other_uses_is_kept():
    model, gemm = _gemm_model(transposed_uses=2, perm=[1, 0], trans_b=None)
    assert _passes.fold_transpose_into_gemm(model) == 0
    assert [n.op_type for n in model.graph] == ["Transpose", "Gemm", "Identity"]
    assert "transB" not in gemm.attributes


def test_linear_layers_export_without_weight_transposes():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    compiled = ortlab.compile(model, dynamic=True)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (session,) = compiled.ortlab_backend.sessions
    ops = [n.op_type for n in session.model.graph.node]
    assert ops.count("Gemm") == 2 and "Transpose" not in ops
    # Provenance keeps the folded FX transposes: each Gemm names the one it absorbed.
    folded = [
        {m.key: m.value for m in n.metadata_props}.get(records.FOLDED_FX_NODES_KEY)
        for n in session.model.graph.node
        if n.op_type == "Gemm"
    ]
    assert sorted(folded) == ["t", "t_1"]
    assert "Gelu" in ops  # opset 20 (the exporter's default) has a fused Gelu


@pytest.mark.parametrize("opset", [18, 23])
def test_opset_version_option_is_used_for_every_partition(opset):
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16)).eval()
    compiled = ortlab.compile(model, dynamic=True, opset_version=opset)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    compiled(x).sum().backward()  # forward and backward graphs too
    backend = compiled.ortlab_backend
    assert len(backend.sessions) == 3
    for session in backend.sessions:
        assert {o.version for o in session.model.opset_import if o.domain == ""} == {opset}
    ops = {n.op_type for n in backend.sessions[0].model.graph.node}
    assert ("Gelu" in ops) == (opset >= 20)
