"""The tabs of a subject, declared once: the Inspector shows them as widgets, the report
and the saved notebook as static HTML.

# NOTE: each :class:`Tab` says its title, its static HTML (the report's panel) and, when
# it is interactive, the widget the Inspector builds instead; both read the same records
# through the same fragments. A tab is built when first shown (so opening an Inspector
# lays out no graph), and refreshed after runs that change what it shows. :data:`TABS`
# is the list, in order; a view of its own (the Profile) is one entry, shown when its
# subject has what it needs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from ortlab import _deps, _html
from ortlab.backend import records
from ortlab.views import (
    _explorer,
    _fragments,
    _fusion,
    _graphs,
    _names,
    _panes,
    _style,
    _subjects,
    _viewer,
    numerics,
)


@dataclasses.dataclass
class Context:
    """What a tab is drawn for.

    Attributes:
        subject: The backend (with its numerics report and profile) shown.
        prefix: The SVG id prefix, unique on the page.
        headline: The line above the tabs (``%ortcompile``'s verdict).
        max_nodes: Graphs with more nodes are drawn collapsed.
    """

    subject: _subjects.Subject
    prefix: str = "r-"
    headline: str = ""
    max_nodes: int = _graphs.DEFAULT_MAX_NODES

    @property
    def backend(self) -> Any:
        return self.subject.backend


class HtmlTab:
    """A tab whose widget is its static HTML (refreshed by recomputing it)."""

    def __init__(self, tab: Tab, context: Context) -> None:
        widgets = _deps.require("ipywidgets")
        self.tab, self.context = tab, context
        self.widget = _panes.html_widget(widgets, tab.css)
        self.refresh(structure=True)

    def refresh(self, *, structure: bool) -> None:
        if structure or self.tab.live:
            self.widget.value = self.tab.html(self.context)


class ViewerTab:
    """A tab built around an interactive viewer (``refresh()`` and ``widget``)."""

    def __init__(self, viewer: Any, live: Callable[[], None] | None = None) -> None:
        self.viewer = viewer
        self.widget = viewer.widget
        self._live = live

    def refresh(self, *, structure: bool) -> None:
        if structure:
            self.viewer.refresh()
        elif self._live is not None:
            self._live()


@dataclasses.dataclass(frozen=True)
class Tab:
    """One tab (see the module NOTE).

    Attributes:
        title: Its title.
        css: The class of its widget.
        html: Its static HTML.
        widget: Builds its Inspector widget (an object with ``widget`` and
            ``refresh(structure=...)``); ``None``: the static HTML in a widget.
        shown: Whether a subject has this tab.
        live: Refresh after every run (counters), not only when the structure changed.
    """

    title: str
    css: str
    html: Callable[[Context], str]
    widget: Callable[[Context], Any] | None = None
    shown: Callable[[_subjects.Subject], bool] = lambda subject: True
    live: bool = False

    def build(self, context: Context) -> Any:
        """The Inspector's form of this tab."""
        if self.widget is not None:
            return self.widget(context)
        return HtmlTab(self, context)


# -- static panels ----------------------------------------------------------------------


def graph_drawing_html(graph: records.GraphRecord, prefix: str, max_nodes: int) -> str:
    """A graph as a static page: its module tree explorer when large, else its nodes."""
    if len(_graphs.flat_nodes(graph)) > _graphs.FLAT_MAX_NODES:
        tree = _graphs.tree_of(graph)
        if tree.has_modules:
            return _explorer.explorer_html(
                tree, prefix=prefix, colors=_graphs.partition_colors(graph)
            )
    limit = min(max_nodes, _graphs.MAX_DRAWN_NODES)
    rendered = _graphs.fx_graph_view(graph, max_nodes=limit, id_prefix=prefix)
    return _fragments.graph_html(rendered, _fragments.fx_nodes_table(graph))


def overview_html(context: Context) -> str:
    """The summary and each graph's first drawing: the saved notebook's static view."""
    backend = context.backend
    parts = [_fragments.summary_html(backend, context.headline)]
    for g in backend.graphs:
        parts.append(f"<h4>Graph {g.index} ({_html.esc(g.kind)})</h4>")
        parts.append(_fragments.graph_cause_html(g))
        if len(_graphs.flat_nodes(g)) > _graphs.FLAT_MAX_NODES:
            tree = _graphs.tree_of(g)
            rendered = (
                _graphs.module_view(g, tree=tree, id_prefix=f"{context.prefix}g{g.index}-")
                if tree.has_modules
                else _graphs.fx_graph_view(
                    g,
                    max_nodes=_graphs.MAX_DRAWN_NODES,
                    id_prefix=f"{context.prefix}g{g.index}-",
                )
            )
        else:
            rendered = _graphs.fx_graph_view(
                g,
                max_nodes=_graphs.MAX_DRAWN_NODES,
                id_prefix=f"{context.prefix}g{g.index}-",
            )
        parts.append(_fragments.graph_html(rendered))
    return "".join(parts)


def _provenance_links(
    session: records.SessionRecord, fx: Any, onnx: Any
) -> dict[str, list[str]]:
    prov = _graphs.provenance(session)
    links: dict[str, list[str]] = {}
    for fx_name, indices in prov.fx_to_onnx.items():
        fx_id = fx.ids.get(fx_name)
        onnx_ids = [onnx.ids[str(i)] for i in indices if str(i) in onnx.ids]
        if fx_id is None:
            continue
        links.setdefault(fx_id, []).extend(onnx_ids)
        for onnx_id in onnx_ids:
            links.setdefault(onnx_id, []).append(fx_id)
    return links


def partition_html(
    prefix: str, graph: records.GraphRecord, part: records.PartitionRecord
) -> str:
    """One partition as a static section: its FX subgraph beside each session's ONNX
    model (click a node to outline its counterparts), verdicts, sessions. A partition
    holding the whole graph is not drawn again; large ones are drawn by module."""
    whole = len(part.node_names) == graph.node_count
    fx = None if whole else _graphs.partition_view(part, graph, id_prefix=f"{prefix}fx-")
    fx_html = (
        _fragments.note(f"{part.name} holds every node of graph {graph.index}: drawn above.")
        if fx is None
        else _fragments.graph_html(fx, _fragments.partition_nodes_table(part))
    )
    blocks = []
    if not part.sessions:
        reason = part.error or "the partition has not run yet"
        blocks.append(
            f'<div class="ortlab-side"><div>{fx_html}</div><div>'
            + _fragments.note(f"No ONNX model for {part.name}: {reason}.")
            + "</div></div>"
        )
    for s in part.sessions:
        tree = (
            _graphs.tree_of(s, graph)
            if len(s.model.graph.node) > _graphs.FLAT_MAX_NODES
            else None
        )
        if tree is not None and tree.has_modules:
            onnx_html = _explorer.explorer_html(tree, prefix=f"{prefix}s{s.index}-")
            links: dict[str, list[str]] = {}
        else:
            onnx = _graphs.onnx_view(s, id_prefix=f"{prefix}s{s.index}-", graph=graph)
            onnx_html = _fragments.graph_html(onnx, _fragments.onnx_nodes_table(s))
            links = _provenance_links(s, fx, onnx) if fx is not None else {}
        inputs = _names.summary(_names.session_inputs(s, graph))
        title = f"session {s.index}: {inputs} → {', '.join(s.output_schema[:3])}"
        if len(s.output_schema) > 3:
            title += f" … {len(s.output_schema)} outputs"
        data = _html.esc(json.dumps(links))
        side = (
            f'<div class="ortlab-side ortlab-prov" data-links="{data}">'
            f"<div>{fx_html}</div><div>{onnx_html}</div></div>"
        )
        body = (
            "<p>Click a node to outline its counterparts (FX ↔ ONNX).</p>"
            + side
            + "<h4>Provenance</h4>"
            + _fragments.provenance_table(s, _fusion.rewrite_fusions(s, part), part)
        )
        blocks.append(
            f"<details{' open' if s.index == 0 else ''}><summary>{_html.esc(title)}</summary>"
            f"{body}</details>"
        )
    state = "" if part.state == "ort" else " · eager (failed)"
    summary = (
        f"{part.name} · {len(part.node_names)} nodes · {len(part.sessions)} sessions{state}"
    )
    error = _fragments.note(f"Runs in PyTorch: {part.error}") if part.error else ""
    return (
        f'<details class="ortlab-partition" open><summary>{_html.esc(summary)}</summary>'
        + error
        + "".join(blocks)
        + "<h4>Verdicts</h4>"
        + _fragments.partition_verdicts_html(part, graph)
        + "<h4>Sessions</h4>"
        + _fragments.sessions_html(part)
        + "</details>"
    )


def _partitions_html(context: Context) -> str:
    backend = context.backend
    if not backend.graphs:
        return _fragments.note("Nothing compiled yet: call the compiled model first.")
    out = [_style.PARTITION_LEGEND]
    for g in backend.graphs:
        prefix = f"{context.prefix}g{g.index}-"
        out.append(f"<h3>Graph {g.index} ({_html.esc(g.kind)})</h3>")
        out.append(_fragments.graph_cause_html(g))
        out.append(graph_drawing_html(g, prefix, context.max_nodes))
        out.append(_fragments.eager_nodes_html(g))
        for i, part in enumerate(g.partitions):
            out.append(partition_html(f"{prefix}p{i}-", g, part))
    return "".join(out)


def _onnx_html(context: Context) -> str:
    backend = context.backend
    sessions = [(p, s) for p in backend.partitions for s in p.sessions]
    if not sessions:
        return _fragments.note("No ONNX model yet: call the compiled model first.")
    out = ["<p>Each model is drawn next to its FX subgraph in the Partitions tab.</p>"]
    graphs = {g.index: g for g in backend.graphs}
    for p, s in sessions:
        title = f"graph {p.graph_index} ({p.graph_kind}) · {p.name} · session {s.index}"
        out.append(
            f"<details open><summary>{_html.esc(title)}</summary>"
            + _fragments.onnx_model_info(s, graphs.get(p.graph_index))
            + "<h4>Nodes</h4>"
            + _fragments.onnx_nodes_table(s)
            + "</details>"
        )
    return "".join(out)


def _numerics_html(context: Context) -> str:
    return numerics.numerics_html(context.subject.diff)


def _profile_html(context: Context) -> str:
    from ortlab.views import _profile

    return _profile.tab(context.subject.profile, id_prefix=f"{context.prefix}pf-")[1]


class StaticTab:
    """A tab whose widget, built once, never changes (a numerics report, a profile)."""

    def __init__(self, widget: Any) -> None:
        self.widget = widget

    def refresh(self, *, structure: bool) -> None:
        pass


def _profile_widget(context: Context) -> Any:
    from ortlab.views import _profile

    return StaticTab(_profile.profile_widget(context.subject.profile))


def _numerics_widget(context: Context) -> Any:
    return StaticTab(numerics.numerics_widget(context.subject.diff))


def _partitions_widget(context: Context) -> Any:
    viewer = _viewer.PartitionViewer(context.backend, max_nodes=context.max_nodes)

    def live() -> None:
        p = viewer._partition()
        viewer.sessions.value = _fragments.sessions_html(p) if p is not None else ""

    return ViewerTab(viewer, live)


def _onnx_widget(context: Context) -> Any:
    return ViewerTab(_viewer.OnnxViewer(context.backend))


def _summary_html(context: Context) -> str:
    return _fragments.summary_html(context.backend, context.headline)


TABS: list[Tab] = [
    Tab("Summary", "ortlab-summary", _summary_html, live=True),
    Tab("Partitions", "ortlab-partitions", _partitions_html, _partitions_widget),
    Tab("ONNX", "ortlab-onnx", _onnx_html, _onnx_widget),
    Tab(
        "Sessions",
        "ortlab-sessions-tab",
        lambda context: _fragments.sessions_html(context.backend),
        live=True,
    ),
    Tab("Timings", "ortlab-timings", lambda context: _fragments.timings_html(context.backend)),
    Tab(
        "Numerics",
        "ortlab-numerics",
        _numerics_html,
        _numerics_widget,
        shown=lambda subject: subject.diff is not None,
    ),
    Tab(
        "Profile",
        "ortlab-profile",
        _profile_html,
        _profile_widget,
        shown=lambda subject: subject.profile is not None,
    ),
]
"""Every tab, in order."""


def tabs_for(subject: _subjects.Subject) -> list[Tab]:
    """The tabs ``subject`` has."""
    return [t for t in TABS if t.shown(subject)]
