"""Provenance through fusion (an FX node inside the fused operator that absorbed it), ONNX
nodes without a module scope drawn with their readers, the live status line, and the
notes that say what to do next."""

from __future__ import annotations

import types

import pytest
import torch

import ortlab
from ortlab import views, zoo
from ortlab.views import _fusion, _graphs, _timeline


def _compiled_bert(**options):
    model, args = zoo.get("bert").instantiate()
    compiled = ortlab.compile(model.eval(), **options)
    with torch.no_grad():
        compiled(*args)
    return compiled.ortlab_backend


@pytest.fixture(scope="module")
def fused_bert():
    """The zoo's BERT with ortlab's rewrite to ONNX Runtime's fused operators."""
    return _compiled_bert(ort_fusions=True)


def _fx_nodes(part):
    return {n.name: n for n in part.graph_module.graph.nodes}


def _attention_node(part) -> str:
    nodes = _fx_nodes(part)
    return next(n for n in nodes if "scaled_dot_product" in str(nodes[n].target))


def test_an_fx_node_inside_a_fused_attention_names_it_and_its_companions(fused_bert):
    part = fused_bert.partitions[0]
    session = part.sessions[0]
    found = _fusion.fusions(session, part, optimizer=False)
    sdpa = _attention_node(part)
    inside = found.by_fx[sdpa]
    assert (inside.op, inside.stage) == ("Attention", _fusion.REWRITE)
    # The Attention holds the query, key and value projections, not the layer's output
    # projection or its feed-forward (those are FusedMatMul / BiasGelu).
    targets = [str(_fx_nodes(part)[n].target) for n in inside.fx_nodes]
    assert sum("addmm" in t for t in targets) == 3, targets
    assert not any("gelu" in t or "layer_norm" in t for t in targets), targets
    others = len(inside.fx_nodes) - 1
    assert found.describe(sdpa) == (
        f"inside Attention `{inside.node}`, with {others} other nodes ({_fusion.REWRITE})"
    )


def test_the_partition_viewer_says_which_fused_operator_holds_a_node(fused_bert):
    viewer = views.PartitionViewer(fused_bert)
    part = fused_bert.partitions[0]
    viewer.select("fx", _attention_node(part))
    assert "is inside Attention `" in viewer.provenance.value
    getitem = next(n for n, node in _fx_nodes(part).items() if "getitem" in str(node.target))
    viewer.select("fx", getitem)
    text = viewer.provenance.value
    assert "inside" in text or "picks output" in text, text


def test_onnx_runtime_s_optimizer_fusions_and_folds_are_traced_to_fx_nodes():
    backend = _compiled_bert(ort_fusions=False)
    part = backend.partitions[0]
    session = part.sessions[0]
    assert not session.fusions
    found = _fusion.fusions(session, part)
    assert found.note is None
    by_optimizer = {a.op for a in found.by_fx.values() if a.stage == _fusion.OPTIMIZER}
    # ONNX Runtime fuses the attention's transposed matrix products and the layer norms.
    assert {"FusedMatMul", "SkipLayerNormalization"} <= by_optimizer, by_optimizer
    # Without ONNX Runtime's optimized model, only ortlab's own rewrite is read.
    assert not _fusion.fusions(session, part, optimizer=False).by_fx


class _LargeConstant(torch.nn.Module):
    """A constant expression onnxscript's optimizer folds in part: the 100x100 arange
    yes, its view and transpose no (inputs over 8,192 elements), ONNX Runtime at load."""

    def forward(self, x):
        return x + torch.arange(10_000.0).view(100, 100).t()


def test_folds_at_export_and_at_load_are_traced_to_fx_nodes():
    compiled = ortlab.compile(_LargeConstant(), compile_cache=False)
    with torch.no_grad():
        compiled(torch.randn(100, 100))
    backend = compiled.ortlab_backend
    session, part = backend.sessions[0], backend.partitions[0]
    found = _fusion.fusions(session, part)
    assert found.optimized_away and found.folded, found
    by_target = {n.name: str(n.target) for n in part.graph_module.graph.nodes}
    assert {by_target[n] for n in found.optimized_away} == {"aten.arange.default"}
    assert {by_target[n] for n in found.folded} >= {"aten.t.default"}, found.folded
    for name in found.optimized_away:
        assert found.describe(name).startswith("removed by onnxscript's optimizer")
    for name in found.folded:
        assert found.describe(name).startswith("removed by ONNX Runtime")


def test_a_pad_and_batch_norm_folded_into_a_convolution_stay_traced():
    class PadConvBn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn(self.conv(torch.nn.functional.pad(x, (1, 1, 1, 1))))

    model = PadConvBn().eval()
    compiled = ortlab.compile(model, freeze_parameters=True, compile_cache=False)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    backend = compiled.ortlab_backend
    session, part = backend.sessions[0], backend.partitions[0]
    assert [n.op_type for n in session.model.graph.node] == ["Conv"]
    assert session.onnx_passes["OnnxscriptOptimizer"] is True
    (names,) = ortlab.profiling.model_to_fx(session.model.graph, part.graph_module.graph)
    targets = sorted(str(n.target) for n in part.graph_module.graph.nodes if n.name in names)
    assert targets == [
        "aten._native_batch_norm_legit_no_training.default",
        "aten.constant_pad_nd.default",
        "aten.convolution.default",
    ]


