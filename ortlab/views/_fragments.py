"""HTML fragments shared by the Inspector widget, the standalone report and the Numerics
view (their look: :mod:`ortlab.views._style`).

Each function returns safe HTML: model strings are escaped (``_html.esc`` or pandas'
escaping), SVG comes from Graphviz (which escapes text itself). When Graphviz is missing
a graph fragment is a note saying how to install it, followed by a table of the same
nodes, so nothing is lost but the picture.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from ortlab import _html
from ortlab.backend import records
from ortlab.views import _dot, _graphs, _plots, _tables, _timeline

NATURAL_SIZE_ABOVE_PX = 1600
"""Drawings wider than this are shown at their own size (scrolling), not shrunk to fit."""


def note(text: str) -> str:
    """A highlighted remark (escaped)."""
    return f'<p class="ortlab-note">{_html.esc(text)}</p>'


def graph_html(rendered: _dot.Rendered, fallback: str = "") -> str:
    """A rendered graph in a scroll box; its note (and ``fallback`` HTML) without SVG."""
    parts = []
    if rendered.note:
        parts.append(note(rendered.note))
    if rendered.svg is not None:
        # Fit small drawings to the box; big ones keep their size and scroll, since shrunk
        # to fit they would be unreadable.
        width = re.search(r'width="([0-9.]+)px"', rendered.svg[:400])
        natural = width is not None and float(width.group(1)) > NATURAL_SIZE_ABOVE_PX
        css = "ortlab-graph ortlab-natural" if natural else "ortlab-graph"
        parts.append(f'<div class="{css}">{rendered.svg}</div>')
    else:
        parts.append(fallback)
    return "".join(parts)


MAX_TABLE_ROWS = 500
"""Rows of a node table standing in for a drawing; the rest are counted, not listed."""


def fx_nodes_table(graph: records.GraphRecord) -> str:
    """Every node of a graph with its partition and verdict (stands in for the drawing)."""
    verdicts = {v.node: v for v in graph.verdicts}
    rows = []
    nodes = _graphs.flat_nodes(graph)
    for n in nodes[:MAX_TABLE_ROWS]:
        v = verdicts.get(n.name)
        rows.append(
            (
                n.name,
                n.op,
                n.target,
                n.partition or "eager",
                n.value,
                v.reason if v else "",
                v.source if v else "",
            )
        )
    table = _html.table(("node", "op", "target", "runs in", "value", "reason", "source"), rows)
    more = len(nodes) - MAX_TABLE_ROWS
    return table + (note(f"{more} more nodes not listed.") if more > 0 else "")


def partition_nodes_table(partition: records.PartitionRecord) -> str:
    rows = [(n.name, n.op, str(n.target)) for n in partition.graph_module.graph.nodes]
    return _html.table(("node", "op", "target"), rows)


def onnx_nodes_table(session: records.SessionRecord) -> str:
    """The ONNX nodes of a session's model with the FX node each came from."""
    prov = _graphs.provenance(session)
    rows = [
        (
            i,
            n.op_type,
            n.name,
            ", ".join(n.input),
            ", ".join(n.output),
            prov.fx_node_of(i) or "",
        )
        for i, n in enumerate(session.model.graph.node)
    ]
    return _html.table(("#", "op", "name", "inputs", "outputs", "FX node"), rows)


def eager_nodes_html(graph: records.GraphRecord) -> str:
    """The nodes of a graph that run in PyTorch, with the reason for each and the line of
    the user's code it comes from."""
    rows = [
        (v.node, v.target, reason, v.source) for v, reason in _tables.eager_verdicts(graph)
    ]
    if not rows:
        return "<p>Every node runs in ONNX Runtime.</p>"
    return _html.table(("eager node", "target", "reason", "source"), rows)


def eager_sources_html(obj: Any) -> str:
    """The nodes that stay in PyTorch grouped by the user's source line (a count, the ops
    and the reasons per line); ``""`` when every node runs in ONNX Runtime."""
    frame = _tables.eager_sources_frame(obj)
    if not len(frame):
        return ""
    return (
        "<h4>Where in your code: nodes that stay in PyTorch, by source line</h4>"
        + _tables.frame_html(frame)
    )


