"""Where the time of a compiled call goes, as plain data: :class:`Profile` and its rows.

# NOTE: a profile attributes the median call (``Profile.call_seconds``) to
#
#   - FX nodes (:class:`NodeTime`): each node run in PyTorch, timed on its own; each node
#     run by ONNX Runtime, credited its share of the ONNX Runtime nodes that compute it
#     (:class:`OrtNodeTime`; the rules: ``_mapping``);
#   - the rest of the call, which no FX node owns (:class:`Overhead`): Dynamo's entry and
#     guards, ortlab's glue around each partition (handing tensors over and back,
#     copies), ONNX Runtime between its kernels, ONNX Runtime nodes that compute no FX
#     node, and what is left unattributed (the call minus every measured part).
#
# Grouped views (by module, by source line, by ONNX Runtime op type) sum the FX nodes;
# every number is seconds per call, a median over the profile's runs. Records are plain
# data; their HTML comes from ``ortlab.views._profile``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from ortlab import _html

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend

Placement = Literal["ort", "eager"]
OverheadKind = Literal[
    "dynamo", "glue", "ort_between", "ort_unmapped", "graph_code", "unattributed"
]

OVERHEAD_LABELS: dict[str, str] = {
    "dynamo": (
        "Dynamo: frame entry, guards, and the Python between graphs (eager code at "
        "graph breaks)"
    ),
    "glue": "ortlab glue: tensors into ONNX Runtime and back (hand-off, copies)",
    "ort_between": "ONNX Runtime between its kernels (executor, allocations)",
    "ort_unmapped": "ONNX Runtime nodes computing no FX node",
    "graph_code": "the graph's own code (getitem of partition outputs)",
    "unattributed": "unattributed: the call minus every measured part",
}
"""What each kind of :class:`Overhead` is."""

ROOT = ""
"""The module path of the model itself (the root of every module stack)."""


@dataclasses.dataclass
class NodeTime:
    """One FX node's time per call."""

    graph_index: int
    node: str
    """The FX node's name (``"addmm_3"``)."""
    target: str
    """Its op (``"aten.addmm.default"``)."""
    placement: Placement
    """``"ort"``: in an ONNX Runtime partition; ``"eager"``: run by PyTorch."""
    partition: str | None
    seconds: float
    """Median per call: timed (eager), or its share of ONNX Runtime nodes (ort)."""
    modules: tuple[tuple[str, str], ...] = ()
    """``(path, class)`` of the modules the node runs in, outermost first; the model
    itself is path ``""`` (``"encoder.layer.0.attention"``, ``"BertAttention"``)."""
    source: str = ""
    """The user's source line (``"modeling_bert.py:84 in forward: ..."``)."""
    ort_nodes: tuple[str, ...] = ()
    """The ONNX Runtime nodes that credited it time (ort)."""

    @property
    def module(self) -> str:
        """The innermost module's path (``""``: the model itself or none)."""
        return self.modules[-1][0] if self.modules else ROOT

    @property
    def module_class(self) -> str:
        return self.modules[-1][1] if self.modules else ""


@dataclasses.dataclass
class OrtNodeTime:
    """One node of an ONNX Runtime session's optimized graph."""

    graph_index: int
    partition: str
    session_index: int
    name: str
    op_type: str
    provider: str
    seconds: float
    """Its share of the session's run as measured without the profiler (see
    :class:`SessionTime`)."""
    profiled_seconds: float
    """Its median kernel time under ONNX Runtime's profiler."""
    fx_nodes: tuple[str, ...] = ()
    fx_shares: tuple[float, ...] = ()
    """Each FX node's fraction of ``seconds`` (``_mapping.work``-weighted)."""
    model_nodes: tuple[str, ...] = ()
    """The nodes of the model ortlab gave ONNX Runtime that it stands for."""
    borrowed: bool = False
    """Its model nodes are a neighbour's (a layout reorder, an inserted cast)."""
    shapes: str = ""
    """Its inputs' types and shapes (``"float[1,3,224,224], float[64,3,7,7]"``)."""


