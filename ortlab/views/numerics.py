"""The Numerics view of a :class:`~ortlab._numerics.DiffReport`: tables, plots, overlays.

- a diff table (pandas) of outputs and gradients, partitions and compared nodes;
- per-tensor error histograms and an error-vs-magnitude scatter (matplotlib);
- the error overlaid on a partition's FX graph and on its ONNX model: nodes coloured by
  their own error relative to the tolerance, the first divergent node outlined and named;
- :func:`numerics_html` (one self-contained HTML string: inline SVG, base64 PNG) and
  :func:`numerics_widget` (ipywidgets tabs) built from the same fragments; the Inspector's
  "Numerics" tab and the report's Numerics section use them.

# NOTE: colour = ``error / allowed error`` of a node, on a log scale: green far below the
# tolerance, amber approaching it, red beyond it. "Error" is the node's own error (its op
# run on ONNX Runtime's values of its operands) when known, otherwise its accumulated
# error; nodes that were not compared are white. Graphviz lays the graphs out; without
# ``dot`` every graph becomes a note plus the nodes table, nothing else is lost.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ortlab import _deps, _html, _numerics
from ortlab.views import _dot

if TYPE_CHECKING:
    import pandas

    from ortlab._numerics import DiffReport, NodeDiff, PartitionDiff, TensorDiff
    from ortlab.backend import PartitionRecord

__all__ = [
    "diff_table",
    "error_histograms",
    "error_scatter",
    "fx_overlay",
    "numerics_html",
    "numerics_widget",
    "onnx_overlay",
    "partition_html",
]

# Annotations name matplotlib types as Any: the package is optional and imported lazily.
Figure: TypeAlias = Any

MAX_GRAPH_NODES = 400
"""Graphs with more nodes than this are shown as tables (layout would take too long)."""

MAX_PLOTTED_TENSORS = 8
"""Histograms drawn at most (the worst tensors first)."""

PASS_FILL = "#c9f2d0"
NEAR_FILL = "#ffe8a3"
FAIL_FILL = "#ffb3b3"
FIRST_LINE = "#b00020"
IDLE_FILL = "white"
IO_FILL = "#e8eef7"

_STYLE = """<style>
.ortlab-num { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
  font-size: 13px; color: #222; }
.ortlab-num h4 { margin: 10px 0 4px 0; }
.ortlab-num table { border-collapse: collapse; margin: 4px 0 8px 0; font-size: 12px; }
.ortlab-num th, .ortlab-num td { border: 1px solid #ddd; padding: 2px 6px;
  text-align: left; }
.ortlab-num th { background: #f4f4f4; }
.ortlab-num .ortlab-num-pass { color: #1a7f37; font-weight: 600; }
.ortlab-num .ortlab-num-fail { color: #cf222e; font-weight: 600; }
.ortlab-num .ortlab-note { color: #8a4b00; background: #fff6e5; padding: 4px 8px;
  border-radius: 4px; margin: 4px 0; }
.ortlab-num .ortlab-num-first { border-left: 4px solid #b00020; background: #fff0f0;
  padding: 4px 8px; margin: 6px 0; }
.ortlab-num .ortlab-graph { overflow: auto; max-height: 640px; border: 1px solid #eee;
  background: white; padding: 2px; }
.ortlab-num .ortlab-graph svg { max-width: 100%; height: auto; }
.ortlab-num .ortlab-side { display: flex; gap: 8px; align-items: flex-start; }
.ortlab-num .ortlab-side > div { flex: 1 1 50%; min-width: 0; }
.ortlab-num .ortlab-legend span { display: inline-block; padding: 0 6px; margin-right: 6px;
  border-radius: 3px; border: 1px solid #999; }
</style>"""


# -- tables --------------------------------------------------------------------------------


def diff_table(report: DiffReport, *, what: str = "outputs") -> pandas.DataFrame:
    """A table of the report.

    Args:
        report: The :class:`~ortlab._numerics.DiffReport`.
        what: ``"outputs"`` (outputs and gradients), ``"partitions"``, ``"nodes"`` or
            ``"sweep"``.
    """
    frames = {
        "outputs": report.to_frame,
        "partitions": report.partitions_frame,
        "nodes": report.nodes_frame,
        "sweep": report.sweep_frame,
    }
    if what not in frames:
        from ortlab import errors

        raise errors.UnsupportedOptionError(
            f"diff_table(what={what!r}): use one of {', '.join(frames)}."
        )
    return frames[what]()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return "0" if value == 0 else f"{value:.3g}"
    return str(value)


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return "-"
    css = "ortlab-num-pass" if passed else "ortlab-num-fail"
    return f'<span class="{css}">{"pass" if passed else "FAIL"}</span>'


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], raw: frozenset[int] = frozenset()
) -> str:
    """An HTML table; cells are escaped except the columns in ``raw`` (already safe)."""
    head = "".join(f"<th>{_html.esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{cell if i in raw else _html.esc(_fmt(cell))}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="ortlab"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _tensors_html(report: DiffReport) -> str:
    rows = []
    for kind, tensors in (("output", report.outputs), ("gradient", report.gradients)):
        for t in tensors:
            rows.append(
                (
                    kind,
                    t.name,
                    "x".join(map(str, t.shape)) or "scalar",
                    t.dtype,
                    _verdict(t.passed),
                    t.max_abs_error,
                    t.mean_abs_error,
                    t.max_rel_error,
                    t.p99_abs_error,
                    f"{t.mismatched}/{t.numel}",
                    f"{t.nan_eager}/{t.nan_ort}",
                    f"{t.inf_eager}/{t.inf_ort}",
                    "exact" if t.exact else t.atol,
                    "exact" if t.exact else t.rtol,
                    t.note,
                )
            )
    headers = (
        "kind",
        "name",
        "shape",
        "dtype",
        "verdict",
        "max abs",
        "mean abs",
        "max rel",
        "p99 abs",
        "mismatched",
        "NaN eager/ORT",
        "Inf eager/ORT",
        "atol",
        "rtol",
        "note",
    )
    return _table(headers, rows, raw=frozenset({4}))


def _partitions_html(report: DiffReport) -> str:
    rows = []
    for p in report.partitions:
        first = p.first_divergent
        rows.append(
            (
                p.label,
                p.state,
                _verdict(p.passed) if p.state == "ort" else "-",
                p.local_error if p.state == "ort" else None,
                p.carried_in,
                p.carried_in_from,
                p.total_error,
                first.node if first else "",
                "; ".join(p.notes),
            )
        )
    headers = (
        "partition",
        "state",
        "verdict",
        "local error",
        "carried in",
        "worst input",
        "total error",
        "first divergent",
        "notes",
    )
    return _table(headers, rows, raw=frozenset({2}))


def _nodes_html(nodes: Sequence[NodeDiff]) -> str:
    rows = []
    for n in nodes:
        d = n.diff
        rows.append(
            (
                n.position,
                n.node,
                n.target,
                "/".join(dict.fromkeys(n.onnx_ops)),
                "x".join(map(str, d.shape)) if d else "",
                _verdict(not n.diverged) if d else "-",
                n.local_error,
                d.max_abs_error if d else None,
                d.scale if d else None,
                d.atol if d else None,
                n.note or (d.note if d else ""),
            )
        )
    headers = (
        "#",
        "node",
        "op",
        "ONNX ops",
        "shape",
        "own error",
        "own max abs",
        "accumulated max abs",
        "scale",
        "atol used",
        "note",
    )
    return _table(headers, rows, raw=frozenset({5}))


def _sweep_html(report: DiffReport) -> str:
    rows = [
        (
            r.label,
            r.status,
            ", ".join(r.providers),
            _verdict(r.passed),
            r.max_abs_error,
            r.mean_abs_error,
            r.max_rel_error,
            r.latency_ms,
        )
        for r in report.sweep
    ]
    headers = ("config", "status", "providers", "verdict", "max abs", "mean abs", "max rel")
    return _table((*headers, "latency ms"), rows, raw=frozenset({3}))


# -- plots ---------------------------------------------------------------------------------


def _plotted(report: DiffReport) -> list[TensorDiff]:
    tensors = [t for t in (*report.outputs, *report.gradients) if t.error_sample is not None]
    tensors = [t for t in tensors if t.error_sample is not None and len(t.error_sample)]
    tensors.sort(key=lambda t: (t.passed, -t.max_abs_error))
    return tensors[:MAX_PLOTTED_TENSORS]


def _floor(errors: Any) -> float:
    positive = errors[errors > 0]
    return float(positive.min()) / 10 if positive.size else 1e-12


def error_histograms(report: DiffReport) -> Figure:
    """Histograms of ``|ort - eager|`` per output/gradient (log scale; exact zeros at left).

    Returns:
        A ``matplotlib.figure.Figure`` (no pyplot state is touched).
    """
    figure_mod = _deps.require("matplotlib.figure")
    tensors = _plotted(report)
    cols = min(4, max(1, len(tensors)))
    rows = max(1, math.ceil(len(tensors) / cols))
    fig = figure_mod.Figure(figsize=(3.2 * cols, 2.4 * rows), dpi=90)
    if not tensors:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no floating-point values to plot", ha="center", va="center")
        ax.set_axis_off()
        return fig
    for i, t in enumerate(tensors):
        ax = fig.add_subplot(rows, cols, i + 1)
        errors = np.asarray(t.error_sample, dtype=float)
        floor = _floor(errors)
        shown = np.log10(np.maximum(errors, floor))
        colour = "#55a868" if t.passed else "#c44e52"
        ax.hist(shown, bins=40, color=colour)
        if not t.exact and t.atol > 0:
            ax.axvline(math.log10(t.atol), color="#333333", linestyle="--", linewidth=1)
        ax.set_title(_short(t.name), fontsize=9)
        ax.set_xlabel("log10 |ORT - eager|", fontsize=8)
        ax.tick_params(labelsize=7)
    # Fixed margins: tight_layout measures every tick label and doubles the drawing time.
    fig.subplots_adjust(
        left=0.3 / cols,
        right=0.97,
        bottom=0.3 / rows,
        top=1 - 0.2 / rows,
        wspace=0.3,
        hspace=0.7,
    )
    return fig


def error_scatter(report: DiffReport) -> Figure:
    """``|ort - eager|`` against ``|eager|`` for every output/gradient, log-log, with the
    tolerance ``atol + rtol * |eager|`` of each drawn as a line."""
    figure_mod = _deps.require("matplotlib.figure")
    fig = figure_mod.Figure(figsize=(6.0, 3.8), dpi=90)
    ax = fig.add_subplot()
    tensors = _plotted(report)
    if not tensors:
        ax.text(0.5, 0.5, "no floating-point values to plot", ha="center", va="center")
        ax.set_axis_off()
        return fig
    floor = min(_floor(np.asarray(t.error_sample)) for t in tensors)
    drawn: set[tuple[float, float]] = set()
    for t in tensors:
        x = np.abs(np.asarray(t.eager_sample, dtype=float))
        y = np.maximum(np.asarray(t.error_sample, dtype=float), floor)
        x = np.maximum(x, 1e-12)
        ax.scatter(x, y, s=4, alpha=0.5, label=_short(t.name))
        if not t.exact and (t.atol > 0 or t.rtol > 0) and (t.atol, t.rtol) not in drawn:
            drawn.add((t.atol, t.rtol))
            grid = np.logspace(math.log10(x.min()), math.log10(max(x.max(), x.min() * 10)))
            ax.plot(grid, t.atol + t.rtol * grid, linestyle="--", linewidth=1, color="#333")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("|eager value|")
    ax.set_ylabel("|ORT - eager|")
    ax.set_title("error vs magnitude (dashed: tolerance)", fontsize=10)
    ax.legend(fontsize=7, markerscale=3, loc="upper left")
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.14, top=0.9)
    return fig


def _short(name: str, width: int = 36) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _png(fig: Figure) -> str:
    """A figure as an ``<img>`` with base64 PNG data (Agg canvas, no pyplot)."""
    backend_agg = _deps.require("matplotlib.backends.backend_agg")
    backend_agg.FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}"/>'


# -- graph overlays ------------------------------------------------------------------------


def _ratio(node: NodeDiff) -> float | None:
    """Error over allowed error of a node's own error (accumulated when not isolated)."""
    d = node.local if node.local is not None else node.diff
    return None if d is None else d.ratio


def _fill(node: NodeDiff | None) -> str:
    ratio = None if node is None else _ratio(node)
    if ratio is None:
        return IDLE_FILL
    if ratio >= 1:
        return FAIL_FILL
    if ratio >= 0.1:
        return NEAR_FILL
    return PASS_FILL


def _tooltip(node: NodeDiff | None, fallback: str) -> str:
    return fallback if node is None else node.describe()


LEGEND = (
    '<div class="ortlab-legend">'
    f'<span style="background:{PASS_FILL}">error &lt; 10% of tolerance</span>'
    f'<span style="background:{NEAR_FILL}">10–100%</span>'
    f'<span style="background:{FAIL_FILL}">beyond tolerance</span>'
    f'<span style="background:{IDLE_FILL}">not compared</span>'
    f'<span style="border:3px solid {FIRST_LINE}">first divergent node</span></div>'
)


def _graph_header(title: str) -> list[str]:
    return [
        f"digraph {_dot.quote(title)} {{",
        'graph [rankdir=TB, fontname="Helvetica", fontsize=10, bgcolor="white"];',
        'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9, '
        'height=0.3, margin="0.08,0.03"];',
        'edge [arrowsize=0.6, color="#555555"];',
    ]


def _node_stmt(key: str, label: str, fill: str, tooltip: str, *, first: bool) -> str:
    attrs = {"label": label, "fillcolor": fill, "tooltip": tooltip}
    if first:
        attrs.update(color=FIRST_LINE, penwidth="3", xlabel="first divergent")
    return f"{_dot.quote(key)} {_dot.attrs(**attrs)};"


def _io_stmt(key: str, label: str) -> str:
    attrs = _dot.attrs(label=label, shape="ellipse", fillcolor=IO_FILL, tooltip=label)
    return f"{_dot.quote(key)} {attrs};"


def _partition_record(report: DiffReport, part: PartitionDiff) -> PartitionRecord | None:
    graphs = report.backend.graphs
    if not 0 <= part.graph_index < len(graphs):
        return None
    return next((p for p in graphs[part.graph_index].partitions if p.name == part.name), None)


def fx_overlay(report: DiffReport, part: PartitionDiff) -> str:
    """DOT source of the partition's FX graph, nodes coloured by error (module NOTE)."""
    record = _partition_record(report, part)
    if record is None:
        return ""
    by_name = {n.node: n for n in part.nodes}
    first = part.first_divergent
    lines = _graph_header(f"{part.label} FX")
    for node in record.graph_module.graph.nodes:
        nd = by_name.get(node.name)
        if node.op in ("placeholder", "output"):
            fill = _fill(nd) if nd is not None else IO_FILL
            label = node.name if node.op == "placeholder" else "output"
            lines.append(
                f"{_dot.quote(node.name)} "
                f"{_dot.attrs(label=label, shape='ellipse', fillcolor=fill, tooltip=label)};"
            )
        else:
            target = nd.target if nd is not None else str(node.target)
            err = ""
            if nd is not None and nd.diff is not None:
                own = nd.local_error
                err = f"\nerr {_fmt(own if own is not None else nd.max_abs_error)}"
            lines.append(
                _node_stmt(
                    node.name,
                    f"{node.name}\n{_short(target, 40)}{err}",
                    _fill(nd),
                    _tooltip(nd, f"{node.name} = {target}"),
                    first=first is not None and first.node == node.name,
                )
            )
        for arg in node.all_input_nodes:
            lines.append(f"{_dot.quote(arg.name)} -> {_dot.quote(node.name)};")
    lines.append("}")
    return "\n".join(lines)


def onnx_overlay(report: DiffReport, part: PartitionDiff) -> str:
    """DOT source of the partition's ONNX model, each node coloured by the error of the
    FX node it came from (provenance metadata ``pkg.torch.onnx.fx_node``)."""
    record = _partition_record(report, part)
    if record is None or part.session_index is None:
        return ""
    sessions = record.sessions
    if not 0 <= part.session_index < len(sessions):
        return ""
    model = sessions[part.session_index].model
    by_name = {n.node: n for n in part.nodes}
    first = part.first_divergent
    lines = _graph_header(f"{part.label} ONNX")
    producer: dict[str, str] = {}
    for info in model.graph.input:
        key = f"in:{info.name}"
        producer[info.name] = key
        lines.append(_io_stmt(key, info.name))
    marked = False
    nodes = list(model.graph.node)
    last_of: dict[str, int] = {}
    for index, node in enumerate(nodes):
        fx = _numerics.fx_node_name(node)
        if fx is not None:
            last_of[fx] = index
    for index, node in enumerate(nodes):
        key = f"n{index}"
        fx = _numerics.fx_node_name(node)
        nd = by_name.get(fx) if fx else None
        # Mark the ONNX node that produces the first divergent FX node's value.
        is_first = (
            not marked and first is not None and fx == first.node and last_of[fx] == index
        )
        marked = marked or is_first
        label = f"{node.op_type}\n{_short(node.name or key, 32)}"
        if fx:
            label += f"\n← {_short(fx, 28)}"
        lines.append(
            _node_stmt(
                key,
                label,
                _fill(nd),
                _tooltip(nd, f"{node.op_type} {node.name} (from {fx or 'no FX node'})"),
                first=is_first,
            )
        )
        for value in node.input:
            if value in producer:
                lines.append(f"{_dot.quote(producer[value])} -> {_dot.quote(key)};")
        for value in node.output:
            if value:
                producer[value] = key
    for info in model.graph.output:
        key = f"out:{info.name}"
        lines.append(_io_stmt(key, info.name))
        if info.name in producer:
            lines.append(f"{_dot.quote(producer[info.name])} -> {_dot.quote(key)};")
    lines.append("}")
    return "\n".join(lines)


def _graph_size(report: DiffReport, part: PartitionDiff) -> int:
    record = _partition_record(report, part)
    if record is None:
        return 0
    fx = len(record.graph_module.graph.nodes)
    onnx_nodes = 0
    if part.session_index is not None and part.session_index < len(record.sessions):
        onnx_nodes = len(record.sessions[part.session_index].model.graph.node)
    return max(fx, onnx_nodes)


def _svg_or_note(source: str) -> str:
    if not source:
        return _note("no graph recorded for this partition")
    try:
        svg = _dot.render_svg(source)
    except _dot.GraphvizError as e:
        return _note(str(e))
    return f'<div class="ortlab-graph">{svg}</div>'


def _note(text: str) -> str:
    return f'<p class="ortlab-note">{_html.esc(text)}</p>'


def partition_html(report: DiffReport, part: PartitionDiff, *, graphs: bool = True) -> str:
    """One partition: its verdict, first divergent node, FX and ONNX overlays, nodes."""
    parts = [f"<h4>{_html.esc(part.label)} — {_verdict(part.passed)}</h4>"]
    first = part.first_divergent
    if first is not None:
        parts.append(
            f'<div class="ortlab-num-first"><b>first divergent node</b>: '
            f"{_html.esc(first.describe())}</div>"
        )
    parts += [_note(n) for n in part.notes]
    if part.state == "ort" and not part.nodes:
        parts.append(
            _note(
                "nodes were not compared (only failing partitions are, by default); "
                "pass nodes=True to ortlab.diff to compare every node"
            )
        )
    if graphs:
        size = _graph_size(report, part)
        if size > MAX_GRAPH_NODES:
            parts.append(
                _note(f"{size} nodes: too many to draw; the nodes table below has them all")
            )
        elif not _dot.dot_available():
            parts.append(_note(_dot.INSTALL_HINT))
        else:
            parts.append(LEGEND)
            parts.append(
                '<div class="ortlab-side">'
                f"<div><b>FX graph</b>{_svg_or_note(fx_overlay(report, part))}</div>"
                f"<div><b>ONNX model</b>{_svg_or_note(onnx_overlay(report, part))}</div>"
                "</div>"
            )
    if part.nodes:
        parts.append(_nodes_html(part.nodes))
    return "".join(parts)


def _shown_partitions(report: DiffReport) -> list[PartitionDiff]:
    """Partitions worth a section: failing ones, or every one whose nodes were compared."""
    return [p for p in report.partitions if p.state == "ort" and (not p.passed or p.nodes)]


def _headline(report: DiffReport) -> str:
    css = "ortlab-num-pass" if report.passed else "ortlab-num-fail"
    return f'<p class="{css}">{_html.esc(report.summary(first=False))}</p>'


def _plots_html(report: DiffReport) -> str:
    if not _plotted(report):
        return _note("no floating-point outputs to plot")
    return _png(error_histograms(report)) + _png(error_scatter(report))


def numerics_html(report: DiffReport) -> str:
    """The whole Numerics view as one self-contained HTML string.

    Everything is inline (a ``<style>`` block, SVG from Graphviz, base64 PNG plots) and
    every string from a model is escaped. Without Graphviz's ``dot`` the graphs become a
    note and the node tables remain.

    Raises:
        MissingDependencyError: matplotlib is not installed.
    """
    first = report.first_divergent
    parts = [_STYLE, '<div class="ortlab-num">', _headline(report)]
    if first is not None:
        parts.append(
            f'<div class="ortlab-num-first"><b>first divergent node</b>: '
            f"{_html.esc(first.describe())}</div>"
        )
    parts += [_note(n) for n in report.notes]
    parts += ["<h4>Outputs and gradients</h4>", _tensors_html(report)]
    if report.partitions:
        parts += [
            "<h4>Partitions</h4>",
            "<p>local error: ORT against the partition's FX graph run eagerly on exactly "
            "the inputs ORT received; carried in: those inputs against an all-eager run "
            "of the whole graph.</p>",
            _partitions_html(report),
        ]
    for part in _shown_partitions(report):
        parts.append(partition_html(report, part))
    parts += ["<h4>Error distribution</h4>", _plots_html(report)]
    if report.sweep:
        parts += ["<h4>Sweep</h4>", _sweep_html(report)]
    parts.append("</div>")
    return "".join(parts)


def numerics_widget(report: DiffReport) -> Any:
    """The Numerics view as ipywidgets tabs: Summary, Partitions, Graphs, Sweep.

    The Graphs tab draws one partition at a time (chosen in a dropdown, the first
    divergent one preselected), so opening the widget costs one Graphviz layout.

    Raises:
        MissingDependencyError: ipywidgets or matplotlib is not installed.
    """
    widgets = _deps.require("ipywidgets")
    first = report.first_divergent
    summary = [_STYLE, '<div class="ortlab-num">', _headline(report)]
    if first is not None:
        summary.append(
            f'<div class="ortlab-num-first"><b>first divergent node</b>: '
            f"{_html.esc(first.describe())}</div>"
        )
    summary += [_note(n) for n in report.notes]
    summary += [_tensors_html(report), _plots_html(report), "</div>"]
    children = [widgets.HTML("".join(summary))]
    titles = ["Summary"]
    children.append(
        widgets.HTML(_STYLE + '<div class="ortlab-num">' + _partitions_html(report) + "</div>")
    )
    titles.append("Partitions")
    compared = [p for p in report.partitions if p.state == "ort"]
    if compared:
        options = [
            (p.label + ("" if p.passed else "  (FAIL)"), i) for i, p in enumerate(compared)
        ]
        start = next((i for i, p in enumerate(compared) if not p.passed), 0)
        picker = widgets.Dropdown(options=options, value=start, description="Partition")
        view = widgets.HTML()

        def draw(_: Any = None) -> None:
            part = compared[picker.value]
            view.value = (
                _STYLE + '<div class="ortlab-num">' + partition_html(report, part) + "</div>"
            )

        picker.observe(draw, names="value")
        draw()
        children.append(widgets.VBox([picker, view]))
        titles.append("Graphs")
    if report.sweep:
        children.append(
            widgets.HTML(_STYLE + '<div class="ortlab-num">' + _sweep_html(report) + "</div>")
        )
        titles.append("Sweep")
    tabs = widgets.Tab(children=children)
    for i, title in enumerate(titles):
        tabs.set_title(i, title)
    return tabs
