"""OrtBackend: the ``"ortlab"`` torch.compile backend, its instance cache and registration.

# NOTE: the path of one graph (never an exception out of torch.compile because of
# ortlab; each fall back is recorded and warned about once):
#
#   Dynamo FX graph
#     -> lowering to ATen: the strategies of ``_lowering`` (make_fx, AOTAutograd, eager),
#        tried in order; AOTAutograd calls ``_compile_boxed`` per graph it makes
#        (forward / backward / inference), whose failure runs that ATen graph eagerly
#     -> FX rewrites for ONNX -> verdicts (``_support.RULES``) -> CapabilityBasedPartitioner
#     -> fused_* -> OrtPartitionModule (``_executor``) -> GraphRecord appended to
#        backend.graphs
#
# Sessions are created lazily, on a partition's first call with a new input schema.
# ``OrtBackendOptions(strict=True)`` raises ``CompileError`` instead of falling back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import torch
import torch.fx

from ortlab import errors
from ortlab.backend import (
    _cache,
    _capture,
    _dump,
    _executor,
    _export,
    _lowering,
    _nan,
    _options,
    _partition,
    _precision,
    _rewrites,
    _rng,
    _scalars,
    _sizes,
    _source,
    _support,
    _torch_private,
    records,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Origin:
    """What is known about a Dynamo graph before ortlab lowers it; attached to every
    GraphRecord made from it (the forward, its backward, or an eager fallback)."""

    info: _torch_private.DynamoGraphInfo
    registry_seconds: float = 0.0
    fallback: str | None = None
    """What the lowering fell back from, and why (``GraphRecord.fallback``)."""
    lower_mark: float | None = None
    """perf_counter() when the lowering of the next graph of this compile started."""
    first: bool = True
    """No GraphRecord made from this origin yet (Dynamo's and the registry's time go on
    the first one)."""

    def graph_fields(
        self, graph_module: torch.fx.GraphModule, kind: records.GraphKind
    ) -> dict[str, Any]:
        """GraphRecord fields saying where the graph came from."""
        info = self.info
        # The frame Dynamo compiled, unless it is a wrapper (Dynamo's around a torch
        # module such as Sequential, the lab's entry points): then the outermost frame of
        # the user's code in the graph's node stack traces; for a graph of torch modules
        # alone, the outermost module.
        stack = list(info.user_stack)
        if (
            not stack
            or not _source.is_users_file(stack[0][0])
            or _source.is_decorator_wrapper(stack[0])
        ):
            stack = _source.outer_frames(graph_module) or stack
        # A decorator's wrapper (transformers' ``@can_return_tuple``: every model read
        # "wrapper (transformers/utils/generic.py)") is named by the function it calls.
        while len(stack) > 1 and _source.is_decorator_wrapper(stack[0]):
            stack = stack[1:]
        frame = ""
        if stack and not _source.is_dynamo_file(stack[0][0]):
            file, _, name, _ = stack[0]
            frame = f"{_source.function_name(name)} ({_source.short_path(file)})"
        else:  # only torch modules ran (e.g. a Sequential): name the outermost one
            frame = _source.outer_module(graph_module)
        break_source = ""
        if info.graph_break and info.user_stack:
            break_source = _line_text(info.user_stack[-1])
            if info.break_stack:  # the break is inside a function that line calls
                break_source = (
                    f"{_line_text(info.break_stack[-1])} (called from {break_source})"
                )
        return {
            "compile_id": info.compile_id,
            "frame": frame,
            "recompile_reason": info.recompile_reason,
            "graph_break": info.end_reason if info.graph_break else None,
            "graph_break_source": break_source,
            "fallback": self.fallback,
            "input_sources": _input_sources(graph_module, kind, info.input_sources),
        }

    def first_timings(self) -> dict[str, float]:
        """The steps paid once per Dynamo graph, for its first GraphRecord."""
        if not self.first:
            return {}
        self.first = False
        timings = {}
        if self.info.seconds_in_dynamo is not None:
            timings["dynamo"] = self.info.seconds_in_dynamo
        if self.registry_seconds:
            timings["registry"] = self.registry_seconds
        return timings


def _line_text(frame: tuple[str, int, str, str]) -> str:
    """``"model.py:14: print(x)"`` for a ``(file, line, function, source)`` frame."""
    file, line, _, code = frame
    text = f"{_source.short_path(file)}:{line}"
    return f"{text}: {code}" if code else text


def _input_sources(
    graph_module: torch.fx.GraphModule,
    kind: records.GraphKind,
    sources: Sequence[str | None],
) -> dict[str, str]:
    """Placeholder name -> where Dynamo took that input from (``GraphRecord.input_sources``).

    An inference or forward graph takes Dynamo's inputs in their order (AOTAutograd's
    ``primals_*``, make_fx's ``arg*_1``); a backward graph takes saved values: none.
    """
    if kind == "backward":
        return {}
    placeholders = [n.name for n in graph_module.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(sources):
        return {}
    return {p: s for p, s in zip(placeholders, sources) if s}


class OrtBackend:
    """A torch.compile backend that runs ONNX-exportable subgraphs in ONNX Runtime.

    Use an instance as the backend to keep access to its records::

        backend = OrtBackend(OrtBackendOptions(...))
        compiled = torch.compile(model, backend=backend)
        compiled(x)
        backend.graphs, backend.partitions, backend.execution_count

    Or pass ``backend="ortlab"`` (an instance shared by equal options is used).
    """

    _instance_cache_max_count: ClassVar[int] = 8
    _instance_cache: ClassVar[list[OrtBackend]] = []

    def __init__(
        self, options: _options.OrtBackendOptions | Mapping[str, Any] | None = None
    ) -> None:
        self._options = _options.OrtBackendOptions.from_value(options)
        self.graphs: list[records.GraphRecord] = []
        """Every graph compiled, in compile order."""
        self._modules: list[_executor.OrtPartitionModule] = []
        self._warned_static = False
        self._observers: list[Callable[[records.RunEvent], None]] = []
        self._context: _executor.PartitionContext | None = None
        self.timeline: list[records.TimelineEvent] = []
        """Graphs compiled, sessions created and fall backs, in order (each stamped with
        the number of graph runs before it)."""
        self.notes: list[str] = []
        """What ortlab saw about how the compiled callable is used that costs the user
        its compilation (each once), e.g. :data:`GENERATE_NOTE`."""

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy (deepcopy, pickle) of a backend, or of a model compiled with it, is a
        new backend with the same options, which compiles anew."""
        return (type(self), (self._options,))

    # -- public --------------------------------------------------------------------
    @property
    def options(self) -> _options.OrtBackendOptions:
        return self._options

    @property
    def execution_count(self) -> int:
        """Partition executions in ONNX Runtime so far."""
        return sum(p.run_count for p in self.partitions)

    @property
    def partitions(self) -> list[records.PartitionRecord]:
        """Every partition across all graphs, in creation order."""
        return [p for g in self.graphs for p in g.partitions]

    @property
    def sessions(self) -> list[records.SessionRecord]:
        return [s for p in self.partitions for s in p.sessions]

    def __call__(
        self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Any:
        """Dynamo backend entry point: never raises because of ortlab (unless
        ``strict=True``); what could not be compiled runs eagerly, with its record."""
        if _torch_private.under_aot_capture():  # a result that saves itself (see _capture)
            return _capture.capture(self, graph_module, example_inputs, self._options)
        origin = _Origin(_torch_private.dynamo_graph_info(graph_module))
        return _lowering.lower(self, graph_module, example_inputs, origin)

    def compile(
        self,
        graph_module: torch.fx.GraphModule,
        example_inputs: Sequence[Any] = (),
        *,
        kind: records.GraphKind = "inference",
        check_requires_grad: bool = False,
        keep_input_aliases: bool = False,
        alias_outputs: range | None = None,
        lowering: records.Lowering = "aot_autograd",
        lower_seconds: float | None = None,
        origin_fields: Mapping[str, Any] | None = None,
        timings: Mapping[str, float] | None = None,
    ) -> torch.fx.GraphModule:
        """Partitions an ATen-level graph; returns it with ``fused_*`` run by ORT.

        Args:
            kind: ``"inference"``, ``"forward"`` or ``"backward"`` (for the records).
            check_requires_grad: Run partitions eagerly when an input requires grad and
                grad mode is on (graphs lowered without AOTAutograd).
            keep_input_aliases: Keep view chains from graph inputs to graph outputs in
                PyTorch, so those outputs still alias their inputs with the input's
                strides and offset (graphs lowered without AOTAutograd need it, and so do
                AOTAutograd's forward graphs: it regenerates such outputs with
                ``as_strided`` from the compiled output's strides under dynamic shapes).
            alias_outputs: The output positions that ``keep_input_aliases`` applies to
                (``None``: all; AOTAutograd's user outputs, not the tensors it saves for
                the backward, such as a weight's transpose).
            lowering: How the graph was lowered to ATen (for the records).
            lower_seconds: How long that took (``timings["lower"]``), when known.
            origin_fields: ``GraphRecord`` fields saying where the graph came from.
            timings: Earlier steps' seconds for ``GraphRecord.timings`` (Dynamo's trace,
                the registry).
        """
        start = time.perf_counter()
        context = self._partition_context()
        if _sizes.reads_intermediate_sizes(graph_module):
            # Size arithmetic from the inputs, not from intermediates (see _sizes).
            graph_module = _export.copy_graph_module(graph_module)
            _sizes.sizes_from_inputs(graph_module)
        # Random draws made first, so that they do not cut the graph (see _rng).
        graph_module = _rng.draws_first(graph_module)
        # Ops whose translation is wrong on some inputs, rewritten first (see _rewrites).
        graph_module = _rewrites.for_onnx(graph_module)
        graph_module = _scalars.for_onnx(graph_module)
        # NaN through max-like ops as PyTorch propagates it (see _nan).
        graph_module = _nan.for_onnx(graph_module)
        # Narrow floats on CPU computed in float32 where ONNX Runtime has no kernel.
        graph_module = _precision.for_onnx(graph_module, context.translated.is_registered)
        # The partitioner rewrites the graph in place: work on a copy so the record keeps
        # the graph exactly as received.
        work = _export.copy_graph_module(graph_module)
        support = _support.OrtOperatorSupport(
            _support.Facts(
                registry=context.translated,
                excluded_ops=tuple(self._options.excluded_ops),
                input_aliases=(
                    _support.input_alias_outputs(
                        work, alias_outputs, inference=kind == "inference"
                    )
                    if keep_input_aliases
                    else {}
                ),
                storage_readers=_rewrites.storage_readers_kept_in_pytorch(work),
                min_partition_size=self._options.min_partition_size,
                custom_ops=frozenset(op for op, _ in self._options.custom_translations or ()),
            )
        )
        verdicts = [support.verdict(n) for n in work.graph.nodes if n.op == "call_function"]
        support_seconds = time.perf_counter() - start
        start = time.perf_counter()
        result = _partition.partition_graph(
            work, support, min_size=self._options.min_partition_size
        )
        verdicts = support.after_partitioning(verdicts, result.too_small)
        partitioned = result.graph_module
        record = self._new_record(
            graph_module, kind, lowering, partitioned, verdicts, origin_fields or {}
        )
        modules = []
        for name, node_names in result.members:
            eager = getattr(partitioned, name)
            part = records.PartitionRecord(
                name=name,
                graph_index=record.index,
                graph_kind=kind,
                graph_module=eager,
                node_names=node_names,
            )
            module = _executor.OrtPartitionModule(
                eager,
                part,
                context,
                check_requires_grad=check_requires_grad,
                allow_freeze=kind == "inference",
            )
            # Swap the fused submodule for the callable (see OrtPartitionModule).
            delattr(partitioned, name)
            setattr(partitioned, name, module)
            modules.append(module)
            record.partitions.append(part)
        record.timings.update(timings or {})
        if lower_seconds is not None:
            record.timings["lower"] = lower_seconds
        record.timings["support"] = support_seconds
        record.timings["partition"] = time.perf_counter() - start
        self._modules.extend(modules)
        self._add_graph(record)
        self._check_static(graph_module)
        logger.debug("compiled %r", record)
        return partitioned

    def add_observer(self, callback: Callable[[records.RunEvent], None]) -> Callable[[], None]:
        """Calls ``callback(RunEvent)`` after every partition run in ONNX Runtime.

        The numerics tools use this to see exactly what ORT received and returned.
        Returns a function that removes the observer.
        """
        self._observers.append(callback)

        def remove() -> None:
            if callback in self._observers:
                self._observers.remove(callback)

        return remove

    def clear_sessions(self) -> None:
        """Drops every ONNX Runtime session; they are re-created on the next call."""
        for module in self._modules:
            module.clear_sessions()

    def reset(self) -> None:
        """Releases every ONNX Runtime session and partition runtime of this backend.

        ``torch._dynamo.reset()`` calls it (Dynamo resets the backends it compiled with):
        the compiled graphs that ran those sessions are gone then. The records stay for
        as long as the backend is held (``backend.graphs``...); a backend nobody holds
        (``backend="ortlab"``'s shared instances are dropped from their cache at the same
        time) is freed with its records and ONNX models.
        """
        self.clear_sessions()
        self._modules.clear()
        self._context = None

    def summary(self) -> dict[str, Any]:
        """Counters over all records (for tables and one-line verdicts)."""
        nodes = sum(g.node_count for g in self.graphs)
        in_ort = sum(len(g.ort_node_names) for g in self.graphs)
        return {
            "graphs": len(self.graphs),
            "partitions": len(self.partitions),
            "sessions": len(self.sessions),
            "nodes": nodes,
            "nodes_in_ort": in_ort,
            "nodes_eager": nodes - in_ort,
            "executions": self.execution_count,
            "failed_partitions": sum(1 for p in self.partitions if p.error),
            "failed_graphs": sum(1 for g in self.graphs if g.error),
        }

    def compile_timings(self) -> dict[str, float]:
        """Seconds spent per compile step, summed over every graph and session."""
        totals = dict.fromkeys(records.TIMING_STEPS, 0.0)
        for g in self.graphs:
            for k, v in g.timings.items():
                totals[k] = totals.get(k, 0.0) + v
        for s in self.sessions:
            for k, v in s.timings.items():
                totals[k] = totals.get(k, 0.0) + v
        return totals

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"OrtBackend(graphs={s['graphs']}, partitions={s['partitions']}, "
            f"sessions={s['sessions']}, nodes_in_ort={s['nodes_in_ort']}/{s['nodes']}, "
            f"executions={s['executions']})"
        )

    def _repr_html_(self) -> str:
        from ortlab import _html

        s = self.summary()
        head = _html.table(tuple(s), [tuple(s.values())])
        return _html.block(
            "ortlab backend", head + "".join(g._repr_html_() for g in self.graphs)
        )

    # -- instance cache ------------------------------------------------------------
    @staticmethod
    def get_cached_instance_for_options(
        options: _options.OrtBackendOptions | Mapping[str, Any] | None = None,
    ) -> OrtBackend:
        """The shared backend for these options (equal options -> same instance).

        Options holding an ``onnxruntime.SessionOptions`` are never shared (it cannot be
        compared). At most 8 instances are kept; the oldest is evicted.
        """
        resolved = _options.OrtBackendOptions.from_value(options)
        cache = OrtBackend._instance_cache
        if resolved.ort_session_options is None:
            for backend in cache:
                if backend._options == resolved:
                    return backend
        backend = OrtBackend(resolved)
        if len(cache) >= OrtBackend._instance_cache_max_count:
            cache.pop(0)
        cache.append(backend)
        return backend

    @staticmethod
    def clear_cached_instances() -> None:
        """Resets every shared instance (see :meth:`reset`) and forgets them."""
        for backend in OrtBackend._instance_cache:
            backend.reset()
        OrtBackend._instance_cache.clear()

    @staticmethod
    def get_cached_instances() -> tuple[OrtBackend, ...]:
        return tuple(OrtBackend._instance_cache)

    # -- internals -----------------------------------------------------------------
    def _warm_up(self) -> float:
        """:func:`warm_up` for this backend's opset, with the translated ops' names read
        from (or written to) its compile cache."""
        return warm_up(
            self._options.opset_version, _cache.open_cache(self._options.compile_cache)
        )

    def _partition_context(self) -> _executor.PartitionContext:
        if self._context is None:
            options = self._options
            translations = tuple(options.custom_translations or ())  # (op, function) pairs
            self._context = _executor.PartitionContext(
                options=options,
                observers=self._observers,
                dumper=_dump.ModelDumper(),
                registry=functools.cache(
                    functools.partial(
                        _torch_private.registry_with, options.opset_version, translations
                    )
                ),
                translated=_torch_private.translated_ops_with(
                    options.opset_version, translations
                ),
                history=self._partition_event,
                split=self._partition_split,
                cache=_cache.open_cache(options.compile_cache),
            )
        return self._context

    def _new_record(
        self,
        graph_module: torch.fx.GraphModule,
        kind: records.GraphKind,
        lowering: records.Lowering,
        partitioned: torch.fx.GraphModule | None,
        verdicts: list[records.Verdict],
        fields: Mapping[str, Any],
    ) -> records.GraphRecord:
        record = records.GraphRecord(
            index=len(self.graphs),
            kind=kind,
            graph_module=graph_module,
            lowering=lowering,
            partitioned=partitioned,
            verdicts=verdicts,
            **dict(fields),
        )
        if record.compile_id is None:
            record.compile_id = _torch_private.current_compile_id()
        return record

    def _graph_runs(self) -> int:
        return sum(g.run_count for g in self.graphs)

    def _add_graph(self, record: records.GraphRecord) -> None:
        self.graphs.append(record)
        detail = record.cause + (f" (runs in PyTorch: {record.error})" if record.error else "")
        self.timeline.append(
            records.TimelineEvent("graph", self._graph_runs() + 1, record.index, detail=detail)
        )

    def _partition_event(
        self,
        partition: records.PartitionRecord,
        session: records.SessionRecord | None,
        detail: str,
    ) -> None:
        self.timeline.append(
            records.TimelineEvent(
                "session" if session is not None else "fallback",
                self._graph_runs(),
                partition.graph_index,
                partition_name=partition.name,
                session_index=None if session is None else session.index,
                detail=detail,
            )
        )

    def _partition_split(self, split: _executor.Split) -> None:
        """Records a partition split around nodes ONNX Runtime refused: its parts take
        its place in the graph's records, the refused nodes' verdicts say why."""
        parent = split.parent
        graph = self.graphs[parent.graph_index]
        position = graph.partitions.index(parent)
        graph.partitions[position : position + 1] = list(split.children)
        graph.split_partitions.append(parent)
        graph.verdicts = _support.refused(graph.verdicts, split.refused)
        if graph.partitioned is not None:
            _partition.inline_split(graph.partitioned, parent.name, split.graph_module)
        parts = ", ".join(child.name for child in split.children)
        self.timeline.append(
            records.TimelineEvent(
                "split",
                self._graph_runs(),
                parent.graph_index,
                partition_name=parent.name,
                detail=f"ONNX Runtime refused {', '.join(sorted(split.refused))}; {parts} "
                f"run in ONNX Runtime ({split.cause})",
            )
        )

    def lower_with_aot(
        self,
        graph_module: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        origin: _Origin,
    ) -> Any:
        """The ``aot_autograd`` strategy: AOTAutograd traces the joint graph and calls
        :meth:`_compile_boxed` for each graph it makes."""
        origin.registry_seconds = self._warm_up()
        compiler = functools.partial(self._compile_boxed, origin=origin)
        aot = _torch_private.aot_autograd_backend(
            fw_compiler=functools.partial(compiler, kind="forward"),
            bw_compiler=functools.partial(compiler, kind="backward"),
            inference_compiler=functools.partial(compiler, kind="inference"),
            decompositions=_torch_private.lowering_decompositions(self._options.opset_version),
        )
        # AOTAutograd traces and partitions, then calls _compile_boxed per graph; the
        # time since this mark is that graph's lowering.
        origin.lower_mark = time.perf_counter()
        try:
            with (
                _torch_private.attention_as_math(),
                _torch_private.embedding_bag_as_composite(),
            ):
                return aot(graph_module, example_inputs)
        finally:
            origin.lower_mark = None  # a backward compiled later has no lowering time

    def _compile_boxed(
        self,
        graph_module: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        kind: records.GraphKind,
        origin: _Origin,
    ) -> Callable[..., Any]:
        """AOTAutograd's compiler for one of its ATen graphs; never raises because of
        ortlab (the graph runs eagerly instead), unless ``strict``."""
        mark = origin.lower_mark
        lower_seconds = None if mark is None else time.perf_counter() - mark
        try:
            partitioned = self.compile(
                graph_module,
                example_inputs,
                kind=kind,
                # AOTAutograd rebuilds a user output that aliases an input from the
                # compiled output's size/stride/offset (as_strided) when it cannot replay
                # the views (symbolic sizes): the view must be PyTorch's, not ORT's copy.
                keep_input_aliases=kind != "backward",
                alias_outputs=_torch_private.aot_user_outputs(),
                lower_seconds=lower_seconds,
                origin_fields=origin.graph_fields(graph_module, kind),
                timings=origin.first_timings(),
            )
            forward = _time_until_first_call(partitioned.forward, self.graphs[-1])
        except Exception as e:
            _lowering.guard(self._options, f"compiling the {kind} graph", e)
            forward = self.run_eagerly(
                graph_module,
                kind=kind,
                origin=origin,
                error=f"partitioning the {kind} graph failed: {errors.describe(e)}",
                exc=e,
                lowering="aot_autograd",
            )
        if mark is not None:  # the next graph of this compile starts lowering now
            origin.lower_mark = time.perf_counter()
        return _torch_private.make_boxed(forward)

    def lower_with_make_fx(
        self,
        graph_module: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        origin: _Origin,
    ) -> Callable[..., Any]:
        """The ``make_fx`` strategy: a functionalized ATen graph without AOTAutograd's
        runtime wrappers (inference; see ``_lowering.thin_inference_applies``)."""
        origin.registry_seconds = self._warm_up()
        start = time.perf_counter()
        with attention_lowering(example_inputs):
            aten = _torch_private.lower_to_aten(
                graph_module,
                example_inputs,
                _torch_private.lowering_decompositions(self._options.opset_version),
            )
        partitioned = self.compile(
            aten,
            example_inputs,
            kind="inference",
            check_requires_grad=True,
            keep_input_aliases=True,
            lowering="make_fx",
            lower_seconds=time.perf_counter() - start,
            origin_fields=origin.graph_fields(aten, "inference"),
            timings=origin.first_timings(),
        )
        return _time_until_first_call(partitioned.forward, self.graphs[-1])

    def run_eagerly(
        self,
        graph_module: torch.fx.GraphModule,
        *,
        kind: records.GraphKind,
        origin: _Origin,
        error: str,
        exc: BaseException | None,
        lowering: records.Lowering = "eager",
    ) -> Callable[..., Any]:
        """The ``eager`` strategy (and AOTAutograd's for one of its graphs): records a
        graph ortlab could not compile and warns; returns it, to run in PyTorch."""
        verdicts = _support.graph_not_compiled(graph_module, error)
        fields = {**origin.graph_fields(graph_module, kind), "error": error}
        record = self._new_record(graph_module, kind, lowering, None, verdicts, fields)
        record.timings.update(origin.first_timings())
        self._add_graph(record)
        if exc is not None:
            logger.debug("ortlab fell back", exc_info=exc)
        _lowering.warn(
            f"the {kind} graph {record.index} runs in PyTorch: {error}. The error is on "
            f"backend.graphs[{record.index}].error."
        )
        return _time_until_first_call(graph_module.forward, record)

    def _check_static(self, graph_module: torch.fx.GraphModule) -> None:
        if self._options.dynamic_shapes is not True or self._warned_static:
            return
        for node in graph_module.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt) or (
                isinstance(val, torch.Tensor)
                and any(isinstance(d, torch.SymInt) for d in val.shape)
            ):
                return
        self._warned_static = True
        warnings.warn(
            "ortlab: dynamic_shapes=True but Dynamo captured this graph with static shapes, "
            "so its ONNX models have fixed dims. Pass dynamic=True to torch.compile (or "
            "ortlab.compile) for symbolic dims from the first call.",
            RuntimeWarning,
            stacklevel=2,
        )


