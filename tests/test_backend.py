"""OrtBackend: a compile that is never fatal (each fall back recorded and warned about
once), strict mode, the records of why each graph exists, and the compile helper."""

from __future__ import annotations

import copy
import functools
import logging
import warnings

import onnx
import pytest
import torch
from models import Net
from torch import nn

import ortlab
from ortlab import OrtBackend, OrtBackendOptions


def test_compile_helper_leaves_the_model_copyable_and_isolates_recompiles():
    model = Net()
    compiled = [ortlab.compile(model) for _ in range(10)]
    copy.deepcopy(model)  # the backend is not attached to the user's module
    x = torch.randn(2, 8)
    with torch.no_grad():
        for c in compiled:  # more compiles than Dynamo's recompile limit (8)
            torch.testing.assert_close(c(x), model(x))
            assert c.ortlab_backend.execution_count == 1


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_compiled_model_can_be_copied_and_the_copy_compiles_anew(how):
    # deepcopy and pickle raised (a lock in the backend, a closure in its tracing config).
    import pickle

    model = Net().eval()
    compiled = ortlab.compile(model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        compiled(x)
        again = (
            copy.deepcopy(compiled)
            if how == "deepcopy"
            else pickle.loads(pickle.dumps(compiled))
        )
        torch.testing.assert_close(again(x), model(x))
    backend = ortlab.backend_of(again)  # a new backend, same options, its own records
    assert backend is not compiled.ortlab_backend
    assert backend.options == compiled.ortlab_backend.options
    assert [p.run_count for p in backend.partitions] == [1]


def test_compile_helper_attaches_its_backend():
    compiled = ortlab.compile(lambda x: x.cos(), preallocate_output=True)
    compiled(torch.randn(2))
    assert ortlab.backend_of(compiled) is compiled.ortlab_backend
    assert compiled.ortlab_backend.options.preallocate_output


def test_dynamic_true_on_a_static_graph_warns_once():
    backend = OrtBackend(OrtBackendOptions(dynamic_shapes=True))
    compiled = torch.compile(lambda x: x + 1, backend=backend, dynamic=False)
    with pytest.warns(RuntimeWarning, match="dynamic=True"):
        compiled(torch.randn(3))


def _ortlab_warnings(caught):
    return [w for w in caught if str(w.message).startswith("ortlab:")]


def _plant_lowering_failure(monkeypatch, *names: str) -> None:
    """Makes the named ``_torch_private`` lowering functions raise."""
    from ortlab.backend import _torch_private

    def broken(*args, **kwargs):
        raise RuntimeError("planted lowering failure")

    for name in names:
        monkeypatch.setattr(_torch_private, name, broken)


def _compile_and_check(model, *inputs):
    """Compiles a copy of ``model``, runs it on each input under ``no_grad`` against
    eager; returns the compiled module and ortlab's warnings."""
    compiled = ortlab.compile(copy.deepcopy(model))
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for x in inputs:
            torch.testing.assert_close(compiled(x), model(x))
    return compiled, _ortlab_warnings(caught)


def test_a_failing_make_fx_lowering_falls_back_to_aot_autograd_with_one_warning(monkeypatch):
    _plant_lowering_failure(monkeypatch, "lower_to_aten")
    compiled, caught = _compile_and_check(Net(), torch.randn(3, 8), torch.randn(3, 8) * 2)
    (warning,) = caught
    assert "planted lowering failure" in str(warning.message)
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.lowering == "aot_autograd" and graph.error is None
    assert "make_fx lowering failed" in graph.fallback and "planted" in graph.fallback
    assert compiled.ortlab_backend.execution_count == 2


def test_a_make_fx_fallback_that_dynamo_restarts_warns_once(monkeypatch):
    # AOTAutograd can make Dynamo re-trace the frame (TensorifyScalarRestartAnalysis):
    # the backend is then called twice for one graph, and must warn once.
    from torch._dynamo import exc

    _plant_lowering_failure(monkeypatch, "lower_to_aten")
    real = OrtBackend.lower_with_aot
    calls = []

    def restarting(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise exc.TensorifyScalarRestartAnalysis("planted restart")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(OrtBackend, "lower_with_aot", restarting)
    compiled, caught = _compile_and_check(Net(), torch.randn(3, 8))
    assert len(calls) == 2
    (warning,) = caught
    assert "make_fx lowering failed" in str(warning.message)
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.lowering == "aot_autograd" and "planted lowering failure" in graph.fallback


def test_a_failing_lowering_runs_the_graph_eagerly_and_records_why(monkeypatch):
    _plant_lowering_failure(monkeypatch, "lower_to_aten", "aot_autograd_backend")
    compiled, caught = _compile_and_check(Net(), torch.randn(3, 8))
    assert len(caught) == 2  # the make_fx fall back, then the eager one
    backend = compiled.ortlab_backend
    (graph,) = backend.graphs
    assert graph.lowering == "eager" and "planted lowering failure" in graph.error
    assert graph.partitions == [] and graph.node_count > 0
    assert all(not v.supported and "runs in PyTorch" in v.reason for v in graph.verdicts)
    assert backend.summary()["failed_graphs"] == 1
    assert "planted lowering failure" in graph._repr_html_()


def test_a_failing_compile_of_an_aot_graph_runs_that_graph_eagerly(monkeypatch):
    from ortlab.backend import _partition

    real = _partition.partition_graph

    def broken_backward(gm, support, **kwargs):
        if any(n.name.startswith("tangents") for n in gm.graph.nodes):
            raise RuntimeError("planted partitioning failure")
        return real(gm, support, **kwargs)

    monkeypatch.setattr(_partition, "partition_graph", broken_backward)
    model = Net()
    reference = copy.deepcopy(model)
    compiled = ortlab.compile(model)
    x = torch.randn(4, 8)
    with pytest.warns(RuntimeWarning, match="planted partitioning failure"):
        compiled(x).sum().backward()
    reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    forward, backward = compiled.ortlab_backend.graphs
    assert forward.error is None and forward.partitions[0].run_count == 1
    assert backward.kind == "backward" and backward.lowering == "aot_autograd"
    assert "planted partitioning failure" in backward.error


def test_strict_raises_instead_of_falling_back(monkeypatch):
    from ortlab.backend import _torch_private

    def broken(*args, **kwargs):
        raise RuntimeError("planted lowering failure")

    monkeypatch.setattr(_torch_private, "lower_to_aten", broken)
    compiled = ortlab.compile(Net(), strict=True)
    with pytest.raises(Exception) as raised, torch.no_grad():
        compiled(torch.randn(3, 8))
    chain, error = [], raised.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    (compile_error,) = [e for e in chain if isinstance(e, ortlab.CompileError)]
    assert "strict=True" in str(compile_error) and "planted" in str(compile_error)


def test_strict_raises_when_a_partition_cannot_be_exported():
    def break_model(model):
        model.graph.node[0].op_type = "NoSuchOnnxOp"

    compiled = ortlab.compile(
        lambda x: x.sin() * 2, strict=True, pre_ort_model_transforms=[break_model]
    )
    with pytest.raises(ortlab.CompileError, match="NoSuchOnnxOp"):
        compiled(torch.randn(3))


def test_dynamo_control_flow_exceptions_pass_through(monkeypatch):
    from torch._dynamo import exc

    from ortlab.backend import _torch_private

    def restart(*args, **kwargs):
        raise exc.SkipFrame("planted: Dynamo should skip this frame")

    monkeypatch.setattr(_torch_private, "lower_to_aten", restart)
    gm = torch.fx.symbolic_trace(lambda x: x.sin())
    backend = OrtBackend()
    with torch.no_grad(), pytest.raises(exc.SkipFrame):
        backend(gm, [torch.randn(3)])
    assert backend.graphs == []


class _Printing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        print("between the graphs")  # a graph break
        return torch.relu(y)


def test_graph_breaks_and_recompiles_say_why_each_graph_exists(capsys):
    model = _Printing()
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(torch.randn(3, 4))
        model.double()
        compiled(torch.randn(3, 4, dtype=torch.float64))  # new dtype: recompile
    graphs = compiled.ortlab_backend.graphs
    assert len(graphs) == 4
    first, resumed, recompiled, resumed_again = graphs
    line = _Printing.forward.__code__.co_firstlineno + 2
    assert first.graph_break and "print" in first.graph_break
    expected = f'tests/test_backend.py:{line}: print("between the graphs")'
    assert first.graph_break_source.startswith(expected)
    assert first.recompile_reason is None
    assert first.frame == "forward (tests/test_backend.py)"
    assert resumed.graph_break is None
    assert resumed.frame == f"forward (resumed after line {line}) (tests/test_backend.py)"
    assert "dtype mismatch" in recompiled.recompile_reason
    assert recompiled.cause.startswith("recompile of forward (tests/test_backend.py): ")
    assert "graph break" in recompiled.cause
    assert "dtype mismatch" in resumed_again.recompile_reason
    assert first.cause.startswith("first compile of forward")


def _wrapped(forward):
    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):  # as transformers' decorators call forward
        return forward(self, *args, **kwargs)

    return wrapper


_LOSS_LOG = logging.getLogger("tests.loss")


class _LoggingLoss(nn.Module):
    """transformers' ``loss_function``: a property that logs when no loss type is set."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @property
    def loss_function(self):
        _LOSS_LOG.warning("no loss type set, using MSE")
        return nn.functional.mse_loss

    @_wrapped
    def forward(self, x, target):
        y = self.fc(x).relu()
        loss = self.loss_function(y, target)
        return loss, y


def test_a_graph_break_inside_a_call_names_its_own_reason_line_and_dynamos_hint():
    # Dynamo ends the graph before the call with the reason "step_unsupported"; the
    # record says what broke, where, and what Dynamo advises (GPT-2's training graph).
    compiled = ortlab.compile(_LoggingLoss())
    with torch.no_grad():
        compiled(torch.randn(2, 4), torch.zeros(2, 4))
    first = compiled.ortlab_backend.graphs[0]
    assert first.graph_break.startswith("logging.Logger method not supported")
    loss_line = _LoggingLoss.loss_function.fget.__code__.co_firstlineno + 2
    call_line = _LoggingLoss.forward.__wrapped__.__code__.co_firstlineno + 3
    assert first.graph_break_source == (
        f'tests/test_backend.py:{loss_line}: _LOSS_LOG.warning("no loss type set, using '
        f'MSE") (called from tests/test_backend.py:{call_line}: '
        "loss = self.loss_function(y, target))"
    )
    assert "(Dynamo's hint: Add the logging method to `torch._dynamo.config." in first.cause


def test_first_graph_times_dynamo_and_every_graph_times_its_lowering():
    compiled = ortlab.compile(Net())
    compiled(torch.randn(3, 8)).sum().backward()
    forward, backward = compiled.ortlab_backend.graphs
    assert forward.timings["dynamo"] > 0 and forward.timings["lower"] > 0
    assert "dynamo" not in backward.timings  # paid once, by the first graph
    # Dynamo's and AOTAutograd's work after ortlab returned, until each graph first ran.
    assert forward.timings["guards"] > 0 and backward.timings["guards"] >= 0


def test_first_call_is_accounted_for_by_the_timings():
    import time

    ortlab.backend.warm_up()
    compiled = ortlab.compile(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten()))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(x)
        first_call = time.perf_counter() - start
    steps = compiled.ortlab_backend.compile_timings()
    assert {"dynamo", "lower", "guards", "translate", "session", "first_run"} <= {
        k for k, v in steps.items() if v > 0
    }
    assert 0.85 * first_call <= sum(steps.values()) <= first_call


def test_timeline_shows_each_graph_new_or_reused_and_the_sessions_it_made(capsys):
    model = _Printing()
    compiled = ortlab.compile(model, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(3, 4))
        compiled(torch.randn(5, 4))  # both graphs reused (symbolic batch)
        model.double()
        compiled(torch.randn(3, 4, dtype=torch.float64))  # recompiled
    backend = compiled.ortlab_backend
    assert [g.run_count for g in backend.graphs] == [2, 2, 1, 1]
    kinds = [(e.kind, e.graph_run, e.graph_index) for e in backend.timeline]
    assert kinds == [  # runs 3 and 4 reused graphs 0 and 1: no events
        ("graph", 1, 0),
        ("session", 1, 0),
        ("graph", 2, 1),
        ("session", 2, 1),
        ("graph", 5, 2),
        ("session", 5, 2),
        ("graph", 6, 3),
        ("session", 6, 3),
    ]
    assert backend.timeline[4].detail.startswith("recompile of forward")
    session = backend.timeline[1]
    assert session.partition_name == "fused_0" and session.session_index == 0
    assert "float32" in backend.timeline[1].detail


def test_timeline_events_read_as_one_line_each():
    compiled = ortlab.compile(lambda x: x.sin())
    with torch.no_grad():
        compiled(torch.randn(3))
    graph, session = compiled.ortlab_backend.timeline
    assert repr(graph).startswith("TimelineEvent(run 1: graph 0 compiled: first compile of")
    assert repr(session) == (
        "TimelineEvent(run 1: graph 0 fused_0: session 0 created for float32[3])"
    )


def test_frames_and_sources_name_the_users_code_not_torchs_or_ortlabs():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())  # Dynamo enters through its wrapper
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(torch.randn(2, 4))
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.frame == "Sequential.forward"
    assert not any("ortlab/" in v.source for v in graph.verdicts)


def test_the_magics_and_the_labs_entry_points_are_not_the_users_frame():
    from ortlab import _harness

    def f(x):
        return x.sin() * 2

    entry = _harness.fresh_entry(f, name="ortcompile_call")
    compiled = ortlab.compile(entry)
    with torch.no_grad():
        compiled(torch.randn(3))
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.frame == "f (tests/test_backend.py)"
    assert all(v.source.startswith("tests/test_backend.py:") for v in graph.verdicts)


class _ScaledNorm(nn.Module):
    """Reads two Python floats: LayerNorm's ``eps`` and its own ``scale``."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.scale = 0.5

    def forward(self, x):
        return self.norm(x) * self.scale


def _double_inputs(backend) -> list[str]:
    double = onnx.TensorProto.DOUBLE
    return [
        i.name
        for s in backend.sessions
        for i in s.model.graph.input
        if i.type.tensor_type.elem_type == double
    ]


def test_floats_the_model_reads_are_constants_guarded_by_value():
    model = _ScaledNorm().eval()
    x = torch.randn(2, 5, 8)
    compiled = ortlab.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        # eps and scale are in the ONNX graph
        assert _double_inputs(compiled.ortlab_backend) == []
        model.scale = 2.0  # a guard sees the new value: compiled again, not stale
        torch.testing.assert_close(compiled(x), model(x))
    assert len(compiled.ortlab_backend.graphs) == 2
    assert torch._dynamo.config.specialize_float is False  # only while tracing

    # specialize_floats=False is torch.compile's own behaviour: under dynamic=True each
    # float is a float64 input of the graph, made each call, from the first call...
    unspecialized = ortlab.compile(model, specialize_floats=False, dynamic=True)
    with torch.no_grad():
        torch.testing.assert_close(unspecialized(x), model(x))
    assert len(_double_inputs(unspecialized.ortlab_backend)) >= 1
    # ... and under the default once it has changed (automatic dynamic), where ortlab's
    # default compiles the new value in as a constant (above).
    model.scale = 3.0
    # Dynamo remembers per code object which values changed: forget the change above.
    torch._dynamo.reset()
    later = ortlab.compile(model, specialize_floats=False)
    with torch.no_grad():
        later(x)
        assert _double_inputs(later.ortlab_backend) == []
        model.scale = 4.0
        torch.testing.assert_close(later(x), model(x))
    assert len(_double_inputs(later.ortlab_backend)) >= 1

    # ortlab.diff compiles the way ortlab.compile does: its numbers are the user's.
    report = ortlab.diff(model, x)
    assert report.passed and report.backend.sessions
    assert _double_inputs(report.backend) == []


def test_a_training_graph_that_fails_to_lower_says_no_grad_would_run_it(monkeypatch):
    _plant_lowering_failure(monkeypatch, "aot_autograd_backend")
    compiled = ortlab.compile(copy.deepcopy(Net()).eval())
    with pytest.warns(ortlab.FallbackWarning, match=r"torch\.no_grad\(\)"):
        compiled(torch.randn(3, 8))  # grad enabled: the training path
    (graph,) = compiled.ortlab_backend.graphs
    assert "call the model under torch.no_grad()" in graph.error
    with torch.no_grad():  # and it does run: make_fx needs no autograd
        compiled(torch.randn(3, 8))
    assert compiled.ortlab_backend.graphs[-1].lowering == "make_fx"
