"""The one graph model every drawing is made of: typed nodes, clusters and edges.

# NOTE: a view decides *what* to draw as a :class:`GraphModel` (FX nodes, ONNX nodes,
# module boxes, folded repeated blocks, partition clusters, and the edges between them)
# and :func:`to_dot` decides *how Graphviz reads it*. The Inspector, the HTML report, the
# notebook's static fallback and the numerics overlays all draw through this one model,
# so a partition, an eager node or a module box looks the same everywhere.
#
# Every drawn element has an SVG id (``Node.id`` / ``Cluster.id``), unique on a page, and
# a model keeps two maps: ``ids`` (what the view is about: an FX node name, an ONNX node
# index, a partition name, a module path -> the SVG id of the element standing for it)
# and ``actions`` (SVG id -> what a click on it means: ``("module", path)`` expands or
# collapses a module, ``("item", key)`` selects a node). Highlighting is CSS on those ids
# and never lays a graph out again.
#
# An :class:`Overlay` paints a measure over any drawing of a graph (the profile's heat:
# seconds per node; the numerics: error over tolerance): each node is filled by its own
# value and a box standing for several nodes (a collapsed module, a folded block) by
# their combined value (a sum of times, the worst error), with the value in its label.
#
# Labels are plain text, or rich lines (:class:`Line`: a colour, bold) written as
# Graphviz HTML-like labels. Every string from a model passes through ``_dot.quote`` or
# ``_dot.html_text``, so nothing in a model's names is ever read as DOT or markup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from ortlab.views import _dot, _style


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a rich label."""

    text: str
    color: str | None = None
    bold: bool = False


@dataclasses.dataclass
class Node:
    """A drawn box or ellipse: an FX or ONNX node, a collapsed module, a folded block.

    Attributes:
        id: SVG element id.
        label: Plain text (lines separated by newlines) or rich lines.
        kind: What it stands for; its SVG class is ``ortlab-<kind>`` (``ort``, ``eager``,
            ``placeholder``, ``output``, ``onnx``, ``module``, ``fold``, ``partition``...).
        tooltip: Shown on hover.
        fill: Fill colour.
        line: Border colour (``None``: Graphviz's default).
        penwidth: Border width.
        shape: Graphviz shape (``None``: the default rounded box).
        dashed: A dashed border (a failed partition).
        highlighted: Outlined in the highlight colour.
        xlabel: A mark beside the box (``"first divergent"``).
        fontcolor: Text colour (``None``: black; white on the darkest fills).
    """

    id: str
    label: str | Sequence[Line]
    kind: str = "ort"
    tooltip: str = ""
    fill: str = _style.IDLE_FILL
    line: str | None = None
    penwidth: float | None = None
    shape: str | None = None
    dashed: bool = False
    highlighted: bool = False
    xlabel: str = ""
    fontcolor: str | None = None


@dataclasses.dataclass
class Cluster:
    """A box around nodes: a partition, an expanded module."""

    id: str
    label: str | Sequence[Line]
    children: list[Node | Cluster] = dataclasses.field(default_factory=list)
    kind: str = "cluster"
    tooltip: str = ""
    fill: str = _style.IDLE_FILL
    line: str = "#777777"
    dashed: bool = False


@dataclasses.dataclass
class Edge:
    """Data flowing from one drawn element to another (``count`` values, when several)."""

    src: str
    dst: str
    label: str = ""
    color: str | None = None
    dashed: bool = False
    bold: bool = False


@dataclasses.dataclass(frozen=True)
class Overlay:
    """A measure painted over a drawing (see the module NOTE).

    Attributes:
        values: Node key (an FX node name, an ONNX node index as text) -> its value;
            nodes without one keep their usual fill.
        fill: The fill of a value.
        text: The label line of a value (``"1.20 ms (3.4%)"``).
        combine: The value of a box standing for several nodes, from theirs.
        light_text: Fills dark enough to write on in white.
        missing: The fill of a node without a value (``None``: its usual fill).
    """

    values: Mapping[str, float]
    fill: Callable[[float], str]
    text: Callable[[float], str]
    combine: Callable[[Iterable[float]], float] = sum
    light_text: frozenset[str] = frozenset()
    missing: str | None = None

    def of(self, keys: Iterable[str]) -> float | None:
        """The combined value of these nodes (``None``: none of them has one)."""
        found = [self.values[k] for k in keys if k in self.values]
        return self.combine(found) if found else None

    def paint(self, node: Node, value: float | None) -> None:
        """Fills ``node`` by ``value`` and adds the value's line to its label."""
        if value is None:
            node.fill = node.fill if self.missing is None else self.missing
            return
        node.fill = self.fill(value)
        node.fontcolor = "white" if node.fill in self.light_text else None
        line = self.text(value)
        if isinstance(node.label, str):
            node.label = f"{node.label}\n{line}"
        else:
            node.label = [*node.label, Line(line, bold=True)]
        node.tooltip = f"{node.tooltip}\n{line}" if node.tooltip else line


