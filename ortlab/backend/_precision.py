"""bfloat16 and float16 arithmetic on CPU, computed in float32 where ONNX Runtime has no
kernel for the narrow type.

# NOTE: ONNX Runtime's CPU provider has few bfloat16 (and float16) kernels: no Gemm,
# MatMul, Mul, Add, Gelu, Softmax... Under ``torch.autocast("cpu", dtype=torch.bfloat16)``
# the conformance table rejected those nodes and they stayed in PyTorch, which cut a
# Qwen2 training step into 47 partitions (108 of 798 nodes in PyTorch) and a BERT
# forward into 17. PyTorch's CPU kernels for these types compute in float32 and round
# the result once (``opmath``: elementwise ops, reductions, and matrix products, which
# accumulate in float32). So each such node becomes that, spelled out:
#
#   before                          after
#   x:bf16 --> op --> y:bf16        x:bf16 -> float32 --> op --> float32 -> bf16
#
# one cast per narrow input value (shared by its consumers) and one per narrow output;
# the node's ONNX translation is then the float32 one, which the conformance table
# verifies. A number operand is rounded to the narrow type where PyTorch rounds it
# (add, sub, comparisons, remainder: ``fp16(0.1) == 0.1`` is true) and kept whole where
# it does not (mul, div: a float16 kernel would round it, so those compute in float32
# too). Elementwise ops give PyTorch's bits; reductions and matrix products may
# differ by the rounding of a different summation order, as any two float32 kernels do.
# Attention is spelled out as the math version (``_torch_private.attention_as_math``),
# which rounds its intermediates to the narrow type op by op: further from float64
# than PyTorch's CPU flash kernel (output 1.8x, measured), not equal to it.
#
# float16 is computed in float32 whatever the table says. ONNX Runtime's CPU provider
# has few float16 kernels either, but it does not refuse such a node: at session
# creation it runs it in float32 between casts it inserts, then removes every inserted
# cast pair that meets another cast, as if float32 -> float16 -> float32 changed
# nothing. A chain of float16 ops then rounds once at its end, not after every op as
# PyTorch does: ``(x + 1) * 3`` differed from eager in 21% of elements, and
# ``cumprod(1 + x * 1e-3)`` by 8 ulps. A single node, as the table checks it, is
# right, so the table cannot see it. Casts written in the model are kept. Ops that only
# move values and have float16 kernels (``_MOVES``) stay float16.
#
# Left alone: nodes the table verified in the narrow type (ONNX Runtime runs them as
# they are), conversions (a bit cast must stay one), random ops (they stay in PyTorch
# anyway), graphs on other devices (CUDA has the kernels), ops that write an input and
# views that return a graph input's memory (the write-back of a buffer, or a view the
# caller keeps, must reach the real tensor, not a float32 copy), ops returning no
# tensor, and ``index_put(accumulate=True)``: PyTorch rounds after every addition there
# (256 where float32 gives 300, measured), which one rounding at the end does not
# reproduce.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ortlab.backend import _conformance, _export, _rewrites, _rng, _support, _torch_private

NARROW = (torch.bfloat16, torch.float16)
"""The dtypes computed in float32 where ONNX Runtime has no kernel for them."""

_aten = torch.ops.aten
_CONVERSIONS = frozenset(
    {
        _aten._to_copy.default,
        _aten.view.dtype,
        _aten.clone.default,
        _aten.alias.default,
        _aten.lift_fresh_copy.default,
        torch.ops.prims.convert_element_type.default,
    }
)
"""Ops that move or convert values and never need arithmetic kernels."""


def _everything(target: Any) -> bool:
    return True


def for_onnx(
    graph_module: torch.fx.GraphModule, translated: Callable[[Any], bool] = _everything
) -> torch.fx.GraphModule:
    """The graph with its narrow-float arithmetic in float32 where ONNX Runtime lacks the
    kernel: a rewritten copy, or ``graph_module`` itself when no node needs it. Ops
    ``translated`` says have no translation run in PyTorch as they are."""
    kept = frozenset(_support.input_alias_outputs(graph_module))
    if not any(_narrow_without_kernel(n, kept, translated) for n in graph_module.graph.nodes):
        return graph_module
    rewritten = _export.copy_graph_module(graph_module)
    compute_in_float32(rewritten, translated)
    return rewritten


def compute_in_float32(
    graph_module: torch.fx.GraphModule, translated: Callable[[Any], bool] = _everything
) -> int:
    """Rewrites, in place, every CPU node that computes in bfloat16 or float16 without a
    verified ONNX Runtime kernel for it into the same op in float32 between casts (see
    the module's NOTE); returns how many nodes changed."""
    graph = graph_module.graph
    kept = frozenset(_support.input_alias_outputs(graph_module))
    widened: dict[torch.fx.Node, torch.fx.Node] = {}
    changed = 0
    for node in list(graph.nodes):
        if not _narrow_without_kernel(node, kept, translated):
            continue
        _round_numbers(graph, node)
        node.args, node.kwargs = torch.fx.node.map_arg(
            (node.args, node.kwargs), lambda a: _widen(graph, a, widened)
        )
        narrow = node.meta["val"]
        if node.target in _FACTORIES or node.target in _LIKE_FACTORIES:  # made in float32
            node.kwargs = {**node.kwargs, "dtype": torch.float32}
            node.meta["val"] = narrow.to(torch.float32)
        else:
            node.meta["val"] = _recompute(node)
        _narrow_outputs(graph, node, narrow)
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


_ROUNDS_NUMBERS = frozenset(
    {
        _aten.add,
        _aten.sub,
        _aten.rsub,
        _aten.eq,
        _aten.ne,
        _aten.lt,
        _aten.le,
        _aten.gt,
        _aten.ge,
        _aten.fmod,
        _aten.remainder,
    }
)
"""Ops whose PyTorch CPU kernel rounds a number operand to the narrow tensor's dtype
before it computes in float32 (measured on bfloat16 and float16: ``bf16(1/3) - 0.3333``
is 0, ``fp16(0.1) == 0.1`` is true). ``mul``, ``div`` and ``pow`` use the number as it
is, and keep it (see :func:`_number_kept_whole`)."""


def _round_numbers(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Rounds the number operands of a :data:`_ROUNDS_NUMBERS` node to its narrow dtype,
    as PyTorch does, before the node is computed in float32: a Python number in place,
    a number :mod:`_scalars` made a 0-d tensor through a cast to the narrow dtype."""
    packet = getattr(node.target, "overloadpacket", None)
    if packet not in _ROUNDS_NUMBERS:
        return
    values = [_rewrites.fake_value(a) for a in node.args[:2]]
    narrow = next((v.dtype for v in values if _is_narrow(v) and v.dim() > 0), None)
    if narrow is None:
        return

    def rounded(arg: Any) -> Any:
        if isinstance(arg, (int, float)) and not isinstance(arg, bool):
            return torch.tensor(arg, dtype=narrow).item()
        value = _rewrites.fake_value(arg) if isinstance(arg, torch.fx.Node) else None
        if (
            isinstance(arg, torch.fx.Node)
            and arg.target is _aten.scalar_tensor.default
            and isinstance(value, torch.Tensor)
            and value.dtype.is_floating_point
            and value.dtype not in NARROW
        ):
            with graph.inserting_after(arg):
                return _cast(graph, arg, arg, narrow)
        return arg

    node.args = tuple(rounded(a) for a in node.args[:2]) + tuple(node.args[2:])


def _narrow_without_kernel(
    node: torch.fx.Node, kept: frozenset[str], translated: Callable[[Any], bool]
) -> bool:
    """Whether the node computes in a narrow type on CPU, without a verified kernel, and
    may be computed in float32 (``kept``: the views that return a graph input). An op
    without a translation stays in PyTorch, in its own dtype, and so do the ops of
    :data:`_NARROW_ONLY`."""
    if node.op != "call_function" or not _torch_private.is_op_overload(node.target):
        return False
    target = node.target
    if not translated(target) or getattr(target, "overloadpacket", None) in _NARROW_ONLY:
        return False
    if target in _CONVERSIONS or node.name in kept or not _computes_values(node):
        return False
    if _rng.is_random(node):  # stays in PyTorch
        return False
    values = [_rewrites.fake_value(a) for a in node.all_input_nodes]
    if target in _FACTORIES or target in _LIKE_FACTORIES:  # the dtype it makes says
        values = [node.meta.get("val")]
    if not any(_is_narrow(v) for v in values):
        return False
    if any(isinstance(v, torch.Tensor) and v.device.type != "cpu" for v in values):
        return False
    if _number_kept_whole(node):  # a narrow kernel would round the number (float16 mul)
        return True
    float16 = any(isinstance(v, torch.Tensor) and v.dtype == torch.float16 for v in values)
    if float16 and getattr(target, "overloadpacket", None) not in _MOVES:
        return True  # ONNX Runtime's float16 "kernels" drop roundings in a chain (NOTE)
    return _conformance.lookup_node(node, _support.target_text(target)).status != "verified"


_NARROW_ONLY = frozenset({_aten._grouped_mm})
"""Ops whose kernels (and meta functions) take the narrow type only: widened, bfloat16
MoE models' expert products (``_grouped_mm``) failed their whole graph."""

_MOVES = frozenset(
    {
        _aten.view,
        _aten._unsafe_view,
        _aten.reshape,
        _aten.permute,
        _aten.transpose,
        _aten.t,
        _aten.expand,
        _aten.squeeze,
        _aten.unsqueeze,
        _aten.slice,
        _aten.select,
        _aten.cat,
        _aten.embedding,
        _aten.index_select,
        _aten.gather,
    }
)
"""Ops that only move float16 values, into ONNX ops with float16 kernels of their own on
CPU (Reshape, Transpose, Expand, Squeeze, Unsqueeze, Slice, Gather, GatherElements,
Concat: measured, no casts inserted, so the casts around them stay): they stay float16
(widening an embedding's table on every call made a lookup 26x slower)."""


def _number_kept_whole(node: torch.fx.Node) -> bool:
    """Whether the node is a ``mul`` or ``div`` of a narrow tensor by a number the narrow
    dtype cannot hold: PyTorch multiplies by the number as it is, in float32, where
    ONNX Runtime's float16 kernel takes it rounded (1 ulp off)."""
    if getattr(node.target, "overloadpacket", None) not in (_aten.mul, _aten.div):
        return False
    values = map(_rewrites.fake_value, node.all_input_nodes)
    narrow = next(v.dtype for v in values if _is_narrow(v))
    numbers = [a for a in node.args[:2] if isinstance(a, float)]
    return any(torch.tensor(a, dtype=narrow).item() != a for a in numbers)


_FACTORIES = frozenset(
    {_aten.full.default, _aten.ones.default, _aten.zeros.default, _aten.scalar_tensor.default}
)
"""Ops that make a tensor of a value in the dtype they are given: made in float32, then
cast (the value rounds once, either way)."""

_LIKE_FACTORIES = frozenset(
    {_aten.zeros_like.default, _aten.ones_like.default, _aten.full_like.default}
)
"""The same, shaped like their input, whose dtype may differ from the one they make
(``zeros_like(mask, dtype=torch.bfloat16)`` in transformers' attention masks): the
dtype they make decides, not their input's."""


def _computes_values(node: torch.fx.Node) -> bool:
    """Whether computing the node in float32 changes nothing but the rounding. Not: ops
    that write an input (a write into a float32 copy would be lost), ops that return no
    tensor (sizes), and ``index_put`` accumulating, which PyTorch rounds after every
    addition. (Views are values here, but those that return a graph input's memory.)"""
    schema = node.target._schema  # type: ignore[union-attr]
    if schema.is_mutable:
        return False
    value = node.meta.get("val")
    values = value if isinstance(value, (list, tuple)) else [value]
    if not any(isinstance(v, torch.Tensor) for v in values):
        return False
    if node.target in _ACCUMULATING:
        args = dict(zip((a.name for a in schema.arguments), node.args)) | dict(node.kwargs)
        return not args.get("accumulate", False)
    return True


_ACCUMULATING = frozenset({_aten.index_put.default, _aten._unsafe_index_put.default})
"""Ops whose ``accumulate=True`` adds repeated indices one by one in the narrow type."""


def _is_narrow(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_is_narrow(v) for v in value)
    return isinstance(value, torch.Tensor) and value.dtype in NARROW


def _widen(
    graph: torch.fx.Graph, arg: torch.fx.Node, widened: dict[torch.fx.Node, torch.fx.Node]
) -> torch.fx.Node:
    """``arg`` in float32 when it is a narrow tensor (one cast per value)."""
    value = _rewrites.fake_value(arg)
    if not (isinstance(value, torch.Tensor) and value.dtype in NARROW):
        return arg
    if arg not in widened:
        with graph.inserting_after(arg):
            widened[arg] = _cast(graph, arg, arg, torch.float32)
    return widened[arg]


def _narrow_outputs(graph: torch.fx.Graph, node: torch.fx.Node, narrow: Any) -> None:
    """Casts the node's outputs back to the narrow dtypes they had."""
    if isinstance(narrow, torch.Tensor):
        if narrow.dtype != node.meta["val"].dtype:
            _cast_users(graph, node, narrow.dtype)
        return
    if isinstance(narrow, (list, tuple)):
        for user in list(node.users):
            if user.target is not operator.getitem:
                continue
            before = narrow[user.args[1]]  # type: ignore[index]
            user.meta["val"] = node.meta["val"][user.args[1]]  # type: ignore[index]
            if isinstance(before, torch.Tensor) and before.dtype != user.meta["val"].dtype:
                _cast_users(graph, user, before.dtype)


def _cast_users(graph: torch.fx.Graph, node: torch.fx.Node, dtype: torch.dtype) -> None:
    users = list(node.users)
    with graph.inserting_after(node):
        cast = _cast(graph, node, node, dtype)
    for user in users:
        user.replace_input_with(node, cast)


def _cast(
    graph: torch.fx.Graph, value: torch.fx.Node, origin: torch.fx.Node, dtype: torch.dtype
) -> torch.fx.Node:
    target = torch.ops.prims.convert_element_type.default
    return _rewrites.add_node(graph, origin, target, (value, dtype))


def _recompute(node: torch.fx.Node) -> Any:
    """The node's fake result on its (now float32) arguments."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _rewrites.fake_value)
    return node.target(*args, **kwargs)  # type: ignore[operator]
