"""Graph views: FX graphs with ORT partitions as clusters, ONNX models, and provenance.

# NOTE: a :class:`~ortlab.backend.records.GraphRecord` holds the graph after partitioning
# (``fused_*`` call_module nodes whose sub-GraphModules are the partitions' graphs). The
# FX view inlines each partition's nodes back into one flat node list, so that every
# original node is drawn, inside a cluster per partition:
#
#   partitioned:  x -> fused_1 -> soft_clip -> fused_0 -> getitem -> out
#   drawn:        x -> [t -> addmm -> relu] -> soft_clip -> [t_1 -> addmm_1] -> out
#                       cluster fused_1                       cluster fused_0
#
# (``getitem`` nodes that only unpack a partition's outputs are edges, not nodes.)
# Large graphs (more than ``max_nodes``) are drawn collapsed: one box per partition with
# its node count, eager nodes around them, and any partition named in ``expand`` drawn in
# full. Collapsing keeps ``dot`` in the sub-second range for thousands of nodes.
#
# Provenance: the exporter stamps each ONNX node's ``metadata_props`` with
# ``pkg.torch.onnx.fx_node`` = the FX node's text (``"%addmm : [num_users=1] = ..."``);
# :func:`provenance` parses the name back and links FX nodes to the ONNX nodes they became.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import re
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ortlab.backend import records
from ortlab.views import _dot, _style

if TYPE_CHECKING:
    import onnx
    import torch.fx

DEFAULT_MAX_NODES = 300
"""Graphs with more nodes than this are drawn with partitions collapsed."""

MAX_DRAWN_NODES = 1500
"""A partition or ONNX graph larger than this is not laid out; a table stands in (every
view of one partition: its FX graph, its ONNX model, their numerics overlays)."""

NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"


def value_text(value: Any) -> str:
    """Compact type text of an FX ``meta['val']``: ``float32[s77,16]``, ``SymInt s77``."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        dims = ",".join(str(d) for d in shape)
        return f"{str(dtype).removeprefix('torch.')}[{dims}]"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(value_text(v) for v in value) + ")"
    if value is None:
        return ""
    return f"{type(value).__name__} {value}"


def target_text(node: torch.fx.Node) -> str:
    """A node's target as text: ``aten.addmm.default``, ``<built-in function getitem>``."""
    return str(node.target)


# -- flattening the partitioned graph ---------------------------------------------------


@dataclasses.dataclass
class FlatNode:
    """One node of a graph record, with its partition (``None`` outside any)."""

    name: str
    op: str
    target: str
    inputs: tuple[str, ...]
    partition: str | None
    value: str = ""


def _leaves(arg: Any) -> Iterable[Any]:
    if isinstance(arg, (list, tuple)):
        for a in arg:
            yield from _leaves(a)
    elif isinstance(arg, dict):
        for a in arg.values():
            yield from _leaves(a)
    else:
        yield arg


def _inputs(node: torch.fx.Node, alias: dict[Any, Any]) -> tuple[str, ...]:
    names: list[str] = []
    for arg in _leaves((node.args, node.kwargs)):
        if hasattr(arg, "op") and hasattr(arg, "name"):  # a torch.fx.Node
            resolved = alias.get(arg, arg.name)
            if isinstance(resolved, tuple):
                names.extend(resolved)
            else:
                names.append(resolved)
    return tuple(dict.fromkeys(names))


