"""Symbolic sizes computed from the graph's inputs, so that size arithmetic does not cut
partitions.

# NOTE: with dynamic shapes, ATen graphs read sizes of intermediate tensors
# (``sym_size.int(conv_out, 2)``) for views and for batch-norm and attention arithmetic.
# Size arithmetic stays in Python (it computes SymInts, not tensors), and a node that
# reads a tensor of partition A and feeds partition B forces the two apart:
#
#   before:  x -> [conv -> gelu] -> sym_size(gelu_out, 2) -> mul -> [view -> ... ]
#                 fused_0          (Python, needs fused_0's output)    fused_1
#   after:   x -> sym_size(x, 2) -> floordiv(_, 4) -> mul ----------+
#            x -> [conv -> gelu -> view -> ...]  <-----------------+ one partition
#
# Every symbolic size is an expression in the graph inputs' symbols (``s100 // 4``);
# when all its symbols are dims of input tensors (or SymInt inputs), the read is
# replaced by that expression computed from the inputs. Expressions with operations this
# module does not know, or with data-dependent (unbacked) symbols, are left alone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ortlab.backend import _torch_private

_SIZE_READS = (torch.ops.aten.sym_size.int,)


def _sources(graph: torch.fx.Graph) -> dict[Any, tuple[torch.fx.Node, int | None]]:
    """Symbol -> ``(placeholder, dim)`` for tensor dims, ``(placeholder, None)`` for SymInt
    inputs, first occurrence wins."""
    sources: dict[Any, tuple[torch.fx.Node, int | None]] = {}
    for node in graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt):
            if value.node.expr.is_Symbol:
                sources.setdefault(value.node.expr, (node, None))
        elif isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    sources.setdefault(size.node.expr, (node, dim))
    return sources


class Emitter:
    """Builds FX nodes computing a sympy size expression from the graph inputs, each with
    its ``meta["val"]`` (the SymInt it computes), before ``anchor``."""

    def __init__(
        self,
        graph: torch.fx.Graph,
        sources: dict[Any, tuple[torch.fx.Node, int | None]],
        anchor: torch.fx.Node,
    ) -> None:
        self._graph = graph
        self._sources = sources
        self._anchor = anchor
        self._symbols: dict[Any, torch.fx.Node] = {}
        self._done: dict[Any, Any] = {}  # expression -> its node (or int), computed once

    def _node(self, target: Callable[..., Any], args: tuple[Any, ...]) -> torch.fx.Node:
        values = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
        with self._graph.inserting_before(self._anchor):
            node = self._graph.call_function(target, args)
        node.meta["val"] = target(*values)
        return node

    def _symbol(self, symbol: Any) -> torch.fx.Node:
        node = self._symbols.get(symbol)
        if node is None:
            placeholder, dim = self._sources[symbol]
            if dim is None:
                node = placeholder
            else:
                node = self._node(torch.ops.aten.sym_size.int, (placeholder, dim))
            self._symbols[symbol] = node
        return node

    def emit(self, expr: Any) -> Any:
        """A node (or an int) computing ``expr``; ``None`` when it cannot."""
        if expr not in self._done:
            self._done[expr] = self._emit(expr)
        return self._done[expr]

    def _emit(self, expr: Any) -> Any:
        import sympy

        functions = _torch_private.sympy_size_functions()

        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol:
            return self._symbol(expr) if expr in self._sources else None
        if isinstance(expr, (sympy.Add, sympy.Mul)):
            combine = operator.add if isinstance(expr, sympy.Add) else operator.mul
            terms = [self.emit(arg) for arg in expr.args]
            if any(t is None for t in terms):
                return None
            result = terms[0]
            for term in terms[1:]:
                result = self._combine(combine, result, term)
            return result
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) >= 1:
            base = self.emit(expr.base)
            if base is None:
                return None
            result = base
            for _ in range(int(expr.exp) - 1):
                result = self._combine(operator.mul, result, base)
            return result
        ceil_of = expr.args[0] if isinstance(expr, functions.CeilToInt) else None
        if isinstance(ceil_of, functions.IntTrueDiv) or isinstance(expr, functions.CeilDiv):
            # ceil(a / b) of integers, exactly: -((-a) // b)
            numerator, denominator = (ceil_of or expr).args
            left, right = self.emit(numerator), self.emit(denominator)
            if left is None or right is None:
                return None
            quotient = self._combine(
                operator.floordiv, self._combine(operator.mul, left, -1), right
            )
            return self._combine(operator.mul, quotient, -1)
        binary: dict[type, Callable[[Any, Any], Any]] = {
            functions.FloorDiv: operator.floordiv,
            functions.PythonMod: operator.mod,
            functions.Mod: operator.mod,
        }
        operands = expr.args
        for kind, target in binary.items():
            if isinstance(expr, kind):
                left, right = (self.emit(arg) for arg in operands)
                if left is None or right is None:
                    return None
                return self._combine(target, left, right)
        return None

    def _combine(self, target: Callable[..., Any], left: Any, right: Any) -> Any:
        if isinstance(left, int) and isinstance(right, int):
            return target(left, right)
        return self._node(target, (left, right))


def emitter(graph: torch.fx.Graph, anchor: torch.fx.Node) -> Emitter:
    """An :class:`Emitter` of sizes computed from ``graph``'s inputs, before ``anchor``."""
    return Emitter(graph, _sources(graph), anchor)


def reads_intermediate_sizes(graph_module: torch.fx.GraphModule) -> bool:
    """Whether the graph reads a symbolic size of a tensor it computes."""
    for target in _SIZE_READS:
        nodes: list[torch.fx.Node] = graph_module.graph.find_nodes(
            op="call_function", target=target
        )
        if any(getattr(n.args[0], "op", None) != "placeholder" for n in nodes):
            return True
    return False


def sizes_from_inputs(graph_module: torch.fx.GraphModule) -> int:
    """Replaces reads of intermediate tensors' symbolic sizes by the same sizes computed
    from the graph's inputs, in place; returns how many reads were replaced."""
    graph = graph_module.graph
    sources = _sources(graph)
    if not sources:
        return 0
    anchor = next(n for n in graph.nodes if n.op != "placeholder")
    emitter = Emitter(graph, sources, anchor)
    replaced = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SIZE_READS:
            continue
        tensor = node.args[0]
        value = node.meta.get("val")
        if getattr(tensor, "op", None) == "placeholder" or not isinstance(value, torch.SymInt):
            continue
        if not value.node.expr.free_symbols <= sources.keys():
            continue
        computed = emitter.emit(value.node.expr)
        if computed is None:
            continue
        node.replace_all_uses_with(computed)
        graph.erase_node(node)
        replaced += 1
    if replaced:
        graph.eliminate_dead_code()
        graph_module.recompile()
    return replaced
