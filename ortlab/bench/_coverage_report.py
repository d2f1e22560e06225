"""How the corpus coverage is written: markdown (printed and saved) and JSON.

:func:`coverage_markdown` renders :class:`~ortlab.bench._coverage.CoverageRow` s as the
coverage table, the one-partition lists, the eager ops per model with their reasons,
what fell back, the gradients in detail and the failures; :func:`write_coverage` saves
it with its JSON beside it.
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
    "train out err",
    "train graphs/partitions",
    "train % in ORT",
)
"""Columns of the gradient table."""

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
                if row.train_nodes:
                    in_ort = _pct(100.0 * row.train_nodes_in_ort / row.train_nodes)
            worst = _sci(check.vs_eager)
            if check.worst_param:
                worst += f" ({check.worst_param})"
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
        "is ortlab's worst per-parameter relative gradient error to eager after a "
        "training step (rule: `ortlab/bench/_grads.py`); latency is a short "
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
    grad_rows = _grad_rows(rows)
    if grad_rows:
        lines += [
            "## Gradients",
            "",
            "One training step per model (train mode, loss = `(out * w).sum()` with a "
            "seeded `w`), errors relative to the reference's largest magnitude, worst "
            "parameter shown. `pass`: within the tolerance of eager; `passes vs fp64 "
            "(discontinuity)`: not within it, but as close to a float64 run as eager is "
            f"(at most {_grads.FP64_FACTOR:g}× eager's error to it).",
            "",
            _format.markdown_table(GRAD_HEADERS, grad_rows),
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
    if check is not None and not check.passed and check.error is None:
        parts.append(
            f"gradients {_sci(check.vs_eager)} vs eager ({check.worst_param}), "
            f"{_sci(check.vs_fp64)} vs fp64 (eager: {_sci(check.eager_vs_fp64)})"
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
