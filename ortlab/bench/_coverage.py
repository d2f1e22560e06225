"""The corpus's coverage: does each public architecture compile, match eager and train
right through ortlab (``ortlab demo --corpus``, ``make corpus``)?

:func:`cover_model` takes one corpus model (:func:`ortlab.zoo.corpus`) through:

1. **inference**: :func:`ortlab.compile` of a copy (its defaults: torch.compile's shapes,
   static on the first call) called under ``torch.no_grad()``; its first call is timed
   (compile + run, and the backend's compile steps), its outputs compared with eager's at
   the model's tolerances by the one comparator (:mod:`ortlab.numerics._compare`);
2. **another batch size**: the same compiled model called with a larger batch, which
   Dynamo compiles again with that size symbolic (its automatic dynamic shapes), so the
   symbolic path of every model is covered too; outputs compared with eager's;
3. **the decode step** of a decoder language model (:attr:`ZooModel.followup_inputs`):
   the same compiled model called with a key/value cache, which must compile a graph of
   its own; its logits and the cache it updated are compared with eager's;
4. **training**: the model trains as users train it, with its own loss
   (:attr:`ZooModel.objective`: labels in, ``.loss`` out of the compiled call), plain
   SGD for :data:`~ortlab.bench._grads.TRAIN_STEPS` steps; its loss trajectory and every
   step's gradients are judged against eager and float64 by :mod:`ortlab.bench._grads`,
   for ortlab, and for ``torch.compile``'s inductor where asked (its first compile costs
   25-60 s per model on a small CPU, so by default only for the fast subset);
5. **latency** (optional): ortlab, eager and the bare-ORT floor (the whole model exported,
   :mod:`ortlab.bench._floor`) timed together by the one timer
   (:mod:`ortlab.bench._engine`), for the ratios ortlab/eager and ortlab/floor.

What counts
-----------
- An exception escaping a compiled call is a **crash** (the backend is designed never to
  raise). A graph ortlab could not compile runs eagerly with ``GraphRecord.error`` set:
  that graph **fell back**, and is reported, not counted as a crash.
- A model **fails** when it crashed, an output (inference, the other batch size or the
  decode step) is beyond its tolerances, the decode step compiled no graph of its own,
  ortlab's gradients fail the gradient rule, or its loss trajectory the loss rule
  (:mod:`ortlab.bench._grads`).
- A model is **one partition** when its first call's graphs are exactly one graph with
  exactly one partition running in ONNX Runtime and no node left in PyTorch
  (:func:`one_partition`); the corpus benchmark's speed targets apply to those.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import logging
import math
import re
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

import ortlab.backend
from ortlab import errors, zoo
from ortlab.backend import _torch_private
from ortlab.bench import _engine, _floor, _grads
from ortlab.numerics import _compare

TIMING = _engine.Timing(warmup=2, min_time=0.3, min_iters=5, max_iters=500)
"""Latency of the coverage run: a short measurement (the corpus benchmark is the long
one)."""

STATUS_OK = "ok"
STATUS_CRASH = "crash"
STATUS_MISMATCH = "mismatch"
STATUS_GRADS = "grad FAIL"
STATUS_LOSS = "loss FAIL"

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)
_ADDRESS = re.compile(r"<(?:built-in )?function ([\w.]+)(?: at 0x[0-9a-fA-F]+)?>")


INDUCTOR_GRADS = "ci,resnet18,mobilenet_v2"
"""The models ``make corpus`` also trains under inductor (loss trajectory and gradients),
by default: the fast subset and two CNNs with batch norm (nine; inductor's training
compile costs 25-60 s per model on a small CPU)."""


def select(selection: str | Sequence[str] | None) -> tuple[str, ...]:
    """Corpus model names from a selection: ``"all"`` (or ``None``), ``"ci"`` (the fast
    subset), a family (``"decoder"``), or names (a sequence, or one comma-separated
    string); families and ``"ci"`` may be mixed with names.

    Raises:
        UnsupportedOptionError: an unknown name, or nothing selected.
    """
    if selection is None:
        return zoo.corpus_names()
    # (each item may itself be a comma-separated list: ``--corpus a,b c`` on the CLI)
    items = [
        part
        for item in ([selection] if isinstance(selection, str) else selection)
        for part in item.split(",")
    ]
    names: list[str] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        if item == "all":
            names += zoo.corpus_names()
        elif item == "ci":
            names += zoo.corpus_names(ci=True)
        elif item in zoo.FAMILIES:
            names += zoo.corpus_names(item)
        elif item in zoo.corpus_names():
            names.append(item)
        else:
            raise errors.UnsupportedOptionError(
                f"Unknown corpus selection {item!r}: use 'all', 'ci', a family "
                f"({', '.join(zoo.FAMILIES)}) or corpus model names "
                f"({', '.join(zoo.corpus_names())})."
            )
    if not names:
        raise errors.UnsupportedOptionError(f"The corpus selection {selection!r} is empty.")
    return tuple(dict.fromkeys(names))


@dataclasses.dataclass
class CoverageRow:
    """What :func:`cover_model` found for one corpus model."""

    model: str
    family: str = ""
    architecture: str = ""
    ci: bool = False
    graphs: int = 0
    """Graphs of the inference backend (the first call's, and the decode step's)."""
    partitions: int = 0
    nodes: int = 0
    nodes_in_ort: int = 0
    eager_ops: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Nodes left in PyTorch, ``{reason: {op: count}}``, over the inference graphs."""
    fell_back: list[str] = dataclasses.field(default_factory=list)
    """``"graph 1 (inference): <error>"`` per graph that ortlab could not compile (it ran
    eagerly), over inference and training graphs."""
    failed_partitions: list[str] = dataclasses.field(default_factory=list)
    """``"graph 0 fused_0: <error>"`` per partition that fell back to PyTorch."""
    one_partition: bool = False
    """The first call is one graph of one ORT partition, with no node in PyTorch."""
    one_partition_but_sizes: bool = False
    """One graph of one ORT partition, with only size arithmetic (SymInt/SymFloat
    results) in PyTorch."""
    output_error: float = math.nan
    """Largest absolute error of the inference outputs to eager's."""
    output_passed: bool | None = None
    other_batch: int | None = None
    """The batch size of the second stage (``None``: not run)."""
    other_batch_error: float | None = None
    """Largest absolute error of its outputs to eager's."""
    other_batch_passed: bool | None = None
    other_batch_graphs: int | None = None
    """Graphs the other batch size compiled (the first call's were static)."""
    other_batch_s: float = math.nan
    """That call: Dynamo's symbolic recompile, ortlab's compile and the run."""
    other_batch_one_partition: bool | None = None
    """Its graphs are one graph of one ORT partition, size arithmetic aside."""
    decode_error: float | None = None
    """The decode step's largest absolute error (logits and updated cache); ``None`` for
    models without one."""
    decode_passed: bool | None = None
    decode_graphs: int | None = None
    """Graphs the decode step compiled (it must compile one of its own)."""
    grads: dict[str, _grads.GradCheck] = dataclasses.field(default_factory=dict)
    """The training check per backend (``"ortlab"``, ``"inductor"``): loss trajectory
    and gradients."""
    objective: str = ""
    """The loss the model trained on (:attr:`ortlab.zoo.Objective.loss`)."""
    train_steps: int = 0
    """SGD steps asked for."""
    eager_losses: list[float] = dataclasses.field(default_factory=list)
    """Eager's loss trajectory."""
    fp64_losses: list[float] = dataclasses.field(default_factory=list)
    """Float64's loss trajectory (empty without it)."""
    horizon: int = 0
    """Steps within float32's horizon, those the loss rule judges."""
    fp64_note: str = ""
    """Why gradients have no float64 reference, when they have none."""
    train_graphs: int = 0
    train_partitions: int = 0
    train_nodes: int = 0
    train_nodes_in_ort: int = 0
    train_eager_ops: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Nodes of the training graphs left in PyTorch, ``{reason: {op: count}}``."""
    train_breaks: list[str] = dataclasses.field(default_factory=list)
    """The graph breaks that split the training step, ``"where: why"``, once each."""
    train_recompiled: bool = False
    """A later training step compiled graphs the first had not."""
    first_call_s: float = math.nan
    """ortlab's first inference call: compile + run."""
    first_call_steps: dict[str, float] = dataclasses.field(default_factory=dict)
    """Its compile steps (``OrtBackend.compile_timings``), seconds."""
    floor_export_s: float = math.nan
    floor_session_s: float = math.nan
    ortlab_ms: float = math.nan
    eager_ms: float = math.nan
    floor_ms: float = math.nan
    floor_error: str = ""
    """Why the bare-ORT floor could not be built or timed."""
    crashes: list[str] = dataclasses.field(default_factory=list)
    """``"stage: Type: message"`` per exception that escaped (the row then fails)."""
    wall_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Wall-clock seconds of each stage of the coverage run (``inference``, ``timing``,
    ``training``), for planning runs; not a measurement of the model."""

    @property
    def in_ort_percent(self) -> float:
        return 100.0 * self.nodes_in_ort / self.nodes if self.nodes else math.nan

    @property
    def eager_nodes(self) -> int:
        return sum(sum(ops.values()) for ops in self.eager_ops.values())

    @property
    def ortlab_over_eager(self) -> float:
        return _ratio(self.ortlab_ms, self.eager_ms)

    @property
    def ortlab_over_floor(self) -> float:
        return _ratio(self.ortlab_ms, self.floor_ms)

    @property
    def decode_compiled(self) -> bool:
        """The decode step compiled a graph of its own (``True`` without a decode step)."""
        return self.decode_graphs is None or self.decode_graphs >= 1

    @property
    def train_in_ort_percent(self) -> float:
        return (
            100.0 * self.train_nodes_in_ort / self.train_nodes
            if self.train_nodes
            else math.nan
        )

    @property
    def status(self) -> str:
        """:data:`STATUS_CRASH`, :data:`STATUS_MISMATCH`, :data:`STATUS_GRADS`,
        :data:`STATUS_LOSS` or :data:`STATUS_OK`."""
        if self.crashes:
            return STATUS_CRASH
        if (
            self.output_passed is False
            or self.other_batch_passed is False
            or self.decode_passed is False
            or not self.decode_compiled
        ):
            return STATUS_MISMATCH
        ortlab_grads = self.grads.get("ortlab")
        if ortlab_grads is not None and not ortlab_grads.grads_passed:
            return STATUS_GRADS
        if ortlab_grads is not None and not ortlab_grads.loss_passed:
            return STATUS_LOSS
        return STATUS_OK

    @property
    def failed(self) -> bool:
        return self.status != STATUS_OK

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (non-finite numbers become ``None``)."""
        data = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "grads"
        }
        data["grads"] = {b: c.to_dict() for b, c in self.grads.items()}
        for name in ("status", "in_ort_percent", "eager_nodes", "train_in_ort_percent"):
            data[name] = getattr(self, name)
        data["ortlab_over_eager"] = self.ortlab_over_eager
        data["ortlab_over_floor"] = self.ortlab_over_floor
        return _json_safe(data)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan


