"""The main job: compile every zoo model through ortlab, check it, and tabulate it.

``ortlab demo`` (and ``make demo``) call :func:`run_demo`. For each zoo model: compile
(``ortlab.compile``'s defaults) under ``torch.no_grad()``, run the whole batch sweep and
compare each result with eager PyTorch at the model's tolerances (the one comparator,
:mod:`ortlab.numerics._compare`), then time steady-state calls of eager and ortlab on the
default batch, in the same process, interleaved (the bench engine,
:mod:`ortlab.bench._engine`).

``ortlab demo --corpus`` (and ``make corpus``) call :func:`corpus_coverage`: the coverage
of the public-architecture corpus (:mod:`ortlab.bench._coverage`), printed and written as
markdown and JSON.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import ortlab.backend
from ortlab import _html, errors, zoo
from ortlab.backend import _torch_private
from ortlab.bench import _coverage, _coverage_report, _engine, _grads, _machine
from ortlab.numerics import _compare


@dataclasses.dataclass
class DemoRow:
    """The demo's findings for one zoo model."""

    model: str
    graphs: int
    partitions: int
    sessions: int
    nodes_in_ort: int
    nodes_eager: int
    max_abs_diff: float
    matches: bool
    first_call_s: float
    ortlab_ms: float
    eager_ms: float
    backend: ortlab.backend.OrtBackend = dataclasses.field(repr=False)

    @property
    def ratio(self) -> float:
        return self.ortlab_ms / self.eager_ms if self.eager_ms else float("nan")


HEADERS = (
    "model",
    "graphs",
    "partitions",
    "sessions",
    "nodes ORT/eager",
    "max abs diff",
    "matches",
    "first call s",
    "ortlab ms",
    "eager ms",
    "ortlab/eager",
)


def _cells(row: DemoRow) -> tuple[Any, ...]:
    return (
        row.model,
        row.graphs,
        row.partitions,
        row.sessions,
        f"{row.nodes_in_ort}/{row.nodes_eager}",
        f"{row.max_abs_diff:.2e}",
        "yes" if row.matches else "NO",
        f"{row.first_call_s:.2f}",
        f"{row.ortlab_ms:.3f}",
        f"{row.eager_ms:.3f}",
        f"{row.ratio:.2f}x",
    )


def demo_model(spec: zoo.ZooModel, *, iters: int = 20) -> DemoRow:
    """Compiles one zoo model through ortlab, checks its sweep, times it against eager."""
    model = spec.build()
    compiled = ortlab.backend.compile(copy.deepcopy(model))
    backend = ortlab.backend.backend_of(compiled)
    diffs = []
    with _torch_private.dynamo_config_patch(dict(spec.dynamo_config)), torch.no_grad():
        args = spec.example_inputs()
        start = time.perf_counter()
        compiled(*args)
        first_call = time.perf_counter() - start
        for batch in (spec.default_batch, *spec.batch_sizes):
            args = spec.example_inputs(batch)
            diffs += _compare.compare_outputs(
                compiled(*args), model(*args), atol=spec.atol, rtol=spec.rtol
            )
        args = spec.example_inputs()
        timed = _engine.measure(
            {"ortlab": lambda: compiled(*args), "eager": lambda: model(*args)},
            _engine.Timing(warmup=3, iters=iters),
        )
    failed = [f"{m.name}: {m.error}" for m in timed.values() if m.error is not None]
    if failed:
        raise errors.OrtlabError(f"demo of {spec.name}: timing failed ({'; '.join(failed)})")
    s = backend.summary()
    return DemoRow(
        model=spec.name,
        graphs=s["graphs"],
        partitions=s["partitions"],
        sessions=s["sessions"],
        nodes_in_ort=s["nodes_in_ort"],
        nodes_eager=s["nodes_eager"],
        max_abs_diff=_compare.max_abs_error(diffs),
        matches=all(d.passed for d in diffs),
        first_call_s=first_call,
        ortlab_ms=timed["ortlab"].median_ms,
        eager_ms=timed["eager"].median_ms,
        backend=backend,
    )


def run_demo(names: Sequence[str] | None = None, *, iters: int = 20) -> list[DemoRow]:
    """Runs :func:`demo_model` on the zoo (all models by default)."""
    rows = []
    for name in names or zoo.names():
        _torch_private.reset_dynamo()
        rows.append(demo_model(zoo.get(name), iters=iters))
    return rows


def format_table(rows: Sequence[DemoRow]) -> str:
    """The demo's table as aligned text."""
    return _html.text_table(HEADERS, [_cells(r) for r in rows])


def _progress_line(row: _coverage.CoverageRow) -> None:
    wall = sum(row.wall_s.values())
    print(f"  {row.model}: {row.status} ({wall:.0f} s)", file=sys.stderr, flush=True)


def corpus_coverage(
    selection: str | Sequence[str] | None = None,
    *,
    out_dir: str | os.PathLike[str] = "reports",
    inductor: str | Sequence[str] | None = _coverage.INDUCTOR_GRADS,
    train_steps: int = _grads.TRAIN_STEPS,
    timing: bool = True,
    floor: bool = True,
    echo: bool = True,
) -> tuple[list[_coverage.CoverageRow], str, tuple[Path, Path]]:
    """Runs the corpus coverage and writes ``corpus_coverage.md`` / ``.json``.

    Args:
        selection: Corpus models (:func:`ortlab.bench._coverage.select`); ``None``: all.
        out_dir: Folder of the two files (created if missing).
        inductor: Models whose inductor gradients are also checked (a selection, or
            ``None`` / ``"none"`` for none); only those of ``selection`` run.
        train_steps: SGD steps of the training check (0: no training).
        timing: Time ortlab, eager (and the floor) for the latency ratios.
        floor: Build and time the bare-ORT floor.
        echo: Print a line per model to stderr as it finishes.

    Returns:
        The rows, the markdown, and the paths of the markdown and JSON files.
    """
    names = _coverage.select(selection)
    with_inductor: tuple[str, ...] = ()
    if inductor is not None and inductor != "none":
        with_inductor = _coverage.select(inductor)
    machine = _machine.machine_facts()
    machine["exporter_warm_up_s"] = round(ortlab.backend.warm_up(), 2)
    start = time.perf_counter()
    rows = _coverage.run_coverage(
        names,
        inductor=with_inductor,
        train_steps=train_steps,
        timing=_coverage.TIMING if timing else None,
        floor=floor,
        progress=_progress_line if echo else None,
    )
    machine["coverage_wall_minutes"] = round((time.perf_counter() - start) / 60, 1)
    machine["transformers"] = _machine.version_of("transformers")
    if hasattr(os, "getloadavg"):
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    md, js, markdown = _coverage_report.write_coverage(rows, out_dir, machine=machine)
    return rows, markdown, (md, js)
