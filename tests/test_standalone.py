"""Sessions outside a compiled graph (ortlab.backend.create_session): providers chosen the
backend's way, torch tensors in and out, outputs typed as ONNX Runtime infers them."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnxruntime
import pytest
import torch

import ortlab.backend
from ortlab import errors

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available()
    or "CUDAExecutionProvider" not in onnxruntime.get_available_providers(),
    reason="needs a CUDA GPU and onnxruntime-gpu (pip install 'ortlab[gpu]')",
)


def _model(*, typed_intermediate: bool = True) -> onnx.ModelProto:
    """y = relu(x) * 2 and b = y > 1, with the intermediate ``r`` (relu) as an output too;
    ``typed_intermediate=False`` leaves ``r``'s type out, as debug copies do."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 3])
    two = oh.make_tensor("two", onnx.TensorProto.FLOAT, [], [2.0])
    one = oh.make_tensor("one", onnx.TensorProto.FLOAT, [], [1.0])
    outputs = [
        oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 3]),
        oh.make_tensor_value_info("b", onnx.TensorProto.BOOL, ["n", 3]),
        oh.make_tensor_value_info("r", onnx.TensorProto.FLOAT, ["n", 3])
        if typed_intermediate
        else onnx.ValueInfoProto(name="r"),
    ]
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["x"], ["r"]),
            oh.make_node("Mul", ["r", "two"], ["y"]),
            oh.make_node("Greater", ["y", "one"], ["b"]),
        ],
        "g",
        [x],
        outputs,
        initializer=[two, one],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


def test_session_runs_torch_tensors_and_returns_torch_tensors_of_the_right_dtypes():
    x = torch.randn(4, 3)
    session = ortlab.backend.create_session(_model(), like=[x])
    y, b, r = session.run([x])
    torch.testing.assert_close(y, torch.relu(x) * 2)
    assert b.dtype == torch.bool and torch.equal(b, torch.relu(x) * 2 > 1)
    torch.testing.assert_close(r, torch.relu(x))
    assert session.providers == ("CPUExecutionProvider",)
    assert session.input_names == ("x",) and session.output_names == ("y", "b", "r")
    # Symbolic dims: another batch size runs on the same session.
    assert session([torch.randn(7, 3)])[0].shape == (7, 3)


def test_outputs_without_a_type_get_the_one_onnx_runtime_infers():
    x = torch.randn(2, 3)
    session = ortlab.backend.create_session(_model(typed_intermediate=False), like=[x])
    _, _, r = session.run([x])
    assert r.dtype == torch.float32
    torch.testing.assert_close(r, torch.relu(x))


def test_providers_follow_the_options_and_exact_providers_win():
    x = torch.randn(2, 3)
    so = ortlab.backend.default_session_options()
    so.intra_op_num_threads = 1
    with pytest.warns(RuntimeWarning, match="NoSuchExecutionProvider"):
        session = ortlab.backend.create_session(
            _model(),
            like=[x],
            options={
                "preferred_execution_providers": ["NoSuchExecutionProvider"],
                "ort_session_options": so,
            },
        )
    assert session.providers == ("CPUExecutionProvider",)  # CPU always comes last
    assert session.session.get_session_options().intra_op_num_threads == 1
    exact = ortlab.backend.create_session(
        _model(), like=[x], providers=["CPUExecutionProvider"]
    )
    assert exact.providers == ("CPUExecutionProvider",)


def test_inputs_unlike_the_session_are_refused_with_the_fix():
    session = ortlab.backend.create_session(_model(), like=[torch.randn(2, 3)])
    with pytest.raises(errors.SessionError, match=r"float64.*create a session like"):
        session.run([torch.randn(2, 3, dtype=torch.float64)])
    with pytest.raises(errors.SessionError, match="do not match"):
        session.run([])


def test_a_model_onnx_runtime_refuses_is_a_session_error():
    broken = _model()
    broken.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(errors.SessionError, match="onnxruntime refused"):
        ortlab.backend.create_session(broken, like=[torch.randn(2, 3)])


@pytest.mark.cuda
@needs_cuda
def test_cuda_inputs_run_on_the_cuda_provider_and_outputs_stay_on_device():
    x = torch.randn(4, 3, device="cuda")
    session = ortlab.backend.create_session(_model(), like=[x])
    assert session.providers[0] == "CUDAExecutionProvider"
    y, b, _ = session.run([x])
    assert y.device == x.device and b.device == x.device
    torch.testing.assert_close(y, torch.relu(x) * 2)
