"""How the corpus coverage is written: markdown (printed and saved) and JSON.

:func:`coverage_markdown` renders :class:`~ortlab.bench._coverage.CoverageRow` s as the
coverage table, the one-partition lists, the eager ops per model with their reasons,
what fell back, the training check in detail (each model's own loss: the loss
trajectories of eager, float64, ortlab and inductor, their deviations, the gradients, the
training graphs) and the failures; :func:`write_coverage` saves it with its JSON beside
it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ortlab import zoo
from ortlab.backend import records
from ortlab.bench import _coverage, _format, _grads

HEADERS = (
    "model",
    "family",
    "status",
    "graphs",
    "partitions",
    "% in ORT",
    "eager nodes",
    "max err",
    "other batch",
    "decode err",
    "grads (ortlab)",
    "loss (ortlab)",
    "first call s",
    "ortlab ms",
    "eager ms",
    "floor ms",
    "ortlab / eager",
    "ortlab / floor",
)
"""Columns of the coverage table."""

GRAD_HEADERS = (
    "model",
    "backend",
    "verdict",
    "vs eager (worst param)",
    "vs fp64",
    "eager vs fp64",
    "tolerance atol/rtol",
    "loss err, same weights",
    "train graphs/partitions",
    "train % in ORT",
)
"""Columns of the gradient table."""

LOSS_HEADERS = (
    "model",
    "objective",
    "steps judged",
    "eager loss first → last",
    "eager vs fp64",
    "ortlab",
    "ortlab, every step",
    "inductor",
    "inductor, every step",
)
"""Columns of the loss-trajectory table."""

FIRST_CALL_STEPS = (
    "dynamo",
    "lower",
    "translate",
    "fuse",
    "session",
    "first_run",
)
"""Compile steps shown in the first-call breakdown (the others summed as "other")."""


def _sci(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.1e}"


def _pct(value: float) -> str:
    return f"{value:.0f}%" if math.isfinite(value) else ""


def grad_cell(check: _grads.GradCheck | None) -> str:
    """``"pass 3.1e-06"``, ``"passes vs fp64 (discontinuity) 0.21 / fp64 1.2e-03 vs
    1.1e-03"``, ``"FAIL ..."`` or ``"crash"``; empty when not checked."""
    if check is None:
        return ""
    verdict = check.verdict
    if verdict == _grads.VERDICT_CRASH:
        return "crash"
    text = f"{verdict} {_sci(check.vs_eager)}"
    if verdict != _grads.VERDICT_PASS and math.isfinite(check.vs_fp64):
        text += f" (fp64: {_sci(check.vs_fp64)} vs eager {_sci(check.eager_vs_fp64)})"
    return text


def loss_cell(check: _grads.GradCheck | None) -> str:
    """``"pass 1.2e-07"`` / ``"FAIL 3.1e-01"`` (the largest relative deviation from
    eager's loss over the judged steps) or ``"crash"``; empty when not trained."""
    if check is None:
        return ""
    if check.error is not None:
        return "crash"
    return f"{check.loss_verdict} {_sci(check.loss_deviation)}"


def _steps_cell(row: _coverage.CoverageRow) -> str:
    """``"10/10"``; ``"3/10 (float32 leaves float64 at step 3)"`` past the horizon."""
    steps = len(row.eager_losses)
    text = f"{row.horizon}/{steps}"
    if row.horizon < steps:
        text += f" (float32 leaves float64 at step {row.horizon})"
    return text


def _trajectory_text(losses: Sequence[float]) -> str:
    return " ".join(f"{v:.5g}" for v in losses)


def other_batch_cell(row: _coverage.CoverageRow) -> str:
    """``"4: 1.2e-07, 1 graph, 2.9 s"``: the other batch size, its error, the graphs it
    compiled and that call's seconds; ``MISMATCH`` / ``not one partition`` when so."""
    if row.other_batch is None or row.other_batch_error is None:
        return ""
    graphs = row.other_batch_graphs or 0
    text = f"{row.other_batch}: {_sci(row.other_batch_error)}"
    if row.other_batch_passed is False:
        text += " MISMATCH"
    text += f", {graphs} graph{'' if graphs == 1 else 's'}"
    if graphs and not row.other_batch_one_partition:
        text += " (not one partition)"
    return text + f", {_format.fmt(row.other_batch_s, '{:.1f}')} s"