@dataclasses.dataclass
class Overhead:
    """Time per call that belongs to no FX node."""

    kind: OverheadKind
    seconds: float
    graph_index: int | None = None
    partition: str | None = None
    detail: str = ""

    @property
    def label(self) -> str:
        where = f" ({self.partition})" if self.partition else ""
        return OVERHEAD_LABELS[self.kind] + where


@dataclasses.dataclass
class SessionTime:
    """One ONNX Runtime session as profiled."""

    graph_index: int
    partition: str
    session_index: int
    run_seconds: float
    """Median run of a bare session on the inputs the partition received, made and fed
    as the partition's is (``ortlab.backend.create_session``), without the profiler."""
    profiled_run_seconds: float
    """Median ``model_run`` under ONNX Runtime's profiler."""
    kernel_seconds: float
    """Median sum of its kernels under the profiler."""
    partition_seconds: float
    """Median call of the partition (glue and ONNX Runtime) inside the graph."""
    threads: int | None
    providers: tuple[str, ...]
    onnx_nodes: int
    """Nodes of the model ortlab gave ONNX Runtime."""
    optimized_nodes: int
    """Nodes of ONNX Runtime's optimized graph (its profile's rows)."""


@dataclasses.dataclass
class GroupTime:
    """A group of FX nodes (a module, a source line, an op type) and their time."""

    key: str
    """The module path, source line or op type."""
    seconds: float
    """Their time per call (a module's includes its submodules')."""
    nodes: int
    self_seconds: float = 0.0
    """A module's own nodes only (its submodules' left out)."""
    label: str = ""
    """A module's class (``"BertLayer"``); an op type's provider."""
    depth: int = 0
    """A module's depth (the model: 0)."""


@dataclasses.dataclass
class Advice:
    """One option tried on the model (``profile(..., advise=True)``: ``_advice``)."""

    option: str
    value: Any
    why: str
    """What in the profile made it worth a trial."""
    current_seconds: float | None = None
    """Median of the call as compiled now (timed with the trial, interleaved)."""
    trial_seconds: float | None = None
    current_p90_seconds: float | None = None
    trial_p90_seconds: float | None = None
    recommended: bool = False
    note: str = ""
    """Why the trial failed, or how its outputs differ."""

    @property
    def gain(self) -> float | None:
        """``current / trial`` (above 1: the option makes the call faster)."""
        if not self.current_seconds or not self.trial_seconds:
            return None
        return self.current_seconds / self.trial_seconds

    @property
    def setting(self) -> str:
        return f"{self.option}={self.value!r}"

    @property
    def text(self) -> str:
        """One line: the option, the measured times and the verdict."""
        if self.gain is None:
            return f"{self.setting}: not measured ({self.note or 'the trial failed'})"
        assert self.current_seconds is not None and self.trial_seconds is not None
        verdict = "recommended" if self.recommended else "no clear gain"
        line = (
            f"{self.setting}: {self.current_seconds * 1e3:.3g} -> "
            f"{self.trial_seconds * 1e3:.3g} ms per call (x{self.gain:.2f}, measured on "
            f"this model): {verdict}. Tried because {self.why}"
        )
        return f"{line}; {self.note}" if self.note else line


