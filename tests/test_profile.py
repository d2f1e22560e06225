"""ortlab.profile: the call attributed to FX nodes, modules and source lines; ONNX Runtime's
profile read back and mapped to FX nodes; the Chrome trace; the views and %ortcompile."""

from __future__ import annotations

import json

import onnx
import pytest
import torch
from onnx import helper

import ortlab
from ortlab import magic, views, zoo
from ortlab.backend import _executor
from ortlab.profiling import _mapping, _trace

PART_SECONDS = 20e-3
"""Fake time one partition call takes (glue and ONNX Runtime)."""
ORT_SECONDS = 15e-3
"""Fake time of its session's run alone: the glue is the difference."""
TICK = 1e-4
"""Fake time each read of the clock takes (what an eager node or a call without
partitions takes on this clock; the engine settles each block for 10 ms of it)."""


class FakeClock:
    """Time advances by ``TICK`` per read, and by what the patched runs add."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += TICK
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="module")
def custom_op():
    model, args = zoo.get("custom_op").instantiate()
    return model.eval(), args


@pytest.fixture
def fake_clock(monkeypatch):
    """A fake clock that partition calls advance by ``PART_SECONDS`` (in the compiled call
    as in the profile's graph runs) and bare session runs by ``ORT_SECONDS``."""
    clock = FakeClock()
    real_call = _executor.OrtPartitionModule.__call__
    real_run = ortlab.backend.StandaloneSession.run

    def call(self, *args):
        clock.advance(PART_SECONDS)
        return real_call(self, *args)

    def run(self, inputs):
        clock.advance(ORT_SECONDS)
        return real_run(self, inputs)

    monkeypatch.setattr(_executor.OrtPartitionModule, "__call__", call)
    monkeypatch.setattr(ortlab.backend.StandaloneSession, "run", run)
    return clock


def test_profile_of_a_zoo_model_attributes_the_measured_call(custom_op, fake_clock):
    model, args = custom_op
    compiled = ortlab.compile(model)
    with torch.no_grad():
        profile = ortlab.profile(compiled, *args, runs=1, clock=fake_clock)
    partitions = {(s.graph_index, s.partition) for s in profile.sessions}
    assert partitions, "the model has partitions in ONNX Runtime"
    # The call: every partition once, plus the clock's own reads.
    assert profile.call_seconds == pytest.approx(len(partitions) * PART_SECONDS, abs=2 * TICK)
    assert profile.coverage >= 0.95
    # What is left: the clock's own reads around the eager nodes and Dynamo's entry.
    assert abs(profile.unattributed_seconds) < 20 * TICK
    for graph_index, name in partitions:
        where = (graph_index, name)
        glue = sum(
            o.seconds
            for o in profile.overheads
            if o.kind == "glue" and (o.graph_index, o.partition) == where
        )
        assert glue == pytest.approx(PART_SECONDS - ORT_SECONDS, abs=1e-9)
        # ONNX Runtime's nodes (and the time between them) share its measured run.
        ort = sum(
            o.seconds for o in profile.ort_nodes if (o.graph_index, o.partition) == where
        )
        rest = sum(
            o.seconds
            for o in profile.overheads
            if o.kind in ("ort_between", "ort_unmapped")
            and (o.graph_index, o.partition) == where
        )
        assert ort + rest == pytest.approx(ORT_SECONDS + TICK, abs=1e-9)
    # The custom op runs in PyTorch: an eager row with its module and source line.
    eager = [n for n in profile.nodes if n.placement == "eager"]
    assert any("soft_clip" in n.target for n in eager)
    ort_rows = [n for n in profile.nodes if n.placement == "ort" and n.seconds > 0]
    assert ort_rows and all(n.ort_nodes for n in ort_rows)
    assert {n.module for n in profile.nodes} & {"fc1", "fc2"}
    assert any("test_" not in n.source and ".py:" in n.source for n in profile.nodes)
    # Groups sum their nodes.
    total = sum(n.seconds for n in profile.nodes)
    root = next(g for g in profile.by_module() if g.key == "")
    assert root.seconds == pytest.approx(total)
    assert sum(g.seconds for g in profile.by_source()) == pytest.approx(total)
    assert sum(o.seconds for o in profile.ort_nodes) == pytest.approx(
        sum(g.seconds for g in profile.by_op_type())
    )


def test_chrome_trace_loads_as_json_with_fx_node_module_and_source(
    custom_op, fake_clock, tmp_path
):
    model, args = custom_op
    compiled = ortlab.compile(model)
    with torch.no_grad():
        profile = ortlab.profile(compiled, *args, runs=1, clock=fake_clock)
    path = profile.to_chrome_trace(tmp_path / "trace" / "call.json")
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    events = document["traceEvents"]
    assert document["otherData"]["call_ms"] == pytest.approx(profile.call_seconds * 1e3)
    for event in events:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(event)
        assert event["ph"] == "X" and event["dur"] >= 0
    fx = [e for e in events if e["cat"] in ("fx_node", "eager")]
    assert fx
    for event in fx:
        assert {"fx_node", "module", "source", "target", "graph"} <= set(event["args"])
    assert any(e["cat"] == "ort_node" and e["args"]["fx_nodes"] for e in events)
    assert any(e["cat"] == "eager" and "soft_clip" in e["args"]["target"] for e in events)


def test_fused_attention_time_lands_on_the_fx_nodes_it_absorbed():
    model, args = zoo.get("bert").instantiate()
    compiled = ortlab.compile(model.eval(), ort_fusions=True)
    with torch.no_grad():
        profile = ortlab.profile(compiled, *args, runs=1, entry=False)
    fused = [o for o in profile.ort_nodes if o.op_type in ("Attention", "MultiHeadAttention")]
    assert fused, [o.op_type for o in profile.ort_nodes]
    for o in fused:
        # It stands for the attention and the nodes around it that it absorbed.
        assert len(o.fx_nodes) > 1
        assert any(
            "scaled_dot_product" in profile.node(n, o.graph_index).target for n in o.fx_nodes
        )
        assert sum(o.fx_shares) == pytest.approx(1.0)
        for name, share in zip(o.fx_nodes, o.fx_shares):
            row = profile.node(name, o.graph_index)
            assert row.placement == "ort"
            assert (o.name or o.op_type) in row.ort_nodes
            assert row.seconds >= o.seconds * share - 1e-12
        # The attention product takes the largest share (the sharing rule weighs work).
        sdpa = max(zip(o.fx_shares, o.fx_nodes))[1]
        assert "scaled_dot_product" in profile.node(sdpa, o.graph_index).target or any(
            t in profile.node(sdpa, o.graph_index).target for t in ("mm", "matmul")
        )


# -- the mapping, on hand-made graphs -------------------------------------------------------


def _graph(nodes, inputs=("x",), outputs=("y",)):
    value = helper.make_tensor_value_info
    return helper.make_graph(
        nodes,
        "g",
        [value(i, onnx.TensorProto.FLOAT, None) for i in inputs],
        [value(o, onnx.TensorProto.FLOAT, None) for o in outputs],
    )


def test_optimized_nodes_are_mapped_back_through_fusions_and_layout_reorders():
    model = _graph(
        [
            helper.make_node("Conv", ["x"], ["c"], name="node_conv"),
            helper.make_node("BatchNormalization", ["c"], ["b"], name="node_bn"),
            helper.make_node("Relu", ["b"], ["r"], name="node_relu"),
            helper.make_node("MatMul", ["r"], ["m"], name="node_mm"),
            helper.make_node("Add", ["m"], ["y"], name="node_add"),
        ]
    )
    optimized = _graph(
        [
            helper.make_node("ReorderInput", ["x"], ["t0"], name="ReorderInput"),
            helper.make_node("Conv", ["t0"], ["t1"], name="r_nchwc"),  # Conv+BN+Relu
            helper.make_node("ReorderOutput", ["t1"], ["r"], name="ReorderOutput"),
            # MatMul + Add fused, named after the MatMul, writing the Add's value.
            helper.make_node("FusedMatMul", ["r"], ["y"], name="node_mm/Fusion/"),
        ]
    )
    mapped = _mapping.optimized_to_model(optimized, model)
    assert mapped[1] == ((0, 1, 2), False)  # the fused conv: Conv, BN, Relu
    assert mapped[0] == ((0, 1, 2), True)  # the reorder borrows from the conv after it
    assert mapped[2] == ((0, 1, 2), True)  # and the one before it
    assert mapped[3] == ((3, 4), False)


def test_trace_groups_kernels_by_run_and_leaves_out_warm_up_runs():
    def kernel(name, op, ts, dur):
        args = {"op_name": op, "provider": "CPUExecutionProvider"}
        return {
            "cat": "Node",
            "name": f"{name}_kernel_time",
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        kernel("a", "Relu", 10, 50),
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
        kernel("a", "Relu", 210, 20),
        kernel("", "Cast", 240, 5),
        kernel("", "Cast", 250, 7),
        {"cat": "Session", "name": "model_run", "ts": 400, "dur": 60},
        kernel("a", "Relu", 410, 30),
        kernel("", "Cast", 445, 5),
        kernel("", "Cast", 450, 6),
    ]
    trace = _trace.parse(events, skip=1)
    assert trace.run_seconds == pytest.approx([100e-6, 60e-6])
    assert [(k.node, k.op_type, k.run, k.occurrence) for k in trace.kernels] == [
        ("a", "Relu", 0, 0),
        ("", "Cast", 0, 0),
        ("", "Cast", 0, 1),
        ("a", "Relu", 1, 0),
        ("", "Cast", 1, 0),
        ("", "Cast", 1, 1),
    ]
    keys = _trace.node_keys(["", "a", ""], ["Cast", "Relu", "Cast"])
    assert keys == {("", "Cast", 0): 0, ("a", "Relu", 0): 1, ("", "Cast", 1): 2}


# -- views and the magic ---------------------------------------------------------------------


def test_profile_views_render_in_the_report_and_the_inspector(custom_op, fake_clock):
    model, args = custom_op
    compiled = ortlab.compile(model)
    with torch.no_grad():
        profile = ortlab.profile(compiled, *args, runs=1, clock=fake_clock, label="<b>m</b>")
    html = views.report_html(profile)
    assert 'data-tab="Profile"' in html
    assert "Top modules" in html and "Top source lines" in html
    assert "<svg" in html and "<title>" in html  # the icicle chart, inline
    assert "https://" not in html.split("</header>", 1)[1]
    assert "<b>m</b>" not in html
    if views.dot_available():
        assert "<title>heat</title>" in html  # the overlay, laid out by Graphviz
    inspector = views.Inspector(compiled, profile=profile)
    assert inspector.backend is compiled.ortlab_backend
    pytest.importorskip("ipywidgets")
    assert "Profile" in inspector.tabs.titles


def test_ortcompile_profile_shows_the_profile_and_options_measured_on_the_model():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 16, 16)
    options, call = magic.parse_arguments("--profile 2 --no-diff model(x)")
    result = magic.run_ortcompile(options, call, {"model": model, "x": x})
    profile = result.profile
    assert profile is not None, result.profile_error
    assert "profile" in result.verdict and "attributed" in result.verdict
    # Weights enter ONNX Runtime as inputs: freezing them was tried, and measured.
    tried = {a.option: a for a in profile.advice}
    assert "freeze_parameters" in tried
    assert tried["freeze_parameters"].trial_seconds is not None
    assert "Options tried on this model" in views.report_html(result.backend, profile=profile)