def _time_until_first_call(forward: Callable[..., Any], record: records.GraphRecord) -> Any:
    """``forward``, counting its runs (``record.run_count``) and timing on the first one
    how long Dynamo (and AOTAutograd's runtime wrappers) took after ortlab handed the
    graph back (``record.timings["guards"]``). Costs one Python call per run."""
    returned = time.perf_counter()

    def graph_call(*args: Any) -> Any:
        record.run_count += 1
        if record.run_count == 1:
            record.timings["guards"] = time.perf_counter() - returned
        return forward(*args)

    return graph_call


def torch_compile_backend(
    graph_module: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: _options.OrtBackendOptions | Mapping[str, Any] | None = None,
    mode: str | None = None,
) -> Any:
    """The function Dynamo calls for ``backend="ortlab"`` (and ``"onnxrt"``).

    ``mode`` is ``torch.compile``'s (passed whenever it is not ``"default"``; Hugging
    Face's ``CompileConfig`` passes ``"reduce-overhead"`` by default): inductor's modes
    mean nothing here, so it is accepted and ignored, as torch's ``eager`` and
    ``aot_eager`` backends do (``options={"cuda_graphs": True}`` is ortlab's
    reduce-overhead)."""
    del mode
    return OrtBackend.get_cached_instance_for_options(options)(graph_module, example_inputs)


