"""One partition's sub-GraphModule -> ``onnx.ModelProto`` (for one input schema).

# NOTE: the default path translates the partition's FX graph directly, node by node,
# from each node's ``meta["val"]`` (no re-tracing; milliseconds). Before translating:
#
#   copy graph  ->  [static: re-propagate concrete shapes]  ->  fill schema defaults
#     ->  type promotion (skipped when every tensor has one floating dtype)
#     ->  translate (torchlib)  ->  [freeze: params become initializers]
#     ->  ortlab's passes, remove unused nodes  ->  [inference: onnxscript's optimizer]
#     ->  [ONNX Runtime fusions (_fusions)]
#     ->  serialize  ->  pre_ort_model_transforms
#
# The partition's own GraphModule is never modified: it stays the eager fallback and
# what the views show. When the direct path is unavailable on this torch, or fails, the
# public exporter (``torch.onnx.export(..., dynamo=True)``) re-traces the partition with
# the call's concrete inputs (seconds, static shapes).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ortlab import errors
from ortlab.backend import _fusions, _passes, _runtime, _torch_private, records

if TYPE_CHECKING:
    import onnx


@dataclasses.dataclass
class ExportedModel:
    """The product of :func:`export_partition`."""

    proto: onnx.ModelProto
    method: records.ExportMethod
    timings: dict[str, float]
    frozen_inputs: tuple[int, ...] = ()
    """Placeholder positions baked into the model as initializers."""
    fused: bool = False
    """The model was rewritten for ONNX Runtime's fused operators (even where no fusion
    of ``fusions`` applied, smaller rewrites may have)."""
    fusions: dict[str, int] = dataclasses.field(default_factory=dict)
    """ONNX Runtime fusions applied, by name (see :mod:`ortlab.backend._fusions`)."""
    fusion_note: str = ""
    """Why fusions that were tried are not in the model ("" when they are, or when they
    were not tried)."""
    unfused: onnx.ModelProto | None = None
    """With ``fuse=None``, a fused model's state before the rewrite (the model the
    fused one is timed against); ``None`` otherwise."""
    passes: dict[str, bool] = dataclasses.field(default_factory=dict)
    """ortlab's clean-up passes (``_passes.CleanUps``), each with whether it changed
    the model (empty for the re-tracing exporter's models)."""


def add_timings(into: dict[str, float], more: Mapping[str, float]) -> None:
    """Adds the seconds of ``more`` to ``into``, step by step."""
    for step, seconds in more.items():
        into[step] = into.get(step, 0.0) + seconds


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy whose nodes (and meta dicts) can be edited without touching ``gm``."""
    graph = torch.fx.Graph()
    value_remap: dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, value_remap)
    graph.output(out)
    for old, new in value_remap.items():
        new.meta = dict(old.meta)
    return torch.fx.GraphModule(gm, graph)


def _propagate_concrete_shapes(gm: torch.fx.GraphModule, args: Sequence[Any]) -> None:
    """Replaces symbolic ``meta['val']`` with values for these concrete inputs."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = _torch_private.concrete_fake_mode()
    fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake_args)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, fake_args):
        node.meta["val"] = value


def _fill_schema_defaults(gm: torch.fx.GraphModule) -> None:
    """AOT graphs omit defaulted arguments (``amax(x)`` without ``dim``); torchlib's
    functions may need them, so make them explicit from the op schema."""
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not _torch_private.is_op_overload(target):
            continue
        extra = {}
        for i, arg in enumerate(target._schema.arguments):
            given = i < len(node.args) and not arg.kwarg_only
            if given or arg.name in node.kwargs or not arg.has_default_value():
                continue
            if arg.default_value is None:
                continue
            extra[arg.name] = arg.default_value
        if extra:
            node.kwargs = {**node.kwargs, **extra}


def _value_dtypes(value: Any) -> list[torch.dtype]:
    """dtypes a value has on the ONNX side (a SymInt is an INT64 scalar tensor there)."""
    if isinstance(value, torch.Tensor):
        return [value.dtype]
    if isinstance(value, torch.SymInt):
        return [torch.int64]
    if isinstance(value, torch.SymFloat):
        return [torch.float32]  # the exporter declares SymFloat inputs as FLOAT
    if isinstance(value, torch.SymBool):
        return [torch.bool]
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in _value_dtypes(v)]
    return []


def _promoted_args(node: torch.fx.Node, rule: Any) -> list[Any]:
    """The arguments a type-promotion rule looks at (elementwise: the promoted positions;
    other rules, e.g. reductions: the first argument)."""
    positions = _torch_private.promoted_arg_positions(rule)
    if positions is None:
        return list(node.args[:1])
    indices, names = positions
    picked = [node.args[i] for i in indices if i < len(node.args)]
    picked += [node.kwargs[n] for n in names if n in node.kwargs]
    return picked


