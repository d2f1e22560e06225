"""Failure is visible, never fatal, never wrong: unsupported ops, broken exports or
transforms, and unavailable execution providers."""

from __future__ import annotations

import warnings

import pytest
import torch

import ortlab
from ortlab import OrtBackend, OrtBackendOptions, zoo
from ortlab.backend import _export, _session, _torch_private


def test_custom_op_without_translation_splits_into_two_partitions():
    spec = zoo.get("custom_op")
    model, (x,) = spec.instantiate()
    backend = OrtBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=spec.atol, rtol=spec.rtol)
    (graph,) = backend.graphs
    assert len(graph.partitions) == 2
    verdict = next(v for v in graph.verdicts if "soft_clip" in v.target)
    assert not verdict.supported
    assert "no ONNX translation" in verdict.reason
    assert verdict.node in graph.eager_node_names
    assert all(p.run_count == 1 and p.error is None for p in graph.partitions)


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


def test_unavailable_provider_is_dropped_with_one_warning_naming_it():
    backend = OrtBackend(
        OrtBackendOptions(preferred_execution_providers=["NoSuchExecutionProvider"])
    )
    compiled = torch.compile(lambda x: x + 1, backend=backend, dynamic=True)
    with pytest.warns(RuntimeWarning, match="NoSuchExecutionProvider") as caught:
        compiled(torch.randn(3))
        compiled(torch.randn(5))
    assert len([w for w in caught if "NoSuchExecutionProvider" in str(w.message)]) == 1
    assert backend.sessions[0].providers == ("CPUExecutionProvider",)


def test_provider_selection_order_and_cpu_last_resort():
    warned: set[str] = set()
    chosen = _session.select_providers(
        preferred=[("B", {"x": 1})],
        inferred=("A",),
        default=[("C", {})],
        available=("A", "B", "C", "CPUExecutionProvider"),
        warned=warned,
    )
    assert chosen == [("B", {"x": 1}), ("A", {}), ("C", {}), ("CPUExecutionProvider", {})]
    assert not warned
    only_cpu = _session.select_providers(
        preferred=None,
        inferred=(),
        default=None,
        available=("CPUExecutionProvider",),
        warned=warned,
    )
    assert only_cpu == [("CPUExecutionProvider", {})]


def test_cuda_tensors_infer_the_cuda_provider_from_devices():
    fake_mode = torch._subclasses.fake_tensor.FakeTensorMode()
    with fake_mode:
        on_cuda = torch.empty(2, device="cuda")
    assert _session.infer_providers_from_values([torch.ones(1), on_cuda]) == (
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    )


def test_user_session_options_are_used_as_given():
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    backend = OrtBackend(OrtBackendOptions(ort_session_options=so))
    compiled = torch.compile(lambda x: x * 2 + 1, backend=backend)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert backend.execution_count == 1


def test_default_session_options_share_cores_with_torch():
    so = _session.default_session_options()
    assert so.intra_op_num_threads == torch.get_num_threads()
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
