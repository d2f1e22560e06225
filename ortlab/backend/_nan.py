"""NaN through max-like ops as PyTorch propagates it, rewritten in the ATen graph before
export (after :mod:`_scalars`; the same copy-on-write contract: a rewritten copy, or the
graph itself when nothing applies).

# NOTE: PyTorch's ``max``/``min``-like ops treat NaN as the extreme value: ``amax``,
# ``max``, ``max.dim`` and ``max_pool2d`` of a row holding a NaN are NaN, ``argmax``
# and ``max.dim``'s index point at the first NaN, ``topk`` and a descending ``sort`` put
# NaN first. ONNX Runtime's ReduceMax, ArgMax, MaxPool and TopK skip NaN, so a row
# ``[1, nan, 3]`` gave 3 (index 2) where eager gives NaN (index 1): a model that went
# NaN looked finite, and a NaN logit was never the argmax. Each such node of a floating
# tensor is rewritten in ops whose translations keep NaN (``isnan``, ``any``,
# ``masked_fill``, ``where``, ``gather``):
#
#   amax(x, d)            masked_fill(amax(x, d), any(isnan(x), d), nan)
#   argmax(x, d)          where(any(isnan(x), d), argmax(isnan(x) as float, d), argmax(x, d))
#   max.dim(x, d)         both of the above, on its values and its indices
#   max_pool2d(x)         its values masked where avg_pool2d(x * x) is NaN, over the
#                         same windows (max_pool3d alike; dilated or not float32:
#                         where max_pool2d(isnan(x) as float) > 0)
#   topk(x) / sort(x)     the op on masked_fill(x, isnan(x), inf); values gathered from x
#
# (min-like ops alike). max_pool2d's indices of a NaN window point at its last NaN, as
# PyTorch's CPU kernel puts them (the backward sends the window's gradient there; ONNX
# Runtime's index is the largest number's), where the plane's sizes are static; and a
# NaN ties with +inf in topk and sort where PyTorch puts NaN first. It costs one more
# pass over the op's input (two more for a pool's indices, when they are read); integer
# inputs are left alone.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ortlab.backend import _export, _rewrites

aten = torch.ops.aten

_MARK = "ortlab_nan"
"""meta key of the nodes this module added (never rewritten again)."""

_VALUES = frozenset({aten.amax.default, aten.amin.default, aten.max.default, aten.min.default})
_INDICES = frozenset({aten.argmax.default, aten.argmin.default})
_BOTH = frozenset({aten.max.dim, aten.min.dim})
_POOLS = frozenset(
    {
        aten.max_pool2d_with_indices.default,
        aten.max_pool3d_with_indices.default,
        aten.max_pool2d.default,
    }
)
_ORDERS = frozenset({aten.topk.default, aten.sort.default})


def _applies(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.meta.get(_MARK) or not node.args:
        return False
    targets = (*_VALUES, *_INDICES, *_BOTH, *_POOLS, *_ORDERS)
    if node.target not in targets:
        return False
    value = _rewrites.fake_value(node.args[0])
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def for_onnx(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with NaN-propagating max-like ops: a rewritten copy, or
    ``graph_module`` itself when none applies (it is never modified)."""
    if not any(_applies(n) for n in graph_module.graph.nodes):
        return graph_module
    rewritten = _export.copy_graph_module(graph_module)
    nan_propagating(rewritten)
    return rewritten


def nan_propagating(graph_module: torch.fx.GraphModule) -> int:
    """Rewrites, in place, each max-like node of a floating tensor so that NaN comes out
    as PyTorch gives it (see the module's NOTE); returns how many nodes changed."""
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        if not _applies(node):
            continue
        _REWRITES[_kind(node.target)](graph, node)
        node.meta[_MARK] = True
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


def _kind(target: Any) -> str:
    if target in _VALUES:
        return "values"
    if target in _INDICES:
        return "indices"
    if target in _BOTH:
        return "both"
    return "pool" if target in _POOLS else "order"


