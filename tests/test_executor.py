"""The partition runtime: sessions per input schema (bounded, evicted, cleared), frozen
parameters and their guards, failures, and observers."""

from __future__ import annotations

import copy

import pytest
import torch
from models import Net
from torch import nn

import ortlab
from ortlab import OrtBackend, OrtBackendOptions


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


def test_static_export_makes_one_session_per_shape_in_a_dynamic_graph():
    def f(x):
        return x.sigmoid() * 2

    backend = OrtBackend(OrtBackendOptions(dynamic_shapes=False))
    compiled = torch.compile(f, backend=backend, dynamic=True)
    for n in (3, 5, 3, 7):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), f(x))
    (graph,) = backend.graphs
    (partition,) = graph.partitions
    assert [s.input_schema for s in partition.sessions] == [
        ("float32[3]",),
        ("float32[5]",),
        ("float32[7]",),
    ]
    assert [s.run_count for s in partition.sessions] == [2, 1, 1]


def test_clear_sessions_recreates_on_next_call():
    backend = OrtBackend()
    compiled = torch.compile(lambda x: x.exp(), backend=backend, dynamic=True)
    x = torch.randn(3)
    compiled(x)
    backend.clear_sessions()
    assert not backend.sessions[0].active
    torch.testing.assert_close(compiled(x), x.exp())
    assert len(backend.sessions) == 2 and backend.sessions[1].active


def test_observers_see_what_ort_received_and_returned():
    backend = OrtBackend()
    compiled = torch.compile(lambda x: x * 2, backend=backend, dynamic=True)
    events = []
    remove = backend.add_observer(events.append)
    x = torch.randn(3)
    compiled(x)
    (event,) = events
    assert event.partition is backend.partitions[0]
    torch.testing.assert_close(event.outputs[0], x * 2)
    remove()
    compiled(x)
    assert len(events) == 1


def test_session_cache_is_bounded_and_evicts_the_oldest():
    from ortlab.backend import _executor

    backend = OrtBackend(OrtBackendOptions(dynamic_shapes=False))
    compiled = torch.compile(lambda x: x.exp(), backend=backend, dynamic=True)
    sizes = range(2, 2 + _executor.MAX_SESSIONS_PER_PARTITION + 2)
    for n in sizes:
        compiled(torch.randn(n))
    sessions = backend.partitions[0].sessions
    assert len(sessions) == len(sizes)
    assert [s.active for s in sessions] == [False, False] + [True] * (len(sizes) - 2)
    # An evicted schema is exported again, as a new (active) session.
    torch.testing.assert_close(compiled(torch.ones(2)), torch.ones(2).exp())
    assert len(sessions) == len(sizes) + 1 and sessions[-1].active


def test_a_failed_partition_deactivates_its_sessions():
    calls = {"n": 0}

    def break_second_model(model):
        calls["n"] += 1
        if calls["n"] == 2:
            model.graph.node[0].op_type = "NoSuchOnnxOp"

    backend = OrtBackend(
        OrtBackendOptions(dynamic_shapes=False, pre_ort_model_transforms=[break_second_model])
    )
    compiled = torch.compile(lambda x: x.cos(), backend=backend, dynamic=True)
    compiled(torch.randn(3))
    with pytest.warns(RuntimeWarning, match="NoSuchOnnxOp"):
        torch.testing.assert_close(compiled(torch.zeros(4)), torch.ones(4))
    partition = backend.partitions[0]
    assert partition.state == "eager"
    assert not any(s.active for s in partition.sessions)