def flat_nodes(graph: records.GraphRecord) -> list[FlatNode]:
    """Every node of ``graph`` with its partition, partitions inlined (see module NOTE).

    Works both on a partitioned graph (``fused_*`` call_module nodes) and on an
    unpartitioned one (membership then comes from ``PartitionRecord.node_names``).
    """
    gm = graph.partitioned if graph.partitioned is not None else graph.graph_module
    parts = {p.name: p for p in graph.partitions}
    verdicts = {v.node: v for v in graph.verdicts}
    fused = {
        n
        for n in gm.graph.nodes
        if n.op == "call_module" and n.target in parts and parts[n.target].graph_module
    }
    member_of = {}
    if not fused:
        member_of = {name: p.name for p in graph.partitions for name in p.node_names}
    alias: dict[Any, Any] = {}
    out: list[FlatNode] = []

    def add(node: torch.fx.Node, partition: str | None, inputs: tuple[str, ...]) -> None:
        verdict = verdicts.get(node.name)
        target = verdict.target if verdict is not None else target_text(node)
        if node.op == "call_module":
            target = str(node.target)
        out.append(
            FlatNode(
                node.name, node.op, target, inputs, partition, value_text(node.meta.get("val"))
            )
        )

    for node in gm.graph.nodes:
        if node in fused:
            part = parts[node.target]
            sub = part.graph_module.graph
            outer_args = [a for a in _leaves(node.args)]
            inner_alias: dict[Any, Any] = {}
            placeholders = [n for n in sub.nodes if n.op == "placeholder"]
            for ph, arg in zip(placeholders, outer_args):
                if hasattr(arg, "op") and hasattr(arg, "name"):
                    inner_alias[ph] = alias.get(arg, arg.name)
                else:
                    inner_alias[ph] = ()
            outputs: tuple[str, ...] = ()
            for inner in sub.nodes:
                if inner.op == "placeholder":
                    continue
                if inner.op == "output":
                    outputs = _inputs(inner, inner_alias)
                    continue
                add(inner, part.name, _inputs(inner, inner_alias))
            alias[node] = outputs[0] if len(outputs) == 1 else outputs
            continue
        if (
            node.op == "call_function"
            and node.target is operator.getitem
            and node.args
            and node.args[0] in fused
        ):
            produced = alias[node.args[0]]
            index = node.args[1]
            if isinstance(produced, tuple) and isinstance(index, int):
                alias[node] = produced[index]
            else:
                alias[node] = produced
            continue
        add(node, member_of.get(node.name), _inputs(node, alias))
    return out


# -- FX graph view ------------------------------------------------------------------


def _verdict_tooltip(
    name: str, target: str, verdict: records.Verdict | None, partition: str | None, state: str
) -> str:
    if partition is not None and state == "ort":
        where = f"runs in ONNX Runtime ({partition})"
    elif partition is not None:
        where = f"runs in PyTorch: partition {partition} fell back to eager"
    else:
        where = "runs in PyTorch (eager)"
    reason = f": {verdict.reason}" if verdict is not None else ""
    source = f"\nfrom {verdict.source}" if verdict is not None and verdict.source else ""
    return f"{name} = {target}\n{where}{reason}{source}"


def _fx_node_stmt(
    node: FlatNode,
    node_id: str,
    verdict: records.Verdict | None,
    state: str,
    highlighted: bool,
    show_values: bool,
) -> str:
    if node.op in ("placeholder", "output", "get_attr"):
        label = node.name if node.op != "output" else "output"
        if show_values and node.value and node.op != "output":
            label += "\n" + node.value
        extra = {
            "shape": "ellipse",
            "fillcolor": _style.IO_FILL,
            "tooltip": f"{node.op} {node.name}",
        }
        cls = f"ortlab-{node.op}"
    else:
        label = f"{node.name}\n{node.target}"
        if show_values and node.value:
            label += "\n" + node.value
        eager = node.partition is None or state != "ort"
        tooltip = _verdict_tooltip(node.name, node.target, verdict, node.partition, state)
        if eager:
            extra = {
                "fillcolor": _style.EAGER_FILL,
                "color": _style.EAGER_LINE,
                "penwidth": "2",
                "tooltip": tooltip,
            }
            cls = "ortlab-eager"
        else:
            extra = {"fillcolor": "white", "tooltip": tooltip}
            cls = "ortlab-ort"
    if highlighted:
        extra.update(color=_style.HIGHLIGHT, penwidth="4")
    attributes = _dot.attrs(label=label, id=node_id, **{"class": cls}, **extra)
    return f"{_dot.quote(node_id)} {attributes};"


def _cluster(
    index: int,
    part: records.PartitionRecord,
    body: Sequence[str],
    node_count: int,
    cluster_id: str | None = None,
) -> str:
    failed = part.state != "ort"
    state = "eager (failed)" if failed else "ONNX Runtime"
    label = f"{part.name} · {state} · {node_count} nodes · {len(part.sessions)} sessions"
    tooltip = f"{part.name}: {part.error}" if failed else label
    style = "dashed,rounded,filled" if failed else "rounded,filled"
    graph_attrs = _dot.attrs(
        label=label,
        tooltip=tooltip,
        style=style,
        fillcolor=_style.partition_color(index),
        color=_style.EAGER_LINE if failed else "#777777",
        id=cluster_id,
    )
    return f"subgraph cluster_{index} {{\ngraph {graph_attrs};\n" + "\n".join(body) + "\n}"


