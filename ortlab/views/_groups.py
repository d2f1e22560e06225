"""Verdicts grouped as people read them: by where the nodes run, the support rule that
decided (``Verdict.rule``) and the reason (always in full), then by op; each group
collapsed, its nodes paginated.

# NOTE: a BERT has 519 verdicts, nearly all "verified"; a table of 520 rows hides the
# three that matter. A group's heading says everything but the node names (where, rule,
# reason, count, ops); its nodes are a click away, :data:`PAGE` rows at a time. Groups
# of nodes that stay in PyTorch come first and are open.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from ortlab import _html
from ortlab.backend import records
from ortlab.views import _subjects, _tables

PAGE = 100
"""Nodes listed per page of a group."""

FELL_BACK = "partition-fell-back"
"""The rule of nodes whose partition failed and runs in PyTorch."""


@dataclasses.dataclass
class Row:
    """One node's verdict with where it runs now."""

    graph: int
    verdict: records.Verdict
    eager: bool
    reason: str
    rule: str
    partition: str


@dataclasses.dataclass
class Group:
    """Nodes with one placement, rule and reason."""

    eager: bool
    rule: str
    reason: str
    rows: list[Row] = dataclasses.field(default_factory=list)

    @property
    def ops(self) -> collections.Counter[str]:
        return collections.Counter(r.verdict.target for r in self.rows)

    @property
    def heading(self) -> str:
        where = "PyTorch" if self.eager else "ONNX Runtime"
        n = len(self.rows)
        rule = f" · rule {self.rule}" if self.rule else ""
        return f"{where}{rule} · {n} node{'s' if n != 1 else ''}: {self.reason}"


def rows_of(graphs: Iterable[records.GraphRecord], names: set[str] | None = None) -> list[Row]:
    """The verdicts of ``graphs`` (only the nodes in ``names`` when given)."""
    out = []
    for g in graphs:
        member = {n: p for p in g.partitions for n in p.node_names}
        eager = {v.node: reason for v, reason in _tables.eager_verdicts(g)}
        for v in g.verdicts:
            if names is not None and v.node not in names:
                continue
            part = member.get(v.node)
            failed = part is not None and part.state != "ort"
            out.append(
                Row(
                    g.index,
                    v,
                    v.node in eager,
                    eager.get(v.node, v.reason),
                    FELL_BACK if failed else v.rule,
                    part.name if part is not None else "",
                )
            )
    return out


def groups(rows: Sequence[Row]) -> list[Group]:
    """Rows grouped by placement, rule and reason: eager groups first, larger first."""
    found: dict[tuple[bool, str, str], Group] = {}
    for row in rows:
        key = (row.eager, row.rule, row.reason)
        group = found.get(key)
        if group is None:
            group = found[key] = Group(row.eager, row.rule, row.reason)
        group.rows.append(row)
    return sorted(found.values(), key=lambda g: (not g.eager, -len(g.rows)))


def _page(rows: Sequence[Row], graphs: bool) -> str:
    headers = (("graph",) if graphs else ()) + ("node", "target", "partition", "source")
    body = [
        ((r.graph,) if graphs else ())
        + (r.verdict.node, r.verdict.target, r.partition, r.verdict.source)
        for r in rows
    ]
    return _html.table(headers, body)


def group_html(group: Group, *, graphs: bool = True, open_: bool | None = None) -> str:
    """One group: its heading, its ops, its nodes (paginated)."""
    ops = ", ".join(f"{t} ×{c}" for t, c in group.ops.most_common())
    pages = [group.rows[i : i + PAGE] for i in range(0, len(group.rows), PAGE)]
    if len(pages) == 1:
        nodes = _page(pages[0], graphs)
    else:
        nodes = "".join(
            f"<details><summary>nodes {i * PAGE + 1}–{i * PAGE + len(page)}</summary>"
            f"{_page(page, graphs)}</details>"
            for i, page in enumerate(pages)
        )
    is_open = group.eager if open_ is None else open_
    css = "ortlab-group ortlab-group-eager" if group.eager else "ortlab-group"
    return (
        f'<details class="{css}"{" open" if is_open else ""}>'
        f"<summary>{_html.esc(group.heading)}</summary>"
        f'<p class="ortlab-ops">{_html.esc(ops)}</p>{nodes}</details>'
    )


def groups_html(rows: Sequence[Row], *, graphs: bool = True, empty: str = "") -> str:
    """Every group of ``rows`` (see :func:`group_html`)."""
    found = groups(rows)
    if not found:
        return f"<p>{_html.esc(empty)}</p>" if empty else ""
    return "".join(group_html(g, graphs=graphs) for g in found)


def verdicts_html(obj: Any) -> str:
    """Every verdict of a backend (or graph records), grouped."""
    graphs = _subjects.graphs_of(obj)
    return groups_html(rows_of(graphs), graphs=len(graphs) > 1, empty="No verdicts yet.")


def eager_html(obj: Any) -> str:
    """The nodes that stay in PyTorch, grouped by why."""
    graphs = _subjects.graphs_of(obj)
    rows = [r for r in rows_of(graphs) if r.eager]
    return groups_html(rows, graphs=len(graphs) > 1, empty="Every node runs in ONNX Runtime.")


def partition_verdicts_html(
    partition: records.PartitionRecord, graph: records.GraphRecord | None
) -> str:
    """The verdicts of one partition's nodes, grouped."""
    if graph is None:
        return ""
    return groups_html(rows_of([graph], set(partition.node_names)), graphs=False)
