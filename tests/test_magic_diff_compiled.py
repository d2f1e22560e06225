"""diff_compiled, the diff %ortcompile builds its report with: a call compiled already,
checked against its eager original without compiling again."""

from __future__ import annotations

import functools

import pytest
import torch
from numerics_helpers import GeluTanhGelu, x_of
from torch import nn

import ortlab
from ortlab import errors, zoo
from ortlab.numerics import _diff


def test_reports_on_the_compiled_calls_own_backend_without_compiling_again():
    model, x = GeluTanhGelu().eval(), x_of(4, 8)
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(x)
    backend = compiled.ortlab_backend
    graphs = list(backend.graphs)
    report = _diff.diff_compiled(compiled, x, atol=1e-5, rtol=1e-5)
    assert report.backend is backend and backend.graphs == graphs  # nothing recompiled
    assert report.passed and report.partitions_passed
    assert [p.state for p in report.partitions] == ["ort"]
    # The same comparison as ortlab.diff's, which compiles the model afresh.
    fresh = ortlab.diff(model, x, atol=1e-5, rtol=1e-5)
    assert [t.name for t in report.outputs] == [t.name for t in fresh.outputs]
    assert report.outputs[0].max_abs_error == pytest.approx(fresh.outputs[0].max_abs_error)


def test_backward_compares_the_gradients_diff_does_and_leaves_grad_alone():
    model, (x,) = zoo.get("mlp").instantiate(4)
    compiled = ortlab.compile(model)
    report = _diff.diff_compiled(compiled, x, backward=True)
    fresh = ortlab.diff(model, x, backward=True)
    expected = [f"grad[{n}]" for n, _ in model.named_parameters()] + ["grad[input[0]]"]
    assert [g.name for g in report.gradients] == [g.name for g in fresh.gradients] == expected
    assert report.passed and report.backward
    assert [g.kind for g in compiled.ortlab_backend.graphs] == ["forward", "backward"]
    assert {p.graph_kind for p in report.partitions} == {"forward", "backward"}
    assert all(p.grad is None for p in model.parameters())


class _CountingDropout(nn.Module):
    """Counts its calls in a buffer and applies dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        self.calls += 1
        return self.drop(self.lin(x)) * self.calls * scale


def test_eager_runs_a_copy_of_the_module_from_the_same_rng_state():
    model = _CountingDropout().train()
    x = x_of(16, 8)
    x_before, rng = x.clone(), torch.get_rng_state()
    compiled = ortlab.compile(model)
    report = _diff.diff_compiled(compiled, x)
    # Same dropout mask on both sides; the compiled call ran on the model itself (once),
    # eager on a copy made before either ran.
    assert report.passed, report
    assert int((report.outputs[0].eager_sample == 0).sum()) > 10
    assert model.calls.item() == 1
    assert torch.equal(x, x_before) and torch.equal(torch.get_rng_state(), rng)


def test_a_partial_original_binds_keywords_and_still_copies_the_module():
    model = _CountingDropout().eval()
    x = x_of(4, 8)
    original = functools.partial(model, scale=3.0)
    compiled = ortlab.compile(original)
    report = _diff.diff_compiled(compiled, x, original=original, backward=True)
    assert report.passed, report
    names = [g.name for g in report.gradients]
    assert names == ["grad[lin.weight]", "grad[lin.bias]", "grad[input[0]]"]
    assert model.calls.item() == 1


def test_a_call_not_compiled_with_ortlab_is_refused():
    model = nn.Linear(2, 2)
    with pytest.raises(errors.UnsupportedOptionError, match="was not compiled with ortlab"):
        _diff.diff_compiled(model, x_of(1, 2))
