"""What a numerics comparison found, as plain data: tensors, nodes, decision flips,
partitions, the float64 reference, sweep rows.

Each record gives its values two ways, both defined here once: ``row()`` (a dict of raw
values, keys ``COLUMNS``, for DataFrames) and ``cells()`` (display text, headers
``HEADERS``, for the text ``repr`` and the HTML tables of :mod:`ortlab.views.numerics`).
:class:`DiffReport` renders itself as text here and delegates HTML and DataFrames to the
views (imported when first used).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ortlab import _html

if TYPE_CHECKING:
    import pandas

    from ortlab.backend import OrtBackend

VERDICT = "verdict"
"""The header of the pass/FAIL column of every display table (the views colour it)."""


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("pass" if passed else "FAIL")


class _Tabular:
    """A record shown as a table row: raw ``values()`` under ``COLUMNS`` (DataFrames),
    display ``cells()`` under ``HEADERS`` (text and HTML tables)."""

    COLUMNS: ClassVar[tuple[str, ...]] = ()
    HEADERS: ClassVar[tuple[str, ...]] = ()

    def values(self) -> tuple[Any, ...]:
        """Raw values, one per ``COLUMNS``."""
        raise NotImplementedError

    def cells(self) -> tuple[str, ...]:
        """Display text, one per ``HEADERS``."""
        raise NotImplementedError

    def row(self) -> dict[str, Any]:
        """Raw values keyed by ``COLUMNS``."""
        return dict(zip(self.COLUMNS, self.values()))


@dataclasses.dataclass
class TensorDiff(_Tabular):
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
    """The absolute tolerance applied (after scaling, for intermediates)."""
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
    """Largest finite ``|eager|`` (for intermediates: of the value and its op's operands)."""
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
        VERDICT,
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
            _shape_text(self.shape),
            self.dtype,
            _verdict(self.passed),
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
            _shape_text(self.shape),
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
            f"TensorDiff({self.name}: {_verdict(self.passed)}, "
            f"max_abs={_html.number(self.max_abs_error)}, "
            f"max_rel={_html.number(self.max_rel_error)}, "
            f"mismatched={self.mismatched}/{self.numel}{extra}{note})"
        )


@dataclasses.dataclass
class NodeDiff(_Tabular):
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
        "scale",
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
        VERDICT,
        "own max abs",
        "accumulated max abs",
        "scale",
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
            f"{d.dtype}[{_shape_text(d.shape)}], {which} max abs error "
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
            _verdict(not self.diverged) if d else "-",
            _html.number(self.local_error),
            _html.number(d.max_abs_error if d else None),
            _html.number(d.scale if d else None),
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
            d.scale if d else None,
            d.atol if d else None,
            d.mismatched if d else None,
            self.note or (d.note if d else ""),
        )

    def __repr__(self) -> str:
        return f"NodeDiff({'DIVERGED' if self.diverged else 'ok'}: {self.describe()})"


FLIP_EXPLANATION = (
    "Float rounding put a value on the other side of a discontinuity (a comparison's "
    "threshold, a tie between candidates): no op is wrong, and what depends on this "
    "decision downstream, gradients in particular, differs legitimately."
)
"""What every decision flip means, said once (the report's headline, views, READMEs)."""

FLIP_HINT = "To judge, compare both with a float64 run: ortlab.diff(..., reference='float64')."
"""How to judge a flip, said where no float64 reference was computed."""


def _value_text(value: float | None) -> str:
    """A value at an element, with enough digits to see where it lies (``"1.1e-05"``)."""
    return "-" if value is None else f"{value:.3g}"


@dataclasses.dataclass(frozen=True)
class FlipValue:
    """One value at a flipped element, as eager and as ONNX Runtime computed it."""

    label: str
    """What the value is: ``"relu_15"``, ``"x at eager's choice 3"``."""
    eager: float
    ort: float

    @property
    def text(self) -> str:
        """``"relu_15 = 1.1e-05 in eager, 0 in ORT"``."""
        eager, ort = _value_text(self.eager), _value_text(self.ort)
        return f"{self.label} = {eager} in eager, {ort} in ORT"


