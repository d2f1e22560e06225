"""Tables (pandas DataFrames) of what the backend did: partitions, verdicts, sessions, time.

Every function accepts a backend, a compiled callable, a ``DiffReport`` or a mapping of
those, and also graph / partition records (see :mod:`ortlab.views._subjects`). Column
names are part of the API; each function's docstring lists them.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from ortlab import _deps
from ortlab.backend import records
from ortlab.views import _subjects

if TYPE_CHECKING:
    import pandas as pd

PARTITION_COLUMNS = (
    "graph",
    "kind",
    "partition",
    "state",
    "nodes",
    "inputs",
    "outputs",
    "sessions",
    "runs",
    "eager_runs",
    "error",
)
VERDICT_COLUMNS = (
    "graph",
    "kind",
    "node",
    "target",
    "supported",
    "partition",
    "reason",
    "source",
)
REASON_COLUMNS = ("reason", "supported", "nodes", "targets")
EAGER_SOURCE_COLUMNS = ("source", "nodes", "ops", "reasons", "graphs")
UNKNOWN_SOURCE = "(source unknown)"
"""The ``source`` of nodes whose verdict has none (nodes PyTorch added itself)."""
SESSION_COLUMNS = (
    "graph",
    "kind",
    "partition",
    "session",
    "input_schema",
    "output_schema",
    "providers",
    "threads",
    "fusions",
    "export_s",
    "session_s",
    "runs",
    "onnx_nodes",
    "model_bytes",
    "export_method",
    "active",
)
GRAPH_COLUMNS = (
    "graph",
    "kind",
    "compile_id",
    "nodes",
    "in_ort",
    "eager",
    "partitions",
    "sessions",
    "runs",
    "cause",
)
TIMING_COLUMNS = ("step", "seconds", "start", "fraction")

STEP_LABELS = {
    "dynamo": "Dynamo trace",
    "registry": "exporter registry",
    "lower": "lower to ATen",
    "support": "support",
    "partition": "partition",
    "guards": "Dynamo guards",
    "cache": "compile cache",
    "type_promotion": "type promotion",
    "translate": "translate",
    "optimize": "optimize",
    "fuse": "fuse for ORT",
    "serialize": "serialize",
    "transforms": "transforms",
    "session": "session",
    "threads": "choose threads",
    "first_run": "first run",
}
"""Display name of each compile step (keys: ``records.TIMING_STEPS``)."""


def _frame(rows: list[tuple[Any, ...]], columns: tuple[str, ...]) -> pd.DataFrame:
    pd = _deps.require("pandas")
    return pd.DataFrame(rows, columns=list(columns))


def graphs_frame(obj: Any) -> pd.DataFrame:
    """One row per graph record.

    Columns: ``graph`` (index), ``kind``, ``compile_id``, ``nodes`` (call_function nodes),
    ``in_ort``, ``eager``, ``partitions``, ``sessions``, ``runs`` (times the compiled graph
    ran), ``cause`` (why the graph exists: first compile, recompile and the guard that
    failed, backward; and the graph break that ended it).
    """
    rows = []
    for g in _subjects.graphs_of(obj):
        in_ort = len(g.ort_node_names)
        rows.append(
            (
                g.index,
                g.kind,
                g.compile_id or "",
                g.node_count,
                in_ort,
                g.node_count - in_ort,
                len(g.partitions),
                sum(len(p.sessions) for p in g.partitions),
                g.run_count,
                graph_cause(g),
            )
        )
    return _frame(rows, GRAPH_COLUMNS)


def graph_cause(graph: records.GraphRecord) -> str:
    """Why a graph exists (:attr:`~ortlab.backend.records.GraphRecord.cause`), and why it
    runs entirely in PyTorch when it does."""
    return graph.cause + (f" (runs in PyTorch: {graph.error})" if graph.error else "")


def partitions_frame(obj: Any) -> pd.DataFrame:
    """One row per partition.

    Columns: ``graph`` (index), ``kind``, ``partition`` (name), ``state`` (``"ort"`` or
    ``"eager"`` after a failure), ``nodes``, ``inputs`` and ``outputs`` (counts),
    ``sessions``, ``runs`` (in ONNX Runtime), ``eager_runs``, ``error``.
    """
    rows = [
        (
            p.graph_index,
            p.graph_kind,
            p.name,
            p.state,
            len(p.node_names),
            len(p.input_names),
            len(p.output_names),
            len(p.sessions),
            p.run_count,
            p.eager_run_count,
            p.error or "",
        )
        for p in _subjects.partitions_of(obj)
    ]
    return _frame(rows, PARTITION_COLUMNS)


def verdicts_frame(obj: Any) -> pd.DataFrame:
    """One row per ``call_function`` node, grouped by reason (eager reasons first).

    Columns: ``graph``, ``kind``, ``node``, ``target``, ``supported``, ``partition`` (the
    partition holding the node, ``""`` when none), ``reason``, ``source`` (the user's line
    the node comes from, ``"model.py:12 in forward: y = f(x)"``; ``""`` when unknown).
    Rows with the same reason are adjacent; within a reason they keep graph order.
    """
    rows = []
    for g in _subjects.graphs_of(obj):
        member = {n: p.name for p in g.partitions for n in p.node_names}
        for v in g.verdicts:
            rows.append(
                (
                    g.index,
                    g.kind,
                    v.node,
                    v.target,
                    v.supported,
                    member.get(v.node, ""),
                    v.reason,
                    v.source,
                )
            )
    first_seen: dict[tuple[bool, str], int] = {}
    for row in rows:
        first_seen.setdefault((row[4], row[6]), len(first_seen))
    order = sorted(
        range(len(rows)), key=lambda i: (rows[i][4], first_seen[(rows[i][4], rows[i][6])], i)
    )
    return _frame([rows[i] for i in order], VERDICT_COLUMNS)


def reasons_frame(obj: Any) -> pd.DataFrame:
    """The verdicts summarised per reason.

    Columns: ``reason``, ``supported``, ``nodes`` (count), ``targets`` (distinct targets,
    most frequent first, comma-separated).
    """
    groups: dict[tuple[str, bool], collections.Counter[str]] = {}
    for g in _subjects.graphs_of(obj):
        for v in g.verdicts:
            groups.setdefault((v.reason, v.supported), collections.Counter())[v.target] += 1
    rows = [
        (reason, supported, sum(c.values()), ", ".join(t for t, _ in c.most_common()))
        for (reason, supported), c in groups.items()
    ]
    rows.sort(key=lambda r: (r[1], -r[2]))
    return _frame(rows, REASON_COLUMNS)


def eager_verdicts(graph: records.GraphRecord) -> list[tuple[records.Verdict, str]]:
    """The verdicts of a graph's nodes that run in PyTorch, each with why: its verdict's
    reason, or its partition's fall back."""
    in_ort = set(graph.ort_node_names)
    failed = {n: p for p in graph.partitions if p.state != "ort" for n in p.node_names}
    out = []
    for v in graph.verdicts:
        if v.node in in_ort:
            continue
        part = failed.get(v.node)
        reason = (
            v.reason
            if part is None
            else f"partition {part.name} fell back to eager: {part.error}"
        )
        out.append((v, reason))
    return out


