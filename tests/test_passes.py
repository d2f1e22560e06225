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
    # ONNX's own ops (ONNX Runtime's fusions may add a com.microsoft Gelu at any opset).
    ops = {n.op_type for n in backend.sessions[0].model.graph.node if n.domain == ""}
    assert ("Gelu" in ops) == (opset >= 20)


def _flattened_linear_model(*, out_dims: list, trans_b: int = 1, dtype=ir.DataType.FLOAT):
    """Y = Reshape(Gemm(Reshape(X, [-1, 8]), W, b), out_shape), X: [s0, s1, 8]."""
    import numpy as np

    float_type = ir.TensorType(dtype)
    x = ir.Value(name="x", shape=ir.Shape(["s0", "s1", 8]), type=float_type)
    w_shape = [16, 8] if trans_b else [8, 16]
    w = ir.Value(name="w", shape=ir.Shape(w_shape), type=float_type)
    b = ir.Value(name="b", shape=ir.Shape([16]), type=float_type)
    out_shape = ir.Value(
        name="out_shape", shape=ir.Shape([3]), type=ir.TensorType(ir.DataType.INT64)
    )
    flat_shape = ir.node("Constant", [], attributes={"value": ir.tensor(np.array([-1, 8]))})
    flatten = ir.node("Reshape", [x, flat_shape.outputs[0]])
    flatten.outputs[0].shape = ir.Shape(["s0*s1", 8])
    flatten.outputs[0].type = float_type
    gemm = ir.node("Gemm", [flatten.outputs[0], w, b], attributes={"transB": trans_b})
    gemm.outputs[0].shape = ir.Shape(["s0*s1", 16])
    gemm.outputs[0].type = float_type
    unflatten = ir.node("Reshape", [gemm.outputs[0], out_shape])
    unflatten.outputs[0].name = "y"
    unflatten.outputs[0].shape = ir.Shape(out_dims)
    unflatten.outputs[0].type = float_type
    graph = ir.Graph(
        [x, w, b, out_shape],
        [unflatten.outputs[0]],
        nodes=[flat_shape, flatten, gemm, unflatten],
        opset_imports={"": 20},
    )
    return ir.Model(graph, ir_version=10)