# torch._dynamo.reset() calls reset() on the backends it compiled with: for
# backend="ortlab", the shared instances are released with it.
torch_compile_backend.reset = OrtBackend.clear_cached_instances  # type: ignore[attr-defined]


def backend_of(obj: Any) -> OrtBackend:
    """The :class:`OrtBackend` behind ``obj``: a backend, the result of
    :func:`ortlab.compile`, or a ``torch.compile``-d callable that used ortlab.

    Raises:
        UnsupportedOptionError: ``obj`` was not compiled with ortlab.
    """
    from ortlab import errors

    if isinstance(obj, OrtBackend):
        return obj
    attached = getattr(obj, "ortlab_backend", None)
    if isinstance(attached, OrtBackend):
        return attached
    found = _torch_private.dynamo_backend_of(obj)
    if isinstance(found, tuple) and isinstance(found[0], OrtBackend):
        return found[0]
    if isinstance(found, OrtBackend):
        return found
    if isinstance(found, tuple) and found[0] is torch_compile_backend:
        return OrtBackend.get_cached_instance_for_options(found[1].get("options"))
    if found is torch_compile_backend:
        return OrtBackend.get_cached_instance_for_options(None)
    raise errors.UnsupportedOptionError(
        f"{type(obj).__name__} was not compiled with ortlab: pass an OrtBackend, the result "
        "of ortlab.compile(...), or torch.compile(..., backend=OrtBackend(...))."
    )


