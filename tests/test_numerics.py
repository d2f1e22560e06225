"""Tests of ortlab.diff: tolerance semantics, planted divergences, clean models, sweeps."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ortlab
from ortlab import _numerics, errors, zoo

# -- helpers -------------------------------------------------------------------------------


class _GeluTanhGelu(nn.Module):
    """Linear -> GELU -> tanh -> Linear -> GELU; with ``excluded_ops=["aten.tanh"]`` the
    tanh stays eager and splits the model into two partitions, each with GELU constants."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc2(torch.tanh(F.gelu(self.fc1(x)))))


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _sigmoid_to_relu(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.op_type == "Sigmoid":
            node.op_type = "Relu"


def _perturb_sqrt2_constant_of(fx_node: str, hits: list[str] | None = None):
    """A transform scaling GELU's sqrt(2) Constant of one FX node by 1 + 1e-2 (GELU is
    spelled out with that Constant up to opset 19; from opset 20 it is one Gelu op).
    Each perturbed model's graph name is appended to ``hits``."""

    def transform(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type != "Constant" or _numerics.fx_node_name(node) != fx_node:
                continue
            value = onnx.numpy_helper.to_array(node.attribute[0].t)
            if np.allclose(value, math.sqrt(2)):
                scaled = (value * 1.01).astype(value.dtype)
                node.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(scaled))
                if hits is not None:
                    hits.append(model.graph.name)

    return transform


def _partition_holding(report: _numerics.DiffReport, fx_node: str) -> str:
    """Name of the partition whose FX graph holds ``fx_node`` (names are not stable)."""
    return next(p.name for p in report.backend.partitions if fx_node in p.node_names)


# -- tolerance semantics -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("tol", [None, 1e-3])
def test_compare_tensors_decides_like_assert_close(dtype, tol):
    gen = torch.Generator().manual_seed(1)
    for trial in range(40):
        expected = torch.randn(64, generator=gen).to(dtype)
        noise = torch.randn(64, generator=gen) * 10 ** (-7 + trial % 6)
        actual = (expected.double() + noise.double()).to(dtype)
        if trial % 5 == 0:
            expected[3] = actual[3] = float("nan")  # NaN matching NaN is equal
        if trial % 7 == 0:
            expected[4] = actual[4] = float("inf")
        try:
            torch.testing.assert_close(actual, expected, atol=tol, rtol=tol, equal_nan=True)
            reference = True
        except AssertionError:
            reference = False
        result = _numerics.compare_tensors("t", actual, expected, atol=tol, rtol=tol)
        assert result.passed == reference, (trial, result)
        assert (result.ratio <= 1) == result.passed  # what the views colour by


def test_default_tolerances_follow_assert_close_per_dtype():
    assert _numerics.default_tolerance(torch.float32) == (1e-5, 1.3e-6)
    assert _numerics.default_tolerance(torch.float16) == (1e-5, 1e-3)
    assert _numerics.default_tolerance(torch.int64) == (0.0, 0.0)
    result = _numerics.compare_tensors("t", torch.ones(3), torch.ones(3) + 2e-5)
    assert (result.atol, result.rtol, result.passed) == (1e-5, 1.3e-6, False)


def test_nan_and_inf_on_one_side_fail_with_infinite_error_and_are_counted():
    expected = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    actual = torch.tensor([1.0, float("inf"), float("nan"), float("nan")])
    result = _numerics.compare_tensors("t", actual, expected, atol=1e3, rtol=1e3)
    assert not result.passed
    assert result.max_abs_error == math.inf
    assert (result.nan_eager, result.nan_ort, result.inf_eager, result.inf_ort) == (1, 2, 0, 1)
    assert result.mismatched == 2  # the shared NaN is not a mismatch
    assert "nan 1/2" in result.nonfinite and "inf 0/1" in result.nonfinite


def test_integer_and_bool_values_are_compared_exactly_whatever_the_tolerance():
    ints = _numerics.compare_tensors(
        "i", torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), atol=10, rtol=10
    )
    assert ints.exact and not ints.passed and ints.mismatched == 1
    flags = _numerics.compare_tensors(
        "b", torch.tensor([True, False]), torch.tensor([True, True]), atol=1, rtol=1
    )
    assert flags.exact and not flags.passed and flags.max_abs_error == 1.0
    assert _numerics.compare_tensors("s", 3, 3).passed
    assert not _numerics.compare_tensors("s", 3, 4).passed


