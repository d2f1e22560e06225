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
#
# Attention rows that mask every key. PyTorch's CPU flash attention returns 0 for a query
# whose mask row is -inf everywhere (a left-padded position in a batch of prompts);
# torchlib's translation adds the mask and takes a softmax, which gives 0/0 = NaN there,
# and the NaN then spreads through the rest of that sequence (generate() emitted token 0
# from then on). The output is set to 0 where the mask row is all -inf, as PyTorch does:
#
#   before                               after
#   attention(q, k, v, attn_mask=m)[0]   out = attention(q, k, v, attn_mask=m)[0]
#                                        out.masked_fill(all(m == -inf, -1, keepdim), 0)
#
# as_strided. ATen's ``as_strided`` indexes its input's *storage*; the translation
# indexes the input's values as if they were that storage (contiguous, offset 0). On a
# view of another layout (Longformer's chunking: a transposed projection viewed as
# chunks) it reads other elements. Where the view chain starts at a value that is
# contiguous with storage offset 0, the storage *is* that value, so ``as_strided`` is
# rebased onto it (the view's storage offset made explicit):
#
#   before                                         after
#   add -> t -> view -> as_strided(size, stride)   add -> as_strided(size, stride, off)
#                                                  (t, view: still there for other users)
#
# Where that cannot be proven (the chain starts at a non-contiguous value, or at a graph
# input while the op gives an explicit storage offset: Dynamo does not guard an input's
# storage offset), the op, its view chain and their producer must stay in PyTorch:
# :func:`storage_readers_kept_in_pytorch` names them, with the reason.
#
# Embedding bags. torchlib translates ``_embedding_bag`` as a loop over the bags that
# treats ``padding_idx=-1`` (none) as the last row and zero-fills the auxiliary outputs.
# Where only the bags are read (inference graphs; training traces the composite itself,
# see ``_torch_private.embedding_bag_as_composite``), the op becomes that composite:
#
#   before                                    after
#   _embedding_bag(w, idx, offsets) -> [0]    index_add(starts) -> cumsum: bag of each index
#                                             index_select(w, idx) -> index_add / scatter
#                                             (max) into the bags -> [:bags]
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.fx

from ortlab.backend import _export, _torch_private

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
_AS_STRIDED = torch.ops.aten.as_strided.default
_SHARING_VIEW_OPS = frozenset({torch.ops.aten._unsafe_view.default})
"""Ops not marked as views by their schema whose output shares the input's storage."""
_MAYBE_COPYING_VIEW_OPS = frozenset(
    {torch.ops.aten.reshape.default, torch.ops.aten._reshape_alias.default}
)
"""Views that copy when their input is not contiguous."""


def for_onnx(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with every rewrite of this module applied: a rewritten copy, or
    ``graph_module`` itself when no rewrite applies (it is never modified).

    Rewrites: grouped-query attention gets its key/value heads repeated
    (:func:`expand_kv_heads`); attention rows whose mask hides every key are 0, as
    PyTorch computes them (:func:`zero_fully_masked_rows`); ``as_strided`` on a view
    reads the base the view shares its storage with (:func:`rebase_as_strided`);
    embedding bags whose bags alone are read become gathers and scatters
    (:func:`embedding_bags_as_composite`). Numbers and dtypes the translation gets wrong
    are :mod:`_scalars`'s.
    """
    graph = graph_module.graph
    if not (
        any(
            _gqa_attention(n) or _masked_attention(n) is not None or _bags_only(n)
            for n in graph.nodes
        )
        or any(_rebasable(graph))
    ):
        return graph_module
    rewritten = _export.copy_graph_module(graph_module)
    expand_kv_heads(rewritten)
    zero_fully_masked_rows(rewritten)
    rebase_as_strided(rewritten)
    embedding_bags_as_composite(rewritten)
    return rewritten


# -- grouped-query attention --------------------------------------------------------------


def _head_counts(node: torch.fx.Node) -> tuple[int, int] | None:
    """``(query heads, key/value heads)`` of an attention node whose counts differ and
    are known integers with the query's a multiple of the key's; ``None`` otherwise."""
    if node.op != "call_function" or node.target not in _ATTENTION_OPS or len(node.args) < 3:
        return None
    values = [fake_value(a) for a in node.args[:3]]
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
    rank = fake_value(kv).dim()
    head = rank - 3
    aten = torch.ops.aten
    sizes = [-1] * (rank + 1)
    sizes[head + 1] = repeats
    node = add_node(graph, attention, aten.unsqueeze.default, (kv, head + 1))
    node = add_node(graph, attention, aten.expand.default, (node, sizes))
    return add_node(graph, attention, aten.flatten.using_ints, (node, head, head + 1))


def add_node(
    graph: torch.fx.Graph,
    origin: torch.fx.Node,
    target: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
) -> torch.fx.Node:
    """A new node computing ``target(*args, **kwargs)``, with its ``meta["val"]``
    computed on the arguments' fake values under ``origin``'s fake mode (a factory has
    no fake argument) and ``origin``'s source metadata (stack trace, module path)."""
    node = graph.call_function(target, args, kwargs or {})
    fake_args = tuple(fake_value(a) if isinstance(a, torch.fx.Node) else a for a in args)
    node.meta = {
        k: v for k, v in origin.meta.items() if k not in ("val", "tensor_meta", "seq_nr")
    }
    mode = _torch_private.detect_fake_mode([origin.meta.get("val"), *fake_args])
    with mode if mode is not None else contextlib.nullcontext():
        node.meta["val"] = target(*fake_args, **(kwargs or {}))
    return node


# -- attention rows that mask every key -----------------------------------------------------

_CPU_FLASH_ATTENTION = getattr(
    getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None),
    "default",
    None,
)


