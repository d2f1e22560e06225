"""ONNX graph clean-ups ortlab applies to every exported partition, as onnx-ir passes
run in one ``Sequential`` (:class:`CleanUps`) whose results the session records.

# NOTE: why these exist. AOTAutograd and make_fx decompose ``aten.linear`` into
# ``t(weight)`` + ``addmm``, which torchlib translates to ``Transpose`` + ``Gemm``. With
# weights passed as graph inputs (the default; see ``freeze_parameters``) ONNX Runtime
# cannot constant-fold that Transpose, and its own Transpose->Gemm fusion left the first
# one of a GELU MLP in place: every call then copied the whole weight matrix (4 MB for a
# 512x2048 layer; ~20% of the ORT time of that model). Gemm's ``transA``/``transB`` do the
# same for free, which is what ``torch.onnx.export`` produces for ``linear`` directly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from ortlab.backend import _fusions, records

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

_GEMM_TRANSPOSE_ATTRS = ((0, "transA"), (1, "transB"))


def _note_folded(into: ir.Node, folded: ir.Node) -> None:
    """Keeps provenance: ``into`` now also stands for the FX node ``folded`` came from."""
    name = records.fx_node_name_in(folded.metadata_props.get(records.FX_NODE_KEY, ""))
    if name is not None:
        _note_folded_name(into, name)


def _note_folded_name(into: ir.Node, name: str) -> None:
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


# NOTE: why ``matmul_over_leading_dims`` exists. ``aten.linear`` / ``aten.matmul`` on an
# N-D input are composite: the lowering turns them into ``view(x, [B*S, K])`` + ``mm`` /
# ``addmm`` + ``view(out, [B, S, N])``. With symbolic batch and sequence sizes each of the
# two views costs a Reshape plus the shape arithmetic feeding it (Shape, Gather, Mul,
# Concat), and the 2-D Gemm in between hides the pattern ORT's transformer fusions look for
# (MatMul + Add on the 3-D activation). ONNX's MatMul broadcasts over leading dims, which is
# what ``torch.onnx.export`` emits for ``linear``: measured on the corpus encoders it
# halves the Reshapes and cuts 3-13% of the ORT run.


def _same_dim(a: object, b: object) -> bool:
    """Two dims known to be equal: equal ints, or one named symbolic dim."""
    import onnx_ir as ir

    if isinstance(a, ir.SymbolicDim) or isinstance(b, ir.SymbolicDim):
        return (
            isinstance(a, ir.SymbolicDim)
            and isinstance(b, ir.SymbolicDim)
            and a.value is not None
            and a.value == b.value
        )
    return isinstance(a, int) and a == b


def _flattened_matmul(node: ir.Node) -> tuple[ir.Node, ir.Node] | None:
    """``(reshape_in, reshape_out)`` when ``node`` (a 2-D Gemm/MatMul) computes a linear map
    on the last dim of an N-D value flattened by ``reshape_in`` and ``reshape_out`` restores
    the same leading dims, else None. Shapes must prove it: every leading dim equal."""
    graph = node.graph
    flat = node.inputs[0]
    if flat is None or len(flat.uses()) != 1 or flat.is_graph_output():
        return None
    reshape_in = flat.producer()
    if reshape_in is None or reshape_in.graph is not graph or reshape_in.op_type != "Reshape":
        return None
    out = node.outputs[0]
    users = list(out.uses())
    if len(users) != 1 or out.is_graph_output():
        return None
    reshape_out = users[0][0]
    if reshape_out.op_type != "Reshape" or reshape_out.domain not in ("", "ai.onnx"):
        return None
    x, y = reshape_in.inputs[0], reshape_out.outputs[0]
    x_shape, flat_shape = (x.shape if x else None), flat.shape
    out_shape, y_shape = out.shape, y.shape
    if x_shape is None or flat_shape is None or out_shape is None or y_shape is None:
        return None
    if len(flat_shape) != 2 or len(out_shape) != 2 or len(x_shape) < 3:
        return None
    if len(y_shape) != len(x_shape) or not _same_dim(x_shape[-1], flat_shape[1]):
        return None
    if not _same_dim(y_shape[-1], out_shape[1]):
        return None
    if not all(_same_dim(a, b) for a, b in zip(x_shape[:-1], y_shape[:-1])):
        return None
    return reshape_in, reshape_out


def _plain_gemm(node: ir.Node) -> bool:
    def attr(name: str, default: float) -> float:
        value = node.attributes.get(name)
        return default if value is None else value.value  # type: ignore[no-any-return]

    if attr("transA", 0) or attr("alpha", 1.0) != 1.0:
        return False
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is None:
        return True
    # Only a bias over the output features broadcasts the same way on the N-D result.
    return attr("beta", 1.0) == 1.0 and bias.shape is not None and len(bias.shape) == 1


def matmul_over_leading_dims(model: ir.Model) -> int:
    """Replaces ``Reshape -> Gemm/MatMul -> Reshape`` (a linear map flattened to 2-D) by an
    N-D ``MatMul`` (+ ``Add`` for a bias), when the shapes prove the two are the same.

    A ``transB`` weight becomes a ``Transpose`` feeding the MatMul, which ONNX Runtime fuses
    into its MatMul kernel for float32 (no copy of the weight per call); other dtypes keep
    such a Gemm. Returns the number rewritten.
    """
    graph = model.graph
    rewritten = 0
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Gemm", "MatMul"):
            continue
        if node.op_type == "Gemm" and not _plain_gemm(node):
            continue
        found = _flattened_matmul(node)
        if found is None:
            continue
        reshape_in, reshape_out = found
        x, weight = reshape_in.inputs[0], node.inputs[1]
        assert x is not None and weight is not None
        new_nodes: list[ir.Node] = []
        trans_b = node.attributes.get("transB")
        if node.op_type == "Gemm" and trans_b is not None and trans_b.as_int():
            if x.dtype != ir.DataType.FLOAT:
                continue  # ORT fuses the Transpose into its MatMul for float only
            transpose = ir.node("Transpose", [weight], attributes={"perm": [1, 0]})
            new_nodes.append(transpose)
            weight = transpose.outputs[0]
        matmul = ir.node("MatMul", [x, weight], metadata_props=dict(node.metadata_props))
        new_nodes.append(matmul)
        result = matmul.outputs[0]
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        if bias is not None:
            add = ir.node("Add", [result, bias], metadata_props=dict(node.metadata_props))
            new_nodes.append(add)
            result = add.outputs[0]
        old = reshape_out.outputs[0]
        result.type, result.shape = old.type, old.shape
        graph.insert_before(reshape_out, new_nodes)
        old.replace_all_uses_with(result, replace_graph_outputs=True)
        for removed in (reshape_in, reshape_out):
            _note_folded(matmul, removed)
        graph.remove([reshape_out, node, reshape_in], safe=True)  # flat had one use
        result.name = old.name
        rewritten += 1
    return rewritten


# NOTE: why ``remove_no_ops`` exists. torchlib writes some ops the same way whatever the
# operands: ``index_put`` transposes its data, its values and its result so that the
# indexed dims come first, even when they already do (perm [0, 1]); ``new_zeros`` is
# ``CastLike(ConstantOfShape(...), like)`` of a float to a float; ``slice``'s int64
# bounds are Cast to int64 (424 Casts in ResNet-18's backward, from the im2col slices);
# ``expand`` to the shape a tensor already has is an Expand (the attention of
# ``scaled_dot_product_attention``'s decomposition, four a layer). In an inference
# partition onnxscript's optimizer removes them; a training graph does not go through it
# (see ``OnnxscriptOptimizer``), and ONNX Runtime's CPU provider copies the tensor for
# each: an embedding's weight gradient (``embedding_dense_backward``: zeros, then
# ``_unsafe_index_put``) took two Transposes and a Cast of the whole table on every
# step: 14 ms of BERT-4l's backward session (a 30522x256 table; GPT-2's is 50257x384).
# With the views of ``_runtime``, a GPT-2 training step went from 1050 to 949 ms.


_CONSTANT_DTYPES = {
    "value_int": ir.DataType.INT64,
    "value_ints": ir.DataType.INT64,
    "value_float": ir.DataType.FLOAT,
    "value_floats": ir.DataType.FLOAT,
}


def _dtype(value: ir.Value) -> ir.DataType | None:
    """A value's dtype; a Constant's or ConstantOfShape's from its attribute (float32 for
    a ConstantOfShape without one), which the translation leaves untyped."""
    if value.dtype is not None:
        return value.dtype
    producer = value.producer()
    if producer is None or producer.domain not in ("", "ai.onnx"):
        return None
    if producer.op_type == "ConstantOfShape":
        fill = producer.attributes.get("value")
        return ir.DataType.FLOAT if fill is None else fill.as_tensor().dtype
    if producer.op_type == "Constant":
        tensor = producer.attributes.get("value")
        if tensor is not None:
            return tensor.as_tensor().dtype
        for name, dtype in _CONSTANT_DTYPES.items():
            if name in producer.attributes:
                return dtype
    return None


def _constant_ints(value: ir.Value) -> list[int] | None:
    """The integers a Constant (or an initializer) holds, or a Concat of such (how
    torchlib writes a shape from a list of ints); None if not known."""
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Concat":
        parts = [None if v is None else _constant_ints(v) for v in producer.inputs]
        if any(part is None for part in parts):
            return None
        return [i for part in parts for i in part]  # type: ignore[union-attr]
    if tensor is None and producer is not None and producer.op_type == "Constant":
        attr = producer.attributes.get("value")
        tensor = None if attr is None else attr.as_tensor()
        if attr is None and "value_ints" in producer.attributes:
            return list(producer.attributes["value_ints"].as_ints())
    if tensor is None or tensor.dtype != ir.DataType.INT64:
        return None
    return [int(v) for v in tensor.numpy().reshape(-1)]


def _no_op_input(node: ir.Node) -> ir.Value | None:
    """The input that ``node`` returns unchanged: a Transpose whose perm keeps the dims in
    order, a Cast (CastLike) to the dtype its input already has, an Expand to a constant
    shape its input's static shape already has; else None."""
    if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    if node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        if perm is None:
            return None  # no perm: the dims reversed
        order = list(perm.as_ints())
        return x if order == list(range(len(order))) else None
    if node.op_type == "Expand" and len(node.inputs) == 2 and node.inputs[1] is not None:
        target = _constant_ints(node.inputs[1])
        dims = None if x.shape is None else list(x.shape)
        if target is None or dims is None or not all(isinstance(d, int) for d in dims):
            return None
        if len(target) > len(dims):
            return None  # adds leading dims
        kept = dims[len(dims) - len(target) :]
        return x if all(t in (1, d) for t, d in zip(target, kept)) else None
    dtype = _dtype(x)
    if node.op_type == "Cast":
        to = node.attributes.get("to")
        return x if to is not None and dtype is not None and to.as_int() == dtype else None
    if node.op_type == "CastLike" and len(node.inputs) == 2 and node.inputs[1] is not None:
        like = _dtype(node.inputs[1])
        return x if dtype is not None and dtype == like else None
    return None


