"""A profile as a Chrome trace (the JSON ``chrome://tracing`` and Perfetto open).

# NOTE: the trace is the *median* call laid out in the order the call ran its parts, not
# one recorded call: each event lasts its median (so the events sum to the call, the
# unattributed rest last). Nesting is by time, on one thread:
#
#   Dynamo entry | eager node | partition fused_0 ------------------------ | ... | rest
#                                glue | ONNX Runtime run ---------------- |
#                                       Conv (ORT node) | Relu | between |
#                                         convolution (FX node, share)
#
# Every FX-node event carries ``fx_node``, ``module``, ``module_class``, ``source``,
# ``target`` and ``graph`` in its ``args``; ONNX Runtime node events carry ``op_type``,
# ``provider``, ``fx_nodes`` and ``model_nodes``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from ortlab.profiling import _records

PID = 1
TID = 1


def _event(name: str, cat: str, start: float, seconds: float, **args: Any) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": PID,
        "tid": TID,
        "ts": round(start * 1e6, 3),
        "dur": round(max(seconds, 0.0) * 1e6, 3),
        "args": args,
    }


def _fx_args(node: _records.NodeTime) -> dict[str, Any]:
    return {
        "fx_node": node.node,
        "graph": node.graph_index,
        "target": node.target,
        "module": node.module,
        "module_class": node.module_class,
        "source": node.source,
        "placement": node.placement,
    }


def events(profile: _records.Profile) -> list[dict[str, Any]]:
    """The trace's events (see the module NOTE)."""
    fx = {(n.graph_index, n.node): n for n in profile.nodes}
    out: list[dict[str, Any]] = []
    t = 0.0
    dynamo = profile.overhead("dynamo")
    out.append(_event("Dynamo entry and guards", "dynamo", t, dynamo))
    t += dynamo
    for graph_index, name in profile.sequence:
        node = fx.get((graph_index, name))
        if node is not None and node.placement == "eager":
            out.append(_event(name, "eager", t, node.seconds, **_fx_args(node)))
            t += node.seconds
            continue
        produced = list(_partition(profile, fx, graph_index, name, t))
        out.extend(produced)
        if produced:
            t += produced[0]["dur"] * 1e-6
    graph_code = profile.overhead("graph_code")
    if graph_code:
        out.append(_event("graph code", "glue", t, graph_code))
        t += graph_code
    rest = profile.unattributed_seconds
    if rest > 0:
        out.append(_event("unattributed", "unattributed", t, rest))
    return out


def _partition(
    profile: _records.Profile,
    fx: dict[tuple[int, str], _records.NodeTime],
    graph_index: int,
    partition: str,
    start: float,
) -> Iterator[dict[str, Any]]:
    ort = [
        o
        for o in profile.ort_nodes
        if (o.graph_index, o.partition) == (graph_index, partition)
    ]
    glue = sum(
        o.seconds
        for o in profile.overheads
        if o.kind == "glue" and (o.graph_index, o.partition) == (graph_index, partition)
    )
    between = sum(
        o.seconds
        for o in profile.overheads
        if o.kind == "ort_between" and (o.graph_index, o.partition) == (graph_index, partition)
    )
    run = sum(o.seconds for o in ort) + between
    yield _event(
        f"partition {partition}", "partition", start, max(glue, 0.0) + run, graph=graph_index
    )
    t = start
    if glue > 0:
        yield _event("ortlab glue", "glue", t, glue, partition=partition)
        t += glue
    yield _event("ONNX Runtime run", "onnxruntime", t, run, partition=partition)
    for o in ort:
        yield _event(
            o.name or o.op_type,
            "ort_node",
            t,
            o.seconds,
            op_type=o.op_type,
            provider=o.provider,
            fx_nodes=list(o.fx_nodes),
            model_nodes=list(o.model_nodes),
            shapes=o.shapes,
        )
        inner = t
        for name, share in zip(o.fx_nodes, o.fx_shares):
            node = fx.get((graph_index, name))
            if node is None:
                continue
            seconds = o.seconds * share
            yield _event(
                name, "fx_node", inner, seconds, share=round(share, 4), **_fx_args(node)
            )
            inner += seconds
        t += o.seconds
    if between > 0:
        yield _event("between kernels", "onnxruntime", t, between, partition=partition)


def write(profile: _records.Profile, path: str | os.PathLike[str]) -> str:
    """Writes ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``."""
    document = {
        "traceEvents": events(profile),
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "ortlab.profile",
            "note": "the median call: each event lasts its median over the runs, laid out "
            "in the order the call ran its parts",
            "call_ms": profile.call_seconds * 1e3,
            "runs": profile.runs,
            "attributed": profile.coverage,
        },
    }
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
    return path
