"""The runtime of one partition: its ONNX Runtime sessions per input schema, frozen
parameters, and the fall back to PyTorch.

# NOTE: each ``fused_*`` submodule of a partitioned graph is swapped for an
# :class:`OrtPartitionModule`, which keeps the original submodule as its eager fallback:
#
#   x -> fused_0 (ORT) -> custom_op -> fused_1 (ORT) -> out
#          |  first call per input schema: a session built by ``_build``'s steps
#          |  every call: the last runner whose schema matches, else find/build one
#          |  ONNX Runtime refuses it, or cannot run inputs PyTorch runs: split around
#          |    the refused nodes (``_split``), else the eager fused_0, error on the
#          |    PartitionRecord; inputs PyTorch refuses too: PyTorch's error, raised
#
# What a partition needs from its backend is a :class:`PartitionContext` (options,
# observers, the dumper, what was warned about), never the backend itself.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from ortlab import errors
from ortlab.backend import (
    _build,
    _cache,
    _dump,
    _export,
    _fusions,
    _options,
    _partition,
    _plugins,
    _runtime,
    _session,
    _split,
    _threads,
    _torch_private,
    records,
)

logger = logging.getLogger(__name__)

MAX_SESSIONS_PER_PARTITION = 8
"""Sessions kept per partition; the oldest is evicted (its record stays, inactive)."""

MAX_SESSION_RECORDS_PER_PARTITION = 2 * MAX_SESSIONS_PER_PARTITION
"""Session records kept per partition: beyond them the oldest inactive record is dropped
(with its ONNX model), counted in ``PartitionRecord.dropped_sessions``. A static model
called with 150 sequence lengths kept 150 records (32 MiB of models) for 8 sessions."""

FREEZE_CHANGE_LIMIT = 2
"""With ``freeze_parameters``, a frozen tensor that changes this many times is no longer
frozen: from then on it is passed as an input (each change costs an export)."""


@dataclasses.dataclass(frozen=True)
class PartitionContext:
    """What the partitions of one backend share with it: a narrow interface, so that the
    partition runtime never reaches into :class:`~ortlab.OrtBackend`."""

    options: _options.OrtBackendOptions
    observers: Sequence[Callable[[records.RunEvent], None]]
    """Called after every run in ONNX Runtime (a live list owned by the backend)."""
    dumper: _dump.ModelDumper
    """Writes exported models when a dump path is set."""
    registry: Callable[[], Any]
    """The exporter's op registry the partitions are translated with, built when first
    asked for (a first call whose sessions all come from the compile cache never does)."""
    translated: Any
    """The ops that registry translates (``_torch_private.TranslatedOps``): what the support
    rules ask, known without building it."""
    warned: set[str] = dataclasses.field(default_factory=set)
    """What was already warned about, once per backend: missing execution providers (by
    name), a dump path that cannot be written (``"dump_path"``)."""
    history: Callable[[records.PartitionRecord, records.SessionRecord | None, str], None] = (
        lambda partition, session, detail: None
    )
    """Told of each session created (``session``) and each fall back (``None``)."""
    split: Callable[[Split], None] = lambda split: None
    """Told of each partition split around the nodes ONNX Runtime refused (the backend
    updates the graph's records)."""
    cache: _cache.CompileCache | None = None
    """The compile cache (``OrtBackendOptions.compile_cache``), or ``None``."""
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    """Held while a partition of this backend finds or builds a session (export,
    session creation, splitting): two threads never build the same session twice."""


@dataclasses.dataclass(frozen=True)
class Split:
    """A partition split around the nodes ONNX Runtime refused (see ``_split``)."""

    parent: records.PartitionRecord
    graph_module: torch.fx.GraphModule
    """The parent's graph with the parts that run in ONNX Runtime fused into
    submodules named as their records, and the refused nodes as plain nodes."""
    children: tuple[records.PartitionRecord, ...]
    refused: dict[str, str]
    """Node name (with the ``getitem``s of refused nodes) -> why ONNX Runtime refused it."""
    cause: str
    """What went wrong with the whole partition."""


class OrtPartitionModule:
    """Runs one ``fused_*`` partition in ONNX Runtime, or eagerly when it must.

    Deliberately not an ``nn.Module``: the partitioned GraphModule calls it as
    ``self.fused_0(...)`` and a plain ``__call__`` skips ``Module._call_impl`` (hooks,
    tracing checks), which measured as a large share of the glue around a small model.
    """

    def __init__(
        self,
        eager: torch.fx.GraphModule,
        record: records.PartitionRecord,
        context: PartitionContext,
        *,
        check_requires_grad: bool,
        allow_freeze: bool,
    ) -> None:
        self.eager = eager
        self.record = record
        self._context = context
        self._check_requires_grad = check_requires_grad
        self._allow_freeze = allow_freeze
        # Live sessions, oldest first; each runner carries its SessionRecord.
        self._runners: list[_runtime.OrtRunner] = []
        self._last: _runtime.OrtRunner | None = None
        self._failed = False
        # Once ONNX Runtime refused some of its nodes: the partition split around them
        # (parts in ONNX Runtime, the refused nodes in PyTorch), which every call runs.
        self._split_graph: torch.fx.GraphModule | None = None
        # Frozen placeholder position -> times its tensor changed after being frozen;
        # FREEZE_CHANGE_LIMIT changes thaw it (it is passed as an input from then on).
        self._freeze_changes: dict[int, int] = {}
        placeholders = [n for n in eager.graph.nodes if n.op == "placeholder"]
        self._input_fx_values = tuple(n.meta.get("val") for n in placeholders)
        self._output_fx_values, self._single = _export.fx_output_values(eager)

    def __call__(self, *args: Any) -> Any:
        if self._split_graph is not None:
            return self._split_graph(*args)
        if self._failed or (
            self._check_requires_grad
            and torch.is_grad_enabled()
            and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        ):
            self.record.eager_run_count += 1
            return self.eager(*args)
        runner = self._last
        if runner is None or not runner.matches(args):
            runner = self._find_or_create(args)
            if runner is None:
                if self._split_graph is not None:
                    return self._split_graph(*args)
                self.record.eager_run_count += 1
                return self.eager(*args)
        start = time.perf_counter()
        try:
            try:
                outputs = runner.run(args)
            except Exception as e:
                if not runner.fused:
                    raise
                # A symbolic fused model can fail on sizes it was not checked at.
                runner = self._unfused_instead(runner, args, e)
                start = time.perf_counter()
                outputs = runner.run(args)
        except Exception as e:
            return self._after_run_error(args, e)
        took = time.perf_counter() - start
        session_record = runner.record
        if session_record.run_count == 0:
            session_record.timings["first_run"] = took
        if runner.regrow is not None and took >= _threads.REGROW_AFTER_SECONDS:
            self._regrow(runner, took)
        session_record.run_count += 1
        self.record.run_count += 1
        if runner.keep_last_inputs:
            session_record.last_inputs = tuple(runner.last_inputs)
            session_record.last_outputs = tuple(outputs)
        observers = self._context.observers
        if observers:
            event = records.RunEvent(self.record, session_record, tuple(args), tuple(outputs))
            for observer in tuple(observers):
                observer(event)
        return outputs[0] if self._single else tuple(outputs)

    # -- sessions ------------------------------------------------------------------
    def _find_or_create(self, args: Sequence[Any]) -> _runtime.OrtRunner | None:
        """The runner for these arguments' schema, made when there is none; ``None``
        when the partition runs without one from now on (in PyTorch, or split)."""
        with self._context.lock:
            if self._split_graph is not None or self._failed:
                return None
            for runner in self._runners:
                if runner.matches(args):
                    self._last = runner
                    return runner
            self._retire_stale(args)
            try:
                runner = self._create(args)
            except Exception as e:
                # A first run on inputs PyTorch rejects too (an index out of range) is
                # the inputs' error: PyTorch's is raised, and the partition stays.
                self.eager(*args)
                self._split_or_fail(args, errors.describe(e), e)
                return None
            if len(self._runners) >= MAX_SESSIONS_PER_PARTITION:
                self._runners.pop(0).record.active = False
            self._runners.append(runner)
            self._last = runner
            return runner

    def _after_run_error(self, args: Sequence[Any], error: Exception) -> Any:
        """ONNX Runtime could not run these arguments. When PyTorch cannot either, the
        error is the inputs' (an index out of range...): PyTorch's error is raised, as
        eager raises it, and the partition stays in ONNX Runtime. Otherwise ONNX Runtime
        is at fault: the partition is split around the nodes it refuses (or runs in
        PyTorch), and this call's result is PyTorch's."""
        result = self.eager(*args)  # raises the user's error, as eager would
        with self._context.lock:
            if self._split_graph is None and not self._failed:
                self._split_or_fail(
                    args, f"ONNX Runtime run failed: {errors.describe(error)}", error
                )
        self.record.eager_run_count += 1
        return result

    def _split_or_fail(self, args: Sequence[Any], message: str, error: Exception) -> None:
        """Splits the partition around the nodes ONNX Runtime refuses (see ``_split``);
        when the refusal cannot be pinned on nodes, the partition runs in PyTorch."""
        if self._context.options.strict:
            self._fail(message, error)  # raises CompileError
        try:
            search = _split.find_refused(
                self.eager, args, self._trial, suspect=_split.named_node(error)
            )
        except Exception as e:  # the partition does not run in PyTorch either
            logger.debug("could not search %s for refused nodes", self.record, exc_info=True)
            self._fail(f"{message} (no split: {errors.describe(e)})", error)
            return
        if not search.refused:
            self._fail(f"{message} (no split: {search.note})", error)
            return
        if all(
            n.name in search.refused
            for n in self.eager.graph.nodes
            if n.op == "call_function" and n.target is not operator.getitem
        ):
            self._fail(message, error)  # every node refused: nothing left to split off
            return
        self._split_around(search, message)

    def _trial(self, part: torch.fx.GraphModule, args: Sequence[Any]) -> None:
        """Exports ``part`` of this partition, makes its session and runs it once on
        ``args`` as the partition's own sessions would (no fusions); raises when any
        step fails."""
        options = self._context.options
        exported = _export.export_partition(
            part,
            name=f"{self.record.name}_part",
            args=args,
            static=options.dynamic_shapes is False,
            frozen={},
            transforms=options.pre_ort_model_transforms or (),
            opset_version=options.opset_version,
            registry=self._context.registry(),
            custom_translations=tuple(options.custom_translations or ()),
            fuse=False,
        )
        session = _session.create_session(
            exported.proto.SerializeToString(),
            self._providers(args),
            options.ort_session_options or _session.trial_session_options(1),
            1,
        )
        inputs = tuple(n.meta.get("val") for n in part.graph.nodes if n.op == "placeholder")
        runner = _runtime.OrtRunner(
            session,
            exported.proto,
            input_fx_values=inputs,
            output_fx_values=_export.fx_output_values(part)[0],
            args=args,
            frozen={},
            preallocate_output=False,
            guaranteed=False,
        )
        runner.run(args)

    def _split_around(self, search: _split.Search, cause: str) -> None:
        """Re-partitions this partition without the refused nodes; every later call runs
        the result (its parts in ONNX Runtime)."""
        refused = dict(search.refused)
        for selection, producer in _split.selections_of(self.eager, list(refused)).items():
            refused[selection] = refused[producer]
        work = _export.copy_graph_module(self.eager)
        result = _partition.partition_graph(work, _NotRefused(refused), min_size=1)
        split_graph = result.graph_module
        children = []
        for index, (name, node_names) in enumerate(result.members):
            record = records.PartitionRecord(
                name=f"{self.record.name}_{index}",
                graph_index=self.record.graph_index,
                graph_kind=self.record.graph_kind,
                graph_module=getattr(split_graph, name),
                node_names=node_names,
                split_from=self.record.name,
            )
            module = OrtPartitionModule(
                record.graph_module,
                record,
                self._context,
                check_requires_grad=self._check_requires_grad,
                allow_freeze=self._allow_freeze,
            )
            delattr(split_graph, name)
            setattr(split_graph, record.name, module)
            for node in split_graph.graph.nodes:
                if node.op == "call_module" and node.target == name:
                    node.target = record.name
            children.append(record)
        split_graph.recompile()
        self.clear_sessions()
        self._split_graph = split_graph
        kept = len(self.record.node_names) - len(refused)
        self.record.error = (
            f"split: ONNX Runtime refused {len(search.refused)} node(s) "
            f"({', '.join(sorted(search.refused))}); {kept} node(s) run in ONNX Runtime in "
            f"{len(children)} partition(s) ({search.trials} trials, {search.seconds:.1f} s). "
            f"First: {cause}"
        )
        self._context.split(Split(self.record, split_graph, tuple(children), refused, cause))
        first = next(iter(search.refused.items()))
        warnings.warn(
            f"ortlab: partition {self.record.name} of {self.record.graph_kind} graph "
            f"{self.record.graph_index}: ONNX Runtime refused {len(search.refused)} of its "
            f"nodes (node {first[0]}: {first[1]}); they run in PyTorch and the other "
            f"{kept} node(s) in ONNX Runtime, in {len(children)} partition(s). The reasons "
            "are on the nodes' verdicts.",
            errors.FallbackWarning,
            stacklevel=4,
        )

    def _providers(self, args: Sequence[Any]) -> list[_session.Provider]:
        """The execution providers for a session of these arguments (see ``_session``)."""
        options = self._context.options
        inferred: tuple[str, ...] = ()
        if options.infer_execution_providers:
            inferred = _session.infer_providers_from_values(args) or (
                _session.infer_providers_from_values(self._output_fx_values)
            )
        return _session.select_providers(
            preferred=options.preferred_execution_providers,  # type: ignore[arg-type]
            inferred=inferred,
            default=options.default_execution_providers,  # type: ignore[arg-type]
            available=_session.available_providers(),
            warned=self._context.warned,
        )

    def _frozen(self, args: Sequence[Any]) -> dict[int, torch.Tensor]:
        if not (self._allow_freeze and self._context.options.freeze_parameters):
            return {}
        return {
            i: a
            for i, a in enumerate(args)
            if self._freeze_changes.get(i, 0) < FREEZE_CHANGE_LIMIT
            and _torch_private.is_module_state(a)
        }

    def _retire_stale(self, args: Sequence[Any]) -> None:
        """Drops sessions whose frozen tensors changed in place or were replaced by the
        tensors of this call (they can never match again), counting each change; a
        position that reached FREEZE_CHANGE_LIMIT changes is thawed (passed as input)."""
        keep = []
        for runner in self._runners:
            changed = runner.stale_frozen(args)
            if not changed:
                keep.append(runner)
                continue
            runner.record.active = False
            for index in changed:
                count = self._freeze_changes[index] = self._freeze_changes.get(index, 0) + 1
                if count == FREEZE_CHANGE_LIMIT:
                    self._thaw(index)
        self._runners = keep
        self._last = None

    def _thaw(self, index: int) -> None:
        name = self.record.input_names[index]
        self.record.thawed_inputs = (*self.record.thawed_inputs, name)
        warnings.warn(
            f"ortlab: partition {self.record.name} of {self.record.graph_kind} graph "
            f"{self.record.graph_index}: input {name!r} changed {FREEZE_CHANGE_LIMIT} times "
            "after being frozen, so it is passed as an input from now on instead of being "
            "re-exported on every change (freeze_parameters pays off for weights that stay "
            "fixed).",
            RuntimeWarning,
            stacklevel=4,
        )

    def _create(self, args: Sequence[Any], *, fuse: bool | None = None) -> _runtime.OrtRunner:
        """A runner for these arguments' schema, complete when built (``_build``): the
        model exported (and fused, for an inference graph, as ``ort_fusions`` says, unless
        ``fuse=False``), its session, its first runs; the record is kept.

        Raises:
            Exception: the export failed, or ONNX Runtime refused or could not run the
                model (the caller splits the partition).
        """
        options = self._context.options
        providers = self._providers(args)
        if fuse is None:
            fuse = options.ort_fusions if self._allow_freeze else False
        if _plugins.is_plugin(providers[0][0]):
            fuse = False  # ONNX Runtime's fused operators would run on its CPU provider
        frozen = self._frozen(args)
        if frozen:
            _say_which_writes_frozen_weights_see()
        built = _build.build_partition_session(
            _build.Request(
                eager=self.eager,
                record=self.record,
                options=options,
                registry=self._context.registry,
                dumper=self._context.dumper,
                warned=self._context.warned,
                args=args,
                frozen=frozen,
                input_fx_values=self._input_fx_values,
                output_fx_values=self._output_fx_values,
                single=self._single,
                providers=providers,
                fuse=fuse,
                # pre_ort_model_transforms edit the model as translated: the optimizer
                # would fold the constants and nodes they look for.
                optimize=self._allow_freeze and not options.pre_ort_model_transforms,
                keep_last_run=self._allow_freeze and options.keep_last_run,
                cache=self._context.cache,
            )
        )
        record = self.record
        record.sessions.append(built.record)
        _bound_records(record)
        self._context.history(record, built.record, ", ".join(built.record.input_schema))
        return built.runner

    def _unfused_instead(
        self, runner: _runtime.OrtRunner, args: Sequence[Any], error: Exception
    ) -> _runtime.OrtRunner:
        """The unfused model's runner for these arguments, in place of ``runner``, a fused
        model ONNX Runtime could not run on them (its record says so, and stays)."""
        runs = runner.record.run_count
        runner.record.active = False
        self._runners = [r for r in self._runners if r is not runner]
        replacement = self._create(args, fuse=False)
        replacement.record.fusion_note = (
            f"{_fusions.fallback_note(error)} (from run {runs + 1} on, in place of "
            f"session {runner.record.index})"
        )
        self._runners.append(replacement)
        self._last = replacement
        return replacement

    def _regrow(self, runner: _runtime.OrtRunner, took: float) -> None:
        """Replaces a one-thread session whose run grew long by the same session with
        more threads (see ``_threads``); on failure the one-thread session stays."""
        assert runner.regrow is not None
        make, runner.regrow = runner.regrow, None
        try:
            grown = make()
        except Exception:
            logger.debug("could not regrow %s", runner.record, exc_info=True)
            return
        record = runner.record
        grown.record, grown.keep_last_inputs = record, runner.keep_last_inputs
        self._runners = [grown if r is runner else r for r in self._runners]
        if self._last is runner:
            self._last = grown
        record.threads = grown.session.get_session_options().intra_op_num_threads
        record.threads_note = (record.threads_note or "") + (
            f"; {record.threads} threads from run {record.run_count + 1} on: a run took "
            f"{took * 1e3:.1f} ms"
        )

    def _fail(self, message: str, error: Exception) -> None:
        where = (
            f"partition {self.record.name} of {self.record.graph_kind} graph "
            f"{self.record.graph_index}"
        )
        if self._context.options.strict:
            raise errors.CompileError(
                f"ortlab (strict=True): {where} failed: {message}. Without strict=True it "
                "would run in PyTorch, with this error on its PartitionRecord."
            ) from error
        self._failed = True
        self.record.error = message
        self._context.history(self.record, None, message)
        self.clear_sessions()
        warnings.warn(
            f"ortlab: {where} runs in PyTorch instead of ONNX Runtime: {message}",
            errors.FallbackWarning,
            stacklevel=3,
        )

    def clear_sessions(self) -> None:
        """Drops every session (they are re-created on the next call)."""
        for runner in self._runners:
            runner.record.active = False
        self._runners.clear()
        self._last = None


@functools.cache
def _say_which_writes_frozen_weights_see() -> None:
    """Once per process, at the first model with frozen weights: which writes to them a
    frozen session sees and which it cannot (it would give stale results)."""
    warnings.warn(
        "ortlab: freeze_parameters=True bakes parameters and buffers into the ONNX "
        "models. A frozen session is rebuilt when a weight is written in a way PyTorch "
        "counts (in place: p.add_(...), optimizer.step(); replaced: module.weight = ...; "
        "p.data = ...). It cannot see writes PyTorch does not count: in place through "
        ".data (p.data.mul_(...)) or a NumPy view (p.detach().numpy()[...] = ...). After "
        "such a write call backend.clear_sessions(), or leave freeze_parameters off; "
        "ortlab.diff flags a frozen session whose weights no longer match the module.",
        RuntimeWarning,
        stacklevel=6,
    )


def _bound_records(record: records.PartitionRecord) -> None:
    """Drops the oldest inactive session records beyond the bound."""
    while len(record.sessions) > MAX_SESSION_RECORDS_PER_PARTITION:
        oldest = next((s for s in record.sessions if not s.active), None)
        if oldest is None:
            return
        record.sessions.remove(oldest)
        record.dropped_sessions += 1


class _NotRefused(OperatorSupportBase):
    """Every computing node of a partition but the refused ones (see ``_split``)."""

    def __init__(self, refused: Mapping[str, str]) -> None:
        super().__init__()
        self._refused = refused

    def is_node_supported(
        self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node
    ) -> bool:
        return node.op == "call_function" and node.name not in self._refused
