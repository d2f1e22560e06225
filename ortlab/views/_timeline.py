"""A backend's history as people read it: what each graph run compiled (graphs, sessions,
fall backs; runs that only reused graphs collapsed into one row) and where the first
call's time went, in one line.

# NOTE: everything here is derived from ``OrtBackend.timeline`` (events stamped with the
# graph run they belong to) and ``GraphRecord.run_count``. A model call runs one graph
# per graph break plus one, so "graph runs" are counted, not calls. The first call is
# taken to be the leading graph runs that each compiled a graph: it ends at the first run
# that compiled none (it reused a graph, or only created a session: a backward pass), at
# a run that compiled only backward graphs (AOTAutograd compiles a backward in
# ``backward()`` unless a symbolic size is saved for it), or at a recompile of a frame
# those runs already compiled (the next call changed dtype or shape). Graphs Dynamo never
# handed to ortlab leave no trace here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ortlab.backend import records
from ortlab.views import _tables

FIRST_CALL_SHOWN = 4
"""Steps named in the first-call line; the others are summed."""

MAX_TIMELINE_ROWS = 60
"""Rows of a timeline shown; later ones are counted, not listed."""


def _backend(obj: Any) -> Any:
    """The backend of a backend, compiled callable or ``DiffReport``; ``None`` for records
    and mappings (they have no timeline).

    Raises:
        UnsupportedOptionError: ``obj`` was not compiled with ortlab.
    """
    from ortlab.backend import backend_of
    from ortlab.views import _subjects

    if _subjects.is_diff_report(obj):
        return obj.backend
    if isinstance(obj, (records.GraphRecord, list, tuple, Mapping)):
        return None
    return backend_of(obj)


def _numbers(indices: Sequence[int]) -> str:
    """``"graph 0"`` / ``"graphs 0, 1"``."""
    if len(indices) == 1:
        return f"graph {indices[0]}"
    return "graphs " + ", ".join(str(i) for i in indices)


@dataclasses.dataclass(frozen=True)
class TimelineRow:
    """Graph runs ``first_run`` to ``last_run`` (counted from 1): the events of one run, or
    a stretch of runs with no event, which only reused graphs compiled before.

    Attributes:
        first_run: The first graph run of the row.
        last_run: The last graph run of the row (equal to ``first_run`` for event rows).
        events: What happened in the run (graph compiled, session created, fall back).
        reused: For rows without events, the graphs compiled before that ran more than
            once (the ones these runs reused).
    """

    first_run: int
    last_run: int
    events: tuple[records.TimelineEvent, ...] = ()
    reused: tuple[int, ...] = ()
    texts: tuple[str, ...] = ()
    """The events as shown (a session's inputs summarised: ``2 inputs + 199 weights``);
    empty: the events' own text."""

    @property
    def runs(self) -> str:
        """``"run 1"`` or ``"runs 3–6"``."""
        if self.first_run == self.last_run:
            return f"run {self.first_run}"
        return f"runs {self.first_run}–{self.last_run}"

    @property
    def lines(self) -> list[str]:
        """What happened, one line per event (or one line for reused graphs)."""
        if self.events:
            return list(self.texts) if self.texts else [e.text for e in self.events]
        what = _numbers(self.reused) if self.reused else "existing graphs"
        return [f"{what} reused, nothing compiled"]

    @property
    def text(self) -> str:
        return f"{self.runs}: " + "; ".join(self.lines)


def timeline_rows(obj: Any) -> list[TimelineRow]:
    """The timeline of a backend: one row per graph run with events, and one row for each
    stretch of runs that only reused graphs (``"runs 3–6: graphs 0, 1 reused"``).

    Args:
        obj: A backend, a compiled callable or a ``DiffReport``; anything else has no
            timeline (an empty list).
    """
    backend = _backend(obj)
    if backend is None:
        return []
    graphs = backend.graphs
    events = sorted(backend.timeline, key=lambda e: e.graph_run)  # stable: keeps order
    total_runs = sum(g.run_count for g in graphs)
    rows: list[TimelineRow] = []
    compiled: list[int] = []
    next_run = 1

    def gap(first: int, last: int) -> None:
        if last < first:
            return
        reused = tuple(i for i in compiled if i < len(graphs) and _ran_again(graphs[i]))
        rows.append(TimelineRow(first, last, (), reused))

    i = 0
    while i < len(events):
        run = events[i].graph_run
        group = []
        while i < len(events) and events[i].graph_run == run:
            group.append(events[i])
            i += 1
        gap(next_run, run - 1)
        texts = tuple(_event_text(backend, e) for e in group)
        rows.append(TimelineRow(run, run, tuple(group), texts=texts))
        compiled.extend(e.graph_index for e in group if e.kind == "graph")
        next_run = max(next_run, run + 1)
    gap(next_run, total_runs)
    return rows


def _event_text(backend: Any, event: records.TimelineEvent) -> str:
    """An event's line, a session's inputs named and summarised (weights counted)."""
    from ortlab.views import _names

    if event.kind != "session" or event.session_index is None:
        return event.text
    graph = next((g for g in backend.graphs if g.index == event.graph_index), None)
    part = (
        None
        if graph is None
        else next((p for p in graph.partitions if p.name == event.partition_name), None)
    )
    session = None if part is None else part.session(event.session_index)
    if session is None:
        return event.text
    inputs = _names.summary(_names.session_inputs(session, graph))
    return (
        f"graph {event.graph_index} {event.partition_name}: session {event.session_index} "
        f"created for {inputs}"
    )


def _ran_again(graph: records.GraphRecord) -> bool:
    """Whether a graph ran in a run that compiled nothing: more than its first run (a
    backward graph is compiled with its forward, so its first run already is one)."""
    return graph.run_count > (0 if graph.kind == "backward" else 1)


def timeline_text(obj: Any, *, max_rows: int = MAX_TIMELINE_ROWS) -> list[str]:
    """The timeline as text lines, one per event (``"run 1     graph 0 compiled: …"``),
    the runs written once per row."""
    rows = timeline_rows(obj)
    width = max((len(r.runs) for r in rows[:max_rows]), default=0)
    lines = [
        f"{(r.runs if i == 0 else '').ljust(width)}  {line}"
        for r in rows[:max_rows]
        for i, line in enumerate(r.lines)
    ]
    if len(rows) > max_rows:
        lines.append(f"… {len(rows) - max_rows} more rows")
    return lines


# -- the first call ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FirstCall:
    """Where the first call's compile time went.

    Attributes:
        seconds: The sum of its steps.
        graphs: The graphs it compiled.
        runs: Its graph runs, ``(first, last)``; ``None`` without a timeline (every graph
            counted).
        steps: ``(label, seconds)`` of every step, largest first.
    """

    seconds: float
    graphs: tuple[int, ...]
    runs: tuple[int, int] | None
    steps: tuple[tuple[str, float], ...]

    def shown(self, count: int = FIRST_CALL_SHOWN) -> tuple[list[tuple[str, float]], float]:
        """The ``count`` largest steps with their seconds, and the others' sum."""
        named = [s for s in self.steps[:count] if s[1] > 0]
        rest = self.seconds - sum(s for _, s in named)
        return named, max(rest, 0.0)

    @property
    def text(self) -> str:
        """One line: ``"First call 2.1 s (graphs 0, 1): Dynamo trace 1.1 s (52%), …"``."""
        if not self.graphs:
            return "First call: nothing compiled yet."
        if self.seconds <= 0:
            return f"First call ({_numbers(self.graphs)}): no compile time recorded."
        named, rest = self.shown()
        total = self.seconds

        def part(label: str, seconds: float) -> str:
            share = f" ({seconds / total:.0%})" if total > 0 else ""
            return f"{label} {seconds_text(seconds)}{share}"

        parts = [part(label, seconds) for label, seconds in named]
        others = len([s for s in self.steps if s[1] > 0]) - len(named)
        if others > 0:
            parts.append(part(f"{others} other step{'s' if others > 1 else ''}", rest))
        return f"First call {seconds_text(total)} ({_numbers(self.graphs)}): " + ", ".join(
            parts
        )


def seconds_text(seconds: float) -> str:
    """``"2.1 s"``, ``"0.35 s"``, ``"4.2 ms"``."""
    if seconds >= 1:
        return f"{seconds:.1f} s"
    if seconds >= 0.01:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms"


def first_call_runs(obj: Any) -> tuple[int, int] | None:
    """The graph runs of the first call (see the module NOTE), ``None`` without a
    timeline."""
    backend = _backend(obj)
    if backend is None or not backend.timeline:
        return None
    graphs = backend.graphs
    frames: set[str] = set()
    last = 0
    for row in timeline_rows(backend):
        compiled = [e.graph_index for e in row.events if e.kind == "graph"]
        if not compiled:
            break
        kinds = {graphs[i].kind for i in compiled if i < len(graphs)}
        if kinds == {"backward"} and last:
            break  # compiled by backward(), after the call
        again = False
        for index in compiled:
            graph = graphs[index] if index < len(graphs) else None
            if graph is None or graph.kind == "backward" or not graph.frame:
                continue
            again = again or graph.frame in frames
            frames.add(graph.frame)
        if again and last:
            break
        last = row.last_run
    return (1, last) if last else None


def first_call(obj: Any) -> FirstCall:
    """Where the first call's time went: the steps of the graphs it compiled and of the
    sessions it created (export steps summed as "export"), largest first.

    Args:
        obj: A backend, compiled callable or ``DiffReport``; for graph records (no
            timeline) every graph and session is counted.
    """
    from ortlab.views import _subjects

    graphs = _subjects.graphs_of(obj)
    runs = first_call_runs(obj)
    backend = _backend(obj)
    totals = dict.fromkeys(records.TIMING_STEPS, 0.0)
    if runs is None:
        chosen = [g.index for g in graphs]
        sessions = [s for g in graphs for p in g.partitions for s in p.sessions]
    else:
        by_index = {g.index: g for g in graphs}
        events = [e for e in backend.timeline if runs[0] <= e.graph_run <= runs[1]]
        chosen = [e.graph_index for e in events if e.kind == "graph"]
        sessions = []
        for e in events:
            graph = by_index.get(e.graph_index)
            if e.kind != "session" or graph is None or e.session_index is None:
                continue
            part = next((p for p in graph.partitions if p.name == e.partition_name), None)
            session = part.session(e.session_index) if part is not None else None
            if session is not None:
                sessions.append(session)
        graphs = [by_index[i] for i in chosen if i in by_index]
    for g in graphs:
        for key, value in g.timings.items():
            totals[key] = totals.get(key, 0.0) + value
    for s in sessions:
        for key, value in s.timings.items():
            totals[key] = totals.get(key, 0.0) + value
    steps: dict[str, float] = {}
    for key, value in totals.items():
        exported = key in records.EXPORT_STEPS
        label = "export" if exported else _tables.STEP_LABELS.get(key, key)
        steps[label] = steps.get(label, 0.0) + value
    ordered = tuple(sorted(steps.items(), key=lambda s: -s[1]))
    return FirstCall(sum(totals.values()), tuple(chosen), runs, ordered)


def first_call_text(obj: Any) -> str:
    """:attr:`FirstCall.text` of ``obj``'s first call."""
    return first_call(obj).text


# -- Dynamo's recompile limit ---------------------------------------------------------


def recompile_limit() -> int:
    """Dynamo's recompile limit (``torch.compiler.config.recompile_limit``)."""
    import torch

    return int(torch.compiler.config.recompile_limit)


def usage_notes(obj: Any) -> list[str]:
    """What the backend saw about how its compiled callable is used (``OrtBackend.notes``:
    a compiled module's ``generate()``, which compiles nothing) and what to do."""
    backend = _backend(obj)
    return list(getattr(backend, "notes", ())) if backend is not None else []


def recompile_limit_notes(obj: Any) -> list[str]:
    """One line per frame Dynamo compiled as often as its recompile limit allows: its
    later calls with a new shape or dtype run in PyTorch without ortlab, silently; the
    line says what to do."""
    from ortlab.views import _subjects

    limit = recompile_limit()
    compiles: dict[tuple[str, str], set[str]] = {}
    floats: set[tuple[str, str]] = set()
    for g in _subjects.graphs_of(obj):
        if g.kind == "backward" or not g.compile_id or "/" not in g.compile_id:
            continue
        frame_id, attempt = g.compile_id.strip("[]").split("/", 1)
        key = (frame_id, g.frame or f"frame {frame_id}")
        compiles.setdefault(key, set()).add(attempt.split("_", 1)[0])
        if g.recompile_reason and _FLOAT_GUARD.search(g.recompile_reason):
            floats.add(key)
    return [
        f"{frame} was compiled {len(attempts)} times, Dynamo's recompile limit "
        f"(torch.compiler.config.recompile_limit = {limit}), each time for a new value "
        "of a Python float it reads (a guard such as ___stack0 == 0.53: ortlab.compile "
        "specialises floats): later calls run that code in PyTorch, without ortlab. "
        "Compile with ortlab.compile(model, specialize_floats=False), or keep the value "
        "a tensor (no .item())."
        for key, attempts in compiles.items()
        for frame in [key[1]]
        if len(attempts) >= limit and key in floats
    ] + [
        f"{frame} was compiled {len(attempts)} times, Dynamo's recompile limit "
        f"(torch.compiler.config.recompile_limit = {limit}): later calls with another "
        "shape or dtype run in PyTorch, without ortlab, and nothing warns. Compile with "
        "dynamic=True (ortlab.compile(model, dynamic=True), or %ortcompile --dynamic) so "
        "that sizes stay symbolic, or raise the limit: "
        "torch._dynamo.config.cache_size_limit = 64 (torch.compiler.config."
        "recompile_limit)."
        for key, attempts in compiles.items()
        for frame in [key[1]]
        if len(attempts) >= limit and key not in floats
    ]


_FLOAT_GUARD = re.compile(r"== -?\d+\.\d+(e-?\d+)?\b")
