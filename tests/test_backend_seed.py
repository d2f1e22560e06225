"""The behaviours of the old ``onnxrt`` backend's test suite, against ortlab's contract.

Counting is expressed through records: ``execution_count`` counts partition runs in ONNX
Runtime; "cached graph modules" are the partitions that own sessions; "exported models
per graph module" are ``len(partition.sessions)``.
"""

from __future__ import annotations

import copy
import os

import onnx
import pytest
import torch
from torch import nn

import ortlab
from ortlab import OrtBackend, OrtBackendOptions, zoo


def _run_numerically(
    model, backend, args_collection, *, fullgraph=False, backward=False, atol=1e-5, rtol=1e-6
):
    compiled = torch.compile(
        copy.deepcopy(model) if isinstance(model, nn.Module) else model,
        backend=backend,
        dynamic=True,
        fullgraph=fullgraph,
    )
    for args in args_collection:
        expected = model(*args)
        actual = compiled(*args)
        if isinstance(expected, torch.Tensor):
            torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
            if backward:
                expected.sum().backward()
                actual.sum().backward()
                for p_ref, p in zip(model.parameters(), compiled.parameters()):
                    torch.testing.assert_close(p.grad, p_ref.grad, atol=atol, rtol=rtol)
        else:
            for e, a in zip(expected, actual, strict=True):
                torch.testing.assert_close(a, e, atol=atol, rtol=rtol)
    return compiled


def _backend_for(local: bool) -> OrtBackend | str:
    return OrtBackend(OrtBackendOptions(dynamic_shapes=True)) if local else "ortlab"


def _resolve(backend: OrtBackend | str) -> OrtBackend:
    if isinstance(backend, OrtBackend):
        return backend
    (cached,) = OrtBackend.get_cached_instances()
    return cached


def _assert_counting(backend, *, executions, sessions_per_partition):
    assert backend.execution_count == executions
    with_sessions = [p for p in backend.partitions if p.sessions]
    assert tuple(len(p.sessions) for p in with_sessions) == sessions_per_partition


def _assert_symbolic_dims_everywhere(backend):
    """Every model has symbolic input dims; forward models symbolic output dims too
    (backward outputs are parameter gradients, whose shapes are static)."""
    for partition in backend.partitions:
        for session in partition.sessions:
            kinds = [session.input_value_infos]
            if partition.graph_kind != "backward":
                kinds.append(session.output_value_infos)
            for infos in kinds:
                dims = [d for vi in infos for d in vi.type.tensor_type.shape.dim]
                assert any(d.HasField("dim_param") for d in dims), session


@pytest.mark.parametrize("local", [True, False], ids=["local", "by-name"])
def test_elementwise_single_output_one_session_for_all_sizes(local):
    def f(x):
        return x.relu().sigmoid()

    backend = _backend_for(local)
    _run_numerically(f, backend, [(torch.randn(n),) for n in (2, 4, 6, 8, 10)])
    b = _resolve(backend)
    _assert_counting(b, executions=5, sessions_per_partition=(1,))
    assert len(b.graphs) == 1 and b.graphs[0].kind == "inference"


@pytest.mark.parametrize("local", [True, False], ids=["local", "by-name"])
def test_elementwise_multiple_outputs(local):
    def f(w):
        x = w + w
        y = x.relu()
        return x, y, y * y

    backend = _backend_for(local)
    _run_numerically(f, backend, [(torch.randn(n),) for n in (2, 4, 8)])
    _assert_counting(_resolve(backend), executions=3, sessions_per_partition=(1,))


class SeedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)

    def forward(self, x):
        return torch.sigmoid(self.fc2(torch.sigmoid(self.fc1(x))))


