"""Random draws made at the start of the graph, so that the ops between them stay in one
partition.

# NOTE: random ops stay in PyTorch (ONNX Runtime's generator is not PyTorch's; see the
# ``random`` support rule), and every one used to cut its graph: a 4-layer BERT trained
# with its default dropout had a forward graph in 15 pieces. What a draw produces
# depends only on the generator's state and on its arguments' sizes, strides
# and dtypes, not on their values, except where a value is data (a probability tensor,
# a mean). So the draws are made first, in their order, and the rest of the graph reads
# them:
#
#   before:  x -> [linear] -> native_dropout(p) -> [gelu -> linear] -> native_dropout(p)
#            3 partitions, 2 draws in PyTorch between them
#   after:   mask0 = dropout_mask(size, stride, dtype, device, p)   PyTorch, in order
#            mask1 = dropout_mask(size, stride, dtype, device, p)
#            x -> [linear -> x * (mask0.to(dtype) * scale) -> gelu -> linear -> ...]
#            1 partition
#
# The values are PyTorch's, bit for bit: the same op draws, in the same order, from the
# same generator, on a stand-in of the same sizes, strides and dtype. ``native_dropout``
# draws a mask and multiplies; its output is rebuilt from the mask as ATen computes it,
# ``x * (mask.to(dtype) * scale)`` with ``scale = 1 / (1 - p)`` (0 when p is 1): the
# scale is rounded to the dtype first, which matters in float16 and bfloat16.
#
# A draw moves when everything it reads can be had at the start: graph inputs, numbers,
# symbolic sizes (computed from the inputs' sizes, see ``_sizes``), and tensors it reads
# only for their layout (:data:`_LAYOUT_ONLY`: ``rand_like``, ``bernoulli.p``, the
# functional ``uniform``/``normal``/``exponential``... of an in-place fill,
# ``native_dropout``'s mask), which become a stand-in of that layout (CPU tensors only:
# CUDA's kernels may draw differently for another pointer). Draws keep their
# order: the first draw that cannot move (``bernoulli`` of probabilities computed in the
# graph), or the first call that may draw inside (a higher-order op such as ``cond``),
# stops the moves, and every draw after it stays where it is.
#
# Activation checkpointing wraps each dropout of a checkpointed block in a higher-order
# op: the forward runs ``run_and_save_rng_state(native_dropout, x, p, True)`` (the
# generator's state, then the draw), the backward's recompute
# ``run_with_rng_state(state, native_dropout, x, p, True)`` (the same draw from that
# state; the generator is restored after). Both move like a dropout: their mask is drawn
# at the start from a stand-in, the forward's with the state it saved, and the output
# is rebuilt where it was.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any

import torch
import torch.fx

from ortlab.backend import _export, _rewrites, _sizes, _torch_private

aten = torch.ops.aten

_DROPOUT = aten.native_dropout.default


def _layout_only_ops() -> dict[Any, int]:
    names = (
        "native_dropout.default",
        "rand_like.default",
        "randn_like.default",
        "randint_like.default",
        "randint_like.low_dtype",
        "bernoulli.p",
        "uniform.default",
        "normal_functional.default",
        "exponential.default",
        "geometric.default",
        "log_normal.default",
        "cauchy.default",
        "random.default",
        "random.from",
        "random.to",
    )
    ops: dict[Any, int] = {}
    for name in names:
        packet, overload = name.split(".")
        op = getattr(getattr(aten, packet, None), overload, None)
        if op is not None:
            ops[op] = 0
    return ops


_LAYOUT_ONLY = _layout_only_ops()
"""Random ops -> the position of the tensor argument they read for its sizes, strides and
dtype only (what they draw does not depend on its values)."""


def is_random(node: torch.fx.Node) -> bool:
    """Whether the node draws from PyTorch's generator: an ATen op tagged
    ``nondeterministic_seeded`` (attention with ``dropout_p`` 0 excepted), or a draw this
    module made."""
    if node.op != "call_function":
        return False
    if node.target in _MADE_HERE or _checkpointed_dropout(node):
        return True
    target = node.target
    if not (
        _torch_private.is_op_overload(target)
        and torch.Tag.nondeterministic_seeded in target.tags  # type: ignore[union-attr]
    ):
        return False
    if "scaled_dot_product" in target.__name__:  # type: ignore[union-attr]
        return _torch_private.schema_arg(node, "dropout_p") != 0
    return True


def drawing_op(node: torch.fx.Node) -> Any:
    """The ATen op a draw this module made runs (``None`` for any other node)."""
    if node.op != "call_function":
        return None
    if node.target is draw_like:
        return node.args[0]
    return _DROPOUT if node.target in _MADE_HERE else None


# -- the draws, as the graph calls them -------------------------------------------------


def _stand_in(
    size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """An uninitialised tensor of this layout: what a draw reads of its input."""
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def _bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """A dropout mask as bool, as its fake tensor says (of an empty tensor eager returns
    a float mask)."""
    return mask if mask.dtype == torch.bool else mask.to(torch.bool)


def dropout_mask(
    size: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    p: float,
) -> torch.Tensor:
    """The mask ``native_dropout(x, p, True)`` draws for an ``x`` of this layout."""
    return _bool_mask(_DROPOUT(_stand_in(size, stride, dtype, device), p, True)[1])


def draw_like(
    op: Any,
    layout: tuple[tuple[int, ...], tuple[int, ...], torch.dtype, torch.device],
    *args: Any,
    **kwargs: Any,
) -> torch.Tensor:
    """``op(x, *args, **kwargs)`` for an ``x`` of this ``(size, stride, dtype,
    device)`` (``op`` reads only that)."""
    return op(_stand_in(*layout), *args, **kwargs)


def dropout_mask_saving_state(
    size: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    p: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(state, mask)``: the generator's state and the mask that activation
    checkpointing's ``run_and_save_rng_state(native_dropout, x, p, True)`` gives for an
    ``x`` of this layout."""
    save, _ = _torch_private.rng_state_ops()
    state, (_, mask) = save(_DROPOUT, _stand_in(size, stride, dtype, device), p, True)
    return state, _bool_mask(mask)


