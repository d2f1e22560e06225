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
from collections.abc import Sequence
from typing import Any

from ortlab import _html, errors
from ortlab.backend import records
from ortlab.views import (
    _dot,
    _fusion,
    _graphs,
    _groups,
    _hierarchy,
    _items,
    _names,
    _style,
    _tables,
    _timeline,
)

NATURAL_SIZE_ABOVE_PX = 1600
"""Drawings wider than this are shown at their own size (scrolling), not shrunk to fit."""


def note(text: str) -> str:
    """A highlighted remark (escaped)."""
    return f'<p class="ortlab-note">{_html.esc(text)}</p>'


# A click on a drawn node (or an expanded module's label) is written into the widget's
# hidden text box (class ortlab-bridge), whose change reaches Python: pane|svg id|nonce.
_CLICK = (
    "var g=event.target.closest('g.node, g.cluster');"
    "if(!g||(g.classList.contains('cluster')&&event.target.tagName!=='text'))return;"
    "var r=this.closest('.ortlab-viewer');"
    "var i=r&&r.querySelector('.ortlab-bridge input');"
    "if(!i)return;"
    "i.value=this.dataset.pane+'|'+g.id+'|'+Date.now();"
    "i.dispatchEvent(new Event('input',{bubbles:true}));"
)


# Zoom buttons over a drawing: scale its SVG (the box scrolls); "fit" undoes it.
_ZOOM = (
    '<div class="ortlab-zoom">'
    + "".join(
        f'<button type="button" title="{title}" onclick="'
        "var s=this.parentNode.nextElementSibling.querySelector('svg');"
        "if(!s)return;"
        f"{action}"
        f'">{label}</button>'
        for label, title, action in (
            (
                "+",
                "zoom in",
                "s.style.maxWidth='none';"
                "s.style.width=(s.getBoundingClientRect().width*1.25)+'px';",
            ),
            (
                "−",
                "zoom out",
                "s.style.maxWidth='none';"
                "s.style.width=(s.getBoundingClientRect().width/1.25)+'px';",
            ),
            ("fit", "fit the box", "s.style.width='';s.style.maxWidth='100%';"),
        )
    )
    + "</div>"
)


def graph_html(rendered: _dot.Rendered, fallback: str = "", *, pane: str = "") -> str:
    """A rendered graph in a scroll box; its note (and ``fallback`` HTML) without SVG.

    Args:
        rendered: The drawing.
        fallback: HTML shown instead when there is no SVG (a table of the same nodes).
        pane: The name of the Inspector pane the drawing is in: a click on a node or a
            module is then sent to the kernel (see ``_viewer``).
    """
    parts = []
    if rendered.note:
        parts.append(note(rendered.note))
    if rendered.svg is not None:
        # Fit small drawings to the box; big ones keep their size and scroll, since shrunk
        # to fit they would be unreadable.
        width = re.search(r'width="([0-9.]+)px"', rendered.svg[:400])
        natural = width is not None and float(width.group(1)) > NATURAL_SIZE_ABOVE_PX
        css = "ortlab-graph ortlab-natural" if natural else "ortlab-graph"
        parts.append(_ZOOM)
        if pane:
            safe = _html.esc(pane)
            parts.append(
                f'<div class="{css} ortlab-clickable" data-pane="{safe}" '
                f'onclick="{_CLICK}">{rendered.svg}</div>'
            )
        else:
            parts.append(f'<div class="{css}">{rendered.svg}</div>')
    else:
        parts.append(fallback)
    return "".join(parts)


PAGE_ROWS = 200
"""Rows of a node table shown at once; the rest are a click away, page by page."""


def paged_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table of at most :data:`PAGE_ROWS` rows, the others in collapsed pages."""
    if len(rows) <= PAGE_ROWS:
        return _html.table(headers, rows)
    pages = [rows[i : i + PAGE_ROWS] for i in range(0, len(rows), PAGE_ROWS)]
    return _html.table(headers, pages[0]) + "".join(
        f"<details><summary>rows {i * PAGE_ROWS + 1}–{i * PAGE_ROWS + len(page)}</summary>"
        f"{_html.table(headers, page)}</details>"
        for i, page in enumerate(pages[1:], start=1)
    )


def fx_nodes_table(graph: records.GraphRecord) -> str:
    """The nodes of a graph with their partition and verdict (stands in for the
    drawing); weights are counted, not listed."""
    verdicts = {v.node: v for v in graph.verdicts}
    rows = []
    weights = 0
    for item in _items.graph_items(graph):
        if item.kind == "weight":
            weights += 1
            continue
        v = verdicts.get(item.key)
        runs = "" if item.kind != "op" else ("PyTorch" if item.eager else item.group or "")
        rows.append(
            (
                item.name,
                item.op,
                item.module,
                runs,
                item.value,
                v.reason if v else "",
                v.source if v else "",
            )
        )
    table = paged_table(("node", "op", "module", "runs in", "value", "reason", "source"), rows)
    return table + (
        f"<p>{weights} weights (parameters and buffers) read.</p>" if weights else ""
    )


def partition_nodes_table(partition: records.PartitionRecord) -> str:
    """The nodes of a partition's FX subgraph (stands in for its drawing)."""
    rows = [
        (n.name, n.op, n.target, n.scope[-1] if n.scope else "")
        for n in _items.partition_nodes(partition, None)
    ]
    return paged_table(("node", "op", "target", "module"), rows)


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
    return paged_table(("#", "op", "name", "inputs", "outputs", "FX node"), rows)


