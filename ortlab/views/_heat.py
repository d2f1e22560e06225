"""The heat overlay of a profile: the FX graph with each node filled by its share of the
call, or one box per module (with the module's total) when the graph is large.

# NOTE: colours say a share of the *call*, the same scale in every view of a profile
# (``HEAT_STEPS``). A graph with more than ``max_nodes`` computing nodes is drawn one box
# per module at the deepest module level that still fits, each box with the total and
# node count of what it holds; edges are the data flow between boxes, counted. Model
# strings reach Graphviz through ``_dot.quote`` (via ``_dot.attrs``).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ortlab import _html
from ortlab.views import _dot, _fragments, _graphs, _style

if TYPE_CHECKING:
    from ortlab.profiling import NodeTime, Profile

HEAT = ("#ffffff", "#fff5d6", "#fee391", "#fdae61", "#f46d43", "#d73027")
"""Fills from no time to the most: a node's share of the call (see :func:`heat_fill`)."""
HEAT_STEPS = (0.001, 0.01, 0.05, 0.15, 0.4)
"""Upper bounds of each fill's share of the call (the last fill above the last bound)."""
PART_FILL = "#d9d9d9"
"""Parts of the call outside the model's modules (Dynamo, glue, unattributed)."""


def heat_fill(share: float) -> str:
    """The fill of something taking ``share`` of the call."""
    if share <= 0:
        return HEAT[0]
    for fill, bound in zip(HEAT[1:], HEAT_STEPS):
        if share < bound:
            return fill
    return HEAT[-1]


HEAT_LEGEND = _style.legend(
    [
        (f"background:{HEAT[1]}", "< 0.1% of the call"),
        (f"background:{HEAT[2]}", "< 1%"),
        (f"background:{HEAT[3]}", "< 5%"),
        (f"background:{HEAT[4]}", "< 15%"),
        (f"background:{HEAT[5]};color:white", "≥ 15%"),
        (f"background:{PART_FILL}", "outside the model (Dynamo, glue, rest)"),
    ]
)


def ms(seconds: float) -> str:
    """Milliseconds as table text (three significant digits)."""
    return _html.number(seconds * 1e3)


def share(profile: Profile, seconds: float) -> float:
    """``seconds`` as a fraction of the profile's call."""
    return seconds / profile.call_seconds if profile.call_seconds > 0 else 0.0


def percent(profile: Profile, seconds: float) -> str:
    """``seconds`` as a percentage of the profile's call, one decimal."""
    return f"{share(profile, seconds) * 100:.1f}"


def _node_label(node: Any, t: NodeTime | None, profile: Profile) -> str:
    target = (
        node.target.rsplit(".default", 1)[0]
        if node.target.endswith(".default")
        else node.target
    )
    if t is None:
        return f"{node.name}\n{target}"
    return f"{node.name}\n{target}\n{ms(t.seconds)} ms ({percent(profile, t.seconds)}%)"


def heat_view(
    profile: Profile,
    graph_index: int = 0,
    *,
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
    id_prefix: str = "",
) -> _dot.Rendered:
    """The FX graph with every node filled by its share of the call (a graph above
    ``max_nodes`` nodes: one box per module, with the module's total).

    Raises:
        OrtlabError: the profile has no backend, or no graph ``graph_index``.
    """
    from ortlab import errors

    backend = profile.backend
    if backend is None or not 0 <= graph_index < len(backend.graphs):
        raise errors.OrtlabError(f"the profile has no graph {graph_index} to draw")
    graph = backend.graphs[graph_index]
    nodes = _graphs.flat_nodes(graph)
    times = {n.node: n for n in profile.nodes if n.graph_index == graph_index}
    computing = [n for n in nodes if n.op not in ("placeholder", "output")]
    if len(computing) > max_nodes:
        return _module_heat(profile, graph_index, nodes, times, max_nodes, id_prefix)
    lines = ["digraph heat {", _style.GRAPH_ATTRS]
    ids: dict[str, str] = {}
    inputs_key = f"{id_prefix}heat-inputs"
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if placeholders:
        lines.append(
            f"{_dot.quote(inputs_key)} "
            + _dot.attrs(
                label=f"{len(placeholders)} inputs",
                shape="ellipse",
                fillcolor=_style.IO_FILL,
                tooltip=", ".join(n.name for n in placeholders),
                id=inputs_key,
            )
            + ";"
        )
    for i, node in enumerate(nodes):
        key = f"{id_prefix}heat-{i}"
        ids[node.name] = inputs_key if node.op == "placeholder" else key
        if node.op == "placeholder":
            continue
        t = times.get(node.name)
        if node.op == "output":
            lines.append(
                f"{_dot.quote(key)} "
                + _dot.attrs(label="output", shape="ellipse", fillcolor=_style.IO_FILL, id=key)
                + ";"
            )
            continue
        part = share(profile, t.seconds) if t is not None else 0.0
        where = ""
        if t is not None:
            runs_in = (
                f"ONNX Runtime {t.partition or ''}" if t.placement == "ort" else "PyTorch"
            )
            where = f"\n{runs_in}\nmodule {t.module or '(model)'}\n{t.source}"
        lines.append(
            f"{_dot.quote(key)} "
            + _dot.attrs(
                label=_node_label(node, t, profile),
                fillcolor=heat_fill(part),
                fontcolor="white" if heat_fill(part) == HEAT[-1] else None,
                tooltip=f"{node.name} = {node.target}{where}",
                id=key,
                color=_style.EAGER_LINE if t is not None and t.placement == "eager" else None,
            )
            + ";"
        )
    edges = set()
    for node in nodes:
        for src in node.inputs:
            if src in ids and node.name in ids and ids[src] != ids[node.name]:
                edges.add((ids[src], ids[node.name]))
    lines.extend(f"{_dot.quote(a)} -> {_dot.quote(b)};" for a, b in sorted(edges))
    lines.append("}")
    return _dot.render("\n".join(lines), ids, node_count=len(nodes))


