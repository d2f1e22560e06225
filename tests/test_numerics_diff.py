"""ortlab.diff end to end: clean models pass, both sides are isolated, results render."""

from __future__ import annotations

import pytest
import torch
from models import LabelledClassifier
from numerics_helpers import x_of
from torch import nn

import ortlab
from ortlab import errors, zoo


def test_nan_on_both_sides_passes_and_is_counted():
    x = x_of(4, 8)
    report = ortlab.diff(lambda t: torch.sqrt(t) + 1, x)
    (out,) = report.outputs
    assert report.passed
    assert out.nan_eager == out.nan_ort == int((x < 0).sum()) > 0


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
    x = x_of(2, 16, 256, seed=3)
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
    x = x_of(16, 8)
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
    fn_report = ortlab.diff(lambda a, b: (a * b).sum(dim=0), x_of(3, 4), x_of(3, 4, seed=1))
    assert fn_report.passed and fn_report.outputs[0].shape == (4,)


def test_options_and_keyword_options_both_reach_the_backend():
    report = ortlab.diff(
        lambda t: t.sin() + 1,
        x_of(3),
        options={"freeze_parameters": True, "excluded_ops": ["aten.cos"]},
        excluded_ops=["aten.sin"],
    )
    options = report.backend.options
    # excluded_ops entries resolve to the ops they name.
    assert options.freeze_parameters and options.excluded_ops == (torch.ops.aten.sin,)


def test_unknown_backend_option_is_refused():
    with pytest.raises(errors.UnsupportedOptionError, match="not_an_option"):
        ortlab.diff(lambda t: t + 1, x_of(2), not_an_option=True)


def test_keyword_inputs_of_a_diff_are_a_partials_and_its_parameters_are_compared():
    import functools

    model = LabelledClassifier()
    x, y = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0])
    # diff's keyword arguments are backend options: the error says how to pass inputs.
    with pytest.raises(
        ortlab.UnsupportedOptionError, match=r"functools.partial\(model, labels"
    ):
        ortlab.diff(model, x, labels=y)
    report = ortlab.diff(functools.partial(model, labels=y), x, backward=True)
    assert report.passed
    names = {g.name for g in report.gradients}
    assert {"grad[linear.weight]", "grad[linear.bias]"} <= names, names
