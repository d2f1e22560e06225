"""Records: plain dataclasses describing everything the backend did.

# NOTE: the records are the only interface between the backend and everything that
# shows or measures it (views, diff, bench, magic, report). They hold references to the
# FX graphs and ONNX models the backend produced, counters and timings — never live
# sessions or private backend state. They render themselves as text (``repr``) and as
# static, escaped HTML (``_repr_html_``) built from the standard library.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING, Any, Literal

from ortlab import _html, errors

if TYPE_CHECKING:
    import onnx
    import torch.fx

GraphKind = Literal["inference", "forward", "backward"]
"""What a graph computes: ``"inference"`` (no autograd), or AOTAutograd's ``"forward"``
and ``"backward"`` of a training step."""
Lowering = Literal["make_fx", "aot_autograd", "eager"]
"""How a Dynamo graph became ATen (see ``ortlab.backend._lowering``)."""
PartitionState = Literal["ort", "eager"]
"""Where a partition runs now."""
ExportMethod = Literal["direct", "retrace", "cache"]
"""How a partition's ONNX model was made (``"cache"``: read from the compile cache)."""
TimelineKind = Literal["graph", "session", "fallback", "split"]
"""What a :class:`TimelineEvent` records."""

# Compile steps, in pipeline order. Graph-level steps live on GraphRecord.timings,
# session-level ones on SessionRecord.timings; both use these keys.
GRAPH_STEPS = ("dynamo", "registry", "lower", "support", "partition", "guards")
"""``dynamo``: Dynamo's trace of the frame, up to handing the graph to ortlab (first
graph of a compile only). ``registry``: building the exporter's op registry and
decomposition table (once per process and opset; ``ortlab.backend.warm_up()`` pays it
up front). ``lower``: Dynamo's graph to ATen (make_fx, or AOTAutograd's tracing and
partitioning since the previous graph of the same compile). ``guards``: Dynamo's work
after ortlab returns the graph (guards, the frame's new bytecode, AOTAutograd's runtime
wrappers), until the graph first runs."""
EXPORT_STEPS = (
    "cache",
    "type_promotion",
    "translate",
    "optimize",
    "fuse",
    "serialize",
    "transforms",
)
"""The session steps that make its ONNX model (``SessionRecord.export_seconds``).
``cache``: reading it from the compile cache (then no other export step runs).
``optimize``: onnxscript's optimizer (inference partitions without fused operators).
``fuse``: rewriting it with ONNX Runtime's fused operators (``ort_fusions``) and checking
the fused model's first outputs against PyTorch (and, when a fused model was given up,
that attempt's session and runs)."""
SESSION_STEPS = (*EXPORT_STEPS, "session", "threads", "first_run")
"""``threads``: timing the session against a one-thread twin and creating the twin (only
for short runs with ``intra_op_threads="auto"``)."""
TIMING_STEPS = GRAPH_STEPS + SESSION_STEPS

FX_NODE_KEY = "pkg.torch.onnx.fx_node"
"""ONNX node metadata set by the exporter: the FX node (its text, ``%name : ...``) the
ONNX node was translated from."""
FOLDED_FX_NODES_KEY = "ortlab.folded_fx_nodes"
"""ONNX node metadata set by ortlab: comma-separated names of FX nodes whose ONNX nodes
were folded into this one (a weight ``Transpose`` absorbed by ``Gemm``'s ``transB``)."""
OPTIMIZED_AWAY_KEY = "ortlab.optimized_away_fx_nodes"
"""ONNX model metadata set by ortlab: comma-separated names of FX nodes whose every ONNX
node onnxscript's optimizer removed at export (folded into a constant, into a neighbour
such as a Pad into its Conv, or found to do nothing)."""

_FX_NODE_NAME = re.compile(r"\s*%([^\s:]+)")


FUSED_OPERATOR_DOMAIN = "com.microsoft"
"""The domain of ONNX Runtime's fused (contrib) operators: the only ones ortlab's models
use outside ONNX's own (option ``ort_fusions``)."""