def op_name(target: str) -> str:
    """A verdict's target as a stable op name: ``"<built-in function mul>"`` -> ``"mul"``,
    ``"<function sym_sum at 0x7f...>"`` -> ``"sym_sum"`` (no addresses), ATen names as
    they are."""
    return _ADDRESS.sub(r"\1", target)


def _symbolic_nodes(graph: Any) -> set[str]:
    """Names of the nodes of a graph record whose value is a Python/symbolic scalar."""
    return {
        n.name
        for n in graph.graph_module.graph.nodes
        if isinstance(n.meta.get("val"), _SYMBOLIC)
    }


def eager_ops(graphs: Sequence[Any]) -> dict[str, dict[str, int]]:
    """``{reason: {op: count}}`` of the nodes left in PyTorch in these graph records: an
    unsupported node's verdict reason, or the error of the partition that fell back."""
    grouped: dict[str, collections.Counter[str]] = {}
    for g in graphs:
        failed = {
            n: _first_line(p.error)
            for p in g.partitions
            if p.error is not None
            for n in p.node_names
        }
        for name in g.eager_node_names:
            v = g.verdict(name)
            if g.error is not None:
                reason = f"graph fell back: {_first_line(g.error)}"
            elif name in failed:
                reason = f"partition fell back: {failed[name]}"
            else:
                reason = v.reason if v is not None else "no verdict"
            target = op_name(v.target) if v is not None else name
            grouped.setdefault(reason, collections.Counter())[target] += 1
    return {r: dict(c.most_common()) for r, c in grouped.items()}


