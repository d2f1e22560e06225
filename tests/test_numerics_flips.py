"""Decision flips: a discrete result that rounding put on the other side of a discontinuity
is reported as the first cause (not "the error accumulates"), a wrong op is not; the
float64 reference judges ortlab against eager."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
import torch.nn.functional as F
from numerics_helpers import sigmoid_to_relu, x_of
from torch import nn

import ortlab
from ortlab import errors, zoo
from ortlab.numerics import _findings
from ortlab.views import numerics


class ReluAtThreshold(nn.Module):
    """``fc(relu(x * scale - 0.5))``: an input of exactly 0.5 puts a ReLU's pre-activation
    at exactly 0, where ReLU's derivative jumps."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.scale = nn.Parameter(torch.ones(4))
            self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(x * self.scale - 0.5))


def shift_half(by: float):
    """A transform moving every float32 Constant 0.5 down by ``by`` (``0``: one unit in the
    last place), so that ONNX Runtime's ``x - 0.5`` is ``by`` above eager's."""

    def transform(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type != "Constant" or node.attribute[0].name != "value":
                continue
            value = onnx.numpy_helper.to_array(node.attribute[0].t)
            if value.dtype == np.float32 and value.size == 1 and float(value) == 0.5:
                moved = value - np.float32(by) if by else np.nextafter(value, np.float32(0))
                node.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(moved))

    return transform


def x_at_threshold() -> torch.Tensor:
    x = x_of(3, 4)
    x[1, 2] = 0.5
    return x


@pytest.fixture(scope="module")
def relu_flip():
    """The ReLU model trained one step, with ORT's 0.5 one unit in the last place lower."""
    model, x = ReluAtThreshold(), x_at_threshold()
    return ortlab.diff(model, x, backward=True, pre_ort_model_transforms=[shift_half(0)])


def test_a_relu_mask_flipped_by_rounding_is_the_first_cause_of_gradient_errors(relu_flip):
    report = relu_flip
    assert all(t.passed for t in report.outputs)
    assert not report.passed and report.partitions_passed  # no op is wrong
    (flip,) = report.flips
    assert report.first_cause is flip
    assert (flip.graph_kind, flip.node, flip.target) == ("backward", "le", "aten.le.Scalar")
    assert (flip.flipped, flip.numel, flip.index) == (1, 12, (1, 2))
    assert (flip.eager_result, flip.ort_result, flip.threshold) == (True, False, 0.0)
    (relu,) = flip.at_first
    assert relu.label == "relu" and relu.eager == 0.0
    assert relu.ort == pytest.approx(2.98e-8, rel=0.01)
    assert flip.operand_error == pytest.approx(2.98e-8, rel=0.01)
    assert flip.operand_error < flip.operand_atol
    assert "test_numerics_flips.py" in flip.source and "x * self.scale - 0.5" in flip.source
    summary = report.summary()
    assert "first cause: decision flip at le" in summary
    assert _findings.FLIP_EXPLANATION in summary and "reference='float64'" in summary
    assert "accumulates" not in summary
    # The backward's all-eager reference starts from the forward's all-eager values: the
    # ReLU output saved for it carries the rounding in.
    backward = next(p for p in report.partitions if p.graph_kind == "backward")
    assert backward.carried_in_from == "relu" and backward.flips == [flip]