@dataclasses.dataclass
class GraphModel:
    """What one drawing shows (see the module NOTE).

    Attributes:
        name: The DOT graph's name.
        caption: The line on top of the drawing.
        items: Top-level nodes and clusters, in order.
        edges: Edges between drawn elements (by SVG id).
        ids: What the view is about -> the SVG id standing for it.
        actions: SVG id -> ``(kind, key)`` of a click on it.
        note: What was simplified (collapsed modules...), shown above the drawing.
        node_count: Nodes of the source graph (not of the drawing).
    """

    name: str
    caption: str = ""
    items: list[Node | Cluster] = dataclasses.field(default_factory=list)
    edges: list[Edge] = dataclasses.field(default_factory=list)
    ids: dict[str, str] = dataclasses.field(default_factory=dict)
    actions: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    note: str = ""
    node_count: int = 0

    def nodes(self) -> Iterator[Node]:
        """Every drawn node, clusters walked in order."""
        stack: list[Node | Cluster] = list(reversed(self.items))
        while stack:
            item = stack.pop()
            if isinstance(item, Cluster):
                stack.extend(reversed(item.children))
            else:
                yield item

    @property
    def drawn(self) -> int:
        """Nodes laid out."""
        return sum(1 for _ in self.nodes())


def _label(label: str | Sequence[Line]) -> str:
    if isinstance(label, str):
        return f"label={_dot.quote(label)}"
    rows = []
    for line in label:
        text = _dot.html_text(line.text)
        if line.bold:
            text = f"<B>{text}</B>"
        if line.color:
            text = f'<FONT COLOR="{_dot.html_text(line.color)}">{text}</FONT>'
        rows.append(text)
    return "label=<" + "<BR/>".join(rows) + ">"


def _node_dot(node: Node) -> str:
    values: dict[str, object] = {
        "id": node.id,
        "class": f"ortlab-{node.kind}",
        "tooltip": node.tooltip or None,
        "fillcolor": node.fill,
        "shape": node.shape,
        "xlabel": node.xlabel or None,
        "fontcolor": node.fontcolor,
    }
    if node.dashed:
        values["style"] = "rounded,filled,dashed"
    line, width = node.line, node.penwidth
    if node.highlighted:
        line, width = _style.HIGHLIGHT, 4
    values["color"] = line
    values["penwidth"] = None if width is None else str(width)
    attributes = _dot.attrs(**values)
    return f"{_dot.quote(node.id)} [{_label(node.label)}, {attributes[1:]};"


def _cluster_dot(cluster: Cluster, lines: list[str]) -> None:
    graph_attrs = _dot.attrs(
        tooltip=cluster.tooltip or None,
        style="dashed,rounded,filled" if cluster.dashed else "rounded,filled",
        fillcolor=cluster.fill,
        color=cluster.line,
        id=cluster.id,
        **{"class": f"ortlab-{cluster.kind}"},
    )
    lines.append(f"subgraph {_dot.quote('cluster_' + cluster.id)} {{")
    lines.append(f"graph [{_label(cluster.label)}, {graph_attrs[1:]};")
    _items_dot(cluster.children, lines)
    lines.append("}")


def _items_dot(items: Sequence[Node | Cluster], lines: list[str]) -> None:
    for item in items:
        if isinstance(item, Cluster):
            _cluster_dot(item, lines)
        else:
            lines.append(_node_dot(item))


def to_dot(model: GraphModel) -> str:
    """The DOT source of a graph model."""
    lines = [f"digraph {_dot.quote(model.name)} {{", _style.GRAPH_ATTRS]
    if model.caption:
        caption = _dot.attrs(label=model.caption, labelloc="t", labeljust="l")
        lines.append(f"graph {caption};")
    _items_dot(model.items, lines)
    for edge in model.edges:
        attributes = _dot.attrs(
            label=edge.label or None,
            color=edge.color,
            style="dashed" if edge.dashed else None,
            penwidth="2.5" if edge.bold else None,
        )
        lines.append(f"{_dot.quote(edge.src)} -> {_dot.quote(edge.dst)} {attributes};")
    lines.append("}")
    return "\n".join(lines)


def render(model: GraphModel, *, timeout: float | None = None) -> _dot.Rendered:
    """Lays ``model`` out with Graphviz (see :func:`ortlab.views._dot.render`)."""
    return _dot.render(
        to_dot(model),
        dict(model.ids),
        note=model.note,
        node_count=model.node_count,
        actions=dict(model.actions),
        timeout=timeout,
    )