class _Builder:
    """Adds marked nodes after ``anchor``, in order, each with its fake value."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node) -> None:
        self.graph, self.origin, self.last = graph, anchor, anchor

    def __call__(self, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        with self.graph.inserting_after(self.last):
            node = _rewrites.add_node(self.graph, self.origin, target, args, kwargs)
        node.meta[_MARK] = True
        self.last = node
        return node


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by name, defaults filled in (from the op's schema)."""
    root = node.graph.owning_module
    assert root is not None, node  # rewritten graphs belong to a GraphModule
    bound = node.normalized_arguments(root, normalize_to_only_use_kwargs=True)
    assert bound is not None, node  # every op this module rewrites has a schema
    return dict(bound.kwargs)


def _reduced(node: torch.fx.Node) -> tuple[list[int] | None, bool]:
    """The dims a reduction node reduces (``None``: all) and its keepdim."""
    values = _arguments(node)
    dim, keepdim = values.get("dim"), bool(values.get("keepdim", False))
    if dim is None or dim == []:
        return None, keepdim
    return ([dim] if isinstance(dim, int) else list(dim)), keepdim


def _any_nan(add: _Builder, x: torch.fx.Node, dims: list[int] | None, keepdim: bool) -> Any:
    nan = add(aten.isnan.default, x)
    if dims is None:
        return nan, add(aten.any.default, nan)  # 0-d: broadcasts to any keepdim shape
    return nan, add(aten.any.dims, nan, dims, keepdim)


def _first_nan(
    add: _Builder, nan: torch.fx.Node, dims: list[int] | None, keepdim: bool
) -> torch.fx.Node:
    """The index of the first NaN along the reduced dim (ArgMax keeps the first of
    equal values, as PyTorch does)."""
    as_float = add(aten._to_copy.default, nan, dtype=torch.float32)
    dim = None if dims is None else dims[0]
    return add(aten.argmax.default, as_float, dim, keepdim)


def _replace_uses(old: torch.fx.Node, new: torch.fx.Node, keep: set[torch.fx.Node]) -> None:
    for user in list(old.users):
        if user not in keep:
            user.replace_input_with(old, new)


def _getitems(node: torch.fx.Node) -> dict[int, torch.fx.Node]:
    return {
        u.args[1]: u  # type: ignore[misc]
        for u in node.users
        if u.op == "call_function" and u.target is operator.getitem
    }


