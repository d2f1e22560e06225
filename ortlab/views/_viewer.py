"""The interactive graph viewers of the Inspector: the Partitions tab
(:class:`PartitionViewer`: the graph by module, a partition's FX subgraph beside its
ONNX model, search, provenance) and the ONNX tab (:class:`OnnxViewer`).

# NOTE: both are built when their tab is first shown. Each drawing is a
# :class:`~ortlab.views._panes.GraphPane`; a click on a drawing arrives as the value of a
# hidden text box (``pane|svg id|nonce``, written by the drawing's inline ``onclick``):
# a module expands or collapses, a node is selected. Selecting a node (click, search,
# the node dropdowns) outlines it and its counterparts in every drawing (FX ↔ ONNX,
# through fused operators: :mod:`ortlab.views._fusion`), opening the modules that hide
# them; outlining is a ``<style>`` block, never a new layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ortlab import _deps, _html
from ortlab.backend import records
from ortlab.views import _cache, _fragments, _fusion, _graphs, _names, _panes, _style

SEARCH_HINT = "search: node name, op, module path, verdict reason, source line"


def dropdown(widgets: Any, description: str, **kwargs: Any) -> Any:
    """A dropdown as wide as its labels need."""
    return widgets.Dropdown(
        description=description,
        style={"description_width": "initial"},
        layout=widgets.Layout(width="auto", max_width="100%"),
        **kwargs,
    )


def set_options(dropdown: Any, options: list[tuple[str, Any]]) -> None:
    """Replaces options, keeping the current value when it is still offered."""
    current = dropdown.value
    values = [v for _, v in options]
    dropdown.options = options
    if current in values:
        dropdown.value = current
    elif values:
        dropdown.value = values[0]


def _bridge(widgets: Any, on_click: Callable[[str, str], None]) -> Any:
    """The hidden text box clicks on drawings are written into."""
    bridge = widgets.Text(layout=widgets.Layout(display="none"))
    bridge.add_class("ortlab-bridge")

    def changed(change: Any) -> None:
        pane, _, rest = str(change["new"]).partition("|")
        element, _, _ = rest.rpartition("|")
        if pane and element:
            on_click(pane, element)

    bridge.observe(changed, names="value")
    return bridge


class PartitionViewer:
    """The Partitions tab: a graph drawn by module with its partitions, and a partition's
    FX subgraph beside its ONNX model.

    Choose a graph (forward / backward / inference), a partition and, when it has
    several, a session. Click a module to open or close it, a node to outline it and its
    counterparts (the ONNX nodes it became, or the fused operator that absorbed it).
    Search finds nodes by name, op, module path, verdict reason or source line.

    Args:
        backend: An :class:`~ortlab.OrtBackend` or a compiled callable.
        max_nodes: Kept for compatibility: drawings never lay out more than
            :data:`~ortlab.views._graphs.MAX_DRAWN_NODES` nodes.
    """

    def __init__(self, backend: Any, *, max_nodes: int = _graphs.DEFAULT_MAX_NODES) -> None:
        from ortlab.backend import backend_of

        widgets = _deps.require("ipywidgets")
        self.backend = backend_of(backend)
        self.max_nodes = max_nodes
        self.cache = _cache.of(self.backend)
        prefix = self.cache.prefix
        self._updating = False
        self.graph = dropdown(widgets, "Graph")
        self.partition = dropdown(widgets, "Partition")
        self.session = dropdown(widgets, "Session")
        self.fx_node = dropdown(widgets, "FX node")
        self.onnx_node = dropdown(widgets, "ONNX node")
        self.search = widgets.Text(
            placeholder=SEARCH_HINT,
            continuous_update=False,
            layout=widgets.Layout(width="420px"),
        )
        self.hits = widgets.Select(
            options=[], rows=6, layout=widgets.Layout(width="100%", display="none")
        )
        self.graph_pane = _panes.GraphPane(
            widgets, "graph", "ortlab-partition-graph", self.cache, prefix
        )
        self.fx_pane = _panes.GraphPane(
            widgets, "fx", "ortlab-fx-view", self.cache, prefix, "49%"
        )
        self.onnx_pane = _panes.GraphPane(
            widgets, "onnx", "ortlab-onnx-view", self.cache, prefix, "49%"
        )
        self.graph_view = self.graph_pane.view
        self.fx_view = self.fx_pane.view
        self.onnx_view = self.onnx_pane.view
        self.provenance = _panes.html_widget(widgets, "ortlab-provenance")
        self.verdicts = _panes.html_widget(widgets, "ortlab-verdicts")
        self.sessions = _panes.html_widget(widgets, "ortlab-sessions")
        self.style = widgets.HTML()
        self.bridge = _bridge(widgets, self.click)
        for name in (
            "graph",
            "partition",
            "session",
            "fx_node",
            "onnx_node",
            "search",
            "hits",
        ):
            getattr(self, name).add_class(f"ortlab-choose-{name.replace('_', '-')}")
        self.widget = widgets.VBox(
            [
                self.style,
                self.bridge,
                widgets.HBox([self.graph, self.partition, self.session]),
                widgets.HBox([self.search]),
                self.hits,
                widgets.HTML(_style.PARTITION_LEGEND),
                self.graph_pane.widget,
                widgets.HBox([self.fx_node, self.onnx_node]),
                self.provenance,
                widgets.HBox(
                    [self.fx_pane.widget, self.onnx_pane.widget],
                    layout=widgets.Layout(width="100%"),
                ),
                widgets.HTML("<h4>Verdicts of this partition's nodes</h4>"),
                self.verdicts,
                widgets.HTML("<h4>Sessions of this partition</h4>"),
                self.sessions,
            ],
            layout=widgets.Layout(width="100%", overflow="hidden"),
        )
        self.widget.add_class("ortlab-root")
        self.widget.add_class("ortlab-viewer")
        self.graph.observe(self._on_graph, names="value")
        self.partition.observe(self._on_partition, names="value")
        self.session.observe(self._on_session, names="value")
        self.fx_node.observe(lambda c: self._on_node(c, self.onnx_node), names="value")
        self.onnx_node.observe(lambda c: self._on_node(c, self.fx_node), names="value")
        self.search.observe(lambda _: self.find(self.search.value), names="value")
        self.hits.observe(self._on_hit, names="value")
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
        if p is None or self.session.value is None:
            return None
        return p.session(self.session.value)

    # -- refresh -------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-reads the records (new graphs, partitions, sessions) and redraws."""
        with self._quiet():
            set_options(
                self.graph,
                [
                    (
                        f"{g.index}: {g.kind} · {g.node_count} ops · "
                        f"{len(g.partitions)} partitions",
                        g.index,
                    )
                    for g in self.backend.graphs
                ],
            )
            self._fill_partitions()
        self._draw_all()

    def _fill_partitions(self) -> None:
        g = self._graph()
        options = []
        for p in g.partitions if g is not None else []:
            state = "" if p.state == "ort" else " · eager (failed)"
            options.append(
                (
                    f"{p.name} · {len(p.node_names)} nodes · {len(p.sessions)} "
                    f"session{'s' if len(p.sessions) != 1 else ''}{state}",
                    p.name,
                )
            )
        set_options(self.partition, options)
        self._fill_sessions()

    def _fill_sessions(self) -> None:
        p = self._partition()
        g = self._graph()
        sessions = p.sessions if p is not None else []
        options = [
            (
                f"#{s.index} · {_names.summary(_names.session_inputs(s, g))}"
                f"{'' if s.active else ' (evicted)'}",
                s.index,
            )
            for s in sessions
        ]
        set_options(self.session, options)
        # Only worth a choice when there are several.
        self.session.layout.display = "" if len(options) > 1 else "none"
        self._fill_nodes()

    def _fill_nodes(self) -> None:
        p, s = self._partition(), self._session()
        prov = _graphs.provenance(s) if s is not None else None
        fx_options: list[tuple[str, Any]] = [("—", None)]
        for name in p.node_names if p is not None else ():
            count = len(prov.onnx_nodes_of(name)) if prov is not None else 0
            fx_options.append((f"{name} → {count} ONNX node{'s' if count != 1 else ''}", name))
        onnx_options: list[tuple[str, Any]] = [("—", None)]
        if s is not None:
            onnx_options += [
                (f"{i}: {_graphs.onnx_node_title(s, i)}", i)
                for i in range(len(s.model.graph.node))
            ]
        self.fx_node.options = fx_options
        self.fx_node.value = None
        self.onnx_node.options = onnx_options
        self.onnx_node.value = None

    # -- drawing -------------------------------------------------------------------
    def _draw_all(self) -> None:
        g = self._graph()
        if g is None:
            self.graph_pane.clear(
                "Nothing compiled yet: call the compiled model, then refresh."
            )
            for w in (self.verdicts, self.sessions, self.provenance, self.style):
                w.value = ""
            self.fx_pane.clear("")
            self.onnx_pane.clear("")
            return
        self.graph_pane.show(
            g,
            g,
            header=_fragments.graph_cause_html(g),
            footer=_fragments.eager_nodes_html(g),
            partition=self.partition.value,
        )
        self._draw_partition()

    def _draw_partition(self) -> None:
        g, p = self._graph(), self._partition()
        if g is None or p is None:
            self.fx_pane.clear("No partition in this graph: every node runs in PyTorch.")
            self.onnx_pane.clear("")
            self.verdicts.value = self.sessions.value = ""
            self._highlight()
            return
        self.fx_pane.show(p, g)
        self.verdicts.value = _fragments.partition_verdicts_html(p, g)
        self.sessions.value = _fragments.sessions_html(p)
        self._draw_session()

    def _draw_session(self) -> None:
        g, p, s = self._graph(), self._partition(), self._session()
        if g is None or p is None:
            return
        if s is None:
            reason = p.error or "the partition has not run yet"
            self.onnx_pane.clear(f"No ONNX model for {p.name}: {reason}.")
        else:
            self.onnx_pane.show(s, g)
        self._highlight()

    # -- selection -----------------------------------------------------------------
    def _linked(self) -> tuple[str | None, list[int], list[str]]:
        """The selected FX node, the ONNX nodes linked to the selection, and lines
        saying how they are linked."""
        g, p, s = self._graph(), self._partition(), self._session()
        prov = _graphs.provenance(s) if s is not None else None
        fx_name, onnx_index = self.fx_node.value, self.onnx_node.value
        if onnx_index is not None and prov is not None and s is not None:
            fx_name = prov.fx_node_of(onnx_index)
            came = fx_name or "(none: added by the exporter)"
            title = _graphs.onnx_node_title(s, onnx_index)
            return fx_name, [onnx_index], [f"ONNX node {title} came from FX node {came}"]
        if fx_name is None:
            return None, [], []
        linked = list(prov.onnx_nodes_of(fx_name)) if prov is not None else []
        titles = ", ".join(_graphs.onnx_node_title(s, i) for i in linked) if s else ""
        line = (
            f"FX node {fx_name} became {len(linked)} ONNX node"
            f"{'s' if len(linked) != 1 else ''}{': ' + titles if titles else ''}"
        )
        lines = [line]
        if s is not None and (not linked or any(_fused(s, i) for i in linked)):
            fused = _fusion.fusions(s, p, cache=self.cache).describe(fx_name)
            if fused:
                lines.append(f"FX node {fx_name} is {fused}")
            elif not linked:
                lines.append(f"FX node {fx_name}: {_fusion.unmapped_reason(p, fx_name)}")
        verdict = g.verdict(fx_name) if g is not None else None
        if verdict is not None:
            lines.append(f"{verdict.target}: {verdict.reason}")
            if verdict.source:
                lines.append(f"from {verdict.source}")
        return fx_name, linked, lines

    def _highlight(self, *, reveal: bool = False) -> None:
        """Outlines the selection and its counterparts in every drawing."""
        fx_name, linked, lines = self._linked()
        onnx_keys = [str(i) for i in linked]
        fx_keys = [fx_name] if fx_name else []
        if reveal:
            self.graph_pane.reveal(fx_keys)
            self.fx_pane.reveal(fx_keys)
            self.onnx_pane.reveal(onnx_keys)
        ids = self.graph_pane.element_ids(fx_keys) + self.fx_pane.element_ids(fx_keys)
        ids += self.onnx_pane.element_ids(onnx_keys)
        p = self._partition()
        if not fx_keys and not onnx_keys and p is not None:
            ids += self.graph_pane.element_ids([p.name])
        self.style.value = _graphs.highlight_css(ids)
        self.provenance.value = "".join(f"<p>{_html.esc(line)}</p>" for line in lines)

    def select(self, kind: str, key: str, *, reveal: bool = True) -> None:
        """Selects an FX node (``kind="fx"``: its name) or an ONNX node (``"onnx"``: its
        index as text) of the current partition, switching partition when the FX node
        is in another one."""
        g = self._graph()
        if kind == "fx" and g is not None:
            part = next((p for p in g.partitions if key in p.node_names), None)
            if part is not None and part.name != self.partition.value:
                with self._quiet():
                    self.partition.value = part.name
                    self._fill_sessions()
                self._draw_partition()
        with self._quiet():
            if kind == "fx":
                self.onnx_node.value = None
                offered = [v for _, v in self.fx_node.options]
                self.fx_node.value = key if key in offered else None
                if key not in offered:  # an eager node: outline it where it is drawn
                    ids = self.graph_pane.element_ids([key])
                    self.graph_pane.reveal([key])
                    self.style.value = _graphs.highlight_css(
                        self.graph_pane.element_ids([key]) or ids
                    )
                    verdict = g.verdict(key) if g is not None else None
                    self.provenance.value = (
                        f"<p>{_html.esc(f'{key}: {verdict.reason}')}</p>" if verdict else ""
                    )
                    return
            else:
                self.fx_node.value = None
                self.onnx_node.value = int(key)
        self._highlight(reveal=reveal)

    # -- events --------------------------------------------------------------------
    def click(self, pane: str, element_id: str) -> None:
        """A click on a drawing (see the module NOTE)."""
        panes = {"graph": self.graph_pane, "fx": self.fx_pane, "onnx": self.onnx_pane}
        target = panes.get(pane)
        action = target.action(element_id) if target is not None else None
        if target is None or action is None:
            return
        kind, key = action
        if kind == "module":
            target.toggle(key)
            self._highlight()
        elif kind == "partition":
            self.partition.value = key
        elif kind == "item":
            self.select("onnx" if pane == "onnx" else "fx", key)

    def find(self, query: str) -> list[tuple[str, Any]]:
        """Searches the chosen graph's nodes and modules and the chosen session's ONNX
        nodes; lists the hits (choosing one selects it)."""
        g, s = self._graph(), self._session()
        options: list[tuple[str, Any]] = []
        if g is not None and query.strip():
            tree = self.cache.get(g, ("tree", id(g)), lambda: _graphs.tree_of(g, g))
            options += [
                (f"FX · {h.text}", ("fx", h.key) if h.key else ("module", h.module))
                for h in tree.search(query)
            ]
        if s is not None and query.strip() and self.onnx_pane.record is s:
            options += [
                (f"ONNX · {h.text}", ("onnx", h.key))
                for h in self.onnx_pane.tree.search(query)
                if h.key and not h.key.startswith(("in:", "out:"))
            ]
        with self._quiet():
            self.hits.options = options
            self.hits.value = None
        self.hits.layout.display = "" if options else "none"
        if len(options) == 1:
            self.hits.value = options[0][1]
        return options

    def _on_hit(self, change: Any) -> None:
        if self._updating or change["new"] is None:
            return
        kind, key = change["new"]
        if kind == "module":
            self.graph_pane.reveal((), [key])
            self.style.value = _graphs.highlight_css(self.graph_pane.element_ids([key]))
            return
        self.select(kind, key)

    def _quiet(self) -> Any:
        """While active, dropdown changes do not re-enter the handlers."""
        viewer = self

        class Quiet:
            def __enter__(self) -> None:
                self.before = viewer._updating
                viewer._updating = True

            def __exit__(self, *exc: Any) -> None:
                viewer._updating = self.before

        return Quiet()

    def _on_graph(self, change: Any) -> None:
        if not self._updating:
            with self._quiet():
                self._fill_partitions()
            self._draw_all()

    def _on_partition(self, change: Any) -> None:
        if not self._updating:
            with self._quiet():
                self._fill_sessions()
            if not self.graph_pane.hierarchical:  # one box per partition: expand it
                self._draw_all()
            else:
                self._draw_partition()

    def _on_session(self, change: Any) -> None:
        if not self._updating:
            with self._quiet():
                self._fill_nodes()
            self._draw_session()

    def _on_node(self, change: Any, other: Any) -> None:
        """A node picked in one dropdown (FX or ONNX) clears the other, then the views
        outline it (opening the modules that hide it)."""
        if self._updating:
            return
        if change["new"] is not None:
            with self._quiet():
                other.value = None
        self._highlight(reveal=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def _fused(session: records.SessionRecord, index: int) -> bool:
    return records.is_fused_operator(session.model.graph.node[index])


class OnnxViewer:
    """The ONNX tab: every session's model by module, its facts (inputs named and
    summarised), and where each FX node went, through fused operators on demand."""

    def __init__(self, backend: Any) -> None:
        widgets = _deps.require("ipywidgets")
        self.backend = backend
        self.cache = _cache.of(backend)
        self.choice = dropdown(widgets, "Session")
        self.choice.add_class("ortlab-choose-onnx-session")
        self.pane = _panes.GraphPane(
            widgets, "onnx", "ortlab-onnx-tab", self.cache, self.cache.prefix + "t"
        )
        self.info = _panes.html_widget(widgets, "ortlab-onnx-info")
        self.trace = widgets.Button(
            description="Trace FX nodes through ONNX Runtime's fused operators",
            layout=widgets.Layout(width="auto"),
        )
        self.trace.add_class("ortlab-trace-fusions")
        self.provenance = _panes.html_widget(widgets, "ortlab-onnx-provenance")
        self.bridge = _bridge(widgets, self.click)
        self.widget = widgets.VBox(
            [
                self.bridge,
                self.choice,
                self.pane.widget,
                self.info,
                self.trace,
                self.provenance,
            ]
        )
        self.widget.add_class("ortlab-viewer")
        self.choice.observe(lambda _: self.draw(), names="value")
        self.trace.on_click(lambda _: self.draw_provenance(optimizer=True))
        self.refresh()

    def _sessions(self) -> list[tuple[records.PartitionRecord, records.SessionRecord]]:
        return [(p, s) for p in self.backend.partitions for s in p.sessions]

    def _chosen(self) -> tuple[records.PartitionRecord, records.SessionRecord] | None:
        key = self.choice.value
        return next(
            ((p, s) for p, s in self._sessions() if key == (p.graph_index, p.name, s.index)),
            None,
        )

    def _graph(self, part: records.PartitionRecord) -> records.GraphRecord | None:
        return next((g for g in self.backend.graphs if g.index == part.graph_index), None)

    def refresh(self) -> None:
        """Re-reads the sessions and redraws."""
        options = [
            (
                f"graph {p.graph_index} ({p.graph_kind}) · {p.name} #{s.index} · "
                f"{_names.summary(_names.session_inputs(s, self._graph(p)))}",
                (p.graph_index, p.name, s.index),
            )
            for p, s in self._sessions()
        ]
        set_options(self.choice, options)
        self.draw()

    def draw(self) -> None:
        chosen = self._chosen()
        if chosen is None:
            self.pane.clear("No ONNX model yet: call the compiled model.")
            self.info.value = self.provenance.value = ""
            return
        part, session = chosen
        graph = self._graph(part)
        self.pane.show(session, graph)
        self.info.value = _fragments.onnx_model_info(session, graph)
        self.draw_provenance(optimizer=False)

    def draw_provenance(self, *, optimizer: bool) -> None:
        """The FX node -> ONNX nodes table; with ``optimizer``, through ONNX Runtime's
        own fused operators too (makes a session once, cached)."""
        chosen = self._chosen()
        if chosen is None:
            return
        part, session = chosen
        found = _fusion.fusions(session, part, optimizer=optimizer, cache=self.cache)
        self.provenance.value = "<h4>Provenance</h4>" + _fragments.provenance_table(
            session, found, part
        )

    def click(self, pane: str, element_id: str) -> None:
        action = self.pane.action(element_id)
        if action is not None and action[0] == "module":
            self.pane.toggle(action[1])
