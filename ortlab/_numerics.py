"""Numerics: is the ortlab-compiled call right, and if not, where does it go wrong?

:func:`diff` runs a function (or module) eagerly and through an :class:`~ortlab.OrtBackend`
on the same inputs and RNG state, each on its own copy of the model, and compares at three
levels:

- **outputs** (and, with ``backward=True``, **gradients**): per tensor max/mean absolute
  error, max relative error, 99th percentile, NaN/Inf counts on each side, pass/fail;
- **partitions**: every partition run, its ONNX Runtime outputs against its own FX
  subgraph run eagerly on exactly the inputs ONNX Runtime received (the *local* error), and
  its inputs against an all-eager run of the same graph (the error *carried in*);
- **nodes**: inside a partition that fails, every intermediate FX node against the ONNX
  value it became (a debug copy of the ONNX model exports them as extra outputs, matched
  through the exporter's provenance metadata ``pkg.torch.onnx.fx_node``), both as the error
  accumulated so far and as the node's *own* error (its op run eagerly on the ONNX values
  of its operands), and the **first divergent node**: the first, in topological order,
  whose own error is beyond tolerance.

``sweep=`` repeats the comparison over execution providers, graph optimisation levels or
any backend option, with latency, to show what each configuration changes numerically.

Tolerances
----------
- Outputs and gradients pass or fail exactly as ``torch.testing.assert_close`` decides,
  element by element: ``|ort - eager| <= atol + rtol * |eager|``. Unless given, ``atol``
  and ``rtol`` are its per-dtype defaults (float32: ``atol=1e-5, rtol=1.3e-6``; float16:
  ``1e-5, 1e-3``; bfloat16: ``1e-5, 1.6e-2``; float64: ``1e-7, 1e-7``). ``atol``/``rtol``
  may be one number for every output or a mapping from output name (``"output[0]"``,
  ``"grad[fc1.weight]"``) to a number; names left out use the defaults.
- Integer and bool tensors and Python scalars are compared exactly (tolerances ignored).
- NaN matching NaN and an infinity matching the same infinity count as equal (like
  ``assert_close(..., equal_nan=True)``), but every NaN/Inf is counted and shown; a NaN or
  Inf on one side only is a mismatch with an infinite error.
- Intermediates (partition outputs and FX nodes) use the same ``atol``/``rtol`` (a single
  number as given, the loosest value of a per-output mapping, else the dtype default) and
  *diverge* when any element has ``|ort - eager| > atol * max(1, scale) + rtol * |eager|``,
  where ``scale`` is the largest finite magnitude among the node's eager value and its
  op's operands (see the NOTE below).
"""

# NOTE: what counts as a divergence inside a partition, and why.
#
# 1. The absolute term scales with the operands, ``atol * max(1, scale)``. Rounding error
#    follows the magnitude of the values an op combines, not each element of its result: a
#    sum or matmul over values of size ~100 yields elements near 0 (cancellation) whose
#    error is ~100 * 1e-7. An absolute ``atol=1e-5`` calibrated for O(1) outputs would call
#    such a node divergent although ORT is as exact as float32 allows. Below magnitude 1
#    the term stays ``atol`` — the output rule — so a tensor whose elements are all smaller
#    than ``atol`` cannot diverge: the same values would pass as an output. An error in such
#    a tiny tensor is reported at the first node that magnifies it beyond ``atol`` (one node
#    late, never a false alarm upstream).
# 2. A node diverges on its *own* error: ORT's value against the op run eagerly on ORT's
#    values of its operands. Errors accumulated upstream within the partition (measured
#    too, as ``NodeDiff.diff``) do not make a node divergent, so a small error amplified by
#    a layer-norm backward (x256) is not blamed on the node that amplified it, and a
#    planted error is found at its node, not at every node downstream. When no node's own
#    error is beyond tolerance but the partition's outputs are, the first node whose
#    accumulated error is beyond tolerance is reported instead (small errors adding up).
# Measured on the zoo (tests/test_numerics.py): clean models, forward and backward, keep
# every own error below 10% of this tolerance at the float32 defaults; planted changes of
# 1e-2 (a Constant, a frozen weight) or an op swap are found exactly at their node.

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
import statistics
import time
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

import ortlab.backend
from ortlab import _deps, _html, errors
from ortlab.backend import records

if TYPE_CHECKING:
    import onnx
    import pandas

    from ortlab.backend import OrtBackend, PartitionRecord, RunEvent, SessionRecord

logger = logging.getLogger(__name__)

__all__ = [
    "DiffReport",
    "NodeDiff",
    "PartitionDiff",
    "SweepRow",
    "TensorDiff",
    "compare_tensors",
    "default_tolerance",
    "diff",
    "fx_node_name",
]

# (atol, rtol) per dtype: the defaults of torch.testing.assert_close.
_DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-5, 1e-3),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-7, 1e-7),
}

_SAMPLE_SIZE = 20_000
"""Elements kept per output for histograms and scatter plots (an even stride)."""

_OPT_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(atol, rtol)`` that ``torch.testing.assert_close`` uses for ``dtype``.

    Integer and bool dtypes get ``(0.0, 0.0)``: they are compared exactly.
    """
    return _DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))


def _is_exact_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


# -- results -----------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:.3g}"


@dataclasses.dataclass
class TensorDiff:
    """The comparison of one ONNX Runtime value with its eager counterpart.

    Errors are computed in float64 over elements finite on both sides; NaN/Inf are counted
    separately, and a NaN or Inf on one side only makes ``max_abs_error`` infinite.
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
    nan_ort: int = 0
    inf_eager: int = 0
    inf_ort: int = 0
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

    @property
    def nonfinite(self) -> str:
        """``"nan 2/0 inf 0/1"`` (eager/ORT), or ``""`` when all values are finite."""
        parts = []
        if self.nan_eager or self.nan_ort:
            parts.append(f"nan {self.nan_eager}/{self.nan_ort}")
        if self.inf_eager or self.inf_ort:
            parts.append(f"inf {self.inf_eager}/{self.inf_ort}")
        return " ".join(parts)

    def row(self) -> dict[str, Any]:
        """The fields shown in tables."""
        return {
            "name": self.name,
            "shape": "x".join(map(str, self.shape)) or "scalar",
            "dtype": self.dtype,
            "passed": self.passed,
            "max_abs": self.max_abs_error,
            "mean_abs": self.mean_abs_error,
            "max_rel": self.max_rel_error,
            "p99_abs": self.p99_abs_error,
            "mismatched": self.mismatched,
            "numel": self.numel,
            "nan_eager": self.nan_eager,
            "nan_ort": self.nan_ort,
            "inf_eager": self.inf_eager,
            "inf_ort": self.inf_ort,
            "atol": self.atol,
            "rtol": self.rtol,
            "exact": self.exact,
            "note": self.note,
        }

    def __repr__(self) -> str:
        mark = "pass" if self.passed else "FAIL"
        extra = f", {self.nonfinite}" if self.nonfinite else ""
        note = f", {self.note}" if self.note else ""
        return (
            f"TensorDiff({self.name}: {mark}, max_abs={_fmt(self.max_abs_error)}, "
            f"max_rel={_fmt(self.max_rel_error)}, mismatched={self.mismatched}/{self.numel}"
            f"{extra}{note})"
        )


