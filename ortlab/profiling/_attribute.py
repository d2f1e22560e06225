"""From measurements to a :class:`~ortlab.profiling.Profile`: the arithmetic of attribution.

# NOTE: per graph run of the call (medians over the runs):
#
#   eager node n           its own call, timed in the graph               -> NodeTime n
#   partition p            its module's call P (glue + ONNX Runtime)
#     ONNX Runtime         the bare session's run S, split in proportion to the
#                          profiled medians of its kernels and of the time between them:
#       ORT node q           S * k_q / (sum k + between)                  -> OrtNodeTime q
#                            shared among q's FX nodes by ``_mapping.work``-> NodeTime
#       between kernels      S * between / (sum k + between)              -> Overhead
#     glue                 P - S (the median of the pairs: each partition call is
#                          followed by a bare run, timed as a pair)       -> Overhead
#   other graph nodes      getitem of a partition's outputs               -> Overhead
#   Dynamo entry           timed alone, right after the graphs ran        -> Overhead
#
#   unattributed = call - (everything above): two sets of independent measurements
#   (the call, and its parts) that agree when the parts explain the call.
#
# Kernels of a node the mapping cannot place (a node of a subgraph), and ONNX Runtime
# nodes that compute no FX node, are ``ort_unmapped``.
"""

from __future__ import annotations

import collections
import re
from typing import TYPE_CHECKING, Any

import torch.fx

from ortlab.backend import _source, _torch_private
from ortlab.profiling import _mapping, _measure, _records, _trace

if TYPE_CHECKING:
    from ortlab.backend import records

median = _measure.median

_LOCAL = re.compile(r"L\['[^']+'\]")
"""Dynamo's name of a local variable of the compiled frame (``L['fn']``)."""


def module_path(key: str) -> str:
    """An ``nn_module_stack`` path as people write it (``L['self'].encoder`` ->
    ``encoder``; the model itself is ``""``)."""
    path = _torch_private.readable_source(key)
    return _records.ROOT if path in ("self", "L['self']") else path


def _class_name(cls: Any) -> str:
    name = getattr(cls, "__name__", None)
    return name if isinstance(name, str) else str(cls).rsplit(".", 1)[-1].strip("'>")


def modules_of(node: torch.fx.Node | None) -> tuple[tuple[str, str], ...]:
    """``(path, class)`` of the modules an FX node runs in, outermost first."""
    stack = node.meta.get("nn_module_stack") if node is not None else None
    if not stack:
        return ()
    raw = [path for path, _ in stack.values()]
    out = [(module_path(path), _class_name(cls)) for path, cls in stack.values()]
    # A model called through a function (a lab entry, a user's wrapper) is a local of
    # that function (``L['fn']``): that is the root, and paths are relative to it.
    if _LOCAL.fullmatch(raw[0]) and raw[0] != "L['self']":
        root = out[0][0]
        out = [
            (p[len(root) + 1 :] if p.startswith(root + ".") else _records.ROOT, c)
            for p, c in out
        ]
    return tuple(dict.fromkeys(out))


def root_local(graph: torch.fx.Graph) -> str | None:
    """The local variable the compiled frame called the model through (``"fn"`` for
    ``L['fn']``), read from the first module stack; ``None`` when the model is the frame's
    ``self`` (or no node records a stack)."""
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            raw = next(iter(stack.values()))[0]
            if _LOCAL.fullmatch(raw) and raw != "L['self']":
                return module_path(raw)
            return None
    return None


