"""Records render as useful text and as escaped, standard-library HTML."""

from __future__ import annotations

import pytest
import torch
from test_views_helpers import parse

import ortlab
from ortlab import zoo


def _compiled_custom_op():
    spec = zoo.get("custom_op")
    model, args = spec.instantiate()
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(*args)
    return compiled.ortlab_backend


def test_reprs_summarise_each_record():
    backend = _compiled_custom_op()
    graph = backend.graphs[0]
    assert repr(backend).startswith("OrtBackend(graphs=1, partitions=2")
    assert "inference via make_fx" in repr(graph) and "2 partitions" in repr(graph)
    assert repr(graph.partitions[0]).startswith("PartitionRecord(fused_")
    session = backend.sessions[0]
    assert "inputs=['float32[" in repr(session) and "CPUExecutionProvider" in repr(session)
    eager = next(v for v in graph.verdicts if "soft_clip" in v.target)
    assert "-> eager:" in repr(eager) and "soft_clip" in repr(eager)


def test_html_is_escaped_and_well_formed():
    backend = _compiled_custom_op()
    graph = backend.graphs[0]
    # A getitem target renders as "<built-in function getitem>": it must be escaped.
    getitem = ortlab.Verdict("getitem_1", "<built-in function getitem>", False, "a <b> reason")
    for markup in (
        backend._repr_html_(),
        graph._repr_html_(),
        graph.partitions[0]._repr_html_(),
        backend.sessions[0]._repr_html_(),
        getitem._repr_html_(),
    ):
        parsed = parse(markup)
        tags = [tag for tag, _ in parsed.tags]
        assert "built-in" not in "".join(tags)
        assert set(tags) <= {
            "div",
            "b",
            "table",
            "thead",
            "tbody",
            "tr",
            "th",
            "td",
            "caption",
        }
    assert "&lt;built-in function getitem&gt;" in getitem._repr_html_()
    assert "soft_clip" in graph._repr_html_()  # the eager node and its reason are listed


def test_partition_failure_shows_on_the_record_html():
    def breaks(model):
        model.graph.node[0].op_type = "<NotAnOp>"

    compiled = ortlab.compile(lambda x: x.sin(), pre_ort_model_transforms=[breaks])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(torch.randn(2))
    partition = compiled.ortlab_backend.partitions[0]
    assert partition.state == "eager"
    markup = partition._repr_html_()
    assert "&lt;NotAnOp&gt;" in markup and "<NotAnOp>" not in markup


def test_session_save_writes_a_test_case_that_a_bare_session_reproduces(tmp_path):
    import numpy as np
    import onnxruntime

    from ortlab.backend import load_test_case

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU())
    compiled = ortlab.compile(model, keep_last_run=True)
    x = torch.randn(5, 4)
    with torch.no_grad():
        expected = compiled(x)
    (session,) = compiled.ortlab_backend.sessions
    path = session.save(tmp_path / "case")
    assert sorted(p.name for p in (tmp_path / "case").iterdir()) == [
        "README.md",
        "model.onnx",
        "test_data_set_0",
    ]
    assert "onnx_test_runner" in (tmp_path / "case" / "README.md").read_text()
    loaded, inputs, outputs = load_test_case(path)
    assert len(inputs) == len(session.input_names)  # x and the weights (not frozen)
    bare = onnxruntime.InferenceSession(loaded.SerializeToString())
    names = [i.name for i in bare.get_inputs()]
    (got,) = bare.run(None, dict(zip(names, inputs)))
    np.testing.assert_allclose(got, outputs[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outputs[0], expected.numpy(), rtol=1e-6, atol=1e-6)


def test_session_of_a_training_graph_explains_why_it_cannot_be_saved(tmp_path):
    compiled = ortlab.compile(torch.nn.Linear(4, 3))
    compiled(torch.randn(2, 4)).sum().backward()
    session = compiled.ortlab_backend.sessions[0]
    with pytest.raises(ortlab.OrtlabError, match="save_repro"):
        session.save(tmp_path)


def test_sessions_keep_no_last_run_unless_asked(tmp_path):
    """A session's last batch stays alive only with keep_last_run=True."""
    compiled = ortlab.compile(torch.nn.Linear(4, 3))
    with torch.no_grad():
        compiled(torch.randn(2, 4))
    (session,) = compiled.ortlab_backend.sessions
    assert session.last_inputs is None and session.last_outputs is None
    with pytest.raises(ortlab.OrtlabError, match="keep_last_run=True"):
        session.save(tmp_path)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_placeholders_carry_the_parameter_and_argument_names_they_bind(grad):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 3)

        def forward(self, features):
            return self.proj(features).relu()

    compiled = ortlab.compile(Block())
    x = torch.randn(2, 4)
    if grad:
        compiled(x).sum().backward()
    else:
        with torch.no_grad():
            compiled(x)
    graph = compiled.ortlab_backend.graphs[0]
    assert sorted(graph.input_sources.values()) == ["features", "proj.bias", "proj.weight"]
    addmm = next(n for n in graph.graph_module.graph.nodes if "addmm" in n.name)
    bias = addmm.args[0]
    assert graph.source_of(bias.name) == "proj.bias"
    assert graph.source_of("relu") == "relu"
    if grad:
        assert compiled.ortlab_backend.graphs[1].input_sources == {}  # backward: saved values
