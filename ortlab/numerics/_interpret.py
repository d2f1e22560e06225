"""Running partition graphs eagerly, node by node: the references localisation compares to.

- :class:`RecordingInterpreter` runs one partition's FX graph on the inputs ONNX Runtime
  received and keeps every node's value;
- :class:`AllEagerInterpreter` runs a whole partitioned graph with every partition in
  PyTorch, recording what each partition receives (the error *carried in*) and, where
  asked, values inside partitions (decision flips);
- :func:`local_value` runs one node on given operand values (a node's *own* error);
- :class:`OperandScales` gives each node the magnitude the intermediate tolerance scales
  with (:mod:`ortlab.numerics._compare`).

``aten.view`` falls back to ``reshape`` (same values) everywhere: a partition's graph may
rely on the strides its producer had in PyTorch (a ``view`` of a ``permute``), while ONNX
Runtime hands over contiguous tensors.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.fx

from ortlab.backend import _torch_private


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


def local_value(node: torch.fx.Node, env: Mapping[torch.fx.Node, Any]) -> Any:
    """Runs one FX node eagerly on the values ``env`` gives its operands."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
    return _call(node.target, args, kwargs)


def _magnitude(value: Any) -> float:
    """Largest finite absolute value in a tensor, number, or tuple of them (0 if none)."""
    if isinstance(value, (tuple, list)):
        return max((_magnitude(v) for v in value), default=0.0)
    if isinstance(value, bool) or not isinstance(value, (torch.Tensor, int, float)):
        return 0.0
    if not isinstance(value, torch.Tensor):
        return abs(float(value)) if math.isfinite(value) else 0.0
    if value.numel() == 0 or value.dtype == torch.bool or value.is_complex():
        return 0.0
    v = value.detach().to(torch.float64).abs()
    v = v[torch.isfinite(v)]
    return float(v.max()) if v.numel() else 0.0


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


class OperandScales:
    """The scale of a node for the intermediate rule: the largest finite magnitude among
    its value, its operands' values and its numeric literals (rounding error follows the
    operands: :mod:`ortlab.numerics._compare`)."""

    def __init__(self, env: Mapping[torch.fx.Node, Any]) -> None:
        self._env = env
        self._own: dict[torch.fx.Node, float] = {}

    def _of(self, node: torch.fx.Node) -> float:
        if node not in self._own:
            self._own[node] = _magnitude(self._env.get(node))
        return self._own[node]

    def __call__(self, node: Any) -> float:
        if not isinstance(node, torch.fx.Node):
            return 0.0
        leaves = _torch_private.tree_leaves((node.args, node.kwargs))
        return max(
            [
                self._of(node),
                *(self._of(a) for a in node.all_input_nodes),
                *(abs(float(a)) for a in leaves if _is_number(a)),
            ]
        )