@dataclasses.dataclass
class DecisionFlip(_Tabular):
    """A node with a discrete result (a comparison's booleans, argmax or max-pool indices)
    whose value in the ortlab run differs from an all-eager run of the same graphs, although
    its operands agree with eager within the intermediate tolerance, and the op run eagerly
    on ONNX Runtime's operands decides as ONNX Runtime did.

    Such a node is not wrong: float rounding put an operand on the other side of a
    discontinuity (:data:`FLIP_EXPLANATION`), and everything downstream of the decision,
    gradients in particular, may differ by far more than rounding.
    """

    graph_index: int
    graph_kind: str
    partition: str
    """The partition the node belongs to."""
    run: int
    """Which run of that partition (``PartitionDiff.run``)."""
    node: str
    """The FX node with the discrete result (``"le"``, or the ``getitem`` of an op's
    indices)."""
    target: str
    """The op that decided: ``"aten.le.Scalar"``,
    ``"aten.max_pool2d_with_indices.default"``."""
    position: int
    """Index of the deciding node in the partition's graph (topological order)."""
    source: str
    """Where the node comes from in the user's code (its verdict's ``source``)."""
    flipped: int
    """Elements whose value differs from eager."""
    numel: int
    index: tuple[int, ...]
    """The first flipped element."""
    eager_result: Any
    """Eager's value there (``False``, an index)."""
    ort_result: Any
    at_first: tuple[FlipValue, ...] = ()
    """The operands at the first flipped element, eager and ORT (looked up through
    ``detach``; a ReLU's input too)."""
    threshold: float | None = None
    """The constant a comparison compares with, when it is one."""
    operand_error: float = 0.0
    """Largest ``|ORT - eager|`` of the operands, over all their elements."""
    operand_atol: float = 0.0
    """The intermediate tolerance the operands are within."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "graph",
        "partition",
        "node",
        "target",
        "source",
        "flipped",
        "numel",
        "index",
        "eager_result",
        "ort_result",
        "at_first",
        "threshold",
        "operand_error",
        "operand_atol",
    )
    HEADERS: ClassVar[tuple[str, ...]] = (
        "where",
        "node",
        "op",
        "flipped",
        "first at (eager / ORT)",
        "operands there",
        "threshold",
        "operand error",
        "source",
    )

    @property
    def where(self) -> str:
        run = f" run {self.run}" if self.run else ""
        return f"{self.graph_kind} {self.graph_index}/{self.partition}{run}"

    @property
    def values_text(self) -> str:
        """``"relu_15 = 1.1e-05 in eager, 0 in ORT; ..."``."""
        return "; ".join(v.text for v in self.at_first)

    def describe(self) -> str:
        """One line: the node, its source line, what flipped, the values there."""
        source = f" [{self.source}]" if self.source else ""
        text = (
            f"decision flip at {self.node} = {self.target} in {self.partition} "
            f"({self.graph_kind} graph {self.graph_index}){source}: {self.flipped} of "
            f"{self.numel} elements differ from eager (first at {list(self.index)}: eager "
            f"{self.eager_result}, ORT {self.ort_result})"
        )
        if self.at_first:
            text += f"; there {self.values_text}"
        if self.threshold is not None:
            text += f" (threshold {_value_text(self.threshold)})"
        return (
            f"{text}; the operands agree with eager within tolerance (max abs difference "
            f"{_html.number(self.operand_error)}, allowed {_html.number(self.operand_atol)})"
        )

    def cells(self) -> tuple[str, ...]:
        return (
            self.where,
            self.node,
            self.target,
            f"{self.flipped}/{self.numel}",
            f"{list(self.index)}: {self.eager_result} / {self.ort_result}",
            self.values_text,
            _value_text(self.threshold),
            _html.number(self.operand_error),
            self.source,
        )

    def values(self) -> tuple[Any, ...]:
        return (
            f"{self.graph_index} ({self.graph_kind})",
            self.partition,
            self.node,
            self.target,
            self.source,
            self.flipped,
            self.numel,
            self.index,
            self.eager_result,
            self.ort_result,
            self.values_text,
            self.threshold,
            self.operand_error,
            self.operand_atol,
        )

    def __repr__(self) -> str:
        return f"DecisionFlip({self.describe()})"


@dataclasses.dataclass
class PartitionDiff(_Tabular):
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
        VERDICT,
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

    def cells(self) -> tuple[str, ...]:
        first = self.first_divergent
        return (
            self.label,
            self.state,
            _verdict(self.passed if self.compared else None),
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
            f"PartitionDiff({self.label}: {_verdict(self.passed)}, "
            f"local={_html.number(self.local_error)}, "
            f"carried_in={_html.number(self.carried_in)}{tail})"
        )


@dataclasses.dataclass
class ReferenceDiff(_Tabular):
    """One output or gradient against the float64 run: how far eager and ortlab each are."""

    name: str
    kind: str
    """``"output"`` or ``"gradient"``."""
    eager_error: float
    """Largest ``|eager - float64|``."""
    ort_error: float
    """Largest ``|ortlab - float64|``."""
    allowed: float
    """What ``ort_error`` may be: twice ``eager_error``, that counted as at least 1e-6 of
    the tensor's magnitude (:func:`ortlab.numerics._compare.float64_allowed`)."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "as_close",
        "eager_error",
        "ort_error",
        "allowed",
    )
    HEADERS: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        VERDICT,
        "eager vs float64",
        "ortlab vs float64",
        "allowed",
    )

    @property
    def as_close(self) -> bool:
        """ortlab is as close to float64 as eager is (within :attr:`allowed`)."""
        return self.ort_error <= self.allowed

    def cells(self) -> tuple[str, ...]:
        return (
            self.kind,
            self.name,
            _verdict(self.as_close),
            _html.number(self.eager_error),
            _html.number(self.ort_error),
            _html.number(self.allowed),
        )

    def values(self) -> tuple[Any, ...]:
        return (
            self.kind,
            self.name,
            self.as_close,
            self.eager_error,
            self.ort_error,
            self.allowed,
        )

    def __repr__(self) -> str:
        return (
            f"ReferenceDiff({self.name}: ortlab {_html.number(self.ort_error)} vs eager "
            f"{_html.number(self.eager_error)} from float64, "
            f"{'as close' if self.as_close else 'NOT as close'})"
        )