def dropout_mask_from_state(
    state: torch.Tensor,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    p: float,
) -> torch.Tensor:
    """The mask ``run_with_rng_state(state, native_dropout, x, p, True)`` draws for an
    ``x`` of this layout (the generator is left as it was)."""
    _, replay = _torch_private.rng_state_ops()
    stand_in = _stand_in(size, stride, dtype, device)
    return _bool_mask(replay(state, _DROPOUT, stand_in, p, True)[1])


_MADE_HERE = (dropout_mask, draw_like, dropout_mask_saving_state, dropout_mask_from_state)
"""The draws this module makes at the start of a graph."""


def _checkpointed_dropout(node: torch.fx.Node) -> str | None:
    """``"save"`` for ``run_and_save_rng_state(native_dropout, ...)``, ``"replay"`` for
    ``run_with_rng_state(state, native_dropout, ...)``, else ``None``."""
    if node.op != "call_function" or not _torch_private.is_higher_order_op(node.target):
        return None
    save, replay = _torch_private.rng_state_ops()
    if node.target is save and node.args and node.args[0] is _DROPOUT:
        return "save"
    if node.target is replay and len(node.args) > 1 and node.args[1] is _DROPOUT:
        return "replay"
    return None


# -- the pass ------------------------------------------------------------------------------


class _Start:
    """Builds, at the start of a graph, what a draw reads: graph inputs as they are,
    symbolic sizes computed from the inputs (see ``_sizes``), a layout-only tensor as its
    sizes, strides, dtype and device. Each method returns ``None`` when it cannot."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        # New nodes go before the first node this pass never erases (not a draw, nor a
        # getitem of one): the graph may begin with the draw it moves first.
        self.start = next(
            n
            for n in graph.nodes
            if n.op != "placeholder" and not is_random(n) and not _selects_from_a_draw(n)
        )
        self._sizes = _sizes.emitter(graph, self.start)
        self._before_start: set[torch.fx.Node] = set()
        for node in graph.nodes:
            if node is self.start:
                break
            self._before_start.add(node)

    def where(self, node: torch.fx.Node) -> torch.fx.Node:
        """Where a computation that replaces ``node`` and reads a draw goes: before
        ``node``, or before the start when ``node`` is among the graph's first draws."""
        return self.start if node in self._before_start else node

    def size(self, value: Any) -> Any:
        if isinstance(value, int):
            return value
        if not isinstance(value, torch.SymInt):
            return None
        return self._sizes.emit(value.node.expr)

    def arg(self, value: Any) -> tuple[bool, Any]:
        """``(True, the argument made at the start)`` or ``(False, None)``."""
        if isinstance(value, (list, tuple)):
            items = [self.arg(v) for v in value]
            if not all(ok for ok, _ in items):
                return False, None
            return True, type(value)(v for _, v in items)
        if not isinstance(value, torch.fx.Node) or value.op == "placeholder":
            return True, value
        size = self.size(value.meta.get("val"))
        return (size is not None), size

    def layout(self, value: Any) -> tuple[Any, ...] | None:
        tensor = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
            # CUDA's dropout picks its vectorization (and with it which number lands on
            # which element) from the pointers' alignment: a stand-in need not draw the
            # same mask as the tensor it stands for.
            return None
        sizes = [self.size(s) for s in tensor.shape]
        strides = [self.size(s) for s in tensor.stride()]
        if any(s is None for s in (*sizes, *strides)):
            return None
        return (tuple(sizes), tuple(strides), tensor.dtype, tensor.device)

    def node(
        self, origin: torch.fx.Node, target: Any, args: Any, kwargs: Any
    ) -> torch.fx.Node:
        with self.graph.inserting_before(self.start):
            node = self.graph.call_function(target, tuple(args), dict(kwargs))
        node.meta = {k: v for k, v in origin.meta.items() if k != "tensor_meta"}
        return node

    def take_name(self, node: torch.fx.Node, name: str) -> torch.fx.Node:
        """``node`` again, under the name of the node it replaced (erased by now; FX may
        add a suffix), so the lab shows ``rand_like`` where the graph had it."""
        with self.graph.inserting_after(node):
            named = self.graph.create_node(
                "call_function", node.target, node.args, node.kwargs, name=name
            )
        named.meta = node.meta
        node.replace_all_uses_with(named)
        self.graph.erase_node(node)
        return named


