"""Localisation: a planted divergence is found in its partition and at its node, and the
error carried in from upstream is told apart from the error a partition makes."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from numerics_helpers import (
    GeluTanhGelu,
    partition_holding,
    perturb_sqrt2_constant_of,
    sigmoid_to_relu,
    x_of,
)

import ortlab
from ortlab import zoo
from ortlab.numerics import _localise


@pytest.fixture(scope="module")
def sigmoid_planted():
    model, inputs = zoo.get("custom_op").instantiate()
    return ortlab.diff(model, *inputs, pre_ort_model_transforms=[sigmoid_to_relu])


def test_sigmoid_turned_relu_is_found_in_its_partition_and_node(sigmoid_planted):
    report = sigmoid_planted
    assert not report.passed
    culprit = partition_holding(report, "sigmoid")
    compared = [p for p in report.partitions if p.state == "ort"]
    assert len(compared) == 2
    failing = report.failing_partitions
    assert [p.name for p in failing] == [culprit]
    clean = next(p for p in compared if p.name != culprit)
    assert clean.passed and clean.local_error < 1e-5
    first = report.first_divergent
    assert first is not None
    assert (first.partition, first.node) == (culprit, "sigmoid")
    # The sigmoid's ONNX spelling (_passes.exact_sigmoid), its last op planted wrong.
    assert first.onnx_ops == ("Constant", "Neg", "Exp", "Add", "Relu")
    assert first.local is not None and first.local.max_abs_error > 0.1
    # Upstream nodes of the same partition are fine.
    upstream = [n for n in failing[0].nodes if n.position < first.position and n.diff]
    assert upstream and all(not n.diverged for n in upstream)


@pytest.mark.parametrize("planted", ["gelu", "gelu_1"])
def test_perturbed_constant_is_found_at_its_node_and_carried_error_is_separated(planted):
    hits: list[str] = []
    report = ortlab.diff(
        GeluTanhGelu(),
        x_of(4, 8),
        excluded_ops=["aten.tanh"],
        opset_version=18,
        ort_fusions=False,  # fused, the erf-based GELU is one Gelu op without a Constant
        pre_ort_model_transforms=[perturb_sqrt2_constant_of(planted, hits)],
    )
    assert hits, "the planted constant was not found: the test would prove nothing"
    assert not report.passed
    culprit = partition_holding(report, planted)
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

    x = x_of(4, 8)
    x[0, 0] = 0.0
    report = ortlab.diff(lambda t: torch.exp(t) * 2, x, pre_ort_model_transforms=[exp_to_log])
    (out,) = report.outputs
    assert not report.passed and report.max_abs_error == math.inf
    assert out.nan_ort > 0 and out.inf_ort == 1 and out.nan_eager == out.inf_eager == 0
    assert "nan" in repr(report) and "inf" in repr(report)
    assert report.first_divergent.node == "exp"


def test_int_and_bool_outputs_are_compared_exactly():
    def fn(x):
        return torch.argmax(x, dim=1), x > 0.5, (x * 4).floor().to(torch.int32)

    def greater_to_less(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type == "Greater":
                node.op_type = "Less"

    clean = ortlab.diff(fn, x_of(4, 8))
    assert clean.passed
    assert [t.exact for t in clean.outputs] == [True, True, True]
    assert [t.dtype for t in clean.outputs] == ["int64", "bool", "int32"]
    planted = ortlab.diff(
        fn, x_of(4, 8), pre_ort_model_transforms=[greater_to_less], atol=1e9, rtol=1e9
    )
    verdicts = [t.passed for t in planted.outputs]
    assert verdicts == [True, False, True]
    assert planted.first_divergent.node == "gt"


class _ResidualBlock(torch.nn.Module):
    """Linear layers on a [batch, seq, features] activation, a residual add and a
    LayerNorm: ortlab runs the linear layers as N-D MatMuls (3-D values where the FX
    graph has 2-D ones), and ONNX Runtime's fusions fold the add and the LayerNorm into
    one SkipLayerNormalization (taking the second bias along)."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.fc1 = torch.nn.Linear(8, 8)
            self.fc2 = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.fc2(torch.relu(self.fc1(x))))