def test_shape_mismatch_fails_with_a_note():
    result = _numerics.compare_tensors("t", torch.zeros(2, 3), torch.zeros(3, 2))
    assert not result.passed and "shape differs" in result.note


def test_intermediate_rule_scales_atol_with_operand_magnitude():
    expected = torch.tensor([0.0, 1000.0])
    actual = torch.tensor([5e-4, 1000.0])  # rounding noise of a value near 1000
    assert not _numerics.compare_tensors("t", actual, expected).passed
    scaled = _numerics.compare_tensors("t", actual, expected, scale=0.0)
    assert scaled.passed and scaled.atol == pytest.approx(1e-2)
    # Below magnitude 1 the intermediate rule is the output rule.
    small = _numerics.compare_tensors("t", torch.tensor([2e-5]), torch.zeros(1), scale=0.5)
    assert not small.passed and small.atol == 1e-5


# -- planted divergences -------------------------------------------------------------------


@pytest.fixture(scope="module")
def sigmoid_planted():
    model, inputs = zoo.get("custom_op").instantiate()
    return ortlab.diff(model, *inputs, pre_ort_model_transforms=[_sigmoid_to_relu])


def test_sigmoid_turned_relu_is_found_in_its_partition_and_node(sigmoid_planted):
    report = sigmoid_planted
    assert not report.passed
    culprit = _partition_holding(report, "sigmoid")
    compared = [p for p in report.partitions if p.state == "ort"]
    assert len(compared) == 2
    failing = report.failing_partitions
    assert [p.name for p in failing] == [culprit]
    clean = next(p for p in compared if p.name != culprit)
    assert clean.passed and clean.local_error < 1e-5
    first = report.first_divergent
    assert first is not None
    assert (first.partition, first.node) == (culprit, "sigmoid")
    assert first.onnx_ops == ("Relu",)
    assert first.local is not None and first.local.max_abs_error > 0.1
    # Upstream nodes of the same partition are fine.
    upstream = [n for n in failing[0].nodes if n.position < first.position and n.diff]
    assert upstream and all(not n.diverged for n in upstream)


@pytest.mark.parametrize("planted", ["gelu", "gelu_1"])
def test_perturbed_constant_is_found_at_its_node_and_carried_error_is_separated(planted):
    hits: list[str] = []
    report = ortlab.diff(
        _GeluTanhGelu(),
        _x(4, 8),
        excluded_ops=["aten.tanh"],
        opset_version=18,
        pre_ort_model_transforms=[_perturb_sqrt2_constant_of(planted, hits)],
    )
    assert hits, "the planted constant was not found: the test would prove nothing"
    assert not report.passed
    culprit = _partition_holding(report, planted)
    assert len([p for p in report.partitions if p.state == "ort"]) == 2
    assert [p.name for p in report.failing_partitions] == [culprit]
    first = report.first_divergent
    assert (first.partition, first.node) == (culprit, planted)
    assert "Constant" in first.onnx_ops
    other = next(p for p in report.partitions if p.name != culprit)
    assert other.passed
    if planted == "gelu":
        # The second partition is right on its own inputs but receives wrong ones.
        assert other.local_error < 1e-5
        assert other.carried_in is not None and other.carried_in > 1e-4
        assert other.carried_in_from == "tanh"
    else:
        assert other.carried_in == 0.0


def test_perturbed_frozen_parameter_is_named_as_first_divergent():
    def scale_fc2_weight(model: onnx.ModelProto) -> None:
        for init in model.graph.initializer:
            if tuple(init.dims) == (4, 16):
                value = onnx.numpy_helper.to_array(init) * np.float32(1.01)
                init.CopyFrom(onnx.numpy_helper.from_array(value, init.name))

    model, inputs = zoo.get("custom_op").instantiate()
    report = ortlab.diff(
        model, *inputs, freeze_parameters=True, pre_ort_model_transforms=[scale_fc2_weight]
    )
    first = report.first_divergent
    assert first is not None and first.target == "placeholder"
    assert first.note == "frozen initializer" and first.shape == (4, 16)
    # Its consumers only pass the wrong weight along: their own error is tiny.
    later = [n for n in report.failing_partitions[0].nodes if n.position > first.position]
    assert later and not any(n.diverged for n in later if n.target != "placeholder")


