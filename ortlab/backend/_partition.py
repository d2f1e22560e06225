"""Partitioning: fusing the supported nodes of a graph into ``fused_*`` submodules.

# NOTE: ``CapabilityBasedPartitioner`` groups supported nodes into the largest
# partitions that keep the graph acyclic, and ``fuse_partitions`` replaces each group by
# a ``call_module`` of a sub-GraphModule:
#
#   before:  x -> addmm -> sigmoid -> addmm -> custom_op -> relu -> out
#   after:   x -> fused_0 ------------------> custom_op -> fused_1 -> out
#
# Groups smaller than ``min_partition_size`` are not fused: their nodes stay in the
# graph and run in PyTorch (the backend records why on their verdicts).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner


@dataclasses.dataclass
class Partitioning:
    """The result of :func:`partition_graph`."""

    graph_module: torch.fx.GraphModule
    """The graph with each partition fused into a ``fused_*`` submodule."""
    members: list[tuple[str, tuple[str, ...]]]
    """``(submodule name, names of the graph's nodes it holds)`` per partition."""
    too_small: dict[str, int] = dataclasses.field(default_factory=dict)
    """Node name -> size of its group, for supported nodes left unfused because their
    group was smaller than ``min_size``."""


def _size(nodes: Any) -> int:
    """Nodes that count towards a partition's size (``getitem`` only unpacks)."""
    return sum(1 for n in nodes if n.target is not operator.getitem)


def partition_graph(
    gm: torch.fx.GraphModule, support: Any, *, min_size: int = 1
) -> Partitioning:
    """Fuses the nodes ``support`` accepts into partitions of at least ``min_size`` nodes.

    ``gm`` is rewritten in place (pass a copy to keep the original).
    """
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    proposed = partitioner.propose_partitions()
    too_small: dict[str, int] = {}
    partitions = []
    for p in proposed:
        size = _size(p.nodes)
        if size < min_size:
            too_small.update((n.name, size) for n in p.nodes)
        else:
            partitions.append(p)
    # The fuser numbers partitions in the order given: order them by where they start in
    # the graph, so fused_0 runs first (the partitioner proposes them from the end).
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    partitions.sort(key=lambda p: min(position[n] for n in p.nodes))
    members = [tuple(n.name for n in p.nodes) for p in partitions]
    fused = partitioner.fuse_partitions(partitions)
    names = [
        n.target for n in fused.graph.nodes if n.op == "call_module" and "fused_" in n.target
    ]
    by_member = {}
    for name in names:
        sub = getattr(fused, name)
        inner = {n.name for n in sub.graph.nodes if n.op not in ("placeholder", "output")}
        by_member[name] = next((m for m in members if inner == set(m)), tuple(sorted(inner)))
    return Partitioning(fused, [(name, by_member[name]) for name in names], too_small)


def inline_split(
    partitioned: torch.fx.GraphModule, name: str, split: torch.fx.GraphModule
) -> None:
    """Replaces the call of partition ``name`` in ``partitioned`` by the graph it was
    split into (its parts' submodules, the refused nodes as plain nodes), in place, so
    the graph reads as if those nodes had been unsupported from the start::

        before:  x -> fused_0 ------------------------------> y
        after:   x -> fused_0_0 -> refused_node -> fused_0_1 -> y

    The submodule ``name`` stays an attribute: code compiled before the split calls it
    (and it runs the split graph).
    """
    call = next(
        n for n in partitioned.graph.nodes if n.op == "call_module" and n.target == name
    )
    placeholders = [n for n in split.graph.nodes if n.op == "placeholder"]
    mapping: dict[torch.fx.Node, Any] = dict(zip(placeholders, call.args))
    with partitioned.graph.inserting_before(call):
        result = partitioned.graph.graph_copy(split.graph, mapping)
    for node in split.graph.nodes:
        if node.op == "call_module":
            setattr(partitioned, str(node.target), getattr(split, str(node.target)))
    if isinstance(result, (tuple, list)):
        for user in list(call.users):
            assert user.target is operator.getitem
            user.replace_all_uses_with(result[user.args[1]])  # type: ignore[index]
            partitioned.graph.erase_node(user)
    else:
        call.replace_all_uses_with(result)
    partitioned.graph.erase_node(call)
    partitioned.recompile()