def test_onnx_nodes_without_a_module_scope_are_drawn_with_the_nodes_reading_them(fused_bert):
    session = fused_bert.sessions[0]
    graph = fused_bert.graphs[0]
    unscoped = [n for n in session.model.graph.node if not _items_scope(n)]
    assert unscoped  # the fused Attention's weight transposes carry no name_scopes
    tree = _graphs.tree_of(session, graph)
    loose = [i.name for i in tree.root.items if i.kind == "op"]
    assert loose == [], loose
    names = {n.name for n in unscoped}
    placed = [i.module for i in tree.items.values() if i.kind == "op" and i.name in names]
    assert any(".attention" in m for m in placed), placed


def _items_scope(node):
    from ortlab.views import _items

    return _items.onnx_scope(node)[0]


# -- the live status line -----------------------------------------------------------------


def test_the_status_line_shows_each_step_with_its_time_and_closes_when_done():
    now = [0.0]
    status = views.Status("%ortcompile m(x)", live=True, clock=lambda: now[0])
    shown = []
    status.show(lambda widget, **options: shown.append(widget))
    assert shown == [status.widget]
    status.step("first call")
    status.note("export fused_0 (3 nodes)")
    assert "first call: export fused_0 (3 nodes) …" in status.widget.value
    now[0] += 2.0
    status.step("numerics")
    now[0] += 0.05
    status.done()
    assert status.timed() == pytest.approx({"first call": 2.0, "numerics": 0.05})
    assert status.text() == "%ortcompile m(x): first call 2.0 s → numerics 50 ms"
    assert status.widget.comm is None  # closed: the saved notebook keeps no trace


def test_the_compile_phase_is_read_from_the_backend_s_records():
    from ortlab.views import _status

    part = types.SimpleNamespace(name="fused_0", state="ort", sessions=[], node_names=["a"])
    graph = types.SimpleNamespace(partitions=[part])
    backend = types.SimpleNamespace(graphs=[], execution_count=0)
    assert _status.compile_phase(backend).startswith("Dynamo trace")
    backend.graphs = [graph]
    assert _status.compile_phase(backend).startswith("export fused_0 (1 nodes)")
    part.sessions = [object()]
    assert _status.compile_phase(backend) == "first run in ONNX Runtime"
    backend.execution_count = 1
    assert _status.compile_phase(backend).startswith("eager run")


# -- notes that say what to do --------------------------------------------------------------


def test_a_frame_at_dynamo_s_recompile_limit_says_to_compile_with_dynamic():
    compiled = ortlab.compile(lambda x: x * 2 + 1, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2):
        for n in (2, 3, 4):  # the third size runs in PyTorch: the limit is reached
            compiled(torch.randn(n))
        notes = _timeline.recompile_limit_notes(compiled.ortlab_backend)
        text = views.Inspector(compiled).text()
    assert len(notes) == 1, notes
    assert "compiled 2 times" in notes[0] and "dynamic=True" in notes[0]
    assert "Note: " + notes[0] in text
    assert _timeline.recompile_limit_notes(compiled.ortlab_backend) == []  # limit 8 again


def test_a_frame_recompiled_for_each_float_says_to_stop_specialising_floats():
    # ortlab.compile specialises Python floats: a value read with .item() at a graph
    # break recompiles the frame for every new value; dynamic=True does not help.
    def f(x, scale):
        return x * scale + 1

    compiled = ortlab.compile(f)
    with torch._dynamo.config.patch(recompile_limit=2):
        for scale in (0.5, 0.25, 0.125):
            compiled(torch.ones(3), scale)
        notes = _timeline.recompile_limit_notes(compiled.ortlab_backend)
    assert len(notes) == 1, notes
    assert "specialize_floats=False" in notes[0] and "dynamic=True" not in notes[0]


def test_a_graph_is_named_by_the_function_a_library_decorator_wraps():
    # transformers decorates every model's forward: each graph read "first compile of
    # wrapper (transformers/utils/generic.py)".
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    compiled = ortlab.compile(transformers.BertModel(config).eval())
    with torch.no_grad():
        compiled(torch.ones(1, 4, dtype=torch.long))
    frames = [g.frame for g in compiled.ortlab_backend.graphs]
    assert frames and all(f.startswith("forward (") for f in frames), frames


def _helper(x):
    return torch.relu(x)


def test_the_users_own_function_named_inner_keeps_its_name():
    def inner(x):
        return _helper(x) + 1

    compiled = ortlab.compile(inner)
    compiled(torch.ones(3))
    assert compiled.ortlab_backend.graphs[0].frame.startswith("inner (")


def test_a_recompile_cause_is_one_line():
    # Dynamo's reason can carry the user's stack (T5's generate: 24 lines), which the
    # timeline and the report's tables showed whole.
    compiled = ortlab.compile(lambda x: x * 2, dynamic=False)
    for n in (2, 3):
        compiled(torch.ones(n))
    graph = compiled.ortlab_backend.graphs[1]
    graph.recompile_reason += "\nUser stack trace:\n  File model.py, line 3"
    assert graph.cause.startswith("recompile") and "\n" not in graph.cause, graph.cause


@pytest.mark.filterwarnings("ignore::ortlab.FallbackWarning")
def test_the_lab_shows_what_to_do_about_a_missing_translation_and_complex_values():
    import html

    from ortlab.views import _fragments

    model, args = zoo.get("custom_op").instantiate()
    custom = ortlab.compile(model)
    with torch.no_grad():
        custom(*args)
    summary = html.unescape(_fragments.summary_html(custom.ortlab_backend))
    assert "custom_translations={torch.ops.ortlab_zoo.soft_clip: my_onnxscript" in summary
    complex_ = ortlab.compile(lambda x: (x * 2).real + 1)
    complex_(torch.randn(3, dtype=torch.complex64))
    summary = html.unescape(_fragments.summary_html(complex_.ortlab_backend))
    assert "real/imaginary pairs (torch.view_as_real)" in summary