def _cells(row: _coverage.CoverageRow) -> list[str]:
    decode = ""
    if row.decode_error is not None:
        decode = _sci(row.decode_error) + ("" if row.decode_passed else " MISMATCH")
    if row.decode_graphs == 0:
        decode += " (no graph of its own)"
    out_err = _sci(row.output_error)
    if row.output_passed is False:
        out_err += " MISMATCH"
    return [
        row.model,
        row.family,
        row.status,
        str(row.graphs),
        str(row.partitions),
        _pct(row.in_ort_percent),
        str(row.eager_nodes),
        out_err,
        other_batch_cell(row),
        decode,
        grad_cell(row.grads.get("ortlab")),
        loss_cell(row.grads.get("ortlab")),
        _format.fmt(row.first_call_s, "{:.2f}"),
        _format.fmt_ms(row.ortlab_ms),
        _format.fmt_ms(row.eager_ms),
        _format.fmt_ms(row.floor_ms),
        _format.fmt_ratio(row.ortlab_over_eager),
        _format.fmt_ratio(row.ortlab_over_floor),
    ]


def eager_ops_text(ops: Mapping[str, Mapping[str, int]]) -> str:
    """``"reason: op ×n, op ×m; reason: ..."`` (empty when nothing stayed in PyTorch)."""
    return "; ".join(
        f"{reason}: " + ", ".join(f"{op} ×{n}" for op, n in counts.items())
        for reason, counts in ops.items()
    )


def split_steps(steps: Mapping[str, float]) -> tuple[list[float], float]:
    """A first call's compile steps as the seconds of :data:`FIRST_CALL_STEPS` (in that
    order, ``translate`` summing the export steps but the fusions: type promotion,
    translation, serialization and transforms) and the seconds of all other steps."""
    rest = dict(steps)
    made = [k for k in records.EXPORT_STEPS if k != "fuse"]
    rest["translate"] = sum(rest.pop(k, 0.0) for k in made)
    shown = [rest.pop(k, 0.0) for k in FIRST_CALL_STEPS]
    return shown, sum(rest.values())


def first_call_cells(row: _coverage.CoverageRow) -> list[str]:
    """ortlab's first call, its main steps, the rest, and the floor's export and session."""
    shown, other = split_steps(row.first_call_steps)
    return [
        row.model,
        _format.fmt(row.first_call_s, "{:.2f}"),
        *(f"{v:.2f}" for v in shown),
        f"{other:.2f}",
        _format.fmt(row.floor_export_s, "{:.2f}"),
        _format.fmt(row.floor_session_s, "{:.2f}"),
    ]


def _grad_rows(rows: Sequence[_coverage.CoverageRow]) -> list[list[str]]:
    out = []
    for row in rows:
        tolerance = _tolerance_text(row.model)
        for backend, check in row.grads.items():
            train = ""
            in_ort = ""
            if backend == "ortlab":
                train = f"{row.train_graphs}/{row.train_partitions}"
                in_ort = _pct(row.train_in_ort_percent)
            worst = _sci(check.vs_eager)
            if check.worst_param:
                worst += f" ({check.worst_param}, step {check.worst_step})"
            out.append(
                [
                    row.model,
                    backend,
                    check.verdict if check.error is None else f"crash: {check.error}",
                    worst,
                    _sci(check.vs_fp64),
                    _sci(check.eager_vs_fp64),
                    tolerance,
                    _sci(check.output_error) + ("" if check.output_passed else " MISMATCH"),
                    train,
                    in_ort,
                ]
            )
    return out


def _loss_rows(rows: Sequence[_coverage.CoverageRow]) -> list[list[str]]:
    out = []
    for row in rows:
        if not row.eager_losses:
            continue
        cells = []
        for backend in ("ortlab", "inductor"):
            check = row.grads.get(backend)
            every = ""
            if check is not None and check.error is None:
                every = _sci(check.loss_deviation_all)
            cells += [loss_cell(check), every]
        first, last = row.eager_losses[0], row.eager_losses[-1]
        deviation = _grads.deviations(row.eager_losses, row.fp64_losses)
        out.append(
            [
                row.model,
                row.objective,
                _steps_cell(row),
                f"{first:.4g} → {last:.4g}",
                _sci(max(deviation, default=math.nan)),
                *cells,
            ]
        )
    return out


def _trajectory_rows(rows: Sequence[_coverage.CoverageRow]) -> list[list[str]]:
    out = []
    for row in rows:
        runs = {"eager": row.eager_losses, "fp64": row.fp64_losses}
        runs |= {b: c.losses for b, c in row.grads.items()}
        out += [[row.model, run, _trajectory_text(v)] for run, v in runs.items() if v]
    return out


def short_reason(reason: str) -> str:
    """A verdict's reason for a table cell: up to its first ``;`` (the advice after it
    is the same for every op) and without a parenthesis that ``;`` cut open;
    ``"no ONNX translation"`` for a missing translation."""
    first = reason.split("; ", 1)[0]
    if first.count("(") > first.count(")") and " (" in first:
        first = first[: first.index(" (")]
    return "no ONNX translation" if first.startswith("no ONNX translation of ") else first


