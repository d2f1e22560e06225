"""The main job: compile every zoo model through ortlab, check it, and tabulate it.

``ortlab demo`` (and ``make demo``) call :func:`run_demo`. For each zoo model: compile
with ``dynamic=True`` under ``torch.no_grad()``, run the whole batch sweep and compare each
result with eager PyTorch at the model's tolerances, then time steady-state calls of
eager and ortlab on the default batch, in the same process, alternating.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

import ortlab.backend
from ortlab import _html, zoo


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


def _median_ms(fn: Any, args: Sequence[Any], iters: int) -> float:
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def demo_model(spec: zoo.ZooModel, *, iters: int = 20) -> DemoRow:
    """Compiles one zoo model through ortlab, checks its sweep, times it against eager."""
    model = spec.build()
    compiled = ortlab.backend.compile(copy.deepcopy(model), dynamic=True)
    backend = ortlab.backend.backend_of(compiled)
    max_diff = 0.0
    matches = True
    with torch._dynamo.config.patch(dict(spec.dynamo_config)), torch.no_grad():
        args = spec.example_inputs()
        start = time.perf_counter()
        out = compiled(*args)
        first_call = time.perf_counter() - start
        for batch in (spec.default_batch, *spec.batch_sizes):
            args = spec.example_inputs(batch)
            out, ref = compiled(*args), model(*args)
            max_diff = max(max_diff, float((out - ref).abs().max()) if out.numel() else 0.0)
            matches &= torch.allclose(out, ref, atol=spec.atol, rtol=spec.rtol)
        args = spec.example_inputs()
        for _ in range(3):  # warm up both
            compiled(*args)
            model(*args)
        ortlab_ms = _median_ms(compiled, args, iters)
        eager_ms = _median_ms(model, args, iters)
    s = backend.summary()
    return DemoRow(
        model=spec.name,
        graphs=s["graphs"],
        partitions=s["partitions"],
        sessions=s["sessions"],
        nodes_in_ort=s["nodes_in_ort"],
        nodes_eager=s["nodes_eager"],
        max_abs_diff=max_diff,
        matches=bool(matches),
        first_call_s=first_call,
        ortlab_ms=ortlab_ms,
        eager_ms=eager_ms,
        backend=backend,
    )


def run_demo(names: Sequence[str] | None = None, *, iters: int = 20) -> list[DemoRow]:
    """Runs :func:`demo_model` on the zoo (all models by default)."""
    rows = []
    for name in names or zoo.names():
        torch._dynamo.reset()
        rows.append(demo_model(zoo.get(name), iters=iters))
    return rows


def format_table(rows: Sequence[DemoRow]) -> str:
    """The demo's table as aligned text."""
    return _html.text_table(HEADERS, [_cells(r) for r in rows])


def format_markdown(rows: Sequence[DemoRow]) -> str:
    """The demo's table as a Markdown table."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(str(c) for c in _cells(r)) + " |" for r in rows]
    return "\n".join(lines)
