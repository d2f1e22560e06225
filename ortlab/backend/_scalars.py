"""Python numbers and dtypes that torchlib's translations get wrong, rewritten in the
partition's ATen graph before export (after :mod:`_rewrites`; the same copy-on-write
contract: a rewritten copy, or the graph itself when nothing applies).

# NOTE: ``arange``. PyTorch infers its dtype from all its bounds (``arange(1, 2.5)`` is
# float32); torchlib's translation from the start alone (it made int64 ``[1, 2]``), so
# every ``arange`` gets its result's dtype written out. The translation is also a Range
# in float32 whatever the dtype, which counts the elements in float32 where PyTorch
# counts in double (``arange(2.5, -1, -0.7)``: 6 elements for eager's 5): a fractional
# ``arange`` of known length is ``start + i * step`` over the integers ``i``, in
# float64, cast.
#
# Python numbers in a tensor argument. Decompositions can leave a number where the
# op's schema takes a tensor: ``1.0 - mask`` is ``rsub.Scalar(mask, 1.0)``, which
# torch's decomposition turns into ``sub.Tensor(1.0, mask)``. The exporter's type-promotion
# pass re-checks the node against the schema and refuses it ("Cannot find a compatible
# OpOverload for aten.sub"), so the whole partition was bisected (XLNet's
# ``1.0 - attention_mask`` with an int64 mask). The number becomes a 0-d tensor of its
# promoted dtype, which promotes as the number did (a 0-d tensor does not outrank a
# dimensioned tensor of its own category):
#
#   before                      after
#   sub.Tensor(1.0, mask:i64)   sub.Tensor(scalar_tensor(1.0, float32), mask:i64)
#
# Rounding integers. ``floor``/``ceil``/``round``/``trunc`` of an integer (or bool) tensor
# return it unchanged in PyTorch; ONNX's Floor... take floats only. They become a copy.
#
# Reductions in their result's dtype. ``x.mean(-1, dtype=torch.float32)`` of an integer
# tensor, ``x.sum(dtype=...)`` and the sum of an int32 or bool tensor (an int64 result)
# compute in the result's dtype in PyTorch; torchlib's
# translations reduce in the input's dtype and cast the result, so an integer mean was
# truncated (the mean of [3, 4, 4] came back 3.0), an int32 sum overflowed where PyTorch's
# int64 does not, and a float16 sum accumulated in float16. The input is cast first (a
# mean to float16/bfloat16 to float32: PyTorch's CPU mean rounds once, at the end; a
# sum to a small integer type or bool is left as it is); ``dtype`` stays:
#
#   before                                 after
#   mean.dim(x:i64, [-1], dtype=f32)       mean.dim(_to_copy(x, f32), [-1], dtype=f32)
#
# int32 indices. PyTorch indexes with int32 tensors as with int64 ones (``x[i]``,
# ``x[i] = v``, ``index_put``; flex attention's block masks are int32); torchlib passes
# them to GatherND / ScatterND, which take int64 only, and ONNX Runtime refused the
# model ("Type 'tensor(int32)' of input parameter ... of operator (GatherND) is
# invalid"): the partition was split around the node. They are cast to int64 first:
#
#   before                        after
#   index.Tensor(x, [i:i32])      index.Tensor(x, [_to_copy(i, int64)])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ortlab.backend import _accurate, _export, _rewrites, _torch_private


def for_onnx(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with this module's rewrites applied: a rewritten copy, or
    ``graph_module`` itself when none applies (it is never modified)."""
    if not any(
        _implicit_factory_dtype(n)
        or _fractional_arange(n)
        or _numbers_in_tensor_slots(n)
        or _rounds_integers(n)
        or _int32_indices(n)
        or _negative_index(n)
        or _reduces_in_input_dtype(n)
        for n in graph_module.graph.nodes
    ):
        return graph_module
    rewritten = _export.copy_graph_module(graph_module)
    reductions_in_result_dtype(rewritten)
    explicit_factory_dtypes(rewritten)
    numbers_as_tensors(rewritten)
    integer_rounding_as_copies(rewritten)
    int32_indices_as_int64(rewritten)
    negative_indices_out_of_range(rewritten)
    return rewritten


# -- reductions in their result's dtype ---------------------------------------------------

_REDUCTIONS_WITH_DTYPE = frozenset(
    {
        torch.ops.aten.mean.dim,
        torch.ops.aten.sum.default,
        torch.ops.aten.sum.dim_IntList,
    }
)
"""Ops whose result dtype (``dtype=``, or int64 for an integer sum) PyTorch computes in,
and whose translation computes in the input's dtype and casts the result."""