def fx_graph_view(
    graph: records.GraphRecord,
    *,
    max_nodes: int = DEFAULT_MAX_NODES,
    expand: Collection[str] = (),
    highlight: Collection[str] = (),
    id_prefix: str = "",
    show_values: bool = True,
) -> _dot.Rendered:
    """Draws a graph record: partitions as coloured clusters, eager nodes in red.

    Each node's tooltip is its verdict (where it runs and why) and the line of the user's
    code it comes from. Above ``max_nodes`` nodes the graph is drawn collapsed: one box
    per partition (node and session counts) except the partitions named in ``expand``.

    Args:
        graph: The graph record (``backend.graphs[i]``).
        max_nodes: Node count above which partitions are collapsed.
        expand: Partition names drawn in full even when collapsed.
        highlight: FX node names to outline (in collapsed partitions: their box).
        id_prefix: Prefix of the SVG element ids (unique per page).
        show_values: Show each node's type and shape (``float32[s77,16]``).

    Returns:
        A :class:`~ortlab.views._dot.Rendered` whose ``ids`` map FX node names (and
        partition names) to SVG element ids.
    """
    nodes = flat_nodes(graph)
    collapsed = len(nodes) > max_nodes
    if collapsed:
        return _collapsed_view(graph, nodes, max_nodes, set(expand), set(highlight), id_prefix)
    parts = {p.name: (i, p) for i, p in enumerate(graph.partitions)}
    verdicts = {v.node: v for v in graph.verdicts}
    ids: dict[str, str] = {}
    for i, node in enumerate(nodes):
        ids[node.name] = f"{id_prefix}fx-{i}"
    by_part: dict[str | None, list[str]] = collections.defaultdict(list)
    for node in nodes:
        state = parts[node.partition][1].state if node.partition in parts else "eager"
        stmt = _fx_node_stmt(
            node,
            ids[node.name],
            verdicts.get(node.name),
            state,
            node.name in highlight,
            show_values,
        )
        by_part[node.partition if node.partition in parts else None].append(stmt)
    lines = ["digraph fx {", _style.GRAPH_ATTRS]
    lines.append(
        "graph " + _dot.attrs(label=_graph_caption(graph), labelloc="t", labeljust="l") + ";"
    )
    lines.extend(by_part.pop(None, []))
    for name, body in by_part.items():
        assert name is not None  # eager nodes were popped above
        index, part = parts[name]
        ids[name] = f"{id_prefix}part-{index}"
        lines.append(_cluster(index, part, body, len(body), ids[name]))
    return _finish(lines, nodes, ids)


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


