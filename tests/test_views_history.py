"""What happened when, and where in the user's code: the graph-run timeline, the first
call's time in one line, graph causes and source lines, from real records of a model
defined here (a graph break, a recompile on a new dtype, an op that stays in PyTorch)."""

from __future__ import annotations

import html
import pathlib
import re

import pytest
import torch
from test_views_helpers import parse_svg, svg_element, synthetic_graph_record, tooltip
from torch import nn

import ortlab
from ortlab import views
from ortlab.views import _dot, _fragments, _timeline

needs_dot = pytest.mark.skipif(
    not _dot.dot_available(), reason="Graphviz's dot is not installed (make graphviz)"
)

THIS_FILE = pathlib.Path(__file__).name


def _line_of(marker: str) -> int:
    """The line number of this file holding ``marker`` (in a comment)."""
    lines = pathlib.Path(__file__).read_text().splitlines()
    (found,) = [i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(marker)]
    return found


class Noisy(nn.Module):
    """A linear layer, a graph break, then noise: ``rand_like`` stays in PyTorch (drawn
    at the start of its graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x).relu()  # LINEAR_LINE
        print("a graph break")  # BREAK_LINE
        noisy = y + torch.rand_like(y)  # NOISE_LINE
        return noisy * 2


def _run(calls):
    """Compiles a fresh ``Noisy`` (every size symbolic from the first call) and calls it
    under no_grad with each ``(batch, dtype)``."""
    model = Noisy()
    compiled = ortlab.compile(model, dynamic=True, keep_last_run=True)
    with torch.no_grad():
        for batch, dtype in calls:
            model.to(dtype)
            compiled(torch.randn(batch, 8, dtype=dtype))
    return compiled.ortlab_backend


@pytest.fixture(scope="module")
def noisy():
    """Two calls in float32, one with a new batch size, then one in float64 (recompile):
    graph runs 1-2 compile graphs 0 and 1 (split by the graph break), runs 3-6 reuse
    them, runs 7-8 recompile both for float64."""
    return _run(
        [(4, torch.float32), (4, torch.float32), (6, torch.float32), (4, torch.float64)]
    )


# -- source lines -------------------------------------------------------------------------


def test_eager_nodes_are_grouped_by_the_source_line_that_puts_them_in_pytorch(noisy):
    frame = views.eager_sources_frame(noisy)
    assert list(frame.columns) == ["source", "nodes", "ops", "reasons", "graphs"]
    (row,) = frame.itertuples()  # both rand_like nodes (float32, float64) share one line
    assert f"{THIS_FILE}:{_line_of('# NOISE_LINE')} " in row.source
    assert "torch.rand_like(y)" in row.source
    assert row.nodes == 2 and row.ops == "aten.rand_like.default ×2"
    assert row.reasons.startswith("random draw") and row.graphs == "1, 3"


def test_verdicts_frame_gives_each_node_its_source_line(noisy):
    frame = views.verdicts_frame(noisy)
    assert list(frame.columns)[-1] == "source"
    sources = dict(zip(frame["node"], frame["source"]))
    assert f"{THIS_FILE}:{_line_of('# LINEAR_LINE')} " in sources["addmm"]
    (noise,) = {n for n, op in zip(frame["node"], frame["target"]) if "rand_like" in op}
    assert f"{THIS_FILE}:{_line_of('# NOISE_LINE')} " in sources[noise]


def test_summary_and_report_show_the_source_line_of_each_eager_node(noisy, tmp_path):
    where = f"{THIS_FILE}:{_line_of('# NOISE_LINE')}"
    summary = html.unescape(_fragments.summary_html(noisy))
    assert "Where in your code" in summary
    # The verdicts grouped by rule and reason: the eager group is open and names the line.
    groups = re.findall(
        r'<details class="ortlab-group ortlab-group-eager" open>.*?</details>', summary, re.S
    )
    assert groups and where in groups[0] and "rand_like" in groups[0]
    assert "PyTorch · rule " in groups[0]
    report = html.unescape(open(ortlab.report(noisy, tmp_path / "r.html")).read())
    assert report.count(where) >= 3  # by source line, verdict groups, eager nodes
    text = ortlab.views.Inspector(noisy).text()
    assert "by source line" in text and where in text


@needs_dot
def test_fx_view_tooltip_names_the_source_line_of_each_node(noisy):
    g = noisy.graphs[1]
    rendered = views.fx_graph_view(g)
    root = parse_svg(rendered.svg)
    # (Graphviz writes runs of spaces as a space and non-breaking spaces)
    (noise,) = [v.node for v in g.verdicts if v.target == "aten.rand_like.default"]
    eager = tooltip(svg_element(root, rendered.ids[noise])).replace("\xa0", " ")
    assert f"from {g.verdict(noise).source}" in eager
    assert f"{THIS_FILE}:{_line_of('# NOISE_LINE')} " in eager
    g0 = noisy.graphs[0]
    rendered = views.fx_graph_view(g0)
    supported = tooltip(svg_element(parse_svg(rendered.svg), rendered.ids["addmm"]))
    assert f"{THIS_FILE}:{_line_of('# LINEAR_LINE')} " in supported


# -- causes and the timeline -----------------------------------------------------------


def test_timeline_shows_the_graph_break_and_the_recompile_and_collapses_reuse(noisy):
    rows = views.timeline_rows(noisy)
    assert [r.runs for r in rows] == ["run 1", "run 2", "runs 3–6", "run 7", "run 8"]
    first, second, reused, recompile, _ = rows
    assert first.lines[0].startswith("graph 0 compiled: first compile of forward")
    brk = first.lines[0].split("; ends at a graph break at ")[1]
    assert f"{THIS_FILE}:{_line_of('# BREAK_LINE')}: print(" in brk
    # the session's inputs named by what they bind, weights summarised
    assert "session 0 created for x: float32[" in first.lines[1]
    assert "+ 2 weights (" in first.lines[1]
    assert second.lines[0].startswith("graph 1 compiled: first compile")
    assert reused.lines == ["graphs 0, 1 reused, nothing compiled"]
    assert recompile.lines[0].startswith("graph 2 compiled: recompile of forward")
    assert "dtype mismatch" in recompile.lines[0]
    assert "float64" in recompile.lines[1]


def test_inspector_text_and_report_show_the_timeline_with_the_reasons(noisy, tmp_path):
    text = views.Inspector(noisy).text()
    timeline = text.split("Timeline (graph runs):")[1].split("\nGraphs:")[0]
    assert re.search(r"runs 3–6\s+graphs 0, 1 reused", timeline)
    assert re.search(r"run 7\s+graph 2 compiled: recompile of .*dtype mismatch", timeline)
    assert "graph break at" in timeline
    report = open(ortlab.report(noisy, tmp_path / "r.html")).read()
    (table,) = re.findall(r'<table class="ortlab ortlab-timeline">.*?</table>', report)
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", table)]
    assert cells[0::2] == ["run 1", "run 2", "runs 3–6", "run 7", "run 8"]
    assert "dtype mismatch" in cells[7] and "graph break at" in cells[1]


def test_graphs_show_their_cause_in_the_summary_and_the_partitions_tab(noisy):
    frame = views.graphs_frame(noisy)
    assert list(frame.columns)[-2:] == ["runs", "cause"]
    assert list(frame["runs"]) == [g.run_count for g in noisy.graphs] == [3, 3, 1, 1]
    assert frame["cause"][2] == noisy.graphs[2].cause
    assert frame["cause"][2].startswith("recompile of ")
    viewer = views.PartitionViewer(noisy)
    viewer.graph.value = 2
    assert html.escape(noisy.graphs[2].cause) in viewer.graph_view.value


# -- the first call ---------------------------------------------------------------------


def test_first_call_line_names_the_largest_step_and_adds_up(noisy):
    first = views.first_call(noisy)
    assert first.graphs == (0, 1) and first.runs == (1, 2)  # not the float64 recompile
    g0, g1 = noisy.graphs[:2]
    sessions = [s for g in (g0, g1) for p in g.partitions for s in p.sessions]
    expected = sum(g0.timings.values()) + sum(g1.timings.values())
    expected += sum(sum(s.timings.values()) for s in sessions)
    assert first.seconds == pytest.approx(expected)
    assert sum(s for _, s in first.steps) == pytest.approx(first.seconds)
    named, rest = first.shown()
    assert sum(s for _, s in named) + rest == pytest.approx(first.seconds)
    largest = max(first.steps, key=lambda s: s[1])
    assert named[0] == largest
    text = first.text
    assert text.startswith(
        f"First call {_timeline.seconds_text(first.seconds)} (graphs 0, 1): "
        f"{largest[0]} {_timeline.seconds_text(largest[1])} "
    )
    assert "\n" not in text
    assert html.escape(text) in _fragments.summary_html(noisy)
    assert html.escape(text) in _fragments.timings_html(noisy)
    assert text in views.Inspector(noisy).text()


def test_first_call_ends_at_a_recompile_of_a_frame_it_already_compiled():
    backend = _run([(4, torch.float32), (4, torch.float64)])  # no reuse in between
    rows = views.timeline_rows(backend)
    assert [r.runs for r in rows] == ["run 1", "run 2", "run 3", "run 4"]
    assert views.first_call(backend).graphs == (0, 1)


def test_first_call_of_a_training_step_stops_before_the_backward_runs():
    model = Noisy()
    compiled = ortlab.compile(model, dynamic=True)
    compiled(torch.randn(4, 8)).sum().backward()
    backend = compiled.ortlab_backend
    kinds = [g.kind for g in backend.graphs]
    assert kinds == ["forward", "backward", "forward", "backward"]
    first = views.first_call(backend)
    # With symbolic sizes saved for the backward, AOTAutograd compiles each backward graph
    # with its forward graph, during the call; their sessions are created by backward(),
    # after it.
    assert first.graphs == (0, 1, 2, 3) and first.runs == (1, 2)
    backward_sessions = [s for g in backend.graphs[1::2] for s in g.partitions[0].sessions]
    in_call = sum(sum(g.timings.values()) for g in backend.graphs) + sum(
        sum(s.timings.values()) for g in backend.graphs[0::2] for s in g.partitions[0].sessions
    )
    assert backward_sessions and first.seconds == pytest.approx(in_call)


def test_first_call_of_a_static_training_step_leaves_out_the_backward_graphs():
    model = Noisy()
    compiled = ortlab.compile(model)  # static first: backward graphs compiled in backward()
    compiled(torch.randn(4, 8)).sum().backward()
    backend = compiled.ortlab_backend
    assert [g.kind for g in backend.graphs] == ["forward", "forward", "backward", "backward"]
    first = views.first_call(backend)
    assert first.graphs == (0, 1) and first.runs == (1, 2)
    forwards = backend.graphs[:2]
    in_call = sum(sum(g.timings.values()) for g in forwards) + sum(
        sum(s.timings.values()) for g in forwards for s in g.partitions[0].sessions
    )
    assert first.seconds == pytest.approx(in_call)


def test_timings_tab_shows_dynamo_registry_and_guards_per_graph(noisy):
    page = _fragments.timings_html(noisy)
    for label in ("Dynamo trace (ms)", "exporter registry (ms)", "Dynamo guards (ms)"):
        assert label in page
    per_graph = page.split("<h4>Per graph</h4>")[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>(.*?)</td>(.*?)</tr>", per_graph)
    assert [r[0] for r in rows] == [f"{g.index} ({g.kind})" for g in noisy.graphs]
    g0 = noisy.graphs[0]
    first_row = re.findall(r"<td>([0-9.]+)</td>", rows[0][1])
    assert first_row[0] == f"{g0.timings['dynamo'] * 1e3:.2f}"
    assert first_row[-1] == f"{g0.timings['guards'] * 1e3:.2f}"
    assert g0.timings["dynamo"] > 0 and g0.timings["guards"] > 0


def test_session_details_say_how_to_save_it_as_a_test_case_or_why_not(noisy):
    info = html.unescape(_fragments.onnx_model_info(noisy.sessions[0]))
    assert "SessionRecord.save(dir)" in info and "onnx_test_runner" in info
    compiled = ortlab.compile(Noisy())
    compiled(torch.randn(4, 8))  # grad enabled: a training graph keeps no last run
    training = compiled.ortlab_backend.sessions[0]
    assert training.last_inputs is None
    info = html.unescape(_fragments.onnx_model_info(training))
    assert "save(dir)" not in info and "not available" in info


def test_graphs_without_a_timeline_count_every_graph_and_show_no_timeline():
    backend = ortlab.OrtBackend()
    backend.graphs.append(synthetic_graph_record(n_ops=60, every=20))  # no timeline
    assert views.timeline_rows(backend) == []
    first = views.first_call(backend)
    assert first.graphs == (0,) and first.runs is None
    assert first.text == "First call (graph 0): no compile time recorded."
    backend.graphs[0].timings.update(dynamo=0.5, lower=0.25)
    assert views.first_call(backend).text == (
        "First call 0.75 s (graph 0): Dynamo trace 0.50 s (67%), lower to ATen 0.25 s (33%)"
    )
    assert "Timeline" not in views.Inspector(backend).text()
    assert "ortlab-timeline" not in _fragments.summary_html(backend)