def _train_graph_rows(rows: Sequence[_coverage.CoverageRow]) -> list[list[str]]:
    out = []
    for r in rows:
        if not r.train_graphs:
            continue
        ops: dict[str, dict[str, int]] = {}
        for reason, counts in r.train_eager_ops.items():
            merged = ops.setdefault(short_reason(reason), {})
            for op, n in counts.items():
                merged[op] = merged.get(op, 0) + n
        out.append(
            [
                r.model,
                str(r.train_graphs),
                str(r.train_partitions),
                f"{r.train_nodes_in_ort}/{r.train_nodes}",
                _pct(r.train_in_ort_percent),
                eager_ops_text(ops) or "none",
                "; ".join(r.train_breaks) or "none",
            ]
        )
    return out


def _tolerance_text(name: str) -> str:
    atol, rtol, normalised = _grads.tolerance(zoo.get(name))
    return f"{atol:.0e}/{rtol:.0e}" + ("" if normalised else " (raw)")


def coverage_markdown(
    rows: Sequence[_coverage.CoverageRow], *, machine: Mapping[str, Any] | None = None
) -> str:
    """The coverage report in markdown: table, one-partition lists, eager ops, fall backs,
    gradients, first calls, failures, machine."""
    failed = _coverage.failures(rows)
    lines = [
        "# ortlab corpus coverage",
        "",
        f"{len(rows)} models; {len(rows) - len(failed)} ok, {len(failed)} failing. "
        "Inference under `torch.no_grad()` with `ortlab.compile(copy)` (its defaults: "
        "shapes static on the first call); the graph columns count the first call's "
        "graphs and the decode step's. `other batch`: the same compiled model called "
        "with a larger batch, which Dynamo compiles again with that size symbolic: the "
        "size, its error, the graphs it compiled and that call's seconds. Errors are "
        "the largest absolute difference to eager; `grads` "
        "is ortlab's worst per-parameter relative gradient error to eager over the "
        "training steps, `loss` the largest relative deviation of its loss trajectory "
        "from eager's (rules: `ortlab/bench/_grads.py`); latency is a short "
        "steady-state median (ortlab, eager and the floor timed together, interleaved), "
        "the floor being the whole model exported with `torch.onnx.export` and run by "
        "one bare session.",
        "",
        _format.markdown_table(HEADERS, [_cells(r) for r in rows]),
        "",
    ]
    strict = [r.model for r in rows if r.one_partition]
    sizes = [r.model for r in rows if r.one_partition_but_sizes and not r.one_partition]
    lines += [
        "## One partition",
        "",
        "One graph, one ONNX Runtime partition, every node in it (the speed targets of "
        "the corpus benchmark apply to these): " + (", ".join(strict) or "none") + ".",
        "",
        "One graph and one partition, with only size arithmetic (SymInt/SymFloat values) "
        "left in PyTorch: " + (", ".join(sizes) or "none") + ".",
        "",
        "## Nodes left in PyTorch",
        "",
        _format.markdown_table(
            ("model", "eager ops (reason: op ×count)"),
            [[r.model, eager_ops_text(r.eager_ops) or "none"] for r in rows],
        ),
        "",
    ]
    fallbacks = [
        [r.model, text] for r in rows for text in (*r.fell_back, *r.failed_partitions)
    ]
    lines += [
        "## Fell back",
        "",
        "Graphs and partitions ortlab could not compile; they ran in PyTorch (not a crash).",
        "",
        _format.markdown_table(("model", "what, and why"), fallbacks)
        if fallbacks
        else "None.",
        "",
    ]
    loss_rows = _loss_rows(rows)
    if loss_rows:
        steps = max(len(r.eager_losses) for r in rows)
        lines += [
            "## Training: loss trajectories",
            "",
            "Each model trains as users train it: its own loss (`objective`; the labels "
            "go into the compiled call and `.loss` comes out of it), train mode, the same "
            f"weights and batch for every run, {steps} steps of plain SGD (learning rate "
            f"{_grads.LEARNING_RATE:g}, no momentum, no clipping), each run with its own "
            "gradients: eager, float64, ortlab and (where asked) inductor. A run passes "
            f"when its loss is within {_grads.LOSS_RTOL:g} of eager's, relative, at every "
            "judged step; the steps judged are float32's horizon: those before eager "
            f"itself leaves the float64 trajectory by more than {_grads.HORIZON:g}× that "
            "tolerance (past it, rounding alone decides the trajectory: reported, not "
            "judged; the gradients are still judged at every step). Deviations are the "
            "largest relative ones over the judged steps, then over every step.",
            "",
            _format.markdown_table(LOSS_HEADERS, loss_rows),
            "",
            "### Losses, step by step",
            "",
            _format.markdown_table(("model", "run", "loss per step"), _trajectory_rows(rows)),
            "",
        ]
    grad_rows = _grad_rows(rows)
    if grad_rows:
        lines += [
            "## Training: gradients",
            "",
            "At every step, each backend's gradients against eager's and float64's at "
            "the backend's own weights (twins take them before the step), errors relative "
            "to the reference's largest magnitude, worst parameter and worst step shown. "
            "`pass`: within the tolerance of eager; `passes vs fp64 (discontinuity)`: not "
            "within it, but as close to a float64 run as eager is (at most "
            f"{_grads.FP64_FACTOR:g}× eager's error to it). `loss err, same weights`: the "
            "backend's loss against eager's at its weights (absolute).",
            "",
            _format.markdown_table(GRAD_HEADERS, grad_rows),
            "",
        ]
    graph_rows = _train_graph_rows(rows)
    if graph_rows:
        lines += [
            "## Training: graphs",
            "",
            "ortlab's training graphs (forward and backward, and any graph a break "
            "added), their partitions, the nodes in ONNX Runtime, the nodes left in "
            "PyTorch with their reasons, and the graph breaks that split the step "
            "(Dynamo's; each adds a forward and a backward graph).",
            "",
            _format.markdown_table(
                (
                    "model",
                    "graphs",
                    "partitions",
                    "nodes in ORT",
                    "% in ORT",
                    "in PyTorch",
                    "graph breaks",
                ),
                graph_rows,
            ),
            "",
        ]
    lines += [
        "## First call",
        "",
        "ortlab's first call (compile + run, seconds) and its steps; `translate` is type "
        "promotion + translation + serialization + transforms, `fuse` the rewrite with "
        "ONNX Runtime's fused operators; the floor's export "
        "(`torch.onnx.export` of the whole model) and session creation beside it.",
        "",
        _format.markdown_table(
            (
                "model",
                "first call s",
                *FIRST_CALL_STEPS,
                "other",
                "floor export s",
                "floor session s",
            ),
            [first_call_cells(r) for r in rows],
        ),
        "",
    ]
    floor_errors = [[r.model, r.floor_error] for r in rows if r.floor_error]
    if floor_errors:
        lines += [
            "## Floor not measured",
            "",
            _format.markdown_table(("model", "error"), floor_errors),
            "",
        ]
    if failed:
        lines += [
            "## Failures",
            "",
            _format.markdown_table(
                ("model", "status", "what"), [[r.model, r.status, _why(r)] for r in failed]
            ),
            "",
        ]
    if machine:
        lines += [
            "## Machine",
            "",
            _format.markdown_table(("fact", "value"), _format.machine_rows(machine)),
            "",
        ]
    return "\n".join(lines)