def eager_sources_frame(obj: Any) -> pd.DataFrame:
    """The nodes that stay in PyTorch grouped by the line of the user's code they come
    from: which line puts how many ops in PyTorch, and why.

    Columns: ``source`` (``"model.py:14 in forward: y = f(x)"``, or
    :data:`UNKNOWN_SOURCE`), ``nodes`` (count), ``ops`` (targets with counts, most
    frequent first), ``reasons`` (distinct, ``"; "``-separated), ``graphs`` (indices).
    Lines putting the most nodes in PyTorch come first; ties keep graph order.
    """
    groups: dict[str, tuple[collections.Counter[str], dict[str, None], dict[int, None]]] = {}
    for g in _subjects.graphs_of(obj):
        for v, reason in eager_verdicts(g):
            ops, reasons, graphs = groups.setdefault(
                v.source or UNKNOWN_SOURCE, (collections.Counter(), {}, {})
            )
            ops[v.target] += 1
            reasons[reason] = None
            graphs[g.index] = None
    rows = [
        (
            source,
            sum(ops.values()),
            ", ".join(f"{t} ×{c}" for t, c in ops.most_common()),
            "; ".join(reasons),
            ", ".join(str(i) for i in graphs),
        )
        for source, (ops, reasons, graphs) in groups.items()
    ]
    rows.sort(key=lambda r: -r[1])  # stable: ties keep graph order
    return _frame(rows, EAGER_SOURCE_COLUMNS)


