"""One drawing in a widget: a graph record, a partition or an ONNX model, drawn node by
node when small and as its module tree when large; a click expands or collapses a
module, search reveals a node.

# NOTE: a pane keeps what a person did to its drawing (the modules they expanded, oldest
# first) and asks the backend's lab cache (:mod:`ortlab.views._cache`) for the layout of
# that state, so a state drawn once (by this Inspector or another of the same backend) is
# never laid out again. ``dot`` gets :data:`~ortlab.views._dot.INTERACTIVE_TIMEOUT_SECONDS`;
# when it runs out, the pane shows the module table (or the node table) and a button to
# draw anyway with the long timeout. Clicks reach the pane through the viewer's hidden
# text box (``_fragments.graph_html(pane=...)``); the pane turns an SVG id back into what
# it stands for with the drawing's ``actions``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ortlab.backend import records
from ortlab.views import _cache, _dot, _fragments, _graphs, _hierarchy


def html_widget(widgets: Any, css_class: str, **layout: Any) -> Any:
    """An HTML widget whose wide content scrolls inside its box."""
    layout.setdefault("overflow", "auto")
    w = widgets.HTML(layout=widgets.Layout(**layout))
    w.add_class(css_class)
    return w


class GraphPane:
    """A clickable drawing of one record (see the module NOTE).

    Args:
        widgets: The ``ipywidgets`` module.
        name: The pane's name in click messages (``"graph"``, ``"fx"``, ``"onnx"``).
        css_class: The class of its HTML widget.
        cache: The backend's lab cache.
        prefix: The SVG id prefix of the page.
        width: The widget's CSS width.
    """

    def __init__(
        self,
        widgets: Any,
        name: str,
        css_class: str,
        cache: _cache.LabCache,
        prefix: str,
        width: str = "100%",
    ) -> None:
        self.name = name
        self.cache = cache
        self.prefix = f"{prefix}{name}-"
        self.view = html_widget(widgets, css_class, width="100%")
        self.button = widgets.Button(
            description="Draw anyway", layout=widgets.Layout(display="none")
        )
        self.button.add_class("ortlab-draw-anyway")
        self.button.on_click(lambda _: self.draw(patient=True))
        self.widget = widgets.VBox(
            [self.view, self.button], layout=widgets.Layout(width=width)
        )
        self.record: Any = None
        self.graph: records.GraphRecord | None = None
        self.expanded: list[str] | None = None
        self.rendered: _dot.Rendered | None = None
        self.header = ""
        self.footer = ""
        self.partition: str | None = None
        """A graph drawn one box per partition expands this one (when it fits)."""

    # -- what is drawn -----------------------------------------------------------------
    def show(
        self,
        record: Any,
        graph: records.GraphRecord | None,
        *,
        header: str = "",
        footer: str = "",
        partition: str | None = None,
    ) -> None:
        """Draws ``record`` (a graph, partition or session record); a new record starts
        from its first level. A graph drawn one box per partition expands
        ``partition``."""
        if record is not self.record:
            self.expanded = None
        self.record, self.graph, self.partition = record, graph, partition
        self.header, self.footer = header, footer
        self.draw()

    def clear(self, message: str) -> None:
        """Shows ``message`` instead of a drawing."""
        self.record = self.rendered = None
        self.view.value = _fragments.note(message)
        self.button.layout.display = "none"

    @property
    def tree(self) -> _hierarchy.Tree:
        """The module tree of the record (kept in the lab cache)."""
        return self.cache.get(
            self.record,
            ("tree", id(self.graph)),
            lambda: _graphs.tree_of(self.record, self.graph),
        )

    def _size(self) -> int:
        record = self.record
        if isinstance(record, records.GraphRecord):
            return len(_graphs.flat_nodes(record))
        if isinstance(record, records.PartitionRecord):
            return len(record.graph_module.graph.nodes)
        return len(record.model.graph.node)

    @property
    def hierarchical(self) -> bool:
        """Whether the record is drawn as its module tree (more than
        ``_graphs.FLAT_MAX_NODES`` nodes, and module scopes to draw)."""
        if self.record is None or self._size() <= _graphs.FLAT_MAX_NODES:
            return False
        return self.tree.has_modules

    def _make(self, timeout: float) -> _dot.Rendered:
        record, graph = self.record, self.graph
        if self.hierarchical:
            return _graphs.module_view(
                record,
                graph,
                expanded=self.expanded,
                id_prefix=self.prefix,
                tree=self.tree,
                caption=_caption(record),
                timeout=timeout,
            )
        if isinstance(record, records.GraphRecord):
            return _graphs.fx_graph_view(
                record,
                max_nodes=_graphs.MAX_DRAWN_NODES,
                expand={self.partition} if self.partition else (),
                id_prefix=self.prefix,
                timeout=timeout,
            )
        if isinstance(record, records.PartitionRecord):
            return _graphs.partition_view(
                record, graph, id_prefix=self.prefix, timeout=timeout
            )
        return _graphs.onnx_view(record, id_prefix=self.prefix, graph=graph, timeout=timeout)

    def draw(self, *, patient: bool = False) -> None:
        """Lays out the current state (from the cache when drawn before)."""
        if self.record is None:
            return
        timeout = _dot.DOT_TIMEOUT_SECONDS if patient else _dot.INTERACTIVE_TIMEOUT_SECONDS
        key = (
            "pane",
            self.prefix,
            id(self.graph),
            _state(self.expanded),
            self.hierarchical or self.partition,
            _structure(self.record),
            _dot.dot_available(),
        )
        if patient:
            rendered = self._make(timeout)
            self.cache.put(self.record, key, rendered)
        else:
            rendered = self.cache.get(self.record, key, lambda: self._make(timeout))
        self.rendered = rendered
        self.button.layout.display = "" if rendered.timed_out else "none"
        self.view.value = (
            self.header
            + _fragments.graph_html(rendered, self._fallback(), pane=self.name)
            + self.footer
        )

    def _fallback(self) -> str:
        if self.hierarchical:
            return _fragments.module_table(self.tree)
        record = self.record
        if isinstance(record, records.GraphRecord):
            return _fragments.fx_nodes_table(record)
        if isinstance(record, records.PartitionRecord):
            return _fragments.partition_nodes_table(record)
        return _fragments.onnx_nodes_table(record)

    # -- interaction -------------------------------------------------------------------
    def action(self, element_id: str) -> tuple[str, str] | None:
        """What a click on an SVG element means (``("module", path)``, ``("item",
        key)``...), ``None`` for anything else."""
        if self.rendered is None:
            return None
        return self.rendered.actions.get(element_id)

    def toggle(self, path: str) -> None:
        """Expands a collapsed module, collapses an expanded one."""
        current = self.current_expansion()
        if path in current:
            kept = [p for p in current if p != path and not p.startswith(path + ".")]
        else:
            kept = [*current, path]
        self.expanded = kept
        self.draw()

    def current_expansion(self) -> list[str]:
        """The expanded modules, oldest first (the first level when untouched)."""
        if self.expanded is not None:
            return list(self.expanded)
        if not self.hierarchical:
            return []
        from ortlab.views import _layout

        return self.tree.default_expanded(_layout.DEFAULT_BOXES)

    def reveal(self, keys: Iterable[str], modules: Iterable[str] = ()) -> None:
        """Expands what hides these items (and opens these modules), then redraws when
        that changed the drawing."""
        if not self.hierarchical:
            return
        wanted = self.tree.expansion_for(k for k in keys if k in self.tree.items)
        for path in modules:
            wanted += [*self.tree.ancestors(path)]
        current = self.current_expansion()
        missing = [p for p in wanted if p not in current]
        if missing:
            self.expanded = [*current, *missing]
            self.draw()

    def element_ids(self, keys: Iterable[str]) -> list[str]:
        """The SVG ids standing for these keys (a node, or the box holding it)."""
        if self.rendered is None:
            return []
        return [self.rendered.ids[k] for k in keys if k in self.rendered.ids]


def _structure(record: Any) -> Any:
    """What of a record changes its drawing after it was made (partitions failing)."""
    if isinstance(record, records.GraphRecord):
        return tuple((p.name, p.state, len(p.sessions)) for p in record.partitions)
    if isinstance(record, records.PartitionRecord):
        return (record.state, len(record.sessions))
    return None


def _state(expanded: list[str] | None) -> tuple[str, ...] | None:
    return None if expanded is None else tuple(expanded)


def _caption(record: Any) -> str:
    if isinstance(record, records.GraphRecord):
        ort = len(record.ort_node_names)
        return (
            f"graph {record.index} ({record.kind}): {record.node_count} ops, {ort} in ONNX "
            f"Runtime ({len(record.partitions)} partitions), {record.node_count - ort} "
            "eager · by module: click a module to open or close it"
        )
    if isinstance(record, records.PartitionRecord):
        return f"{record.name}: FX subgraph ({len(record.node_names)} ops) · by module"
    return (
        f"{record.partition_name} · session {record.index}: {len(record.model.graph.node)} "
        "ONNX nodes · by module"
    )