def attention_lowering(
    example_inputs: Sequence[Any],
) -> contextlib.AbstractContextManager[None]:
    """How an inference graph's attention is lowered. On CPU it stays one op
    (``_scaled_dot_product_flash_attention_for_cpu``, which ONNX Runtime's attention
    fusions recognise). On other devices PyTorch picks a fused kernel whose translation
    fails (CUDA's efficient attention without logsumexp) or is missing (cuDNN's): BERT on
    an H200 was 13 partitions with attention in PyTorch. There attention is lowered as
    its math (:func:`_torch_private.attention_as_math`), all of it translatable."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if all(t.device.type == "cpu" for t in tensors):
        return contextlib.nullcontext()
    return _torch_private.attention_as_math()


def compile(
    model: Callable[..., Any],
    *,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    specialize_floats: bool = True,
    options: _options.OrtBackendOptions | Mapping[str, Any] | None = None,
    **option_kwargs: Any,
) -> Callable[..., Any]:
    """``torch.compile`` with a fresh :class:`OrtBackend`, reachable as ``.ortlab_backend``.

    Args:
        model: Module or function to compile.
        dynamic: Passed to ``torch.compile``. ``None`` (its default) compiles the first
            call's shapes as constants and, when a size changes, compiles once more with
            just the sizes that changed symbolic; that graph (and its one ONNX model)
            then serves every later size. ``True`` makes every size symbolic from the
            first call: no second compile when the batch size changes, but a slower
            first compile (Swin: 40 s instead of 2 s) and a dearer call (Dynamo guards
            each symbolic size, and the ONNX model computes shapes at run time).
            ``False``: one static graph per shape.
        fullgraph: Passed to ``torch.compile``.
        specialize_floats: Trace Python floats the model reads (layer-norm ``eps``,
            dropout ``p``, attention scales) as constants guarded by value, as
            ``torch._dynamo.config.specialize_float=True`` does. ``False`` keeps
            ``torch.compile``'s behaviour: a float the model reads becomes a float64 graph
            input (from the first call under ``dynamic=True``, after it changed once
            otherwise), built each call, and ONNX Runtime cannot fold it (its layer-norm
            fusions need a constant epsilon). A float that really changes between calls
            recompiles when specialized: pass ``False`` for such models.
        options: :class:`OrtBackendOptions` or a dict; ``option_kwargs`` are merged in.
    """
    resolved = _options.OrtBackendOptions.from_value(options)
    if option_kwargs:
        resolved = resolved.replace(**option_kwargs)
    return compile_with(
        OrtBackend(resolved),
        model,
        dynamic=dynamic,
        fullgraph=fullgraph,
        specialize_floats=specialize_floats,
    )


GENERATE_NOTE = (
    "generate() of a module compiled whole calls the module's own forward, not the "
    "compiled one: it ran in PyTorch and compiled nothing. Compile the forward instead: "
    "model.forward = ortlab.compile(model.forward) (or torch.compile(model.forward, "
    "backend='ortlab')), then call model.generate(...); %ortcompile model.generate(...) "
    "does that for one call"
)
"""Why ``ortlab.compile(model).generate(...)`` compiles nothing (transformers' models:
``generate`` is a method of the module, which calls ``self(...)``, the uncompiled
module; ``torch.compile`` compiles only ``__call__``)."""


def _uncompiled_generate(generate: Callable[..., Any], backend: OrtBackend) -> Any:
    """``generate`` of the compiled module: the module's own, which says once (a warning
    and ``backend.notes``) that it compiles nothing."""

    @functools.wraps(generate)
    def say_and_generate(*args: Any, **kwargs: Any) -> Any:
        if GENERATE_NOTE not in backend.notes:
            backend.notes.append(GENERATE_NOTE)
            warnings.warn(f"ortlab: {GENERATE_NOTE}.", UserWarning, stacklevel=2)
        return generate(*args, **kwargs)

    return say_and_generate


def compile_with(
    backend: OrtBackend,
    model: Callable[..., Any],
    *,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    specialize_floats: bool = True,
) -> Callable[..., Any]:
    """:func:`compile` with a backend of the caller's (e.g. one shared by several compiles)."""
    # isolate_recompiles: each compile gets its own Dynamo cache entries, so compiling the
    # same model class many times (notebooks, sweeps) never hits the recompile limit and
    # silently falls back to eager.
    compiled = _torch_private.compile_with_dynamo(
        model,
        backend,
        dynamic=dynamic,
        fullgraph=fullgraph,
        specialize_floats=specialize_floats,
    )
    # object.__setattr__: OptimizedModule forwards attribute writes to the user's module.
    object.__setattr__(compiled, "ortlab_backend", backend)
    generate = getattr(model, "generate", None)
    if isinstance(model, torch.nn.Module) and callable(generate):
        object.__setattr__(compiled, "generate", _uncompiled_generate(generate, backend))
    # Dropping the compiled callable releases its sessions: Dynamo's caches keep the
    # compiled graphs (and their partitions) until torch._dynamo.reset().
    weakref.finalize(compiled, backend.reset)
    return compiled