def _collapsed_view(
    graph: records.GraphRecord,
    nodes: Sequence[FlatNode],
    max_nodes: int,
    expand: set[str],
    highlight: set[str],
    id_prefix: str,
) -> _dot.Rendered:
    parts = {p.name: (i, p) for i, p in enumerate(graph.partitions)}
    verdicts = {v.node: v for v in graph.verdicts}
    group: dict[str, str] = {}  # FX node name -> drawn item key
    items: dict[str, str] = {}  # drawn item key -> DOT statement
    ids: dict[str, str] = {}
    op_counts: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    members: dict[str, list[FlatNode]] = collections.defaultdict(list)
    for node in nodes:
        if node.partition in parts:
            members[node.partition].append(node)
            op_counts[node.partition][node.target] += 1
    placeholders = [n for n in nodes if n.op == "placeholder"]
    loose = {
        n.name
        for n in nodes
        if n.partition not in parts and n.op not in ("placeholder", "output")
    }
    components = _eager_groups(nodes, loose) if len(loose) > max_nodes else None
    expanded_stmts: dict[str, list[str]] = collections.defaultdict(list)
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"{id_prefix}fx-{counter}"

    if placeholders:
        key = new_id()
        for n in placeholders:
            group[n.name] = key
        items[key] = f"{_dot.quote(key)} " + _dot.attrs(
            label=f"{len(placeholders)} inputs",
            tooltip=", ".join(f"{n.name}: {n.value}" for n in placeholders),
            shape="ellipse",
            fillcolor=_style.IO_FILL,
            id=key,
        )
    eager_keys: dict[int, str] = {}
    component_members: dict[str, list[FlatNode]] = collections.defaultdict(list)
    for node in nodes:
        if node.op == "placeholder":
            continue
        if node.partition in parts and node.partition not in expand:
            index, part = parts[node.partition]  # type: ignore[index]
            key = f"{id_prefix}part-{index}"
            group[node.name] = key
            if key not in items:
                items[key] = _partition_box(key, index, part, op_counts[part.name])
            continue
        if node.partition in parts:
            index, part = parts[node.partition]  # type: ignore[index]
            key = new_id()
            group[node.name] = key
            expanded_stmts[node.partition].append(
                _fx_node_stmt(
                    node,
                    key,
                    verdicts.get(node.name),
                    part.state,
                    node.name in highlight,
                    True,
                )
            )
            continue
        if components is not None and node.name in components:
            comp = components[node.name]
            key = eager_keys.get(comp) or new_id()
            eager_keys[comp] = key
            group[node.name] = key
            component_members[key].append(node)
            continue
        key = new_id()
        group[node.name] = key
        items[key] = _fx_node_stmt(
            node, key, verdicts.get(node.name), "eager", node.name in highlight, True
        )
    for key, comp_nodes in component_members.items():
        targets = collections.Counter(n.target for n in comp_nodes)
        reasons = collections.Counter(
            verdicts[n.name].reason for n in comp_nodes if n.name in verdicts
        )
        sources = collections.Counter(
            verdicts[n.name].source
            for n in comp_nodes
            if n.name in verdicts and verdicts[n.name].source
        )
        where = "".join(f"\nfrom {s} ({c})" for s, c in sources.most_common(5))
        items[key] = f"{_dot.quote(key)} " + _dot.attrs(
            label=f"eager · {len(comp_nodes)} nodes\n" + _top(targets, 3),
            tooltip="runs in PyTorch: "
            + "; ".join(f"{r} ({c})" for r, c in reasons.items())
            + where,
            fillcolor=_style.EAGER_FILL,
            color=_style.EAGER_LINE,
            penwidth="2",
            id=key,
            **{"class": "ortlab-eager"},
        )
    # Boxes standing for several nodes (partitions, inputs, eager groups) are outlined when
    # any node they hold is highlighted; single nodes were outlined when drawn.
    for key in {group[name] for name in highlight if name in group}:
        statement = items.get(key, "")
        if statement.endswith("]") and 'penwidth="4"' not in statement:
            items[key] = statement[:-1] + f', color="{_style.HIGHLIGHT}", penwidth="4"]'
    lines = ["digraph fx {", _style.GRAPH_ATTRS]
    caption = _graph_caption(graph) + " — collapsed: one box per partition"
    lines.append("graph " + _dot.attrs(label=caption, labelloc="t", labeljust="l") + ";")
    lines.extend(s if s.endswith(";") else s + ";" for s in items.values())
    for name, body in expanded_stmts.items():
        index, part = parts[name]
        ids[name] = f"{id_prefix}part-{index}"
        lines.append(_cluster(index, part, body, len(body), ids[name]))
    edges: collections.Counter[tuple[str, str]] = collections.Counter()
    for node in nodes:
        dst = group.get(node.name)
        for src in node.inputs:
            src_key = group.get(src)
            if src_key is not None and dst is not None and src_key != dst:
                edges[(src_key, dst)] += 1
    for (src, dst), count in edges.items():
        label = f" [label={_dot.quote(f'×{count}')}]" if count > 1 else ""
        lines.append(f"{_dot.quote(src)} -> {_dot.quote(dst)}{label};")
    lines.append("}")
    for node in nodes:
        ids[node.name] = group[node.name]
    for name, (index, _) in parts.items():
        if name not in expand:
            ids[name] = f"{id_prefix}part-{index}"
    note = (
        f"{len(nodes)} nodes: drawn with one box per partition (more than {max_nodes} "
        "nodes); expand a partition to see its nodes."
    )
    return _dot.render("\n".join(lines), ids, note=note, node_count=len(nodes))


def _top(counter: collections.Counter[str], n: int) -> str:
    shown = [
        f"{t.rsplit('.', 1)[0] if t.endswith('.default') else t} ×{c}"
        for t, c in counter.most_common(n)
    ]
    if len(counter) > n:
        shown.append(f"… {len(counter) - n} more op types")
    return "\n".join(shown)


