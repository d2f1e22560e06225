"""Which FX nodes an ONNX Runtime node stands for, and how its time is shared among them.

# NOTE: two links, each from facts the models carry.
#
# 1. ONNX Runtime's optimized graph -> the model ortlab gave it (:func:`optimized_to_model`).
#    ONNX Runtime keeps most node and value names; its fusions keep the value the fused
#    group produced (or name the node after it: ``relu_nchwc``, ``node_MatMul_3/Fusion/``).
#    Each optimized node gets *anchors*: its outputs that the model has, plus the values of
#    a model node its name points to. Its model nodes are found by walking back in the
#    model from its anchors, through values that no other optimized node anchors and that
#    it does not take as inputs (initializers and graph inputs end the walk): the model
#    nodes between its inputs and its outputs, i.e. what it computes. Model nodes no one
#    reaches were folded into constants at load time (they cost nothing per run). An
#    optimized node that reaches none (a layout ``ReorderInput``, an inserted ``Cast``)
#    borrows the model nodes of the nearest node that has some, across ONNX Runtime's
#    own values first (the node it was inserted for), then downstream, then upstream:
#
#      model:      x -> Conv -> BN -> Relu(relu) -> Conv_1 -> ...
#      optimized:  x -> ReorderInput -> Conv(relu_nchwc, Conv+BN+Relu) -> ...
#      relu_nchwc: anchored to 'relu', walks back Relu, BN, Conv;  ReorderInput: borrows
#
# 2. A model node -> FX nodes (:func:`model_to_fx`): the exporter's provenance
#    (``records.FX_NODE_KEY``) and ortlab's folded nodes (``records.FOLDED_FX_NODES_KEY``).
#    A fused operator (``records.is_fused_operator``: ONNX Runtime's Attention,
#    SkipLayerNormalization...) stands for the FX nodes between its inputs and its outputs:
#    the walk back in the partition's FX graph from its outputs, stopping at its inputs,
#    at placeholders and at FX nodes that other ONNX nodes compute.
#
# Sharing rule (:func:`work`): an ONNX Runtime node's time is split among its FX nodes in
# proportion to their estimated arithmetic: 2·M·N·K for a matrix product, 2·output·
# (input channels per group · kernel size) for a convolution, 4·B·H·L·S·E for attention,
# and the output's element count for anything else (at least 1). A fused Attention thus
# credits its matrix products most of its time and its reshapes almost none.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ortlab.backend import records

if TYPE_CHECKING:
    import onnx
    import torch.fx

NCHWC_SUFFIX = "_nchwc"


def _anchors(
    node: onnx.NodeProto,
    producer: dict[str, int],
    by_name: dict[str, int],
    model_nodes: Sequence[onnx.NodeProto],
) -> set[str]:
    anchors = {v for v in node.output if v in producer}
    for name in (node.name, node.name.split("/", 1)[0]):
        index = by_name.get(name)
        if name and index is not None:
            anchors.update(v for v in model_nodes[index].output if v)
    if node.name.endswith(NCHWC_SUFFIX):
        value = node.name[: -len(NCHWC_SUFFIX)]
        if value in producer:
            anchors.add(value)
    return anchors


def optimized_to_model(
    optimized: onnx.GraphProto, model: onnx.GraphProto
) -> list[tuple[tuple[int, ...], bool]]:
    """For each node of ONNX Runtime's optimized graph, the indices of the model's nodes
    it stands for, and whether they were borrowed from a neighbour (module NOTE)."""
    model_nodes = list(model.node)
    producer = {v: i for i, n in enumerate(model_nodes) for v in n.output if v}
    by_name: dict[str, int] = {}
    for i, n in enumerate(model_nodes):
        if n.name:
            by_name.setdefault(n.name, i)
    sources = {v.name for v in model.input} | {t.name for t in model.initializer}
    nodes = list(optimized.node)
    anchors = [_anchors(n, producer, by_name, model_nodes) for n in nodes]
    owner: dict[str, int] = {}
    for q, values in enumerate(anchors):
        for v in values:
            owner.setdefault(v, q)
    claimed: dict[int, int] = {}
    found: list[list[int]] = [[] for _ in nodes]
    for q, node in enumerate(nodes):
        stop = set(node.input)
        stack = [producer[v] for v in anchors[q]]
        while stack:
            i = stack.pop()
            if i in claimed:
                continue
            claimed[i] = q
            found[q].append(i)
            for v in model_nodes[i].input:
                if not v or v in sources or v in stop or owner.get(v, q) != q:
                    continue
                j = producer.get(v)
                if j is not None and j not in claimed:
                    stack.append(j)
    known = set(producer) | sources
    return [
        (tuple(sorted(f)), False) if f else (_borrowed(q, nodes, found, known), True)
        for q, f in enumerate(found)
    ]


def _borrowed(
    q: int, nodes: Sequence[onnx.NodeProto], found: list[list[int]], known: set[str]
) -> tuple[int, ...]:
    """The model nodes of the nearest optimized node that has some: first across values
    the model does not have (ONNX Runtime's own, e.g. a reorder's blocked layout: the
    node it was inserted for), then downstream, then upstream; ``()`` when none has."""
    consumers: dict[str, list[int]] = {}
    producers: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for v in n.input:
            consumers.setdefault(v, []).append(i)
        for v in n.output:
            producers[v] = i

    def down(i: int, new_only: bool) -> list[int]:
        values = [v for v in nodes[i].output if not (new_only and v in known)]
        return [c for v in values for c in consumers.get(v, ())]

    def up(i: int, new_only: bool) -> list[int]:
        values = [v for v in nodes[i].input if not (new_only and v in known)]
        return [producers[v] for v in values if v in producers]

    for step in (
        lambda i: down(i, True) + up(i, True),
        lambda i: down(i, False),
        lambda i: up(i, False),
    ):
        seen, frontier = {q}, [q]
        while frontier:
            following = [j for i in frontier for j in step(i) if j not in seen]
            for j in following:
                if found[j]:
                    return tuple(sorted(found[j]))
            seen.update(following)
            frontier = following
    return ()


def model_to_fx(model: onnx.GraphProto, graph: torch.fx.Graph) -> list[tuple[str, ...]]:
    """For each model node, the FX nodes (of the partition's ``graph``) it computes
    (module NOTE); ``()`` for nodes the exporter added without provenance."""
    fx = {n.name: n for n in graph.nodes}
    nodes = list(model.node)
    provenance = [records.fx_node_of(n) for n in nodes]
    computed_by: dict[str, set[int]] = {}
    for i, name in enumerate(provenance):
        if name is not None and name in fx:
            computed_by.setdefault(name, set()).add(i)
    out: list[tuple[str, ...]] = []
    for i, node in enumerate(nodes):
        names: list[str] = []
        own = provenance[i]
        if own is not None and own in fx:
            names.append(own)
        names += [n for n in _folded(node) if n in fx]
        if records.is_fused_operator(node):
            names += _absorbed(node, i, own, fx, computed_by)
        out.append(tuple(dict.fromkeys(names)))
    return out


def _folded(node: onnx.NodeProto) -> list[str]:
    for prop in node.metadata_props:
        if prop.key == records.FOLDED_FX_NODES_KEY:
            return [n.strip() for n in prop.value.split(",") if n.strip()]
    return []


def _absorbed(
    node: onnx.NodeProto,
    index: int,
    own: str | None,
    fx: dict[str, torch.fx.Node],
    computed_by: dict[str, set[int]],
) -> list[str]:
    """FX nodes between a fused operator's inputs and its outputs."""
    stop = set(node.input)
    seeds = [fx[v] for v in (own, *node.output) if v in fx]
    seen: set[str] = set()
    found: list[str] = []
    stack = list(seeds)
    while stack:
        n = stack.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        if n.op != "call_function":
            continue
        found.append(n.name)
        for arg in n.all_input_nodes:
            others = computed_by.get(arg.name, set()) - {index}
            if arg.name in stop or others or arg.op != "call_function":
                continue
            stack.append(arg)
    return found


# -- sharing ------------------------------------------------------------------------------

_MATMULS = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "addbmm"}
_CONVOLUTIONS = {"convolution", "conv2d", "conv1d", "conv3d", "_convolution"}