def one_partition(graphs: Sequence[Any]) -> bool:
    """Exactly one graph, without error, of exactly one partition that runs in ONNX
    Runtime, and no node left in PyTorch."""
    if len(graphs) != 1:
        return False
    (g,) = graphs
    return (
        g.error is None
        and len(g.partitions) == 1
        and g.partitions[0].state == "ort"
        and not g.eager_node_names
    )


def one_partition_but_sizes(graphs: Sequence[Any]) -> bool:
    """Like :func:`one_partition`, except that size arithmetic (nodes whose value is a
    SymInt/SymFloat/Python scalar, such as ``sym_size``) may stay in PyTorch."""
    if len(graphs) != 1:
        return False
    (g,) = graphs
    if g.error is not None or len(g.partitions) != 1 or g.partitions[0].state != "ort":
        return False
    return set(g.eager_node_names) <= _symbolic_nodes(g)


def cache_tensors(value: Any) -> list[torch.Tensor]:
    """The key and value tensors of a ``transformers`` cache, layer by layer (empty for
    anything else)."""
    out: list[torch.Tensor] = []
    for layer in getattr(value, "layers", None) or ():
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keeps the backend's fall-back warnings (their errors are on the records) and the
    fake-tensor logger's tracebacks of errors that are caught out of a coverage table."""
    fake = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake.level
    fake.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        fake.setLevel(level)