def _wider_epsilon(op_type: str):
    def transform(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type == op_type:
                for attr in node.attribute:
                    if attr.name == "epsilon":
                        attr.f = 0.5

    return transform


@pytest.mark.parametrize(
    ("fusions", "op_type"),
    [(False, "LayerNormalization"), (None, "SkipLayerNormalization")],
)
def test_a_planted_normalisation_is_blamed_not_the_linear_layers_before_it(fusions, op_type):
    report = ortlab.diff(
        _ResidualBlock().eval(),
        x_of(2, 5, 8),
        ort_fusions=fusions,
        pre_ort_model_transforms=[_wider_epsilon(op_type)],
    )
    (session,) = report.backend.sessions
    ops = {n.op_type for n in session.model.graph.node}
    assert op_type in ops and "Gemm" not in ops  # linear layers run as N-D MatMuls
    assert not report.passed
    first = report.first_divergent
    # The LayerNorm's result, not an addmm whose ONNX value is 3-D (compared reshaped)
    # or stands inside a fused operator (not compared on its own).
    assert first.node == "getitem" and first.target == "getitem"
    assert first.local is not None and first.local.max_abs_error < math.inf
    linears = [n for n in report.failing_partitions[0].nodes if n.node.startswith("addmm")]
    assert linears and not any(n.diverged for n in linears)
    if fusions is None:
        # The second linear layer's FusedMatMul lost its bias to the normalisation: its
        # output is no FX node's value, so that node is not compared on its own.
        inside = [n for n in linears if "fused operator" in n.note]
        assert [n.onnx_ops for n in inside] == [("FusedMatMul",)]
        assert inside[0].diff is None


def test_a_fused_attention_value_laid_out_otherwise_is_not_blamed():
    # ONNX Runtime's MultiHeadAttention keeps the name of an FX node whose value is
    # [B, H, S, D] while its own is [B, S, H, D]: reshaped, the node looked 0.17 off.
    model, inputs = zoo.get("tiny_llama").instantiate(2)
    # ort_fusions=True: fused without timing it against the unfused model, which may
    # win on a loaded machine (the test would then see no fused attention).
    report = ortlab.diff(model.eval(), *inputs, nodes=True, ort_fusions=True)
    assert report.passed and report.partitions_passed
    (session,) = report.backend.sessions
    assert "MultiHeadAttention" in {n.op_type for n in session.model.graph.node}
    skipped = [n for n in report.nodes if "laid out otherwise" in n.note]
    assert skipped and all(n.diff is None for n in skipped)
    assert not any(n.diverged or n.beyond_tolerance for n in report.nodes)


def test_the_debug_model_returns_only_values_whose_element_type_is_known():
    from onnx import TensorProto, helper

    from ortlab.numerics import _debug

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["relu"]),
            helper.make_node("Mystery", ["relu"], ["odd"], domain="com.example"),
            helper.make_node("Neg", ["relu"], ["neg"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("neg", TensorProto.FLOAT, [2])],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    debug = _debug._debug_model(model, ["relu", "odd", "neg"])
    # relu has no value_info: ONNX's shape inference types it; an output without a type
    # made ONNX Runtime's session unusable for the whole debug run (GPT-2's backward).
    outputs = {o.name: o.type.tensor_type.elem_type for o in debug.graph.output}
    assert outputs == {"neg": TensorProto.FLOAT, "relu": TensorProto.FLOAT}


def test_carried_in_skips_inputs_with_identical_values_but_never_nans():
    # Weights reach a partition unchanged: their error is not measured (BERT-base's 199
    # weights took 21 s of the comparison). A NaN is never equal: such inputs are compared.
    weight = torch.randn(4, 3)
    assert _localise._identical(weight, weight.clone())
    assert not _localise._identical(weight, weight.double())
    assert not _localise._identical(weight, weight.t().contiguous().t() + 1e-7)
    nan = torch.tensor([1.0, float("nan")])
    assert not _localise._identical(nan, nan.clone())