@dataclasses.dataclass
class NodeDiff:
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

    def describe(self) -> str:
        """One line a person can act on: where, which op, how wrong."""
        d = self.local if self.diverged and self.local is not None else self.diff
        where = f"{self.partition} ({self.graph_kind} graph {self.graph_index})"
        ops = "/".join(dict.fromkeys(self.onnx_ops)) or "?"
        if self.target == "placeholder":
            ops = "initializer"
        if d is None:
            return f"node {self.node} = {self.target} in {where}: {self.note}"
        at = ""
        if d.worst_index is not None:
            at = (
                f" at {list(d.worst_index)} (eager {d.eager_at_worst:.6g}, "
                f"ORT {d.ort_at_worst:.6g})"
            )
        shape = "x".join(map(str, d.shape)) or "scalar"
        which = "own" if d is self.local else "accumulated"
        return (
            f"node {self.node} = {self.target} -> ONNX {ops} in {where}: {d.dtype}[{shape}], "
            f"{which} max abs error {_fmt(d.max_abs_error)}{at}, {d.mismatched}/{d.numel} "
            f"elements beyond atol={_fmt(d.atol)}, rtol={_fmt(d.rtol)}"
        )

    def row(self) -> dict[str, Any]:
        d, local = self.diff, self.local
        return {
            "graph": f"{self.graph_index} ({self.graph_kind})",
            "partition": self.partition,
            "position": self.position,
            "node": self.node,
            "target": self.target,
            "onnx_ops": "/".join(dict.fromkeys(self.onnx_ops)),
            "onnx_value": self.onnx_value,
            "shape": "x".join(map(str, d.shape)) if d else "",
            "diverged": self.diverged,
            "local_abs": local.max_abs_error if local else None,
            "max_abs": d.max_abs_error if d else None,
            "max_rel": d.max_rel_error if d else None,
            "scale": d.scale if d else None,
            "atol": d.atol if d else None,
            "mismatched": d.mismatched if d else None,
            "note": self.note or (d.note if d else ""),
        }

    def __repr__(self) -> str:
        mark = "DIVERGED" if self.diverged else "ok"
        return f"NodeDiff({mark}: {self.describe()})"


@dataclasses.dataclass
class PartitionDiff:
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
    notes: list[str] = dataclasses.field(default_factory=list)

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

    def row(self) -> dict[str, Any]:
        first = self.first_divergent
        return {
            "graph": f"{self.graph_index} ({self.graph_kind})",
            "partition": self.name,
            "run": self.run,
            "state": self.state,
            "passed": self.passed if self.state == "ort" else None,
            "local_error": self.local_error if self.state == "ort" else None,
            "carried_in": self.carried_in,
            "carried_in_from": self.carried_in_from,
            "total_error": self.total_error,
            "first_divergent": first.node if first else "",
            "nodes_compared": sum(1 for n in self.nodes if n.diff is not None),
            "notes": "; ".join(self.notes),
        }

    def __repr__(self) -> str:
        if self.state != "ort":
            return f"PartitionDiff({self.label}: {self.state}; {'; '.join(self.notes)})"
        first = self.first_divergent
        tail = f", first divergent node {first.node}" if first else ""
        return (
            f"PartitionDiff({self.label}: {'pass' if self.passed else 'FAIL'}, "
            f"local={_fmt(self.local_error)}, carried_in={_fmt(self.carried_in)}{tail})"
        )


@dataclasses.dataclass
class SweepRow:
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
    """Median wall time of one compiled call (forward, plus backward when diffed)."""
    report: DiffReport | None = dataclasses.field(default=None, repr=False)
    """The full comparison of this configuration."""

    def row(self) -> dict[str, Any]:
        return {
            "config": self.label,
            "status": self.status,
            "providers": ", ".join(self.providers),
            "passed": self.passed,
            "max_abs": self.max_abs_error,
            "mean_abs": self.mean_abs_error,
            "max_rel": self.max_rel_error,
            "latency_ms": self.latency_ms,
        }


def _tensor_cells(t: TensorDiff) -> tuple[Any, ...]:
    """Name, shape, dtype, verdict and the four error statistics of one compared tensor
    (shared by the text and HTML tables)."""
    return (
        t.name,
        "x".join(map(str, t.shape)) or "scalar",
        t.dtype,
        "pass" if t.passed else "FAIL",
        _fmt(t.max_abs_error),
        _fmt(t.mean_abs_error),
        _fmt(t.max_rel_error),
        _fmt(t.p99_abs_error),
    )


