"""Tests of the Numerics view: HTML, widget, plots and the error overlay on the graphs."""

from __future__ import annotations

import re
import sys
from unittest import mock

import pytest
import torch
from numerics_helpers import sigmoid_to_relu, sin_one_percent_high, x_of

import ortlab
from ortlab import errors, zoo
from ortlab.views import _dot, _style, numerics


@pytest.fixture(scope="module")
def planted():
    """custom_op (two partitions) with the second partition's Sigmoid turned into Relu."""
    model, inputs = zoo.get("custom_op").instantiate()
    return ortlab.diff(model, *inputs, pre_ort_model_transforms=[sigmoid_to_relu])


def _failing(report):
    return report.failing_partitions[0]


def _dot_nodes(source: str) -> dict[str, str]:
    """Node id -> its attribute text, from DOT written by the overlay functions."""
    found = {}
    for line in source.splitlines():
        match = re.match(r'^"([^"]+)" \[(.*)\];$', line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_fx_overlay_colours_nodes_by_error_and_marks_the_first_divergent(planted):
    part = _failing(planted)
    nodes = _dot_nodes(numerics.fx_overlay(planted, part))
    assert f'fillcolor="{_style.FAIL_FILL}"' in nodes["sigmoid"]
    assert 'penwidth="3"' in nodes["sigmoid"] and "first divergent" in nodes["sigmoid"]
    assert f'fillcolor="{_style.PASS_FILL}"' in nodes["addmm_1"]
    assert "penwidth" not in nodes["addmm_1"]
    assert "->" in numerics.fx_overlay(planted, part)
    # Placeholders are shown as the parameters they bind.
    placeholders = [a for a in nodes.values() if a.startswith('label="') and "(arg" in a]
    assert any(".weight (arg" in a for a in placeholders), placeholders


def test_onnx_overlay_marks_the_onnx_node_made_from_the_first_divergent_fx_node(planted):
    part = _failing(planted)
    nodes = _dot_nodes(numerics.onnx_overlay(planted, part))
    marked = [attrs for attrs in nodes.values() if 'penwidth="3"' in attrs]
    assert len(marked) == 1
    assert marked[0].startswith('label="Relu') and _style.FAIL_FILL in marked[0]
    gemm = next(a for a in nodes.values() if a.startswith('label="Gemm'))
    assert _style.PASS_FILL in gemm


@pytest.mark.skipif(not _dot.dot_available(), reason="Graphviz's dot is not installed")
def test_numerics_html_is_self_contained_with_svg_plots_and_first_divergent(planted):
    html = numerics.numerics_html(planted)
    assert "first divergent node" in html and "sigmoid" in html and "Relu" in html
    assert html.count("<svg") == 2  # FX and ONNX overlays of the failing partition
    assert html.count("data:image/png;base64,") == 2  # histograms and scatter
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    assert "FAIL" in html and _style.FIRST_LINE in html


def test_numerics_html_without_graphviz_keeps_tables_and_says_how_to_install(planted):
    with mock.patch.object(_dot, "dot_executable", return_value=None):
        html = numerics.numerics_html(planted)
    assert "<svg" not in html
    assert "install" in html.lower() and "graphviz" in html.lower()
    assert "aten.sigmoid.default" in html  # the nodes table is still there


def test_numerics_html_escapes_model_strings():
    report = ortlab.diff(lambda t: {"<img src=x onerror=alert(1)>": t * 2}, torch.ones(3))
    html = numerics.numerics_html(report)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_numerics_widget_has_tabs_and_starts_on_the_failing_partition(planted):
    widgets = pytest.importorskip("ipywidgets")
    tab = numerics.numerics_widget(planted)
    assert isinstance(tab, widgets.Tab)
    titles = [tab.get_title(i) for i in range(len(tab.children))]
    assert titles == ["Summary", "Partitions", "Graphs"]
    picker, view = tab.children[2].children
    failing = _failing(planted)
    assert picker.options[picker.value][0].startswith(failing.label)
    assert 'class="ortlab-num-first"' in view.value and "sigmoid" in view.value
    clean = next(v for _, v in picker.options if v != picker.value)
    picker.value = clean
    assert 'class="ortlab-num-first"' not in view.value
    assert "nodes=True" in view.value  # says how to get its nodes compared


def test_plots_have_one_histogram_per_tensor_and_a_tolerance_line(planted):
    hist = numerics.error_histograms(planted)
    assert len(hist.axes) == len(planted.outputs)
    scatter = numerics.error_scatter(planted)
    (ax,) = scatter.axes
    assert ax.get_xscale() == "log" and len(ax.lines) == 1  # the tolerance line


def test_missing_matplotlib_raises_an_error_naming_the_extra(planted):
    hidden = {"matplotlib": None, "matplotlib.figure": None}
    with mock.patch.dict(sys.modules, hidden):
        with pytest.raises(errors.MissingDependencyError, match=r"ortlab\[notebook\]"):
            numerics.numerics_html(planted)


def test_diff_table_gives_each_table(planted):
    assert list(numerics.diff_table(planted)["name"]) == ["output"]
    assert "first_divergent" in numerics.diff_table(planted, what="partitions").columns
    assert numerics.diff_table(planted, what="nodes")["diverged"].sum() == 1
    with pytest.raises(errors.UnsupportedOptionError, match="partitions"):
        numerics.diff_table(planted, what="graphs")


def test_report_renders_as_text_html_and_frames(planted):
    report = planted
    text = repr(report)
    assert text.startswith("DiffReport(FAIL") and "sigmoid" in text and "Relu" in text
    html = report._repr_html_()
    assert "FAIL" in html and "sigmoid" in html
    frame = report.to_frame()
    assert list(frame["kind"]) == ["output"] and not frame["passed"].any()
    parts = report.partitions_frame()
    assert set(parts["first_divergent"]) == {"", "sigmoid"}
    nodes = report.nodes_frame()
    assert "sigmoid" in set(nodes["node"]) and nodes["diverged"].sum() == 1


def test_html_blames_a_failing_partition_whose_nodes_were_not_compared():
    mask = torch.zeros(4, 8)
    mask[:, 6:] = torch.finfo(torch.float32).min
    report = ortlab.diff(
        lambda x, m: torch.sin(x) + m,
        x_of(4, 8),
        mask,
        custom_translations={torch.ops.aten.sin.default: sin_one_percent_high},
        nodes=False,
    )
    html = report._repr_html_()
    assert "is wrong on its own inputs: output add" in html
    assert "accumulates" not in html


def test_nodes_table_shows_eagers_rounding_where_it_was_measured(planted):
    nodes = planted.nodes_frame()
    assert "rounding" in nodes.columns and "scale" not in nodes.columns
    sigmoid = planted.first_divergent
    assert sigmoid.rounding is not None and sigmoid.rounding < 1e-6  # one op's rounding
    html = numerics.partition_html(planted, _failing(planted), graphs=False)
    assert "eager rounding" in html


def test_model_strings_are_escaped_in_html():
    report = ortlab.diff(lambda t: {"<b>x</b>": t * 2}, torch.ones(3))
    assert report.outputs[0].name == "output['<b>x</b>']"
    html = report._repr_html_()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_error_colours_follow_the_error_over_the_allowed_error():
    assert _style.error_fill(None) == _style.IDLE_FILL  # not compared
    assert _style.error_fill(0.0) == _style.error_fill(0.099) == _style.PASS_FILL
    assert _style.error_fill(0.1) == _style.error_fill(0.99) == _style.NEAR_FILL
    assert _style.error_fill(1.0) == _style.error_fill(float("inf")) == _style.FAIL_FILL