def _numel(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        return float(math.prod(int(d) for d in value.shape)) if _static(value) else 1.0
    if isinstance(value, (list, tuple)):
        return max((_numel(v) for v in value), default=1.0)
    return 1.0


def _static(value: torch.Tensor) -> bool:
    return all(isinstance(d, int) or str(d).isdigit() for d in value.shape)


def _shape(node: Any) -> tuple[int, ...] | None:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    if isinstance(value, torch.Tensor) and _static(value):
        return tuple(int(d) for d in value.shape)
    return None


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(target, "__name__", str(target))
    return name.split(".", 1)[0]


def work(node: torch.fx.Node) -> float:
    """The estimated arithmetic of an FX node: the weight of its share of an ONNX Runtime
    node's time (module NOTE)."""
    out = node.meta.get("val")
    elements = max(1.0, _numel(out))
    if node.op != "call_function" or node.target is operator.getitem:
        return 1.0
    name = _op_name(node)
    inputs = [a for a in node.args if hasattr(a, "meta")]
    if name in _MATMULS and inputs:
        shape = _shape(inputs[-1] if name in ("addmm", "baddbmm", "addbmm") else inputs[0])
        if name in ("addmm", "baddbmm", "addbmm") and len(inputs) >= 2:
            shape = _shape(inputs[1])
        k = shape[-1] if shape else 1
        return 2.0 * elements * k
    if name in _CONVOLUTIONS and len(inputs) >= 2:
        weight = _shape(inputs[1])
        per_output = math.prod(weight[1:]) if weight else 1
        return 2.0 * elements * per_output
    if "scaled_dot_product" in name and inputs:
        key = _shape(inputs[1]) if len(inputs) > 1 else None
        s = key[-2] if key and len(key) >= 2 else 1
        return 4.0 * elements * s
    return elements


def shares(nodes: Sequence[torch.fx.Node]) -> list[float]:
    """Each node's fraction of a time they share (:func:`work`-weighted; sums to 1)."""
    weights = [work(n) for n in nodes]
    total = sum(weights)
    if total <= 0:
        return [1.0 / len(nodes)] * len(nodes) if nodes else []
    return [w / total for w in weights]