def _masked_attention(node: torch.fx.Node) -> torch.fx.Node | None:
    """The mask of a CPU flash-attention node whose attention output is read (``None``
    for any other node, or one without a mask)."""
    if node.op != "call_function" or node.target is not _CPU_FLASH_ATTENTION:
        return None
    mask = node.kwargs.get("attn_mask")
    if not isinstance(mask, torch.fx.Node) or not isinstance(fake_value(mask), torch.Tensor):
        return None
    if not any(u.target is operator.getitem and u.args[1] == 0 for u in node.users):
        return None
    return mask


def zero_fully_masked_rows(graph_module: torch.fx.GraphModule) -> int:
    """Sets the attention output to 0 where a query's mask row hides every key (all
    -inf, or all False), in place; returns how many attention nodes were guarded.

    That is PyTorch's result for such a row; the translation's softmax over a row of
    -inf gives NaN. The guard goes after the heads are merged back (``[B, H, Q, D]`` ->
    transpose -> ``[B, Q, H*D]``) where the graph does that and the mask is the same for
    every head, so that ONNX Runtime's attention fusions still find their pattern.
    """
    aten = torch.ops.aten
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        mask = _masked_attention(node)
        if mask is None:
            continue
        for output in [
            u for u in node.users if u.target is operator.getitem and u.args[1] == 0
        ]:
            site, layout = _guard_site(output, fake_value(mask))
            users = list(site.users)
            with graph.inserting_before(site.next):
                if fake_value(mask).dtype == torch.bool:
                    hidden = add_node(graph, node, aten.logical_not.default, (mask,))
                else:
                    hidden = add_node(graph, node, aten.eq.Scalar, (mask, float("-inf")))
                row = add_node(graph, node, aten.all.dim, (hidden, -1, True))  # [.., Q, 1]
                if layout == "bqhd":
                    row = add_node(graph, node, aten.transpose.int, (row, 1, 2))
                elif layout == "bq(hd)":
                    row = add_node(graph, node, aten.squeeze.dim, (row, 1))
                guarded = add_node(graph, node, aten.masked_fill.Scalar, (site, row, 0.0))
            for user in users:
                user.replace_input_with(site, guarded)
            _reshape_views_after(guarded)
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


_LAYOUT_FOLLOWERS = frozenset(
    {
        torch.ops.aten.view.default,
        torch.ops.aten._unsafe_view.default,
        torch.ops.aten.reshape.default,
        torch.ops.aten.permute.default,
        torch.ops.aten.transpose.int,
        torch.ops.aten.unsqueeze.default,
        torch.ops.aten.squeeze.dim,
        torch.ops.aten.expand.default,
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.select.int,
        torch.ops.aten.alias.default,
    }
)


def _reshape_views_after(guarded: torch.fx.Node) -> None:
    """Turns the ``view``s downstream of a guard (through view-like ops) into reshapes.
    The graph's views were traced on the attention output's strides; the guard's
    result can have others in PyTorch (SAM's windowed attention: ``view`` after a
    permute raised "view size is not compatible", out of ``torch.compile`` when the
    partition ran in PyTorch). A reshape views where it can and copies where it must;
    in ONNX both are the same Reshape."""
    aten = torch.ops.aten
    stack, seen = [guarded], set()
    while stack:
        node = stack.pop()
        for user in node.users:
            if user in seen or user.op != "call_function":
                continue
            seen.add(user)
            if user.target not in _LAYOUT_FOLLOWERS:
                continue
            if user.target in (aten.view.default, aten._unsafe_view.default):
                user.target = aten.reshape.default
            stack.append(user)