def _module_heat(
    profile: Profile,
    graph_index: int,
    nodes: Sequence[Any],
    times: dict[str, NodeTime],
    max_nodes: int,
    id_prefix: str,
) -> _dot.Rendered:
    """One box per module at the deepest level with at most ``max_nodes`` boxes."""

    def key_at(name: str, depth: int) -> str:
        t = times.get(name)
        stack = [p for p, _ in t.modules if p] if t is not None else []
        return stack[min(depth, len(stack)) - 1] if stack and depth > 0 else "(model)"

    computing = [n for n in nodes if n.op not in ("placeholder", "output")]
    depth = 1
    while depth < 32:
        deeper = {key_at(n.name, depth + 1) for n in computing}
        if len(deeper) > max_nodes or deeper == {key_at(n.name, depth) for n in computing}:
            break
        depth += 1
    group = {n.name: key_at(n.name, depth) for n in computing}
    totals: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter[str] = collections.Counter()
    classes: dict[str, str] = {}
    for n in computing:
        g = group[n.name]
        t = times.get(n.name)
        counts[g] += 1
        if t is not None:
            totals[g] += t.seconds
            classes.setdefault(g, next((c for p, c in t.modules if p == g), ""))
    ids: dict[str, str] = {}
    keys = {g: f"{id_prefix}heatm-{i}" for i, g in enumerate(dict.fromkeys(group.values()))}
    lines = ["digraph heat {", _style.GRAPH_ATTRS]
    for g, key in keys.items():
        part = share(profile, totals[g])
        cls = f" ({classes[g]})" if classes.get(g) else ""
        label = f"{g}{cls}\n{counts[g]} nodes · {ms(totals[g])} ms ({part * 100:.1f}%)"
        lines.append(
            f"{_dot.quote(key)} "
            + _dot.attrs(
                label=label,
                shape="box3d",
                fillcolor=heat_fill(part),
                fontcolor="white" if heat_fill(part) == HEAT[-1] else None,
                tooltip=f"module {g}: {ms(totals[g])} ms over {counts[g]} nodes",
                id=key,
            )
            + ";"
        )
    for n in computing:
        ids[n.name] = keys[group[n.name]]
    edges: collections.Counter[tuple[str, str]] = collections.Counter()
    for n in computing:
        for src in n.inputs:
            a, b = ids.get(src), ids.get(n.name)
            if a and b and a != b:
                edges[(a, b)] += 1
    lines.extend(f"{_dot.quote(a)} -> {_dot.quote(b)};" for (a, b) in sorted(edges))
    lines.append("}")
    note = (
        f"{len(computing)} nodes: drawn one box per module (module depth {depth}), "
        "each with the total of its nodes"
    )
    return _dot.render("\n".join(lines), ids, note=note, node_count=len(nodes))


def heat_html(
    profile: Profile, *, max_nodes: int = _graphs.DEFAULT_MAX_NODES, id_prefix: str = ""
) -> str:
    """Every graph the call ran, with its heat overlay."""
    if profile.backend is None:
        return ""
    shown = sorted({n.graph_index for n in profile.nodes})
    fallback = _fragments.note("the nodes' times are in the tables above")
    out = []
    for index in shown:
        rendered = heat_view(
            profile, index, max_nodes=max_nodes, id_prefix=f"{id_prefix}g{index}-"
        )
        out.append(f"<h4>Graph {index}</h4>" + _fragments.graph_html(rendered, fallback))
    return HEAT_LEGEND + "".join(out)