def cover_model(
    spec: zoo.ZooModel,
    *,
    inductor: bool = False,
    train_steps: int = _grads.TRAIN_STEPS,
    timing: _engine.Timing | None = TIMING,
    floor: bool = True,
) -> CoverageRow:
    """Takes one corpus model through inference, its decode step, training and (with
    ``timing``) latency; see the module docstring.

    Args:
        spec: The corpus model.
        inductor: Also train under inductor (slow: 25-60 s of compile on a CPU).
        train_steps: SGD steps of the training check (0: no training).
        timing: How to time ortlab, eager and the floor; ``None``: no latency (and no
            floor).
        floor: Build and time the bare-ORT floor (with ``timing``).

    Returns:
        The :class:`CoverageRow`. Never raises for the model's sake: what escapes a stage
        becomes a crash of the row.
    """
    row = CoverageRow(spec.name, spec.family, spec.architecture, spec.ci)
    _torch_private.reset_dynamo()
    with _quiet():
        try:
            model = spec.build()
            args = spec.example_inputs()
            with torch.no_grad():
                expected = model(*args)
        except Exception as e:
            row.crashes.append(f"eager: {errors.describe(e)}")
            return row
        start = time.perf_counter()
        compiled = _infer(row, spec, model, args, expected)
        row.wall_s["inference"] = time.perf_counter() - start
        if compiled is not None and timing is not None:
            # Before the other batch size: after it, Dynamo runs the symbolic graph for
            # every size (its guards accept the first one too).
            start = time.perf_counter()
            _time(row, spec, model, args, compiled, timing, floor=floor)
            row.wall_s["timing"] = time.perf_counter() - start
        if compiled is not None:
            start = time.perf_counter()
            _later_calls(row, spec, model, compiled)
            row.wall_s["later calls"] = time.perf_counter() - start
        if train_steps and spec.trainable:
            start = time.perf_counter()
            _train(row, spec, inductor=inductor, steps=train_steps)
            row.wall_s["training"] = time.perf_counter() - start
    return row


def _infer(
    row: CoverageRow, spec: zoo.ZooModel, model: torch.nn.Module, args: tuple, expected: Any
) -> Any:
    """The first inference call; returns the compiled model (``None`` on a crash)."""
    compiled = ortlab.backend.compile(copy.deepcopy(model))
    backend = ortlab.backend.backend_of(compiled)
    with _torch_private.dynamo_config_patch(dict(spec.dynamo_config)), torch.no_grad():
        try:
            start = time.perf_counter()
            got = compiled(*args)
            row.first_call_s = time.perf_counter() - start
        except Exception as e:
            row.crashes.append(f"inference: {errors.describe(e)}")
            _fill_graphs(row, backend.graphs)
            return None
        row.first_call_steps = {k: v for k, v in backend.compile_timings().items() if v > 0}
        first_graphs = list(backend.graphs)
        row.one_partition = one_partition(first_graphs)
        row.one_partition_but_sizes = one_partition_but_sizes(first_graphs)
        diffs = _compare.compare_outputs(got, expected, atol=spec.atol, rtol=spec.rtol)
        row.output_error = _compare.max_abs_error(diffs)
        row.output_passed = all(d.passed for d in diffs)
    return compiled  # its graph columns are filled after the later calls