_RESHAPES = frozenset(
    {
        torch.ops.aten.view.default,
        torch.ops.aten.reshape.default,
        torch.ops.aten._unsafe_view.default,
    }
)


def _guard_site(output: torch.fx.Node, mask: torch.Tensor) -> tuple[torch.fx.Node, str]:
    """Where the masked-row guard of an attention ``output`` [B, H, Q, D] goes, and the
    layout there: the furthest node of its single-user chain of reshapes that keep the
    shape, clones, the head/sequence transpose (``"bqhd"``) and the merge of the heads
    (``"bq(hd)"``); the output itself (``"bhqd"``) when the mask differs per head."""
    site, layout = output, "bhqd"
    if mask.dim() != 4 or not _same_size(mask.shape[1], 1) or fake_value(output).dim() != 4:
        return site, layout
    node = output
    while len(node.users) == 1:
        (nxt,) = node.users
        if nxt.op != "call_function":
            break
        before, after = fake_value(node).shape, fake_value(nxt).shape
        if (nxt.target in _RESHAPES or nxt.target is torch.ops.aten.clone.default) and (
            _same_sizes(before, after)
        ):
            pass
        elif layout == "bhqd" and _swaps_heads_and_sequence(nxt):
            layout = "bqhd"
        elif (
            layout == "bqhd"
            and nxt.target in _RESHAPES
            and len(after) == 3
            and _same_sizes(before[:2], after[:2])
        ):
            layout = "bq(hd)"
        else:
            break
        node = site = nxt
    return site, layout


def _swaps_heads_and_sequence(node: torch.fx.Node) -> bool:
    aten = torch.ops.aten
    args: Any = node.args
    if node.target is aten.transpose.int:
        return {d % 4 for d in args[1:3]} == {1, 2}
    if node.target is aten.permute.default:
        return [d % 4 for d in args[1]] == [0, 2, 1, 3]
    return False


def _same_size(a: Any, b: Any) -> bool:
    """Two sizes known equal without a guard (ints, or symbols of one expression)."""
    return a == b if isinstance(a, int) and isinstance(b, int) else str(a) == str(b)


