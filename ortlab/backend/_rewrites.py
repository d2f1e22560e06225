"""FX rewrites of the ATen graph before the support rules see it: ops whose torchlib
translation is wrong (or refused by ONNX Runtime) on some inputs, rewritten into ops
whose translation is right on them.

# NOTE: :func:`for_onnx` returns a rewritten copy (the graph it receives is left as it
# was); every rewrite is exact, i.e. computes what PyTorch computes, and keeps the
# rewritten nodes' ``meta["val"]`` (the translation reads shapes and dtypes from it).
#
# Grouped-query attention. The attention ops take fewer key/value heads than query heads
# (transformers calls ``scaled_dot_product_attention(..., enable_gqa=True)``); torchlib's
# translation multiplies the query by the key as they are, which ONNX Runtime refuses
# ("Incompatible dimensions"). The key and value heads are repeated first, as
# transformers' ``repeat_kv`` does (head i of the query reads key head i // n_rep):
#
#   before                               after
#   q [B,4,S,D] --+                      k [B,2,S,D] -> unsqueeze(2) [B,2,1,S,D]
#   k [B,2,S,D] --+-> attention            -> expand(-1,-1,2,-1,-1) -> flatten(1,2) [B,4,S,D]
#   v [B,2,S,D] --+                      (v the same) ---> attention(q, k', v')
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ortlab.backend import _export

_ATTENTION_OP_NAMES = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
)


def _attention_ops() -> frozenset[Any]:
    """The attention overloads whose first three arguments are query, key and value
    ([..., heads, sequence, head size]); those this torch lacks are left out."""
    ops = []
    for name in _ATTENTION_OP_NAMES:
        packet = getattr(torch.ops.aten, name, None)
        overload = getattr(packet, "default", None) if packet is not None else None
        if overload is not None:
            ops.append(overload)
    return frozenset(ops)


_ATTENTION_OPS = _attention_ops()


def for_onnx(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with every rewrite of this module applied: a rewritten copy, or
    ``graph_module`` itself when no rewrite applies (it is never modified).

    Rewrites: grouped-query attention gets its key/value heads repeated
    (:func:`expand_kv_heads`).
    """
    if not any(_gqa_attention(n) for n in graph_module.graph.nodes):
        return graph_module
    rewritten = _export.copy_graph_module(graph_module)
    expand_kv_heads(rewritten)
    return rewritten


# -- grouped-query attention --------------------------------------------------------------


def _head_counts(node: torch.fx.Node) -> tuple[int, int] | None:
    """``(query heads, key/value heads)`` of an attention node whose counts differ and
    are known integers with the query's a multiple of the key's; ``None`` otherwise."""
    if node.op != "call_function" or node.target not in _ATTENTION_OPS or len(node.args) < 3:
        return None
    values = [_val(a) for a in node.args[:3]]
    if not all(isinstance(v, torch.Tensor) and v.dim() >= 3 for v in values):
        return None
    query, key, value = values
    heads = (query.shape[-3], key.shape[-3], value.shape[-3])
    if not all(isinstance(h, int) for h in heads):
        return None
    q_heads, k_heads, v_heads = heads
    if k_heads != v_heads or k_heads == q_heads or k_heads == 0 or q_heads % k_heads:
        return None
    return q_heads, k_heads


def _gqa_attention(node: torch.fx.Node) -> bool:
    return _head_counts(node) is not None


def expand_kv_heads(graph_module: torch.fx.GraphModule) -> int:
    """Repeats the key and value heads of every attention node with fewer of them than
    query heads (grouped-query attention), in place; returns how many nodes changed.

    Key/value head ``j`` serves query heads ``j * n_rep .. (j + 1) * n_rep - 1``
    (``repeat_interleave``), which is what ``enable_gqa=True`` computes.
    """
    changed = 0
    graph = graph_module.graph
    for node in list(graph.nodes):
        counts = _head_counts(node)
        if counts is None:
            continue
        q_heads, k_heads = counts
        repeats = q_heads // k_heads
        args = list(node.args)
        with graph.inserting_before(node):
            for i in (1, 2):
                args[i] = _repeat_heads(graph, node, args[i], repeats)
        node.args = tuple(args)
        if "enable_gqa" in node.kwargs:
            node.kwargs = {**node.kwargs, "enable_gqa": False}
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


def _repeat_heads(
    graph: torch.fx.Graph, attention: torch.fx.Node, kv: torch.fx.Node, repeats: int
) -> torch.fx.Node:
    """``kv`` [..., H, S, D] -> [..., H * repeats, S, D], head j repeated in place."""
    rank = _val(kv).dim()
    head = rank - 3
    aten = torch.ops.aten
    sizes = [-1] * (rank + 1)
    sizes[head + 1] = repeats
    node = _add(graph, attention, aten.unsqueeze.default, (kv, head + 1))
    node = _add(graph, attention, aten.expand.default, (node, sizes))
    return _add(graph, attention, aten.flatten.using_ints, (node, head, head + 1))


def _add(
    graph: torch.fx.Graph, origin: torch.fx.Node, target: Any, args: tuple[Any, ...]
) -> torch.fx.Node:
    """A new node computing ``target(*args)``, with its ``meta["val"]`` computed on the
    arguments' fake values and ``origin``'s source metadata (stack trace, module path)."""
    node = graph.call_function(target, args)
    fake_args = tuple(_val(a) if isinstance(a, torch.fx.Node) else a for a in args)
    node.meta = {
        k: v for k, v in origin.meta.items() if k not in ("val", "tensor_meta", "seq_nr")
    }
    node.meta["val"] = target(*fake_args)
    return node


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node