def _arg_dtypes(arg: Any) -> list[torch.dtype]:
    if isinstance(arg, torch.fx.Node):
        return _value_dtypes(arg.meta.get("val"))
    if isinstance(arg, (list, tuple)):
        return [d for a in arg for d in _arg_dtypes(a)]
    return []


def _has_float64(gm: torch.fx.GraphModule) -> bool:
    """Whether any value of the graph is a float64 tensor (its Python floats are then
    translated as DOUBLE constants, see ``_torch_private.translate_fx_graph``)."""
    return any(torch.float64 in _value_dtypes(node.meta.get("val")) for node in gm.graph.nodes)


def _needs_type_promotion(gm: torch.fx.GraphModule) -> bool:
    """Whether the exporter's type-promotion pass could change anything in this graph.

    The pass only rewrites nodes whose op has a promotion rule, and only when the promoted
    arguments mix dtypes or the result's dtype differs from a non-float input's
    (``div(int, int) -> float``, ``mul(int, 0.5)``, ``sum(bool) -> int64``). ONNX never
    promotes implicitly, so those nodes need explicit casts; everywhere else the pass —
    which re-executes every node under fake mode and was the largest export cost — is
    skipped. Python numbers next to a float tensor (``mul(x, 0.5)``) are cast by torchlib;
    a float next to an integer tensor is not theirs to cast (``lt(i, 2.5)`` became
    ``i < 2``), so it needs the pass.
    """
    table = _torch_private.type_promotion_table()
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not _torch_private.is_op_overload(target):
            continue
        rule = table.get_rule(target.overloadpacket)
        if rule is None:
            continue
        promoted = _promoted_args(node, rule)
        inputs = {d for a in promoted for d in _arg_dtypes(a)}
        if len(inputs) > 1:
            return True
        if inputs and not next(iter(inputs)).is_floating_point:
            if any(isinstance(a, float) for a in promoted):
                return True  # lt(int64, 2.5): torchlib would cast 2.5 to int64 (x < 2)
        outputs = set(_value_dtypes(node.meta.get("val"))) - {torch.bool}
        if inputs and not next(iter(inputs)).is_floating_point and outputs - inputs:
            return True
        if not inputs and outputs and not all(d.is_floating_point for d in outputs):
            return True  # only Python numbers in promoted positions: be safe
    return False


def _freeze_inputs(model: Any, frozen: Mapping[int, torch.Tensor]) -> None:
    """Turns the graph inputs at these positions into initializers holding the tensors."""
    inputs = list(model.graph.inputs)
    for index, tensor in frozen.items():
        value = inputs[index]
        value.const_value = _torch_private.torch_tensor_as_ir(tensor.detach(), value.name)
        model.graph.initializers[value.name] = value
    keep = [v for i, v in enumerate(inputs) if i not in frozen]
    model.graph.inputs.clear()
    model.graph.inputs.extend(keep)


def _optimize(
    model: Any, timings: dict[str, float], passes: dict[str, bool]
) -> Exception | None:
    """Runs ``_passes.OnnxscriptOptimizer`` on ``model``; what it raised (the model may
    then be half rewritten), else ``None``."""
    start = time.perf_counter()
    name = _passes.OnnxscriptOptimizer.__name__
    try:
        passes[name] = _passes.OnnxscriptOptimizer()(model).modified
    except Exception as e:
        passes[name] = False
        return e
    finally:
        timings["optimize"] = time.perf_counter() - start
    return None


def _fuse(
    model: Any, *, keep_unfused: bool, timings: dict[str, float]
) -> tuple[dict[str, int], onnx.ModelProto | None, Exception | None]:
    """Rewrites ``model`` with ONNX Runtime's fused operators (``_fusions.fuse``): the
    fusions applied, the model as it was before (``keep_unfused``), and what the rewrite
    raised (the model may then be half rewritten), else ``None``."""
    import onnx_ir as ir

    start = time.perf_counter()
    unfused = ir.serde.serialize_model(model) if keep_unfused else None
    try:
        return _fusions.fuse(model), unfused, None
    except Exception as e:
        return {}, None, e
    finally:
        timings["fuse"] = time.perf_counter() - start


@dataclasses.dataclass(frozen=True)
class _Translation:
    """What the direct translation of a partition reads (see :func:`export_partition`)."""

    gm: torch.fx.GraphModule
    name: str
    static_args: Sequence[Any] | None
    frozen: Mapping[int, torch.Tensor]
    opset_version: int | None
    registry: Any


