"""The Inspector widget (tabs Summary · Partitions · ONNX · Sessions · Timings) and the
interactive PartitionViewer, built from ipywidgets with inline SVG (no JavaScript deps).

# NOTE: widgets are built lazily: ``Inspector(obj)`` only resolves its subjects, and
# ``Inspector.widget`` builds the ipywidgets tree on first use, so outside a notebook (or
# without ipywidgets) an Inspector is still a text summary. Graph SVGs are laid out once
# per (graph, expanded partition, session count) and cached; highlighting provenance only
# swaps a ``<style>`` block, never re-runs ``dot``.
#
# Live updates: the Inspector registers a backend observer (``add_observer``) holding
# only a weak reference to it. A run that changed the structure (a new graph, session or
# failed partition) re-renders at once; otherwise counters are refreshed at most every
# ``REFRESH_INTERVAL`` seconds, so an open Inspector costs a model call almost nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ortlab import _deps, _harness, _html
from ortlab.views import (
    _dot,
    _fragments,
    _graphs,
    _style,
    _subjects,
    _tables,
    _timeline,
    numerics,
)

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend, records

logger = logging.getLogger(__name__)

REFRESH_INTERVAL = 0.5
"""Seconds between counter refreshes caused by runs (structural changes are immediate)."""

TAB_TITLES = ("Summary", "Partitions", "ONNX", "Sessions", "Timings")


def _structure(backend: OrtBackend) -> tuple[Any, ...]:
    return tuple(
        (g.index, tuple((p.name, p.state, len(p.sessions)) for p in g.partitions))
        for g in backend.graphs
    )


def _dropdown(widgets: Any, description: str, **kwargs: Any) -> Any:
    return widgets.Dropdown(
        description=description,
        style={"description_width": "initial"},
        layout=widgets.Layout(width="auto", max_width="100%"),
        **kwargs,
    )


def _html_widget(widgets: Any, css_class: str, **layout: Any) -> Any:
    # Wide graphs and tables scroll inside their box instead of spilling out of the cell.
    layout.setdefault("overflow", "auto")
    w = widgets.HTML(layout=widgets.Layout(**layout))
    w.add_class(css_class)
    return w


class PartitionViewer:
    """The interactive partition viewer (the Inspector's Partitions tab).

    Choose a graph (forward / backward / inference) to see it with its partitions
    coloured; choose a partition to see its FX subgraph and its ONNX model side by side,
    with the verdicts of its nodes and its sessions (choose one when there are several).
    Choose an FX node to outline the ONNX nodes it became, or an ONNX node to outline the
    FX node it came from. Graphs above ``max_nodes`` nodes are drawn one box per
    partition; the chosen partition is expanded.

    Args:
        backend: An :class:`~ortlab.OrtBackend` or a compiled callable.
        max_nodes: Node count above which graphs are drawn collapsed.
    """

    def __init__(self, backend: Any, *, max_nodes: int = _graphs.DEFAULT_MAX_NODES) -> None:
        from ortlab.backend import backend_of

        widgets = _deps.require("ipywidgets")
        self.backend = backend_of(backend)
        self.max_nodes = max_nodes
        self._prefix = f"ol{uuid.uuid4().hex[:8]}-"
        self._cache: dict[tuple[Any, ...], _dot.Rendered] = {}
        self._updating = False
        self.graph = _dropdown(widgets, "Graph")
        self.partition = _dropdown(widgets, "Partition")
        self.session = _dropdown(widgets, "Session")
        self.fx_node = _dropdown(widgets, "FX node")
        self.onnx_node = _dropdown(widgets, "ONNX node")
        self.graph_view = _html_widget(widgets, "ortlab-partition-graph", width="100%")
        self.fx_view = _html_widget(widgets, "ortlab-fx-view", width="49%")
        self.onnx_view = _html_widget(widgets, "ortlab-onnx-view", width="49%")
        self.provenance = _html_widget(widgets, "ortlab-provenance")
        self.verdicts = _html_widget(widgets, "ortlab-verdicts")
        self.sessions = _html_widget(widgets, "ortlab-sessions")
        self.style = widgets.HTML()
        for name in ("graph", "partition", "session", "fx_node", "onnx_node"):
            getattr(self, name).add_class(f"ortlab-choose-{name.replace('_', '-')}")
        legend = widgets.HTML(_style.PARTITION_LEGEND)
        self.widget = widgets.VBox(
            [
                self.style,
                widgets.HBox([self.graph, self.partition, self.session]),
                legend,
                self.graph_view,
                widgets.HBox([self.fx_node, self.onnx_node]),
                self.provenance,
                widgets.HBox(
                    [self.fx_view, self.onnx_view], layout=widgets.Layout(width="100%")
                ),
                widgets.HTML("<h4>Verdicts of this partition's nodes</h4>"),
                self.verdicts,
                widgets.HTML("<h4>Sessions of this partition</h4>"),
                self.sessions,
            ],
            layout=widgets.Layout(width="100%", overflow="hidden"),
        )
        self.widget.add_class("ortlab-root")
        self.graph.observe(self._on_graph, names="value")
        self.partition.observe(self._on_partition, names="value")
        self.session.observe(self._on_session, names="value")
        self.fx_node.observe(self._on_fx_node, names="value")
        self.onnx_node.observe(self._on_onnx_node, names="value")
        self.refresh()

    # -- selection state -----------------------------------------------------------
    def _graph(self) -> records.GraphRecord | None:
        graphs = self.backend.graphs
        index = self.graph.value
        return graphs[index] if index is not None and index < len(graphs) else None

    def _partition(self) -> records.PartitionRecord | None:
        g = self._graph()
        if g is None or self.partition.value is None:
            return None
        return next((p for p in g.partitions if p.name == self.partition.value), None)

    def _session(self) -> records.SessionRecord | None:
        p = self._partition()
        if p is None or not p.sessions or self.session.value is None:
            return None
        return p.sessions[min(self.session.value, len(p.sessions) - 1)]

    def _set_options(self, dropdown: Any, options: list[tuple[str, Any]]) -> None:
        """Replaces options, keeping the current value when it is still offered."""
        current = dropdown.value
        values = [v for _, v in options]
        dropdown.options = options
        if current in values:
            dropdown.value = current
        elif values:
            dropdown.value = values[0]

    # -- refresh -------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-reads the records (new graphs, partitions, sessions) and redraws."""
        self._updating = True
        try:
            graphs = self.backend.graphs
            self._set_options(
                self.graph,
                [
                    (
                        f"{g.index}: {g.kind} · {g.node_count} ops · "
                        f"{len(g.partitions)} partitions",
                        g.index,
                    )
                    for g in graphs
                ],
            )
            self._fill_partitions()
        finally:
            self._updating = False
        self._draw_all()

    def _fill_partitions(self) -> None:
        g = self._graph()
        options = []
        if g is not None:
            for p in g.partitions:
                state = "" if p.state == "ort" else " · eager (failed)"
                options.append(
                    (
                        f"{p.name} · {len(p.node_names)} nodes · {len(p.sessions)} "
                        f"session{'s' if len(p.sessions) != 1 else ''}{state}",
                        p.name,
                    )
                )
        self._set_options(self.partition, options)
        self._fill_sessions()

    def _fill_sessions(self) -> None:
        p = self._partition()
        sessions = p.sessions if p is not None else []
        options = [
            (
                f"#{s.index} · {', '.join(s.input_schema)}{'' if s.active else ' (evicted)'}",
                s.index,
            )
            for s in sessions
        ]
        self._set_options(self.session, options)
        # Only worth a choice when there are several.
        self.session.layout.display = "" if len(options) > 1 else "none"
        self._fill_nodes()

    def _fill_nodes(self) -> None:
        p = self._partition()
        s = self._session()
        prov = _graphs.provenance(s) if s is not None else None
        fx_options: list[tuple[str, Any]] = [("—", None)]
        if p is not None:
            for name in p.node_names:
                count = len(prov.onnx_nodes_of(name)) if prov is not None else 0
                fx_options.append(
                    (f"{name} → {count} ONNX node{'s' if count != 1 else ''}", name)
                )
        onnx_options: list[tuple[str, Any]] = [("—", None)]
        if s is not None:
            for i in range(len(s.model.graph.node)):
                onnx_options.append((f"{i}: {_graphs.onnx_node_title(s, i)}", i))
        self.fx_node.options = fx_options
        self.fx_node.value = None
        self.onnx_node.options = onnx_options
        self.onnx_node.value = None

    # -- rendering -----------------------------------------------------------------
    def _rendered(self, key: tuple[Any, ...], make: Any) -> _dot.Rendered:
        cached = self._cache.get(key)
        if cached is None:
            cached = make()
            self._cache[key] = cached
        return cached

    def _graph_rendered(self, g: records.GraphRecord) -> _dot.Rendered:
        p = self._partition()
        collapsed = len(_graphs.flat_nodes(g)) > self.max_nodes
        expand = frozenset({p.name}) if (collapsed and p is not None) else frozenset()
        key = (
            "graph",
            g.index,
            expand,
            tuple((q.state, len(q.sessions)) for q in g.partitions),
        )
        return self._rendered(
            key,
            lambda: _graphs.fx_graph_view(
                g, max_nodes=self.max_nodes, expand=expand, id_prefix=f"{self._prefix}g-"
            ),
        )

    def _draw_all(self) -> None:
        if self._updating:
            return
        g = self._graph()
        if g is None:
            self.graph_view.value = _fragments.note(
                "Nothing compiled yet: call the compiled model, then refresh."
            )
            for w in (self.fx_view, self.onnx_view, self.verdicts, self.sessions):
                w.value = ""
            self.provenance.value = ""
            self.style.value = ""
            return
        rendered = self._graph_rendered(g)
        self.graph_view.value = (
            _fragments.graph_cause_html(g)
            + _fragments.graph_html(rendered, _fragments.fx_nodes_table(g))
            + _fragments.eager_nodes_html(g)
        )
        self._draw_partition()

    def _draw_partition(self) -> None:
        g = self._graph()
        p = self._partition()
        if g is None or p is None:
            self.fx_view.value = _fragments.note(
                "No partition in this graph: every node runs in PyTorch."
            )
            self.onnx_view.value = ""
            self.verdicts.value = ""
            self.sessions.value = ""
            self._highlight()
            return
        fx = self._rendered(
            ("fx", g.index, p.name),
            lambda: _graphs.partition_view(p, g, id_prefix=f"{self._prefix}p-"),
        )
        self.fx_view.value = _fragments.graph_html(fx, _fragments.partition_nodes_table(p))
        self.verdicts.value = _fragments.partition_verdicts_html(p, g)
        self.sessions.value = _tables.frame_html(_tables.sessions_frame(p))
        self._draw_session()

    def _draw_session(self) -> None:
        g, p, s = self._graph(), self._partition(), self._session()
        if g is None or p is None:
            return
        if s is None:
            reason = p.error or "the partition has not run yet"
            self.onnx_view.value = _fragments.note(f"No ONNX model for {p.name}: {reason}.")
        else:
            onnx = self._rendered(
                ("onnx", g.index, p.name, s.index),
                lambda: _graphs.onnx_view(s, id_prefix=f"{self._prefix}o-"),
            )
            self.onnx_view.value = _fragments.graph_html(onnx, _fragments.onnx_nodes_table(s))
        self._highlight()

    def _highlight(self) -> None:
        """Outlines the chosen partition, FX node and the ONNX nodes linked to it."""
        g, p, s = self._graph(), self._partition(), self._session()
        ids: list[str] = []
        lines = []
        if g is not None and p is not None:
            graph_ids = self._graph_rendered(g).ids
            fx_ids = self._cache.get(("fx", g.index, p.name))
            onnx_ids = (
                self._cache.get(("onnx", g.index, p.name, s.index)) if s is not None else None
            )
            prov = _graphs.provenance(s) if s is not None else None
            fx_name = self.fx_node.value
            onnx_index = self.onnx_node.value
            if onnx_index is not None and prov is not None and s is not None:
                fx_name = prov.fx_node_of(onnx_index)
                linked = [onnx_index]
                lines.append(
                    f"ONNX node {_graphs.onnx_node_title(s, onnx_index)} came from FX node "
                    f"{fx_name or '(none: added by the exporter)'}"
                )
            elif fx_name is not None:
                linked = list(prov.onnx_nodes_of(fx_name)) if prov is not None else []
                titles = ", ".join(_graphs.onnx_node_title(s, i) for i in linked) if s else ""
                lines.append(
                    f"FX node {fx_name} became {len(linked)} ONNX node"
                    f"{'s' if len(linked) != 1 else ''}{': ' + titles if titles else ''}"
                )
            else:
                linked = []
            if fx_name is None and graph_ids.get(p.name):
                ids.append(graph_ids[p.name])
            if fx_name is not None:
                ids.append(graph_ids.get(fx_name, ""))
                if fx_ids is not None:
                    ids.append(fx_ids.ids.get(fx_name, ""))
            if onnx_ids is not None:
                ids.extend(onnx_ids.ids.get(str(i), "") for i in linked)
        self.style.value = _graphs.highlight_css(i for i in ids if i)
        self.provenance.value = "".join(f"<p>{_html.esc(line)}</p>" for line in lines)

    # -- events --------------------------------------------------------------------
    def _quietly(self, update: Callable[[], None]) -> None:
        """Runs ``update`` (which sets dropdowns) without their change events re-entering
        these handlers."""
        self._updating = True
        try:
            update()
        finally:
            self._updating = False

    def _on_graph(self, change: Any) -> None:
        if not self._updating:
            self._quietly(self._fill_partitions)
            self._draw_all()

    def _on_partition(self, change: Any) -> None:
        if not self._updating:
            self._quietly(self._fill_sessions)
            self._draw_all()

    def _on_session(self, change: Any) -> None:
        if not self._updating:
            self._quietly(self._fill_nodes)
            self._draw_session()

    def _on_fx_node(self, change: Any) -> None:
        self._select_node(change, other=self.onnx_node)

    def _on_onnx_node(self, change: Any) -> None:
        self._select_node(change, other=self.fx_node)

    def _select_node(self, change: Any, *, other: Any) -> None:
        """A node picked in one dropdown (FX or ONNX) clears the other, then the views
        highlight it."""
        if self._updating:
            return
        if change["new"] is not None:
            self._quietly(lambda: setattr(other, "value", None))
        self._highlight()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


class _SubjectView:
    """The tabs of one subject (one backend) of an Inspector."""

    def __init__(self, subject: _subjects.Subject, headline: str, max_nodes: int) -> None:
        widgets = _deps.require("ipywidgets")
        self.subject = subject
        self.headline = headline
        self.summary = _html_widget(widgets, "ortlab-summary")
        self.viewer = PartitionViewer(subject.backend, max_nodes=max_nodes)
        self.onnx_session = _dropdown(widgets, "Session")
        self.onnx_session.add_class("ortlab-choose-onnx-session")
        self.onnx_view = _html_widget(widgets, "ortlab-onnx-tab")
        self.onnx_info = _html_widget(widgets, "ortlab-onnx-info")
        self.sessions = _html_widget(widgets, "ortlab-sessions-tab")
        self.timings = _html_widget(widgets, "ortlab-timings")
        self._onnx_cache: dict[tuple[int, str, int], _dot.Rendered] = {}
        self._prefix = f"ol{uuid.uuid4().hex[:8]}-"
        children = [
            self.summary,
            self.viewer.widget,
            widgets.VBox([self.onnx_session, self.onnx_view, self.onnx_info]),
            self.sessions,
            self.timings,
        ]
        titles = list(TAB_TITLES)
        if subject.diff is not None:
            children.append(numerics.numerics_widget(subject.diff))
            titles.append("Numerics")
        self.tabs = widgets.Tab(
            children=children, titles=titles, layout=widgets.Layout(width="100%")
        )
        self.tabs.add_class("ortlab-root")
        self.onnx_session.observe(lambda _: self._draw_onnx(), names="value")
        self.refresh(structure=True)

    def _all_sessions(self) -> list[tuple[records.PartitionRecord, records.SessionRecord]]:
        return [(p, s) for p in self.subject.backend.partitions for s in p.sessions]

    def refresh(self, *, structure: bool) -> None:
        backend = self.subject.backend
        self.summary.value = _fragments.summary_html(backend, self.headline)
        self.sessions.value = _tables.frame_html(_tables.sessions_frame(backend))
        if structure:
            self.viewer.refresh()
            options = [
                (
                    f"graph {p.graph_index} ({p.graph_kind}) · {p.name} #{s.index} · "
                    f"{', '.join(s.input_schema)}",
                    (p.graph_index, p.name, s.index),
                )
                for p, s in self._all_sessions()
            ]
            current = self.onnx_session.value
            self.onnx_session.options = options
            values = [v for _, v in options]
            if current in values:
                self.onnx_session.value = current
            elif values:
                self.onnx_session.value = values[0]
            self._draw_onnx()
            self.timings.value = _fragments.timings_html(self.subject.backend)
        else:
            self.viewer.sessions.value = (
                _tables.frame_html(_tables.sessions_frame(self.viewer._partition()))
                if self.viewer._partition() is not None
                else ""
            )

    def _draw_onnx(self) -> None:
        key = self.onnx_session.value
        found = None
        if key is not None:
            found = next(
                (
                    s
                    for p, s in self._all_sessions()
                    if (p.graph_index, p.name, s.index) == tuple(key)
                ),
                None,
            )
        if found is None:
            self.onnx_view.value = _fragments.note(
                "No ONNX model yet: call the compiled model."
            )
            self.onnx_info.value = ""
            return
        rendered = self._onnx_cache.get(key)
        if rendered is None:
            rendered = _graphs.onnx_view(found, id_prefix=f"{self._prefix}o-")
            self._onnx_cache[key] = rendered
        self.onnx_view.value = _fragments.graph_html(
            rendered, _fragments.onnx_nodes_table(found)
        )
        self.onnx_info.value = _fragments.onnx_model_info(found) + _fragments.provenance_table(
            found
        )


class Inspector:
    """Everything ortlab did for a model, as notebook tabs (or as text elsewhere).

    Tabs: Summary · Partitions (the interactive :class:`PartitionViewer`) · ONNX ·
    Sessions · Timings, plus Numerics when a ``DiffReport`` is given. With a mapping of
    several models, a selector on top switches between them. The widget follows the
    backend: calling the compiled model again (a new shape, a new graph) updates it.

    Args:
        obj: A backend, a compiled callable, a ``DiffReport``, or a mapping of names to
            those.
        diff: A ``DiffReport`` to show in a Numerics tab.
        headline: A line shown above the tabs (the ``%ortcompile`` verdict).
        max_nodes: Graphs with more nodes are drawn one box per partition.
    """

    def __init__(
        self,
        obj: Any,
        *,
        diff: Any = None,
        headline: str = "",
        max_nodes: int = _graphs.DEFAULT_MAX_NODES,
    ) -> None:
        self.subjects = _subjects.subjects(obj, diff)
        self.headline = headline
        self.max_nodes = max_nodes
        self._widget: Any = None
        self._selector: Any = None
        self._views: dict[int, _SubjectView] = {}
        self._structures: dict[int, tuple[Any, ...]] = {}
        self._last_refresh = 0.0
        self._removers: list[Any] = []

    @property
    def backend(self) -> OrtBackend:
        """The backend of the first (usually only) subject."""
        return self.subjects[0].backend

    # -- text ----------------------------------------------------------------------
    def text(self) -> str:
        """The text summary: graphs, partitions, eager nodes with reasons, sessions, time."""
        out = [self.headline] if self.headline else []
        for subject in self.subjects:
            out.append(_subject_text(subject))
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.text()

    # -- widget --------------------------------------------------------------------
    @property
    def widget(self) -> Any:
        """The ipywidgets tree (built on first access)."""
        if self._widget is None:
            self._widget = self._build()
        return self._widget

    def _view(self, index: int) -> _SubjectView:
        view = self._views.get(index)
        if view is None:
            view = _SubjectView(self.subjects[index], self.headline, self.max_nodes)
            self._views[index] = view
            self._structures[index] = _structure(self.subjects[index].backend)
            if not self._removers:
                self._observe()
        return view

    @property
    def partition_viewer(self) -> PartitionViewer:
        """The Partitions tab of the shown subject."""
        return self._view(self._shown()).viewer

    @property
    def tabs(self) -> Any:
        """The ``ipywidgets.Tab`` of the shown subject."""
        return self._view(self._shown()).tabs

    def _shown(self) -> int:
        if self._widget is not None and self._selector is not None:
            return int(self._selector.value)
        return 0

    def _build(self) -> Any:
        widgets = _deps.require("ipywidgets")
        header = widgets.HTML(
            f"<style>{_style.CSS}</style>"
            + (
                f'<div class="ortlab-root ortlab-headline">{_html.esc(self.headline)}</div>'
                if self.headline
                else ""
            )
        )
        body = widgets.Box([self._view(0).tabs], layout=widgets.Layout(width="100%"))
        children = [header]
        if len(self.subjects) > 1:
            self._selector = _dropdown(
                widgets,
                "Model",
                options=[(s.name, i) for i, s in enumerate(self.subjects)],
                value=0,
            )

            def switch(change: Any) -> None:
                body.children = [self._view(int(change["new"])).tabs]

            self._selector.observe(switch, names="value")
            children.append(self._selector)
        children.append(body)
        root = widgets.VBox(children, layout=widgets.Layout(width="100%"))
        root.add_class("ortlab-inspector")
        return root

    def _observe(self) -> None:
        ref = weakref.ref(self)
        for i, subject in enumerate(self.subjects):
            removers: list[Any] = []

            def on_run(event: Any, index: int = i, removers: list[Any] = removers) -> None:
                inspector = ref()
                if inspector is None:
                    for remove in removers:
                        remove()
                    return
                inspector._on_run(index)

            removers.append(subject.backend.add_observer(on_run))
            self._removers.extend(removers)

    def _on_run(self, index: int) -> None:
        # An observer runs inside the user's model call: it must never raise into it.
        try:
            if index not in self._views:
                return
            structure = _structure(self.subjects[index].backend)
            changed = structure != self._structures.get(index)
            now = time.monotonic()
            if changed or now - self._last_refresh >= REFRESH_INTERVAL:
                self._structures[index] = structure
                self._last_refresh = now
                self._views[index].refresh(structure=changed)
        except Exception:
            logger.warning("ortlab Inspector: refresh after a run failed", exc_info=True)

    def refresh(self) -> None:
        """Re-reads every record and redraws (the widget also does this after runs)."""
        for index, view in self._views.items():
            self._structures[index] = _structure(self.subjects[index].backend)
            view.refresh(structure=True)

    def close(self) -> None:
        """Stops following the backends and closes the widgets."""
        for remove in self._removers:
            remove()
        self._removers.clear()
        if self._widget is not None:
            _close_tree(self._widget)
            self._widget = None
        for view in self._views.values():
            _close_tree(view.tabs)
        self._views.clear()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        if not _harness.in_notebook():
            # A terminal shows text only: don't lay out graphs nobody will see.
            return {"text/plain": self.text()}
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        if isinstance(bundle, dict):
            bundle["text/plain"] = self.text()
            # Front ends without the widget manager (nbconvert HTML, GitHub) fall back to
            # a static summary instead of an empty cell.
            bundle["text/html"] = "".join(
                f"<h3>{_html.esc(s.name)}</h3>" + _fragments.summary_html(s.backend)
                for s in self.subjects
            )
        return bundle


def _subject_text(subject: _subjects.Subject) -> str:
    backend = subject.backend
    out = [f"== {subject.name}: {backend!r}"]
    if not backend.graphs:
        out.append("nothing compiled yet: call the compiled model first")
        return "\n".join(out)
    rows = _tables.summary_rows(backend)
    width = max(len(k) for k, _ in rows)
    out.extend(f"  {k.ljust(width)}  {v}" for k, v in rows)
    out.append("\n" + _timeline.first_call_text(backend))
    timeline = _timeline.timeline_text(backend)
    if timeline:
        out.append("\nTimeline (graph runs):")
        out.extend(f"  {line}" for line in timeline)
    out.append("\nGraphs:")
    out.append(
        _html.text_table(
            ("graph", "kind", "runs", "cause"),
            [(g.index, g.kind, g.run_count, _tables.graph_cause(g)) for g in backend.graphs],
        )
    )
    parts = _tables.partitions_frame(backend)
    out.append("\nPartitions:")
    out.append(
        _html.text_table(
            ("graph", "kind", "partition", "state", "nodes", "sessions", "runs", "error"),
            [
                (r.graph, r.kind, r.partition, r.state, r.nodes, r.sessions, r.runs, r.error)
                for r in parts.itertuples()
            ],
        )
        if len(parts)
        else "(none)"
    )
    sessions = _tables.sessions_frame(backend)
    out.append("\nSessions:")
    out.append(
        _html.text_table(
            (
                "graph",
                "partition",
                "#",
                "inputs",
                "providers",
                "export ms",
                "session ms",
                "runs",
                "onnx nodes",
            ),
            [
                (
                    r.graph,
                    r.partition,
                    r.session,
                    r.input_schema,
                    r.providers,
                    f"{r.export_s * 1e3:.1f}",
                    f"{r.session_s * 1e3:.1f}",
                    r.runs,
                    r.onnx_nodes,
                )
                for r in sessions.itertuples()
            ],
        )
        if len(sessions)
        else "(none)"
    )
    eager = [
        (g.index, v.node, v.target, reason, v.source)
        for g in backend.graphs
        for v, reason in _tables.eager_verdicts(g)
    ]
    if eager:
        by_source = _tables.eager_sources_frame(backend)
        out.append("\nNodes that stay in PyTorch, by source line:")
        out.append(
            _html.text_table(
                ("source", "nodes", "ops", "reasons"),
                [(r.source, r.nodes, r.ops, r.reasons) for r in by_source.itertuples()],
            )
        )
        out.append("\nEager nodes:")
        out.append(_html.text_table(("graph", "node", "target", "reason", "source"), eager))
    frame = _tables.timings_frame(backend)
    out.append("\nCompile time:")
    out.append(
        _html.text_table(
            ("step", "ms"), [(r.step, f"{r.seconds * 1e3:.2f}") for r in frame.itertuples()]
        )
    )
    if subject.diff is not None:
        out.append(f"\nNumerics: {subject.diff!r}")
    return "\n".join(out)


def _close_tree(widget: Any) -> None:
    """Closes a widget and its descendants (``Widget.close_all`` would close every widget)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


def inspect(
    obj: Any, *, diff: Any = None, max_nodes: int = _graphs.DEFAULT_MAX_NODES
) -> Inspector:
    """The :class:`Inspector` of a backend, compiled callable, ``DiffReport`` or mapping.

    In a notebook, display the returned Inspector (last expression of a cell) to get the
    widget. Elsewhere the text summary is printed (outside IPython) and the Inspector,
    whose ``repr`` is that summary, is returned.

    Args:
        obj: What to inspect; see :class:`Inspector`.
        diff: A ``DiffReport`` to show in a Numerics tab.
        max_nodes: Graphs with more nodes are drawn one box per partition.
    """
    inspector = Inspector(obj, diff=diff, max_nodes=max_nodes)
    if not _harness.in_ipython():
        # A script or a plain Python prompt: nothing would display the result.
        print(inspector.text())
    return inspector