def _values(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    add = _Builder(graph, node)
    x = node.args[0]
    dims, keepdim = _reduced(node)
    _, any_nan = _any_nan(add, x, dims, keepdim)  # type: ignore[arg-type]
    fixed = add(aten.masked_fill.Scalar, node, any_nan, math.nan)
    _replace_uses(node, fixed, {fixed})


def _indices(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    add = _Builder(graph, node)
    x = node.args[0]
    dims, keepdim = _reduced(node)
    nan, any_nan = _any_nan(add, x, dims, keepdim)  # type: ignore[arg-type]
    first = _first_nan(add, nan, dims, keepdim)
    fixed = add(aten.where.self, any_nan, first, node)
    _replace_uses(node, fixed, {fixed})


def _both(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    items = _getitems(node)
    if not items:
        return
    add = _Builder(graph, max(items.values()))  # nodes order as they run
    x = node.args[0]
    dims, keepdim = _reduced(node)
    nan, any_nan = _any_nan(add, x, dims, keepdim)  # type: ignore[arg-type]
    if 0 in items:
        fixed = add(aten.masked_fill.Scalar, items[0], any_nan, math.nan)
        _replace_uses(items[0], fixed, {fixed})
    if 1 in items:
        first = _first_nan(add, nan, dims, keepdim)
        fixed = add(aten.where.self, any_nan, first, items[1])
        _replace_uses(items[1], fixed, {fixed})


def _pool(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    single = node.target == aten.max_pool2d.default
    items = {} if single else _getitems(node)
    values = node if single else items.get(0)
    if values is None:
        return
    add = _Builder(graph, values if single else max(items.values()))  # after both items
    x = node.args[0]
    arguments = _arguments(node)
    average = _AVERAGE.get(node.target)  # type: ignore[call-overload]
    value = _rewrites.fake_value(x)
    # ONNX Runtime's CPU AveragePool is float32 only.
    float32 = isinstance(value, torch.Tensor) and value.dtype == torch.float32
    undilated = all(d == 1 for d in _listed(arguments.get("dilation", 1)))
    if average is not None and float32 and undilated:
        # A window's mean of squares is NaN exactly where the window holds a NaN (a
        # square is never negative: +inf and -inf do not meet in the sum as inf - inf).
        kernel = arguments["kernel_size"]
        stride = arguments.get("stride") or kernel
        padding, ceil_mode = arguments.get("padding", 0), arguments.get("ceil_mode", False)
        squares = add(aten.mul.Tensor, x, x)
        means = add(average, squares, kernel, stride, padding, ceil_mode)
        in_window = add(aten.isnan.default, means)
    else:  # dilated, or not float32: the NaN mask pooled by the same op
        as_float = add(aten._to_copy.default, add(aten.isnan.default, x), dtype=torch.float32)
        windows = add(node.target, as_float, *node.args[1:], **node.kwargs)
        if not single:
            windows = add(operator.getitem, windows, 0)
        in_window = add(aten.gt.Scalar, windows, 0)
    fixed = add(aten.masked_fill.Scalar, values, in_window, math.nan)
    _replace_uses(values, fixed, {fixed})
    if 1 in items:
        _last_nan_indices(add, node, value, in_window, items[1])


def _last_nan_indices(
    add: _Builder,
    node: torch.fx.Node,
    value: Any,
    in_window: torch.fx.Node,
    indices: torch.fx.Node,
) -> None:
    """A NaN window's index where PyTorch puts it, at the window's last NaN (in the
    plane's order): the max pool of the NaN positions numbered 1, 2, ... over the plane
    (0 elsewhere), less one. The backward sends the window's gradient there. ``value``:
    the pool's input's fake value."""
    x = node.args[0]
    spatial = 3 if node.target == aten.max_pool3d_with_indices.default else 2
    sizes = tuple(value.shape[-spatial:]) if isinstance(value, torch.Tensor) else ()
    count = math.prod(sizes) if all(isinstance(s, int) for s in sizes) else 0
    if not sizes or not 0 < count < 2**24:  # symbolic sizes, or beyond float32's integers
        return
    positions = add(aten.arange.start, 1, count + 1, dtype=torch.float32, device=value.device)
    positions = add(aten.view.default, positions, list(sizes))
    numbered = add(aten.where.ScalarOther, add(aten.isnan.default, x), positions, 0.0)
    if spatial == 2:  # the values alone: no index conversion in the ONNX model
        pooled = add(aten.max_pool2d.default, numbered, *node.args[1:], **node.kwargs)
    else:
        pooled = add(
            operator.getitem, add(node.target, numbered, *node.args[1:], **node.kwargs), 0
        )
    last = add(aten._to_copy.default, add(aten.sub.Tensor, pooled, 1.0), dtype=torch.int64)
    fixed = add(aten.where.self, in_window, last, indices)
    _replace_uses(indices, fixed, {fixed})


_AVERAGE = {
    aten.max_pool2d_with_indices.default: aten.avg_pool2d.default,
    aten.max_pool2d.default: aten.avg_pool2d.default,
    aten.max_pool3d_with_indices.default: aten.avg_pool3d.default,
}
"""The average pool over the same windows as each max pool (no dilation)."""


def _listed(value: Any) -> list[int]:
    return [value] if isinstance(value, int) else list(value)


def _order(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    items = _getitems(node)
    x = node.args[0]
    with graph.inserting_before(node):
        nan = _rewrites.add_node(graph, node, aten.isnan.default, (x,))
        clean = _rewrites.add_node(graph, node, aten.masked_fill.Scalar, (x, nan, math.inf))
    nan.meta[_MARK] = clean.meta[_MARK] = True
    node.args = (clean, *node.args[1:])
    if 0 not in items:
        return  # the values are not read: the indices are right as they are
    if 1 not in items:
        with graph.inserting_after(node):
            items[1] = _rewrites.add_node(graph, node, operator.getitem, (node, 1))
    add = _Builder(graph, max(items.values()))
    values = add(aten.gather.default, x, _arguments(node)["dim"], items[1])
    _replace_uses(items[0], values, {values})


_REWRITES: dict[str, Callable[[torch.fx.Graph, torch.fx.Node], None]] = {
    "values": _values,
    "indices": _indices,
    "both": _both,
    "pool": _pool,
    "order": _order,
}