def module_table(tree: _hierarchy.Tree) -> str:
    """The module tree as a table (stands in for its drawing): each module indented
    under its parent, with its ops, partitions and the ops that stay in PyTorch."""
    rows = []
    stack = [(m, 0) for m in reversed(tree.root.children)]
    while stack:
        module, depth = stack.pop()
        fold = tree.folds.get(module.path)
        if fold is not None and fold.members[0] != module.path:
            continue  # one row per folded run
        label = fold.label if fold is not None else module.label
        rows.append(
            (
                "\u2003" * depth + label,
                module.cls,
                module.count,
                ", ".join(f"{g} ×{c}" for g, c in module.groups.most_common()),
                module.eager or "",
            )
        )
        stack.extend((c, depth + 1) for c in reversed(module.children))
    return paged_table(("module", "class", "ops", "partitions", "in PyTorch"), rows)


def eager_nodes_html(graph: records.GraphRecord) -> str:
    """The nodes of a graph that run in PyTorch, grouped by why (rule and reason in
    full), each with the line of the user's code it comes from."""
    return _groups.eager_html([graph])


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
    """The verdicts of a partition's nodes, grouped by rule and reason."""
    return _groups.partition_verdicts_html(partition, graph)


def provenance_table(
    session: records.SessionRecord,
    fusions: _fusion.Fusions | None = None,
    partition: records.PartitionRecord | None = None,
) -> str:
    """FX node -> the ONNX nodes it became, or the fused operator that absorbed it."""
    prov = _graphs.provenance(session)
    names = list(partition.node_names) if partition is not None else list(prov.fx_to_onnx)
    rows: list[tuple[str, ...]] = []
    for fx in names:
        idx = prov.onnx_nodes_of(fx)
        became = ", ".join(_graphs.onnx_node_title(session, i) for i in idx)
        fused = fusions.describe(fx) if fusions is not None else None
        rows.append((fx, became or "(none)", fused or ""))
    if not any(r[1] != "(none)" for r in rows):
        return note("This model carries no FX provenance metadata.")
    headers: tuple[str, ...] = ("FX node", "ONNX nodes", "fused into")
    if fusions is None:
        rows = [r[:2] for r in rows]
        headers = headers[:2]
    text = paged_table(headers, rows)
    if fusions is not None and fusions.note:
        text = note(fusions.note) + text
    return text


def onnx_model_info(
    session: records.SessionRecord, graph: records.GraphRecord | None = None
) -> str:
    """Model facts: opsets, inputs (named by what they bind, weights summarised),
    outputs, initializers, op-type counts, providers."""
    model = session.model
    proto = model.graph
    init_bytes = sum(len(t.raw_data) for t in proto.initializer)
    ops = collections.Counter(n.op_type for n in proto.node)
    rows: list[tuple[str, Any]] = [
        ("partition", f"{session.partition_name} (session {session.index})"),
        (
            "outputs",
            ", ".join(
                f"{n}: {t}" for n, t in zip(session.output_names, session.output_schema)
            ),
        ),
        ("ONNX nodes", len(proto.node)),
        ("op types", ", ".join(f"{op} ×{c}" for op, c in ops.most_common())),
        ("initializers", f"{len(proto.initializer)} ({init_bytes / 1024:.1f} KiB)"),
        (
            "opsets",
            ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import),
        ),
        ("IR version", model.ir_version),
        ("model bytes", session.model_bytes),
        ("providers", _providers_text(session)),
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
    inputs = _names.detail_html(_names.session_inputs(session, graph))
    return (
        '<table class="ortlab"><tbody><tr><td>inputs</td>'
        f"<td>{inputs}</td></tr></tbody></table>" + _html.table(("", ""), rows)
    )


def _providers_text(session: records.SessionRecord) -> str:
    providers = ", ".join(session.providers)
    return f"{providers} ({session.provider_note})" if session.provider_note else providers


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
    parts.extend(note(line) for line in _timeline.usage_notes(obj))
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
    parts.extend(note(line) for line in _timeline.recompile_limit_notes(obj))
    parts.append("<h4>Graphs</h4>" + _tables.frame_html(_tables.graphs_frame(obj)))
    parts.extend(inputs_html(g) for g in graphs if g.input_sources)
    parts.append(eager_sources_html(obj))
    parts.append(
        "<h4>Verdicts by reason</h4><p>Grouped by where the nodes run, the support rule "
        "that decided and its reason; click a group for its nodes.</p>"
        + _groups.verdicts_html(obj)
    )
    if not _dot.dot_available():
        parts.append(note(_dot.INSTALL_HINT))
    return "".join(parts)


