"""Debug copies of a partition's ONNX model: every intermediate value as an extra output.

The exporter stamps each ONNX node with the FX node it came from (provenance metadata
``pkg.torch.onnx.fx_node``) and usually names the value an FX node becomes after it.
:func:`onnx_values` matches FX nodes to ONNX values that way; :func:`run_debug_model`
runs a copy of the session's model that also returns those values, on the very inputs the
partition received, in a session made the backend's way (same providers and session
options, zero-copy hand-off: :func:`ortlab.backend.create_session`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx
import onnx.numpy_helper
import onnx.shape_inference
import torch

import ortlab.backend
from ortlab import _html
from ortlab.backend import _runtime, records

if TYPE_CHECKING:
    from ortlab.backend import OrtBackendOptions
    from ortlab.numerics._runner import Capture


def onnx_values(
    model: onnx.ModelProto, fx_names: Sequence[str]
) -> tuple[dict[str, str], dict[str, list[str]], set[str]]:
    """FX node name -> ONNX value name, FX node name -> stamped ONNX op types, and the FX
    nodes stamped on an ONNX Runtime fused operator.

    The exporter names the value an FX node becomes after the node; when it did not, the
    last ONNX node stamped with the FX node produces it — unless that node is a fused
    operator (:func:`ortlab.backend.records.is_fused_operator`): it stands for several FX
    nodes and its output is none of theirs (a linear layer's FusedMatMul whose bias went
    into the SkipLayerNormalization after it). A fused operator that kept an FX node's
    name on its output (BiasGelu's ``gelu``, SkipLayerNormalization's ``getitem``)
    computes that node's value, and is compared as it.
    """
    produced: set[str] = set()
    last_stamped: dict[str, onnx.NodeProto] = {}
    ops: dict[str, list[str]] = {}
    fused: set[str] = set()
    for node in model.graph.node:
        produced.update(o for o in node.output if o)
        fx = records.fx_node_of(node)
        if fx is not None:
            last_stamped[fx] = node
            ops.setdefault(fx, []).append(node.op_type)
            if records.is_fused_operator(node):
                fused.add(fx)
    mapping: dict[str, str] = {}
    for name in fx_names:
        stamped = last_stamped.get(name)
        if name in produced:
            mapping[name] = name
        elif stamped is not None and stamped.output and not records.is_fused_operator(stamped):
            mapping[name] = stamped.output[0]
    return mapping, ops, fused


def _element_types(graph: onnx.GraphProto) -> dict[str, int]:
    """The element type of every value the graph types."""
    types: dict[str, int] = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        elem = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") else 0
        if elem:
            types.setdefault(info.name, elem)
    return types


def _debug_model(model: onnx.ModelProto, values: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns ``values`` (intermediates) as graph outputs:
    those whose element type the model, or ONNX's shape inference, knows (an output
    without one cannot be handed to PyTorch; its FX node is then "not computed")."""
    debug = onnx.ModelProto()
    debug.CopyFrom(model)
    # Its values are ONNX Runtime's as the model computes them, by ONNX name: an output
    # the partition's runner views to its FX shape is returned unviewed.
    views = [p for p in debug.metadata_props if p.key == _runtime.VIEW_KEY]
    for prop in views:
        debug.metadata_props.remove(prop)
    graph = debug.graph
    existing = {o.name for o in graph.output}
    wanted = [name for name in dict.fromkeys(values) if name not in existing]
    types = _element_types(model.graph)
    if any(name not in types for name in wanted):
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph
        except Exception:
            inferred = None  # ONNX Runtime's contrib ops can be unknown to ONNX
        if inferred is not None:
            types = {**_element_types(inferred), **types}
    for name in wanted:
        if name in types:
            out = graph.output.add()
            out.name = name
            # Element type only: shapes may be symbolic or changed by a transform.
            out.type.tensor_type.elem_type = types[name]
    return debug


def model_inputs(capture: Capture, model: onnx.ModelProto) -> list[Any]:
    """The captured partition inputs in the order of the model's inputs (frozen
    parameters are initializers, not inputs)."""
    placeholders = capture.partition.input_names
    by_name = dict(zip(placeholders, capture.inputs))
    frozen = capture.session.frozen_inputs
    unnamed = [v for n, v in zip(placeholders, capture.inputs) if n not in frozen]
    # The exporter names inputs after placeholders; else they are the non-frozen ones in
    # order.
    return [
        by_name[info.name] if info.name in by_name else unnamed[position]
        for position, info in enumerate(model.graph.input)
    ]


def run_debug_model(
    capture: Capture, values: Sequence[str], options: OrtBackendOptions
) -> tuple[dict[str, torch.Tensor], str]:
    """Runs the debug copy on the captured inputs; returns values by ONNX name and a note.

    The session uses the providers of the session that ran (``capture.session``) and the
    backend's ``options`` (session options, provider options).
    """
    record = capture.session
    model = _debug_model(record.model, values)
    session = ortlab.backend.create_session(
        model,
        like=model_inputs(capture, model),
        options=options,
        providers=record.providers,
    )
    results = session.run(model_inputs(capture, model))
    out = {n: r.detach().cpu() for n, r in zip(session.output_names, results)}
    # The debug copy must reproduce what ORT returned, or its intermediates mean little
    # (extra outputs can stop a fusion and change rounding).
    worst = 0.0
    for name, got in zip(record.output_names, capture.outputs):
        mine = out.get(name)
        if mine is not None and isinstance(got, torch.Tensor) and mine.shape == got.shape:
            if got.is_floating_point():
                d = (mine.double() - got.detach().cpu().double()).abs()
                d = d[torch.isfinite(d)]
                worst = max(worst, float(d.max()) if d.numel() else 0.0)
    note = ""
    if worst > 0:
        note = (
            f"the debug model (intermediates as outputs) differs from the ORT run by up to "
            f"{_html.number(worst)} at the partition outputs (ORT fused differently)"
        )
    return out, note


def frozen_initializers(model: onnx.ModelProto, names: Sequence[str]) -> dict[str, Any]:
    """The frozen parameters ``names`` as the model holds them (its initializers)."""
    wanted = set(names)
    return {
        init.name: torch.from_numpy(onnx.numpy_helper.to_array(init).copy())
        for init in model.graph.initializer
        if init.name in wanted
    }