@dataclasses.dataclass
class DiffReport:
    """What :func:`diff` found: outputs, gradients, partitions, first divergent node.

    ``passed`` is the verdict on what a user sees (outputs, and gradients when diffed), at
    ``torch.testing.assert_close`` semantics. Partitions and nodes explain a failure: a
    failing partition introduces error itself (``first_divergent`` says where), while a
    failing output with only passing partitions means error accumulated across partitions
    (see each partition's ``carried_in``). The tolerance rules are in the module docstring.
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

    @property
    def passed(self) -> bool:
        """Every output (and gradient) within tolerance."""
        return all(t.passed for t in (*self.outputs, *self.gradients))

    @property
    def partitions_passed(self) -> bool:
        """Every partition run within the intermediate tolerance."""
        return all(p.passed for p in self.partitions if p.state == "ort")

    @property
    def max_abs_error(self) -> float:
        """Largest absolute error over outputs and gradients."""
        return max((t.max_abs_error for t in (*self.outputs, *self.gradients)), default=0.0)

    @property
    def failing_partitions(self) -> list[PartitionDiff]:
        return [p for p in self.partitions if p.state == "ort" and not p.passed]

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

    # -- tables --------------------------------------------------------------------
    def to_frame(self) -> pandas.DataFrame:
        """Outputs then gradients, one row each (``kind`` says which)."""
        pd = _deps.require("pandas")
        rows = [{"kind": "output", **t.row()} for t in self.outputs]
        rows += [{"kind": "gradient", **t.row()} for t in self.gradients]
        return pd.DataFrame(rows, columns=["kind", *_TENSOR_COLUMNS])

    def partitions_frame(self) -> pandas.DataFrame:
        pd = _deps.require("pandas")
        return pd.DataFrame([p.row() for p in self.partitions], columns=_PARTITION_COLUMNS)

    def nodes_frame(self) -> pandas.DataFrame:
        pd = _deps.require("pandas")
        return pd.DataFrame([n.row() for n in self.nodes], columns=_NODE_COLUMNS)

    def sweep_frame(self) -> pandas.DataFrame:
        pd = _deps.require("pandas")
        return pd.DataFrame([r.row() for r in self.sweep], columns=_SWEEP_COLUMNS)

    # -- text ----------------------------------------------------------------------
    def summary(self, *, first: bool = True) -> str:
        """One line: the verdict and (with ``first``) the node to look at."""
        verdict = "PASS" if self.passed else "FAIL"
        tensors = len(self.outputs) + len(self.gradients)
        line = (
            f"{verdict}: {tensors} tensors compared, max abs error "
            f"{_fmt(self.max_abs_error)}; {len(self.failing_partitions)} of "
            f"{sum(1 for p in self.partitions if p.state == 'ort')} partition runs diverge"
        )
        node = self.first_divergent
        if node is not None:
            if first:
                line += f"; first divergent {node.describe()}"
        elif not self.passed and not self.failing_partitions:
            line += "; no partition diverges on its own inputs: the error accumulates"
        return line

    def __repr__(self) -> str:
        parts = [f"DiffReport({self.summary()})"]
        heads = ("name", "shape", "dtype", "passed", "max_abs", "mean_abs", "max_rel", "p99")
        rows: list[tuple[str, ...]] = [
            (*_tensor_cells(t), t.nonfinite) for t in (*self.outputs, *self.gradients)
        ]
        if rows:
            if not any(r[-1] for r in rows):
                rows = [r[:-1] for r in rows]
            columns = (*heads, "nan/inf (eager/ORT)")[: len(rows[0])]
            parts.append(_html.text_table(columns, rows))
        if self.partitions:
            parts.append(
                _html.text_table(
                    ("partition", "state", "local", "carried_in", "first divergent"),
                    [
                        (
                            p.label,
                            p.state if p.state != "ort" else ("pass" if p.passed else "FAIL"),
                            _fmt(p.local_error) if p.state == "ort" else "-",
                            _fmt(p.carried_in),
                            p.first_divergent.node if p.first_divergent else "",
                        )
                        for p in self.partitions
                    ],
                )
            )
        if self.sweep:
            parts.append(
                _html.text_table(
                    ("config", "status", "passed", "max_abs", "latency_ms"),
                    [
                        (
                            r.label,
                            r.status,
                            "-" if r.passed is None else ("pass" if r.passed else "FAIL"),
                            _fmt(r.max_abs_error),
                            _fmt(r.latency_ms),
                        )
                        for r in self.sweep
                    ],
                )
            )
        parts += [f"note: {n}" for n in self.notes]
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        first = self.first_divergent
        colour = "#1a7f37" if self.passed else "#cf222e"
        head = f'<p style="color:{colour}"><b>{_html.esc(self.summary(first=False))}</b></p>'
        tensors = _html.table(
            _HTML_TENSOR_HEADERS,
            [
                (
                    kind,
                    *_tensor_cells(t),
                    f"{t.mismatched}/{t.numel}",
                    f"{t.nan_eager}/{t.nan_ort}",
                    f"{t.inf_eager}/{t.inf_ort}",
                    "exact" if t.exact else _fmt(t.atol),
                    "exact" if t.exact else _fmt(t.rtol),
                )
                for kind, ts in (("output", self.outputs), ("gradient", self.gradients))
                for t in ts
            ],
        )
        parts = [head, tensors]
        if self.partitions:
            parts.append(
                _html.table(
                    ("partition", "state", "local error", "carried in", "from", "first div."),
                    [
                        (
                            p.label,
                            p.state if p.state != "ort" else ("pass" if p.passed else "FAIL"),
                            _fmt(p.local_error) if p.state == "ort" else "-",
                            _fmt(p.carried_in),
                            p.carried_in_from,
                            p.first_divergent.node if p.first_divergent else "",
                        )
                        for p in self.partitions
                    ],
                    caption="Partitions (local: ORT vs its FX subgraph on ORT's inputs)",
                )
            )
        if first is not None:
            parts.append(f"<p>First divergent node: {_html.esc(first.describe())}</p>")
        if self.sweep:
            parts.append(
                _html.table(
                    ("config", "status", "providers", "passed", "max abs", "latency ms"),
                    [
                        (
                            r.label,
                            r.status,
                            ", ".join(r.providers),
                            "-" if r.passed is None else r.passed,
                            _fmt(r.max_abs_error),
                            _fmt(r.latency_ms),
                        )
                        for r in self.sweep
                    ],
                    caption="Sweep",
                )
            )
        parts += [f"<p>note: {_html.esc(n)}</p>" for n in self.notes]
        return _html.block("ortlab numerics", "".join(parts))


_TENSOR_COLUMNS = list(
    TensorDiff("", (), "", 0.0, 0.0, True).row().keys()  # keeps columns in one place
)
_HTML_TENSOR_HEADERS = (
    "kind",
    "name",
    "shape",
    "dtype",
    "passed",
    "max abs",
    "mean abs",
    "max rel",
    "p99",
    "mismatched",
    "nan e/o",
    "inf e/o",
    "atol",
    "rtol",
)
_PARTITION_COLUMNS = [
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
    "nodes_compared",
    "notes",
]
_NODE_COLUMNS = [
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
]
_SWEEP_COLUMNS = [
    "config",
    "status",
    "providers",
    "passed",
    "max_abs",
    "mean_abs",
    "max_rel",
    "latency_ms",
]


# -- comparing two values ------------------------------------------------------------------


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return None
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return None


def compare_tensors(
    name: str,
    actual: Any,
    expected: Any,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    scale: float | None = None,
    keep_samples: bool = False,
) -> TensorDiff:
    """Compares an ONNX Runtime value (``actual``) with the eager one (``expected``).

    Args:
        name: Shown in tables.
        actual: Tensor or Python scalar computed through ONNX Runtime.
        expected: The eager PyTorch value.
        atol: Absolute tolerance; ``None``: the ``assert_close`` default for the dtype.
        rtol: Relative tolerance; ``None``: the ``assert_close`` default for the dtype.
        scale: Intermediate rule (module NOTE): the largest magnitude among the operands
            of the op that produced ``expected``; ``atol`` becomes
            ``atol * max(1, scale, max|expected|)``. ``None``: the output rule.
        keep_samples: Keep up to 20 000 (eager value, error) pairs for plots.

    Returns:
        A :class:`TensorDiff`; integer/bool values and Python scalars compare exactly.
    """
    a, b = _as_tensor(actual), _as_tensor(expected)
    if a is None or b is None:
        same = actual == expected
        return TensorDiff(
            name,
            (),
            type(expected).__name__,
            0.0,
            0.0,
            bool(same),
            max_abs_error=0.0 if same else math.inf,
            mismatched=0 if same else 1,
            numel=1,
            exact=True,
            note="" if same else f"ORT {actual!r} != eager {expected!r}",
        )
    shape = tuple(b.shape)
    dtype = str(b.dtype).removeprefix("torch.")
    exact = _is_exact_dtype(b.dtype) or not isinstance(expected, torch.Tensor)
    if exact:
        atol_used, rtol_used = 0.0, 0.0
    else:
        d_atol, d_rtol = default_tolerance(b.dtype)
        atol_used = d_atol if atol is None else float(atol)
        rtol_used = d_rtol if rtol is None else float(rtol)
    notes = []
    if a.shape != b.shape:
        if a.numel() == b.numel() and a.numel() <= 1:
            a = a.reshape(b.shape)  # 0-d vs (1,): the runtime's scalar convention
        else:
            return TensorDiff(
                name,
                shape,
                dtype,
                atol_used,
                rtol_used,
                False,
                max_abs_error=math.inf,
                mismatched=b.numel(),
                numel=b.numel(),
                exact=exact,
                note=f"shape differs: ORT {list(a.shape)} vs eager {list(b.shape)}",
            )
    dtype_ok = a.dtype == b.dtype or not isinstance(actual, torch.Tensor)
    if not dtype_ok:
        notes.append(f"dtype differs: ORT {str(a.dtype).removeprefix('torch.')}")
    if a.is_complex() or b.is_complex():
        a64 = torch.view_as_real(a.to(torch.complex128)).cpu()
        b64 = torch.view_as_real(b.to(torch.complex128)).cpu()
    else:
        a64 = a.to(device="cpu", dtype=torch.float64)
        b64 = b.to(device="cpu", dtype=torch.float64)
    nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
    inf_a, inf_b = torch.isinf(a64), torch.isinf(b64)
    finite = ~(nan_a | nan_b | inf_a | inf_b)
    agree_nonfinite = (nan_a & nan_b) | (inf_a & inf_b & (a64 == b64))
    err = torch.where(finite, (a64 - b64).abs(), torch.zeros_like(a64))
    err = torch.where(finite | agree_nonfinite, err, torch.full_like(err, math.inf))
    abs_b = torch.where(finite, b64.abs(), torch.zeros_like(b64))
    own_scale = float(abs_b.max()) if abs_b.numel() else 0.0
    if scale is not None:
        own_scale = max(own_scale, scale)
        if not exact:
            atol_used = atol_used * max(1.0, own_scale)
    allowed = atol_used + rtol_used * abs_b
    bad = err > allowed
    numel = b.numel()
    mismatched = int(bad.sum())
    result = TensorDiff(
        name,
        shape,
        dtype,
        atol_used,
        rtol_used,
        mismatched == 0 and dtype_ok,
        mismatched=mismatched,
        numel=numel,
        nan_eager=int(nan_b.sum()),
        nan_ort=int(nan_a.sum()),
        inf_eager=int(inf_b.sum()),
        inf_ort=int(inf_a.sum()),
        exact=exact,
        scale=own_scale,
        note="; ".join(notes),
    )
    if numel == 0:
        return result
    flat_err = err.reshape(-1)
    over = torch.where(allowed > 0, err / allowed.clamp_min(1e-300), err * math.inf)
    result.ratio = float(torch.nan_to_num(over, nan=0.0, posinf=math.inf).max())
    worst = int(torch.argmax(flat_err))
    result.max_abs_error = float(flat_err[worst])
    finite_flat = finite.reshape(-1)
    if bool(finite_flat.any()):
        result.mean_abs_error = float(flat_err[finite_flat].mean())
    nonzero = finite & (b64 != 0)
    if bool(nonzero.any()):
        result.max_rel_error = float((err[nonzero] / b64[nonzero].abs()).max())
    # "higher": no interpolation between infinities (which would give NaN).
    result.p99_abs_error = float(np.percentile(flat_err.numpy(), 99, method="higher"))
    if result.max_abs_error > 0:
        index = np.unravel_index(worst, tuple(err.shape))
        result.worst_index = tuple(int(i) for i in index)
        result.eager_at_worst = float(b64.reshape(-1)[worst])
        result.ort_at_worst = float(a64.reshape(-1)[worst])
    if keep_samples:
        picked = torch.nonzero(finite_flat).reshape(-1)
        if picked.numel() > _SAMPLE_SIZE:
            picked = picked[:: math.ceil(picked.numel() / _SAMPLE_SIZE)]
        result.eager_sample = b64.reshape(-1)[picked].numpy().copy()
        result.error_sample = flat_err[picked].numpy().copy()
    return result


def _resolve_tolerance(value: float | Mapping[str, float] | None, name: str) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    return value.get(name)


def _intermediate_tolerance(value: float | Mapping[str, float] | None) -> float | None:
    """Intermediates use the single tolerance given, or the loosest of a per-output map."""
    if value is None or isinstance(value, (int, float)):
        return value
    return max(value.values(), default=None)


# -- running the two sides -----------------------------------------------------------------


@dataclasses.dataclass
class _Capture:
    """A clone of one RunEvent: what ORT received and returned, frozen at that moment."""

    partition: PartitionRecord
    session: SessionRecord
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]


def _clone_value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return value


class _Recorder:
    """Observer that keeps clones of every partition run (tensors may be reused later)."""

    def __init__(self) -> None:
        self.captures: list[_Capture] = []

    def __call__(self, event: RunEvent) -> None:
        self.captures.append(
            _Capture(
                event.partition,
                event.session,
                tuple(_clone_value(v) for v in event.inputs),
                tuple(_clone_value(v) for v in event.outputs),
            )
        )


def _clone_inputs(args: Sequence[Any], *, grad: bool) -> list[Any]:
    def clone(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        out = value.detach().clone()
        wants = value.requires_grad or (grad and (out.is_floating_point() or out.is_complex()))
        return out.requires_grad_(wants)

    return [pytree.tree_map(clone, a) for a in args]


def _unwrap_compiled(fn: Any) -> Any:
    """The original module/function behind a ``torch.compile``-d one."""
    inner = getattr(fn, "_orig_mod", None)
    if isinstance(inner, torch.nn.Module):
        return inner
    inner = getattr(fn, "_torchdynamo_orig_callable", None)
    return inner if callable(inner) else fn


def _fresh_entry(target: Callable[..., Any]) -> Callable[..., Any]:
    """A function calling ``target`` whose code object is new, so Dynamo's per-code cache
    (and its recompile limit) starts empty for every compiled run of a diff or sweep."""

    def call(*args: Any) -> Any:
        return target(*args)

    code = call.__code__.replace(co_name="ortlab_diff_call")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def _flatten(value: Any) -> list[tuple[str, Any]]:
    leaves, spec = pytree.tree_flatten(value)
    if spec.is_leaf():
        return [("output", leaves[0])] if leaves else []
    paths = pytree.tree_flatten_with_path(value)[0]
    return [(f"output{pytree.keystr(path)}", leaf) for path, leaf in paths]


def _grad_targets(
    module: torch.nn.Module | None, inputs: Sequence[Any]
) -> list[tuple[str, torch.Tensor]]:
    targets: list[tuple[str, torch.Tensor]] = []
    if module is not None:
        targets += [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    for path, leaf in pytree.tree_flatten_with_path(list(inputs))[0]:
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            targets.append((f"input{pytree.keystr(path)}", leaf))
    return targets


def _cotangents(outputs: Sequence[tuple[str, Any]]) -> list[torch.Tensor | None]:
    """Deterministic random output gradients (ones can hide errors that cancel)."""
    gen = torch.Generator().manual_seed(0)
    cots: list[torch.Tensor | None] = []
    for _, value in outputs:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            cot = torch.randn(value.shape, generator=gen, dtype=torch.float64)
            cots.append(cot.to(dtype=value.dtype, device=value.device))
        else:
            cots.append(None)
    return cots


@dataclasses.dataclass(frozen=True)
class _RngState:
    """The CPU generator's state, and the CUDA generators' of the devices in use."""

    cpu: torch.Tensor
    cuda: tuple[tuple[int, torch.Tensor], ...]

    @classmethod
    def capture(cls, devices: Sequence[int]) -> _RngState:
        cuda = tuple((d, torch.cuda.get_rng_state(d)) for d in devices)
        return cls(torch.get_rng_state(), cuda)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for device, state in self.cuda:
            torch.cuda.set_rng_state(state, device)


@dataclasses.dataclass
class _Side:
    outputs: list[tuple[str, Any]]
    grads: list[tuple[str, torch.Tensor | None]]
    seconds: float


def _run_side(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: Sequence[Any],
    *,
    backward: bool,
    rng_state: _RngState,
    cotangents: list[torch.Tensor | None] | None,
) -> tuple[_Side, list[torch.Tensor | None]]:
    inputs = _clone_inputs(args, grad=backward)
    rng_state.restore()
    start = time.perf_counter()
    if backward:
        out = fn(*inputs)
    else:
        with torch.no_grad():
            out = fn(*inputs)
    flat = _flatten(out)
    grads: list[tuple[str, torch.Tensor | None]] = []
    if backward:
        targets = _grad_targets(module, inputs)
        cots = cotangents if cotangents is not None else _cotangents(flat)
        pairs = [(v, c) for (_, v), c in zip(flat, cots) if c is not None and v.requires_grad]
        if targets and pairs:
            got = torch.autograd.grad(
                [v for v, _ in pairs],
                [t for _, t in targets],
                [c for _, c in pairs],
                allow_unused=True,
            )
            grads = [(f"grad[{n}]", g) for (n, _), g in zip(targets, got)]
        cotangents = cots
    seconds = time.perf_counter() - start
    detached = [(n, v.detach() if isinstance(v, torch.Tensor) else v) for n, v in flat]
    return _Side(detached, grads, seconds), cotangents or []


# -- partitions and nodes --------------------------------------------------------------------


def _target_text(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


class _RecordingInterpreter(torch.fx.Interpreter):
    """Runs a graph eagerly and keeps every node's value.

    ``aten.view`` falls back to ``reshape`` (same values): a partition's graph may rely on
    the strides its producer had in PyTorch (a ``view`` of a ``permute``), while ONNX
    Runtime hands over contiguous tensors.
    """

    def __init__(self, gm: torch.fx.GraphModule, *, keep: bool = True) -> None:
        super().__init__(gm, garbage_collect_values=not keep)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is torch.ops.aten.view.default:
            try:
                return target(*args, **kwargs)
            except RuntimeError:
                return torch.ops.aten.reshape.default(*args, **kwargs)
        return super().call_function(target, args, kwargs)


def _live_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Nodes the graph's output depends on."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    live, stack = {output}, [output]
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg not in live:
                live.add(arg)
                stack.append(arg)
    return live


class _AllEagerInterpreter(_RecordingInterpreter):
    """Runs a partitioned graph with every partition in PyTorch (its eager submodule),
    recording the arguments each partition receives."""

    def __init__(self, gm: torch.fx.GraphModule, eager: Mapping[str, torch.fx.GraphModule]):
        super().__init__(gm, keep=False)
        self.eager = eager
        self.live = _live_nodes(gm.graph)
        self.partition_args: dict[str, tuple[Any, ...]] = {}
        self.partition_outputs: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n not in self.live and n.op != "placeholder":  # placeholders consume arguments
            return None  # dead code (e.g. an unused ``.item()``): its inputs may be unknown
        return super().run_node(n)

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target in self.eager:
            self.partition_args[target] = tuple(args)
            out = _RecordingInterpreter(self.eager[target], keep=False).run(*args)
            self.partition_outputs[target] = out
            return out
        return super().call_module(target, args, kwargs)


def _magnitude(value: Any) -> float:
    """Largest finite absolute value in a tensor, number, or tuple of them (0 if none)."""
    if isinstance(value, (tuple, list)):
        return max((_magnitude(v) for v in value), default=0.0)
    if isinstance(value, bool) or not isinstance(value, (torch.Tensor, int, float)):
        return 0.0
    if not isinstance(value, torch.Tensor):
        return abs(float(value)) if math.isfinite(value) else 0.0
    if value.numel() == 0 or value.dtype == torch.bool or value.is_complex():
        return 0.0
    v = value.detach().to(torch.float64).abs()
    v = v[torch.isfinite(v)]
    return float(v.max()) if v.numel() else 0.0


class _OperandScales:
    """The scale of a node for the intermediate rule: the largest finite magnitude among
    its value and its operands' values (rounding error follows the operands: module NOTE).
    """

    def __init__(self, env: Mapping[torch.fx.Node, Any]) -> None:
        self._env = env
        self._own: dict[torch.fx.Node, float] = {}

    def _of(self, node: torch.fx.Node) -> float:
        if node not in self._own:
            self._own[node] = _magnitude(self._env.get(node))
        return self._own[node]

    def __call__(self, node: Any) -> float:
        if not isinstance(node, torch.fx.Node):
            return 0.0
        literals = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if _is_number(a)]
        return max(
            [
                self._of(node),
                *(self._of(a) for a in node.all_input_nodes),
                *(abs(float(a)) for a in literals),
            ]
        )


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


fx_node_name = records.fx_node_of
"""The FX node an ONNX node was translated from (provenance metadata), or ``None``."""


def _onnx_value_map(
    model: onnx.ModelProto, fx_names: Sequence[str]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """FX node name -> ONNX value name, and FX node name -> stamped ONNX op types.

    The exporter names the value an FX node becomes after the node; when it did not, the
    last ONNX node stamped with the FX node (``pkg.torch.onnx.fx_node``) produces it.
    """
    produced: set[str] = set()
    last_stamped: dict[str, onnx.NodeProto] = {}
    ops: dict[str, list[str]] = {}
    for node in model.graph.node:
        produced.update(o for o in node.output if o)
        fx = fx_node_name(node)
        if fx is not None:
            last_stamped[fx] = node
            ops.setdefault(fx, []).append(node.op_type)
    mapping: dict[str, str] = {}
    for name in fx_names:
        if name in produced:
            mapping[name] = name
        elif name in last_stamped and last_stamped[name].output:
            mapping[name] = last_stamped[name].output[0]
    return mapping, ops


def _debug_model(model: onnx.ModelProto, values: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns ``values`` (intermediates) as graph outputs."""
    import onnx

    debug = onnx.ModelProto()
    debug.CopyFrom(model)
    graph = debug.graph
    existing = {o.name for o in graph.output}
    infos = {v.name: v for v in graph.value_info}
    for name in values:
        if name in existing:
            continue
        existing.add(name)
        out = graph.output.add()
        out.name = name
        info = infos.get(name)
        if info is not None and info.type.HasField("tensor_type"):
            # Element type only: shapes may be symbolic or changed by a transform; ORT
            # infers them.
            out.type.tensor_type.elem_type = info.type.tensor_type.elem_type
    return debug