def _partition_box(
    key: str, index: int, part: records.PartitionRecord, ops: collections.Counter[str]
) -> str:
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
    return f"{_dot.quote(key)} " + _dot.attrs(
        label=label,
        tooltip=tooltip,
        shape="box3d",
        style="filled,dashed" if failed else "filled",
        fillcolor=_style.partition_color(index),
        color=_style.EAGER_LINE if failed else "#555555",
        id=key,
        **{"class": "ortlab-partition"},
    )


def partition_view(
    partition: records.PartitionRecord,
    graph: records.GraphRecord | None = None,
    *,
    highlight: Collection[str] = (),
    id_prefix: str = "",
    max_nodes: int = MAX_DRAWN_NODES,
) -> _dot.Rendered:
    """Draws one partition's FX subgraph (its ATen nodes, inputs and outputs).

    Args:
        partition: The partition record.
        graph: Its graph record, for the verdicts shown as tooltips.
        highlight: FX node names to outline.
        id_prefix: Prefix of the SVG element ids.
        max_nodes: Above this many nodes no layout is attempted (a note says so).
    """
    verdicts = {v.node: v for v in graph.verdicts} if graph is not None else {}
    index = graph.partitions.index(partition) if graph is not None else 0
    nodes = []
    for node in partition.graph_module.graph.nodes:
        verdict = verdicts.get(node.name)
        target = verdict.target if verdict is not None else target_text(node)
        inputs = _inputs(node, {})
        nodes.append(
            FlatNode(
                node.name,
                node.op,
                target,
                inputs,
                partition.name if node.op == "call_function" else None,
                value_text(node.meta.get("val")),
            )
        )
    ids = {n.name: f"{id_prefix}fx-{i}" for i, n in enumerate(nodes)}
    if len(nodes) > max_nodes:
        return _too_large(len(nodes), max_nodes, ids)
    lines = ["digraph partition {", _style.GRAPH_ATTRS]
    caption = (
        f"{partition.name}: FX subgraph ({sum(n.op == 'call_function' for n in nodes)} ops)"
    )
    lines.append("graph " + _dot.attrs(label=caption, labelloc="t", labeljust="l") + ";")
    body = []
    for node in nodes:
        stmt = _fx_node_stmt(
            node,
            ids[node.name],
            verdicts.get(node.name),
            partition.state,
            node.name in highlight,
            True,
        )
        if node.op == "call_function":
            body.append(stmt)
        else:
            lines.append(stmt)
    lines.append(_cluster(index, partition, body, len(body), f"{id_prefix}part-{index}"))
    return _finish(lines, nodes, ids)


def _too_large(count: int, limit: int, ids: dict[str, str]) -> _dot.Rendered:
    return _dot.Rendered(
        "",
        None,
        ids,
        note=f"{count} nodes: too many to lay out (limit {limit}); see the tables instead.",
        node_count=count,
    )


# -- ONNX view ----------------------------------------------------------------------


def _onnx_types(model: onnx.ModelProto) -> dict[str, str]:
    from ortlab.backend import records

    types = {}
    graph = model.graph
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.type.HasField("tensor_type"):
            try:
                types[vi.name] = records.value_info_text(vi)
            except (KeyError, ValueError, TypeError):
                types[vi.name] = vi.name
    return types


def _metadata(node: onnx.NodeProto, key: str) -> str:
    return next((p.value for p in node.metadata_props if p.key == key), "")


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
        for folded in filter(None, _metadata(node, records.FOLDED_FX_NODES_KEY).split(",")):
            fx_to_onnx[folded].append(i)
    return Provenance({k: tuple(v) for k, v in fx_to_onnx.items()}, onnx_to_fx)


def onnx_node_title(session: records.SessionRecord, index: int) -> str:
    """``"Gemm node_addmm"`` for the ONNX node at ``index``."""
    node = session.model.graph.node[index]
    return f"{node.op_type} {node.name}".strip()


def _finish(lines: list[str], nodes: Sequence[Any], ids: dict[str, str]) -> Any:
    """Adds the FX edges between drawn nodes, closes the graph and renders it."""
    for node in nodes:
        for src in node.inputs:
            if src in ids:
                lines.append(f"{_dot.quote(ids[src])} -> {_dot.quote(ids[node.name])};")
    lines.append("}")
    return _dot.render("\n".join(lines), ids, node_count=len(nodes))