def remove_no_ops(model: ir.Model) -> int:
    """Removes the Transposes, Casts, CastLikes and Expands that return their input
    unchanged (see the NOTE). A graph output keeps its name: the input's producer then
    computes it under that name, where the input is computed in the graph and is no other
    output. Returns how many were removed."""
    graph = model.graph
    removed = 0
    for node in list(graph):
        x = _no_op_input(node)
        if x is None or node.graph is not graph:
            continue
        out = node.outputs[0]
        producer = x.producer()
        if out.is_graph_output():
            if producer is None or producer.graph is not graph or x.is_graph_output():
                continue
            out.replace_all_uses_with(x, replace_graph_outputs=True)
            x.name = out.name
            # A graph output needs its type (the no-op kept the type and shape).
            if x.type is None:
                x.type = out.type
            if x.shape is None:
                x.shape = out.shape
        else:
            out.replace_all_uses_with(x)
        if producer is not None:
            _note_folded(producer, node)
        graph.remove(node, safe=True)
        removed += 1
    return removed


# NOTE: why sigmoid is spelled out. ONNX Runtime's float32 Sigmoid kernel is an
# approximation: 1e-5 relative off at -5, a factor 2 at -17, and 0 below about -18
# (PyTorch: 2.1e-9 at -20). ``nn.Sigmoid`` + ``nn.BCELoss`` (DCGAN's discriminator) then
# gave a loss of 100 for a confident "fake" where eager gives 25, and a gradient of 0
# where eager's is -1. ``1 / (1 + exp(-x))`` is within 2e-7 relative down to -87 (below,
# where PyTorch's result is denormal, it is 0), at 3.3x the fused kernel's time (6.1
# against 1.9 ms on 4M elements; PyTorch 3.8 ms). Only ``aten.sigmoid``'s own Sigmoid is
# rewritten (by its FX provenance): SiLU keeps the kernel, whose error there is absolute
# (below 1e-7). The FX graph keeps one ``sigmoid`` node; its ONNX nodes all carry its
# provenance. float16 is computed in float32 and rounded once, as PyTorch does.
_SIGMOID_TARGET = "target=torch.ops.aten.sigmoid.default"


