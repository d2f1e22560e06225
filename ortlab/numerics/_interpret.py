"""Running partition graphs eagerly, node by node: the references localisation compares to.

- :class:`RecordingInterpreter` runs one partition's FX graph on the inputs ONNX Runtime
  received and keeps every node's value;
- :class:`AllEagerInterpreter` runs a whole partitioned graph with every partition in
  PyTorch, recording what each partition receives (the error *carried in*) and, where
  asked, values inside partitions (decision flips);
- :func:`local_value` runs one node on given operand values (a node's *own* error);
- :class:`Float64Interpreter` runs a graph in float64, and :func:`local_value` one node:
  how far eager's own float32 rounding is from the exact result, the allowance of the
  intermediate rule (:mod:`ortlab.numerics._compare`).

``aten.view`` falls back to ``reshape`` (same values) everywhere: a partition's graph may
rely on the strides its producer had in PyTorch (a ``view`` of a ``permute``), while ONNX
Runtime hands over contiguous tensors. The ops that read their operand's *storage*
(:data:`STORAGE_READERS`: ``as_strided`` and its kin) get ONNX Runtime's values laid out
as the eager graph had them (``_runner.laid_out_like``): on a contiguous copy of a
transposed value ``as_strided`` reads other elements, and would repeat a translation's
mistake instead of exposing it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.fx

from ortlab.backend import _torch_private
from ortlab.numerics import _runner

STORAGE_READERS = frozenset(
    {
        torch.ops.aten.as_strided.default,
        torch.ops.aten.as_strided_copy.default,
        torch.ops.aten.as_strided_scatter.default,
    }
)
"""Ops whose result depends on how their operand lies in memory (strides, storage offset,
the rest of its storage), not only on its values."""


def _call(target: Any, args: Any, kwargs: Any) -> Any:
    """``target(*args, **kwargs)``, with ``aten.view`` falling back to ``reshape``."""
    if target is torch.ops.aten.view.default:
        try:
            return target(*args, **kwargs)
        except RuntimeError:
            return torch.ops.aten.reshape.default(*args, **kwargs)
    return target(*args, **kwargs)


def target_text(node: torch.fx.Node) -> str:
    """``"aten.sigmoid.default"`` for an op overload, else the target's name."""
    target = node.target
    if _torch_private.is_op_overload(target):
        return str(target)
    return getattr(target, "__name__", str(target))


class RecordingInterpreter(torch.fx.Interpreter):
    """Runs a graph eagerly and keeps every node's value (``env``) when ``keep``."""

    def __init__(self, gm: torch.fx.GraphModule, *, keep: bool = True) -> None:
        super().__init__(gm, garbage_collect_values=not keep)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return _call(target, args, kwargs)


def live_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Nodes the graph's output depends on."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    live, stack = {output}, [output]
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg not in live:
                live.add(arg)
                stack.append(arg)
    return live


class AllEagerInterpreter(RecordingInterpreter):
    """Runs a partitioned graph with every partition in PyTorch (its eager submodule),
    recording the arguments each partition receives and what it returns, and the values of
    the nodes ``keep`` names inside each partition (``partition_values``)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        eager: Mapping[str, torch.fx.GraphModule],
        keep: Mapping[str, Collection[str]] | None = None,
    ):
        super().__init__(gm, keep=False)
        self.eager = eager
        self.keep = keep or {}
        self.live = live_nodes(gm.graph)
        self.partition_args: dict[str, tuple[Any, ...]] = {}
        self.partition_outputs: dict[str, Any] = {}
        self.partition_values: dict[str, dict[str, Any]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n not in self.live and n.op != "placeholder":  # placeholders consume arguments
            return None  # dead code (e.g. an unused ``.item()``): its inputs may be unknown
        return super().run_node(n)

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target in self.eager:
            self.partition_args[target] = tuple(args)
            names = self.keep.get(target)
            interp = RecordingInterpreter(self.eager[target], keep=bool(names))
            out = interp.run(*args)
            self.partition_outputs[target] = out
            if names:
                self.partition_values[target] = kept_values(interp.env, names)
            return out
        return super().call_module(target, args, kwargs)


def kept_values(env: Mapping[torch.fx.Node, Any], names: Collection[str]) -> dict[str, Any]:
    """The values of the nodes called ``names`` in an interpreter's ``env``, by name."""
    return {node.name: value for node, value in env.items() if node.name in names}


def _float64(value: Any) -> Any:
    """A floating-point tensor in float64 (complex in complex128), its layout kept; a
    floating-point dtype as float64 (an op's ``dtype=`` argument)."""
    if isinstance(value, torch.dtype):
        if value.is_complex:
            return torch.complex128
        return torch.float64 if value.is_floating_point else value
    if isinstance(value, torch.Tensor):
        if value.is_complex() and value.dtype != torch.complex128:
            return _runner.clone_value(value, torch.complex128)
        if value.is_floating_point() and value.dtype != torch.float64:
            return _runner.clone_value(value, torch.float64)
    return value


def float64_value(value: Any) -> Any:
    """A value with its floating-point tensors in float64 (complex in complex128), their
    layout kept."""
    return _torch_private.tree_map(_float64, value)


def _call_float64(target: Any, args: Any, kwargs: Any) -> Any:
    """``target`` run in float64: floating-point operands and dtypes become float64."""
    args, kwargs = _torch_private.tree_map(_float64, (args, kwargs))
    return _call(target, args, kwargs)


class Float64Interpreter(RecordingInterpreter):
    """Runs a graph in float64 and keeps every node's value: floating-point inputs,
    constants, operands and ``dtype=`` arguments become float64 (the same computation
    without float32's rounding, as near as eager can run it)."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return super().run(*float64_value(args), **kwargs)

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        return float64_value(super().get_attr(target, args, kwargs))

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return _call_float64(target, args, kwargs)


def local_value(
    node: torch.fx.Node,
    env: Mapping[torch.fx.Node, Any],
    layout: Mapping[torch.fx.Node, Any] | None = None,
    *,
    float64: bool = False,
) -> Any:
    """Runs one FX node eagerly on the values ``env`` gives its operands.

    Args:
        node: The node.
        env: Its operands' values.
        layout: The eager graph's values: an op that reads storage
            (:data:`STORAGE_READERS`) gets its operands laid out as these are.
        float64: Run the op in float64 (:class:`Float64Interpreter`'s conversions).
    """

    def value(operand: torch.fx.Node) -> Any:
        if layout is not None and node.target in STORAGE_READERS:
            return _runner.laid_out_like(env[operand], layout.get(operand))
        return env[operand]

    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value)
    return (_call_float64 if float64 else _call)(node.target, args, kwargs)