class _Builder:
    """Accumulates node times and overheads of one profile."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[int, str], _records.NodeTime] = {}
        self.ort_nodes: list[_records.OrtNodeTime] = []
        self.overheads: list[_records.Overhead] = []
        self.sessions: list[_records.SessionTime] = []
        self.sequence: list[tuple[int, str]] = []
        self.notes: list[str] = []
        self._graph_nodes: dict[int, dict[str, torch.fx.Node]] = {}

    def _graph_node(self, graph: records.GraphRecord, name: str) -> torch.fx.Node | None:
        nodes = self._graph_nodes.get(graph.index)
        if nodes is None:
            nodes = {n.name: n for n in graph.graph_module.graph.nodes}
            self._graph_nodes[graph.index] = nodes
        return nodes.get(name)

    def node(
        self,
        graph: records.GraphRecord,
        name: str,
        placement: _records.Placement,
        partition: str | None,
        fx_node: torch.fx.Node | None,
    ) -> _records.NodeTime:
        key = (graph.index, name)
        found = self.nodes.get(key)
        if found is None:
            original = self._graph_node(graph, name) or fx_node
            verdict = graph.verdict(name)
            found = _records.NodeTime(
                graph.index,
                name,
                verdict.target
                if verdict is not None
                else str(getattr(original, "target", "")),
                placement,
                partition,
                0.0,
                modules_of(original),
                (verdict.source if verdict is not None and verdict.source else "")
                or (_source.user_source(original) if original is not None else ""),
            )
            self.nodes[key] = found
        return found

    def overhead(self, kind: _records.OverheadKind, seconds: float, **where: Any) -> None:
        if seconds:
            self.overheads.append(_records.Overhead(kind, seconds, **where))


def build(measured: _measure.Measured, *, model_class: str = "") -> _records.Profile:
    """The profile of ``measured`` (module NOTE)."""
    b = _Builder()
    b.notes.extend(measured.notes)
    b.overhead("dynamo", median(measured.entry))
    for run in measured.graph_runs:
        _graph_run(b, run)
    call = measured.call
    profile = _records.Profile(
        call_seconds=median(call),
        call_p10_seconds=_percentile(call, 10),
        call_p90_seconds=_percentile(call, 90),
        runs=measured.runs,
        nodes=list(b.nodes.values()),
        ort_nodes=b.ort_nodes,
        overheads=b.overheads,
        sessions=b.sessions,
        sequence=b.sequence,
        notes=b.notes,
        model_class=model_class or _root_class(b.nodes.values()),
    )
    return profile


def _root_class(nodes: Any) -> str:
    for n in nodes:
        if n.modules and n.modules[0][0] == _records.ROOT:
            return n.modules[0][1]
    return ""


def _percentile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _graph_run(b: _Builder, run: _measure.GraphRun) -> None:
    graph = run.graph
    verdict_names = {v.node for v in graph.verdicts}
    partitions = {p.partition.name: p for p in run.partitions}
    module_nodes = {
        n.name: str(n.target) for n in run.module.graph.nodes if n.op == "call_module"
    }
    part_names = {p.name for p in graph.partitions}
    graph_code = 0.0
    for name in run.order:
        seconds = median(run.samples.get(name, []))
        target = module_nodes.get(name)
        if target is not None and target in part_names:
            b.sequence.append((graph.index, target))
            p = partitions.get(target)
            if p is None:  # ran in PyTorch (a failed partition): its nodes are eager
                b.overhead(
                    "glue",
                    seconds,
                    graph_index=graph.index,
                    partition=target,
                    detail="the partition ran in PyTorch",
                )
                continue
            _partition(b, graph, p, seconds)
        elif name in verdict_names:
            b.sequence.append((graph.index, name))
            node = b.node(graph, name, "eager", None, None)
            node.seconds += seconds
        else:
            graph_code += seconds
    b.overhead("graph_code", graph_code, graph_index=graph.index)


def _kernel_medians(
    trace: _trace.SessionTrace, optimized: Any
) -> tuple[dict[int, float], float, float, dict[int, tuple[str, str]]]:
    """Per optimized node index, the median over runs of its kernel time; the median
    time between kernels; the median of unplaced kernels; provider and shapes per node."""
    keys = _trace.node_keys(
        [n.name for n in optimized.graph.node], [n.op_type for n in optimized.graph.node]
    )
    per_run: dict[int, list[float]] = collections.defaultdict(lambda: [0.0] * trace.runs)
    unplaced = [0.0] * trace.runs
    info: dict[int, tuple[str, str]] = {}
    for k in trace.kernels:
        index = keys.get((k.node, k.op_type, k.occurrence))
        if index is None:
            unplaced[k.run] += k.seconds
            continue
        per_run[index][k.run] += k.seconds
        info.setdefault(index, (k.provider, ", ".join(k.input_shapes)))
    kernels = trace.kernel_seconds_per_run()
    between = [max(0.0, r - k) for r, k in zip(trace.run_seconds, kernels)]
    return (
        {i: median(v) for i, v in per_run.items()},
        median(between),
        median(unplaced),
        info,
    )


def _partition(
    b: _Builder, graph: records.GraphRecord, p: _measure.PartitionRun, module_seconds: float
) -> None:
    where = {"graph_index": graph.index, "partition": p.partition.name}
    bare = median(p.bare_samples)
    pairs = list(zip(p.module_samples, p.bare_samples))
    glue = median([m - s for m, s in pairs]) if pairs else module_seconds - bare
    b.overhead("glue", glue, **where)
    trace, optimized = p.trace, p.optimized
    if trace is None or optimized is None or not trace.runs:
        b.notes.append(p.note or f"{p.partition.name}: no ONNX Runtime profile")
        b.overhead("ort_unmapped", bare, **where)
        return
    medians, between, unplaced, info = _kernel_medians(trace, optimized)
    total = sum(medians.values()) + between + unplaced
    scale = bare / total if total > 0 else 0.0
    b.overhead("ort_between", between * scale, **where)
    b.overhead("ort_unmapped", unplaced * scale, **where)
    fx_graph = p.partition.graph_module.graph
    fx_nodes = {n.name: n for n in fx_graph.nodes}
    model = p.session.model.graph
    to_model = _mapping.optimized_to_model(optimized.graph, model)
    to_fx = _mapping.model_to_fx(model, fx_graph)
    model_names = [n.name or f"#{i}" for i, n in enumerate(model.node)]
    for name, n in fx_nodes.items():  # every node of the partition has a row
        if n.op == "call_function":
            b.node(graph, name, "ort", p.partition.name, n)
    unmapped = 0.0
    for index, node in enumerate(optimized.graph.node):
        seconds = medians.get(index, 0.0) * scale
        model_nodes, borrowed = to_model[index]
        names = list(dict.fromkeys(f for m in model_nodes for f in to_fx[m] if f in fx_nodes))
        shares = _mapping.shares([fx_nodes[f] for f in names])
        provider, shapes = info.get(index, ("", ""))
        b.ort_nodes.append(
            _records.OrtNodeTime(
                graph.index,
                p.partition.name,
                p.session.index,
                node.name,
                node.op_type,
                provider,
                seconds,
                medians.get(index, 0.0),
                tuple(names),
                tuple(shares),
                tuple(model_names[m] for m in model_nodes),
                borrowed,
                shapes,
            )
        )
        if not names:
            unmapped += seconds
            continue
        for f, share in zip(names, shares):
            row = b.node(graph, f, "ort", p.partition.name, fx_nodes[f])
            row.seconds += seconds * share
            if node.name not in row.ort_nodes:
                row.ort_nodes += (node.name or node.op_type,)
    b.overhead("ort_unmapped", unmapped, **where)
    b.sessions.append(
        _records.SessionTime(
            graph.index,
            p.partition.name,
            p.session.index,
            bare,
            median(trace.run_seconds),
            median(trace.kernel_seconds_per_run()),
            module_seconds,
            p.session.threads,
            tuple(p.session.providers),
            len(model.node),
            len(optimized.graph.node),
        )
    )
