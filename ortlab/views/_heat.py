"""The heat overlay of a profile: the FX graph with each node filled by its share of the
call, its modules as clusters, a collapsed module with its total.

# NOTE: colours say a share of the *call*, the same scale in every view of a profile
# (``HEAT_STEPS``). The graph is drawn as every other graph of the lab is: the module
# tree laid out by :mod:`ortlab.views._layout` into the one graph model
# (:mod:`ortlab.views._gmodel`), with the times as its overlay. A graph too large to
# draw node by node keeps its readable first level of modules, each collapsed module
# or folded block with the total of what it holds; edges are the data flow between
# boxes, counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortlab import _html
from ortlab.views import _dot, _fragments, _gmodel, _graphs, _hierarchy, _layout, _style

if TYPE_CHECKING:
    from ortlab.profiling import Profile

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


def heat_overlay(profile: Profile, graph_index: int) -> _gmodel.Overlay:
    """The profile's times of one graph's nodes as an overlay: each node filled by its
    share of the call, a box standing for several by their total."""
    return _gmodel.Overlay(
        {n.node: n.seconds for n in profile.nodes if n.graph_index == graph_index},
        fill=lambda seconds: heat_fill(share(profile, seconds)),
        text=lambda seconds: f"{ms(seconds)} ms ({percent(profile, seconds)}%)",
        combine=sum,
        light_text=frozenset({HEAT[-1]}),
        missing=HEAT[0],
    )


def heat_model(
    profile: Profile,
    graph_index: int = 0,
    *,
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
    id_prefix: str = "",
) -> _gmodel.GraphModel:
    """What :func:`heat_view` draws: the graph's module tree with the heat overlay.

    Raises:
        OrtlabError: the profile has no backend, or no graph ``graph_index``.
    """
    from ortlab import errors

    backend = profile.backend
    if backend is None or not 0 <= graph_index < len(backend.graphs):
        raise errors.OrtlabError(f"the profile has no graph {graph_index} to draw")
    graph = backend.graphs[graph_index]
    tree = _graphs.tree_of(graph)
    computing = sum(1 for item in tree.items.values() if item.kind == "op")
    fits = computing <= min(max_nodes, _graphs.MAX_DRAWN_NODES)
    model = _layout.layout(
        tree,
        expanded=[p for p in tree.modules if p != _hierarchy.ROOT] if fits else None,
        id_prefix=f"{id_prefix}heat-",
        colors=_graphs.partition_colors(graph),
        caption=f"graph {graph_index}: each node's share of the call",
        overlay=heat_overlay(profile, graph_index),
    )
    model.name = "heat"
    if not fits:
        note = f"{computing} nodes: drawn by module, each box with the total of its nodes"
        model.note = "; ".join(filter(None, [note, model.note]))
    return model


def heat_view(
    profile: Profile,
    graph_index: int = 0,
    *,
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
    id_prefix: str = "",
) -> _dot.Rendered:
    """The FX graph with every node filled by its share of the call, drawn as the
    model's module tree (as the Inspector draws it): every module open when the graph
    fits, else its readable first level, each collapsed module or folded block filled by
    and labelled with the total of its nodes.

    Args:
        profile: The profile.
        graph_index: Which of the backend's graphs.
        max_nodes: Computing nodes drawn one by one at most (never more than
            :data:`~ortlab.views._graphs.MAX_DRAWN_NODES`).
        id_prefix: Prefix of the SVG element ids.

    Raises:
        OrtlabError: the profile has no backend, or no graph ``graph_index``.
    """
    return _gmodel.render(
        heat_model(profile, graph_index, max_nodes=max_nodes, id_prefix=id_prefix)
    )


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
