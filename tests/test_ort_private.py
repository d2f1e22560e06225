"""Pins the behaviour of the private ONNX Runtime APIs ortlab relies on (_ort_private)."""

from __future__ import annotations

import onnx
import onnxruntime
import torch
import torch.utils.dlpack
from onnx import TensorProto, helper

from ortlab.backend import _ort_private


def _add_one_session():
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "add_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return onnxruntime.InferenceSession(model.SerializeToString())


def test_value_vector_run_reads_torch_memory_and_returns_dlpack():
    session = _add_one_session()
    x = torch.arange(4, dtype=torch.float32)
    inputs = _ort_private.value_vector()
    cpu = _ort_private.ort_device(x.device)
    inputs.push_back_batch([x], [x.data_ptr()], [x.numpy().dtype], [x.shape], [cpu])
    outputs = _ort_private.value_vector()
    _ort_private.session_core(session).run_with_ortvaluevector(
        _ort_private.run_options(), ["x"], inputs, ["y"], outputs, [cpu]
    )
    (y,) = outputs.to_dlpacks(torch.utils.dlpack.from_dlpack)
    torch.testing.assert_close(y, x + 1)
    x.add_(10)  # no copy was made of the input: the vector saw torch's memory
    outputs = _ort_private.value_vector()
    _ort_private.session_core(session).run_with_ortvaluevector(
        _ort_private.run_options(), ["x"], inputs, ["y"], outputs, [cpu]
    )
    torch.testing.assert_close(outputs.to_dlpacks(torch.utils.dlpack.from_dlpack)[0], x + 1)


def test_ortvalue_and_iobinding_expose_their_pybind_objects():
    session = _add_one_session()
    empty = onnxruntime.OrtValue.ortvalue_from_shape_and_type([0], "float32", "cpu", 0)
    vector = _ort_private.value_vector()
    vector.push_back(_ort_private.ortvalue_core(empty))
    assert len(vector) == 1
    binding = session.io_binding()
    x = torch.ones(3)
    y = torch.empty(3)
    binding.bind_input("x", "cpu", 0, "float32", (3,), x.data_ptr())
    binding.bind_output("y", "cpu", 0, "float32", (3,), y.data_ptr())
    _ort_private.session_core(session).run_with_iobinding(
        _ort_private.iobinding_core(binding), _ort_private.run_options()
    )
    torch.testing.assert_close(y, torch.full((3,), 2.0))


def test_ort_device_describes_torch_devices():
    cpu = _ort_private.ort_device(torch.device("cpu"))
    assert cpu.device_type() == cpu.cpu()
    cuda = _ort_private.ort_device(torch.device("cuda", 1))
    assert cuda.device_type() == cuda.cuda() and cuda.device_id() == 1