@dataclasses.dataclass
class Profile:
    """Where the time of one compiled call goes (``ortlab.profile``)."""

    call_seconds: float
    """Median of the compiled call, timed by the bench engine."""
    call_p10_seconds: float
    call_p90_seconds: float
    runs: int
    nodes: list[NodeTime] = dataclasses.field(default_factory=list)
    ort_nodes: list[OrtNodeTime] = dataclasses.field(default_factory=list)
    overheads: list[Overhead] = dataclasses.field(default_factory=list)
    sessions: list[SessionTime] = dataclasses.field(default_factory=list)
    sequence: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    """What the call ran, in order: ``(graph index, FX node name or partition name)``."""
    notes: list[str] = dataclasses.field(default_factory=list)
    advice: list[Advice] = dataclasses.field(default_factory=list)
    """Options tried on this model, with the gain measured (``advise=True``)."""
    model_class: str = ""
    """The class of the model (the root of the module tree)."""
    label: str = ""
    backend: OrtBackend | None = dataclasses.field(default=None, repr=False, compare=False)
    """The backend whose records the nodes name (for the graph views)."""

    # -- totals --------------------------------------------------------------------------
    def overhead(self, kind: OverheadKind) -> float:
        """Seconds per call of one kind of :class:`Overhead`."""
        return sum(o.seconds for o in self.overheads if o.kind == kind)

    @property
    def node_seconds(self) -> float:
        return sum(n.seconds for n in self.nodes)

    @property
    def attributed_seconds(self) -> float:
        """Every measured part: FX nodes and overheads, unattributed left out."""
        return self.node_seconds + sum(
            o.seconds for o in self.overheads if o.kind != "unattributed"
        )

    @property
    def unattributed_seconds(self) -> float:
        return self.call_seconds - self.attributed_seconds

    @property
    def coverage(self) -> float:
        """``1 - |unattributed| / call``: how much of the call the parts explain (parts
        measured separately may also sum to more than the call)."""
        if self.call_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - abs(self.unattributed_seconds) / self.call_seconds)

    @property
    def attribution(self) -> str:
        """How much of the call the parts explain, in words: ``"93.2% attributed"``, or,
        where the parts (each measured on its own) sum to more than the call, by how much
        (``"parts sum to 107% of the call"``), which a coverage figure would hide."""
        if self.call_seconds > 0 and self.unattributed_seconds < 0:
            share = self.attributed_seconds / self.call_seconds * 100
            return f"parts sum to {share:.0f}% of the call"
        return f"{self.coverage * 100:.1f}% attributed"

    # -- groups --------------------------------------------------------------------------
    def by_module(self) -> list[GroupTime]:
        """Every module with the time of the nodes inside it (inclusive) and its own,
        the model itself first, then by time."""
        groups: dict[str, GroupTime] = {}
        for n in self.nodes:
            stack = n.modules or ((ROOT, self.model_class),)
            if stack[0][0] != ROOT:
                stack = ((ROOT, self.model_class), *stack)
            for depth, (path, cls) in enumerate(dict.fromkeys(stack)):
                g = groups.setdefault(path, GroupTime(path, 0.0, 0, label=cls, depth=depth))
                g.seconds += n.seconds
                g.nodes += 1
            groups[stack[-1][0]].self_seconds += n.seconds
        return sorted(groups.values(), key=lambda g: (g.key != ROOT, -g.seconds))

    def by_source(self) -> list[GroupTime]:
        """FX nodes grouped by the user's source line, by time."""
        return self._group(lambda n: n.source or "(no source line)")

    def by_op_type(self) -> list[GroupTime]:
        """ONNX Runtime's nodes grouped by op type (their measured share), by time."""
        groups: dict[str, GroupTime] = {}
        for o in self.ort_nodes:
            g = groups.setdefault(o.op_type, GroupTime(o.op_type, 0.0, 0, label=o.provider))
            g.seconds += o.seconds
            g.nodes += 1
        return sorted(groups.values(), key=lambda g: -g.seconds)

    def by_target(self) -> list[GroupTime]:
        """FX nodes grouped by their op (``aten.addmm.default``), by time."""
        return self._group(lambda n: n.target)

    def _group(self, key: Any) -> list[GroupTime]:
        groups: dict[str, GroupTime] = {}
        for n in self.nodes:
            k = key(n)
            g = groups.setdefault(k, GroupTime(k, 0.0, 0))
            g.seconds += n.seconds
            g.nodes += 1
        return sorted(groups.values(), key=lambda g: -g.seconds)

    def top_nodes(self, count: int = 10) -> list[NodeTime]:
        return sorted(self.nodes, key=lambda n: -n.seconds)[:count]

    def node(self, name: str, graph_index: int | None = None) -> NodeTime | None:
        """The row of an FX node by name (in ``graph_index`` when given)."""
        return next(
            (n for n in self.nodes if n.node == name and graph_index in (None, n.graph_index)),
            None,
        )

    # -- output --------------------------------------------------------------------------
    def to_chrome_trace(self, path: Any) -> str:
        """Writes the median call as a Chrome trace (``chrome://tracing``, Perfetto): one
        event per part, FX nodes inside the ONNX Runtime nodes that computed them, each
        with its FX node, module and source line in ``args``; returns the path."""
        from ortlab.profiling import _chrome

        return _chrome.write(self, path)

    def summary_rows(self) -> list[tuple[str, str]]:
        """``(part, ms per call)`` rows: the call, FX nodes by placement, overheads."""
        ms = _ms
        rows = [
            (
                "call (median)",
                f"{ms(self.call_seconds)} ms [p10–p90 "
                f"{ms(self.call_p10_seconds)}–{ms(self.call_p90_seconds)}], {self.runs} runs",
            ),
            (
                "FX nodes in ONNX Runtime",
                ms(sum(n.seconds for n in self.nodes if n.placement == "ort")),
            ),
            (
                "FX nodes in PyTorch",
                ms(sum(n.seconds for n in self.nodes if n.placement == "eager")),
            ),
        ]
        for o in self.overheads:
            label = OVERHEAD_LABELS[o.kind]
            if o.kind != "unattributed" and all(label != r[0] for r in rows):
                rows.append((label, ms(self.overhead(o.kind))))
        rows.append((OVERHEAD_LABELS["unattributed"], ms(self.unattributed_seconds)))
        rows.append(("attributed", self.attribution))
        return rows

    def text(self, top: int = 8) -> str:
        """A text summary: the parts, top modules, source lines and op types."""
        out = [
            f"Profile{f' of {self.label}' if self.label else ''}: "
            f"{_ms(self.call_seconds)} ms per call, {self.attribution}"
        ]
        out.append(_html.text_table(("part", "ms"), self.summary_rows()))
        modules = [g for g in self.by_module() if g.key != ROOT][:top]
        if modules:
            out.append("\nTop modules (ms, with submodules):")
            out.append(
                _html.text_table(
                    ("module", "class", "ms", "%", "nodes"),
                    [
                        (g.key, g.label, _ms(g.seconds), self._percent(g.seconds), g.nodes)
                        for g in modules
                    ],
                )
            )
        sources = self.by_source()[:top]
        if sources:
            out.append("\nTop source lines:")
            out.append(
                _html.text_table(
                    ("source", "ms", "%", "nodes"),
                    [
                        (g.key[:100], _ms(g.seconds), self._percent(g.seconds), g.nodes)
                        for g in sources
                    ],
                )
            )
        ops = self.by_op_type()[:top]
        if ops:
            out.append("\nONNX Runtime op types:")
            out.append(
                _html.text_table(
                    ("op type", "ms", "%", "nodes"),
                    [(g.key, _ms(g.seconds), self._percent(g.seconds), g.nodes) for g in ops],
                )
            )
        if self.advice:
            out.append("\nOptions tried on this model:")
            out.extend(f"  {a.text}" for a in self.advice)
        out.extend(f"note: {n}" for n in self.notes)
        return "\n".join(out)

    def _percent(self, seconds: float) -> str:
        return f"{seconds / self.call_seconds * 100:.1f}" if self.call_seconds > 0 else "-"

    def __repr__(self) -> str:
        return (
            f"Profile({_ms(self.call_seconds)} ms per call, {len(self.nodes)} FX nodes, "
            f"{len(self.ort_nodes)} ONNX Runtime nodes, {self.attribution})"
        )

    def _repr_html_(self) -> str:
        from ortlab.views import _profile

        return _profile.profile_html(self)


def _ms(seconds: float) -> str:
    """Milliseconds, three significant digits."""
    return _html.number(seconds * 1e3)