@dataclasses.dataclass
class Float64Reference:
    """Eager and ortlab, each against the same call run eagerly in float64
    (``ortlab.diff(..., reference="float64")``): whether ortlab is as close to the exact
    result as eager is, tensor by tensor."""

    tensors: list[ReferenceDiff]
    notes: list[str] = dataclasses.field(default_factory=list)
    """What the float64 run could not do (it failed)."""

    @property
    def as_close(self) -> bool:
        """Every tensor as close to float64 through ortlab as in eager (``False`` when the
        float64 run failed)."""
        return bool(self.tensors) and all(t.as_close for t in self.tensors)

    def summary(self) -> str:
        """Per kind of tensor: ``"float64 reference: outputs as close as eager (max: ortlab
        7.3e-07, eager 8.7e-07); gradients NOT as close as eager for 2 of 9 (worst
        grad[w]: ortlab 0.23, eager 1.2e-06), nearer than eager for 5"``."""
        if not self.tensors:
            why = "; ".join(self.notes) or "nothing was compared"
            return f"float64 reference: not available ({why})"
        parts = []
        for kind in dict.fromkeys(t.kind for t in self.tensors):
            mine = [t for t in self.tensors if t.kind == kind]
            bad = [t for t in mine if not t.as_close]
            nearer = sum(1 for t in mine if t.ort_error < t.eager_error)
            if not bad:
                parts.append(
                    f"{kind}s as close as eager (max: ortlab "
                    f"{_html.number(max(t.ort_error for t in mine))}, eager "
                    f"{_html.number(max(t.eager_error for t in mine))})"
                )
                continue
            worst = max(bad, key=lambda t: t.ort_error / max(t.allowed, 1e-300))
            parts.append(
                f"{kind}s NOT as close as eager for {len(bad)} of {len(mine)} (worst "
                f"{worst.name}: ortlab {_html.number(worst.ort_error)}, eager "
                f"{_html.number(worst.eager_error)}), nearer than eager for {nearer}"
            )
        return "float64 reference: " + "; ".join(parts)

    def cells(self) -> list[tuple[str, ...]]:
        """Display text of every tensor (headers :attr:`ReferenceDiff.HEADERS`)."""
        return [t.cells() for t in self.tensors]

    def __repr__(self) -> str:
        return f"Float64Reference({self.summary()})"