def test_mlp_batch_sweep_specialises_batch_one():
    backend = OrtBackend()
    _run_numerically(SeedMLP(), backend, [(torch.randn(n, 2),) for n in (1, 2, 4, 6, 8)])
    # batch 1 gets its own static graph (Dynamo's 0/1 specialisation); every other size
    # shares one symbolic graph and a single ONNX model.
    _assert_counting(backend, executions=5, sessions_per_partition=(1, 1))
    forwards = [g for g in backend.graphs if g.kind == "forward"]
    assert len(forwards) == 2
    static, dynamic = (g.partitions[0].sessions[0] for g in forwards)
    assert "float32[1,2]" in static.input_schema
    assert not any("[s" in t for t in static.input_schema)
    assert any(t.startswith("float32[s") for t in dynamic.input_schema)
    assert dynamic.run_count == 4


def test_mlp_training_gradients_match_eager_and_backward_runs_in_ort():
    backend = OrtBackend()
    _run_numerically(SeedMLP(), backend, [(torch.randn(n, 2),) for n in (2, 4)], backward=True)
    kinds = [g.kind for g in backend.graphs]
    assert "forward" in kinds and "backward" in kinds
    backward = [g for g in backend.graphs if g.kind == "backward"]
    assert sum(p.run_count for g in backward for p in g.partitions) == 2
    assert all(not g.eager_node_names for g in backward)