def warm_up(
    opset_version: int | None = None, cache: _cache.CompileCache | None = None
) -> float:
    """Builds the exporter's op registry and decomposition table for an opset (``None``:
    the default one) now; returns the seconds spent building them (0.0 when they were
    already built in this process).

    That one-time cost per process (~1.5-3 s) is otherwise paid by the first graph
    compiled (its ``registry`` timing), so call this before timing first calls.

    With a compile ``cache``, the names of the ops the registry translates are read from
    it when it has them for these versions of torch and onnxscript (and written to it
    when not): then only the decomposition table is built here (~0.2 s), and the
    registry itself only if a partition is exported (a cache miss).
    """
    start = time.perf_counter()
    table = f"translated-ops-opset{opset_version or _torch_private.default_opset()}"
    unseen = cache is not None and (cache.root, table) not in _TABLES_SEEN
    if cache is not None and unseen:
        _TABLES_SEEN.add((cache.root, table))
        names = cache.load_names(table)
        if names is not None:
            _torch_private.adopt_translated_ops(opset_version, names)
            unseen = False
    built = _torch_private.build_exporter_tables(opset_version)
    if cache is not None and unseen:
        cache.store_names(table, sorted(_torch_private.translated_ops(opset_version).names))
    return time.perf_counter() - start if built else 0.0


_TABLES_SEEN: set[tuple[str, str]] = set()
"""(cache directory, table) pairs :func:`warm_up` has read or written in this process."""