def _run(model: ir.Model, feeds: dict) -> list:
    import onnxruntime as ort

    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_a_linear_map_flattened_to_2d_runs_as_one_nd_matmul(trans_b):
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((2, 3, 8), dtype=np.float32),
        "w": rng.standard_normal((16, 8) if trans_b else (8, 16), dtype=np.float32),
        "b": rng.standard_normal(16, dtype=np.float32),
        "out_shape": np.array([2, 3, 16]),
    }
    expected = _run(_flattened_linear_model(out_dims=["s0", "s1", 16], trans_b=trans_b), feeds)
    model = _flattened_linear_model(out_dims=["s0", "s1", 16], trans_b=trans_b)
    assert _passes.matmul_over_leading_dims(model) == 1
    ops = [n.op_type for n in model.graph]
    assert "Gemm" not in ops and ops.count("Reshape") == 0
    assert ops[-2:] == ["MatMul", "Add"] and ("Transpose" in ops) == bool(trans_b)
    assert model.graph.outputs[0].name == "y"
    np.testing.assert_allclose(_run(model, feeds)[0], expected[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "out_dims",
    [
        ["s1", "s0", 16],  # leading dims swapped: same count, another layout
        ["s0", None, 16],  # a dim nobody can vouch for
        ["s0", "s1", 2, 8],  # the features split
    ],
)
def test_a_reshape_the_shapes_do_not_prove_is_left_alone(out_dims):
    model = _flattened_linear_model(out_dims=out_dims)
    assert _passes.matmul_over_leading_dims(model) == 0
    assert [n.op_type for n in model.graph].count("Gemm") == 1


def test_a_transposed_weight_of_another_dtype_keeps_its_gemm():
    # ORT fuses Transpose into MatMul for float32 only: a double Transpose would copy the
    # weight on every call.
    model = _flattened_linear_model(out_dims=["s0", "s1", 16], dtype=ir.DataType.DOUBLE)
    assert _passes.matmul_over_leading_dims(model) == 0


def test_linear_layers_on_sequences_run_as_matmuls_without_copying_weights(tmp_path):
    import onnxruntime as ort

    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4, bias=False)).eval()
    compiled = ortlab.compile(model, ort_fusions=False)  # ortlab's passes alone
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(torch.randn(3, 7, 8)).shape, torch.Size([3, 7, 4]))
    # The first shapes' session, then the one with symbolic batch and sequence sizes.
    static, session = compiled.ortlab_backend.sessions
    assert "s" not in "".join(static.input_schema)
    for record in (static, session):
        ops = [n.op_type for n in record.model.graph.node]
        assert ops.count("MatMul") == 2 and "Gemm" not in ops and "Reshape" not in ops
    # Provenance keeps the folded FX views: each MatMul names the ones it replaced (the
    # first also the weight's ``t``, which its Gemm had absorbed as transB).
    folded = [
        {m.key: m.value for m in n.metadata_props}.get(records.FOLDED_FX_NODES_KEY, "")
        for n in session.model.graph.node
        if n.op_type == "MatMul"
    ]
    assert folded == ["t,view,view_1", "view_2,_unsafe_view"]
    # ONNX Runtime folds each weight's Transpose into its MatMul kernel: no weight is
    # transposed (copied) per call.
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(
        session.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    import onnx

    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    inputs = {i.name for i in optimized.graph.input}
    assert not [
        n for n in optimized.graph.node if n.op_type == "Transpose" and n.input[0] in inputs
    ]
    assert {n.op_type for n in optimized.graph.node} >= {"FusedMatMul"}


def test_clean_ups_run_as_onnx_ir_passes_and_say_which_changed_the_model():
    folded, _ = _gemm_model(transposed_uses=1, perm=[1, 0], trans_b=None)
    kept, _ = _gemm_model(transposed_uses=2, perm=[1, 0], trans_b=None)
    for model, changed in ((folded, True), (kept, False)):
        clean_ups = _passes.CleanUps()
        result = clean_ups(model)
        assert isinstance(result, ir.passes.PassResult) and result.modified is changed
        assert clean_ups.modified_by == {
            "ExactSigmoid": False,
            "ScatterNDAsElements": False,
            "RemoveNoOps": False,
            "FoldTransposeIntoGemm": changed,
            "MatMulOverLeadingDims": False,
            "RemoveUnusedNodesPass": False,
        }


def test_the_session_records_which_clean_up_changed_its_model():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(torch.randn(3, 5, 8))  # N-D activations: the linear maps become MatMuls
    (session,) = compiled.ortlab_backend.sessions
    assert session.onnx_passes["MatMulOverLeadingDims"] is True
    assert "MatMulOverLeadingDims" in dict(session.rows())["clean-ups that changed it"]


class _PadConvRelu6(nn.Module):
    """TF-style "same" padding and ReLU6: what MobileNetV2 in transformers does."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return nn.functional.relu6(self.bn(self.conv(nn.functional.pad(x, (1, 1, 1, 1)))))


def _ops(session):
    return [n.op_type for n in session.model.graph.node]


def test_inference_partitions_run_onnxscript_s_optimizer():
    model, x = _PadConvRelu6().eval(), torch.randn(1, 3, 16, 16)
    compiled = ortlab.compile(model, freeze_parameters=True, compile_cache=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (session,) = compiled.ortlab_backend.sessions
    # The pad folded into the convolution, the frozen BatchNorm into its weights, the
    # ReLU6 bounds constants: what ONNX Runtime fuses into one Conv+Clip.
    assert _ops(session) == ["Conv", "Clip"]
    assert session.onnx_passes["OnnxscriptOptimizer"] is True
    assert "optimize" in session.timings


def test_training_graphs_and_transforms_keep_the_translation():
    model, x = _PadConvRelu6().train(), torch.randn(1, 3, 16, 16, requires_grad=True)
    compiled = ortlab.compile(model, compile_cache=False)
    compiled(x).sum().backward()
    for session in compiled.ortlab_backend.sessions:
        assert "OnnxscriptOptimizer" not in session.onnx_passes
    seen = []
    compiled = ortlab.compile(
        model.eval(), compile_cache=False, pre_ort_model_transforms=[seen.append]
    )
    with torch.no_grad():
        compiled(x)
    assert "Pad" in [n.op_type for n in seen[0].graph.node]


def test_an_optimizer_that_raises_leaves_the_partition_as_translated(monkeypatch):
    def broken(self, model):
        raise RuntimeError("planted optimizer failure")

    monkeypatch.setattr(_passes.OnnxscriptOptimizer, "call", broken)
    model, x = _PadConvRelu6().eval(), torch.randn(1, 3, 16, 16)
    compiled = ortlab.compile(model, compile_cache=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (session,) = compiled.ortlab_backend.sessions
    assert "Pad" in _ops(session) and session.onnx_passes["OnnxscriptOptimizer"] is False
    assert "onnxscript's optimizer failed (RuntimeError: planted optimizer failure)" in (
        session.fusion_note
    )


def test_sigmoid_is_spelled_out_with_its_provenance_and_silu_keeps_its_kernel():
    # ONNX Runtime's Sigmoid is 0 below about -18 (see _passes' NOTE on exact_sigmoid).
    compiled = ortlab.compile(lambda x: (torch.sigmoid(x), torch.nn.functional.silu(x)))
    x = torch.tensor([-30.0, -17.0, -5.0, 0.0, 5.0])
    sigmoid, silu = compiled(x)
    torch.testing.assert_close(sigmoid, torch.sigmoid(x), rtol=1e-6, atol=0)
    torch.testing.assert_close(silu, torch.nn.functional.silu(x))
    (session,) = compiled.ortlab_backend.sessions
    made = {}
    for node in session.model.graph.node:
        made.setdefault(records.fx_node_of(node), []).append(node.op_type)
    assert made["sigmoid"] == ["Neg", "Exp", "Add", "Reciprocal"]
    assert "Sigmoid" in made["silu"]
    assert session.onnx_passes["ExactSigmoid"]