def test_advice_tries_a_larger_min_partition_size_where_partitions_lose_to_pytorch(
    custom_op, fake_clock
):
    # On the fake clock a partition call costs PART_SECONDS and its nodes in PyTorch
    # nothing: every partition loses, so the trial keeps them all in PyTorch.
    model, args = custom_op
    compiled = ortlab.compile(model)
    with torch.no_grad():
        profile = ortlab.profile(compiled, *args, runs=1, clock=fake_clock, advise=True)
    tried = {a.option: a for a in profile.advice}
    advice = tried["min_partition_size"]
    sizes = [len(p.node_names) for p in compiled.ortlab_backend.partitions]
    assert advice.value == max(sizes) + 1
    assert "in PyTorch" in advice.why
    assert advice.trial_seconds < advice.current_seconds
    assert advice.recommended and advice.gain > 1
    assert "recommended" in advice.text
    # Freezing changes nothing on this clock: tried, measured, not recommended.
    assert not tried["freeze_parameters"].recommended


def test_profile_of_a_backend_says_to_pass_the_compiled_callable():
    backend = ortlab.OrtBackend()
    compiled = torch.compile(lambda x: x * 2, backend=backend)
    compiled(torch.ones(2))
    with pytest.raises(ortlab.UnsupportedOptionError, match="not its OrtBackend"):
        ortlab.profile(backend, torch.ones(2))


