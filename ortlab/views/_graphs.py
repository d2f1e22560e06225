"""Graph views: FX graphs with ORT partitions as clusters, ONNX models, the module
hierarchy of either, and provenance.

# NOTE: every view here builds a :class:`~ortlab.views._gmodel.GraphModel` and renders
# it. A graph small enough is drawn node by node (partitions as coloured clusters, eager
# nodes in red); a larger one is drawn as the model's module tree
# (:func:`module_view`: ``encoder``, ``layer.0–11 ×12``...) when its nodes carry module
# scopes, else one box per partition (:func:`fx_graph_view`'s collapsed form). Nothing
# lays out more than ``MAX_DRAWN_NODES`` nodes, so ``dot`` answers in about a second.
#
# Provenance: the exporter stamps each ONNX node's ``metadata_props`` with
# ``pkg.torch.onnx.fx_node`` = the FX node's text (``"%addmm : [num_users=1] = ..."``);
# :func:`provenance` parses the name back and links FX nodes to the ONNX nodes they became
# (through fused operators: :mod:`ortlab.views._fusion`).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from ortlab.backend import records
from ortlab.views import _dot, _gmodel, _hierarchy, _items, _layout, _style
from ortlab.views._items import FlatNode, flat_nodes, target_text, value_text

# (re-exported: the views' node lists live in _items)
__all__ = ["FlatNode", "flat_nodes", "target_text", "value_text"]

DEFAULT_MAX_NODES = 300
"""Graphs with more nodes than this are drawn collapsed (module tree, or one box per
partition)."""

FLAT_MAX_NODES = 100
"""A record with more nodes than this is drawn as its module tree when it has one (the
Inspector's panes, the report): a taller drawing is read by scrolling, not as a whole."""

MAX_DRAWN_NODES = _layout.MAX_LAYOUT_NODES
"""Nodes laid out at most in one drawing (every view: FX graphs, partitions, ONNX
models, their numerics overlays); a larger graph is drawn as its module tree."""


def partition_colors(graph: records.GraphRecord | None) -> dict[str, str]:
    """Partition name -> its fill (the same in every view of the graph)."""
    if graph is None:
        return {}
    return {p.name: _style.partition_color(i) for i, p in enumerate(graph.partitions)}


# -- node by node --------------------------------------------------------------------


def _fx_node(
    node: FlatNode,
    node_id: str,
    verdict: records.Verdict | None,
    state: str,
    highlighted: bool,
    show_values: bool,
    graph: records.GraphRecord | None,
) -> _gmodel.Node:
    if node.op in ("placeholder", "output", "get_attr"):
        label = node.name if node.op != "output" else "output"
        bound = graph.source_of(node.name) if graph is not None else node.name
        if bound != node.name:
            label = bound
        if show_values and node.value and node.op != "output":
            label += "\n" + node.value
        return _gmodel.Node(
            node_id,
            label,
            kind=node.op,
            tooltip=f"{node.op} {node.name}" + (f": {bound}" if bound != node.name else ""),
            fill=_style.IO_FILL,
            shape="ellipse",
            highlighted=highlighted,
        )
    label = f"{node.name}\n{node.target}"
    if show_values and node.value:
        label += "\n" + node.value
    tooltip = _items.verdict_tooltip(node.name, node.target, verdict, node.partition, state)
    if node.partition is None or state != "ort":
        return _gmodel.Node(
            node_id,
            label,
            kind="eager",
            tooltip=tooltip,
            fill=_style.EAGER_FILL,
            line=_style.EAGER_LINE,
            penwidth=2,
            highlighted=highlighted,
        )
    return _gmodel.Node(node_id, label, tooltip=tooltip, fill="white", highlighted=highlighted)


def _cluster(
    index: int, part: records.PartitionRecord, children: list[Any], cluster_id: str
) -> _gmodel.Cluster:
    failed = part.state != "ort"
    state = "eager (failed)" if failed else "ONNX Runtime"
    label = f"{part.name} · {state} · {len(children)} nodes · {len(part.sessions)} sessions"
    return _gmodel.Cluster(
        cluster_id,
        label,
        children,
        kind="partition-cluster",
        tooltip=f"{part.name}: {part.error}" if failed else label,
        fill=_style.partition_color(index),
        line=_style.EAGER_LINE if failed else "#777777",
        dashed=failed,
    )


def _edges(nodes: Sequence[FlatNode], ids: dict[str, str]) -> list[_gmodel.Edge]:
    return [
        _gmodel.Edge(ids[src], ids[node.name])
        for node in nodes
        for src in node.inputs
        if src in ids and node.name in ids
    ]


def fx_graph_view(
    graph: records.GraphRecord,
    *,
    max_nodes: int = DEFAULT_MAX_NODES,
    expand: Collection[str] = (),
    highlight: Collection[str] = (),
    id_prefix: str = "",
    show_values: bool = True,
    timeout: float | None = None,
) -> _dot.Rendered:
    """Draws a graph record: partitions as coloured clusters, eager nodes in red.

    Each node's tooltip is its verdict (where it runs and why) and the line of the user's
    code it comes from. Above ``max_nodes`` nodes the graph is drawn collapsed: one box
    per partition (node and session counts) except the partitions named in ``expand``
    (a partition too large to lay out, :data:`MAX_DRAWN_NODES`, stays a box; draw it with
    :func:`module_view`).

    Args:
        graph: The graph record (``backend.graphs[i]``).
        max_nodes: Node count above which partitions are collapsed.
        expand: Partition names drawn in full even when collapsed.
        highlight: FX node names to outline (in collapsed partitions: their box).
        id_prefix: Prefix of the SVG element ids (unique per page).
        show_values: Show each node's type and shape (``float32[s77,16]``).
        timeout: Seconds ``dot`` may take (``None``: ``_dot.DOT_TIMEOUT_SECONDS``).

    Returns:
        A :class:`~ortlab.views._dot.Rendered` whose ``ids`` map FX node names (and
        partition names) to SVG element ids.
    """
    nodes = flat_nodes(graph)
    if len(nodes) > max_nodes:
        return _gmodel.render(
            _collapsed(graph, nodes, max_nodes, set(expand), set(highlight), id_prefix),
            timeout=timeout,
        )
    parts = {p.name: (i, p) for i, p in enumerate(graph.partitions)}
    verdicts = {v.node: v for v in graph.verdicts}
    model = _gmodel.GraphModel("fx", _graph_caption(graph), node_count=len(nodes))
    ids = model.ids
    by_part: dict[str | None, list[Any]] = collections.defaultdict(list)
    for i, node in enumerate(nodes):
        ids[node.name] = f"{id_prefix}fx-{i}"
        model.actions[ids[node.name]] = ("item", node.name)
        state = parts[node.partition][1].state if node.partition in parts else "eager"
        drawn = _fx_node(
            node,
            ids[node.name],
            verdicts.get(node.name),
            state,
            node.name in highlight,
            show_values,
            graph,
        )
        by_part[node.partition if node.partition in parts else None].append(drawn)
    model.items.extend(by_part.pop(None, []))
    for name, body in by_part.items():
        assert name is not None  # eager nodes were popped above
        index, part = parts[name]
        ids[name] = f"{id_prefix}part-{index}"
        model.items.append(_cluster(index, part, body, ids[name]))
    model.edges = _edges(nodes, ids)
    return _gmodel.render(model, timeout=timeout)


def _graph_caption(graph: records.GraphRecord) -> str:
    ort = len(graph.ort_node_names)
    return (
        f"graph {graph.index} ({graph.kind}): {graph.node_count} ops, {ort} in ONNX Runtime "
        f"({len(graph.partitions)} partitions), {graph.node_count - ort} eager"
    )


def _eager_groups(nodes: Sequence[FlatNode], loose: set[str]) -> dict[str, int]:
    """Connected components among the ``loose`` (eager) nodes, as node -> component id."""
    parent = {n: n for n in loose}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for node in nodes:
        if node.name in loose:
            for src in node.inputs:
                if src in loose:
                    a, b = find(src), find(node.name)
                    if a != b:
                        parent[a] = b
    roots: dict[str, int] = {}
    return {n: roots.setdefault(find(n), len(roots)) for n in loose}


def _top(counter: collections.Counter[str], n: int) -> str:
    shown = [f"{_items.short_op(t)} ×{c}" for t, c in counter.most_common(n)]
    if len(counter) > n:
        shown.append(f"… {len(counter) - n} more op types")
    return "\n".join(shown)


def _partition_box(
    key: str, index: int, part: records.PartitionRecord, ops: collections.Counter[str]
) -> _gmodel.Node:
    failed = part.state != "ort"
    state = "eager (failed)" if failed else "ONNX Runtime"
    label = (
        f"{part.name} · {state}\n"
        f"{len(part.node_names)} nodes · {len(part.sessions)} sessions\n" + _top(ops, 3)
    )
    tooltip = (
        f"{part.name}: {part.error}"
        if failed
        else f"{part.name}: " + ", ".join(f"{t} ×{c}" for t, c in ops.most_common())
    )
    return _gmodel.Node(
        key,
        label,
        kind="partition",
        tooltip=tooltip,
        fill=_style.partition_color(index),
        line=_style.EAGER_LINE if failed else "#555555",
        shape="box3d",
        dashed=failed,
    )


def _collapsed(
    graph: records.GraphRecord,
    nodes: Sequence[FlatNode],
    max_nodes: int,
    expand: set[str],
    highlight: set[str],
    id_prefix: str,
) -> _gmodel.GraphModel:
    """One box per partition, eager nodes around them (grouped when many), the
    partitions in ``expand`` drawn in full when they fit."""
    parts = {p.name: (i, p) for i, p in enumerate(graph.partitions)}
    verdicts = {v.node: v for v in graph.verdicts}
    too_big = {
        n for n in expand if n in parts and len(parts[n][1].node_names) > MAX_DRAWN_NODES
    }
    expand = expand - too_big
    model = _gmodel.GraphModel("fx", node_count=len(nodes))
    model.caption = _graph_caption(graph) + " — collapsed: one box per partition"
    group: dict[str, str] = {}  # FX node name -> drawn item id
    drawn: dict[str, _gmodel.Node] = {}
    op_counts: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    for node in nodes:
        if node.partition in parts:
            op_counts[node.partition][node.target] += 1
    loose = {
        n.name
        for n in nodes
        if n.partition not in parts and n.op not in ("placeholder", "output")
    }
    components = _eager_groups(nodes, loose) if len(loose) > max_nodes else None
    clusters: dict[str, list[Any]] = collections.defaultdict(list)
    members: dict[str, list[FlatNode]] = collections.defaultdict(list)
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"{id_prefix}fx-{counter}"

    placeholders = [n for n in nodes if n.op == "placeholder"]
    if placeholders:
        key = new_id()
        for n in placeholders:
            group[n.name] = key
        drawn[key] = _gmodel.Node(
            key,
            f"{len(placeholders)} inputs",
            kind="placeholder",
            tooltip=", ".join(
                f"{_names_label(graph, n.name)}: {n.value}" for n in placeholders
            ),
            fill=_style.IO_FILL,
            shape="ellipse",
        )
    eager_keys: dict[int, str] = {}
    for node in nodes:
        if node.op == "placeholder":
            continue
        if node.partition in parts:
            index, part = parts[node.partition]  # type: ignore[index]
            if node.partition not in expand:
                key = f"{id_prefix}part-{index}"
                group[node.name] = key
                if key not in drawn:
                    drawn[key] = _partition_box(key, index, part, op_counts[part.name])
                    model.actions[key] = ("partition", part.name)
                continue
            key = new_id()
            group[node.name] = key
            clusters[part.name].append(
                _fx_node(
                    node,
                    key,
                    verdicts.get(node.name),
                    part.state,
                    node.name in highlight,
                    True,
                    graph,
                )
            )
            continue
        if components is not None and node.name in components:
            comp = components[node.name]
            key = eager_keys.get(comp) or new_id()
            eager_keys[comp] = key
            group[node.name] = key
            members[key].append(node)
            continue
        key = new_id()
        group[node.name] = key
        drawn[key] = _fx_node(
            node, key, verdicts.get(node.name), "eager", node.name in highlight, True, graph
        )
    for key, comp_nodes in members.items():
        drawn[key] = _eager_box(key, comp_nodes, verdicts)
    # Boxes standing for several nodes are outlined when any node they hold is highlighted.
    for key in {group[name] for name in highlight if name in group}:
        if key in drawn:
            drawn[key].highlighted = True
    model.items.extend(drawn.values())
    for name, body in clusters.items():
        index, part = parts[name]
        model.ids[name] = f"{id_prefix}part-{index}"
        model.items.append(_cluster(index, part, body, model.ids[name]))
    edges: collections.Counter[tuple[str, str]] = collections.Counter()
    for node in nodes:
        dst = group.get(node.name)
        for src in node.inputs:
            src_key = group.get(src)
            if src_key is not None and dst is not None and src_key != dst:
                edges[(src_key, dst)] += 1
    model.edges = [
        _gmodel.Edge(src, dst, f"×{count}" if count > 1 else "")
        for (src, dst), count in edges.items()
    ]
    for node in nodes:
        model.ids[node.name] = group[node.name]
    for name, (index, _) in parts.items():
        if name not in expand:
            model.ids[name] = f"{id_prefix}part-{index}"
    model.note = (
        f"{len(nodes)} nodes: drawn with one box per partition (more than {max_nodes} "
        "nodes); expand a partition to see its nodes."
    )
    if too_big:
        model.note += (
            f" {', '.join(sorted(too_big))}: more than {MAX_DRAWN_NODES} nodes, drawn as "
            "a box (its module tree shows what is inside)."
        )
    return model


def _names_label(graph: records.GraphRecord, name: str) -> str:
    bound = graph.source_of(name)
    return name if bound == name else f"{bound} ({name})"


def _eager_box(
    key: str, nodes: Sequence[FlatNode], verdicts: dict[str, records.Verdict]
) -> _gmodel.Node:
    targets = collections.Counter(n.target for n in nodes)
    reasons = collections.Counter(verdicts[n.name].reason for n in nodes if n.name in verdicts)
    sources = collections.Counter(
        verdicts[n.name].source
        for n in nodes
        if n.name in verdicts and verdicts[n.name].source
    )
    where = "".join(f"\nfrom {s} ({c})" for s, c in sources.most_common(5))
    return _gmodel.Node(
        key,
        f"eager · {len(nodes)} nodes\n" + _top(targets, 3),
        kind="eager",
        tooltip="runs in PyTorch: "
        + "; ".join(f"{r} ({c})" for r, c in reasons.items())
        + where,
        fill=_style.EAGER_FILL,
        line=_style.EAGER_LINE,
        penwidth=2,
    )


# -- the module tree -------------------------------------------------------------------


def tree_of(obj: Any, graph: records.GraphRecord | None = None) -> _hierarchy.Tree:
    """The module tree of a graph record, a partition (with its ``graph``) or a session
    (with its ``graph``, for the names its inputs bind)."""
    if isinstance(obj, records.GraphRecord):
        return _hierarchy.Tree(_items.graph_items(obj))
    if isinstance(obj, records.PartitionRecord):
        nodes = _items.partition_nodes(obj, graph)
        return _hierarchy.Tree(_items.fx_items(nodes, graph, {obj.name: obj.state}))
    return _hierarchy.Tree(_items.onnx_items(obj, graph))


def module_view(
    obj: Any,
    graph: records.GraphRecord | None = None,
    *,
    expanded: Sequence[str] | None = None,
    highlight: Collection[str] = (),
    id_prefix: str = "",
    tree: _hierarchy.Tree | None = None,
    caption: str = "",
    timeout: float | None = None,
) -> _dot.Rendered:
    """Draws a graph, partition or ONNX model as the model's module tree.

    Modules are collapsed to a readable first level (``embeddings``, ``encoder``,
    ``pooler``), repeated blocks are folded (``layer.0–11 ×12``), and every box says how
    many ops it holds, in which partitions, and how many stay in PyTorch (in red).

    Args:
        obj: A graph record, a partition record or a session record.
        graph: The graph of a partition or session (verdicts, input names).
        expanded: Module paths to open, oldest first (``None``: the first level).
        highlight: Keys (FX node names; ONNX node indices as text) to outline.
        id_prefix: Prefix of the SVG element ids.
        tree: The module tree, when the caller keeps one (else it is built).
        caption: The line on top.
        timeout: Seconds ``dot`` may take.

    Returns:
        A :class:`~ortlab.views._dot.Rendered` whose ``ids`` map node keys and module
        paths to SVG ids and whose ``actions`` say what a click on an element means.
    """
    tree = tree if tree is not None else tree_of(obj, graph)
    if isinstance(obj, records.GraphRecord):
        graph = obj
    model = _layout.layout(
        tree,
        expanded=expanded,
        highlight=highlight,
        id_prefix=id_prefix,
        colors=partition_colors(graph),
        caption=caption,
    )
    return _gmodel.render(model, timeout=timeout)


def partition_view(
    partition: records.PartitionRecord,
    graph: records.GraphRecord | None = None,
    *,
    highlight: Collection[str] = (),
    id_prefix: str = "",
    max_nodes: int = MAX_DRAWN_NODES,
    timeout: float | None = None,
) -> _dot.Rendered:
    """Draws one partition's FX subgraph (its ATen nodes, inputs and outputs); above
    ``max_nodes`` nodes, its module tree.

    Args:
        partition: The partition record.
        graph: Its graph record, for the verdicts shown as tooltips.
        highlight: FX node names to outline.
        id_prefix: Prefix of the SVG element ids.
        max_nodes: Above this many nodes the module tree is drawn.
    """
    verdicts = {v.node: v for v in graph.verdicts} if graph is not None else {}
    index = graph.partitions.index(partition) if graph is not None else 0
    nodes = _items.partition_nodes(partition, graph)
    if len(nodes) > max_nodes:
        caption = f"{partition.name}: FX subgraph ({len(partition.node_names)} ops), by module"
        return module_view(
            partition,
            graph,
            highlight=highlight,
            id_prefix=id_prefix,
            caption=caption,
            timeout=timeout,
        )
    ops = sum(n.op == "call_function" for n in nodes)
    model = _gmodel.GraphModel(
        "partition", f"{partition.name}: FX subgraph ({ops} ops)", node_count=len(nodes)
    )
    body: list[_gmodel.Node | _gmodel.Cluster] = []
    for i, node in enumerate(nodes):
        node_id = f"{id_prefix}fx-{i}"
        model.ids[node.name] = node_id
        model.actions[node_id] = ("item", node.name)
        drawn = _fx_node(
            node,
            node_id,
            verdicts.get(node.name),
            partition.state,
            node.name in highlight,
            True,
            graph,
        )
        (body if node.op == "call_function" else model.items).append(drawn)
    model.items.append(_cluster(index, partition, body, f"{id_prefix}part-{index}"))
    model.edges = _edges(nodes, model.ids)
    return _gmodel.render(model, timeout=timeout)


# -- ONNX view ----------------------------------------------------------------------


@dataclasses.dataclass
class Provenance:
    """Which ONNX nodes each FX node became, and back.

    Attributes:
        fx_to_onnx: FX node name -> indices of ONNX nodes (``model.graph.node``).
        onnx_to_fx: ONNX node index -> FX node name.
    """

    fx_to_onnx: dict[str, tuple[int, ...]]
    onnx_to_fx: dict[int, str]

    def onnx_nodes_of(self, fx_name: str) -> tuple[int, ...]:
        """Indices of the ONNX nodes ``fx_name`` became (empty when none)."""
        return self.fx_to_onnx.get(fx_name, ())

    def fx_node_of(self, onnx_index: int) -> str | None:
        """The FX node the ONNX node ``onnx_index`` came from, or ``None``."""
        return self.onnx_to_fx.get(onnx_index)


def provenance(session: records.SessionRecord) -> Provenance:
    """Links FX nodes and ONNX nodes of a session's model through the exporter metadata."""
    fx_to_onnx: dict[str, list[int]] = collections.defaultdict(list)
    onnx_to_fx: dict[int, str] = {}
    for i, node in enumerate(session.model.graph.node):
        name = records.fx_node_of(node)
        if name:
            fx_to_onnx[name].append(i)
            onnx_to_fx[i] = name
        # FX nodes whose ONNX nodes ortlab folded into this one (Transpose -> Gemm).
        folded = _items.metadata(node, records.FOLDED_FX_NODES_KEY)
        for name in filter(None, folded.split(",")):
            fx_to_onnx[name].append(i)
    return Provenance({k: tuple(v) for k, v in fx_to_onnx.items()}, onnx_to_fx)


def onnx_node_title(session: records.SessionRecord, index: int) -> str:
    """``"Gemm node_addmm"`` for the ONNX node at ``index``."""
    node = session.model.graph.node[index]
    return f"{node.op_type} {node.name}".strip()


def onnx_view(
    session: records.SessionRecord,
    *,
    highlight: Collection[int] = (),
    id_prefix: str = "",
    max_nodes: int = MAX_DRAWN_NODES,
    graph: records.GraphRecord | None = None,
    timeout: float | None = None,
) -> _dot.Rendered:
    """Draws a session's ONNX model: op types, tensor shapes (symbolic dims by name);
    above ``max_nodes`` nodes, its module tree (from the exporter's name scopes).

    Initializers and weights are not drawn: the caption counts them, and a node that
    reads some says how many. Each node's tooltip names the FX node it came from.

    Args:
        session: The session record.
        highlight: ONNX node indices to outline.
        id_prefix: Prefix of the SVG element ids.
        max_nodes: Above this many nodes the module tree is drawn.
        graph: The session's graph record (the names its inputs bind).

    Returns:
        A :class:`~ortlab.views._dot.Rendered` whose ``ids`` map the ONNX node index (as
        text) to SVG element ids.
    """
    model_proto = session.model
    graph_proto = model_proto.graph
    caption = _onnx_caption(session)
    if len(graph_proto.node) > max_nodes:
        return module_view(
            session,
            graph,
            highlight=[str(i) for i in highlight],
            id_prefix=id_prefix,
            caption=caption + " · by module",
            timeout=timeout,
        )
    items = _items.onnx_items(session, graph)
    weights = {i.key for i in items if i.kind == "weight"}
    model = _gmodel.GraphModel("onnx", caption, node_count=len(graph_proto.node))
    for item in items:
        if item.kind == "weight":
            continue
        key = item.key
        node_id = f"{id_prefix}onnx-{key.replace(':', '-')}"
        model.ids[key] = node_id
        if item.kind in ("input", "output"):
            model.items.append(
                _gmodel.Node(
                    node_id,
                    f"{item.name}\n{item.value}",
                    kind=f"onnx-{item.kind}",
                    tooltip=item.tooltip,
                    fill=_style.IO_FILL,
                    shape="ellipse",
                )
            )
            continue
        model.actions[node_id] = ("item", key)
        node = graph_proto.node[int(key)]
        label = node.op_type if not node.domain else f"{node.op_type}\n({node.domain})"
        if node.name:
            label += f"\n{node.name}"
        n_weights = sum(1 for src in item.inputs if src in weights)
        if n_weights:
            label += f"\n+{n_weights} weight{'s' if n_weights > 1 else ''}"
        model.items.append(
            _gmodel.Node(
                node_id,
                label,
                kind="onnx",
                tooltip=item.tooltip,
                fill=_style.FUSED_FILL if node.domain else _style.IDLE_FILL,
                highlighted=int(key) in highlight,
            )
        )
    types = _items.onnx_types(model_proto)
    by_key = {i.key: i for i in items}
    for item in items:
        for src in item.inputs:
            if src in model.ids and item.key in model.ids:
                value = _value_between(by_key[src], item, graph_proto)
                model.edges.append(
                    _gmodel.Edge(model.ids[src], model.ids[item.key], types.get(value, ""))
                )
    return _gmodel.render(model, timeout=timeout)


def _onnx_caption(session: records.SessionRecord) -> str:
    graph = session.model.graph
    opset = ", ".join(
        f"{o.domain or 'ai.onnx'} {o.version}" for o in session.model.opset_import
    )
    init_bytes = sum(len(t.raw_data) for t in graph.initializer)
    folded = (
        f"{len(graph.initializer)} initializers ({init_bytes / 1024:.1f} KiB, not drawn)"
        if graph.initializer
        else "no initializers"
    )
    return (
        f"{session.partition_name} · session {session.index}: {len(graph.node)} ONNX nodes, "
        f"{folded} · {opset}"
    )


def _value_between(src: _items.Item, dst: _items.Item, graph: Any) -> str:
    """The name of the value ``src`` hands to ``dst`` (for the edge's type label)."""
    if src.key.startswith("in:"):
        return src.key[3:]
    outputs = set(graph.node[int(src.key)].output)
    if dst.key.startswith("out:"):
        return graph.output[int(dst.key[4:])].name
    return next((v for v in graph.node[int(dst.key)].input if v in outputs), "")


def highlight_css(element_ids: Iterable[str]) -> str:
    """A ``<style>`` block outlining the SVG elements with these ids (no re-layout)."""
    selectors = []
    for element_id in element_ids:
        safe = re.sub(r"[^A-Za-z0-9_-]", "", element_id)
        if safe:
            selectors += [f"#{safe} polygon", f"#{safe} ellipse", f"#{safe} path"]
    if not selectors:
        return ""
    return (
        "<style>"
        + ", ".join(selectors)
        + f" {{ stroke: {_style.HIGHLIGHT} !important; stroke-width: 4px !important; }}"
        + "</style>"
    )
