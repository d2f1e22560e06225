"""ONNX Runtime's profile (``SessionOptions.enable_profiling``) read back as kernel times.

# NOTE: ONNX Runtime writes a Chrome trace (a JSON list of events). What this module
# relies on, checked on onnxruntime 1.31:
#
#   {"cat": "Session", "name": "model_run", "ts": µs, "dur": µs, ...}      one per run
#   {"cat": "Node", "name": "<node name>_kernel_time", "ts", "dur",
#    "args": {"op_name": "Conv", "provider": "CPUExecutionProvider",
#             "input_type_shape": [{"float": [1, 3, 224, 224]}, ...],
#             "output_type_shape": [...], "node_index": "12", ...}}    one per node run
#
# Node names are those of the session's *optimized* graph (what
# ``SessionOptions.optimized_model_filepath`` writes): fused nodes get new names, and
# nodes ONNX Runtime inserts or inlines may have an empty or repeated name. A kernel
# event is therefore identified by (name, op type, occurrence in its run), and the k-th
# event of a (name, op type) in a run is the k-th node of that name and op type in the
# optimized model's node order (ONNX Runtime writes the model and runs it in the same
# topological order: checked on ResNet and BERT partitions, fused and unfused). Events
# belong to the ``model_run`` whose interval holds them; runs before ``skip`` (warm-up)
# are left out.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

KERNEL_SUFFIX = "_kernel_time"
"""The suffix of ONNX Runtime's per-node events."""


@dataclasses.dataclass(frozen=True)
class KernelEvent:
    """One node's kernel in one run, as ONNX Runtime's profiler saw it."""

    node: str
    """The node's name in the optimized graph (may be ``""``)."""
    op_type: str
    provider: str
    run: int
    """Index of the run (among the kept runs, from 0)."""
    occurrence: int
    """How many events of the same (node, op type) came before it in this run."""
    seconds: float
    start: float
    """Seconds since the run started."""
    input_shapes: tuple[str, ...] = ()
    output_shapes: tuple[str, ...] = ()


@dataclasses.dataclass
class SessionTrace:
    """The kernels of the kept runs of one profiled session."""

    run_seconds: list[float]
    """Each kept run's ``model_run`` duration."""
    kernels: list[KernelEvent]

    @property
    def runs(self) -> int:
        return len(self.run_seconds)

    def kernel_seconds_per_run(self) -> list[float]:
        """The sum of kernel times in each run."""
        totals = [0.0] * self.runs
        for k in self.kernels:
            totals[k.run] += k.seconds
        return totals


def _shapes(value: Any) -> tuple[str, ...]:
    """``[{"float": [1, 3]}]`` -> ``("float[1,3]",)``."""
    out = []
    for item in value if isinstance(value, list) else ():
        if isinstance(item, dict):
            for dtype, dims in item.items():
                out.append(f"{dtype}[{','.join(str(d) for d in dims)}]")
    return tuple(out)


def parse(events: Iterable[dict[str, Any]], *, skip: int = 0) -> SessionTrace:
    """Kernel events grouped by run (see the module NOTE).

    Args:
        events: ONNX Runtime's trace events.
        skip: Leading runs to leave out (warm-up runs).
    """
    events = list(events)
    runs = sorted(
        (float(e["ts"]), float(e["dur"]))
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )[skip:]
    kernels: list[KernelEvent] = []
    seen: dict[tuple[int, str, str], int] = {}
    nodes = sorted(
        (
            e
            for e in events
            if e.get("cat") == "Node" and str(e.get("name", "")).endswith(KERNEL_SUFFIX)
        ),
        key=lambda e: float(e["ts"]),
    )
    run = 0
    for event in nodes:
        ts = float(event["ts"])
        while run < len(runs) and ts > runs[run][0] + runs[run][1]:
            run += 1
        if run >= len(runs):
            break
        if ts < runs[run][0]:
            continue  # a skipped run's kernel
        args = event.get("args") or {}
        name = str(event["name"])[: -len(KERNEL_SUFFIX)]
        op_type = str(args.get("op_name", ""))
        key = (run, name, op_type)
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        kernels.append(
            KernelEvent(
                node=name,
                op_type=op_type,
                provider=str(args.get("provider", "")),
                run=run,
                occurrence=occurrence,
                seconds=float(event.get("dur", 0.0)) * 1e-6,
                start=(ts - runs[run][0]) * 1e-6,
                input_shapes=_shapes(args.get("input_type_shape")),
                output_shapes=_shapes(args.get("output_type_shape")),
            )
        )
    return SessionTrace([dur * 1e-6 for _, dur in runs], kernels)


def load(path: str | os.PathLike[str], *, skip: int = 0) -> SessionTrace:
    """:func:`parse` of the trace file ONNX Runtime wrote (``end_profiling()``'s path)."""
    with open(path, encoding="utf-8") as f:
        return parse(json.load(f), skip=skip)


def node_keys(
    names: Sequence[str], op_types: Sequence[str]
) -> dict[tuple[str, str, int], int]:
    """``(name, op type, occurrence) -> node index`` over a graph's nodes in order: the
    k-th node of a (name, op type) is what the k-th event of that pair in a run ran."""
    keys: dict[tuple[str, str, int], int] = {}
    counts: dict[tuple[str, str], int] = {}
    for index, (name, op_type) in enumerate(zip(names, op_types)):
        k = counts.get((name, op_type), 0)
        counts[(name, op_type)] = k + 1
        keys[(name, op_type, k)] = index
    return keys