_NARROW_FLOATS = frozenset({torch.float16, torch.bfloat16})


def _reduces_in_input_dtype(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype a reduction's input is cast to, when its translation would reduce in
    another one than PyTorch (``None``: left alone)."""
    if node.op != "call_function" or node.target not in _REDUCTIONS_WITH_DTYPE:
        return None
    source, result = (
        node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None,
        node.meta.get("val"),
    )
    if not (isinstance(source, torch.Tensor) and isinstance(result, torch.Tensor)):
        return None
    if source.dtype == result.dtype or source.is_complex() or result.is_complex():
        return None
    if result.dtype.is_floating_point:
        # PyTorch's CPU mean to float16/bfloat16 sums in float32 and rounds once
        narrow_mean = node.target is torch.ops.aten.mean.dim and result.dtype in _NARROW_FLOATS
        wide = torch.float32 if narrow_mean else result.dtype
    elif result.dtype == torch.int64:  # an integer sum (or sum(dtype=torch.int64))
        wide = torch.int64
    else:  # sum(dtype=torch.uint8/bool...): the translation's cast after is PyTorch's
        return None
    if source.dtype == wide or (wide != result.dtype and "dtype" not in node.kwargs):
        return None  # (the translation's own cast must bring the result back)
    return wide


def reductions_in_result_dtype(graph_module: torch.fx.GraphModule) -> int:
    """Casts the input of each reduction that PyTorch computes in another dtype than
    its input's to that dtype, in place (its ``dtype`` argument stays: the result's);
    returns how many nodes changed."""
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        dtype = _reduces_in_input_dtype(node)
        if dtype is None:
            continue
        node.args = (_cast_before(graph, node, node.args[0], dtype), *node.args[1:])
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


def _cast_before(
    graph: torch.fx.Graph, node: torch.fx.Node, value: Any, dtype: torch.dtype
) -> torch.fx.Node:
    """``value`` cast to ``dtype`` (``_to_copy``), computed just before ``node``."""
    with graph.inserting_before(node):
        return _rewrites.add_node(
            graph, node, torch.ops.aten._to_copy.default, (value,), {"dtype": dtype}
        )


# -- int32 indices --------------------------------------------------------------------------

_INDEXING = frozenset(
    {
        torch.ops.aten.index.Tensor,
        torch.ops.aten._unsafe_index.Tensor,
        torch.ops.aten.index_put.default,
        torch.ops.aten._unsafe_index_put.default,
    }
)
"""Ops whose second argument is a list of optional index tensors."""


def _int32_indices(node: torch.fx.Node) -> list[int]:
    """Positions, in an indexing node's list of indices, of the int32 tensors."""
    if node.op != "call_function" or node.target not in _INDEXING or len(node.args) < 2:
        return []
    indices = node.args[1]
    if not isinstance(indices, (list, tuple)):
        return []
    values = [i.meta.get("val") if isinstance(i, torch.fx.Node) else None for i in indices]
    return [
        i
        for i, value in enumerate(values)
        if isinstance(value, torch.Tensor) and value.dtype == torch.int32
    ]


def int32_indices_as_int64(graph_module: torch.fx.GraphModule) -> int:
    """Casts the int32 index tensors of ``index``/``index_put`` (and their unsafe
    forms) to int64, in place (the same elements: PyTorch indexes with both alike);
    returns how many nodes changed."""
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        positions = _int32_indices(node)
        if not positions:
            continue
        indices = list(node.args[1])  # type: ignore[arg-type]
        for i in positions:
            indices[i] = _cast_before(graph, node, indices[i], torch.int64)
        node.args = (node.args[0], indices, *node.args[2:])
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


# -- negative indices where PyTorch takes none -----------------------------------------

_aten = torch.ops.aten
_NON_NEGATIVE_INDEX = {
    _aten.embedding.default: 1,
    _aten.index_select.default: 2,
    _aten.gather.default: 2,
    _aten.scatter.src: 2,
    _aten.scatter.value: 2,
    _aten.scatter.reduce: 2,
    _aten.scatter.value_reduce: 2,
    _aten.scatter_add.default: 2,
    _aten.scatter_reduce.two: 2,
}
"""Ops whose index PyTorch rejects when negative, and its position. ONNX's Gather,
GatherElements and ScatterElements count a negative index from the end."""


