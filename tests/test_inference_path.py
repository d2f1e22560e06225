"""Inference graphs: the thin path without AOTAutograd, and frozen parameters."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ortlab
from ortlab import OrtBackend, OrtBackendOptions


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.register_buffer("offset", torch.full((4,), 0.25))

    def forward(self, x):
        return torch.sigmoid(self.fc2(torch.relu(self.fc1(x)))) + self.offset


def test_no_grad_graphs_skip_aot_autograd():
    model = Net()
    compiled = ortlab.compile(copy.deepcopy(model))
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.kind == "inference" and graph.lowering == "make_fx"
    # With grad enabled the same model goes through AOTAutograd (forward + backward).
    compiled(x).sum().backward()
    assert [g.lowering for g in compiled.ortlab_backend.graphs][1:] == ["aot_autograd"] * 2


def test_thin_path_keeps_outputs_that_alias_inputs_as_views():
    def f(x):
        return x.view(-1), x.t()[1:], x.sin()

    compiled = ortlab.compile(f)
    x = torch.randn(3, 4)
    with torch.no_grad():
        flat, sliced, s = compiled(x)
    torch.testing.assert_close(s, x.sin())
    x.add_(1)  # the views must see the mutation, as in eager
    torch.testing.assert_close(flat, x.view(-1))
    torch.testing.assert_close(sliced, x.t()[1:])
    graph = compiled.ortlab_backend.graphs[0]
    kept = [v for v in graph.verdicts if "view of a graph input" in v.reason]
    assert kept and all(not v.supported for v in kept)


def test_thin_path_applies_input_mutation():
    def f(x, buf):
        buf.mul_(2)
        return x + buf

    compiled = ortlab.compile(f)
    x, buf = torch.randn(4), torch.ones(4)
    with torch.no_grad():
        out = compiled(x, buf)
    torch.testing.assert_close(buf, torch.full((4,), 2.0))
    torch.testing.assert_close(out, x + 2)


def test_function_that_enables_grad_inside_uses_aot_autograd():
    def f(x):
        with torch.enable_grad():
            return (x * 2).sum()

    compiled = ortlab.compile(f)
    with torch.no_grad():
        compiled(torch.randn(3))
    assert all(g.lowering == "aot_autograd" for g in compiled.ortlab_backend.graphs)


@pytest.mark.parametrize("dynamic", [True, False])
def test_frozen_parameters_and_buffers_become_initializers(dynamic):
    model = Net()
    compiled = ortlab.compile(copy.deepcopy(model), dynamic=dynamic, freeze_parameters=True)
    x = torch.randn(6, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (session,) = compiled.ortlab_backend.sessions
    # fc1.weight, fc1.bias, fc2.weight, fc2.bias and the buffer are baked in; x is not.
    assert len(session.frozen_inputs) == 5
    initializers = {i.name for i in session.model.graph.initializer}
    assert set(session.frozen_inputs) <= initializers
    assert session.input_names == (session.input_names[0],)
    assert session.input_value_infos[0].type.tensor_type.elem_type == 1  # x, float32


def test_frozen_parameter_changed_in_place_triggers_a_re_export():
    model = Net()
    compiled = ortlab.compile(model, freeze_parameters=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        before = compiled(x)
        model.fc2.weight.mul_(-1)  # an optimizer step, say
        after = compiled(x)
        torch.testing.assert_close(after, model(x))
    assert not torch.allclose(before, after)
    sessions = compiled.ortlab_backend.sessions
    assert len(sessions) == 2 and [s.run_count for s in sessions] == [1, 1]
    # The session built on the old weight can never match again: it is retired.
    assert [s.active for s in sessions] == [False, True]


def _add_to_buffer(model):
    model.offset.add_(10.0)


def _replace_parameter(model):
    model.fc1.weight = nn.Parameter(torch.zeros_like(model.fc1.weight))


def _swap_parameter_data(model):
    model.fc1.weight.data = torch.zeros_like(model.fc1.weight)  # keeps the version counter


@pytest.mark.parametrize("change", [_add_to_buffer, _replace_parameter, _swap_parameter_data])
def test_any_change_to_a_frozen_tensor_triggers_a_re_export(change):
    model = Net()
    compiled = ortlab.compile(model, freeze_parameters=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x)
        change(model)
        torch.testing.assert_close(compiled(x), model(x))
    sessions = compiled.ortlab_backend.sessions
    assert len(sessions) == 2 and [s.active for s in sessions] == [False, True]


def test_a_frozen_tensor_that_keeps_changing_is_passed_as_an_input():
    model = Net()
    compiled = ortlab.compile(model, freeze_parameters=True)
    backend = compiled.ortlab_backend
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x)
        model.fc2.bias.add_(1.0)
        compiled(x)  # first change: re-exported, still frozen
        assert len(backend.sessions) == 2 and not backend.partitions[0].thawed_inputs
        model.fc2.bias.add_(1.0)
        with pytest.warns(RuntimeWarning, match="passed as an input"):
            torch.testing.assert_close(compiled(x), model(x))
        (partition,) = backend.partitions
        (thawed,) = partition.thawed_inputs
        session = backend.sessions[-1]
        assert thawed in session.input_names and thawed not in session.frozen_inputs
        assert len(session.frozen_inputs) == 4  # the others stay frozen
        for _ in range(3):  # further changes need no export
            model.fc2.bias.add_(1.0)
            torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.sessions) == 3
    assert "no longer frozen" in partition._repr_html_()


def test_freezing_does_not_apply_to_training_graphs():
    model = Net()
    backend = OrtBackend(OrtBackendOptions(freeze_parameters=True))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    compiled(torch.randn(3, 8)).sum().backward()
    assert all(not s.frozen_inputs for s in backend.sessions)
    assert model.fc1.weight.grad is not None


def test_compile_helper_leaves_the_model_copyable_and_isolates_recompiles():
    model = Net()
    compiled = [ortlab.compile(model) for _ in range(10)]
    copy.deepcopy(model)  # the backend is not attached to the user's module
    x = torch.randn(2, 8)
    with torch.no_grad():
        for c in compiled:  # more compiles than Dynamo's recompile limit (8)
            torch.testing.assert_close(c(x), model(x))
            assert c.ortlab_backend.execution_count == 1


def test_dead_nodes_are_removed_from_inference_graphs():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(torch.randn(3, 4))
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.eager_node_names == (), graph.verdicts
