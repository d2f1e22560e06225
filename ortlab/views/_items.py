"""The nodes a view draws, read from the records: FX graphs with their partitions inlined,
one partition's FX subgraph, a session's ONNX model; each node with its module scope.

# NOTE: a :class:`~ortlab.backend.records.GraphRecord` holds the graph after partitioning
# (``fused_*`` call_module nodes whose sub-GraphModules are the partitions' graphs).
# :func:`flat_nodes` inlines each partition's nodes back into one flat node list:
#
#   partitioned:  x -> fused_0 -> soft_clip -> fused_1 -> getitem -> out
#   flat:         x -> [t -> addmm -> relu] -> soft_clip -> [t_1 -> addmm_1] -> out
#
# (``getitem`` nodes that only unpack a partition's outputs are edges, not nodes.)
#
# Module scopes: FX nodes carry ``meta["nn_module_stack"]`` (Dynamo's module paths, outer
# first: ``L['self'].encoder``, ``L['self'].encoder.layer.0`` ...), and the exporter stamps
# each ONNX node with ``pkg.torch.onnx.name_scopes`` (the same paths, then the FX node's
# name) and ``pkg.torch.onnx.class_hierarchy``. :func:`module_path` writes a path as people
# do (``encoder.layer.0``). An :class:`Item` is one node of either kind with its scope (the
# module paths from the outermost to its own), ready for :mod:`ortlab.views._hierarchy`.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ortlab.backend import records
from ortlab.views import _names

if TYPE_CHECKING:
    import onnx
    import torch.fx

NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY_KEY = "pkg.torch.onnx.class_hierarchy"

ItemKind = Literal["op", "input", "weight", "output"]
"""``op``: a computation; ``input``: a graph input that is not a weight; ``weight``: a
parameter, buffer or initializer (counted, never drawn as a node); ``output``."""


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


def short_op(target: str) -> str:
    """``aten.addmm.default`` -> ``aten.addmm``; other targets as they are."""
    return target.removesuffix(".default")


_PATH_REWRITES = (
    (re.compile(r"getattr\(([^,()]+), '([^']+)'\)"), r"\1.\2"),
    (re.compile(r"\._(?:modules|parameters|buffers)\['([^']+)'\]"), r".\1"),
    (re.compile(r"\[(\d+)\]"), r".\1"),
    (re.compile(r"^L\['self'\]\.?"), ""),
    (re.compile(r"^L\['([^']+)'\]"), r"\1"),
)


def module_path(raw: str) -> str:
    """A module path as people write it: ``L['self'].encoder.layer[0]`` ->
    ``encoder.layer.0``; the compiled module itself is ``""``."""
    path = raw
    for pattern, replacement in _PATH_REWRITES:
        path = pattern.sub(replacement, path)
    return path


def _class_name(cls: Any) -> str:
    name = getattr(cls, "__name__", None) or str(cls)
    return name.rsplit(".", 1)[-1].strip("'>")


def _fx_scope(node: torch.fx.Node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(module paths, class names) of an FX node, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    paths: list[str] = []
    classes: list[str] = []
    for value in stack.values():
        raw, cls = (value[0], value[1]) if isinstance(value, tuple) else (str(value), "")
        path = module_path(str(raw))
        if path and (not paths or paths[-1] != path):
            paths.append(path)
            classes.append(_class_name(cls) if cls else "")
    return tuple(paths), tuple(classes)


# -- flattening the partitioned graph ---------------------------------------------------


@dataclasses.dataclass
class FlatNode:
    """One node of a graph record, with its partition (``None`` outside any).

    Attributes:
        name: The FX node's name.
        op: ``placeholder``, ``call_function``, ``output``...
        target: Its target as text (``aten.addmm.default``).
        inputs: Names of the nodes it reads.
        partition: The partition holding it, ``None`` outside any.
        value: Its type and shape (``float32[s77,16]``).
        scope: Module paths from the outermost to its own (``("encoder",
            "encoder.layer.0", ...)``); empty outside any module.
        classes: The class name of each module of ``scope``.
    """

    name: str
    op: str
    target: str
    inputs: tuple[str, ...]
    partition: str | None
    value: str = ""
    scope: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()


def _leaves(arg: Any) -> Iterable[Any]:
    if isinstance(arg, (list, tuple)):
        for a in arg:
            yield from _leaves(a)
    elif isinstance(arg, dict):
        for a in arg.values():
            yield from _leaves(a)
    else:
        yield arg


def node_inputs(node: torch.fx.Node, alias: dict[Any, Any]) -> tuple[str, ...]:
    """Names of the nodes ``node`` reads (through ``alias``: a fused call's getitems)."""
    names: list[str] = []
    for arg in _leaves((node.args, node.kwargs)):
        if hasattr(arg, "op") and hasattr(arg, "name"):  # a torch.fx.Node
            resolved = alias.get(arg, arg.name)
            if isinstance(resolved, tuple):
                names.extend(resolved)
            else:
                names.append(resolved)
    return tuple(dict.fromkeys(names))


def _flat(
    node: torch.fx.Node,
    partition: str | None,
    inputs: tuple[str, ...],
    verdicts: dict[str, records.Verdict],
) -> FlatNode:
    verdict = verdicts.get(node.name)
    target = verdict.target if verdict is not None else target_text(node)
    if node.op == "call_module":
        target = str(node.target)
    scope, classes = _fx_scope(node) if node.op == "call_function" else ((), ())
    return FlatNode(
        node.name,
        node.op,
        target,
        inputs,
        partition,
        value_text(node.meta.get("val")),
        scope,
        classes,
    )


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
    for node in gm.graph.nodes:
        if node in fused:
            part = parts[node.target]
            sub = part.graph_module.graph
            inner_alias: dict[Any, Any] = {}
            placeholders = [n for n in sub.nodes if n.op == "placeholder"]
            for ph, arg in zip(placeholders, _leaves(node.args)):
                if hasattr(arg, "op") and hasattr(arg, "name"):
                    inner_alias[ph] = alias.get(arg, arg.name)
                else:
                    inner_alias[ph] = ()
            outputs: tuple[str, ...] = ()
            for inner in sub.nodes:
                if inner.op == "placeholder":
                    continue
                if inner.op == "output":
                    outputs = node_inputs(inner, inner_alias)
                    continue
                out.append(_flat(inner, part.name, node_inputs(inner, inner_alias), verdicts))
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
        out.append(_flat(node, member_of.get(node.name), node_inputs(node, alias), verdicts))
    return out


def partition_nodes(
    partition: records.PartitionRecord, graph: records.GraphRecord | None
) -> list[FlatNode]:
    """The nodes of one partition's FX subgraph (its placeholders are its inputs)."""
    verdicts = {v.node: v for v in graph.verdicts} if graph is not None else {}
    return [
        _flat(
            node,
            partition.name if node.op == "call_function" else None,
            node_inputs(node, {}),
            verdicts,
        )
        for node in partition.graph_module.graph.nodes
    ]


def verdict_tooltip(
    name: str, target: str, verdict: records.Verdict | None, partition: str | None, state: str
) -> str:
    """Where a node runs and why, and the line of the user's code it comes from."""
    if partition is not None and state == "ort":
        where = f"runs in ONNX Runtime ({partition})"
    elif partition is not None:
        where = f"runs in PyTorch: partition {partition} fell back to eager"
    else:
        where = "runs in PyTorch (eager)"
    reason = f": {verdict.reason}" if verdict is not None else ""
    source = f"\nfrom {verdict.source}" if verdict is not None and verdict.source else ""
    return f"{name} = {target}\n{where}{reason}{source}"


# -- items: nodes with their module scope, for the hierarchy -----------------------------


@dataclasses.dataclass(frozen=True)
class Item:
    """One node of an FX graph or ONNX model, as the module hierarchy sees it.

    Attributes:
        key: Its key in the view (FX node name; ONNX node index as text, ``in:NAME`` /
            ``out:N`` for the model's inputs and outputs).
        name: Its name as shown.
        op: What it computes (``aten.addmm``, ``Gemm``, ``com.microsoft.Attention``).
        kind: See :data:`ItemKind`.
        scope: Module paths from the outermost to its own.
        classes: The class name of each module of ``scope``.
        inputs: Keys of the items it reads.
        group: The partition holding it (FX views), else ``None``.
        eager: It runs in PyTorch.
        tooltip: Its hover text.
        search: Lower-case text a search matches: name, op, module path, verdict reason,
            source line, and the name it binds (weights, inputs).
        value: Its type and shape.
        nbytes: A weight's size in bytes, when known.
    """

    key: str
    name: str
    op: str
    kind: ItemKind
    scope: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    group: str | None = None
    eager: bool = False
    tooltip: str = ""
    search: str = ""
    value: str = ""
    nbytes: int | None = None

    @property
    def module(self) -> str:
        """Its own module path (``""`` outside any module)."""
        return self.scope[-1] if self.scope else ""


def _search_text(*parts: str) -> str:
    return "\n".join(p for p in parts if p).lower()


def fx_items(
    nodes: Sequence[FlatNode],
    graph: records.GraphRecord | None,
    states: Mapping[str, str] | None = None,
) -> list[Item]:
    """Items of FX nodes (:func:`flat_nodes` or :func:`partition_nodes`).

    Args:
        nodes: The nodes.
        graph: Their graph record (verdicts, the names placeholders bind).
        states: Partition name -> its state (``"ort"`` / ``"eager"``).
    """
    verdicts = {v.node: v for v in graph.verdicts} if graph is not None else {}
    states = states or {}
    out = []
    for node in nodes:
        verdict = verdicts.get(node.name)
        if node.op in ("placeholder", "get_attr"):
            bound = _names.bound_name(graph, node.name)
            weight = node.op == "get_attr" or _names.is_weight(bound)
            label = bound if bound != node.name else node.name
            out.append(
                Item(
                    node.name,
                    label,
                    "weight" if weight else "input",
                    "weight" if weight else "input",
                    tooltip=f"{node.op} {node.name}: {label} {node.value}".strip(),
                    search=_search_text(node.name, bound),
                    value=node.value,
                    nbytes=_names.value_bytes(node.value) if weight else None,
                )
            )
            continue
        if node.op == "output":
            out.append(Item(node.name, "output", "output", "output", inputs=node.inputs))
            continue
        state = states.get(node.partition or "", "eager")
        eager = node.partition is None or state != "ort"
        reason = verdict.reason if verdict is not None else ""
        source = verdict.source if verdict is not None else ""
        out.append(
            Item(
                node.name,
                node.name,
                short_op(node.target),
                "op",
                node.scope,
                node.classes,
                node.inputs,
                node.partition,
                eager,
                verdict_tooltip(node.name, node.target, verdict, node.partition, state),
                _search_text(
                    node.name,
                    node.target,
                    node.scope[-1] if node.scope else "",
                    reason,
                    source,
                ),
                node.value,
            )
        )
    return out


def graph_items(graph: records.GraphRecord) -> list[Item]:
    """Items of a whole graph record (partitions inlined)."""
    states = {p.name: p.state for p in graph.partitions}
    return fx_items(flat_nodes(graph), graph, states)


def metadata(node: onnx.NodeProto, key: str) -> str:
    """An ONNX node's metadata value (``""`` when absent)."""
    return next((p.value for p in node.metadata_props if p.key == key), "")


def _listed(text: str) -> list[str]:
    """A metadata list written as Python or JSON (``["a", 'b']``)."""
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def onnx_scope(node: onnx.NodeProto) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(module paths, class names) of an ONNX node, from the exporter's metadata."""
    scopes = _listed(metadata(node, NAME_SCOPES_KEY))[:-1]  # the last is the FX node
    classes = _listed(metadata(node, CLASS_HIERARCHY_KEY))
    paths: list[str] = []
    names: list[str] = []
    for i, raw in enumerate(scopes):
        path = module_path(raw)
        if path and (not paths or paths[-1] != path):
            paths.append(path)
            names.append(_class_name(classes[i]) if i < len(classes) else "")
    return tuple(paths), tuple(names)


def onnx_op(node: onnx.NodeProto) -> str:
    """``Gemm``; a fused operator with its domain: ``com.microsoft.Attention``."""
    return f"{node.domain}.{node.op_type}" if node.domain else node.op_type


def _inherited_scopes(
    nodes: Sequence[onnx.NodeProto],
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each node's module scope; a node without one (added by a rewrite: the weight
    transposes of a fused Attention) takes the scope its readers share, so that it is
    drawn inside their module rather than as a loose box at the top level."""
    scopes = [onnx_scope(n) for n in nodes]
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for value in node.input:
            readers.setdefault(value, []).append(i)
    for i in range(len(nodes) - 1, -1, -1):  # readers come later in a topological order
        if scopes[i][0]:
            continue
        found = [scopes[j] for v in nodes[i].output for j in readers.get(v, ())]
        if not found or any(not f[0] for f in found):
            continue
        depth = 0
        while all(len(f[0]) > depth and f[0][depth] == found[0][0][depth] for f in found):
            depth += 1
        scopes[i] = (found[0][0][:depth], found[0][1][:depth])
    return scopes


def onnx_items(
    session: records.SessionRecord, graph: records.GraphRecord | None = None
) -> list[Item]:
    """Items of a session's ONNX model: its inputs (weights apart), nodes and outputs."""
    model = session.model.graph
    types = onnx_types(session.model)
    initializers = {t.name: t for t in model.initializer}
    producer: dict[str, str] = {}
    out: list[Item] = []
    for vi in model.input:
        if vi.name in initializers:
            continue
        bound = _names.bound_name(graph, vi.name)
        weight = _names.is_weight(bound)
        key = f"in:{vi.name}"
        producer[vi.name] = key
        text = types.get(vi.name, "")
        out.append(
            Item(
                key,
                bound,
                "input",
                "weight" if weight else "input",
                tooltip=f"input {vi.name}: {bound} {text}".strip(),
                search=_search_text(vi.name, bound),
                value=text,
                nbytes=_names.value_bytes(text) if weight else None,
            )
        )
    for name in initializers:
        producer[name] = f"in:{name}"
        out.append(Item(f"in:{name}", name, "initializer", "weight", search=name.lower()))
    for i, node in enumerate(model.node):
        for value in node.output:
            if value:
                producer[value] = str(i)
    scopes = _inherited_scopes(model.node)
    for i, node in enumerate(model.node):
        scope, classes = scopes[i]
        fx = records.fx_node_of(node) or ""
        op = onnx_op(node)
        tooltip = f"{node.op_type} {node.name}".strip()
        tooltip += f"\nfrom FX node: {fx}" if fx else "\n(no FX provenance)"
        if scope:
            tooltip += f"\nmodule: {scope[-1]}"
            if not onnx_scope(node)[0]:
                tooltip += " (of the nodes reading it: it has no scope of its own)"
        inputs = tuple(dict.fromkeys(producer[v] for v in node.input if v in producer))
        out.append(
            Item(
                str(i),
                node.name or op,
                op,
                "op",
                scope,
                classes,
                inputs,
                tooltip=tooltip,
                search=_search_text(node.name, op, fx, scope[-1] if scope else ""),
                value=", ".join(types.get(v, "") for v in node.output if v),
            )
        )
    for j, vi in enumerate(model.output):
        src = producer.get(vi.name)
        out.append(
            Item(
                f"out:{j}",
                vi.name,
                "output",
                "output",
                inputs=(src,) if src else (),
                tooltip=f"output {vi.name}: {types.get(vi.name, '?')}",
                search=vi.name.lower(),
                value=types.get(vi.name, ""),
            )
        )
    return out


def onnx_types(model: onnx.ModelProto) -> dict[str, str]:
    """Value name -> ``"float32[s0,2]"`` for the typed values of a model."""
    types = {}
    graph = model.graph
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.type.HasField("tensor_type"):
            try:
                types[vi.name] = records.value_info_text(vi)
            except (KeyError, ValueError, TypeError):
                types[vi.name] = vi.name
    return types