def _negative_index(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _NON_NEGATIVE_INDEX:
        return False
    position = _NON_NEGATIVE_INDEX[node.target]  # type: ignore[index]
    index = node.args[position] if len(node.args) > position else None
    value = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and not value.dtype.is_floating_point


def negative_indices_out_of_range(graph_module: torch.fx.GraphModule) -> int:
    """Replaces, in place, the negative elements of the index of each op that PyTorch
    refuses them for (:data:`_NON_NEGATIVE_INDEX`) with ``_accurate.OUT_OF_RANGE``: an
    ``embedding`` of -100 (labels copied into ``input_ids``) raised in eager and read
    the 100th row from the end through ONNX Runtime. Returns how many nodes changed."""
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        if not _negative_index(node):
            continue
        position = _NON_NEGATIVE_INDEX[node.target]  # type: ignore[index]
        index = node.args[position]
        with graph.inserting_before(node):
            negative = _rewrites.add_node(graph, node, _aten.lt.Scalar, (index, 0))
            beyond = _rewrites.add_node(
                graph, node, _aten.full_like.default, (index, _accurate.OUT_OF_RANGE)
            )
            checked = _rewrites.add_node(
                graph, node, _aten.where.self, (negative, beyond, index)
            )
        args = list(node.args)
        args[position] = checked
        node.args = tuple(args)
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


# -- Python numbers in tensor arguments ---------------------------------------------------


def _numbers_in_tensor_slots(node: torch.fx.Node) -> list[int]:
    """Positions of the Python numbers the node passes where its schema takes a tensor,
    when no overload of the op takes them there (``sub.Tensor(1.0, mask)``, left by the
    decomposition of ``rsub``; not ``add.Tensor(x, 2)``, which is ``add.Scalar``'s)."""
    if node.op != "call_function" or not _torch_private.is_op_overload(node.target):
        return []
    formals = node.target._schema.arguments
    positions = [
        i
        for i, (arg, formal) in enumerate(zip(node.args, formals))
        if isinstance(arg, (bool, int, float)) and isinstance(formal.type, torch.TensorType)
    ]
    if not positions:
        return []
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _rewrites.fake_value)
    packet = node.target.overloadpacket
    if any(
        _torch_private.schema_accepts(getattr(packet, name), args, kwargs)
        for name in packet.overloads()
    ):
        return []  # an overload takes the numbers as they are
    return positions


def numbers_as_tensors(graph_module: torch.fx.GraphModule) -> int:
    """Replaces, in place, each Python number passed where the schema takes a tensor by a
    0-d CPU tensor of the dtype PyTorch promotes it to (``scalar_tensor(1.0, float32)`` next
    to an int64 tensor, ``scalar_tensor(2, uint8)`` next to a uint8 one); returns how many
    nodes changed. The node's result dtype stays: a 0-d tensor promotes as the number."""
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        positions = _numbers_in_tensor_slots(node)
        if not positions:
            continue
        tensors = [_rewrites.fake_value(a) for a in node.all_input_nodes]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        args = list(node.args)
        for i in positions:
            dtype = _torch_private.promoted_dtype(args[i], *tensors)
            with graph.inserting_before(node):
                args[i] = _rewrites.add_node(
                    graph,
                    node,
                    torch.ops.aten.scalar_tensor.default,
                    (args[i],),
                    # On the CPU whatever the graph's device, as PyTorch wraps numbers:
                    # every op takes a CPU 0-d tensor beside tensors of any device, and
                    # prims (no broadcasting) take no other 0-d tensor.
                    {"dtype": dtype, "device": torch.device("cpu")},
                )
        node.args = tuple(args)
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


# -- rounding integers ----------------------------------------------------------------------

_ROUNDINGS = frozenset(
    {
        torch.ops.aten.floor.default,
        torch.ops.aten.ceil.default,
        torch.ops.aten.round.default,
        torch.ops.aten.trunc.default,
    }
)


