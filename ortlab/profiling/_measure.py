"""Measuring a compiled call and its parts: what :func:`ortlab.profile` times and how.

# NOTE: the steps, and why each is timed the way it is.
#
# 1. Capture (one call, untimed): a backend observer records every partition run (its
#    session and the exact inputs ONNX Runtime received); a ``sys.setprofile`` hook
#    records the inputs of every graph the call runs (the frame of the graph module's
#    ``forward``, found by its ``self``). Nothing in the backend changes.
# 2. Timed together by the bench engine (``bench._engine.measure``, interleaved blocks,
#    so that load changes reach them alike):
#    - ``call``: the compiled call as the user makes it;
#    - ``graphs``: every captured graph run again, by an ``fx.Interpreter`` that times
#      each node's own call (eager nodes; partition modules, i.e. glue and ONNX Runtime)
#      and, right after each partition's call, its session bare
#      (``ortlab.backend.create_session``: the partition's model, providers and threads)
#      on the inputs it received; then Dynamo's entry alone (``bench._floor.
#      dynamo_entry``: the model compiled with a backend that runs nothing), right after
#      the graphs ran as in a real call (its guards then find the CPU caches full of the
#      model's data).
#    ``graphs`` mirrors the call (graphs, then an entry) so that what runs around each
#    node is what runs around it in the call: on a busy machine torch's OpenMP threads
#    wake slower after other work, and an eager op timed among other steps took 20x
#    longer than in the call. A partition's call and its bare session run are timed as a
#    pair, so that the glue (their difference, ``_attribute``) is taken within one moment
#    of the machine's load: on BERT-base under load, medians taken in separate blocks
#    differed by +75 ms on one profile and -4 ms on the next. Samples of the first
#    ``warmup`` runs are dropped; every other run counts (the engine's settling runs
#    too); each part's median is used.
# 3. Profiled sessions (after the timing): one more session per partition session, with
#    ONNX Runtime's profiler on and its optimized graph written out
#    (``enable_profiling``, ``optimized_model_filepath``; initializers to a side file),
#    run ``warmup`` + ``runs`` times on the captured inputs. One session serves all its
#    runs: its first run (the warm-up) is left out, so session creation and first-run
#    allocations never land in the medians. The profiler's own cost makes its runs
#    slower than the bare session's, so its kernel times are used as proportions of the
#    bare run time (``_attribute``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import onnx
import torch
import torch.fx

import ortlab.backend
from ortlab import errors
from ortlab.bench import _engine
from ortlab.profiling import _trace

if TYPE_CHECKING:
    import onnxruntime

    from ortlab.backend import OrtBackend, records

Clock = Callable[[], float]


@dataclasses.dataclass
class PartitionRun:
    """One partition's run in the captured call, and its measurements."""

    partition: records.PartitionRecord
    session: records.SessionRecord
    inputs: tuple[Any, ...]
    """The partition's inputs (its placeholders, in order)."""
    fed: tuple[Any, ...]
    """The inputs fed to the session (frozen parameters left out: they are initializers)."""
    module_samples: list[float] = dataclasses.field(default_factory=list)
    """The partition module's call inside the graph (glue + ONNX Runtime)."""
    bare_samples: list[float] = dataclasses.field(default_factory=list)
    trace: _trace.SessionTrace | None = None
    optimized: onnx.ModelProto | None = None
    note: str = ""
    bare: Any = None

    @property
    def key(self) -> tuple[int, str]:
        return (self.partition.graph_index, self.partition.name)


@dataclasses.dataclass
class GraphRun:
    """One graph's run in the captured call, and its nodes' measurements."""

    graph: records.GraphRecord
    inputs: tuple[Any, ...]
    partitions: list[PartitionRun] = dataclasses.field(default_factory=list)
    samples: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Node name -> its call's seconds (eager nodes, partition modules, other nodes)."""
    order: list[str] = dataclasses.field(default_factory=list)
    """Nodes that ran (call_function, call_method, call_module), in order."""
    ops: dict[str, str] = dataclasses.field(default_factory=dict)
    """Node name -> its ``op`` (``"call_module"``...)."""

    @property
    def module(self) -> torch.fx.GraphModule:
        g = self.graph
        return g.partitioned if g.partitioned is not None else g.graph_module