def _translated(t: _Translation, timings: dict[str, float]) -> Any:
    """The partition translated by torchlib into an onnx-ir model (frozen inputs as
    initializers), before any clean-up; fills ``timings`` (type promotion, translate)."""
    work = copy_graph_module(t.gm)
    if t.static_args is not None:
        _propagate_concrete_shapes(work, t.static_args)
    _fill_schema_defaults(work)
    start = time.perf_counter()
    if _needs_type_promotion(work):
        _torch_private.insert_type_promotion(work)
    timings["type_promotion"] = time.perf_counter() - start

    start = time.perf_counter()
    model = _torch_private.translate_fx_graph(
        work,
        name=t.name,
        opset_version=t.opset_version,
        registry=t.registry,
        exact_floats=_has_float64(work),
    )
    if "" not in model.opset_imports:
        # Nodes that all translate to nothing (a mean over the one dim of a 0-d tensor)
        # leave no node to import the default opset, and ONNX Runtime refuses a model
        # without one ("Missing opset in the model").
        model.opset_imports[""] = t.opset_version or _torch_private.default_opset()
    if t.frozen:
        _freeze_inputs(model, t.frozen)
    timings["translate"] = time.perf_counter() - start
    return model


def _translate_direct(
    t: _Translation,
    *,
    fuse: bool | None,
    optimize: bool,
    timings: dict[str, float],
    passes: dict[str, bool],
) -> tuple[onnx.ModelProto, bool, dict[str, int], str, onnx.ModelProto | None]:
    """The model, whether it was rewritten for fusions, the fusions applied, why none
    were, and (``fuse=None``, fused) the model before the rewrite (see
    :class:`ExportedModel`). Fills ``timings`` (seconds per step) and ``passes`` (which
    clean-up changed the model).

    ``fuse``: ``None`` where the graph has a pattern's first op, ``True`` always,
    ``False`` never. A fusion that raises is reported in the note and the partition
    translated again without it (the rewrite may have left the model half done); so is
    onnxscript's optimizer (``optimize``, see ``_passes.OnnxscriptOptimizer``), which
    runs where no fusion does (the fusions run it first themselves).
    """
    import onnx_ir as ir

    model = _translated(t, timings)
    clean_ups = _passes.CleanUps()
    start = time.perf_counter()
    clean_ups(model)
    passes.update(clean_ups.modified_by)
    timings["translate"] += time.perf_counter() - start

    again = functools.partial(_translate_direct, t, passes=passes)
    fused = _fusions.wanted(model, fuse)
    if optimize and not fused:  # the fusions run the same optimizer first
        failed = _optimize(model, timings, passes)
        if failed is not None:
            unoptimized: dict[str, float] = {}
            retried = again(fuse=fuse, optimize=False, timings=unoptimized)
            add_timings(timings, unoptimized)
            why = (
                f"onnxscript's optimizer failed ({errors.describe(failed)}); runs unoptimized"
            )
            return (*retried[:3], _fusions.join_notes(why, retried[3]), retried[4])

    fusions: dict[str, int] = {}
    note = ""
    unfused_proto = None
    if fused:
        keep = fuse is None
        fusions, unfused_proto, failed = _fuse(model, keep_unfused=keep, timings=timings)
        if failed is not None:
            unfused: dict[str, float] = {}
            proto, _, _, note, _ = again(fuse=False, optimize=optimize, timings=unfused)
            add_timings(timings, unfused)
            why = _fusions.join_notes(_fusions.failed_note(failed), note)
            return proto, False, {}, why, None
        if not fusions:
            note = _fusions.NO_PATTERNS_NOTE

    start = time.perf_counter()
    proto = ir.serde.serialize_model(model)
    timings["serialize"] = time.perf_counter() - start
    return proto, fused, fusions, note, unfused_proto


def _export_retrace(
    gm: torch.fx.GraphModule,
    args: Sequence[Any],
    opset_version: int | None,
    custom_translations: Sequence[tuple[Any, Callable[..., Any]]],
    timings: dict[str, float],
) -> onnx.ModelProto:
    """Public-API fallback: re-trace the partition with the call's concrete inputs."""
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise errors.ExportError(
            "the re-tracing exporter needs tensor inputs; this partition takes Python scalars"
        )
    start = time.perf_counter()
    work = copy_graph_module(gm).eval()  # an ATen graph: training mode means nothing here
    example = tuple(a.detach().clone() for a in args)

    def run() -> Any:
        with _torch_private.quiet_exporter():
            return torch.onnx.export(
                work,
                example,
                dynamo=True,
                verbose=False,
                optimize=False,
                opset_version=opset_version,  # None: the exporter's default
                custom_translation_table=dict(custom_translations) or None,
            )

    # A partition's first call runs inside AOTAutograd's runtime, whose thread-local
    # dispatch state (Python/ADInplaceOrView keys) breaks torch.export's functionalization.
    # A fresh thread starts with clean thread-local state.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        program = pool.submit(run).result()
    timings["translate"] = time.perf_counter() - start
    start = time.perf_counter()
    proto = program.model_proto
    timings["serialize"] = time.perf_counter() - start
    return proto


