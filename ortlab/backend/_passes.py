"""ONNX graph clean-ups ortlab applies to every exported partition (onnx-ir passes).

# NOTE: why these exist. AOTAutograd and make_fx decompose ``aten.linear`` into
# ``t(weight)`` + ``addmm``, which torchlib translates to ``Transpose`` + ``Gemm``. With
# weights passed as graph inputs (the default; see ``freeze_parameters``) ONNX Runtime
# cannot constant-fold that Transpose, and its own Transpose->Gemm fusion left the first
# one of a GELU MLP in place: every call then copied the whole weight matrix (4 MB for a
# 512x2048 layer; ~20% of the ORT time of that model). Gemm's ``transA``/``transB`` do the
# same for free, which is what ``torch.onnx.export`` produces for ``linear`` directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortlab.backend import records

if TYPE_CHECKING:
    import onnx_ir as ir

_GEMM_TRANSPOSE_ATTRS = ((0, "transA"), (1, "transB"))


def _note_folded(into: ir.Node, folded: ir.Node) -> None:
    """Keeps provenance: ``into`` now also stands for the FX node ``folded`` came from."""
    name = records.fx_node_name_in(folded.metadata_props.get(records.FX_NODE_KEY, ""))
    if name is None:
        return
    earlier = into.metadata_props.get(records.FOLDED_FX_NODES_KEY, "")
    names = [*filter(None, earlier.split(",")), name]
    into.metadata_props[records.FOLDED_FX_NODES_KEY] = ",".join(names)


def _is_matrix_transpose(node: ir.Node) -> bool:
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return False
    perm = node.attributes.get("perm")
    if perm is not None:
        return list(perm.as_ints()) == [1, 0]
    shape = node.inputs[0].shape if node.inputs and node.inputs[0] is not None else None
    return shape is not None and len(shape) == 2  # no perm: reverse the dims


def fold_transpose_into_gemm(model: ir.Model) -> int:
    """Replaces ``Gemm(Transpose(A), ...)`` / ``Gemm(..., Transpose(B))`` by Gemm with
    ``transA`` / ``transB`` flipped, where the transposed value feeds nothing else.

    Returns the number of Transpose nodes removed.
    """
    import onnx_ir as ir

    graph = model.graph
    removed = 0
    for node in list(graph):
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx"):
            continue
        for position, attr in _GEMM_TRANSPOSE_ATTRS:
            value = node.inputs[position]
            if value is None:
                continue
            producer = value.producer()
            if producer is None or producer.graph is not graph:
                continue
            if not _is_matrix_transpose(producer):
                continue
            if len(value.uses()) != 1 or value.is_graph_output():
                continue
            current = node.attributes.get(attr)
            flipped = 0 if current is not None and current.as_int() else 1
            node.attributes[attr] = ir.AttrInt64(attr, flipped)
            node.replace_input_with(position, producer.inputs[0])
            _note_folded(node, producer)
            graph.remove(producer, safe=True)
            removed += 1
    return removed
