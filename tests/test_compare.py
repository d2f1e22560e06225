"""ortlab.compare: two compiles side by side (options, graphs, placement, sessions, frozen
inputs, numerics, time per part, module and FX node), and its view in the report."""

from __future__ import annotations

import pytest
import torch
from models import LabelledClassifier

import ortlab
from ortlab import views, zoo


@pytest.fixture(scope="module")
def cnn():
    model, args = zoo.get("cnn").instantiate()
    return model.eval(), args


def test_compare_default_vs_frozen_shows_the_weights_that_became_initializers(cnn):
    model, args = cnn
    with torch.no_grad():
        cmp = ortlab.compare(model, *args, a={}, b={"freeze_parameters": True}, runs=1)
    assert cmp.labels == ("defaults", "freeze_parameters=True")
    assert [(c.key, c.a, c.b) for c in cmp.of("option")] == [
        ("freeze_parameters", False, True)
    ]
    # Every parameter a passes to ONNX Runtime is an initializer in b, named as such.
    frozen = {c.detail for c in cmp.frozen_in_b}
    convolutions = {n for n, p in model.named_parameters() if p.dim() == 4}
    assert convolutions and convolutions <= frozen, (convolutions, frozen)
    assert all(c.a == "input" for c in cmp.frozen_in_b)
    # Same numbers, both calls timed, and the difference explained part by part.
    assert cmp.outputs and all(d.passed for d in cmp.outputs)
    assert cmp.call is not None and cmp.call.a_seconds > 0 and cmp.call.b_seconds > 0
    pa, pb = cmp.profiles
    assert pa is not None and pb is not None
    assert cmp.nodes and cmp.modules and cmp.parts
    deltas = sorted((abs(r.delta_seconds) for r in cmp.nodes), reverse=True)
    assert [abs(r.delta_seconds) for r in cmp.nodes] == deltas
    # Node rows pair the same FX node of both compiles.
    convolution = next(r for r in cmp.nodes if "convolution" in r.key)
    assert convolution.a_seconds > 0 and convolution.b_seconds > 0
    assert "freeze_parameters=True" in cmp.text()
    # Two profiles compare on their own (records and time, no call).
    again = ortlab.compare(pa, pb, labels=("default", "frozen"))
    assert again.call is not None and again.outputs == []
    assert [r.key for r in again.nodes] == [r.key for r in cmp.nodes]
    assert {c.detail for c in again.frozen_in_b} == frozen


def test_compare_of_two_compiled_callables_lists_what_changed_from_their_records(cnn):
    model, args = cnn
    a = ortlab.compile(model)
    b = ortlab.compile(model, excluded_ops=["aten.relu.default"])
    with torch.no_grad():
        a(*args)
        b(*args)
    cmp = ortlab.compare(a, b)  # records only: nothing is called
    assert cmp.outputs == [] and cmp.call is None and cmp.profiles == (None, None)
    assert "excluded_ops" in {c.key for c in cmp.of("option")}
    moved = cmp.of("placement")
    assert moved and all(c.a == "ORT" and c.b == "eager" for c in moved)
    assert all("relu" in c.key for c in moved)
    assert any("excluded" in c.detail for c in moved)
    assert cmp.of("graph")


def test_comparison_renders_in_the_report_above_both_compiles(cnn):
    model, args = cnn
    with torch.no_grad():
        cmp = ortlab.compare(model, *args, a={}, b={"freeze_parameters": True}, runs=1)
    html = views.report_html(cmp)
    assert 'id="compare"' in html
    assert "Inputs frozen as initializers" in html
    assert "Modules, largest change first" in html
    assert html.count('data-tab="Profile"') == 2
    assert "<b>defaults</b>" in cmp._repr_html_()


def test_many_changes_of_one_kind_are_one_collapsed_line_with_the_rows_inside():
    from ortlab.profiling import Change, Comparison
    from ortlab.views import _compare

    weights = [Change("frozen", f"arg{i}", "input", "initializer", f"w{i}") for i in range(40)]
    option = Change("option", "freeze_parameters", False, True)
    cmp = Comparison(("a", "b"), [option, *weights])
    html = _compare.changes_html(cmp)
    assert '<details class="ortlab-changes"><summary>40 rows: w0, w1, w2, …' in html
    assert "w39" in html  # every row is there
    assert "freeze_parameters" in html.split("<details")[0]  # one option: shown as it is


def test_compare_passes_keyword_inputs_named_labels_to_the_model():
    # ``labels=`` is also compare's own parameter (two names); a tensor there is the
    # model's input. And a call given by keywords only is made, compared and timed.
    model = LabelledClassifier()
    x, y = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0])
    with torch.no_grad():
        cmp = ortlab.compare(
            model, a={}, b={"freeze_parameters": True}, runs=1, profile=False, x=x, labels=y
        )
    assert cmp.labels == ("defaults", "freeze_parameters=True")
    assert cmp.outputs and all(d.passed for d in cmp.outputs)
    assert cmp.call is not None
    assert all(b.graphs for b in cmp.backends)


def test_the_explained_time_counts_the_nodes_once():
    """The FX nodes' total is one of the parts; the nodes itemize it. Both were added: a
    BERT comparison said its parts explained -126 ms of a -49.5 ms difference."""
    from ortlab.profiling._comparison import Comparison, TimeChange

    cmp = Comparison(
        labels=("a", "b"),
        parts=[
            TimeChange("FX nodes", 0.100, 0.060),
            TimeChange("glue", 0.010, 0.005),
            TimeChange("unattributed", 0.002, 0.001),
        ],
        nodes=[TimeChange("mm", 0.070, 0.040), TimeChange("add", 0.030, 0.020)],
    )
    assert cmp.explained_seconds == pytest.approx(-0.045)