def _own_sigmoid(node: ir.Node) -> bool:
    if node.op_type != "Sigmoid" or node.domain not in ("", "ai.onnx"):
        return False
    if _SIGMOID_TARGET not in node.metadata_props.get(records.FX_NODE_KEY, ""):
        return False
    x = node.inputs[0] if node.inputs else None
    return x is not None and _dtype(x) in (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def exact_sigmoid(model: ir.Model) -> int:
    """Rewrites each ``aten.sigmoid``'s Sigmoid as ``Reciprocal(1 + Exp(-x))`` (see the
    NOTE); returns how many."""
    sigmoids = [node for node in model.graph if _own_sigmoid(node)]
    for node in sigmoids:
        _spell_out_sigmoid(node)
    return len(sigmoids)


def _spell_out_sigmoid(node: ir.Node) -> None:
    """The Sigmoid ``node`` becomes the last node of its exact spelling (it keeps its
    output's name), the new ones inserted before it with its provenance."""
    made: list[ir.Node] = []

    def add(op_type: str, inputs: list[ir.Value], **attributes: Any) -> ir.Value:
        new = ir.node(op_type, inputs, attributes=attributes or None)
        new.metadata_props.update(node.metadata_props)
        made.append(new)
        return new.outputs[0]

    x = node.inputs[0]
    assert x is not None  # _own_sigmoid read its dtype
    narrow = _dtype(x) == ir.DataType.FLOAT16
    if narrow:
        x = add("Cast", [x], to=ir.DataType.FLOAT)
    one = add("Constant", [], value=ir.tensor(1.0, dtype=ir.DataType.FLOAT))
    denominator = add("Add", [add("Exp", [add("Neg", [x])]), one])
    if narrow:  # a Cast back to float16 after the Reciprocal
        node.op_type = "Cast"
        node.attributes["to"] = ir.AttrInt64("to", ir.DataType.FLOAT16)
        node.replace_input_with(0, add("Reciprocal", [denominator]))
    else:
        node.op_type = "Reciprocal"
        node.replace_input_with(0, denominator)
    node.prepend(made)


# NOTE: why ``scatter_nd_as_elements`` exists. ONNX Runtime's CPU ``ScatterND`` with a
# reduction loses updates when indices repeat and the session has more than one
# intra-op thread (onnxruntime 1.31.1, 2 cores): 1,024 rows added into one row of a
# [2, 256] tensor came out wrong by up to 67 against a sum of scale 80, on 1 to 5 runs
# of 5-8 depending on the load, with two threads and with four; never with one. torchlib
# writes every accumulating write that way: an embedding's weight gradient
# (``embedding_dense_backward``, ``index_put(accumulate=True)``), the gradient of
# advanced indexing, ``index_add``. In a 4-layer BERT's training step (8x128 tokens, two
# threads) the gradient of ``token_type_embeddings``, whose tokens all read row 0, was
# 40% off. ``ScatterElements`` with the same reduction added correctly on every run and
# thread count, so each reducing ScatterND becomes one: the indexed dims flattened into
# one, the index of each row repeated over the row. It costs an int64 index per updated
# element.


def _int64s(values: list[int]) -> ir.Value:
    return ir.node(
        "Constant", [], attributes={"value": ir.tensor(values, dtype=ir.DataType.INT64)}
    ).outputs[0]


def _inferred_shapes(model: ir.Model) -> dict[str, ir.Shape]:
    """The shapes ONNX's shape inference gives the model's values, by name (torchlib's
    functions leave the values inside them without one)."""
    import onnx

    try:
        proto = onnx.shape_inference.infer_shapes(ir.serde.serialize_model(model))
    except Exception:  # e.g. over protobuf's 2 GiB: the ScatterNDs stay as they are
        return {}
    shapes = {}
    for info in (*proto.graph.value_info, *proto.graph.input, *proto.graph.output):
        if info.type.tensor_type.HasField("shape"):
            shapes[info.name] = ir.serde.deserialize_type_proto_for_shape(info.type)
    return {name: shape for name, shape in shapes.items() if shape is not None}


def _scatter_nd_as_elements(
    node: ir.Node, shapes: dict[str, ir.Shape]
) -> list[ir.Node] | None:
    """The nodes that compute a reducing ``ScatterND`` as a ``ScatterElements``, the
    last one's output standing for ``node``'s; ``None`` when ranks are not known."""
    data, indices, updates = node.inputs[0], node.inputs[1], node.inputs[2]
    if data is None or indices is None or updates is None:
        return None
    data_shape = data.shape or shapes.get(data.name or "")
    indices_shape = indices.shape or shapes.get(indices.name or "")
    if data_shape is None or indices_shape is None or not len(indices_shape):
        return None
    rank, depth = len(data_shape), indices_shape[-1]
    if not isinstance(depth, int) or not 1 <= depth <= rank:
        return None
    if 0 in list(data_shape):  # nothing to write into: nothing to add, no race (and
        return None  # Reshape refuses -1 beside a 0, and reads a 0 as "keep that dim")
    made: list[ir.Node] = []

    def add(op: str, inputs: list[ir.Value], **attributes: Any) -> ir.Value:
        made.append(ir.node(op, inputs, attributes=attributes))
        return made[-1].outputs[0]

    def constant(values: list[int]) -> ir.Value:
        value = _int64s(values)
        producer = value.producer()
        assert producer is not None
        made.append(producer)
        return value

    shape = add("Shape", [data])
    lead = add("Slice", [shape, constant([0]), constant([depth])])
    rest = add("Slice", [shape, constant([depth]), constant([rank])])
    # One indexed dim: ScatterElements takes the index as ScatterND does (from the end
    # when negative; out of [-size, size) an error).
    index = indices
    if depth > 1:  # row-major: the indexed dims as one
        strides = [constant([1])]
        for j in range(depth - 1, 0, -1):
            dim = add("Slice", [lead, constant([j]), constant([j + 1])])
            strides.insert(0, add("Mul", [strides[0], dim]))
        negative = add("Cast", [add("Less", [indices, constant([0])])], to=ir.DataType.INT64)
        index = add("Add", [indices, add("Mul", [negative, lead])])
        weighted = add("Mul", [index, add("Concat", strides, axis=0)])
        flat = add("ReduceSum", [weighted, constant([-1])], keepdims=1)
        # An index out of its dim must stay an error, not land in another row: such a
        # row's flat index is the count of rows, out of range for ScatterElements.
        inside = add(
            "And",
            [
                add("GreaterOrEqual", [index, constant([0])]),
                add("Less", [index, lead]),
            ],
        )
        as_int = add("Cast", [inside], to=ir.DataType.INT64)
        valid = add("ReduceMin", [as_int, constant([-1])], keepdims=1)
        count = add("Mul", [strides[0], add("Slice", [lead, constant([0]), constant([1])])])
        index = add("Where", [add("Cast", [valid], to=ir.DataType.BOOL), flat, count])
    rows = add("Concat", [constant([-1]), rest], axis=0)
    flat_updates = add("Reshape", [updates, rows])
    one_per_dim = add("Concat", [constant([-1]), constant([1] * (rank - depth))], axis=0)
    row_index = add(
        "Expand", [add("Reshape", [index, one_per_dim]), add("Shape", [flat_updates])]
    )
    scattered = add(
        "ScatterElements",
        [add("Reshape", [data, rows]), row_index, flat_updates],
        axis=0,
        reduction=node.attributes["reduction"].as_string(),
    )
    add("Reshape", [scattered, shape])
    for made_node in made:
        made_node.metadata_props.update(node.metadata_props)
    return made


def scatter_nd_as_elements(model: ir.Model) -> int:
    """Replaces each ``ScatterND`` with a reduction by the same write as a
    ``ScatterElements`` (see the NOTE above). Returns the number replaced."""
    graph = model.graph
    reducing = [
        node
        for node in graph
        if node.op_type == "ScatterND"
        and node.domain in ("", "ai.onnx")
        and node.attributes.get("reduction") is not None
        and node.attributes["reduction"].as_string() != "none"
    ]
    shapes: dict[str, ir.Shape] = {}
    if any(v is None or v.shape is None for n in reducing for v in n.inputs[:2]):
        shapes = _inferred_shapes(model)
    replaced = 0
    for node in reducing:
        made = _scatter_nd_as_elements(node, shapes)
        if made is None:
            logger.debug("reducing ScatterND %s kept (ranks unknown, or a size 0)", node.name)
            continue
        old, result = node.outputs[0], made[-1].outputs[0]
        result.type, result.shape = old.type, old.shape
        graph.insert_before(node, made)
        old.replace_all_uses_with(result, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        result.name = old.name
        replaced += 1
    return replaced


def scatter_nd_as_elements_proto(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """:func:`scatter_nd_as_elements` on a ``ModelProto`` (the re-tracing exporter's):
    the model, rewritten or as given, and whether it was rewritten."""
    if not any(
        n.op_type == "ScatterND" and any(a.name == "reduction" for a in n.attribute)
        for n in proto.graph.node
    ):
        return proto, False
    model = ir.serde.deserialize_model(proto)
    if not scatter_nd_as_elements(model):
        return proto, False
    return ir.serde.serialize_model(model), True


class ScatterNDAsElements(ir.passes.InPlacePass):
    """:func:`scatter_nd_as_elements` as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=scatter_nd_as_elements(model) > 0)


class ExactSigmoid(ir.passes.InPlacePass):
    """:func:`exact_sigmoid` as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=exact_sigmoid(model) > 0)


class RemoveNoOps(ir.passes.InPlacePass):
    """:func:`remove_no_ops` as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=remove_no_ops(model) > 0)


class FoldTransposeIntoGemm(ir.passes.InPlacePass):
    """:func:`fold_transpose_into_gemm` as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=fold_transpose_into_gemm(model) > 0)


class MatMulOverLeadingDims(ir.passes.InPlacePass):
    """:func:`matmul_over_leading_dims` as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=matmul_over_leading_dims(model) > 0)


class CleanUps(ir.passes.Sequential):
    """Every clean-up of an exported partition, in order: ``aten.sigmoid`` spelled out
    exactly, reducing ``ScatterND`` written as ``ScatterElements``, no-op transposes and
    casts removed, Gemm's transposes folded, linear maps over N-D activations as one
    MatMul, then onnx-ir's removal of unused nodes (otherwise ONNX Runtime warns about
    leftover constants).

    After a run, :attr:`modified_by` says which pass changed the model (the session's
    record keeps it: ``SessionRecord.onnx_passes``). Make one per model.
    """

    def __init__(self) -> None:
        super().__init__(
            ExactSigmoid(),
            ScatterNDAsElements(),
            RemoveNoOps(),
            FoldTransposeIntoGemm(),
            MatMulOverLeadingDims(),
            RemoveUnusedNodesPass(),
        )
        self.modified_by: dict[str, bool] = {}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.modified_by = {}
        for clean_up in self.passes:
            result = clean_up(model)
            model = result.model
            self.modified_by[type(clean_up).__name__] = result.modified
        return ir.passes.PassResult(model, modified=any(self.modified_by.values()))


# NOTE: why inference partitions go through onnxscript's optimizer. torchlib translates
# what the graph says, op by op: ``F.pad`` before a convolution (TF-style "same"
# padding) is a Pad node, ReLU6's bounds are ``CastLike`` of constants, a BatchNorm in
# eval mode a BatchNormalization node. ONNX Runtime's own optimizer does not remove
# them: on MobileNetV2 (224x224, frozen weights, 2 threads) the 52 Pads kept its NCHWc
# layout from spanning the network (35 ReorderOutput + 34 ReorderInput, 7 ms) and the
# non-constant Clip bounds blocked Conv+Clip fusion (35 Clip + 70 Cast, 3.4 ms): 14.8 ms
# against 10.1 ms for the model ``torch.onnx.export`` writes, which runs the same
# optimizer. The optimizer folds constants (inputs up to 8,192 elements: never a
# weight), pads into convolutions, BatchNorm into a frozen convolution's weights, and
# removes no-ops; graph inputs and outputs keep their names.
#
# Where it does not run: training graphs (their forward graph returns what backward
# reads, and the rewrites were measured on inference graphs only); partitions the
# fusions (``_fusions``) rewrite, which run the same optimizer first (running it twice
# cost 1.6-2.3 s more on BERT-base's first call; the unfused model they are timed
# against stays as translated); and with ``pre_ort_model_transforms``, which edit the
# model as translated (a constant, a node by its FX provenance) that it would fold away.
class OnnxscriptOptimizer(ir.passes.InPlacePass):
    """onnxscript's optimizer (constant folding and its default rewrite rules)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        from onnxscript import optimizer

        before = _op_counts(model)
        fx_before = _fx_nodes(model)
        _mark_fx_nodes(model)
        try:
            with _fusions.quiet_onnxscript(), _fusions.exact_rules():
                optimizer.optimize_ir(model)
        finally:
            _fold_marks(model)
        away = sorted(fx_before - _fx_nodes(model))
        if away:  # provenance: the lab says where they went
            model.metadata_props[records.OPTIMIZED_AWAY_KEY] = ",".join(away)
        return ir.passes.PassResult(model, modified=_op_counts(model) != before)