def _onnx_io_line(key: str, name: str, types: dict[str, str], kind: str) -> str:
    """DOT statement for an ONNX graph input or output (``kind``: "input" / "output")."""
    return (
        f"{_dot.quote(key)} "
        + _dot.attrs(
            label=f"{name}\n{types.get(name, '')}",
            shape="ellipse",
            fillcolor=_style.IO_FILL,
            tooltip=f"{kind} {name}: {types.get(name, '?')}",
            id=key,
            **{"class": f"ortlab-onnx-{kind}"},
        )
        + ";"
    )


def onnx_view(
    session: records.SessionRecord,
    *,
    highlight: Collection[int] = (),
    id_prefix: str = "",
    max_nodes: int = MAX_DRAWN_NODES,
) -> _dot.Rendered:
    """Draws a session's ONNX model: op types, tensor shapes (symbolic dims by name).

    Initializers are not drawn: the caption counts them, and a node that reads some says
    how many. Each node's tooltip names the FX node it came from.

    Args:
        session: The session record.
        highlight: ONNX node indices to outline.
        id_prefix: Prefix of the SVG element ids.
        max_nodes: Above this many nodes no layout is attempted (a note says so).

    Returns:
        A :class:`~ortlab.views._dot.Rendered` whose ``ids`` map the ONNX node index (as
        text) to SVG element ids.
    """
    model = session.model
    graph = model.graph
    ids = {str(i): f"{id_prefix}onnx-{i}" for i in range(len(graph.node))}
    if len(graph.node) > max_nodes:
        return _too_large(len(graph.node), max_nodes, ids)
    types = _onnx_types(model)
    initializers = {t.name for t in graph.initializer} | {
        t.values.name for t in graph.sparse_initializer
    }
    init_bytes = sum(len(t.raw_data) for t in graph.initializer)
    producer: dict[str, str] = {}
    lines = ["digraph onnx {", _style.GRAPH_ATTRS]
    opset = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    folded = (
        f"{len(initializers)} initializers ({init_bytes / 1024:.1f} KiB, not drawn)"
        if initializers
        else "no initializers"
    )
    caption = (
        f"{session.partition_name} · session {session.index}: {len(graph.node)} ONNX nodes, "
        f"{folded} · {opset}"
    )
    lines.append("graph " + _dot.attrs(label=caption, labelloc="t", labeljust="l") + ";")
    for j, vi in enumerate(graph.input):
        if vi.name in initializers:
            continue
        key = f"{id_prefix}onnx-in-{j}"
        producer[vi.name] = key
        lines.append(_onnx_io_line(key, vi.name, types, "input"))
    fx_names = []
    for i, node in enumerate(graph.node):
        key = ids[str(i)]
        for out in node.output:
            if out:
                producer[out] = key
        n_init = sum(1 for x in node.input if x in initializers)
        fx = records.fx_node_of(node)
        fx_names.append(fx)
        label = node.op_type if not node.domain else f"{node.op_type}\n({node.domain})"
        if node.name:
            label += f"\n{node.name}"
        if n_init:
            label += f"\n+{n_init} initializer{'s' if n_init > 1 else ''}"
        scopes = _metadata(node, NAME_SCOPES_KEY)
        tooltip = f"{node.op_type} {node.name}".strip()
        tooltip += f"\nfrom FX node: {fx}" if fx else "\n(no FX provenance)"
        if scopes:
            tooltip += f"\nmodule: {scopes}"
        extra: dict[str, str] = {}
        if i in highlight:
            extra = {"color": _style.HIGHLIGHT, "penwidth": "4"}
        lines.append(
            f"{_dot.quote(key)} "
            + _dot.attrs(
                label=label, tooltip=tooltip, id=key, **{"class": "ortlab-onnx"}, **extra
            )
            + ";"
        )
    for j, vi in enumerate(graph.output):
        key = f"{id_prefix}onnx-out-{j}"
        lines.append(_onnx_io_line(key, vi.name, types, "output"))
        src = producer.get(vi.name)
        if src is not None:
            lines.append(f"{_dot.quote(src)} -> {_dot.quote(key)};")
    for i, node in enumerate(graph.node):
        for name in node.input:
            src = producer.get(name)
            if src is not None:
                label = types.get(name)
                lines.append(
                    f"{_dot.quote(src)} -> {_dot.quote(ids[str(i)])}"
                    + (f" [label={_dot.quote(label)}]" if label else "")
                    + ";"
                )
    lines.append("}")
    return _dot.render("\n".join(lines), ids, node_count=len(graph.node))


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