def draws_first(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with its random draws made at its start (see the module's NOTE): a
    rewritten copy, or ``graph_module`` itself when no draw moves."""
    if not any(is_random(n) and not _made_here(n) for n in graph_module.graph.nodes):
        return graph_module
    rewritten = _export.copy_graph_module(graph_module)
    graph = rewritten.graph
    at_start = _Start(graph)
    moved = 0
    for node in list(graph.nodes):
        if _made_here(node):
            continue
        if _may_draw_inside(node) and not _checkpointed_dropout(node):
            break  # a nested graph may draw: later draws stay behind it
        if not is_random(node):
            continue
        if not _draw_first(at_start, node):
            break  # later draws keep their place behind it: the order of draws holds
        moved += 1
    if not moved:
        return graph_module
    graph.eliminate_dead_code()
    graph.lint()
    rewritten.recompile()
    return rewritten


def _selects_from_a_draw(node: torch.fx.Node) -> bool:
    """A ``getitem`` of a draw's outputs (``run_and_save_rng_state``'s nest two deep)."""
    while node.op == "call_function" and node.target is operator.getitem:
        node = node.args[0]  # type: ignore[assignment]
        if is_random(node):
            return True
    return False


def _made_here(node: torch.fx.Node) -> bool:
    return node.target in _MADE_HERE


def _may_draw_inside(node: torch.fx.Node) -> bool:
    """A call whose draws this pass cannot see: a higher-order op (activation
    checkpointing's ``run_and_save_rng_state``, ``cond``, ``invoke_subgraph``) or a
    submodule."""
    if node.op == "call_module":
        return True
    return node.op == "call_function" and _torch_private.is_higher_order_op(node.target)


def _draw_first(at_start: _Start, node: torch.fx.Node) -> bool:
    """Makes ``node``'s draw at the start of the graph; ``False`` (nothing changed) when
    it reads something computed in the graph."""
    if node.kwargs.get("generator") is not None:
        return False
    if _checkpointed_dropout(node):
        return _checkpointed_dropout_first(at_start, node)
    position = _LAYOUT_ONLY.get(node.target)
    if position is None or position >= len(node.args):
        ok, args = at_start.arg(node.args)
        ok_kw, kwargs = at_start.arg(tuple(node.kwargs.values()))
        if not (ok and ok_kw):
            return False
        draw = at_start.node(node, node.target, args, zip(node.kwargs, kwargs))
        node.replace_all_uses_with(draw)
        name = node.name
        at_start.graph.erase_node(node)
        at_start.take_name(draw, name)
        return True
    layout = at_start.layout(node.args[position])
    ok, rest = at_start.arg(node.args[position + 1 :])
    ok_kw, kwargs = at_start.arg(tuple(node.kwargs.values()))
    if layout is None or not (ok and ok_kw) or position != 0:
        return False
    if node.target is _DROPOUT:
        return _dropout_first(at_start, node, layout)
    draw = at_start.node(
        node, draw_like, (node.target, layout, *rest), zip(node.kwargs, kwargs)
    )
    node.replace_all_uses_with(draw)
    name = node.name
    at_start.graph.erase_node(node)
    at_start.take_name(draw, name)
    return True


def _dropout_first(at_start: _Start, node: torch.fx.Node, layout: tuple[Any, ...]) -> bool:
    """``native_dropout(x, p, True)`` -> a mask drawn at the start, and its output
    ``x * (mask.to(dtype) * scale)`` where it was."""
    if len(node.args) != 3 or node.kwargs or node.args[2] is not True:
        return False
    if any(u.target is not operator.getitem or u.args[1] not in (0, 1) for u in node.users):
        return False
    x, p = node.args[0], node.args[1]
    if not isinstance(p, (int, float)) or not isinstance(x, torch.fx.Node):
        return False
    mask = at_start.node(node, dropout_mask, (*layout, p), {})
    mask.meta["val"] = node.meta["val"][1]
    _dropped_out(at_start, node, node, x, mask, p, layout[2])
    name = node.name
    at_start.graph.erase_node(node)
    at_start.take_name(mask, name)
    return True


def _dropped_out(
    at_start: _Start,
    node: torch.fx.Node,
    outputs: torch.fx.Node,
    x: torch.fx.Node,
    mask: torch.fx.Node,
    p: float,
    dtype: torch.dtype,
) -> None:
    """Rebuilds a dropout's output from its mask, ``x * (mask.to(dtype) * scale)``, where
    ``node`` was, and points the ``getitem``s of ``outputs`` (output, mask) at them."""
    graph = at_start.graph
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    with graph.inserting_before(at_start.where(node)):
        as_dtype = _rewrites.add_node(
            graph, node, aten._to_copy.default, (mask,), {"dtype": dtype}
        )
        scaled = _rewrites.add_node(graph, node, aten.mul.Tensor, (as_dtype, scale))
        out = _rewrites.add_node(graph, node, aten.mul.Tensor, (x, scaled))
    for user in list(outputs.users):
        user.replace_all_uses_with(out if user.args[1] == 0 else mask)
        graph.erase_node(user)


def _selections(node: torch.fx.Node) -> dict[int, torch.fx.Node] | None:
    """``node``'s users by the index they select, when every user is a ``getitem``."""
    chosen: dict[int, torch.fx.Node] = {}
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] in chosen:
            return None
        chosen[user.args[1]] = user  # type: ignore[index]
    return chosen


def _mask_value(x: torch.fx.Node, p: float) -> Any:
    """The fake mask ``native_dropout`` draws for ``x`` (the higher-order ops that wrap
    it carry no fake value of their own)."""
    value = x.meta["val"]
    mode = _torch_private.detect_fake_mode([value])
    with mode if mode is not None else contextlib.nullcontext():
        return _DROPOUT(value, p, True)[1]


def _checkpointed_dropout_first(at_start: _Start, node: torch.fx.Node) -> bool:
    """Activation checkpointing's ``run_and_save_rng_state(native_dropout, x, p, True)``
    -> ``(state, mask)`` drawn at the start, and ``run_with_rng_state(state,
    native_dropout, x, p, True)`` -> its mask drawn at the start from ``state`` (a graph
    input of the backward); each output rebuilt where the node was."""
    kind = _checkpointed_dropout(node)
    rest = node.args[1:] if kind == "save" else node.args[2:]
    if len(rest) != 3 or node.kwargs or rest[2] is not True:
        return False
    x, p = rest[0], rest[1]
    if not isinstance(p, (int, float)) or not isinstance(x, torch.fx.Node):
        return False
    layout = at_start.layout(x)
    selected = _selections(node)
    if layout is None or selected is None:
        return False
    graph = at_start.graph
    name = node.name
    mask_value = _mask_value(x, p)
    if kind == "replay":
        ok, state = at_start.arg(node.args[0])
        if not ok or set(selected) - {0, 1}:
            return False
        mask = at_start.node(node, dropout_mask_from_state, (state, *layout, p), {})
        mask.meta["val"] = mask_value
        _dropped_out(at_start, node, node, x, mask, p, layout[2])
        graph.erase_node(node)
        at_start.take_name(mask, name)
        return True
    pair = selected.get(1)
    inner = _selections(pair) if pair is not None else {}
    if set(selected) - {0, 1} or inner is None or set(inner) - {0, 1}:
        return False
    saved = at_start.node(node, dropout_mask_saving_state, (*layout, p), {})
    state_value = selected[0].meta.get("val") if 0 in selected else None
    saved.meta["val"] = (state_value, mask_value)
    with graph.inserting_after(saved):
        state = graph.call_function(operator.getitem, (saved, 0))
        mask = graph.call_function(operator.getitem, (saved, 1))
    state.meta = {**saved.meta, "val": state_value}
    mask.meta = {**saved.meta, "val": mask_value}
    if pair is not None:
        _dropped_out(at_start, node, pair, x, mask, p, layout[2])
        graph.erase_node(pair)
    if 0 in selected:
        selected[0].replace_all_uses_with(state)
        graph.erase_node(selected[0])
    graph.erase_node(node)
    at_start.take_name(saved, name)
    return True