def _rounds_integers(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _ROUNDINGS or not node.args:
        return False
    value = _rewrites.fake_value(node.args[0])
    return (
        isinstance(value, torch.Tensor)
        and not value.dtype.is_floating_point
        and not value.dtype.is_complex
    )


def integer_rounding_as_copies(graph_module: torch.fx.GraphModule) -> int:
    """Turns ``floor``/``ceil``/``round``/``trunc`` of integer or bool tensors, which
    PyTorch returns unchanged, into ``clone`` (ONNX's Floor, Ceil, Round take floats
    only), in place; returns how many nodes changed."""
    changed = 0
    for node in graph_module.graph.nodes:
        if _rounds_integers(node):
            node.target = torch.ops.aten.clone.default
            node.args, node.kwargs = node.args[:1], {}
            changed += 1
    if changed:
        graph_module.recompile()
    return changed


# -- arange's dtype -------------------------------------------------------------------------

_ARANGES = frozenset(
    {
        torch.ops.aten.arange.default,
        torch.ops.aten.arange.start,
        torch.ops.aten.arange.start_step,
    }
)


_FACTORIES = _ARANGES | frozenset(
    {
        torch.ops.aten.full.default,
        torch.ops.aten.zeros.default,
        torch.ops.aten.ones.default,
        torch.ops.aten.scalar_tensor.default,
        torch.ops.aten.linspace.default,
        torch.ops.aten.logspace.default,
        torch.ops.aten.empty.memory_format,
        torch.ops.aten.eye.default,
        torch.ops.aten.eye.m,
    }
)
"""Ops that make a tensor of the default dtype when given none."""


def _implicit_factory_dtype(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target in _FACTORIES
        and node.kwargs.get("dtype") is None
        and isinstance(node.meta.get("val"), torch.Tensor)
    )


def explicit_factory_dtypes(graph_module: torch.fx.GraphModule) -> int:
    """Gives every ``arange`` (and ``ones``, ``zeros``, ``full``... :data:`_FACTORIES`)
    without a ``dtype`` its result's, and writes a fractional ``arange`` as
    ``start + i * step`` (:func:`_fractional_arange`), in place; returns how many
    changed. PyTorch infers arange's dtype from all the bounds (``arange(1, 2.5)`` is
    float32), torchlib's translation from the start alone (it made int64 ``[1, 2]``);
    the other factories take the default dtype, which torchlib's translations take to be
    float32 (under ``torch.set_default_dtype(torch.float64)`` ONNX Runtime refused
    ``ones(5)``: declared double, made float)."""
    changed = 0
    graph = graph_module.graph
    for node in list(graph.nodes):
        if _fractional_arange(node):
            _arange_by_index(graph, node)
        elif _implicit_factory_dtype(node):
            node.kwargs = {**node.kwargs, "dtype": node.meta["val"].dtype}
        else:
            continue
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


def _arange_args(node: torch.fx.Node) -> tuple[Any, Any, Any]:
    args: Any = node.args
    if node.target is torch.ops.aten.arange.default:
        return 0, args[0], 1
    if node.target is torch.ops.aten.arange.start:
        return args[0], args[1], 1
    return args[0], args[1], args[2] if len(args) > 2 else 1


def _fractional_arange(node: torch.fx.Node) -> bool:
    """A floating ``arange`` of known length with a fractional bound or step.
    torchlib's translation is a Range in float32 (whatever the dtype), which counts the
    elements in float32 where PyTorch counts in double: ``arange(2.5, -1, -0.7)`` had 6
    elements for eager's 5."""
    value = node.meta.get("val")
    return (
        node.op == "call_function"
        and node.target in _ARANGES
        and isinstance(value, torch.Tensor)
        and value.dtype.is_floating_point
        and isinstance(value.shape[0], int)
        and all(isinstance(a, (int, float)) for a in _arange_args(node))
        and any(isinstance(a, float) and not a.is_integer() for a in _arange_args(node))
    )


def _arange_by_index(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Replaces a fractional ``arange`` by ``start + i * step`` over the integers
    ``i < length`` (the length its fake tensor has), in float64, cast to its dtype: as
    PyTorch computes it."""
    aten, prims = torch.ops.aten, torch.ops.prims
    start, _, step = _arange_args(node)
    value = node.meta["val"]
    with graph.inserting_before(node):
        index = _rewrites.add_node(
            graph,
            node,
            aten.arange.default,
            (value.shape[0],),
            {"dtype": torch.int64, "device": value.device},
        )
        wide = _rewrites.add_node(
            graph, node, prims.convert_element_type.default, (index, torch.float64)
        )
        scaled = _rewrites.add_node(graph, node, aten.mul.Tensor, (wide, float(step)))
        shifted = _rewrites.add_node(graph, node, aten.add.Tensor, (scaled, float(start)))
        result = _rewrites.add_node(
            graph, node, prims.convert_element_type.default, (shifted, value.dtype)
        )
    node.replace_all_uses_with(result)
    graph.erase_node(node)