def sessions_frame(obj: Any) -> pd.DataFrame:
    """One row per session (one exported ONNX model per input schema).

    Columns: ``graph``, ``kind``, ``partition``, ``session`` (index in the partition),
    ``input_schema`` and ``output_schema`` (e.g. ``"float32[s77,8], float32[16]"``,
    symbolic dims by name), ``providers``, ``threads`` (ORT intra-op threads; ``None``:
    ORT's default), ``fusions`` (ONNX Runtime fused operators applied, and why none
    were where they were tried), ``export_s``, ``session_s`` (seconds), ``runs``,
    ``onnx_nodes``, ``model_bytes``, ``export_method``, ``active``.
    """
    rows = []
    pairs: list[tuple[records.PartitionRecord | None, records.SessionRecord]]
    if isinstance(obj, records.SessionRecord) or (
        isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], records.SessionRecord)
    ):
        pairs = [(None, s) for s in _subjects.sessions_of(obj)]
    else:
        pairs = [(p, s) for p in _subjects.partitions_of(obj) for s in p.sessions]
    for p, s in pairs:
        rows.append(
            (
                p.graph_index if p is not None else None,
                p.graph_kind if p is not None else "",
                s.partition_name,
                s.index,
                ", ".join(s.input_schema),
                ", ".join(s.output_schema),
                ", ".join(s.providers),
                s.threads,
                records.fusions_text(s.fusions, s.fusion_note),
                s.export_seconds,
                s.session_seconds,
                s.run_count,
                s.onnx_node_count,
                s.model_bytes,
                s.export_method,
                s.active,
            )
        )
    return _frame(rows, SESSION_COLUMNS)


def timings(obj: Any) -> dict[str, float]:
    """Seconds per compile step (``records.TIMING_STEPS`` keys), summed over ``obj``."""
    totals = dict.fromkeys(records.TIMING_STEPS, 0.0)
    graphs = _subjects.graphs_of(obj)
    for g in graphs:
        for k, v in g.timings.items():
            totals[k] = totals.get(k, 0.0) + v
        for p in g.partitions:
            for s in p.sessions:
                for k, v in s.timings.items():
                    totals[k] = totals.get(k, 0.0) + v
    return totals


def timings_frame(obj: Any) -> pd.DataFrame:
    """The compile-time breakdown, one row per step in pipeline order.

    Steps: Dynamo trace, exporter registry, lower to ATen, support, partition, Dynamo
    guards, type promotion, translate, serialize, transforms, session, first run (every
    step, zero when it took no time). Columns: ``step``,
    ``seconds``, ``start`` (seconds before this step, for a waterfall), ``fraction`` (of
    the total; 0 when nothing was compiled).
    """
    totals = timings(obj)
    total = sum(totals.values())
    rows = []
    start = 0.0
    for key, seconds in totals.items():
        rows.append(
            (STEP_LABELS.get(key, key), seconds, start, seconds / total if total else 0.0)
        )
        start += seconds
    return _frame(rows, TIMING_COLUMNS)


def frame_html(frame: pd.DataFrame, *, max_rows: int = 200) -> str:
    """A DataFrame as an escaped HTML table (pandas escapes every cell)."""
    shown = frame.head(max_rows)
    html = shown.to_html(index=False, escape=True, border=0, classes="ortlab-table", na_rep="")
    if len(frame) > max_rows:
        html += f"<p class='ortlab-note'>{len(frame) - max_rows} more rows not shown.</p>"
    return html


def summary_rows(obj: Any) -> list[tuple[str, Any]]:
    """Key figures of a backend as ``(label, value)`` pairs (the Summary tab's table)."""
    graphs = _subjects.graphs_of(obj)
    nodes = sum(g.node_count for g in graphs)
    in_ort = sum(len(g.ort_node_names) for g in graphs)
    partitions = [p for g in graphs for p in g.partitions]
    sessions = [s for p in partitions for s in p.sessions]
    total = sum(timings(obj).values())
    return [
        ("graphs", ", ".join(f"{g.index}: {g.kind}" for g in graphs) or "none yet"),
        ("nodes in ONNX Runtime", f"{in_ort} / {nodes}"),
        ("eager nodes", nodes - in_ort),
        ("partitions", len(partitions)),
        ("failed partitions", sum(1 for p in partitions if p.error)),
        ("sessions", len(sessions)),
        ("graph runs", sum(g.run_count for g in graphs)),
        ("partition runs in ORT", sum(p.run_count for p in partitions)),
        ("compile time", f"{total:.3f} s"),
    ]
