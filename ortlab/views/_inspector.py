"""The Inspector (one tab per entry of ``views._tabs.TABS``: Summary · Partitions · ONNX ·
Sessions · Timings, plus Numerics and Profile when given), its text form, and how it
shows in a notebook.

# NOTE: an Inspector resolves its subjects and nothing else until it is displayed; its
# widget builds the first tab only, the others when first shown (so opening one lays
# out no graph), and graph layouts are kept in the backend's lab cache, shared by every
# view of that backend.
#
# In a notebook the Inspector is two outputs: a static view (the summary and each
# graph's first drawing, inline SVG) and the widget. While the widget renders, a
# ``<style>`` it carries hides the static one; in a notebook reopened without a kernel
# the widget cannot render ("model not found"), and the static view's own ``<style>``
# hides that message instead, so the saved notebook shows the result. The widget's
# mime bundle carries the same static HTML for front ends without widgets (nbconvert,
# GitHub).
#
# Live updates: the Inspector registers a backend observer (``add_observer``) holding
# only a weak reference to it. A run that changed the structure (a new graph, session or
# failed partition) refreshes the tabs built so far at once; otherwise counters are
# refreshed at most every ``REFRESH_INTERVAL`` seconds, so an open Inspector costs a
# model call almost nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

from ortlab import _deps, _harness, _html
from ortlab.views import (
    _graphs,
    _names,
    _status,
    _style,
    _subjects,
    _tables,
    _tabs,
    _timeline,
    _viewer,
)

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend

logger = logging.getLogger(__name__)

REFRESH_INTERVAL = 0.5
"""Seconds between counter refreshes caused by runs (structural changes are immediate)."""


def _structure(backend: OrtBackend) -> tuple[Any, ...]:
    return tuple(
        (g.index, tuple((p.name, p.state, len(p.sessions)) for p in g.partitions))
        for g in backend.graphs
    )


class _SubjectView:
    """The tabs of one subject (one backend) of an Inspector, built when first shown."""

    def __init__(self, context: _tabs.Context) -> None:
        widgets = _deps.require("ipywidgets")
        self.context = context
        self.specs = _tabs.tabs_for(context.subject)
        self.built: dict[int, Any] = {}
        self.slots = [widgets.Box(layout=widgets.Layout(width="100%")) for _ in self.specs]
        self.tabs = widgets.Tab(
            children=self.slots,
            titles=[t.title for t in self.specs],
            layout=widgets.Layout(width="100%"),
        )
        self.tabs.add_class("ortlab-root")
        self.tabs.observe(lambda change: self.show(change["new"]), names="selected_index")
        self.show(0)

    def show(self, index: int | None) -> Any:
        """Builds tab ``index`` when first shown; returns its form."""
        if index is None or not 0 <= index < len(self.specs):
            return None
        if index not in self.built:
            built = self.specs[index].build(self.context)
            self.built[index] = built
            self.slots[index].children = [built.widget]
        return self.built[index]

    def tab(self, title: str) -> Any:
        """The form of the tab titled ``title`` (built now if it was not yet)."""
        titles = [t.title for t in self.specs]
        if title not in titles:
            raise KeyError(f"no tab {title!r} here; the tabs are {', '.join(titles)}")
        return self.show(titles.index(title))

    def html(self, title: str) -> str:
        """The current HTML of an HTML tab (Summary, Sessions, Timings)."""
        return str(self.tab(title).widget.value)

    @property
    def viewer(self) -> _viewer.PartitionViewer:
        return self.tab("Partitions").viewer  # type: ignore[no-any-return]

    def refresh(self, *, structure: bool) -> None:
        for built in self.built.values():
            built.refresh(structure=structure)


class Inspector:
    """Everything ortlab did for a model, as notebook tabs (or as text elsewhere).

    Tabs (``views._tabs.TABS``): Summary · Partitions (the interactive
    :class:`PartitionViewer`) · ONNX · Sessions · Timings, plus Numerics when a
    ``DiffReport`` is given and Profile when a profile is. With a mapping of several
    models, a selector on top switches between them. The widget follows the backend:
    calling the compiled model again (a new shape, a new graph) updates it.

    Args:
        obj: A backend, a compiled callable, a ``DiffReport``, or a mapping of names to
            those.
        diff: A ``DiffReport`` to show in a Numerics tab.
        headline: A line shown above the tabs (the ``%ortcompile`` verdict).
        max_nodes: Graphs with more nodes are drawn collapsed.
        profile: An ``ortlab.profile`` result (or a mapping of subject names to them) to
            show in a Profile tab.
    """

    def __init__(
        self,
        obj: Any,
        *,
        diff: Any = None,
        headline: str = "",
        max_nodes: int = _graphs.DEFAULT_MAX_NODES,
        profile: Any = None,
    ) -> None:
        self.subjects = _subjects.subjects(obj, diff)
        if profile is not None:
            from ortlab.views import _profile

            for i, found in _profile.for_subjects(self.subjects, profile).items():
                self.subjects[i].profile = found
        self.headline = headline
        self.max_nodes = max_nodes
        self._widget: Any = None
        self._header: Any = None
        self._selector: Any = None
        self._views: dict[int, _SubjectView] = {}
        self._structures: dict[int, tuple[Any, ...]] = {}
        self._last_refresh = 0.0
        self._removers: list[Any] = []
        self._id = uuid.uuid4().hex[:12]

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

    def static_html(self) -> str:
        """The static view (summary and each graph's first drawing, inline SVG): what a
        notebook shows without the widget."""
        parts = []
        for i, subject in enumerate(self.subjects):
            context = _tabs.Context(
                subject, f"st{self._id}-{i}-", self.headline, self.max_nodes
            )
            if len(self.subjects) > 1:
                parts.append(f"<h3>{_html.esc(subject.name)}</h3>")
            parts.append(_tabs.overview_html(context))
        return _style.styled("".join(parts))

    def set_headline(self, headline: str) -> None:
        """Replaces the line above the tabs (and the Summary's)."""
        self.headline = headline
        if self._header is not None:
            self._header.value = self._header_html()
        for view in self._views.values():
            view.context.headline = headline
            view.refresh(structure=False)

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
            subject = self.subjects[index]
            prefix = f"ol{self._id}-{index}-"
            view = _SubjectView(_tabs.Context(subject, prefix, self.headline, self.max_nodes))
            self._views[index] = view
            self._structures[index] = _structure(subject.backend)
            if not self._removers:
                self._observe()
        return view

    @property
    def partition_viewer(self) -> _viewer.PartitionViewer:
        """The Partitions tab of the shown subject (built now if it was not yet)."""
        return self._view(self._shown()).viewer

    @property
    def tabs(self) -> Any:
        """The ``ipywidgets.Tab`` of the shown subject."""
        return self._view(self._shown()).tabs

    def _shown(self) -> int:
        if self._widget is not None and self._selector is not None:
            return int(self._selector.value)
        return 0

    def _header_html(self) -> str:
        # While the widget is on the page, the static view printed above it is hidden.
        hide = (
            f'.jp-OutputArea-child:has([data-ortlab-static="{self._id}"]), '
            f'.output_area:has([data-ortlab-static="{self._id}"]), '
            f'[data-ortlab-static="{self._id}"] {{ display: none !important; }}'
        )
        headline = (
            f'<div class="ortlab-root ortlab-headline">{_html.esc(self.headline)}</div>'
            if self.headline
            else ""
        )
        return f"<style>{_style.CSS}{hide}</style>{headline}"

    def _build(self) -> Any:
        widgets = _deps.require("ipywidgets")
        self._header = widgets.HTML(self._header_html())
        body = widgets.Box([self._view(0).tabs], layout=widgets.Layout(width="100%"))
        children = [self._header]
        if len(self.subjects) > 1:
            self._selector = _viewer.dropdown(
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

    # -- display -------------------------------------------------------------------
    def _static_output(self, static: str) -> str:
        """The static view as its own output, with the rule that hides a widget output
        right after it when that one cannot render (see the module NOTE)."""
        hide = (
            f'.jp-OutputArea-child:has([data-ortlab-static="{self._id}"]) + '
            # (JupyterLab marks a widget output that cannot render with this class)
            ".jp-OutputArea-child:has(> .jp-OutputArea-output.jupyter-widgets) "
            "{ display: none; }"
        )
        return (
            f'<div data-ortlab-static="{self._id}" class="ortlab-static">'
            f"<style>{hide}</style>{static}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        if not _harness.in_notebook():
            # A terminal shows text only: don't lay out graphs nobody will see.
            return {"text/plain": self.text()}
        return self._bundle(self.static_html(), include, exclude)

    def _bundle(self, static: str, include: Any = None, exclude: Any = None) -> Any:
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        if isinstance(bundle, dict):
            bundle["text/plain"] = self.text()
            # Front ends without the widget manager (nbconvert HTML, GitHub) fall back to
            # the static view instead of an empty cell.
            bundle["text/html"] = static
        return bundle

    def _ipython_display_(self) -> None:
        display = _deps.require("IPython.display")
        if not _harness.in_notebook():
            display.display({"text/plain": self.text()}, raw=True)
            return
        names = ", ".join(subject.name for subject in self.subjects)
        status = _status.status_line(f"ortlab.inspect({names})")
        try:
            status.step("summary and module drawings")
            static = self.static_html()  # laid out once, for both outputs
            display.display(
                {"text/html": self._static_output(static), "text/plain": self.text()},
                raw=True,
            )
            status.step("widget")
            display.display(self._bundle(static), raw=True)
        finally:
            status.done()


def _subject_text(subject: _subjects.Subject) -> str:
    backend = subject.backend
    out = [f"== {subject.name}: {backend!r}"]
    notes = _timeline.usage_notes(backend)
    out.extend(f"Note: {line}" for line in notes)
    if not backend.graphs:
        if not notes:
            out.append(
                "no graph reached ortlab: the model was not called yet, or Dynamo ran it "
                "without a graph (every frame skipped, e.g. quantized modules) or failed "
                "before calling the backend (fullgraph=True with a graph break): see what "
                "the call raised or warned"
            )
        return "\n".join(out)
    rows = _tables.summary_rows(backend)
    width = max(len(k) for k, _ in rows)
    out.extend(f"  {k.ljust(width)}  {v}" for k, v in rows)
    out.append("\n" + _timeline.first_call_text(backend))
    out.extend(f"\nNote: {line}" for line in _timeline.recompile_limit_notes(backend))
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
    graphs = {g.index: g for g in backend.graphs}
    session_rows = [
        (
            p.graph_index,
            p.name,
            s.index,
            _names.summary(_names.session_inputs(s, graphs.get(p.graph_index))),
            ", ".join(s.providers),
            f"{s.export_seconds * 1e3:.1f}",
            f"{s.session_seconds * 1e3:.1f}",
            s.run_count,
            s.onnx_node_count,
        )
        for p in backend.partitions
        for s in p.sessions
    ]
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
            session_rows,
        )
        if session_rows
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
    obj: Any,
    *,
    diff: Any = None,
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
    profile: Any = None,
) -> Inspector:
    """The :class:`Inspector` of a backend, compiled callable, ``DiffReport`` or mapping.

    In a notebook, display the returned Inspector (last expression of a cell) to get the
    widget. Elsewhere the text summary is printed (outside IPython) and the Inspector,
    whose ``repr`` is that summary, is returned.

    Args:
        obj: What to inspect; see :class:`Inspector`.
        diff: A ``DiffReport`` to show in a Numerics tab.
        max_nodes: Graphs with more nodes are drawn collapsed.
        profile: A profile to show in a Profile tab.
    """
    inspector = Inspector(obj, diff=diff, max_nodes=max_nodes, profile=profile)
    if not _harness.in_ipython():
        # A script or a plain Python prompt: nothing would display the result.
        print(inspector.text())
    return inspector


PartitionViewer = _viewer.PartitionViewer
