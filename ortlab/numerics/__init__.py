"""Numerics: is the ortlab-compiled call right, and if not, where does it go wrong?

:func:`diff` runs a function (or module) eagerly and through a fresh
:class:`~ortlab.OrtBackend` on the same inputs and RNG state, each on its own copy of the
model, and compares at three levels:

- **outputs** (and, with ``backward=True``, **gradients**): per tensor max/mean absolute
  error, max relative error, 99th percentile, NaN/Inf counts on each side, pass/fail;
- **partitions**: every partition run, its ONNX Runtime outputs against its own FX
  subgraph run eagerly on exactly the inputs ONNX Runtime received (the *local* error),
  and its inputs against an all-eager run of the same graph (the error *carried in*);
- **nodes**: inside a partition that fails, every intermediate FX node against the ONNX
  value it became, both as the error accumulated so far and as the node's *own* error,
  and the **first divergent node**;
- **decision flips**: nodes with a discrete result (comparisons, argmax or max-pool
  indices) that differ from the all-eager run while their operands agree within
  tolerance: rounding that crossed a discontinuity, after which results (gradients
  especially) differ legitimately. ``report.first_cause`` is the first flip or divergent
  node in execution order; ``reference="float64"`` says whether ortlab is as close to a
  float64 run as eager is; ``report.save_repro(dir)`` writes the partition run to look at
  as an ONNX test case.

``sweep=`` repeats the comparison over execution providers, graph optimisation levels or
any backend option, with latency, to show what each configuration changes numerically.

Modules: ``_compare`` (the one comparator and its tolerance and NaN/Inf rules),
``_tabular``, ``_records``, ``_findings`` and ``_report`` (the results, plain data),
``_runner`` (both sides of a call, compiled afresh or already compiled),
``_interpret`` and ``_debug`` (eager references and debug ONNX sessions), ``_localise``
(partitions and nodes), ``_flips`` (decision flips), ``_reference`` (the float64 run),
``_repro`` (``save_repro``), ``_sweep``, ``_diff`` (the entry points: ``diff``, and
``diff_compiled`` for a call compiled already — ``%ortcompile`` uses it). HTML, tables and
plots of a report are in :mod:`ortlab.views.numerics`.
"""

from __future__ import annotations

from ortlab._closeness import default_tolerance
from ortlab.numerics._compare import (
    compare_outputs,
    compare_tensors,
    max_abs_error,
)
from ortlab.numerics._diff import diff, diff_compiled
from ortlab.numerics._findings import DecisionFlip, FlipValue, Float64Reference, ReferenceDiff
from ortlab.numerics._records import NodeDiff, PartitionDiff, TensorDiff
from ortlab.numerics._report import DiffReport, SweepRow

__all__ = [
    # Entry points
    "diff",
    "diff_compiled",
    # Results
    "DiffReport",
    "TensorDiff",
    "PartitionDiff",
    "NodeDiff",
    "DecisionFlip",
    "FlipValue",
    "Float64Reference",
    "ReferenceDiff",
    "SweepRow",
    # The comparator
    "compare_tensors",
    "compare_outputs",
    "max_abs_error",
    "default_tolerance",
]
