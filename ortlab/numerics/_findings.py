"""What a numerics comparison found beyond per-tensor errors, as plain data: decision
flips (rounding that crossed a discontinuity) and the float64 reference's judgement."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from ortlab import _html
from ortlab.numerics import _tabular

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
class DecisionFlip(_tabular.Tabular):
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
    """The absolute tolerance the operands are within (scaled by their magnitude: the
    magnitude rule of :mod:`ortlab.numerics._compare`)."""

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
class ReferenceDiff(_tabular.Tabular):
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
        _tabular.VERDICT,
        "eager vs float64",
        "ortlab vs float64",
        "allowed",
    )

    @property
    def as_close(self) -> bool:
        """ortlab is as close to float64 as eager is (within :attr:`allowed`)."""
        return self.ort_error <= self.allowed

    FORMATS: ClassVar[tuple[Callable[[Any], str], ...]] = (
        str,
        str,
        _tabular.verdict,
        _html.number,
        _html.number,
        _html.number,
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
