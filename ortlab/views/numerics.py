"""The Numerics view of a :class:`~ortlab.DiffReport`: tables, plots, overlays.

- :func:`diff_table`: outputs and gradients, partitions, compared nodes or the sweep as a
  pandas DataFrame (the report's ``to_frame()`` & co. come here);
- :func:`summary_html`: the report as light HTML (its ``_repr_html_``): verdict, first
  cause (a decision flip or the first divergent node), the tables — no plots, no graphs;
- :func:`error_histograms` and :func:`error_scatter` (matplotlib);
- :func:`fx_overlay` / :func:`onnx_overlay`: the error overlaid on a partition's FX graph
  and on its ONNX model (DOT of the lab's one graph model, :mod:`ortlab.views._gmodel`);
  :func:`module_overlay_models`: the same as module trees, each box with the worst error
  inside it, for partitions too large to draw node by node;
- :func:`numerics_html` (one self-contained HTML string: inline SVG, base64 PNG) and
  :func:`numerics_widget` (ipywidgets tabs), built from the same pieces; the Inspector's
  "Numerics" tab and the report's Numerics section use them.

Tables show the records' own display cells (``cells()`` under ``HEADERS``, the same as the
report's text ``repr``); colours, CSS, legends and Graphviz defaults are the lab's
(:mod:`ortlab.views._style`), and graphs above :data:`~ortlab.views._graphs.MAX_DRAWN_NODES`
nodes are drawn by module (:mod:`ortlab.views._layout`), as the Inspector draws them.

# NOTE: colour = ``error / allowed error`` of a node, on a log scale: green far below the
# tolerance, amber approaching it, red beyond it. "Error" is the node's own error (its op
# run on ONNX Runtime's values of its operands) when known, otherwise its accumulated
# error; nodes that were not compared are white. Graphviz lays the graphs out; without
# ``dot`` every graph becomes a note plus the nodes table, nothing else is lost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ortlab import _deps, _html, errors
from ortlab.backend import records
from ortlab.numerics import _findings, _records, _report, _tabular
from ortlab.views import (
    _dot,
    _fragments,
    _gmodel,
    _graphs,
    _layout,
    _names,
    _plots,
    _style,
)

if TYPE_CHECKING:
    import pandas

    from ortlab.numerics import DecisionFlip, DiffReport, NodeDiff, PartitionDiff, TensorDiff

__all__ = [
    "diff_table",
    "error_histograms",
    "error_scatter",
    "error_overlay",
    "fx_overlay",
    "fx_overlay_model",
    "module_overlay_models",
    "numerics_html",
    "numerics_widget",
    "onnx_overlay",
    "onnx_overlay_model",
    "partition_html",
    "summary_html",
]

# Annotations name matplotlib types as Any: the package is optional and imported lazily.
Figure: TypeAlias = Any

MAX_PLOTTED_TENSORS = 8
"""Histograms drawn at most (the worst tensors first)."""

# -- tables --------------------------------------------------------------------------------

_TABLES = ("outputs", "partitions", "nodes", "flips", "reference", "sweep")


def diff_table(report: DiffReport, *, what: str = "outputs") -> pandas.DataFrame:
    """A table of the report, one row per record (columns: the record's ``COLUMNS``).

    Args:
        report: The :class:`~ortlab.DiffReport`.
        what: ``"outputs"`` (outputs and gradients, ``kind`` says which),
            ``"partitions"``, ``"nodes"``, ``"flips"`` (decision flips), ``"reference"``
            (against float64, empty unless computed) or ``"sweep"``.

    Raises:
        UnsupportedOptionError: ``what`` is none of those.
    """
    if what not in _TABLES:
        raise errors.UnsupportedOptionError(
            f"diff_table(what={what!r}): use one of {', '.join(_TABLES)}."
        )
    pd = _deps.require("pandas")
    if what == "outputs":
        rows = [
            {"kind": kind, **t.row()}
            for kind, tensors in (("output", report.outputs), ("gradient", report.gradients))
            for t in tensors
        ]
        return pd.DataFrame(rows, columns=["kind", *_records.TensorDiff.COLUMNS])
    if what == "partitions":
        return pd.DataFrame(
            [p.row() for p in report.partitions], columns=list(_records.PartitionDiff.COLUMNS)
        )
    if what == "nodes":
        return pd.DataFrame(
            [n.row() for n in report.nodes], columns=list(_records.NodeDiff.COLUMNS)
        )
    if what == "flips":
        return pd.DataFrame(
            [f.row() for f in report.flips], columns=list(_findings.DecisionFlip.COLUMNS)
        )
    if what == "reference":
        tensors = report.reference.tensors if report.reference is not None else []
        return pd.DataFrame(
            [t.row() for t in tensors], columns=list(_findings.ReferenceDiff.COLUMNS)
        )
    return pd.DataFrame(
        [r.row() for r in report.sweep], columns=list(_report.SweepRow.COLUMNS)
    )


def _verdict_html(text: str) -> str:
    if text not in ("pass", "FAIL"):
        return _html.esc(text)
    css = "ortlab-num-pass" if text == "pass" else "ortlab-num-fail"
    return f'<span class="{css}">{text}</span>'


def _cells_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An HTML table of records' display cells; the verdict column is coloured, every
    other cell escaped."""
    verdict = headers.index(_tabular.VERDICT) if _tabular.VERDICT in headers else -1
    head = "".join(f"<th>{_html.esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{_verdict_html(c) if i == verdict else _html.esc(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="ortlab"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _tensors_html(report: DiffReport) -> str:
    return _cells_table(report.TENSOR_HEADERS, report.tensor_cells())


def _partitions_html(report: DiffReport) -> str:
    return _cells_table(_records.PartitionDiff.HEADERS, [p.cells() for p in report.partitions])


def _nodes_html(nodes: Sequence[NodeDiff]) -> str:
    return _cells_table(_records.NodeDiff.HEADERS, [n.cells() for n in nodes])


def _sweep_html(report: DiffReport) -> str:
    return _cells_table(_report.SweepRow.HEADERS, [r.cells() for r in report.sweep])


def _flips_html(flips: Sequence[DecisionFlip]) -> str:
    if not flips:
        return ""
    return "<h4>Decision flips</h4>" + _cells_table(
        _findings.DecisionFlip.HEADERS, [f.cells() for f in flips]
    )


def _reference_html(report: DiffReport) -> str:
    reference = report.reference
    if reference is None:
        return ""
    css = "ortlab-num-pass" if reference.as_close else "ortlab-num-fail"
    parts = [
        "<h4>Against float64</h4>",
        f'<p class="{css}">{_html.esc(reference.summary())}</p>',
        *(_fragments.note(n) for n in reference.notes),
    ]
    if reference.tensors:
        parts.append(_cells_table(_findings.ReferenceDiff.HEADERS, reference.cells()))
    return "".join(parts)


def _headline(report: DiffReport) -> str:
    css = "ortlab-num-pass" if report.passed else "ortlab-num-fail"
    line = report.verdict_line()  # the first cause and float64 get their own sections
    if report.first_cause is None and report.cause_text():
        line += f"; {report.cause_text()}"
    return f'<p class="{css}">{_html.esc(line)}</p>'


def _first_divergent_html(node: NodeDiff | None) -> str:
    if node is None:
        return ""
    return (
        f'<div class="ortlab-num-first"><b>first divergent node</b>: '
        f"{_html.esc(node.describe())}</div>"
    )


def _flip_html(flip: DecisionFlip, *, hint: bool) -> str:
    """A decision flip, what it means and (with ``hint``) how to judge it."""
    meaning = _findings.FLIP_EXPLANATION + (f" {_findings.FLIP_HINT}" if hint else "")
    return (
        f'<div class="ortlab-num-first"><b>first cause: decision flip</b>: '
        f"{_html.esc(flip.describe())}<br>{_html.esc(meaning)}</div>"
    )


def _first_cause_html(report: DiffReport) -> str:
    cause = report.first_cause
    if isinstance(cause, _findings.DecisionFlip):
        return _flip_html(cause, hint=report.reference is None)
    return _first_divergent_html(cause)


def _summary_parts(report: DiffReport) -> list[str]:
    """Verdict, first cause, notes, outputs and gradients, decision flips, float64."""
    return [
        _headline(report),
        _first_cause_html(report),
        *(_fragments.note(n) for n in report.notes),
        _tensors_html(report),
        _flips_html(report.flips),
        _reference_html(report),
    ]


_PARTITIONS_INTRO = (
    "<p>local error: ORT against the partition's FX graph run eagerly on exactly the "
    "inputs ORT received; carried in: those inputs against an all-eager run of the whole "
    "graph.</p>"
)


def summary_html(report: DiffReport) -> str:
    """The report as light, self-contained HTML: verdict, first cause, notes and the
    outputs, decision flips, float64, partitions and sweep tables (no plots or graphs:
    nothing optional is imported)."""
    parts = _summary_parts(report)
    if report.partitions:
        parts += ["<h4>Partitions</h4>", _PARTITIONS_INTRO, _partitions_html(report)]
    if report.sweep:
        parts += ["<h4>Sweep</h4>", _sweep_html(report)]
    return _style.styled("".join(parts))


# -- plots ---------------------------------------------------------------------------------


def _plotted(report: DiffReport) -> list[TensorDiff]:
    tensors = [
        t
        for t in (*report.outputs, *report.gradients)
        if t.error_sample is not None and len(t.error_sample)
    ]
    tensors.sort(key=lambda t: (t.passed, -t.max_abs_error))
    return tensors[:MAX_PLOTTED_TENSORS]


def _floor(errors_: Any) -> float:
    positive = errors_[errors_ > 0]
    return float(positive.min()) / 10 if positive.size else 1e-12


def _no_values(fig: Figure) -> Figure:
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "no floating-point values to plot", ha="center", va="center")
    ax.set_axis_off()
    return fig


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
        return _no_values(fig)
    for i, t in enumerate(tensors):
        ax = fig.add_subplot(rows, cols, i + 1)
        errors_ = np.asarray(t.error_sample, dtype=float)
        shown = np.log10(np.maximum(errors_, _floor(errors_)))
        ax.hist(shown, bins=40, color=_style.PASS_TEXT if t.passed else _style.FAIL_TEXT)
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
    tensors = _plotted(report)
    if not tensors:
        return _no_values(fig)
    ax = fig.add_subplot()
    floor = min(_floor(np.asarray(t.error_sample)) for t in tensors)
    drawn: set[tuple[float, float]] = set()
    for t in tensors:
        x = np.maximum(np.abs(np.asarray(t.eager_sample, dtype=float)), 1e-12)
        y = np.maximum(np.asarray(t.error_sample, dtype=float), floor)
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


def _plots_html(report: DiffReport) -> str:
    if not _plotted(report):
        return _fragments.note("no floating-point outputs to plot")
    return _plots.figure_img_html(
        error_histograms(report), alt="error histograms"
    ) + _plots.figure_img_html(error_scatter(report), alt="error vs magnitude")


# -- graph overlays ------------------------------------------------------------------------


def _fill(node: NodeDiff | None) -> str:
    """A node's fill: its own error over the allowed error (accumulated when its own
    could not be isolated)."""
    if node is None:
        return _style.IDLE_FILL
    d = node.local if node.local is not None else node.diff
    return _style.error_fill(None if d is None else d.ratio)


def _error_node(
    key: str,
    label: str,
    node: NodeDiff | None,
    tooltip: str,
    *,
    kind: str,
    first: bool,
    flip: bool = False,
) -> _gmodel.Node:
    """A node filled by its error, outlined when it is the first divergent one or a
    decision flip."""
    mark = "first divergent" if first else "decision flip" if flip else ""
    return _gmodel.Node(
        key,
        label,
        kind=kind,
        tooltip=tooltip,
        fill=_fill(node),
        line=_style.FIRST_LINE if mark else None,
        penwidth=3 if mark else None,
        xlabel=mark,
    )


def _io_node(key: str, label: str, kind: str, fill: str = _style.IO_FILL) -> _gmodel.Node:
    return _gmodel.Node(key, label, kind=kind, tooltip=label, fill=fill, shape="ellipse")


def _partition_record(
    report: DiffReport, part: PartitionDiff
) -> records.PartitionRecord | None:
    graphs = report.backend.graphs
    if not 0 <= part.graph_index < len(graphs):
        return None
    return next((p for p in graphs[part.graph_index].partitions if p.name == part.name), None)


def _session_record(report: DiffReport, part: PartitionDiff) -> records.SessionRecord | None:
    record = _partition_record(report, part)
    if record is None or part.session_index is None:
        return None
    return record.session(part.session_index)


def fx_overlay_model(
    report: DiffReport, part: PartitionDiff, *, id_prefix: str = ""
) -> _gmodel.GraphModel | None:
    """The partition's FX graph, nodes filled by error (module NOTE), in the lab's one
    graph model (SVG ids: ``id_prefix`` and the FX node's name); ``None`` when the
    partition's record is gone."""
    record = _partition_record(report, part)
    if record is None:
        return None
    by_name = {n.node: n for n in part.nodes}
    flips = {f.node: f for f in part.flips}
    first = part.first_divergent
    model = _gmodel.GraphModel(f"{part.label} FX")
    graph = report.backend.graphs[part.graph_index]
    ids = model.ids
    for node in record.graph_module.graph.nodes:
        nd = by_name.get(node.name)
        key = ids[node.name] = id_prefix + node.name
        model.node_count += 1
        if node.op in ("placeholder", "output"):
            # A placeholder as the parameter or input it binds ("fc1.weight (arg3_1)").
            label = _names.label(graph, node.name) if node.op == "placeholder" else "output"
            fill = _fill(nd) if nd else _style.IO_FILL
            model.items.append(_io_node(key, label, node.op, fill))
        else:
            target = nd.target if nd is not None else str(node.target)
            err = ""
            if nd is not None and nd.diff is not None:
                own = nd.local_error
                err = f"\nerr {_html.number(own if own is not None else nd.max_abs_error)}"
            flip = flips.get(node.name)
            tooltip = nd.describe() if nd is not None else f"{node.name} = {target}"
            model.items.append(
                _error_node(
                    key,
                    f"{node.name}\n{_short(target, 40)}{err}",
                    nd,
                    flip.describe() if flip is not None else tooltip,
                    kind="ort",
                    first=flip is None and first is not None and first.node == node.name,
                    flip=flip is not None,
                )
            )
        model.edges += [
            _gmodel.Edge(id_prefix + arg.name, key) for arg in node.all_input_nodes
        ]
    return model


def fx_overlay(report: DiffReport, part: PartitionDiff, *, id_prefix: str = "") -> str:
    """DOT source of the partition's FX graph, nodes coloured by error (module NOTE)."""
    model = fx_overlay_model(report, part, id_prefix=id_prefix)
    return "" if model is None else _gmodel.to_dot(model)


def onnx_overlay_model(
    report: DiffReport, part: PartitionDiff, *, id_prefix: str = ""
) -> _gmodel.GraphModel | None:
    """The partition's ONNX model, each node filled by the error of the FX node it came
    from (provenance metadata ``pkg.torch.onnx.fx_node``), in the lab's one graph model
    (SVG ids start with ``id_prefix``); ``None`` when the partition has no session."""
    session = _session_record(report, part)
    if session is None:
        return None
    proto = session.model
    by_name = {n.node: n for n in part.nodes}
    first = part.first_divergent
    model = _gmodel.GraphModel(f"{part.label} ONNX", node_count=len(proto.graph.node))
    producer: dict[str, str] = {}
    for info in proto.graph.input:
        producer[info.name] = f"{id_prefix}in:{info.name}"
        model.items.append(_io_node(producer[info.name], info.name, "onnx-input"))
    nodes = list(proto.graph.node)
    fx_of = [records.fx_node_of(node) for node in nodes]
    last_of = {fx: index for index, fx in enumerate(fx_of) if fx is not None}
    for index, node in enumerate(nodes):
        key, fx = f"{id_prefix}n{index}", fx_of[index]
        model.ids[str(index)] = key
        nd = by_name.get(fx) if fx else None
        # Mark the ONNX node that produces the first divergent FX node's value.
        is_first = first is not None and fx == first.node and last_of[fx] == index
        label = f"{node.op_type}\n{_short(node.name or f'n{index}', 32)}"
        if fx:
            label += f"\n← {_short(fx, 28)}"
        tooltip = (
            nd.describe()
            if nd is not None
            else f"{node.op_type} {node.name} (from {fx or 'no FX node'})"
        )
        model.items.append(_error_node(key, label, nd, tooltip, kind="onnx", first=is_first))
        model.edges += [
            _gmodel.Edge(producer[value], key) for value in node.input if value in producer
        ]
        for value in node.output:
            if value:
                producer[value] = key
    for info in proto.graph.output:
        key = f"{id_prefix}out:{info.name}"
        model.items.append(_io_node(key, info.name, "onnx-output"))
        if info.name in producer:
            model.edges.append(_gmodel.Edge(producer[info.name], key))
    return model


def onnx_overlay(report: DiffReport, part: PartitionDiff, *, id_prefix: str = "") -> str:
    """DOT source of the partition's ONNX model, each node coloured by the error of the
    FX node it came from (provenance metadata ``pkg.torch.onnx.fx_node``)."""
    model = onnx_overlay_model(report, part, id_prefix=id_prefix)
    return "" if model is None else _gmodel.to_dot(model)


def _graph_size(report: DiffReport, part: PartitionDiff) -> int:
    record = _partition_record(report, part)
    session = _session_record(report, part)
    fx = len(record.graph_module.graph.nodes) if record is not None else 0
    return max(fx, len(session.model.graph.node) if session is not None else 0)


def _svg_or_note(model: _gmodel.GraphModel | None) -> str:
    if model is None:
        return _fragments.note("no graph recorded for this partition")
    return _fragments.graph_html(_gmodel.render(model))


def error_overlay(part: PartitionDiff, onnx: Any = None) -> _gmodel.Overlay:
    """The partition's errors over the allowed error as an overlay of the module tree:
    per FX node, or (``onnx``: the session's model) per ONNX node by the FX node it came
    from; a box standing for several nodes shows the worst."""
    ratios: dict[str, float] = {}
    for n in part.nodes:
        d = n.local if n.local is not None else n.diff
        if d is not None and d.ratio is not None:
            ratios[n.node] = d.ratio
    if onnx is not None:
        fx_of = (records.fx_node_of(node) for node in onnx.graph.node)
        ratios = {str(i): ratios[fx] for i, fx in enumerate(fx_of) if fx in ratios}
    return _gmodel.Overlay(
        ratios,
        fill=_style.error_fill,
        text=lambda ratio: f"error {_html.number(ratio)}× allowed",
        combine=max,
    )


def module_overlay_models(
    report: DiffReport, part: PartitionDiff, *, id_prefix: str = ""
) -> tuple[_gmodel.GraphModel | None, _gmodel.GraphModel | None]:
    """The partition's FX graph and ONNX model as module trees (their readable first
    level, as the Inspector draws them), each box filled by the worst error inside it:
    the overlays of a partition too large to draw node by node."""
    record = _partition_record(report, part)
    if record is None:
        return None, None
    graph = report.backend.graphs[part.graph_index]
    colors = _graphs.partition_colors(graph)
    fx = _layout.layout(
        _graphs.tree_of(record, graph),
        id_prefix=f"{id_prefix}fx-",
        colors=colors,
        caption=f"{part.label}: the worst error in each module",
        overlay=error_overlay(part),
    )
    session = _session_record(report, part)
    if session is None:
        return fx, None
    onnx = _layout.layout(
        _graphs.tree_of(session, graph),
        id_prefix=f"{id_prefix}onnx-",
        caption=f"{part.label} ONNX: the worst error in each module",
        overlay=error_overlay(part, session.model),
    )
    return fx, onnx


def _overlays_html(report: DiffReport, part: PartitionDiff) -> str:
    if not _dot.dot_available():
        return _fragments.note(_dot.INSTALL_HINT)
    prefix = f"num{part.graph_index}-{part.name}-"  # SVG ids unique on a page
    size = _graph_size(report, part)
    if size > _graphs.MAX_DRAWN_NODES:
        fx, onnx = module_overlay_models(report, part, id_prefix=prefix)
        lead = _fragments.note(
            f"{size} nodes: drawn by module, each box filled by the worst error inside "
            "it; the nodes table below has them all"
        )
    else:
        fx = fx_overlay_model(report, part, id_prefix=prefix)
        onnx = onnx_overlay_model(report, part, id_prefix=prefix)
        lead = ""
    return (
        _style.ERROR_LEGEND
        + lead
        + '<div class="ortlab-side">'
        + f"<div><b>FX graph</b>{_svg_or_note(fx)}</div>"
        + f"<div><b>ONNX model</b>{_svg_or_note(onnx)}</div></div>"
    )


def partition_html(report: DiffReport, part: PartitionDiff, *, graphs: bool = True) -> str:
    """One partition: its verdict, first divergent node, FX and ONNX overlays, nodes."""
    parts = [
        f"<h4>{_html.esc(part.label)} — {_verdict_html('pass' if part.passed else 'FAIL')}"
        "</h4>",
        _first_divergent_html(part.first_divergent),
        _flips_html(part.flips),
        *(_fragments.note(n) for n in part.notes),
    ]
    if part.compared and not part.nodes:
        parts.append(
            _fragments.note(
                "nodes were not compared (only failing partitions are, by default); "
                "pass nodes=True to ortlab.diff to compare every node"
            )
        )
    if graphs:
        parts.append(_overlays_html(report, part))
    if part.nodes:
        parts.append(_nodes_html(part.nodes))
    return "".join(parts)


def _shown_partitions(report: DiffReport) -> list[PartitionDiff]:
    """Partitions worth a section: failing ones, ones holding a decision flip, or every one
    whose nodes were compared."""
    return [
        p for p in report.partitions if p.compared and (not p.passed or p.nodes or p.flips)
    ]


def numerics_html(report: DiffReport) -> str:
    """The whole Numerics view as one self-contained HTML string.

    Everything is inline (a ``<style>`` block, SVG from Graphviz, base64 PNG plots) and
    every string from a model is escaped. Without Graphviz's ``dot`` the graphs become a
    note and the node tables remain.

    Raises:
        MissingDependencyError: matplotlib is not installed.
    """
    parts = ["<h4>Outputs and gradients</h4>", *_summary_parts(report)]
    if report.partitions:
        parts += ["<h4>Partitions</h4>", _PARTITIONS_INTRO, _partitions_html(report)]
    parts += [partition_html(report, part) for part in _shown_partitions(report)]
    parts += ["<h4>Error distribution</h4>", _plots_html(report)]
    if report.sweep:
        parts += ["<h4>Sweep</h4>", _sweep_html(report)]
    return _style.styled("".join(parts))


def numerics_widget(report: DiffReport) -> Any:
    """The Numerics view as ipywidgets tabs: Summary, Partitions, Graphs, Sweep.

    The Graphs tab draws one partition at a time (chosen in a dropdown, the first failing
    one preselected, else the one holding the first decision flip), so opening the widget
    costs one Graphviz layout.

    Raises:
        MissingDependencyError: ipywidgets or matplotlib is not installed.
    """
    widgets = _deps.require("ipywidgets")
    summary = "".join(_summary_parts(report)) + _plots_html(report)
    children = [
        widgets.HTML(_style.styled(summary)),
        widgets.HTML(_style.styled(_partitions_html(report))),
    ]
    titles = ["Summary", "Partitions"]
    compared = [p for p in report.partitions if p.compared]
    if compared:
        options = [
            (p.label + ("" if p.passed else "  (FAIL)") + ("  (flip)" if p.flips else ""), i)
            for i, p in enumerate(compared)
        ]
        target = report.repro_partition  # the first failing one, else the first cause's
        start = next((i for i, p in enumerate(compared) if p is target), 0)
        picker = widgets.Dropdown(options=options, value=start, description="Partition")
        view = widgets.HTML()

        def draw(_: Any = None) -> None:
            view.value = _style.styled(partition_html(report, compared[picker.value]))

        picker.observe(draw, names="value")
        draw()
        children.append(widgets.VBox([picker, view]))
        titles.append("Graphs")
    if report.sweep:
        children.append(widgets.HTML(_style.styled(_sweep_html(report))))
        titles.append("Sweep")
    tabs = widgets.Tab(children=children)
    for i, title in enumerate(titles):
        tabs.set_title(i, title)
    return tabs