def _same_sizes(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(_same_size(x, y) for x, y in zip(a, b))


# -- as_strided ---------------------------------------------------------------------------


class _Source:
    """Where an ``as_strided`` node's input gets its storage from."""

    __slots__ = ("base", "chain", "reason")

    def __init__(self, base: torch.fx.Node, chain: list[torch.fx.Node], reason: str) -> None:
        self.base = base
        """The node that owns the storage: a graph input or a non-view op."""
        self.chain = chain
        """The view nodes from the ``as_strided`` input back to (not including) ``base``."""
        self.reason = reason
        """Why the op cannot run in ONNX Runtime on ``base`` ("" when it can)."""


def _is_view(node: torch.fx.Node) -> bool:
    """Whether ``node``'s output shares the storage of its first argument: a view, or an
    op that returns that argument."""
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:  # one output of split/unbind/chunk...
        producer = node.args[0]
        return isinstance(producer, torch.fx.Node) and _is_view(producer)
    if not _torch_private.is_op_overload(target):
        return False
    if target in _MAYBE_COPYING_VIEW_OPS:
        source = node.args[0]
        return isinstance(source, torch.fx.Node) and _is_dense_base(fake_value(source))
    if target in _SHARING_VIEW_OPS:
        return True
    # Views, and ops that return their first argument (``copy_`` into a graph input).
    returns = target._schema.returns
    return bool(returns) and returns[0].alias_info is not None


def _is_in_place(node: torch.fx.Node) -> bool:
    target = node.target
    return _torch_private.is_op_overload(target) and bool(target._schema.is_mutable)


def _view_source(node: torch.fx.Node) -> torch.fx.Node:
    """The node a view reads the storage of."""
    if node.target is operator.getitem:
        node = node.args[0]  # type: ignore[assignment]
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    return source


def _is_dense_base(value: Any) -> bool:
    """Whether a value is its storage read in order: contiguous, storage offset 0."""
    if not isinstance(value, torch.Tensor):
        return False
    offset = value.storage_offset()
    return isinstance(offset, int) and offset == 0 and bool(value.is_contiguous())


def _storage_offset_arg(node: torch.fx.Node) -> Any:
    if len(node.args) > 3:
        return node.args[3]
    return node.kwargs.get("storage_offset")


def _source(node: torch.fx.Node) -> _Source:
    """Follows an ``as_strided`` node's input back through views to the storage's owner,
    and says whether the op reads the same elements in ONNX Runtime from that owner."""
    first = node.args[0]
    assert isinstance(first, torch.fx.Node)
    dtype = fake_value(first).dtype if isinstance(fake_value(first), torch.Tensor) else None
    chain: list[torch.fx.Node] = []
    base = first
    while _is_view(base):
        chain.append(base)
        base = _view_source(base)
    value = fake_value(base)
    name = f"{base.name!r}"
    written = [n for n in chain if _is_in_place(n)]
    if written:
        return _Source(
            base,
            chain,
            f"as_strided reads the memory of {name} after {written[0].name!r} wrote it in "
            "place (ONNX values are immutable); it runs in PyTorch",
        )
    if not isinstance(value, torch.Tensor) or value.dtype != dtype:
        return _Source(
            base,
            chain,
            f"as_strided reads the memory of {name} through a view that changes the dtype; "
            "ONNX values have no memory to reinterpret, so it runs in PyTorch",
        )
    if not _is_dense_base(value):
        where = "the graph input" if base.op == "placeholder" else "the value"
        return _Source(
            base,
            chain,
            f"as_strided reads the memory of {where} {name}, which is not contiguous "
            f"(strides {tuple(value.stride())}, storage offset {value.storage_offset()}); "
            "an ONNX value is its elements in order, so as_strided, the views leading to "
            "it and their producer run in PyTorch",
        )
    if chain and not isinstance(fake_value(first).storage_offset(), int):
        return _Source(
            base,
            chain,
            f"as_strided reads {name} through a view at a symbolic storage offset; it runs "
            "in PyTorch",
        )
    if base.op == "placeholder" and _storage_offset_arg(node) is not None:
        return _Source(
            base,
            chain,
            f"as_strided gives an explicit storage offset into the graph input {name}, "
            "whose own offset into its storage is not known when compiling (Dynamo does "
            "not guard it); it runs in PyTorch",
        )
    reach = _furthest_element(node)
    if reach is not None and isinstance(value.numel(), int) and reach >= value.numel():
        return _Source(
            base,
            chain,
            f"as_strided reads element {reach} of the memory of {name}, beyond its "
            f"{value.numel()} elements (memory ONNX Runtime is not given); it runs in "
            "PyTorch",
        )
    return _Source(base, chain, "")


def _furthest_element(node: torch.fx.Node) -> int | None:
    """The largest storage index an ``as_strided`` node reads, when its arguments are
    integers (``None`` otherwise)."""
    size, stride = node.args[1], node.args[2]
    offset = _storage_offset_arg(node)
    if offset is None:
        offset = fake_value(node.args[0]).storage_offset()  # type: ignore[arg-type]
    numbers = [*size, *stride, offset]  # type: ignore[misc]
    if not all(isinstance(x, int) for x in numbers):
        return None
    if any(s == 0 for s in size):  # type: ignore[union-attr]
        return None
    return offset + sum((s - 1) * t for s, t in zip(size, stride))  # type: ignore[arg-type]


def _as_strided_nodes(graph: torch.fx.Graph) -> Iterator[torch.fx.Node]:
    return (n for n in graph.nodes if n.op == "call_function" and n.target is _AS_STRIDED)


def _rebasable(graph: torch.fx.Graph) -> Iterator[tuple[torch.fx.Node, _Source]]:
    """``as_strided`` nodes on a view that can read their base instead."""
    for node in _as_strided_nodes(graph):
        source = _source(node)
        if source.chain and not source.reason:
            yield node, source


def rebase_as_strided(graph_module: torch.fx.GraphModule) -> int:
    """Makes every ``as_strided`` on a view of a contiguous value with storage offset 0
    read that value, in place (see the module's NOTE); returns how many it changed."""
    changed = 0
    for node, source in list(_rebasable(graph_module.graph)):
        offset = _storage_offset_arg(node)
        if offset is None:
            offset = fake_value(node.args[0]).storage_offset()
        size, stride = node.args[1], node.args[2]
        node.args = (source.base, size, stride, *((offset,) if offset else ()))
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "storage_offset"}
        changed += 1
    if changed:
        graph_module.graph.eliminate_dead_code()
        graph_module.graph.lint()
        graph_module.recompile()
    return changed