def test_planted_error_in_a_backward_partition_is_found_there():
    def break_backward_sub(model: onnx.ModelProto) -> None:
        # AOTAutograd names the backward graph's output gradients tangents_*.
        if not any(i.name.startswith("tangents") for i in model.graph.input):
            return
        sub = next(n for n in model.graph.node if n.op_type == "Sub")
        sub.op_type = "Add"

    model, inputs = zoo.get("custom_op").instantiate()
    report = ortlab.diff(
        model, *inputs, backward=True, pre_ort_model_transforms=[break_backward_sub]
    )
    assert all(t.passed for t in report.outputs)
    assert not report.passed and not all(g.passed for g in report.gradients)
    assert [p.graph_kind for p in report.failing_partitions] == ["backward"]
    first = report.first_divergent
    assert first.graph_kind == "backward" and first.target == "aten.sub.Tensor"
    assert "Add" in first.onnx_ops


def test_nan_and_inf_produced_by_ort_are_reported_not_hidden():
    def exp_to_log(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type == "Exp":
                node.op_type = "Log"  # log of negative inputs: NaN; log(0): -inf

    x = _x(4, 8)
    x[0, 0] = 0.0
    report = ortlab.diff(lambda t: torch.exp(t) * 2, x, pre_ort_model_transforms=[exp_to_log])
    (out,) = report.outputs
    assert not report.passed and report.max_abs_error == math.inf
    assert out.nan_ort > 0 and out.inf_ort == 1 and out.nan_eager == out.inf_eager == 0
    assert "nan" in repr(report) and "inf" in repr(report)
    assert report.first_divergent.node == "exp"


def test_nan_on_both_sides_passes_and_is_counted():
    x = _x(4, 8)
    report = ortlab.diff(lambda t: torch.sqrt(t) + 1, x)
    (out,) = report.outputs
    assert report.passed
    assert out.nan_eager == out.nan_ort == int((x < 0).sum()) > 0


def test_int_and_bool_outputs_are_compared_exactly():
    def fn(x):
        return torch.argmax(x, dim=1), x > 0.5, (x * 4).floor().to(torch.int32)

    def greater_to_less(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type == "Greater":
                node.op_type = "Less"

    clean = ortlab.diff(fn, _x(4, 8))
    assert clean.passed
    assert [t.exact for t in clean.outputs] == [True, True, True]
    assert [t.dtype for t in clean.outputs] == ["int64", "bool", "int32"]
    planted = ortlab.diff(
        fn, _x(4, 8), pre_ort_model_transforms=[greater_to_less], atol=1e9, rtol=1e9
    )
    verdicts = [t.passed for t in planted.outputs]
    assert verdicts == [True, False, True]
    assert planted.first_divergent.node == "gt"


# -- clean models --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp", "gelu_mlp", "cnn", "custom_op"])
def test_clean_zoo_models_pass_below_their_tolerance(name):
    model_spec = zoo.get(name)
    model, inputs = model_spec.instantiate(2)
    report = ortlab.diff(model, *inputs, atol=model_spec.atol, rtol=model_spec.rtol)
    assert report.passed, report
    assert report.partitions_passed and report.first_divergent is None
    assert 0 <= report.max_abs_error < model_spec.atol
    assert all(p.state == "ort" for p in report.partitions)
    assert report.backend.execution_count == len(report.partitions)


def test_backward_diff_of_mlp_compares_every_gradient():
    model, (x,) = zoo.get("mlp").instantiate(4)
    report = ortlab.diff(model, x, backward=True, nodes=True)
    names = [g.name for g in report.gradients]
    expected = [f"grad[{n}]" for n, _ in model.named_parameters()] + ["grad[input[0]]"]
    assert names == expected
    assert report.passed and report.partitions_passed
    kinds = {p.graph_kind for p in report.partitions}
    assert kinds == {"forward", "backward"}
    # nodes=True compares every node of every partition, backward ones included.
    backward = next(p for p in report.partitions if p.graph_kind == "backward")
    assert sum(1 for n in backward.nodes if n.diff is not None) >= 5


def test_backward_diff_of_transformer_layer_passes_at_zoo_tolerance():
    spec = zoo.get("transformer_layer")
    model = spec.build()
    x = _x(2, 16, 256, seed=3)
    report = ortlab.diff(model, x, backward=True, atol=spec.atol, rtol=spec.rtol)
    assert report.passed, report
    assert len(report.gradients) == len(list(model.parameters())) + 1
    assert all(g.numel > 0 and g.max_abs_error < spec.atol for g in report.gradients)
    assert {p.graph_kind for p in report.partitions} == {"forward", "backward"}
    assert report.partitions_passed


class _CountingDropout(nn.Module):
    """Counts its calls in a buffer (state a shared model would leak between the two runs)
    and applies dropout (randomness both runs must draw identically)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.drop(self.lin(x)) * self.calls


def test_diff_copies_the_model_and_keeps_the_callers_rng_and_inputs():
    model = _CountingDropout().train()
    x = _x(16, 8)
    x_before = x.clone()
    rng = torch.get_rng_state()
    report = ortlab.diff(model, x)
    # Each side ran its own copy (calls == 1 on both) from the same RNG state (same mask).
    assert report.passed, report
    assert int((report.outputs[0].eager_sample == 0).sum()) > 10  # dropout did drop
    assert model.calls.item() == 0
    assert torch.equal(x, x_before)
    assert torch.equal(torch.get_rng_state(), rng)


def test_diff_accepts_a_compiled_module_and_plain_functions():
    model, inputs = zoo.get("mlp").instantiate(2)
    compiled = ortlab.compile(model)
    report = ortlab.diff(compiled, *inputs)
    assert report.passed and report.backend is not compiled.ortlab_backend
    assert report.backend.execution_count == 1
    fn_report = ortlab.diff(lambda a, b: (a * b).sum(dim=0), _x(3, 4), _x(3, 4, seed=1))
    assert fn_report.passed and fn_report.outputs[0].shape == (4,)


def test_unknown_backend_option_is_refused():
    with pytest.raises(errors.UnsupportedOptionError, match="not_an_option"):
        ortlab.diff(lambda t: t + 1, _x(2), not_an_option=True)


# -- sweep ---------------------------------------------------------------------------------


def test_sweep_reports_error_and_latency_per_configuration_and_skips_missing_providers():
    model, inputs = zoo.get("mlp").instantiate(4)
    sweep = {
        "providers": ["CPUExecutionProvider", "CUDAExecutionProvider"],
        "graph_optimization_level": ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"],
    }
    report = ortlab.diff(model, *inputs, sweep=sweep, repeat=2)
    rows = report.sweep
    assert rows[0].label == "eager (PyTorch)" and rows[0].latency_ms > 0
    assert len(rows) == 1 + 4
    cuda_available = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    for row in rows[1:]:
        if "CUDA" in row.label and not cuda_available:
            assert row.status.startswith("skipped") and row.report is None
            continue
        assert row.status == "ok" and row.passed and row.latency_ms > 0
        level = row.settings["graph_optimization_level"]
        session_options = row.report.backend.options.ort_session_options
        assert session_options.graph_optimization_level.name == level
        assert session_options.intra_op_num_threads == torch.get_num_threads()
        assert row.providers[0] == row.settings["providers"]
    frame = report.sweep_frame()
    assert list(frame["config"])[1] == "CPU / ORT_DISABLE_ALL"
    assert "latency_ms" in frame.columns


def test_sweep_rejects_unknown_keys_and_levels():
    with pytest.raises(errors.UnsupportedOptionError, match="sweep key"):
        ortlab.diff(lambda t: t + 1, _x(2), sweep={"fast": [True]})
    with pytest.raises(errors.UnsupportedOptionError, match="ORT_ENABLE_ALL"):
        ortlab.diff(lambda t: t + 1, _x(2), sweep={"graph_optimization_level": ["max"]})


# -- rendering -----------------------------------------------------------------------------


def test_report_renders_as_text_html_and_frames(sigmoid_planted):
    report = sigmoid_planted
    text = repr(report)
    assert text.startswith("DiffReport(FAIL") and "sigmoid" in text and "Relu" in text
    html = report._repr_html_()
    assert "FAIL" in html and "sigmoid" in html
    frame = report.to_frame()
    assert list(frame["kind"]) == ["output"] and not frame["passed"].any()
    parts = report.partitions_frame()
    assert set(parts["first_divergent"]) == {"", "sigmoid"}
    nodes = report.nodes_frame()
    assert "sigmoid" in set(nodes["node"]) and nodes["diverged"].sum() == 1


def test_model_strings_are_escaped_in_html():
    report = ortlab.diff(lambda t: {"<b>x</b>": t * 2}, _x(3))
    assert report.outputs[0].name == "output['<b>x</b>']"
    html = report._repr_html_()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