_TRANSLATION_LOCK = threading.Lock()
"""Held while a partition is translated: the exporter keeps process-wide state during a
translation (onnxscript's default evaluator, the exporter's current tracer), so two at
once, from two threads of the same or different backends, mix their nodes."""


def fx_output_values(gm: torch.fx.GraphModule) -> tuple[tuple[Any, ...], bool]:
    """The FX values (``meta["val"]``, or the constant) a graph returns, in order, and
    whether it returns one value rather than a tuple."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    arg = out.args[0]
    single = not isinstance(arg, (tuple, list))
    items = (arg,) if single else tuple(arg)
    return tuple(
        a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in items
    ), single


def _outputs_in_memory_order(proto: onnx.ModelProto, gm: torch.fx.GraphModule) -> None:
    """Ends each output whose FX value is laid out in another dim order than contiguous
    (channels_last...) with a Transpose to that order, and lists the permutations in the
    model's metadata, in place (see ``_runtime``'s NOTE: the runner permutes ORT's
    tensor back, so the output has eager's strides without a copy)."""
    import onnx

    values, _ = fx_output_values(gm)
    orders = [_runtime.memory_order(v) for v in values]
    graph = proto.graph
    if not any(orders) or len(orders) != len(graph.output):
        return
    for info, perm in zip(graph.output, orders):
        if perm is None:
            continue
        logical = info.name
        info.name = f"{logical}__memory_order"
        graph.node.append(
            onnx.helper.make_node(
                "Transpose", [logical], [info.name], name=info.name, perm=list(perm)
            )
        )
        if info.type.tensor_type.HasField("shape"):
            dims = [onnx.TensorShapeProto.Dimension() for _ in perm]
            for target, dim in zip(dims, perm):
                target.CopyFrom(info.type.tensor_type.shape.dim[dim])
            del info.type.tensor_type.shape.dim[:]
            info.type.tensor_type.shape.dim.extend(dims)
    entry = proto.metadata_props.add()
    entry.key = _runtime.MEMORY_ORDER_KEY
    entry.value = json.dumps(
        {info.name: list(p) for info, p in zip(graph.output, orders) if p is not None}
    )


_VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
"""Ops whose output, as a graph output, ONNX Runtime copies out of their input's buffer
(inside a graph it aliases the buffer): a graph output they end in is returned before
them, and viewed in PyTorch."""