def storage_readers_kept_in_pytorch(graph_module: torch.fx.GraphModule) -> dict[str, str]:
    """``{node name: reason}`` for the nodes that must run in PyTorch so that every
    ``as_strided`` reads the memory it reads in eager: each ``as_strided`` that
    :func:`rebase_as_strided` could not rebase (call it on the graph :func:`for_onnx`
    returned), the views between it and the storage's owner, and that owner when it
    is an op (its output's layout is what ``as_strided`` reads; a graph input is read
    as it is).

    An ``as_strided`` on a view it could rebase is listed too, on a graph that was not
    rewritten.
    """
    kept: dict[str, str] = {}
    for node in _as_strided_nodes(graph_module.graph):
        source = _source(node)
        reason = source.reason
        if not reason and source.chain:
            reason = (
                "as_strided reads the memory of a view of "
                f"{source.base.name!r}; rebased onto it by ortlab's rewrites, it runs in "
                "ONNX Runtime, but this graph was not rewritten"
            )
        if not reason:
            continue
        kept.setdefault(node.name, reason)
        for view in source.chain:
            kept.setdefault(view.name, reason)
        if source.base.op == "call_function":
            kept.setdefault(source.base.name, reason)
    return kept


# -- embedding bags -----------------------------------------------------------------------

_EMBEDDING_BAG_OPS = frozenset(
    {torch.ops.aten._embedding_bag.default, torch.ops.aten._embedding_bag_forward_only.default}
)


def _bags_only(node: torch.fx.Node) -> bool:
    """An embedding bag whose auxiliary outputs nothing reads."""
    if node.op != "call_function" or node.target not in _EMBEDDING_BAG_OPS:
        return False
    return all(
        u.target is operator.getitem and (u.args[1] == 0 or not u.users) for u in node.users
    )


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    """A node's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
    return values


def embedding_bags_as_composite(graph_module: torch.fx.GraphModule) -> int:
    """Replaces every embedding bag whose auxiliary outputs nothing reads by
    ``_torch_private.embedding_bag_composite`` traced to ATen, in place; returns how
    many it replaced."""
    graph = graph_module.graph
    changed = 0
    for node in list(graph.nodes):
        if not _bags_only(node):
            continue
        args = _arguments(node)
        mode, last, padding = args["mode"], args["include_last_offset"], args["padding_idx"]
        if not (isinstance(mode, int) and isinstance(last, bool) and isinstance(padding, int)):
            continue
        inputs = [args["weight"], args["indices"], args["offsets"]]
        if args["per_sample_weights"] is not None:
            inputs.append(args["per_sample_weights"])

        def composite(weight: Any, indices: Any, offsets: Any, *scales: Any) -> Any:
            return _torch_private.embedding_bag_composite(
                weight,
                indices,
                offsets,
                mode,  # noqa: B023 (traced at once, in this iteration)
                scales[0] if scales else None,
                last,  # noqa: B023
                padding,  # noqa: B023
            )

        traced = _torch_private.trace_aten(composite, [fake_value(a) for a in inputs])
        bags = _splice(graph, node, traced, inputs)
        if bags is None:
            continue
        for user in list(node.users):  # output 0, and unread outputs
            user.replace_all_uses_with(bags)
            graph.erase_node(user)
        graph.erase_node(node)
        changed += 1
    if changed:
        graph.lint()
        graph_module.recompile()
    return changed


def _splice(
    graph: torch.fx.Graph,
    origin: torch.fx.Node,
    traced: torch.fx.GraphModule,
    inputs: list[Any],
) -> torch.fx.Node | None:
    """Copies ``traced``'s nodes before ``origin``, its placeholders bound to ``inputs``;
    returns the node of its one output (``None``, and nothing copied, for a graph with
    constants or several outputs)."""
    nodes = list(traced.graph.nodes)
    output = nodes[-1].args[0]
    if any(n.op == "get_attr" for n in nodes) or not isinstance(output, torch.fx.Node):
        return None
    placeholders = [n for n in nodes if n.op == "placeholder"]
    env: dict[torch.fx.Node, Any] = dict(zip(placeholders, inputs))
    source = {k: v for k, v in origin.meta.items() if k not in ("val", "tensor_meta")}
    with graph.inserting_before(origin):
        for node in nodes:
            if node.op != "call_function":
                continue
            copied = graph.node_copy(node, lambda n: env[n])
            copied.meta = {**source, "val": node.meta["val"]}
            env[node] = copied
    return env[output]


def fake_value(node: Any) -> Any:
    """A node's fake value (``meta["val"]``); anything else as it is."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node