def graph_cause_html(graph: records.GraphRecord) -> str:
    """Why a graph exists (first compile, recompile, backward, graph break), its fall
    back and error, as one escaped paragraph."""
    text = f"Graph {graph.index} ({graph.kind}): {graph.cause}."
    if graph.fallback:
        text += f" Fell back: {graph.fallback}."
    if graph.error:
        text += f" Runs entirely in PyTorch: {graph.error}"
    return f'<p class="ortlab-cause">{_html.esc(text)}</p>'


def timeline_html(obj: Any) -> str:
    """The graph runs and what each compiled (graphs, sessions, fall backs), runs that
    only reused graphs collapsed into one row; ``""`` without a timeline."""
    rows = _timeline.timeline_rows(obj)
    if not rows:
        return ""
    body = []
    for row in rows[: _timeline.MAX_TIMELINE_ROWS]:
        css = "" if row.events else ' class="ortlab-reused"'
        lines = "<br>".join(_html.esc(line) for line in row.lines)
        body.append(f"<tr{css}><td>{_html.esc(row.runs)}</td><td>{lines}</td></tr>")
    more = len(rows) - _timeline.MAX_TIMELINE_ROWS
    return (
        '<table class="ortlab ortlab-timeline"><thead><tr><th>graph runs</th>'
        "<th>graphs compiled or reused, sessions created</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
        + (note(f"{more} more rows not shown.") if more > 0 else "")
    )


def first_call_html(obj: Any) -> str:
    """Where the first call's time went, in one line (escaped)."""
    return f'<p class="ortlab-first-call">{_html.esc(_timeline.first_call_text(obj))}</p>'


def partition_verdicts_html(
    partition: records.PartitionRecord, graph: records.GraphRecord | None
) -> str:
    """The verdicts of a partition's nodes (node, target, supported, reason, source)."""
    if graph is None:
        return ""
    names = set(partition.node_names)
    rows = [
        (v.node, v.target, v.supported, v.reason, v.source)
        for v in graph.verdicts
        if v.node in names
    ]
    return _html.table(("node", "target", "supported", "reason", "source"), rows)


def provenance_table(session: records.SessionRecord) -> str:
    """FX node -> the ONNX nodes it became."""
    prov = _graphs.provenance(session)
    rows = [
        (fx, ", ".join(_graphs.onnx_node_title(session, i) for i in idx))
        for fx, idx in prov.fx_to_onnx.items()
    ]
    if not rows:
        return note("This model carries no FX provenance metadata.")
    return _html.table(("FX node", "ONNX nodes"), rows)


def onnx_model_info(session: records.SessionRecord) -> str:
    """Model facts: opsets, inputs, outputs, initializers, op-type counts, providers."""
    model = session.model
    graph = model.graph
    init_bytes = sum(len(t.raw_data) for t in graph.initializer)
    ops = collections.Counter(n.op_type for n in graph.node)
    rows: list[tuple[str, Any]] = [
        ("partition", f"{session.partition_name} (session {session.index})"),
        (
            "inputs",
            ", ".join(f"{n}: {t}" for n, t in zip(session.input_names, session.input_schema)),
        ),
        (
            "outputs",
            ", ".join(
                f"{n}: {t}" for n, t in zip(session.output_names, session.output_schema)
            ),
        ),
        ("ONNX nodes", len(graph.node)),
        ("op types", ", ".join(f"{op} ×{c}" for op, c in ops.most_common())),
        ("initializers", f"{len(graph.initializer)} ({init_bytes / 1024:.1f} KiB)"),
        (
            "opsets",
            ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import),
        ),
        ("IR version", model.ir_version),
        ("model bytes", session.model_bytes),
        ("providers", ", ".join(session.providers)),
        ("export", f"{session.export_method}, {session.export_seconds * 1e3:.1f} ms"),
        ("session creation", f"{session.session_seconds * 1e3:.1f} ms"),
        ("intra-op threads", _threads_text(session)),
        ("runs", session.run_count),
    ]
    if session.fusions or session.fusion_note:
        fused = records.fusions_text(session.fusions, session.fusion_note)
        rows.append(("ONNX Runtime fused operators", fused))
    if session.frozen_inputs:
        rows.append(("frozen inputs", ", ".join(session.frozen_inputs)))
    if session.cuda_graph_status:
        rows.append(("CUDA graph", session.cuda_graph_status))
    rows.append(("save as a test case", save_hint(session)))
    return _html.table(("", ""), rows)