def is_fused_operator(node: onnx.NodeProto) -> bool:
    """Whether an ONNX node is one of ONNX Runtime's fused operators: it stands for
    several FX nodes, whose provenance it may carry (the first, or the last)."""
    return node.domain == FUSED_OPERATOR_DOMAIN


def fusions_text(fusions: dict[str, int], note: str | None = None) -> str:
    """``"attention ×2, skip_layer_normalization ×4"``, then the note (if any)."""
    text = ", ".join(f"{name} ×{count}" for name, count in fusions.items())
    return "; ".join(t for t in (text, note) if t)


def fx_node_name_in(provenance: str) -> str | None:
    """The FX node name in an ``FX_NODE_KEY`` value (``"%addmm : ..."`` -> ``"addmm"``)."""
    match = _FX_NODE_NAME.match(provenance)
    return match.group(1) if match else None


def fx_node_of(onnx_node: onnx.NodeProto) -> str | None:
    """The FX node an ONNX node was translated from (its ``FX_NODE_KEY`` provenance
    metadata), or ``None``."""
    for prop in onnx_node.metadata_props:
        if prop.key == FX_NODE_KEY:
            return fx_node_name_in(prop.value)
    return None


def optimized_away(model: onnx.ModelProto) -> set[str]:
    """The FX nodes onnxscript's optimizer removed from ``model`` at export
    (:data:`OPTIMIZED_AWAY_KEY`)."""
    for prop in model.metadata_props:
        if prop.key == OPTIMIZED_AWAY_KEY:
            return set(filter(None, prop.value.split(",")))
    return set()


def _summary(record: Any, head: str, **fields: Any) -> str:
    """A record's one-line ``repr``: ``Kind(head: key=value, ...)``, ``None`` values left
    out (strings quoted only when they are free text: an error)."""
    items = ", ".join(
        f"{key}={value!r}" if key == "error" else f"{key}={value}"
        for key, value in fields.items()
        if value is not None
    )
    return f"{type(record).__name__}({head}: {items})"


@dataclasses.dataclass
class Verdict:
    """Whether one ``call_function`` node may run in ONNX Runtime, and why."""

    node: str
    """The FX node's name, e.g. ``"addmm_1"``."""
    target: str
    """The node's target as text, e.g. ``"aten.addmm.default"``."""
    supported: bool
    """``True`` when the node may be placed in an ONNX Runtime partition."""
    reason: str
    """Why, in words a person can act on."""
    source: str = ""
    """Where the node comes from in the user's code, ``"file.py:12 in forward: y = f(x)"``
    (the innermost frame of its stack trace outside torch itself); ``""`` when unknown."""
    rule: str = ""
    """The support rule that decided (``"verified"``, ``"no-translation"``...; see
    ``ortlab.backend.support_rules()``)."""

    def __repr__(self) -> str:
        mark = "ORT" if self.supported else "eager"
        where = f" [{self.source}]" if self.source else ""
        return f"Verdict({self.node}: {self.target} -> {mark}: {self.reason}{where})"

    def _repr_html_(self) -> str:
        return _html.table(
            ("node", "target", "supported", "rule", "reason", "source"),
            [(self.node, self.target, self.supported, self.rule, self.reason, self.source)],
        )


def _dim_text(dim: Any) -> str:
    if dim.HasField("dim_param"):
        return dim.dim_param
    if dim.HasField("dim_value"):
        return str(dim.dim_value)
    return "?"


def value_info_text(value_info: onnx.ValueInfoProto) -> str:
    """``"float32[s0,2]"`` for an ONNX tensor value info; symbolic dims by name."""
    import onnx

    tensor_type = value_info.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    if not tensor_type.HasField("shape"):
        return f"{dtype}[?]"
    dims = ",".join(_dim_text(d) for d in tensor_type.shape.dim)
    return f"{dtype}[{dims}]"