def _later_calls(
    row: CoverageRow, spec: zoo.ZooModel, model: torch.nn.Module, compiled: Any
) -> None:
    """The other batch size and the decode step, then the graph columns."""
    backend = ortlab.backend.backend_of(compiled)
    with _torch_private.dynamo_config_patch(dict(spec.dynamo_config)), torch.no_grad():
        resized = _other_batch(row, spec, model, compiled)
        if spec.followup_inputs is not None:
            _decode(row, spec, model, compiled, len(backend.graphs))
    # The table's graph columns describe the first call and the decode step; the other
    # batch size's graphs have columns of their own (their fall backs count alike).
    _fill_graphs(row, [g for g in backend.graphs if g.index not in resized])
    _note_fallbacks(row, [g for g in backend.graphs if g.index in resized])


def other_batch_size(spec: zoo.ZooModel) -> int:
    """The batch size of the second stage: the first of the sweep above the default one
    (size 1 is a graph of its own in Dynamo), else one more than the default."""
    larger = [b for b in spec.batch_sizes if b > max(spec.default_batch, 1)]
    return larger[0] if larger else spec.default_batch + 1


def _other_batch(
    row: CoverageRow, spec: zoo.ZooModel, model: torch.nn.Module, compiled: Any
) -> set[int]:
    """The second stage; returns the indices of the graphs it compiled."""
    backend = ortlab.backend.backend_of(compiled)
    before = len(backend.graphs)
    row.other_batch = other_batch_size(spec)
    try:
        args = spec.example_inputs(row.other_batch)
        start = time.perf_counter()
        got = compiled(*args)
        row.other_batch_s = time.perf_counter() - start
        expected = model(*args)
    except Exception as e:
        row.crashes.append(f"batch {row.other_batch}: {errors.describe(e)}")
        return {g.index for g in backend.graphs[before:]}
    graphs = backend.graphs[before:]
    row.other_batch_graphs = len(graphs)
    row.other_batch_one_partition = one_partition_but_sizes(graphs)
    diffs = _compare.compare_outputs(got, expected, atol=spec.atol, rtol=spec.rtol)
    row.other_batch_error = _compare.max_abs_error(diffs)
    row.other_batch_passed = all(d.passed for d in diffs)
    return {g.index for g in graphs}


def _decode(
    row: CoverageRow, spec: zoo.ZooModel, model: torch.nn.Module, compiled: Any, before: int
) -> None:
    backend = ortlab.backend.backend_of(compiled)
    try:
        ours = spec.followup_example_inputs(model)
        theirs = spec.followup_example_inputs(model)
        got = compiled(*ours)
        row.decode_graphs = len(backend.graphs) - before
        expected = model(*theirs)
    except Exception as e:
        row.crashes.append(f"decode step: {errors.describe(e)}")
        return
    diffs = _compare.compare_outputs(
        [got, *(t for a in ours for t in cache_tensors(a))],
        [expected, *(t for a in theirs for t in cache_tensors(a))],
        atol=spec.atol,
        rtol=spec.rtol,
    )
    row.decode_error = _compare.max_abs_error(diffs)
    row.decode_passed = all(d.passed for d in diffs)


def _fill_graphs(row: CoverageRow, graphs: Sequence[Any]) -> None:
    row.graphs = len(graphs)
    row.partitions = sum(len(g.partitions) for g in graphs)
    row.nodes = sum(g.node_count for g in graphs)
    row.nodes_in_ort = sum(len(g.ort_node_names) for g in graphs)
    row.eager_ops = eager_ops(graphs)
    _note_fallbacks(row, graphs)


def _note_fallbacks(row: CoverageRow, graphs: Sequence[Any]) -> None:
    for g in graphs:
        if g.error is not None:
            row.fell_back.append(f"graph {g.index} ({g.kind}): {_first_line(g.error)}")
        for p in g.partitions:
            if p.error is not None:
                row.failed_partitions.append(
                    f"graph {g.index} ({g.kind}) {p.name}: {_first_line(p.error)}"
                )


