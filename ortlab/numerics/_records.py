"""What a numerics comparison found, as plain data: tensors, nodes, partitions and sweep
rows (decision flips and the float64 reference are in :mod:`._findings`, the report that
holds them all in :mod:`._report`).

Each record gives its values two ways: ``row()`` (a dict of raw values, keys
``COLUMNS``, for DataFrames) and ``cells()`` (display text, headers ``HEADERS``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ortlab import _html
from ortlab.numerics import _tabular

if TYPE_CHECKING:
    from ortlab.numerics._findings import DecisionFlip


@dataclasses.dataclass
class TensorDiff(_tabular.Tabular):
    """The comparison of one ONNX Runtime value with its eager counterpart.

    Errors are computed in float64 over elements finite on both sides; NaN/Inf are counted
    separately, and a NaN or Inf on one side only makes ``max_abs_error`` infinite (the
    rules: :mod:`ortlab.numerics._compare`).
    """

    name: str
    """``"output[0]"``, ``"grad[fc1.weight]"``, or a partition output's FX name."""
    shape: tuple[int, ...]
    dtype: str
    atol: float
    """The absolute tolerance applied (for an intermediate judged with eager's rounding,
    ``atol + ROUNDING_FACTOR * rounding``: :mod:`ortlab.numerics._compare`)."""
    rtol: float
    passed: bool
    """No element mismatched (and shape/dtype agree)."""
    max_abs_error: float = 0.0
    mean_abs_error: float = 0.0
    max_rel_error: float = 0.0
    """Largest ``|ort - eager| / |eager|`` over elements where eager is non-zero."""
    p99_abs_error: float = 0.0
    mismatched: int = 0
    """Elements outside the tolerance."""
    numel: int = 0
    nan_eager: int = 0
    """NaN elements of the eager value."""
    nan_ort: int = 0
    """NaN elements of the ONNX Runtime value."""
    inf_eager: int = 0
    """Infinite elements of the eager value."""
    inf_ort: int = 0
    """Infinite elements of the ONNX Runtime value."""
    exact: bool = False
    """Compared exactly (integer/bool dtype, or a Python scalar)."""
    scale: float = 0.0
    """Largest finite ``|eager|``."""
    rounding: float | None = None
    """For an intermediate beyond the plain tolerance: eager's own rounding, the largest
    ``|eager - float64|`` of the same computation; ``None`` when not measured (within the
    plain tolerance, or the float64 run failed: ``note``)."""
    ratio: float = 0.0
    """Largest ``|ort - eager| / (atol + rtol * |eager|)`` over elements: above 1 means a
    mismatch; the views colour by it."""
    worst_index: tuple[int, ...] | None = None
    """Position of the largest error."""
    eager_at_worst: float | None = None
    ort_at_worst: float | None = None
    note: str = ""
    eager_sample: np.ndarray | None = dataclasses.field(default=None, repr=False)
    """Up to 20 000 finite eager values (an even stride), for plots."""
    error_sample: np.ndarray | None = dataclasses.field(default=None, repr=False)
    """``|ort - eager|`` at the same positions."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "name",
        "shape",
        "dtype",
        "passed",
        "max_abs",
        "mean_abs",
        "max_rel",
        "p99_abs",
        "mismatched",
        "numel",
        "nan_eager",
        "nan_ort",
        "inf_eager",
        "inf_ort",
        "atol",
        "rtol",
        "exact",
        "note",
    )
    HEADERS: ClassVar[tuple[str, ...]] = (
        "name",
        "shape",
        "dtype",
        _tabular.VERDICT,
        "max abs",
        "mean abs",
        "max rel",
        "p99 abs",
        "mismatched",
        "nan/inf (eager/ORT)",
        "atol",
        "rtol",
        "note",
    )

    @property
    def nonfinite(self) -> str:
        """``"nan 2/0 inf 0/1"`` (eager/ORT), or ``""`` when all values are finite."""
        parts = []
        if self.nan_eager or self.nan_ort:
            parts.append(f"nan {self.nan_eager}/{self.nan_ort}")
        if self.inf_eager or self.inf_ort:
            parts.append(f"inf {self.inf_eager}/{self.inf_ort}")
        return " ".join(parts)

    def cells(self) -> tuple[str, ...]:
        return (
            self.name,
            _tabular.shape_text(self.shape),
            self.dtype,
            _tabular.verdict(self.passed),
            _html.number(self.max_abs_error),
            _html.number(self.mean_abs_error),
            _html.number(self.max_rel_error),
            _html.number(self.p99_abs_error),
            f"{self.mismatched}/{self.numel}",
            self.nonfinite,
            "exact" if self.exact else _html.number(self.atol),
            "exact" if self.exact else _html.number(self.rtol),
            self.note,
        )

    def values(self) -> tuple[Any, ...]:
        return (
            self.name,
            _tabular.shape_text(self.shape),
            self.dtype,
            self.passed,
            self.max_abs_error,
            self.mean_abs_error,
            self.max_rel_error,
            self.p99_abs_error,
            self.mismatched,
            self.numel,
            self.nan_eager,
            self.nan_ort,
            self.inf_eager,
            self.inf_ort,
            self.atol,
            self.rtol,
            self.exact,
            self.note,
        )

    def __repr__(self) -> str:
        extra = f", {self.nonfinite}" if self.nonfinite else ""
        note = f", {self.note}" if self.note else ""
        return (
            f"TensorDiff({self.name}: {_tabular.verdict(self.passed)}, "
            f"max_abs={_html.number(self.max_abs_error)}, "
            f"max_rel={_html.number(self.max_rel_error)}, "
            f"mismatched={self.mismatched}/{self.numel}{extra}{note})"
        )


@dataclasses.dataclass
class NodeDiff(_tabular.Tabular):
    """One FX node of a partition against the ONNX value it was translated to.

    Two comparisons, both on the exact inputs ONNX Runtime received for the partition:

    - ``diff``: the ONNX value against the FX subgraph run eagerly (error accumulated up
      to this node inside the partition);
    - ``local``: the ONNX value against this one op run eagerly on the ONNX values of its
      own operands (the error this node adds by itself).

    A node *diverges* when its local error is beyond tolerance: errors made upstream and
    merely passed along do not count, so the first divergent node is where it goes wrong.
    """

    partition: str
    graph_index: int
    graph_kind: str
    node: str
    """The FX node's name (the ONNX value usually carries the same name)."""
    target: str
    """The FX node's op, e.g. ``"aten.sigmoid.default"`` (``"placeholder"`` for a frozen
    parameter compared with its ONNX initializer)."""
    position: int
    """Index of the node in the partition's graph (topological order)."""
    onnx_value: str
    """Name of the ONNX value compared (``""`` when none could be matched)."""
    onnx_ops: tuple[str, ...]
    """Op types of the ONNX nodes stamped with this FX node, in graph order."""
    diff: TensorDiff | None
    """Accumulated error; ``None`` when there was nothing to compare (see ``note``)."""
    local: TensorDiff | None = None
    """This op's own error; ``None`` when it could not be isolated (then ``diff`` decides)."""
    note: str = ""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "graph",
        "partition",
        "position",
        "node",
        "target",
        "onnx_ops",
        "onnx_value",
        "shape",
        "diverged",
        "local_abs",
        "max_abs",
        "max_rel",
        "rounding",
        "atol",
        "mismatched",
        "note",
    )
    HEADERS: ClassVar[tuple[str, ...]] = (
        "#",
        "node",
        "op",
        "ONNX ops",
        "shape",
        _tabular.VERDICT,
        "own max abs",
        "accumulated max abs",
        "eager rounding",
        "atol used",
        "note",
    )

    @property
    def diverged(self) -> bool:
        """The node's own error (``local``, else ``diff``) is beyond tolerance."""
        decisive = self.local if self.local is not None else self.diff
        return decisive is not None and not decisive.passed

    @property
    def beyond_tolerance(self) -> bool:
        """The accumulated error is beyond tolerance (whoever made it)."""
        return self.diff is not None and not self.diff.passed

    @property
    def max_abs_error(self) -> float:
        return self.diff.max_abs_error if self.diff is not None else 0.0

    @property
    def local_error(self) -> float | None:
        return self.local.max_abs_error if self.local is not None else None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.diff.shape if self.diff is not None else ()

    @property
    def rounding(self) -> float | None:
        """Eager's own rounding where it was measured: of the op alone (``local``) when
        it diverged or was judged with it, else of the computation up to the node."""
        for d in (self.local, self.diff):
            if d is not None and d.rounding is not None:
                return d.rounding
        return None

    @property
    def ops_text(self) -> str:
        """The ONNX op types, each once: ``"Mul/Add"``."""
        return "/".join(dict.fromkeys(self.onnx_ops))

    def describe(self) -> str:
        """One line a person can act on: where, which op, how wrong."""
        d = self.local if self.diverged and self.local is not None else self.diff
        where = f"{self.partition} ({self.graph_kind} graph {self.graph_index})"
        ops = "initializer" if self.target == "placeholder" else (self.ops_text or "?")
        if d is None:
            return f"node {self.node} = {self.target} in {where}: {self.note}"
        at = ""
        if d.worst_index is not None:
            at = (
                f" at {list(d.worst_index)} (eager {d.eager_at_worst:.6g}, "
                f"ORT {d.ort_at_worst:.6g})"
            )
        which = "own" if d is self.local else "accumulated"
        return (
            f"node {self.node} = {self.target} -> ONNX {ops} in {where}: "
            f"{d.dtype}[{_tabular.shape_text(d.shape)}], {which} max abs error "
            f"{_html.number(d.max_abs_error)}{at}, {d.mismatched}/{d.numel} elements beyond "
            f"atol={_html.number(d.atol)}, rtol={_html.number(d.rtol)}"
        )

    def cells(self) -> tuple[str, ...]:
        d = self.diff
        return (
            str(self.position),
            self.node,
            self.target,
            self.ops_text,
            "x".join(map(str, d.shape)) if d else "",
            _tabular.verdict(not self.diverged) if d else "-",
            _html.number(self.local_error),
            _html.number(d.max_abs_error if d else None),
            _html.number(self.rounding),
            _html.number(d.atol if d else None),
            self.note or (d.note if d else ""),
        )

    def values(self) -> tuple[Any, ...]:
        d, local = self.diff, self.local
        return (
            f"{self.graph_index} ({self.graph_kind})",
            self.partition,
            self.position,
            self.node,
            self.target,
            self.ops_text,
            self.onnx_value,
            "x".join(map(str, d.shape)) if d else "",
            self.diverged,
            local.max_abs_error if local else None,
            d.max_abs_error if d else None,
            d.max_rel_error if d else None,
            self.rounding,
            d.atol if d else None,
            d.mismatched if d else None,
            self.note or (d.note if d else ""),
        )

    def __repr__(self) -> str:
        return f"NodeDiff({'DIVERGED' if self.diverged else 'ok'}: {self.describe()})"