@pytest.mark.slow
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward-backward"])
def test_tiny_llama_fullgraph_with_symbolic_dims_in_every_model(backward):
    spec = zoo.get("tiny_llama")
    model = spec.build()
    if backward:
        model.train()
    backend = OrtBackend()

    def inputs(batch, seq):
        ids = torch.randint(0, 7, (batch, seq), generator=torch.Generator().manual_seed(batch))
        return ids, None, torch.arange(seq).unsqueeze(0).view(-1, seq)

    collection = [inputs(2, 8), inputs(4, 7), inputs(9, 15)]
    compiled = torch.compile(
        copy.deepcopy(model), backend=backend, dynamic=True, fullgraph=True
    )
    for args in collection:
        expected, actual = model(*args), compiled(*args)
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
        if backward:
            expected.sum().backward()
            actual.sum().backward()
    if backward:
        for (name, p_ref), p in zip(model.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(p.grad, p_ref.grad, atol=1e-4, rtol=1e-4, msg=name)
    # Parameters require grad, so AOTAutograd always splits forward and backward; the
    # backward graph only runs (and gets a session) when backward() is called.
    graphs = 2 if backward else 1
    assert [g.kind for g in backend.graphs] == ["forward", "backward"]
    _assert_counting(backend, executions=3 * graphs, sessions_per_partition=(1,) * graphs)
    _assert_symbolic_dims_everywhere(backend)


@pytest.mark.parametrize("how", ["option", "ORTLAB_DUMP_PATH", "ONNXRT_DUMP_PATH"])
def test_dump_writes_each_new_model_once(tmp_path, monkeypatch, how):
    prefix = str(tmp_path / "dump_")
    monkeypatch.delenv("ORTLAB_DUMP_PATH", raising=False)
    monkeypatch.delenv("ONNXRT_DUMP_PATH", raising=False)
    if how == "option":
        backend = OrtBackend(OrtBackendOptions(dump_path=prefix))
    else:
        backend = OrtBackend()
    compiled = torch.compile(copy.deepcopy(SeedMLP()), backend=backend, dynamic=True)
    x = torch.randn(1, 2)
    assert not os.path.exists(prefix + "0.onnx")
    if how != "option":
        monkeypatch.setenv(how, prefix)
    compiled(x)
    assert os.path.exists(prefix + "0.onnx") and os.path.exists(prefix + "0.txt")
    assert not os.path.exists(prefix + "1.onnx")
    compiled(x)  # reuses the session: nothing new is written
    assert not os.path.exists(prefix + "1.onnx")
    onnx.checker.check_model(onnx.load(prefix + "0.onnx"))
    assert "call_function" in open(prefix + "0.txt", encoding="utf-8").read()
    session = backend.sessions[0]
    assert session.dump_files == (prefix + "0.onnx", prefix + "0.txt")


def test_graph_without_inputs_runs_a_constant_model():
    recorded: list[onnx.ModelProto] = []

    def f():
        return torch.ones(4, 8) + torch.zeros(4, 8)

    compiled = torch.compile(
        f,
        backend="ortlab",
        dynamic=True,
        options=OrtBackendOptions(pre_ort_model_transforms=[recorded.append]),
    )
    result = compiled()
    assert len(recorded) == 1
    assert len(recorded[0].graph.input) == 0
    torch.testing.assert_close(result, torch.ones(4, 8))
    (backend,) = OrtBackend.get_cached_instances()
    assert backend.execution_count == 1


def test_transforms_run_in_order_and_change_what_ort_runs():
    recorded: list[onnx.ModelProto] = []

    def sigmoid_model(x):
        return x + torch.sigmoid(x)

    first = torch.compile(
        sigmoid_model,
        backend="ortlab",
        dynamic=True,
        options=OrtBackendOptions(pre_ort_model_transforms=[recorded.append]),
    )
    x = torch.randn(2)
    assert not recorded
    y = first(x)
    assert len(recorded) == 1

    def relu_to_sigmoid(model):
        for node in model.graph.node:
            if node.op_type == "Relu":
                node.op_type = "Sigmoid"

    def relu_model(x):
        return x + torch.relu(x)

    second = torch.compile(
        relu_model,
        backend="ortlab",
        dynamic=True,
        options=OrtBackendOptions(pre_ort_model_transforms=[relu_to_sigmoid, recorded.append]),
    )
    z = second(x)
    assert len(recorded) == 2
    assert "Sigmoid" in [n.op_type for n in recorded[1].graph.node]
    torch.testing.assert_close(z, y)
    assert not torch.allclose(z, relu_model(x))


def test_records_expose_the_contract():
    backend = OrtBackend()
    compiled = torch.compile(SeedMLP(), backend=backend, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(3, 2))
    (graph,) = backend.graphs
    assert graph.kind == "inference"
    assert isinstance(graph.graph_module, torch.fx.GraphModule)
    assert isinstance(graph.partitioned, torch.fx.GraphModule)
    assert [v.node for v in graph.verdicts] == [
        n.name for n in graph.graph_module.graph.nodes if n.op == "call_function"
    ]
    (partition,) = graph.partitions
    assert backend.partitions == [partition]
    assert partition.name == "fused_0" and partition.run_count == 1
    (session,) = partition.sessions
    assert isinstance(session.model, onnx.ModelProto)
    assert session.input_names == tuple(i.name for i in session.model.graph.input)
    assert session.output_names == tuple(o.name for o in session.model.graph.output)
    assert session.providers[-1] == "CPUExecutionProvider"
    assert (
        session.run_count == 1 and session.export_seconds > 0 and session.session_seconds > 0
    )
    for step in ("type_promotion", "translate", "serialize", "session", "first_run"):
        assert step in session.timings
    # "registry" too when this graph is the first of the process to need the exporter's
    # registry (its build is timed apart from the lowering).
    steps = set(graph.timings)
    assert {"dynamo", "lower", "support", "partition"} <= steps
    assert steps <= set(ortlab.backend.records.GRAPH_STEPS)
    assert graph.timings["lower"] > 0  # make_fx, the thin inference path
    assert graph.timings["dynamo"] > 0  # Dynamo's trace of the frame
    assert set(ortlab.backend.records.TIMING_STEPS) <= set(backend.compile_timings())


def test_aot_autograd_lowering_time_is_recorded_per_graph():
    backend = OrtBackend()
    compiled = torch.compile(SeedMLP(), backend=backend, dynamic=True)
    compiled(torch.randn(3, 2)).sum().backward()
    forward = next(g for g in backend.graphs if g.kind == "forward")
    assert forward.lowering == "aot_autograd" and forward.timings["lower"] > 0
