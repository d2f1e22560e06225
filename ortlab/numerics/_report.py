"""The report of one ``ortlab.diff``: every record it produced, a summary that leads with
the first cause, text rendering here and HTML / DataFrames through the views; and the
rows of a sweep (each holds the report of its configuration)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ortlab import _html
from ortlab.numerics import _tabular
from ortlab.numerics._findings import (
    FLIP_EXPLANATION,
    FLIP_HINT,
    DecisionFlip,
    Float64Reference,
    ReferenceDiff,
)
from ortlab.numerics._records import NodeDiff, PartitionDiff, TensorDiff

if TYPE_CHECKING:
    import pandas

    from ortlab.backend import OrtBackend


@dataclasses.dataclass
class SweepRow(_tabular.Tabular):
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
        _tabular.VERDICT,
        "max abs",
        "mean abs",
        "max rel",
        "latency ms",
    )

    FORMATS: ClassVar[tuple[Callable[[Any], str], ...]] = (
        str,
        str,
        str,
        _tabular.verdict,
        *(_html.number,) * 4,
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
    failing partition introduces error itself, beyond the per-dtype tolerance and eager's
    own rounding (``first_divergent`` says where); a decision
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
        stale = [text for p in self.partitions for text in p.stale_frozen]
        if stale:
            more = f" (and {len(stale) - 1} more)" if len(stale) > 1 else ""
            return f"{stale[0]}{more}"
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
        failing = self.failing_partitions
        if failing:
            # Its nodes were not compared (nodes=False) or none could be matched to ONNX:
            # the partition is still what is wrong, never the error "accumulating".
            return f"first failing {failing[0].describe()}"
        if not self.passed:
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