@dataclasses.dataclass
class SessionRecord:
    """One ONNX model exported for a partition and the InferenceSession running it."""

    partition_name: str
    """Name of the partition this session belongs to (``"fused_0"``)."""
    index: int
    """The session's number in its partition, from 0 in creation order (its position in
    ``PartitionRecord.sessions`` until old records are dropped; see
    :meth:`PartitionRecord.session`)."""
    model: onnx.ModelProto
    """The model given to ONNX Runtime, after ``pre_ort_model_transforms``."""
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    input_value_infos: tuple[onnx.ValueInfoProto, ...]
    output_value_infos: tuple[onnx.ValueInfoProto, ...]
    providers: tuple[str, ...]
    """Execution providers the session actually uses, in priority order."""
    output_views: tuple[tuple[int, ...] | None, ...] = ()
    """Per output, the shape PyTorch gets where the model returns the output before its
    final reshape and the runner views it (``None``: as ONNX Runtime returns it)."""
    export_method: ExportMethod = "direct"
    """``"direct"`` (FX graph translated node by node), ``"retrace"`` (public exporter) or
    ``"cache"`` (read from the compile cache with the decisions made for it)."""
    export_seconds: float = 0.0
    """Making the model: the :data:`EXPORT_STEPS` (type promotion, translation, fusion,
    serialization, transforms)."""
    session_seconds: float = 0.0
    """``onnxruntime.InferenceSession`` creation."""
    run_count: int = 0
    model_bytes: int = 0
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per step, keys from :data:`SESSION_STEPS`."""
    dump_files: tuple[str, ...] = ()
    """Files written for this model when a dump path was set."""
    dump_note: str | None = None
    """Why this model was not dumped although a dump path was set (a missing or
    read-only directory); ``None`` otherwise."""
    frozen_inputs: tuple[str, ...] = ()
    """Partition inputs baked into the model as initializers (``freeze_parameters``)."""
    active: bool = True
    """``False`` once the session was evicted from the cache (or cleared)."""
    cuda_graph: bool = False
    """The session replays its work as a CUDA graph (option ``cuda_graphs``)."""
    cuda_graph_note: str | None = None
    """With ``cuda_graphs`` on, why this session runs without a CUDA graph (``None`` when
    it has one, or when the option is off)."""
    threads: int | None = None
    """ONNX Runtime's intra-op threads for this session (``None``: ORT's own default,
    from the user's session options). See ``OrtBackendOptions.intra_op_threads``."""
    threads_note: str | None = None
    """How ``threads`` was chosen: the option that set it, or the probe's medians
    ("1 thread: 0.210 ms with 1 thread vs 0.320 ms with 2 ...")."""
    provider_note: str | None = None
    """With a plugin provider preferred (OpenVINO's), which provider runs this session
    and why: both timed on the first inputs ("CPUExecutionProvider: 712.4 ms
    OpenVINOExecutionProvider vs 121.0 ms CPUExecutionProvider ..."), or why the plugin
    was not used (its outputs differed from PyTorch's, it failed to run the model, the
    model computes in float64). ``None`` without a plugin provider."""
    fusions: dict[str, int] = dataclasses.field(default_factory=dict)
    """ONNX Runtime fused operators the model was rewritten with, by fusion
    (``{"skip_layer_normalization": 4, "attention": 2}``; option ``ort_fusions``)."""
    fusion_note: str | None = None
    """How the fused and unfused models compared on the first inputs ("0.080 ms fused vs
    0.091 ms unfused ..."; the unfused one runs when faster), or why the model has no
    fusions where they were tried ("none of its patterns", the error that made it fall
    back to the unfused model)."""
    onnx_passes: dict[str, bool] = dataclasses.field(default_factory=dict)
    """ortlab's clean-up passes run on the model, each with whether it changed it
    (``{"FoldTransposeIntoGemm": True, "MatMulOverLeadingDims": False, ...}``)."""
    last_inputs: tuple[Any, ...] | None = dataclasses.field(default=None, repr=False)
    """The ONNX inputs of the last run, in the model's input order, with
    ``OrtBackendOptions(keep_last_run=True)`` (inference graphs only: a training graph's
    would keep its saved activations alive)."""
    last_outputs: tuple[Any, ...] | None = dataclasses.field(default=None, repr=False)
    """What ONNX Runtime returned on the last run (inference graphs only)."""

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Writes this session's model and its last run's inputs and outputs in ONNX's
        test-data layout (``model.onnx``, ``test_data_set_0/input_0.pb`` …), runnable with
        ``onnx_test_runner DIR`` or any ONNX backend test; returns the directory.

        Raises:
            OrtlabError: the session has not run, or belongs to a training graph.
        """
        from ortlab import errors
        from ortlab.backend import _testdata

        if self.last_inputs is None or self.last_outputs is None:
            raise errors.OrtlabError(
                f"session {self.partition_name}#{self.index} has no last run to save: "
                "sessions keep theirs only with OrtBackendOptions(keep_last_run=True) (as "
                "%ortcompile does), and only in inference graphs (a training graph's would "
                "keep its activations alive): compile with keep_last_run=True and run the "
                "model under torch.no_grad(), or save a failing partition with "
                "ortlab.diff(...).save_repro(dir)."
            )
        readme = (
            f"# ortlab session {self.partition_name}#{self.index}\n\n"
            f"Inputs {', '.join(self.input_schema)}; outputs {', '.join(self.output_schema)};"
            f" run by {', '.join(self.providers)}.\n\n"
        )
        readme += _testdata.rerun_instructions(directory)
        return _testdata.write_test_case(
            directory, self.model, self.last_inputs, self.last_outputs, readme=readme
        )

    @property
    def cuda_graph_status(self) -> str:
        """ "yes", "no: <why>" when ``cuda_graphs`` was asked for and could not apply, or ""
        when the option was off."""
        if self.cuda_graph:
            return "yes"
        return f"no: {self.cuda_graph_note}" if self.cuda_graph_note else ""

    @property
    def input_schema(self) -> tuple[str, ...]:
        """Input types as text, e.g. ``("float32[s0,2]",)``."""
        return tuple(value_info_text(v) for v in self.input_value_infos)

    @property
    def output_schema(self) -> tuple[str, ...]:
        """Output types as text; an output viewed in PyTorch says as what
        (``"float32[512,50257] viewed as [4,128,50257]"``)."""
        views = self.output_views or (None,) * len(self.output_value_infos)
        return tuple(
            value_info_text(v) + (f" viewed as [{','.join(map(str, view))}]" if view else "")
            for v, view in zip(self.output_value_infos, views)
        )

    @property
    def onnx_node_count(self) -> int:
        return len(self.model.graph.node)

    def __repr__(self) -> str:
        return _summary(
            self,
            f"{self.partition_name}#{self.index}",
            inputs=list(self.input_schema),
            outputs=list(self.output_schema),
            providers=list(self.providers),
            onnx_nodes=self.onnx_node_count,
            runs=self.run_count,
            export=f"{self.export_seconds * 1e3:.1f}ms",
            session=f"{self.session_seconds * 1e3:.1f}ms",
        )

    def rows(self) -> list[tuple[str, Any]]:
        """``(label, value)`` pairs describing the session (its HTML table)."""
        rows: list[tuple[str, Any]] = [
            ("partition", f"{self.partition_name} (session {self.index})"),
            ("inputs", ", ".join(self.input_schema)),
            ("outputs", ", ".join(self.output_schema)),
            (
                "providers",
                ", ".join(self.providers)
                + (f" ({self.provider_note})" if self.provider_note else ""),
            ),
            ("ONNX nodes", self.onnx_node_count),
            ("model bytes", self.model_bytes),
            ("export", f"{self.export_method}, {self.export_seconds * 1e3:.1f} ms"),
            ("session creation", f"{self.session_seconds * 1e3:.1f} ms"),
            ("runs", self.run_count),
        ]
        changed = [name for name, modified in self.onnx_passes.items() if modified]
        if changed:
            rows.append(("clean-ups that changed it", ", ".join(changed)))
        if self.fusions or self.fusion_note:
            rows.append(("fused operators", fusions_text(self.fusions, self.fusion_note)))
        if self.cuda_graph_status:
            rows.append(("CUDA graph", self.cuda_graph_status))
        return rows

    def _repr_html_(self) -> str:
        return _html.block("ONNX Runtime session", _html.table(("", ""), self.rows()))


@dataclasses.dataclass
class PartitionRecord:
    """A fused group of supported nodes that runs in ONNX Runtime (or falls back)."""

    name: str
    """``"fused_0"``, ``"fused_1"``, … in the order they run (the partitioner's groups, by
    their first node in the graph)."""
    graph_index: int
    """Index of the owning :class:`GraphRecord` in ``backend.graphs``."""
    graph_kind: GraphKind
    graph_module: torch.fx.GraphModule
    """The partition's sub-GraphModule (ATen ops)."""
    node_names: tuple[str, ...] = ()
    """Names of the nodes of the owning graph that this partition holds."""
    sessions: list[SessionRecord] = dataclasses.field(default_factory=list)
    run_count: int = 0
    """Calls that ran in ONNX Runtime."""
    eager_run_count: int = 0
    """Calls that ran in PyTorch instead (after a failure, or when autograd needed it)."""
    error: str | None = None
    """Why this partition runs in PyTorch, when it does (export/transform/session failure)."""
    thawed_inputs: tuple[str, ...] = ()
    """Placeholders ``freeze_parameters`` stopped freezing because their tensor kept
    changing; they are passed to ONNX Runtime as inputs."""
    dropped_sessions: int = 0
    """Records of inactive sessions dropped to bound ``sessions`` (the oldest first)."""
    split_from: str | None = None
    """The partition this one was split from, around nodes ONNX Runtime refused (they run
    in PyTorch; the graph's ``split_partitions`` keeps the original's record)."""

    def session(self, index: int) -> SessionRecord | None:
        """The session record numbered ``index`` (``None`` when it was dropped)."""
        return next((s for s in self.sessions if s.index == index), None)

    @property
    def state(self) -> PartitionState:
        """``"ort"`` while it runs in ONNX Runtime, ``"eager"`` after a failure."""
        return "eager" if self.error is not None else "ort"

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.graph_module.graph.nodes if n.op == "placeholder")

    @property
    def output_names(self) -> tuple[str, ...]:
        out = next(n for n in self.graph_module.graph.nodes if n.op == "output")
        args = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
        return tuple(getattr(a, "name", repr(a)) for a in args)

    def __repr__(self) -> str:
        return _summary(
            self,
            f"{self.name} of graph {self.graph_index} ({self.graph_kind})",
            nodes=len(self.node_names),
            sessions=len(self.sessions),
            runs=self.run_count,
            eager_runs=self.eager_run_count,
            error=self.error,
        )

    def rows(self) -> list[tuple[str, Any]]:
        """``(label, value)`` pairs describing the partition (its HTML table)."""
        rows: list[tuple[str, Any]] = [
            ("graph", f"{self.graph_index} ({self.graph_kind})"),
            ("state", self.state),
            ("nodes", len(self.node_names)),
            ("inputs", ", ".join(self.input_names)),
            ("outputs", ", ".join(self.output_names)),
            ("sessions", len(self.sessions)),
            ("runs (ORT / eager)", f"{self.run_count} / {self.eager_run_count}"),
        ]
        if self.thawed_inputs:
            rows.append(("no longer frozen", ", ".join(self.thawed_inputs)))
        if self.error:
            rows.append(("error", self.error))
        return rows

    def _repr_html_(self) -> str:
        sessions = "".join(s._repr_html_() for s in self.sessions)
        table = _html.table(("", ""), self.rows())
        return _html.block(f"Partition {self.name}", table + sessions)


