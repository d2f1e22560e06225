"""Exporting a partition: the direct translation, the re-tracing fallback, and the
user's model transforms."""

from __future__ import annotations

import warnings

import pytest
import torch

import ortlab
from ortlab import OrtBackend, OrtBackendOptions
from ortlab.backend import _export, _torch_private


def _break_model(model):
    """A transform that makes the model invalid for ORT."""
    model.graph.node[0].op_type = "NoSuchOnnxOp"


def test_transform_that_breaks_the_model_falls_back_with_one_warning():
    def f(x):
        return x.sin() + x.cos()

    backend = OrtBackend(OrtBackendOptions(pre_ort_model_transforms=[_break_model]))
    compiled = torch.compile(f, backend=backend, dynamic=True)
    x = torch.randn(4)
    with pytest.warns(RuntimeWarning, match="fused_0") as caught:
        out = compiled(x)
    assert len([w for w in caught if "ortlab" in str(w.message)]) == 1
    torch.testing.assert_close(out, f(x))
    (partition,) = backend.partitions
    assert partition.state == "eager"
    assert "NoSuchOnnxOp" in partition.error
    # Later calls stay eager, silently and correctly.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(compiled(x * 2), f(x * 2))
    assert partition.eager_run_count == 2 and backend.execution_count == 0


def test_transform_that_raises_is_recorded_with_its_name():
    def explode(model):
        raise ValueError("boom")

    backend = OrtBackend(OrtBackendOptions(pre_ort_model_transforms=[explode]))
    compiled = torch.compile(lambda x: x * 3, backend=backend)
    with pytest.warns(RuntimeWarning, match="explode"):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert "explode" in backend.partitions[0].error and "boom" in backend.partitions[0].error


@pytest.mark.parametrize("opset", [None, 18])
def test_direct_translation_failure_uses_the_retracing_exporter(monkeypatch, opset):
    def fail(*args, **kwargs):
        raise RuntimeError("translation unavailable")

    monkeypatch.setattr(_export, "_translate_direct", fail)
    options = OrtBackendOptions(opset_version=opset)
    compiled = torch.compile(lambda x: x.tanh() * 2, backend=OrtBackend(options))
    backend = ortlab.backend_of(compiled)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x.tanh() * 2)
    (session,) = backend.sessions
    assert session.export_method == "retrace"
    # The re-traced model targets the same opset as the direct translation would.
    expected = opset or _torch_private.default_opset()
    assert {o.version for o in session.model.opset_import if o.domain == ""} == {expected}


def test_a_partition_that_translates_to_no_node_still_imports_the_default_opset():
    # mean over the one dim of a 0-d tensor is the tensor itself: torchlib emits no node,
    # and ONNX Runtime refused the model ("Missing opset in the model").
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.tensor(2.5)
    mean = graph.call_function(torch.ops.aten.mean.dim, (x, [0], True))
    mean.meta["val"] = torch.tensor(2.5)
    graph.output(mean)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    exported = _export.export_partition(
        gm, name="p", args=[torch.tensor(2.5)], static=True, frozen={}, transforms=()
    )
    assert exported.method == "direct"
    assert {o.domain: o.version for o in exported.proto.opset_import}[""] == (
        _torch_private.default_opset()
    )
    import onnxruntime

    session = onnxruntime.InferenceSession(exported.proto.SerializeToString())
    (out,) = session.run(None, {session.get_inputs()[0].name: torch.tensor(2.5).numpy()})
    assert float(out) == 2.5


@pytest.mark.parametrize("op", ["lt", "ge", "eq"])
def test_an_integer_tensor_compared_with_a_float_scalar_is_promoted(op):
    # torchlib casts the scalar to the tensor's dtype: lt(int64, 2.5) computed x < 2
    # (found by the conformance suite on signal.windows.kaiser)
    import onnxruntime
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.tensor([1, 2, 3, -1])
    gm = make_fx(lambda x: getattr(torch, op)(x, 2.5))(x)
    assert _export._needs_type_promotion(gm)
    exported = _export.export_partition(
        gm, name="p", args=[x], static=True, frozen={}, transforms=()
    )
    session = onnxruntime.InferenceSession(exported.proto.SerializeToString())
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert out.tolist() == getattr(torch, op)(x, 2.5).tolist()