@dataclasses.dataclass
class Measured:
    """Everything timed for one profile (the inputs of ``_attribute``)."""

    call: list[float]
    entry: list[float]
    graph_runs: list[GraphRun]
    runs: int
    notes: list[str] = dataclasses.field(default_factory=list)


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else 0.0


# -- 1. capture ---------------------------------------------------------------------------


def _frame_args(frame: Any) -> tuple[Any, ...]:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount]
    values = [frame.f_locals[n] for n in names[1:]]  # after self
    if code.co_flags & inspect.CO_VARARGS:
        values.extend(frame.f_locals[code.co_varnames[code.co_argcount]])
    return tuple(values)


def capture(backend: OrtBackend, call: Callable[[], Any]) -> list[GraphRun]:
    """Runs ``call`` once, recording each graph run's inputs and each partition run's
    session and inputs (module NOTE, step 1)."""
    modules = {}
    for g in backend.graphs:
        gm = g.partitioned if g.partitioned is not None else g.graph_module
        modules[id(gm)] = (gm, g)
    seen: list[Any] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name != "forward":
            return
        found = modules.get(id(frame.f_locals.get("self")))
        if found is not None and frame.f_locals.get("self") is found[0]:
            seen.append(("graph", found[1], _frame_args(frame)))

    def observe(event: records.RunEvent) -> None:
        seen.append(("partition", event))

    remove = backend.add_observer(observe)
    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(previous)
        remove()
    runs: list[GraphRun] = []
    for item in seen:
        if item[0] == "graph":
            runs.append(GraphRun(item[1], item[2]))
        elif runs:
            event = item[1]
            frozen = set(event.session.frozen_inputs)
            fed = tuple(
                v
                for name, v in zip(event.partition.input_names, event.inputs)
                if name not in frozen
            )
            runs[-1].partitions.append(
                PartitionRun(event.partition, event.session, tuple(event.inputs), fed)
            )
    return runs


# -- 2. timing ----------------------------------------------------------------------------


class _TimedInterpreter(torch.fx.Interpreter):
    """Runs a graph node by node, timing each node's own call (arguments fetched first)."""

    def __init__(self, run: GraphRun, clock: Clock) -> None:
        super().__init__(run.module, garbage_collect_values=True)
        self.record = False
        self._run = run
        self._clock = clock
        self._partitions = {p.partition.name: p for p in run.partitions}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op not in ("call_function", "call_method", "call_module"):
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n.op == "call_module":
            fn = self.fetch_attr(str(n.target))
        elif n.op == "call_method":
            self_obj, *rest = args
            fn, args = getattr(self_obj, str(n.target)), tuple(rest)
        else:
            fn = n.target
        start = self._clock()
        out = fn(*args, **kwargs)
        elapsed = self._clock() - start
        if self.record:
            run = self._run
            if n.name not in run.samples:
                run.order.append(n.name)
                run.ops[n.name] = n.op
            run.samples.setdefault(n.name, []).append(elapsed)
        partition = self._partitions.get(str(n.target)) if n.op == "call_module" else None
        if partition is not None and partition.bare is not None:
            # Its session bare on the same inputs, right after: a pair with this call.
            start = self._clock()
            partition.bare.run(list(partition.fed))
            if self.record:
                partition.bare_samples.append(self._clock() - start)
        return out


def bare_session(backend: OrtBackend, run: PartitionRun) -> Any:
    """A session like the partition's, without the profiler (``create_session``)."""
    options = backend.options
    if options.ort_session_options is None and run.session.threads is not None:
        options = options.replace(intra_op_threads=run.session.threads)
    return ortlab.backend.create_session(
        run.session.model, like=list(run.fed), options=options, providers=run.session.providers
    )