@dataclasses.dataclass
class GraphRecord:
    """One FX graph handed to the backend by Dynamo (or AOTAutograd)."""

    index: int
    """Position in ``backend.graphs``."""
    kind: GraphKind
    """``"inference"``, ``"forward"`` or ``"backward"``."""
    graph_module: torch.fx.GraphModule
    """The graph as received (ATen ops after AOTAutograd)."""
    compile_id: str | None = None
    """Dynamo's compile id (``"0/1"``) when known."""
    lowering: Lowering = "aot_autograd"
    """How the Dynamo graph became ATen: ``"aot_autograd"`` (training-capable, with
    AOTAutograd's runtime wrappers), ``"make_fx"`` (inference only, no wrappers) or
    ``"eager"`` (no lowering worked: the graph runs in PyTorch as Dynamo handed it over;
    ``error`` says why). See ``ortlab.backend._lowering``."""
    partitioned: torch.fx.GraphModule | None = None
    """The graph after partitioning: ``fused_*`` submodules run in ONNX Runtime."""
    partitions: list[PartitionRecord] = dataclasses.field(default_factory=list)
    """The partitions the graph runs (one that was split is replaced by its parts)."""
    split_partitions: list[PartitionRecord] = dataclasses.field(default_factory=list)
    """Partitions split around nodes ONNX Runtime refused, as they were (their ``error``
    says what was refused); their parts are in ``partitions``."""
    verdicts: list[Verdict] = dataclasses.field(default_factory=list)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per graph-level step, keys from :data:`GRAPH_STEPS`."""
    error: str | None = None
    """Why ortlab could not compile this graph, which then runs entirely in PyTorch:
    no lowering worked (``lowering == "eager"``), or AOTAutograd lowered it but
    partitioning this one of its graphs failed (``lowering == "aot_autograd"``);
    ``None`` when it compiled."""
    fallback: str | None = None
    """What ortlab fell back to while compiling this graph, and why (e.g. the make_fx
    lowering failed and AOTAutograd lowered it); ``None`` when nothing fell back."""
    frame: str = ""
    """The user's function Dynamo compiled, ``"forward (model.py)"``; code after a graph
    break is a function of its own, ``"forward (resumed after line 11) (model.py)"``."""
    recompile_reason: str | None = None
    """The guard that failed and made Dynamo compile the frame again (a new dtype, a
    new static size…); ``None`` for a first compile."""
    graph_break: str | None = None
    """Why Dynamo ended this graph early (a graph break), ``None`` when it ran to the
    frame's return."""
    graph_break_source: str = ""
    """Where that graph break is in the user's code, ``"model.py:14: print(x)"``; for
    a break inside a function the graph's last line calls, the line of the break and
    the call: ``"loss.py:9: log.warning(m) (called from model.py:30: loss = f(y))"``."""
    run_count: int = 0
    """Times the compiled graph ran (Dynamo called it; its guards matched)."""
    input_sources: dict[str, str] = dataclasses.field(default_factory=dict)
    """Placeholder name -> where Dynamo took that input from, as people write it:
    ``{"primals_5": "encoder.layer.0.attention.self.query.weight", "primals_1":
    "input_ids"}`` (inference and forward graphs; see :meth:`source_of`)."""

    def source_of(self, name: str) -> str:
        """A placeholder's parameter, buffer or argument name (``name`` itself for any
        other node, or when unknown)."""
        return self.input_sources.get(name, name)

    @property
    def cause(self) -> str:
        """Why this graph exists, in one line: a first compile, a recompile (and the
        guard that failed), the backward of a forward graph; plus a graph break that
        ended it."""
        of = f" of {self.frame}" if self.frame else ""
        if self.kind == "backward":
            text = f"backward of the forward graph{of} compiled just before it"
        elif self.recompile_reason:
            text = f"recompile{of}: {errors.first_line(self.recompile_reason)}"
        else:
            text = f"first compile{of}"
        if self.graph_break:
            first = errors.first_line(self.graph_break)
            where = f" at {self.graph_break_source}" if self.graph_break_source else ""
            text += f"; ends at a graph break{where}: {first}"
            hints = [
                line.strip()[len("Hint:") :].strip()
                for line in self.graph_break.splitlines()
                if line.strip().startswith("Hint:")
            ]
            if hints:  # Dynamo's own advice on this break, the first of them
                text += f" (Dynamo's hint: {hints[0]})"
        return text

    @property
    def node_count(self) -> int:
        """Number of ``call_function`` nodes (the ones with verdicts)."""
        return len(self.verdicts)

    @property
    def ort_node_names(self) -> tuple[str, ...]:
        """Nodes placed in a partition that currently runs in ONNX Runtime."""
        return tuple(n for p in self.partitions if p.state == "ort" for n in p.node_names)

    @property
    def eager_node_names(self) -> tuple[str, ...]:
        """``call_function`` nodes that run in PyTorch (unsupported or failed partition)."""
        in_ort = set(self.ort_node_names)
        return tuple(v.node for v in self.verdicts if v.node not in in_ort)

    def verdict(self, node_name: str) -> Verdict | None:
        """The verdict of one node by name, or ``None``."""
        return next((v for v in self.verdicts if v.node == node_name), None)

    def __repr__(self) -> str:
        error = f", error={self.error!r}" if self.error else ""
        return (
            f"GraphRecord({self.index}: {self.kind} via {self.lowering}{error}, "
            f"{self.node_count} nodes, "
            f"{len(self.ort_node_names)} in ORT, {len(self.partitions)} partitions, "
            f"{sum(len(p.sessions) for p in self.partitions)} sessions)"
        )

    def _repr_html_(self) -> str:
        summary = _html.table(
            (
                "kind",
                "lowering",
                "compile id",
                "nodes",
                "in ORT",
                "eager",
                "partitions",
                "sessions",
            ),
            [
                (
                    self.kind,
                    self.lowering,
                    self.compile_id or "",
                    self.node_count,
                    len(self.ort_node_names),
                    len(self.eager_node_names),
                    len(self.partitions),
                    sum(len(p.sessions) for p in self.partitions),
                )
            ],
        )
        notes = [("cause", self.cause)]
        if self.fallback:
            notes.append(("fallback", self.fallback))
        if self.error:
            notes.append(("error", self.error))
        notes_html = _html.table(("", ""), notes)
        eager = [
            (v.node, v.target, v.reason, v.source) for v in self.verdicts if not v.supported
        ]
        eager_html = (
            _html.table(("node", "target", "reason", "source"), eager) if eager else ""
        )
        return _html.block(
            f"Graph {self.index} ({self.kind})", summary + notes_html + eager_html
        )


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """One partition run in ONNX Runtime, as seen by ``OrtBackend.add_observer`` callbacks.

    ``inputs`` are exactly the values handed to ONNX Runtime's side of the partition (the
    partition's placeholders, in order); ``outputs`` what it returned, in order.
    """

    partition: PartitionRecord
    session: SessionRecord
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]