def inputs_html(graph: records.GraphRecord) -> str:
    """A graph's inputs, named by what they bind, weights summarised."""
    return (
        f"<p>Graph {graph.index} inputs: "
        + _names.detail_html(_names.graph_inputs(graph))
        + "</p>"
    )


def sessions_html(obj: Any) -> str:
    """The sessions: one row each, inputs named and summarised (detail one click away)."""
    from ortlab.views import _subjects

    rows = []
    for p in _subjects.partitions_of(obj):
        graph = _graph_of(obj, p)
        for s in p.sessions:
            inputs = _names.detail_html(_names.session_inputs(s, graph))
            cells = [
                f"{p.graph_index} ({p.graph_kind})",
                s.partition_name,
                s.index,
                ", ".join(s.output_schema)
                if len(s.output_schema) <= 3
                else f"{len(s.output_schema)} outputs",
                ", ".join(s.providers),
                _html.number(s.threads),
                records.fusions_text(s.fusions, s.fusion_note),
                f"{s.export_seconds * 1e3:.3g}",
                f"{s.session_seconds * 1e3:.3g}",
                s.run_count,
                s.onnx_node_count,
                _names.bytes_text(s.model_bytes),
                "yes" if s.active else "no",
            ]
            rows.append(
                "<tr><td>"
                + "</td><td>".join(_html.esc(c) for c in cells[:3])
                + f"</td><td>{inputs}</td><td>"
                + "</td><td>".join(_html.esc(c) for c in cells[3:])
                + "</td></tr>"
            )
    if not rows:
        return "<p>No session yet: call the compiled model.</p>"
    headers = (
        "graph", "partition", "#", "inputs", "outputs", "providers", "threads",
        "fused operators", "export ms", "session ms", "runs", "ONNX nodes", "model", "active",
    )  # fmt: skip
    head = "".join(f"<th>{_html.esc(h)}</th>" for h in headers)
    return (
        f'<table class="ortlab ortlab-sessions-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _graph_of(obj: Any, partition: records.PartitionRecord) -> records.GraphRecord | None:
    from ortlab.views import _subjects

    try:
        graphs = _subjects.graphs_of(obj)
    except errors.OrtlabError:  # partition or session records: no graph to name inputs by
        return None
    return next((g for g in graphs if g.index == partition.graph_index), None)


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
    headers = ("session", *(f"{_tables.STEP_LABELS.get(k, k)} (ms)" for k in steps))
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
    headers = ("graph", *(f"{_tables.STEP_LABELS.get(k, k)} (ms)" for k in steps))
    return _html.table(headers, rows)


def waterfall_html(frame: Any) -> str:
    """Compile time by step as a waterfall of HTML bars (each step starts where the one
    before it ended), drawn by the page: the matplotlib figure (``plot_timings``) took
    2.2 s to render on the 12-layer BERT's Timings tab, 5.8 s with its import."""
    total = float(frame["seconds"].sum())
    rows = []
    for step, seconds, start in zip(frame["step"], frame["seconds"], frame["start"]):
        left = 100 * float(start) / total if total else 0.0
        width = max(100 * float(seconds) / total, 0.2) if total else 0.0
        bar = (
            '<div style="position:relative;background:#f4f4f4;height:12px;width:360px">'
            f'<div style="position:absolute;left:{left:.2f}%;width:{width:.2f}%;'
            f'height:12px;background:{_style.WATERFALL_FILL}"></div></div>'
        )
        rows.append(
            f"<tr><td>{_html.esc(step)}</td><td>{bar}</td>"
            f"<td>{float(seconds) * 1e3:.1f} ms</td></tr>"
        )
    return (
        f'<table class="ortlab-waterfall" title="compile time by step">'
        f"<caption>compile time by step (waterfall), total {total * 1e3:.1f} ms</caption>"
        + "".join(rows)
        + "</table>"
    )


def timings_html(backend: Any) -> str:
    """The Timings tab (Inspector and report): the first call in one line, step table,
    waterfall plot, per graph, per session."""
    out = []
    if backend.graphs:
        out.append(first_call_html(backend))
    frame = _tables.timings_frame(backend)
    out.append(_tables.frame_html(frame))
    if backend.graphs:
        out.append(waterfall_html(frame))
    out.append("<h4>Per graph</h4>" + graph_timings_html(backend))
    out.append("<h4>Per session</h4>" + session_timings_html(backend))
    return "".join(out)