def _numpy_feed(value: Any, info: onnx.ValueInfoProto) -> np.ndarray:
    import onnx

    tensor_type = info.type.tensor_type
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
    rank = len(tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().numpy()
    else:
        array = np.asarray(value, dtype=np_dtype)
    if rank == 0 and array.shape == (1,):
        array = array.reshape(())
    return np.ascontiguousarray(array)


def _session_options_for(backend: OrtBackend) -> Any:
    given = backend.options.ort_session_options
    return given if given is not None else ortlab.backend.default_session_options()


def _run_debug_model(
    capture: _Capture, values: Sequence[str], session_options: Any
) -> tuple[dict[str, torch.Tensor], str]:
    """Runs the debug copy on the captured inputs; returns values by ONNX name and a note."""
    import onnxruntime

    record = capture.session
    model = _debug_model(record.model, values)
    placeholders = capture.partition.input_names
    by_name = dict(zip(placeholders, capture.inputs))
    feeds = {}
    for position, info in enumerate(model.graph.input):
        value = by_name.get(info.name)
        if value is None and info.name not in by_name:
            # Unnamed mapping: ONNX inputs are the non-frozen placeholders, in order.
            slots = [i for i, n in enumerate(placeholders) if n not in record.frozen_inputs]
            value = capture.inputs[slots[position]]
        feeds[info.name] = _numpy_feed(value, info)
    providers = [p for p in record.providers if p in ortlab.backend.available_providers()]
    session = onnxruntime.InferenceSession(
        model.SerializeToString(),
        sess_options=session_options,
        providers=providers or ["CPUExecutionProvider"],
    )
    names = [o.name for o in model.graph.output]
    results = session.run(names, feeds)
    out = {n: torch.from_numpy(np.asarray(r)) for n, r in zip(names, results)}
    # The debug copy must reproduce what ORT returned, or its intermediates mean little
    # (extra outputs can stop a fusion and change rounding).
    worst = 0.0
    for name, got in zip(record.output_names, capture.outputs):
        mine = out.get(name)
        if mine is not None and isinstance(got, torch.Tensor) and mine.shape == got.shape:
            if got.is_floating_point():
                d = (mine.double() - got.detach().cpu().double()).abs()
                d = d[torch.isfinite(d)]
                worst = max(worst, float(d.max()) if d.numel() else 0.0)
    note = ""
    if worst > 0:
        note = (
            f"the debug model (intermediates as outputs) differs from the ORT run by up to "
            f"{_fmt(worst)} at the partition outputs (ORT fused differently)"
        )
    return out, note


def _frozen_initializers(model: onnx.ModelProto, names: Sequence[str]) -> dict[str, Any]:
    import onnx

    wanted = set(names)
    return {
        init.name: torch.from_numpy(onnx.numpy_helper.to_array(init).copy())
        for init in model.graph.initializer
        if init.name in wanted
    }


def _local_value(node: torch.fx.Node, env: Mapping[torch.fx.Node, Any]) -> Any:
    """Runs one FX node eagerly on the values ``env`` gives its operands."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
    target: Any = node.target
    if target is torch.ops.aten.view.default:
        try:
            return target(*args, **kwargs)
        except RuntimeError:
            return torch.ops.aten.reshape.default(*args, **kwargs)
    return target(*args, **kwargs)


def _compare_nodes(
    capture: _Capture,
    eager_env: Mapping[torch.fx.Node, Any],
    scales: _OperandScales,
    *,
    atol: float | None,
    rtol: float | None,
    session_options: Any,
    notes: list[str],
) -> list[NodeDiff]:
    """Every intermediate FX node of one partition run vs its ONNX value (accumulated
    error) and vs its op run on the ONNX values of its operands (own error)."""
    record = capture.partition
    graph = record.graph_module.graph
    nodes = [n for n in graph.nodes if n.op != "output"]
    names = [n.name for n in nodes if n.op != "placeholder"]
    mapping, ops = _onnx_value_map(capture.session.model, names)
    ort_values: dict[str, torch.Tensor] = {}
    try:
        ort_values, note = _run_debug_model(
            capture, sorted(set(mapping.values())), session_options
        )
        if note:
            notes.append(note)
    except Exception as e:
        notes.append(f"could not run the debug model: {type(e).__name__}: {e}")
    frozen = _frozen_initializers(capture.session.model, capture.session.frozen_inputs)
    # What ONNX Runtime computed for each node, where it is known; elsewhere the node
    # recomputed eagerly from those values (tuples of multi-output ops, unmatched nodes).
    ort_env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, capture.inputs):
        ort_env[node] = frozen.get(node.name, _clone_value(value))
    results = []
    with torch.no_grad():
        for position, node in enumerate(nodes):
            result = _compare_node(
                node,
                position,
                record,
                eager_env,
                ort_env,
                scales,
                mapping=mapping,
                ops=ops,
                ort_values=ort_values,
                frozen=frozen,
                atol=atol,
                rtol=rtol,
            )
            if result is not None:
                results.append(result)
    return results


def _compare_node(
    node: torch.fx.Node,
    position: int,
    record: PartitionRecord,
    eager_env: Mapping[torch.fx.Node, Any],
    ort_env: dict[torch.fx.Node, Any],
    scales: _OperandScales,
    *,
    mapping: Mapping[str, str],
    ops: Mapping[str, Sequence[str]],
    ort_values: Mapping[str, torch.Tensor],
    frozen: Mapping[str, Any],
    atol: float | None,
    rtol: float | None,
) -> NodeDiff | None:
    eager = eager_env.get(node)
    base: dict[str, Any] = {
        "partition": record.name,
        "graph_index": record.graph_index,
        "graph_kind": record.graph_kind,
        "node": node.name,
        "target": "placeholder" if node.op == "placeholder" else _target_text(node),
        "position": position,
        "onnx_ops": tuple(ops.get(node.name, ())),
    }
    if node.op == "placeholder":
        if node.name not in frozen:
            return None  # a real input: identical on both sides by construction
        diff = compare_tensors(
            node.name, frozen[node.name], eager, atol=atol, rtol=rtol, scale=0.0
        )
        return NodeDiff(**base, onnx_value=node.name, diff=diff, note="frozen initializer")
    local_note = ""
    try:
        local_ref = _local_value(node, ort_env)
    except Exception as e:
        local_ref = None
        local_note = f"own error not isolated ({type(e).__name__})"
    value_name = mapping.get(node.name, "")
    got = ort_values.get(value_name) if value_name else None
    if isinstance(got, torch.Tensor) and isinstance(eager, torch.Tensor):
        if got.dtype != eager.dtype and got.numel() == eager.numel():
            got = got.to(eager.dtype)  # a translation detail, not a numerical error
        if got.shape != eager.shape and got.squeeze().shape == eager.squeeze().shape:
            got = got.reshape(eager.shape)  # (1,) vs (): the runtime's scalar convention
        ort_env[node] = got
    else:
        ort_env[node] = local_ref if local_ref is not None else eager
    if not isinstance(eager, torch.Tensor):
        kind = "a tuple" if isinstance(eager, (tuple, list)) else type(eager).__name__
        return NodeDiff(**base, onnx_value=value_name, diff=None, note=f"value is {kind}")
    if got is None:
        why = "no ONNX value carries this node" if not value_name else "not computed"
        return NodeDiff(**base, onnx_value=value_name, diff=None, note=why)
    scale = scales(node)
    diff = compare_tensors(node.name, got, eager, atol=atol, rtol=rtol, scale=scale)
    local = None
    if isinstance(local_ref, torch.Tensor):
        local = compare_tensors(node.name, got, local_ref, atol=atol, rtol=rtol, scale=scale)
    return NodeDiff(**base, onnx_value=value_name, diff=diff, local=local, note=local_note)


def _compatible(meta: Any, value: Any) -> bool:
    """Whether ``value`` can be what a placeholder with this ``meta["val"]`` received."""
    if isinstance(meta, torch.Tensor):
        return (
            isinstance(value, torch.Tensor)
            and value.dtype == meta.dtype
            and value.dim() == meta.dim()
        )
    return isinstance(meta, (torch.SymInt, int)) and isinstance(value, int)


def _bind_placeholders(
    gm: torch.fx.GraphModule, captures: Sequence[_Capture], known: Mapping[str, Any]
) -> tuple[list[Any] | None, str]:
    """Values of a partitioned graph's placeholders, recovered from what its partitions
    received, else from ``known`` values of earlier graphs by name (AOTAutograd names a
    backward graph's saved inputs after the forward nodes that made them); SymInt
    placeholders are bound from tensor shapes. ``None`` and a reason when an input no
    partition saw is needed."""
    values: dict[str, Any] = {}
    calls = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    for cap in captures:
        call = calls.get(cap.partition.name)
        if call is None:
            continue
        for arg, value in zip(call.args, cap.inputs):
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder":
                values.setdefault(arg.name, value)
    live = _live_nodes(gm.graph)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        if node.name not in values and node.name in known and node in live:
            if _compatible(node.meta.get("val"), known[node.name]):
                values[node.name] = known[node.name]
    symbols: dict[Any, int] = {}
    for node in placeholders:
        meta, value = node.meta.get("val"), values.get(node.name)
        if isinstance(meta, torch.Tensor) and isinstance(value, torch.Tensor):
            for dim, size in zip(meta.shape, value.shape):
                if isinstance(dim, torch.SymInt):
                    symbols[dim.node.expr] = int(size)
    out = []
    for node in placeholders:
        if node.name in values:
            out.append(values[node.name])
            continue
        meta = node.meta.get("val")
        if node not in live:
            out.append(None)
        elif isinstance(meta, torch.SymInt) and meta.node.expr in symbols:
            out.append(symbols[meta.node.expr])
        else:
            return None, f"graph input {node.name} reaches no partition"
    return out, ""


def _carried_in(
    backend: OrtBackend,
    captures: Sequence[_Capture],
    results: Mapping[int, PartitionDiff],
    *,
    atol: float | None,
    rtol: float | None,
    rng_state: _RngState,
) -> None:
    """Fills ``carried_in`` and ``total_error``: each partition's inputs and outputs
    against an all-eager run of its graph on the same graph inputs (and RNG state, so
    eager random ops such as dropout draw what they drew in the compiled run)."""
    known: dict[str, Any] = {}  # values seen so far by FX name, across graphs
    for graph in backend.graphs:
        gm = graph.partitioned
        mine = [
            (i, c) for i, c in enumerate(captures) if c.partition.graph_index == graph.index
        ]
        if gm is None or not mine:
            continue
        first_runs: dict[str, tuple[int, _Capture]] = {}
        for i, cap in mine:
            first_runs.setdefault(cap.partition.name, (i, cap))
        if len(first_runs) != len(mine):
            note = "partitions ran several times: error carried in is not split by run"
            for i, _ in mine:
                results[i].notes.append(note)
            continue
        values, why = _bind_placeholders(gm, [c for _, c in mine], known)
        for _, cap in mine:
            known.update(zip(cap.partition.input_names, cap.inputs))
            known.update(zip(cap.partition.output_names, cap.outputs))
        if values is None:
            for i, _ in mine:
                results[i].notes.append(f"no all-eager reference: {why}")
            continue
        eager = {p.name: p.graph_module for p in graph.partitions}
        interp = _AllEagerInterpreter(gm, eager)
        try:
            with torch.no_grad():
                rng_state.restore()
                # Clones: ops such as batch norm update their inputs in place.
                interp.run(*(_clone_value(v) for v in values))
        except Exception as e:
            for i, _ in mine:
                results[i].notes.append(
                    "no all-eager reference: the graph failed eagerly "
                    f"({type(e).__name__}: {e})"
                )
            continue
        for i, cap in mine:
            result = results[i]
            ref_args = interp.partition_args.get(cap.partition.name)
            if ref_args is None:
                continue
            worst, worst_name = 0.0, ""
            for name, got, ref in zip(cap.partition.input_names, cap.inputs, ref_args):
                d = compare_tensors(name, got, ref, atol=atol, rtol=rtol, scale=0.0)
                if d.max_abs_error > worst or (not worst_name and not d.passed):
                    worst, worst_name = d.max_abs_error, name
            result.carried_in, result.carried_in_from = worst, worst_name
            ref_out = interp.partition_outputs.get(cap.partition.name)
            ref_outs = ref_out if isinstance(ref_out, (tuple, list)) else (ref_out,)
            total = 0.0
            for got, ref in zip(cap.outputs, ref_outs):
                total = max(total, compare_tensors("", got, ref).max_abs_error)
            result.total_error = total


def _partition_diffs(
    backend: OrtBackend,
    captures: Sequence[_Capture],
    *,
    atol: float | None,
    rtol: float | None,
    nodes: bool | None,
    rng_state: _RngState,
) -> list[PartitionDiff]:
    session_options = _session_options_for(backend)
    runs: dict[tuple[int, str], int] = {}
    results: dict[int, PartitionDiff] = {}
    for index, cap in enumerate(captures):
        record = cap.partition
        key = (record.graph_index, record.name)
        run = runs.get(key, 0)
        runs[key] = run + 1
        result = PartitionDiff(
            record.name,
            record.graph_index,
            record.graph_kind,
            run,
            "ort",
            session_index=cap.session.index,
        )
        interp = _RecordingInterpreter(record.graph_module)
        try:
            with torch.no_grad():
                eager_out = interp.run(*(_clone_value(v) for v in cap.inputs))
        except Exception as e:
            result.state = "eager failed"
            result.notes.append(f"the FX subgraph failed eagerly: {type(e).__name__}: {e}")
            results[index] = result
            continue
        eager_outs = eager_out if isinstance(eager_out, (tuple, list)) else (eager_out,)
        scales = _OperandScales(interp.env)
        output_node = next(n for n in record.graph_module.graph.nodes if n.op == "output")
        out_args = output_node.args[0]
        out_nodes = out_args if isinstance(out_args, (tuple, list)) else (out_args,)
        for name, got, ref, node in zip(
            record.output_names, cap.outputs, eager_outs, out_nodes
        ):
            result.outputs.append(
                compare_tensors(name, got, ref, atol=atol, rtol=rtol, scale=scales(node))
            )
        if nodes or (nodes is None and not result.passed):
            result.nodes = _compare_nodes(
                cap,
                interp.env,
                scales,
                atol=atol,
                rtol=rtol,
                session_options=session_options,
                notes=result.notes,
            )
            if not result.passed and result.first_divergent is None:
                result.notes.append(
                    "the outputs diverge but no intermediate could be matched to ONNX"
                )
        results[index] = result
    _carried_in(backend, captures, results, atol=atol, rtol=rtol, rng_state=rng_state)
    ordered = [results[i] for i in range(len(captures))]
    seen = {(c.partition.graph_index, c.partition.name) for c in captures}
    for record in backend.partitions:
        if (record.graph_index, record.name) in seen:
            continue
        state = "eager" if record.error else "not run"
        notes = [record.error] if record.error else ["did not run during the diff"]
        ordered.append(
            PartitionDiff(
                record.name, record.graph_index, record.graph_kind, 0, state, notes=notes
            )
        )
    return ordered


# -- the entry point -------------------------------------------------------------------------


def _make_backend(options: Any, backend_options: Mapping[str, Any]) -> OrtBackend:
    from ortlab.backend import OrtBackend, OrtBackendOptions

    resolved = OrtBackendOptions.from_value(options)
    if backend_options:
        merged = {f.name: getattr(resolved, f.name) for f in dataclasses.fields(resolved)}
        merged.update(backend_options)
        resolved = OrtBackendOptions.from_value(merged)
    return OrtBackend(resolved)


def _diff_once(
    fn: Any,
    args: Sequence[Any],
    *,
    atol: float | Mapping[str, float] | None,
    rtol: float | Mapping[str, float] | None,
    backward: bool,
    dynamic: bool | None,
    nodes: bool | None,
    options: Any,
    backend_options: Mapping[str, Any],
) -> tuple[DiffReport, Callable[[], None]]:
    """One comparison; also returns a callable that re-runs the compiled side (timing)."""
    target = _unwrap_compiled(fn)
    module = target if isinstance(target, torch.nn.Module) else None
    notes: list[str] = []
    if module is not None:
        eager_target: Any = copy.deepcopy(module)
        compiled_target: Any = copy.deepcopy(module)
    else:
        eager_target = compiled_target = target
        if backward:
            notes.append("a plain function is not copied: gradients of inputs only")
    backend = _make_backend(options, backend_options)
    recorder = _Recorder()
    remove = backend.add_observer(recorder)
    compiled = torch.compile(_fresh_entry(compiled_target), backend=backend, dynamic=dynamic)

    devices = sorted(
        {
            a.device.index or 0
            for a in pytree.tree_leaves(list(args))
            if isinstance(a, torch.Tensor) and a.device.type == "cuda"
        }
    )
    with torch.random.fork_rng(devices=devices):
        rng = _RngState.capture(devices)
        eager_side, cots = _run_side(
            eager_target,
            eager_target if module is not None else None,
            args,
            backward=backward,
            rng_state=rng,
            cotangents=None,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                compiled_side, _ = _run_side(
                    compiled,
                    compiled_target if module is not None else None,
                    args,
                    backward=backward,
                    rng_state=rng,
                    cotangents=cots,
                )
            finally:
                remove()
    for w in caught:
        if "ortlab" in str(w.message):
            notes.append(str(w.message))  # shown with the report
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    notes = list(dict.fromkeys(notes))
    if not backend.graphs:
        notes.append("Dynamo compiled no graph: the compiled call ran entirely in eager")

    outputs = [
        compare_tensors(
            name,
            got,
            ref,
            atol=_resolve_tolerance(atol, name),
            rtol=_resolve_tolerance(rtol, name),
            keep_samples=True,
        )
        for (name, ref), (_, got) in zip(eager_side.outputs, compiled_side.outputs)
    ]
    if len(eager_side.outputs) != len(compiled_side.outputs):
        notes.append(
            f"eager returned {len(eager_side.outputs)} values, the compiled call "
            f"{len(compiled_side.outputs)}"
        )
    gradients = []
    for (name, ref), (_, got) in zip(eager_side.grads, compiled_side.grads):
        if ref is None and got is None:
            continue
        if ref is None or got is None:
            gradients.append(
                TensorDiff(name, (), "", 0.0, 0.0, False, note="gradient missing on one side")
            )
            continue
        gradients.append(
            compare_tensors(
                name,
                got,
                ref,
                atol=_resolve_tolerance(atol, name),
                rtol=_resolve_tolerance(rtol, name),
                keep_samples=True,
            )
        )
    if backward and not gradients:
        notes.append("backward=True but no output needed a gradient")

    with torch.random.fork_rng(devices=devices):
        partitions = _partition_diffs(
            backend,
            recorder.captures,
            atol=_intermediate_tolerance(atol),
            rtol=_intermediate_tolerance(rtol),
            nodes=nodes,
            rng_state=rng,
        )
    report = DiffReport(
        outputs=outputs,
        gradients=gradients,
        partitions=partitions,
        backend=backend,
        atol=atol,
        rtol=rtol,
        backward=backward,
        eager_seconds=eager_side.seconds,
        compiled_seconds=compiled_side.seconds,
        notes=notes,
    )

    def rerun() -> None:
        inputs = _clone_inputs(args, grad=backward)
        if backward:
            out = [v for _, v in _flatten(compiled(*inputs))]
            pairs = [(v, c) for v, c in zip(out, cots) if c is not None]
            if pairs:
                torch.autograd.backward([v for v, _ in pairs], [c for _, c in pairs])
        else:
            with torch.no_grad():
                compiled(*inputs)

    return report, rerun


def _opt_level(value: Any) -> Any:
    import onnxruntime

    if isinstance(value, onnxruntime.GraphOptimizationLevel):
        return value
    if isinstance(value, str) and value.upper() in _OPT_LEVELS:
        return getattr(onnxruntime.GraphOptimizationLevel, value.upper())
    raise errors.UnsupportedOptionError(
        f"sweep graph_optimization_level {value!r} is not one of {', '.join(_OPT_LEVELS)} "
        "(or an onnxruntime.GraphOptimizationLevel)."
    )


def _provider_names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return [value[0]]
    return [v if isinstance(v, str) else v[0] for v in value]


def _sweep_configs(sweep: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    from ortlab.backend import OrtBackendOptions

    valid = {f.name for f in dataclasses.fields(OrtBackendOptions)}
    keys = list(sweep)
    for key in keys:
        if key not in ("providers", "graph_optimization_level") and key not in valid:
            raise errors.UnsupportedOptionError(
                f"sweep key {key!r} is not 'providers', 'graph_optimization_level' or an "
                f"OrtBackendOptions field ({', '.join(sorted(valid))})."
            )
        values = sweep[key]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise errors.UnsupportedOptionError(
                f"sweep[{key!r}] must be a non-empty list of values; got {values!r}."
            )
    return [dict(zip(keys, combo)) for combo in itertools.product(*(sweep[k] for k in keys))]


def _config_label(settings: Mapping[str, Any]) -> str:
    parts = []
    for key, value in settings.items():
        if key == "providers":
            text = "+".join(
                p.removesuffix("ExecutionProvider") for p in _provider_names(value)
            )
        elif key == "graph_optimization_level":
            text = getattr(value, "name", str(value))
        else:
            text = f"{key}={value!r}"
        parts.append(text)
    return " / ".join(parts)


def _median_ms(run: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _run_sweep(
    fn: Any,
    args: Sequence[Any],
    sweep: Mapping[str, Sequence[Any]],
    *,
    common: Mapping[str, Any],
    backend_options: Mapping[str, Any],
    repeat: int,
) -> list[SweepRow]:
    import onnxruntime

    rows: list[SweepRow] = []
    available = set(onnxruntime.get_available_providers())
    target = _unwrap_compiled(fn)
    eager = copy.deepcopy(target) if isinstance(target, torch.nn.Module) else target

    def eager_call() -> None:
        inputs = _clone_inputs(args, grad=common["backward"])
        if common["backward"]:
            out = [v for _, v in _flatten(eager(*inputs))]
            tensors = [v for v in out if isinstance(v, torch.Tensor) and v.requires_grad]
            if tensors:
                torch.autograd.backward(tensors, [torch.ones_like(v) for v in tensors])
        else:
            with torch.no_grad():
                eager(*inputs)

    eager_call()  # warm-up
    rows.append(
        SweepRow("eager (PyTorch)", {}, "ok", latency_ms=_median_ms(eager_call, repeat))
    )
    for settings in _sweep_configs(sweep):
        label = _config_label(settings)
        options = dict(backend_options)
        if "providers" in settings:
            names = _provider_names(settings["providers"])
            missing = [p for p in names if p not in available]
            if missing:
                rows.append(
                    SweepRow(
                        label,
                        dict(settings),
                        f"skipped: {', '.join(missing)} not available in this onnxruntime "
                        f"build (available: {', '.join(sorted(available))})",
                    )
                )
                continue
            value = settings["providers"]
            options["preferred_execution_providers"] = (
                [value] if isinstance(value, (str, tuple)) else list(value)
            )
        if "graph_optimization_level" in settings:
            so = ortlab.backend.default_session_options()
            so.graph_optimization_level = _opt_level(settings["graph_optimization_level"])
            options["ort_session_options"] = so
        options.update(
            {
                k: v
                for k, v in settings.items()
                if k not in ("providers", "graph_optimization_level")
            }
        )
        try:
            report, rerun = _diff_once(fn, args, backend_options=options, **common)
            latency = _median_ms(rerun, repeat)
        except errors.UnsupportedOptionError:
            raise
        except Exception as e:
            rows.append(SweepRow(label, dict(settings), f"error: {type(e).__name__}: {e}"))
            continue
        tensors = [*report.outputs, *report.gradients]
        rows.append(
            SweepRow(
                label,
                dict(settings),
                "ok",
                providers=tuple(
                    dict.fromkeys(p for s in report.backend.sessions for p in s.providers)
                ),
                passed=report.passed,
                max_abs_error=report.max_abs_error,
                mean_abs_error=max((t.mean_abs_error for t in tensors), default=0.0),
                max_rel_error=max((t.max_rel_error for t in tensors), default=0.0),
                latency_ms=latency,
                report=report,
            )
        )
    return rows


def diff(
    fn: Callable[..., Any],
    *args: Any,
    atol: float | Mapping[str, float] | None = None,
    rtol: float | Mapping[str, float] | None = None,
    backward: bool = False,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    dynamic: bool | None = True,
    nodes: bool | None = None,
    repeat: int = 5,
    options: Any = None,
    **backend_options: Any,
) -> DiffReport:
    """Compares an ortlab-compiled call of ``fn`` with eager PyTorch on the same inputs.

    Both sides start from the same RNG state; a module is deep-copied for each side, so
    neither run can affect the other (or ``fn``). Example::

        report = ortlab.diff(model, x, atol=1e-4, rtol=1e-4)
        report.passed, report.first_divergent, report.to_frame()

    Args:
        fn: An ``nn.Module`` or function (a ``torch.compile``-d one is unwrapped first).
        *args: Positional inputs, cloned for each run.
        atol: Absolute tolerance: a number, or ``{output name: number}``; ``None``: the
            ``torch.testing.assert_close`` default of each dtype (module docstring).
        rtol: Relative tolerance, like ``atol``.
        backward: Also compare gradients of the parameters and of every floating-point
            input (made to require grad), for a fixed random output gradient.
        sweep: ``{"providers": [...], "graph_optimization_level": [...], <option>: [...]}``:
            repeat the diff for every combination (keys may be any ``OrtBackendOptions``
            field too) and time it; rows land in ``report.sweep``. Providers this
            onnxruntime build lacks give a "skipped" row.
        dynamic: Passed to ``torch.compile``.
        nodes: Compare intermediate nodes: ``None`` in failing partitions only, ``True`` in
            every partition, ``False`` never.
        repeat: Timed calls per sweep configuration (the median is reported).
        options: An ``OrtBackendOptions`` (or dict) to start from.
        **backend_options: ``OrtBackendOptions`` fields, e.g. ``pre_ort_model_transforms``,
            ``excluded_ops``.

    Returns:
        A :class:`DiffReport`.

    Raises:
        UnsupportedOptionError: an unknown backend option or sweep key.
    """
    if not callable(fn):
        raise errors.UnsupportedOptionError(
            f"ortlab.diff needs a module or function to call; got {type(fn).__name__}."
        )
    common = {
        "atol": atol,
        "rtol": rtol,
        "backward": backward,
        "dynamic": dynamic,
        "nodes": nodes,
        "options": options,
    }
    report, _ = _diff_once(fn, args, backend_options=backend_options, **common)
    if sweep:
        report.sweep = _run_sweep(
            fn, args, sweep, common=common, backend_options=backend_options, repeat=repeat
        )
    return report