def _static_dims(info: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tensor = info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
    return None if -1 in dims else dims


def _outputs_before_views(proto: onnx.ModelProto, gm: torch.fx.GraphModule) -> None:
    """Returns each graph output that a reshape ends (``_unsafe_view`` of a matrix
    product: an LM head's logits) as the reshape's input, and lists the ONNX shapes in
    the model's metadata, in place: the runner views ORT's tensor to the FX value's
    shape, which costs nothing, where ONNX Runtime copies a graph output that a reshape
    produces (GPT-2's [512, 50257] logits: 103 MB a step). Only where both shapes are
    static and the reshape's input is computed in the graph and is no other output. The
    reshape stays in the graph, unused (ONNX Runtime's views free): the lab's debug
    models still find the FX node's value under its name."""
    values, _ = fx_output_values(gm)
    graph = proto.graph
    if len(values) != len(graph.output):
        return
    producers = {out: node for node in graph.node for out in node.output}
    infos = {info.name: info for info in graph.value_info}
    outside = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    taken = {info.name for info in graph.output}
    shapes: dict[str, list[list[int]]] = {}
    for position, value in enumerate(values):
        info = graph.output[position]
        node = producers.get(info.name)
        if (
            not isinstance(value, torch.Tensor)
            or not all(isinstance(d, int) for d in value.shape)
            or node is None
            or node.domain not in ("", "ai.onnx")
            or node.op_type not in _VIEW_OPS
            or not node.input
        ):
            continue
        source = node.input[0]
        before = infos.get(source)
        dims = None if before is None else _static_dims(before)
        if (
            source in outside
            or source in taken
            or before is None
            or dims is None
            or math.prod(dims) != value.numel()
            or before.type.tensor_type.elem_type != info.type.tensor_type.elem_type
        ):
            continue
        taken.add(source)
        info.CopyFrom(before)
        shapes[source] = [list(dims), list(value.shape)]
    if shapes:
        entry = proto.metadata_props.add()
        entry.key = _runtime.VIEW_KEY
        entry.value = json.dumps(shapes)


def export_partition(
    gm: torch.fx.GraphModule,
    *,
    name: str,
    args: Sequence[Any],
    static: bool,
    frozen: Mapping[int, torch.Tensor],
    transforms: Sequence[Callable[[onnx.ModelProto], None]],
    opset_version: int | None = None,
    registry: Any = None,
    custom_translations: Sequence[tuple[Any, Callable[..., Any]]] = (),
    fuse: bool | None = False,
    optimize: bool = False,
) -> ExportedModel:
    """Exports one partition for the input schema of ``args``.

    Args:
        gm: The partition's sub-GraphModule (not modified).
        name: Graph name for the ONNX model.
        args: The call's inputs (used for static shapes and the re-tracing fallback).
        static: Export concrete shapes instead of Dynamo's symbols.
        frozen: Placeholder positions to bake in as initializers, with their tensors.
        transforms: ``pre_ort_model_transforms``, applied in order.
        opset_version: ONNX opset to export with; ``None`` is the exporter's default.
        registry: The exporter's op registry to translate with (``None``: the default
            one for ``opset_version``; a backend with ``custom_translations`` has its own).
        custom_translations: ``(op, onnxscript function)`` pairs, for the re-tracing
            fallback (the direct translation finds them in ``registry``).
        fuse: Rewrite the model with ONNX Runtime's fused operators: ``None`` where it
            has a pattern's first op, keeping the model as it was before (to be timed
            against the fused one) unless ``transforms`` are given; ``True`` always,
            ``False`` never (the re-tracing fallback never does).
        optimize: Run onnxscript's optimizer on the translated model (an inference
            partition: see ``_passes.OnnxscriptOptimizer``).

    Raises:
        ExportError: neither the direct translation nor re-tracing produced a model, or
            a transform raised.
    """
    timings: dict[str, float] = {}
    passes: dict[str, bool] = {}
    method: records.ExportMethod = "direct"
    direct_error: Exception | None = None
    proto = None
    fused = False
    fusions: dict[str, int] = {}
    fusion_note = ""
    unfused = None
    if _torch_private.DIRECT_TRANSLATION_ERROR is None:
        try:
            with _TRANSLATION_LOCK:
                translation = _Translation(
                    gm, name, args if static else None, frozen, opset_version, registry
                )
                proto, fused, fusions, fusion_note, unfused = _translate_direct(
                    translation,
                    fuse=fuse,
                    optimize=optimize,
                    timings=timings,
                    passes=passes,
                )
        except Exception as e:
            direct_error = e
    if proto is None:
        method = "retrace"
        try:
            if frozen:
                raise errors.ExportError("frozen parameters need the direct translation")
            with _TRANSLATION_LOCK:
                proto = _export_retrace(gm, args, opset_version, custom_translations, timings)
            # Only the clean-up that makes a number right (see _passes): the rest were
            # measured on the direct translation's models.
            proto, changed = _passes.scatter_nd_as_elements_proto(proto)
            passes["ScatterNDAsElements"] = changed
        except Exception as e:
            why = direct_error or _torch_private.DIRECT_TRANSLATION_ERROR
            raise errors.ExportError(
                f"could not export partition {name!r} to ONNX: direct translation failed "
                f"({errors.describe(why) if isinstance(why, Exception) else why}); "
                f"re-tracing failed ({errors.describe(e)})"
            ) from (direct_error or e)

    _outputs_in_memory_order(proto, gm)
    _outputs_before_views(proto, gm)
    if unfused is not None:
        _outputs_in_memory_order(unfused, gm)
        _outputs_before_views(unfused, gm)
    start = time.perf_counter()
    for transform in transforms:
        try:
            transform(proto)
        except Exception as e:
            raise errors.ExportError(
                f"pre_ort_model_transforms: {getattr(transform, '__name__', transform)!s} "
                f"raised {errors.describe(e)} on partition {name!r}"
            ) from e
    timings["transforms"] = time.perf_counter() - start
    return ExportedModel(
        proto=proto,
        method=method,
        timings=timings,
        frozen_inputs=tuple(sorted(frozen)),
        fused=fused,
        fusions=fusions,
        fusion_note=fusion_note,
        # Transforms change the model on purpose; they are applied to one model only.
        unfused=None if transforms else unfused,
        passes=passes,
    )