def _op_counts(model: ir.Model) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for node in model.graph:
        key = (node.domain, node.op_type)
        counts[key] = counts.get(key, 0) + 1
    return counts


# A rewrite rule's new node keeps the first matched node's value of each metadata key
# (a Conv that absorbed its Pad would carry the Pad's FX node only) and every key only
# some matched node has. So each node is marked with one key per FX node it stands for
# before the optimizer runs; afterwards a node's marks are the FX nodes it computes: the
# ones other than its own go to ``FOLDED_FX_NODES_KEY`` (the profile shares its time
# among them, the lab says it is inside it).
_MARK = "ortlab.fx:"


def _mark_fx_nodes(model: ir.Model) -> None:
    for node in model.graph:
        for name in _own_fx_nodes(node):
            node.metadata_props[_MARK + name] = "1"


def _fold_marks(model: ir.Model) -> None:
    for node in model.graph:
        marks = [k for k in node.metadata_props if k.startswith(_MARK)]
        names = {k[len(_MARK) :] for k in marks}
        for key in marks:
            del node.metadata_props[key]
        own = _own_fx_nodes(node)
        for name in sorted(names - own):
            _note_folded_name(node, name)


def _own_fx_nodes(node: ir.Node) -> set[str]:
    names: set[str] = set()
    name = records.fx_node_name_in(node.metadata_props.get(records.FX_NODE_KEY, ""))
    if name is not None:
        names.add(name)
    folded = node.metadata_props.get(records.FOLDED_FX_NODES_KEY, "")
    names.update(filter(None, folded.split(",")))
    return names


def _fx_nodes(model: ir.Model) -> set[str]:
    """The FX nodes the model's nodes stand for (translated from, or folded in)."""
    return {name for node in model.graph for name in _own_fx_nodes(node)}