@dataclasses.dataclass
class PartitionDiff(_tabular.Tabular):
    """One partition run: local error, error carried in, and its nodes when it failed."""

    name: str
    graph_index: int
    graph_kind: str
    run: int
    """Which run of this partition during the diff (0 for the first)."""
    state: str
    """``"ort"`` (compared), ``"eager"`` (fell back to PyTorch) or ``"not run"``."""
    session_index: int | None = None
    outputs: list[TensorDiff] = dataclasses.field(default_factory=list)
    """ORT outputs vs the FX subgraph run eagerly on ORT's exact inputs (local error)."""
    carried_in: float | None = None
    """Largest absolute error of this partition's inputs against an all-eager run of the
    same graph (``None`` when that run was not possible, see ``notes``)."""
    carried_in_from: str = ""
    """The input with that largest error."""
    total_error: float | None = None
    """Largest absolute error of the outputs against the all-eager run of the graph."""
    nodes: list[NodeDiff] = dataclasses.field(default_factory=list)
    """Every compared FX node (filled for failing partitions, or all with ``nodes=True``)."""
    flips: list[DecisionFlip] = dataclasses.field(default_factory=list)
    """Decision flips among this partition's nodes, in topological order."""
    notes: list[str] = dataclasses.field(default_factory=list)
    stale_frozen: list[str] = dataclasses.field(default_factory=list)
    """Frozen weights (``freeze_parameters``) whose values in the session's model no
    longer match the module's tensors: written without PyTorch counting it (through
    ``.data`` in place, a NumPy view), each as a sentence naming it."""
    run_data: Any = dataclasses.field(default=None, repr=False, compare=False)
    """What ONNX Runtime received and returned in this run (the numerics runner's
    ``Capture``), kept for runs a repro may be saved from (failing or holding a flip),
    ``None`` elsewhere (:meth:`DiffReport.save_repro`)."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "graph",
        "partition",
        "run",
        "state",
        "passed",
        "local_error",
        "carried_in",
        "carried_in_from",
        "total_error",
        "first_divergent",
        "flips",
        "nodes_compared",
        "notes",
    )
    HEADERS: ClassVar[tuple[str, ...]] = (
        "partition",
        "state",
        _tabular.VERDICT,
        "local error",
        "carried in",
        "worst input",
        "total error",
        "first divergent",
        "decision flips",
        "notes",
    )

    @property
    def compared(self) -> bool:
        """The partition ran in ONNX Runtime and its outputs were compared."""
        return self.state == "ort"

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    @property
    def local_error(self) -> float:
        """Largest absolute error this partition introduces itself."""
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    @property
    def first_divergent(self) -> NodeDiff | None:
        """The node to look at: the first, in topological order, whose own error is beyond
        tolerance; when none is (small errors adding up), the first whose accumulated
        error is."""
        found = next((n for n in self.nodes if n.diverged), None)
        return found or next((n for n in self.nodes if n.beyond_tolerance), None)

    @property
    def label(self) -> str:
        run = f" run {self.run}" if self.run else ""
        return f"{self.graph_kind} {self.graph_index}/{self.name}{run}"

    def describe(self) -> str:
        """One line on a failing partition run: its own error, at its worst output
        (``""`` when it passed or was not compared)."""
        failing = [o for o in self.outputs if not o.passed]
        if not self.compared or not failing:
            return ""
        worst = max(failing, key=lambda o: o.ratio)
        run = f" run {self.run}" if self.run else ""
        rounding = (
            f", eager's own rounding {_html.number(worst.rounding)}"
            if worst.rounding is not None
            else ""
        )
        return (
            f"partition {self.name}{run} ({self.graph_kind} graph {self.graph_index}) is "
            f"wrong on its own inputs: output {worst.name} {worst.dtype}"
            f"[{_tabular.shape_text(worst.shape)}], local max abs error "
            f"{_html.number(worst.max_abs_error)}, {worst.mismatched}/{worst.numel} elements "
            f"beyond atol={_html.number(worst.atol)}, rtol={_html.number(worst.rtol)}"
            f"{rounding}"
        )

    def cells(self) -> tuple[str, ...]:
        first = self.first_divergent
        return (
            self.label,
            self.state,
            _tabular.verdict(self.passed if self.compared else None),
            _html.number(self.local_error if self.compared else None),
            _html.number(self.carried_in),
            self.carried_in_from,
            _html.number(self.total_error),
            first.node if first else "",
            ", ".join(f.node for f in self.flips),
            "; ".join(self.notes),
        )

    def values(self) -> tuple[Any, ...]:
        first = self.first_divergent
        return (
            f"{self.graph_index} ({self.graph_kind})",
            self.name,
            self.run,
            self.state,
            self.passed if self.compared else None,
            self.local_error if self.compared else None,
            self.carried_in,
            self.carried_in_from,
            self.total_error,
            first.node if first else "",
            len(self.flips),
            sum(1 for n in self.nodes if n.diff is not None),
            "; ".join(self.notes),
        )

    def __repr__(self) -> str:
        if not self.compared:
            return f"PartitionDiff({self.label}: {self.state}; {'; '.join(self.notes)})"
        first = self.first_divergent
        tail = f", first divergent node {first.node}" if first else ""
        if self.flips:
            tail += f", decision flips at {', '.join(f.node for f in self.flips)}"
        return (
            f"PartitionDiff({self.label}: {_tabular.verdict(self.passed)}, "
            f"local={_html.number(self.local_error)}, "
            f"carried_in={_html.number(self.carried_in)}{tail})"
        )
