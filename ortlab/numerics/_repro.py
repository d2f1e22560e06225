"""``DiffReport.save_repro``: the partition run to look at, as a test case runnable anywhere.

The test case is in ONNX's test-data layout (:func:`ortlab.backend.write_test_case`): the
model ONNX Runtime ran, exactly the inputs it received in that run, and as expected
outputs what eager PyTorch computes from those inputs (the partition's FX graph run
eagerly). Running the model on the inputs reproduces ONNX Runtime's side; the expected
outputs are PyTorch's; a README says what differed and how to run it again.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from ortlab import _html, errors
from ortlab.backend import _testdata
from ortlab.numerics import _debug, _findings, _interpret, _runner

if TYPE_CHECKING:
    from ortlab.numerics._records import PartitionDiff
    from ortlab.numerics._report import DiffReport


def _eager_outputs(capture: _runner.Capture) -> list[Any]:
    """The partition's FX graph run eagerly on the captured inputs, in the order of the
    model's outputs."""
    record = capture.partition
    with torch.no_grad():
        out = _interpret.RecordingInterpreter(record.graph_module, keep=False).run(
            *(_runner.clone_value(v) for v in capture.inputs)
        )
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    by_name = dict(zip(record.output_names, outs))
    names = [o.name for o in capture.session.model.graph.output]
    if all(n in by_name for n in names):
        return [by_name[n] for n in names]
    return outs


def _what_failed(report: DiffReport, part: PartitionDiff) -> list[str]:
    """README lines: the failing outputs, the first cause, the tolerance."""
    lines = []
    failing = [o for o in part.outputs if not o.passed]
    for out in failing:
        lines.append(
            f"- output `{out.name}` ({out.dtype}[{'x'.join(map(str, out.shape))}]): max abs "
            f"error {_html.number(out.max_abs_error)}, {out.mismatched} of {out.numel} "
            "elements beyond "
            + (
                "an exact comparison"
                if out.exact
                else f"atol={_html.number(out.atol)}, rtol={_html.number(out.rtol)}"
            )
        )
    if not failing:
        lines.append(
            "- every output of this run matches eager on these inputs within tolerance "
            f"(local error {_html.number(part.local_error)}): the partition is saved "
            "because the first cause below lies in it"
        )
    cause = report.first_cause
    own = [x for x in (*part.flips, *part.nodes) if x is cause]
    if own and isinstance(cause, _findings.DecisionFlip):
        lines.append(f"- {cause.describe()}")
        lines.append(f"- {_findings.FLIP_EXPLANATION}")
    elif part.first_divergent is not None:
        node = part.first_divergent
        lines.append(f"- first divergent {node.describe()}")
        graphs = report.backend.graphs
        if 0 <= node.graph_index < len(graphs):
            verdict = graphs[node.graph_index].verdict(node.node)
            if verdict is not None and verdict.source:
                lines.append(f"- source: {verdict.source}")
    return lines


def save_repro(report: DiffReport, directory: str | os.PathLike[str]) -> str:
    """Writes :attr:`DiffReport.repro_partition` as a test case; returns the directory.

    Raises:
        OrtlabError: there is nothing failing to save, or the run's data was not kept.
    """
    part = report.repro_partition
    if part is None:
        raise errors.OrtlabError(
            "nothing to save: every partition run matches eager on its own inputs and no "
            f"decision flipped ({report.verdict_line()}). "
            + (
                "The outputs differ only by error accumulated across partitions; compare "
                "with nodes=True to see each node, or with reference='float64'."
                if not report.passed
                else "The comparison passed."
            )
        )
    capture = part.run_data
    if capture is None:
        raise errors.OrtlabError(
            f"partition run {part.label} has no recorded inputs to save (it did not run "
            "in ONNX Runtime during the diff)."
        )
    model = capture.session.model
    inputs = _debug.model_inputs(capture, model)
    outputs = _eager_outputs(capture)
    session = capture.session
    readme = "\n".join(
        [
            f"# ortlab repro: {part.label}",
            "",
            f"Partition `{part.name}` of the {part.graph_kind} graph {part.graph_index}, "
            f"run {part.run}, session {session.index} ({', '.join(session.providers)}).",
            "",
            "`test_data_set_0/input_*.pb` are exactly the inputs ONNX Runtime received in "
            "that run; `output_*.pb` are what eager PyTorch computes from them (the "
            "partition's FX graph run eagerly). Running the model on the inputs gives "
            "ONNX Runtime's outputs. What the diff found:",
            "",
            *_what_failed(report, part),
            "",
            _testdata.rerun_instructions(directory),
        ]
    )
    return _testdata.write_test_case(directory, model, inputs, outputs, readme=readme)