@dataclasses.dataclass
class SweepRow(_Tabular):
    """One configuration of a sweep: its settings, its error and its latency."""

    label: str
    settings: dict[str, Any]
    status: str
    """``"ok"``, ``"skipped: ..."`` (e.g. provider unavailable) or ``"error: ..."``."""
    providers: tuple[str, ...] = ()
    """Providers the sessions actually used."""
    passed: bool | None = None
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    max_rel_error: float | None = None
    latency_ms: float | None = None
    """Median wall time of one compiled call (forward, plus backward when diffed), timed
    interleaved with every other configuration (:mod:`ortlab.bench`'s engine)."""
    report: DiffReport | None = dataclasses.field(default=None, repr=False)
    """The full comparison of this configuration."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "config",
        "status",
        "providers",
        "passed",
        "max_abs",
        "mean_abs",
        "max_rel",
        "latency_ms",
    )
    HEADERS: ClassVar[tuple[str, ...]] = (
        "config",
        "status",
        "providers",
        VERDICT,
        "max abs",
        "mean abs",
        "max rel",
        "latency ms",
    )

    def cells(self) -> tuple[str, ...]:
        return (
            self.label,
            self.status,
            ", ".join(self.providers),
            _verdict(self.passed),
            _html.number(self.max_abs_error),
            _html.number(self.mean_abs_error),
            _html.number(self.max_rel_error),
            _html.number(self.latency_ms),
        )

    def values(self) -> tuple[Any, ...]:
        return (
            self.label,
            self.status,
            ", ".join(self.providers),
            self.passed,
            self.max_abs_error,
            self.mean_abs_error,
            self.max_rel_error,
            self.latency_ms,
        )


@dataclasses.dataclass
class DiffReport:
    """What :func:`ortlab.diff` found: outputs, gradients, partitions, first divergent node,
    decision flips.

    ``passed`` is the verdict on what a user sees (outputs, and gradients when diffed), at
    ``torch.testing.assert_close`` semantics. Partitions and nodes explain a failure: a
    failing partition introduces error itself (``first_divergent`` says where); a decision
    flip (``flips``) is rounding that crossed a discontinuity, after which results differ
    legitimately; a failing output with neither means error accumulated across partitions
    (see each partition's ``carried_in``). ``first_cause`` is the first of these in
    execution order. The tolerance rules are in :mod:`ortlab.numerics._compare`.
    """

    outputs: list[TensorDiff]
    """One entry per tensor (or scalar) in the flattened output, in order."""
    gradients: list[TensorDiff]
    """``backward=True``: one entry per parameter / input gradient."""
    partitions: list[PartitionDiff]
    """Every partition run, in execution order, then partitions that did not run in ORT."""
    backend: OrtBackend
    """The backend of the compiled run (its records show what ran where)."""
    atol: float | Mapping[str, float] | None = None
    rtol: float | Mapping[str, float] | None = None
    backward: bool = False
    eager_seconds: float = 0.0
    """Wall time of the eager call (forward, plus backward when diffed)."""
    compiled_seconds: float = 0.0
    """Wall time of the compiled call, compilation included."""
    sweep: list[SweepRow] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    """Warnings and anything the comparison could not do."""
    reference: Float64Reference | None = None
    """Eager and ortlab against a float64 run (``reference="float64"``), else ``None``."""

    TENSOR_HEADERS: ClassVar[tuple[str, ...]] = ("kind", *TensorDiff.HEADERS)
    """Headers of :meth:`tensor_cells`."""

    @property
    def passed(self) -> bool:
        """Every output (and gradient) within tolerance."""
        return all(t.passed for t in (*self.outputs, *self.gradients))

    @property
    def partitions_passed(self) -> bool:
        """Every partition run within the intermediate tolerance."""
        return all(p.passed for p in self.partitions if p.compared)

    @property
    def max_abs_error(self) -> float:
        """Largest absolute error over outputs and gradients."""
        return max((t.max_abs_error for t in (*self.outputs, *self.gradients)), default=0.0)

    @property
    def failing_partitions(self) -> list[PartitionDiff]:
        return [p for p in self.partitions if p.compared and not p.passed]

    @property
    def first_divergent(self) -> NodeDiff | None:
        """The first divergent node of the first failing partition, in execution order."""
        for p in self.failing_partitions:
            if p.first_divergent is not None:
                return p.first_divergent
        return None

    @property
    def nodes(self) -> list[NodeDiff]:
        """Every compared node, partition by partition."""
        return [n for p in self.partitions for n in p.nodes]

    @property
    def flips(self) -> list[DecisionFlip]:
        """Every decision flip, in execution order."""
        return [f for p in self.partitions for f in p.flips]

    @property
    def first_cause(self) -> DecisionFlip | NodeDiff | None:
        """Where to look first: in execution order, the first decision flip or first
        divergent node of a failing partition. Within one partition run a node whose own
        error diverges upstream of the flip comes first; otherwise the flip does (a flipped
        comparison also fails the exact comparison of its node)."""
        for part in self.partitions:
            if not part.compared:
                continue
            flip = part.flips[0] if part.flips else None
            node = None if part.passed else part.first_divergent
            if flip is None or node is None:
                if flip is not None or node is not None:
                    return flip or node
                continue
            return node if node.diverged and node.position < flip.position else flip
        return None

    @property
    def repro_partition(self) -> PartitionDiff | None:
        """The partition run :meth:`save_repro` writes: the first whose local error is
        beyond tolerance, else the one holding :attr:`first_cause`; ``None`` when there is
        neither."""
        failing = self.failing_partitions
        if failing:
            return failing[0]
        cause = self.first_cause
        for part in self.partitions:
            if any(x is cause for x in (*part.flips, *part.nodes)):
                return part
        return None

    def save_repro(self, directory: str | os.PathLike[str]) -> str:
        """Writes the partition run to look at (:attr:`repro_partition`) as an ONNX test
        case: its model, exactly the inputs ONNX Runtime received, and as expected outputs
        what eager PyTorch computes from them (the partition's FX graph run eagerly),
        with a README saying what failed and how to run it again (``onnx_test_runner DIR``
        or any ONNX backend test). Returns the directory.

        Raises:
            OrtlabError: nothing failed (no partition beyond tolerance, no decision flip),
                or that partition run's inputs were not kept.
        """
        from ortlab.numerics import _repro

        return _repro.save_repro(self, directory)

    def tensor_cells(self) -> list[tuple[str, ...]]:
        """Display text of outputs then gradients, ``kind`` first (:attr:`TENSOR_HEADERS`)."""
        return [
            (kind, *t.cells())
            for kind, tensors in (("output", self.outputs), ("gradient", self.gradients))
            for t in tensors
        ]

    # -- tables (pandas, through ortlab.views.numerics) ----------------------------
    def to_frame(self) -> pandas.DataFrame:
        """Outputs then gradients, one row each (``kind`` says which)."""
        return self._frame("outputs")

    def partitions_frame(self) -> pandas.DataFrame:
        return self._frame("partitions")

    def nodes_frame(self) -> pandas.DataFrame:
        return self._frame("nodes")

    def sweep_frame(self) -> pandas.DataFrame:
        return self._frame("sweep")

    def _frame(self, what: str) -> pandas.DataFrame:
        from ortlab.views import numerics

        return numerics.diff_table(self, what=what)

    # -- text and HTML -------------------------------------------------------------
    def verdict_line(self) -> str:
        """The verdict alone: ``"FAIL: 64 tensors compared, max abs error 0.23; 0 of 35
        partition runs diverge; 1 decision flip"``."""
        tensors = len(self.outputs) + len(self.gradients)
        compared = sum(1 for p in self.partitions if p.compared)
        line = (
            f"{'PASS' if self.passed else 'FAIL'}: {tensors} tensors compared, max abs "
            f"error {_html.number(self.max_abs_error)}; {len(self.failing_partitions)} of "
            f"{compared} partition runs diverge"
        )
        if self.flips:
            count = len(self.flips)
            line += f"; {count} decision flip{'s' if count > 1 else ''}"
        return line

    def cause_text(self) -> str:
        """What :attr:`first_cause` is and what it means, in words (``""`` when there is
        nothing to say)."""
        cause = self.first_cause
        if isinstance(cause, DecisionFlip):
            if self.passed:
                text = f"{cause.describe()}; the outputs stay within tolerance"
            else:
                text = f"first cause: {cause.describe()}"
            text = f"{text}. {FLIP_EXPLANATION}"
            return text if self.reference is not None else f"{text} {FLIP_HINT}"
        if cause is not None:
            return f"first divergent {cause.describe()}"
        if not self.passed and not self.failing_partitions:
            return (
                "no partition diverges on its own inputs and no decision flipped: the "
                "error accumulates"
            )
        return ""

    def summary(self, *, first: bool = True) -> str:
        """The verdict and (with ``first``) the first cause: a decision flip (and what it
        means) or the first divergent node; then the float64 reference when computed."""
        line = self.verdict_line()
        cause = self.cause_text()
        if cause and (first or self.first_cause is None):
            line += f"; {cause}"
        if self.reference is not None:
            line += f"; {self.reference.summary()}"
        return line

    def __repr__(self) -> str:
        parts = [f"DiffReport({self.summary()})"]
        if self.outputs or self.gradients:
            parts.append(_html.text_table(self.TENSOR_HEADERS, self.tensor_cells()))
        if self.flips:
            rows = [f.cells() for f in self.flips]
            parts.append(_html.text_table(DecisionFlip.HEADERS, rows))
        if self.reference is not None and self.reference.tensors:
            parts.append(_html.text_table(ReferenceDiff.HEADERS, self.reference.cells()))
        if self.partitions:
            rows = [p.cells() for p in self.partitions]
            parts.append(_html.text_table(PartitionDiff.HEADERS, rows))
        if self.sweep:
            parts.append(_html.text_table(SweepRow.HEADERS, [r.cells() for r in self.sweep]))
        parts += [f"note: {n}" for n in self.notes]
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        from ortlab.views import numerics

        return numerics.summary_html(self)