def _why(row: _coverage.CoverageRow) -> str:
    parts = list(row.crashes)
    if row.output_passed is False:
        parts.append(f"output error {_sci(row.output_error)} beyond the model's tolerance")
    if row.other_batch_passed is False:
        parts.append(
            f"batch {row.other_batch} output error {_sci(row.other_batch_error)} beyond "
            "the model's tolerance"
        )
    if row.decode_passed is False:
        parts.append(f"decode step error {_sci(row.decode_error)} beyond the tolerance")
    if not row.decode_compiled:
        parts.append("the decode step compiled no graph of its own")
    check = row.grads.get("ortlab")
    if check is not None and not check.grads_passed and check.error is None:
        parts.append(
            f"gradients {_sci(check.vs_eager)} vs eager ({check.worst_param}), "
            f"{_sci(check.vs_fp64)} vs fp64 (eager: {_sci(check.eager_vs_fp64)})"
        )
    if check is not None and not check.loss_passed and check.error is None:
        parts.append(
            f"loss {_sci(check.loss_deviation)} off eager's over {check.judged_steps} "
            f"judged steps (tolerance {_grads.LOSS_RTOL:g})"
        )
    return "; ".join(parts)


def coverage_json(
    rows: Sequence[_coverage.CoverageRow], *, machine: Mapping[str, Any] | None = None
) -> str:
    """The rows and the machine as JSON text."""
    payload = {
        "machine": dict(machine or {}),
        "models": [r.to_dict() for r in rows],
        "failures": [r.model for r in _coverage.failures(rows)],
        "one_partition": [r.model for r in rows if r.one_partition],
    }
    return json.dumps(payload, indent=2) + "\n"


def write_coverage(
    rows: Sequence[_coverage.CoverageRow],
    out_dir: str | os.PathLike[str],
    *,
    machine: Mapping[str, Any] | None = None,
    stem: str = "corpus_coverage",
) -> tuple[Path, Path, str]:
    """Writes ``<stem>.md`` and ``<stem>.json`` into ``out_dir`` (created if missing);
    returns both paths and the markdown."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    markdown = coverage_markdown(rows, machine=machine)
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown, encoding="utf-8")
    js.write_text(coverage_json(rows, machine=machine), encoding="utf-8")
    return md, js, markdown