def measure(
    call: Callable[[], Any],
    entry: Callable[[], Any] | None,
    graph_runs: list[GraphRun],
    backend: OrtBackend,
    *,
    runs: int,
    warmup: int,
    clock: Clock,
) -> Measured:
    """Times the call and its parts together (module NOTE, step 2)."""
    notes: list[str] = []
    interpreters = [_TimedInterpreter(r, clock) for r in graph_runs]
    partition_runs = [p for r in graph_runs for p in r.partitions]
    by_session: dict[int, Any] = {}
    for p in partition_runs:
        key = id(p.session)
        if key not in by_session:
            try:
                by_session[key] = bare_session(backend, p)
            except errors.OrtlabError as e:
                by_session[key] = None
                notes.append(f"{p.partition.name}: no bare session ({e})")
        p.bare = by_session[key]
    entry_samples: list[float] = []
    invocations = 0

    def graphs() -> None:
        # The graphs as the call runs them, then Dynamo's entry (a real call's entry
        # follows the previous call's graphs).
        nonlocal invocations
        invocations += 1
        record = invocations > warmup
        for interpreter, run in zip(interpreters, graph_runs):
            interpreter.record = record
            interpreter.run(*run.inputs)
        if entry is not None:
            start = clock()
            entry()
            if record:
                entry_samples.append(clock() - start)

    timing = _engine.Timing(
        warmup=warmup, iters=runs, min_time=0.0, min_iters=1, max_iters=max(runs, 1)
    )
    measured = _engine.measure({"call": call, "graphs": graphs}, timing, clock=clock)
    for m in measured.values():
        if m.error is not None:
            raise errors.OrtlabError(f"profiling failed: the {m.name} step raised {m.error}")
    for run in graph_runs:
        for p in run.partitions:
            p.module_samples = run.samples.get(_module_node(run, p.partition.name), [])
    for p in partition_runs:
        p.bare = None  # release the session
    return Measured(measured["call"].samples, entry_samples, graph_runs, runs, notes)


def _module_node(run: GraphRun, partition: str) -> str:
    """The name of the call_module node that runs ``partition`` in the graph."""
    for node in run.module.graph.nodes:
        if node.op == "call_module" and node.target == partition:
            return node.name
    return partition


# -- 3. profiled sessions -----------------------------------------------------------------


@contextlib.contextmanager
def _profiling_options(
    backend: OrtBackend, session: records.SessionRecord, directory: str
) -> Iterator[onnxruntime.SessionOptions]:
    """Session options like the partition's with ONNX Runtime's profiler on and its
    optimized graph written to ``directory`` (the user's own options are set for the
    time of the session's creation, then restored)."""
    given = backend.options.ort_session_options
    options = (
        given if given is not None else ortlab.backend.default_session_options(session.threads)
    )
    saved = (
        options.enable_profiling,
        options.profile_file_prefix,
        options.optimized_model_filepath,
    )
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(directory, "ort_profile")
    options.optimized_model_filepath = os.path.join(directory, "optimized.onnx")
    if given is None:
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "optimized.data"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
    try:
        yield options
    finally:
        if given is not None:
            (
                options.enable_profiling,
                options.profile_file_prefix,
                options.optimized_model_filepath,
            ) = saved


def profile_sessions(
    backend: OrtBackend, graph_runs: list[GraphRun], *, runs: int, warmup: int = 1
) -> None:
    """Runs each partition's model under ONNX Runtime's profiler (module NOTE, step 3);
    sets each :class:`PartitionRun`'s ``trace`` and ``optimized`` (or its ``note``)."""
    done: dict[int, tuple[Any, Any, str]] = {}
    for run in graph_runs:
        for p in run.partitions:
            key = id(p.session)
            if key not in done:
                done[key] = _profile_one(backend, p, runs=runs, warmup=warmup)
            p.trace, p.optimized, p.note = done[key]


def _profile_one(
    backend: OrtBackend, p: PartitionRun, *, runs: int, warmup: int
) -> tuple[_trace.SessionTrace | None, onnx.ModelProto | None, str]:
    session: Any = None
    with tempfile.TemporaryDirectory(prefix="ortlab_profile_") as directory:
        try:
            with _profiling_options(backend, p.session, directory) as options:
                session = ortlab.backend.create_session(
                    p.session.model,
                    like=list(p.fed),
                    options=backend.options.replace(ort_session_options=options),
                    providers=p.session.providers,
                )
            for _ in range(warmup + max(runs, 1)):
                session.run(list(p.fed))
            path = session.session.end_profiling()
            trace = _trace.load(path, skip=warmup)
            optimized = onnx.load(
                os.path.join(directory, "optimized.onnx"), load_external_data=False
            )
        except (errors.OrtlabError, OSError, ValueError) as e:
            return None, None, f"ONNX Runtime's profile of {p.partition.name} failed: {e}"
        finally:
            session = None  # released before its files are removed with the directory
    return trace, optimized, ""