def _first_line(text: str) -> str:
    return errors.first_line(text) or "error"


def _time(
    row: CoverageRow,
    spec: zoo.ZooModel,
    model: torch.nn.Module,
    args: tuple,
    compiled: Callable[..., Any],
    timing: _engine.Timing,
    *,
    floor: bool,
) -> None:
    steps: dict[str, _engine.Step] = {
        "ortlab": lambda: compiled(*args),
        "eager": lambda: model(*args),
    }
    if floor:
        try:
            with torch.no_grad():
                bare = _floor.OrtFloor(copy.deepcopy(model), args)
            row.floor_export_s, row.floor_session_s = bare.export_seconds, bare.session_seconds
            steps["ort"] = lambda: bare(*args)
        except Exception as e:
            row.floor_error = errors.describe(e)
    with _torch_private.dynamo_config_patch(dict(spec.dynamo_config)), torch.no_grad():
        measured = _engine.measure(steps, timing)
    for name, m in measured.items():
        if m.error is not None:
            if name == "ort":
                row.floor_error = m.error
            else:
                row.crashes.append(f"timing {name}: {m.error}")
    row.ortlab_ms = measured["ortlab"].median_ms
    row.eager_ms = measured["eager"].median_ms
    if "ort" in measured:
        row.floor_ms = measured["ort"].median_ms


def _train(row: CoverageRow, spec: zoo.ZooModel, *, inductor: bool, steps: int) -> None:
    """The training check (its own loss, ``steps`` SGD steps) and the training graphs."""
    backends = ("ortlab", "inductor") if inductor else ("ortlab",)
    report = _grads.check_gradients(spec, backends, steps=steps)
    row.objective = report.objective
    row.train_steps = steps
    if report.eager_error is not None:
        row.crashes.append(f"training (eager): {report.eager_error}")
        return
    row.grads = report.checks
    row.eager_losses = report.eager_losses
    row.fp64_losses = report.fp64_losses
    row.horizon = report.horizon
    row.fp64_note = report.fp64_error or ""
    for check in report.checks.values():
        if check.error is not None:
            row.crashes.append(f"training ({check.backend}): {check.error}")
    graphs = report.graphs.get("ortlab", [])
    row.train_graphs = len(graphs)
    row.train_partitions = sum(len(g.partitions) for g in graphs)
    row.train_nodes = sum(g.node_count for g in graphs)
    row.train_nodes_in_ort = sum(len(g.ort_node_names) for g in graphs)
    row.train_eager_ops = eager_ops(graphs)
    row.train_breaks = list(dict.fromkeys(_break_text(g) for g in graphs if g.graph_break))
    row.train_recompiled = report.recompiled.get("ortlab", False)
    _note_fallbacks(row, graphs)


def _break_text(graph: Any) -> str:
    where = graph.graph_break_source or graph.frame or f"graph {graph.index}"
    return f"{where}: {_first_line(graph.graph_break)}"


def run_coverage(
    names: Sequence[str],
    *,
    inductor: Sequence[str] = (),
    train_steps: int = _grads.TRAIN_STEPS,
    timing: _engine.Timing | None = TIMING,
    floor: bool = True,
    progress: Callable[[CoverageRow], None] | None = None,
) -> list[CoverageRow]:
    """:func:`cover_model` for each corpus model named, in order.

    Args:
        names: Corpus model names (:func:`select`).
        inductor: The models also trained under inductor.
        train_steps: SGD steps of the training check.
        timing: Latency measurement, or ``None``.
        floor: Time the bare-ORT floor too.
        progress: Called with each row as it is done (the CLI prints a line).
    """
    rows = []
    with _engine.settled_heap() as settle:
        for name in names:
            settle()  # this model's first call does not collect the earlier ones' objects
            row = cover_model(
                zoo.get(name),
                inductor=name in inductor,
                train_steps=train_steps,
                timing=timing,
                floor=floor,
            )
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def failures(rows: Sequence[CoverageRow]) -> list[CoverageRow]:
    """The rows that fail (crash, mismatch, no decode graph, ortlab's gradients or loss
    trajectory)."""
    return [r for r in rows if r.failed]