TIMELINE_KINDS: tuple[TimelineKind, ...] = ("graph", "session", "fallback", "split")


@dataclasses.dataclass(frozen=True)
class TimelineEvent:
    """One step in a backend's history (``OrtBackend.timeline``), in order: a graph
    compiled, a session created for a partition's new input schema, a partition or graph
    that fell back to PyTorch."""

    kind: TimelineKind
    """One of :data:`TIMELINE_KINDS`."""
    graph_run: int
    """The graph run (counted from 1 across all graphs of the backend) the event belongs
    to: a graph is compiled for the run about to start; a session is created, or a
    partition falls back, during a run."""
    graph_index: int
    """The graph the event belongs to."""
    partition_name: str | None = None
    """The partition's name (session, fall back and split events; ``None`` for a
    graph)."""
    session_index: int | None = None
    """Position in the partition's ``sessions`` (session events)."""
    detail: str = ""
    """Why: the graph's cause, the session's input schema, the fall back's error."""

    @property
    def text(self) -> str:
        """One line: ``"graph 0 compiled: first compile of forward (model.py:10)"``."""
        if self.kind == "graph":
            return f"graph {self.graph_index} compiled: {self.detail}"
        where = f"graph {self.graph_index} {self.partition_name}"
        if self.kind == "session":
            return f"{where}: session {self.session_index} created for {self.detail}"
        if self.kind == "split":
            return f"{where} split, its refused nodes in PyTorch: {self.detail}"
        return f"{where} fell back to PyTorch: {self.detail}"

    def __repr__(self) -> str:
        return f"TimelineEvent(run {self.graph_run}: {self.text})"