def _threads_text(session: records.SessionRecord) -> str:
    count = "ONNX Runtime's default" if session.threads is None else str(session.threads)
    return f"{count} ({session.threads_note})" if session.threads_note else count


def save_hint(session: records.SessionRecord) -> str:
    """How to save a session as an ONNX test case, or why it cannot be."""
    if session.last_inputs is None or session.last_outputs is None:
        return (
            "not available: sessions keep their last run with "
            "OrtBackendOptions(keep_last_run=True) (as %ortcompile does), in inference "
            "graphs (run under torch.no_grad())"
        )
    return (
        f"SessionRecord.save(dir) ({session.partition_name} session {session.index}) writes "
        "model.onnx and its last run's inputs and outputs (ONNX test-data layout, "
        "runnable with onnx_test_runner)"
    )


def summary_html(obj: Any, headline: str = "") -> str:
    """The Summary tab: key figures, where the first call's time went, the graph-run
    timeline, graphs and their causes, eager nodes by source line, verdicts per reason,
    eager nodes."""
    from ortlab.views import _subjects

    parts = []
    if headline:
        parts.append(f'<div class="ortlab-headline">{_html.esc(headline)}</div>')
    parts.append(_html.table(("", ""), _tables.summary_rows(obj)))
    graphs = _subjects.graphs_of(obj)
    if graphs:
        parts.append(first_call_html(obj))
    timeline = timeline_html(obj)
    if timeline:
        parts.append(
            "<h4>Timeline: graph runs, graphs and sessions</h4>"
            "<p>A call runs one graph, plus one per graph break; a run that compiles "
            "nothing reuses the graphs and sessions compiled before.</p>" + timeline
        )
    parts.append("<h4>Graphs</h4>" + _tables.frame_html(_tables.graphs_frame(obj)))
    parts.append(eager_sources_html(obj))
    parts.append(
        "<h4>Verdicts by reason</h4>" + _tables.frame_html(_tables.reasons_frame(obj))
    )
    for g in graphs:
        parts.append(f"<h4>Eager nodes of graph {g.index} ({_html.esc(g.kind)})</h4>")
        parts.append(eager_nodes_html(g))
    if not _dot.dot_available():
        parts.append(note(_dot.INSTALL_HINT))
    return "".join(parts)


def session_timings_html(obj: Any) -> str:
    """Seconds per compile step for each session (milliseconds, one row per session)."""
    from ortlab.views import _subjects

    steps = records.SESSION_STEPS
    rows = []
    for p in _subjects.partitions_of(obj):
        for s in p.sessions:
            rows.append(
                (
                    f"{p.graph_index}:{p.name}#{s.index}",
                    *(f"{s.timings.get(k, 0.0) * 1e3:.2f}" for k in steps),
                )
            )
    headers = ("session", *(f"{_tables.STEP_LABELS[k]} (ms)" for k in steps))
    return _html.table(headers, rows)


def graph_timings_html(obj: Any) -> str:
    """Seconds per graph-level step for each graph (milliseconds, one row per graph):
    Dynamo's trace, the exporter registry, lowering, support, partition, Dynamo's guards.
    """
    from ortlab.views import _subjects

    steps = records.GRAPH_STEPS
    rows = [
        (f"{g.index} ({g.kind})", *(f"{g.timings.get(k, 0.0) * 1e3:.2f}" for k in steps))
        for g in _subjects.graphs_of(obj)
    ]
    headers = ("graph", *(f"{_tables.STEP_LABELS[k]} (ms)" for k in steps))
    return _html.table(headers, rows)


def timings_html(backend: Any) -> str:
    """The Timings tab (Inspector and report): the first call in one line, step table,
    waterfall plot, per graph, per session."""
    out = []
    if backend.graphs:
        out.append(first_call_html(backend))
    out.append(_tables.frame_html(_tables.timings_frame(backend)))
    if backend.graphs:
        fig = _plots.plot_timings(backend, kind="waterfall")
        out.append(_plots.figure_img_html(fig, alt="compile time by step"))
    out.append("<h4>Per graph</h4>" + graph_timings_html(backend))
    out.append("<h4>Per session</h4>" + session_timings_html(backend))
    return "".join(out)