class ReluSum(nn.Module):
    """``relu(x * scale - 0.5).sum(1)``: the backward needs only ReLU's mask, which the
    forward graph saves (``le``, a forward partition's output)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale - 0.5).sum(dim=1)


def test_a_mask_the_forward_saves_flips_in_the_forward_graph_with_its_pre_activation():
    transforms = [shift_half(0)]
    report = ortlab.diff(
        ReluSum(), x_at_threshold(), backward=True, pre_ort_model_transforms=transforms
    )
    (flip,) = report.flips
    assert (flip.graph_kind, flip.node, flip.index) == ("forward", "le", (1, 2))
    relu, pre_activation = flip.at_first
    assert (relu.label, relu.eager, pre_activation.eager) == ("relu", 0.0, 0.0)
    assert pre_activation.label.endswith("(input of relu)") and pre_activation.ort > 0
    # The mask fails its partition's exact comparison; the flip explains it.
    (failing,) = report.failing_partitions
    assert failing.first_divergent.node == "le" and not failing.first_divergent.diverged
    assert report.first_cause is flip and report.repro_partition is failing


def test_a_clean_model_reports_no_flip():
    report = ortlab.diff(ReluAtThreshold(), x_at_threshold(), backward=True)
    assert report.passed and report.flips == [] and report.first_cause is None
    assert "decision flip" not in report.summary()


def test_index_and_comparison_flips_are_found_inside_a_partition_with_their_values():
    def fn(x):
        h = torch.relu(x - 0.5)
        pooled = F.max_pool2d(h.reshape(1, 1, 2, 4), 2, return_indices=True)[1]
        return h.argmax(dim=1), pooled, torch.where(h > 0, h, 0.1 * h)

    # relu(x - 0.5) is 0 everywhere in eager; in ORT 3e-8 where x is 0.5: the argmax and
    # the max pool's window [[0.25, 0.5], [0.1, 0.2]] pick it instead of the first zero.
    x = torch.tensor([[0.25, 0.5, 0.1, 0.2], [0.1, 0.2, 0.3, 0.1]])
    report = ortlab.diff(fn, x, pre_ort_model_transforms=[shift_half(0)])
    flips = {f.target.split(".")[1]: f for f in report.flips}
    assert set(flips) == {"argmax", "max_pool2d_with_indices", "gt"}
    argmax = flips["argmax"]
    assert (argmax.index, argmax.eager_result, argmax.ort_result) == ((0,), 0, 1)
    at_eager, at_ort = argmax.at_first
    assert at_eager.label == "relu at eager's choice 0" and at_eager.eager == at_eager.ort == 0
    assert at_ort.label == "relu at ORT's choice 1" and at_ort.eager == 0 < at_ort.ort < 1e-7
    pool = flips["max_pool2d_with_indices"]
    assert pool.node.startswith("getitem") and (pool.eager_result, pool.ort_result) == (0, 1)
    # gt is no partition output: ORT's value comes from the debug model; the ReLU's input
    # is shown too.
    gt = flips["gt"]
    assert (gt.index, gt.eager_result, gt.ort_result, gt.threshold) == ((0, 1), False, True, 0)
    assert [v.label for v in gt.at_first] == ["relu", "sub (input of relu)"]
    assert report.first_cause is report.flips[0]


def test_a_wrong_comparison_is_a_divergent_node_not_a_flip():
    def greater_to_less(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type == "Greater":
                node.op_type = "Less"

    transforms = [greater_to_less]
    report = ortlab.diff(lambda t: t > 0.5, x_of(4, 8), pre_ort_model_transforms=transforms)
    assert report.flips == []
    assert report.first_cause is report.first_divergent is not None
    assert report.first_cause.node == "gt"
    assert any("the op's own error" in n for n in report.partitions[0].notes)


def test_operands_beyond_tolerance_make_no_flip():
    report = ortlab.diff(
        ReluAtThreshold(),
        x_at_threshold(),
        backward=True,
        pre_ort_model_transforms=[shift_half(1e-2)],
    )
    assert report.flips == []
    assert report.first_cause is report.first_divergent
    assert report.first_divergent.target == "aten.sub.Tensor"
    notes = [n for p in report.partitions for n in p.notes]
    assert any("operand relu differs from eager beyond tolerance" in n for n in notes)


def test_float64_reference_finds_ortlab_as_close_as_eager_on_a_clean_model():
    model, (x,) = zoo.get("mlp").instantiate(4)
    report = ortlab.diff(model, x, backward=True, reference="float64")
    reference = report.reference
    assert reference is not None and reference.as_close
    names = [(t.kind, t.name) for t in reference.tensors]
    assert names == [("output", "output")] + [("gradient", g.name) for g in report.gradients]
    assert all(0 < t.eager_error < 1e-5 for t in reference.tensors)
    assert all(t.ort_error <= t.allowed for t in reference.tensors)
    assert "float64 reference: outputs as close as eager" in report.summary()


def test_float64_reference_says_when_ortlab_is_further_than_eager():
    model, inputs = zoo.get("custom_op").instantiate()
    report = ortlab.diff(
        model, *inputs, pre_ort_model_transforms=[sigmoid_to_relu], reference="float64"
    )
    (output,) = report.reference.tensors
    assert not output.as_close and output.ort_error > 0.1 > 1e-6 > output.eager_error
    assert "outputs NOT as close as eager for 1 of 1" in report.summary()
    assert numerics.diff_table(report, what="reference")["as_close"].tolist() == [False]


def test_float64_reference_is_optional_and_validated():
    report = ortlab.diff(lambda t: t * 2, x_of(3))
    assert report.reference is None and "float64" not in report.summary()
    with pytest.raises(errors.UnsupportedOptionError, match="float64"):
        ortlab.diff(lambda t: t * 2, x_of(3), reference="float128")


def test_flip_is_the_headline_of_every_view(relu_flip):
    html = relu_flip._repr_html_()
    assert "first cause: decision flip" in html and "Decision flips" in html
    assert "accumulates" not in html and "discontinuity" in html
    assert repr(relu_flip).count("aten.le.Scalar") == 2  # headline and flips table
    frame = numerics.diff_table(relu_flip, what="flips")
    assert frame[["node", "flipped", "numel"]].values.tolist() == [["le", 1, 12]]
    part = next(p for p in relu_flip.partitions if p.flips)
    assert 'xlabel="decision flip"' in numerics.fx_overlay(relu_flip, part)
    assert relu_flip.partitions_frame()["flips"].tolist() == [0, 1]


def test_save_repro_of_a_flip_writes_the_partition_holding_it(relu_flip, tmp_path):
    part = relu_flip.repro_partition
    assert part.passed and part.flips == relu_flip.flips  # nothing fails on its own inputs
    path = relu_flip.save_repro(tmp_path)
    model, inputs, expected = ortlab.backend.load_test_case(path)
    assert len(inputs) == len(part.run_data.inputs) and len(expected) == len(part.outputs)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, dict(zip([i.name for i in session.get_inputs()], inputs)))
    for mine, eager in zip(got, expected):  # ORT matches eager on ORT's inputs
        np.testing.assert_allclose(mine, eager, rtol=1e-6, atol=1e-7)
    readme = (tmp_path / "README.md").read_text()
    assert f"# ortlab repro: {part.label}" in readme
    assert relu_flip.flips[0].describe() in readme and _findings.FLIP_EXPLANATION in readme
    assert "matches eager on these inputs" in readme


def test_a_flip_on_a_passing_report_is_said_without_calling_it_a_cause():
    def leaky(x):
        h = torch.relu(x - 0.5)
        return torch.where(h > 0, h, 0.1 * h)

    # gt is inside the partition, whose output stays within tolerance: the flip is found
    # where the partition's nodes are compared.
    transforms = [shift_half(0)]
    report = ortlab.diff(
        leaky, x_at_threshold(), pre_ort_model_transforms=transforms, nodes=True
    )
    (flip,) = report.flips
    assert report.passed and report.first_cause is flip and flip.node == "gt"
    summary = report.summary()
    assert "; decision flip at gt" in summary
    assert "the outputs stay within tolerance" in summary
    assert "first cause" not in summary