def test_parts_that_sum_to_more_than_the_call_are_not_called_attributed():
    # Parts measured one by one can add up to more than the call measured whole: a
    # training Llama's parts were 1.757 ms for a 1.645 ms call, shown "93.2% attributed".
    from ortlab.profiling import _records

    def profile(parts_seconds):
        overheads = [_records.Overhead("dynamo", parts_seconds)]
        return _records.Profile(1.0, 0.9, 1.1, runs=3, overheads=overheads)

    assert profile(0.932).attribution == "93.2% attributed"
    over = profile(1.068)
    assert over.attribution == "parts sum to 107% of the call"
    assert "parts sum to 107% of the call" in over.text()
    assert "attributed" not in over.text().splitlines()[0]


def test_a_profile_follows_the_mode_the_model_was_compiled_in():
    """Compiled and called under no_grad, then profiled on the next line without it (as
    the README's example reads): the profile compiled and described a training forward
    graph instead (BERT: 851 FX nodes for its 533), and said nothing."""
    layers = (torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(*layers)
    x = torch.randn(3, 8)
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(x)
    profile = ortlab.profile(compiled, x, runs=1, entry=False)
    backend = compiled.ortlab_backend
    assert [g.kind for g in backend.graphs] == ["inference"]
    assert any("profiled under torch.no_grad()" in n for n in profile.notes)
    with torch.no_grad():
        again = ortlab.profile(compiled, x, runs=1, entry=False)
    assert not any("profiled under" in n for n in again.notes)
    assert [g.kind for g in backend.graphs] == ["inference"]
