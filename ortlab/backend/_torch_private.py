"""Every private PyTorch API ortlab uses, in one place.

It is over 900 lines (about 1,950) on purpose: its one concern is fencing PyTorch's
internals, and a PyTorch upgrade should break one module, read top to bottom next to its
pinning tests, not several. Each function is a thin wrapper over one internal; splitting
by caller would put the same internals behind two fences. Its sections (the backend's,
the lab's, the conformance generator's, the rewrites', precompile's) are marked below.

# NOTE: ortlab relies on internals of the PyTorch ONNX exporter, AOTAutograd, Dynamo and
# FX that carry no stability promise. They are all imported here and nowhere else, so
# that a PyTorch upgrade breaks one module, and tests/test_torch_private.py pins the
# behaviour of each:
#
#   exporter  torch.onnx._internal.exporter: _registration.ONNXRegistry (the op registry),
#             _core._translate_fx_graph and TorchTensor (FX -> onnx_ir, no re-trace),
#             _ir_passes.add_opset_imports, _constants.ONNX_IR_VERSION, _decomp (ONNX-
#             friendly decompositions), _building._determine_input_dtype (swapped while a
#             float64 graph is translated); torch.onnx._internal.fx.passes:
#             InsertTypePromotion,
#             type_promotion.TypePromotionTable; torch.onnx._constants.ONNX_DEFAULT_OPSET
#   AOT       torch._dynamo.backends.common.aot_autograd, torch._functorch: partitioners.
#             min_cut_rematerialization_partition, aot_autograd.make_boxed_func
#   functional torch._subclasses.functional_tensor.FunctionalTensor(Mode),
#             torch._functionalize_has_(data|metadata)_mutation, torch._sync,
#             torch._from_functional_tensor; aten._scaled_dot_product_attention_math;
#             F.multi_head_attention_forward's globals (copied, see _calling_math)
#   Dynamo    torch._guards: detect_fake_mode, CompileContext, TracingContext (and its
#             fw_metadata: AOTAutograd's output layout); torch.compile's
#             isolate_recompiles (2.13; absent in 2.11);
#             torch._dynamo.utils.get_metrics_context (compile start, recompile reason);
#             GraphModule.compile_subgraph_reason and torch._dynamo.utils.
#             graph_break_reasons (graph breaks, inside a call too); torch._dynamo.exc.
#             RestartAnalysis / SkipFrame (control flow); OptimizedModule.dynamo_ctx and
#             _torchdynamo_orig_backend (a compiled callable's backend);
#             Tensor._dynamo_static_input_type (module state);
#             torch._dynamo.optimize with a backend's ``backend_ctx_ctor`` and
#             config._make_closure_patcher (tracing config per compiled callable)
#   schemas   torch._C._check_schema_allow_fake_script_object (which overload takes
#             these arguments); torch._prims_common.elementwise_dtypes (promotion)
#   dispatch  torch._dispatch.python.enable_python_dispatcher (make_fx on symbolic sizes)
#   rng       torch._prims.rng_prims: run_and_save_rng_state, run_with_rng_state
#             (activation checkpointing's draws)
#   fakes     torch._subclasses.fake_tensor.FakeTensor(Mode);
#             torch.fx.passes._tensorify_python_scalars (Dynamo's unspecialised floats);
#             symbolic_shapes.statically_known_true (sizes read without guards);
#             multiprocessing.reductions.StorageWeakRef (inputs sharing memory)
#   decomp    torch._decomp.decomposition_table (torch's own, for float64 calls);
#             torch.nn._reduction.legacy_get_string (size_average / reduce)
#   lab       torch.utils._pytree, torch._dynamo.config / reset (its own section)
#   precompile torch._dynamo.aot_compile (the capture, its bytes, its guards and sources),
#             torch.fx._graph_pickler.GraphPickler, torch._dynamo.mark_static_address
#             (the section at the end)
#
# When an import or signature check of the direct translation fails,
# ``DIRECT_TRANSLATION_ERROR`` says why and the exporter falls back to the public
# ``torch.onnx.export(..., dynamo=True)`` path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import math as math_module
import re
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

from ortlab import errors

if TYPE_CHECKING:
    import onnx_ir as ir

logger = logging.getLogger(__name__)


def _check_direct_translation() -> str | None:
    """``None`` when the exporter internals have the signatures ortlab was written for."""
    try:
        from torch.onnx._internal.exporter import _core, _ir_passes  # noqa: F401
        from torch.onnx._internal.fx import passes

        params = inspect.signature(_core._translate_fx_graph).parameters
        expected = {"fx_graph", "model", "graph_like", "owned_graphs", "lower", "registry"}
        missing = expected - set(params)
        if missing:
            return f"_translate_fx_graph lacks parameters {sorted(missing)}"
        if not hasattr(passes, "InsertTypePromotion"):
            return "InsertTypePromotion is gone from torch.onnx._internal.fx.passes"
    except Exception as e:  # any import problem means: use the public path
        return errors.describe(e)
    return None


DIRECT_TRANSLATION_ERROR: str | None = _check_direct_translation()
"""Why the direct FX→ONNX translation is unavailable on this torch, or ``None``."""


def default_opset() -> int:
    """The opset ``torch.onnx.export`` targets by default (20 on torch 2.13)."""
    from torch.onnx import _constants

    return int(_constants.ONNX_DEFAULT_OPSET)


@functools.cache
def onnx_registry(opset_version: int | None = None) -> Any:
    """The exporter's op registry built from onnxscript's torchlib for an opset (~2 s,
    once per process and opset). For each op it keeps the translation introduced last at
    or below the opset (e.g. ``aten.gelu`` becomes ONNX ``Gelu`` from opset 20)."""
    from torch.onnx._internal.exporter import _registration

    if opset_version is None:
        return onnx_registry(default_opset())
    with without_registry_notices():
        return _registration.ONNXRegistry.from_torchlib(opset_version=opset_version)


class TranslatedOps:
    """Which targets the exporter's registry translates, by name: all that the support
    rules (``is_registered``) and the decomposition table (``in``) ask of the registry.

    Building the registry costs 1.5-3 s per process (onnxscript builds every torchlib
    function); a first call whose partitions all come from the compile cache exports
    nothing, so it needs only these names, which the cache keeps beside its entries.
    An op is named as the registry keys it: ``OpOverload.name()`` (``aten::add.Tensor``),
    else the callable's module and qualified name (``_operator.getitem``).
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    @classmethod
    def of(cls, registry: Any) -> TranslatedOps:
        return cls(op_name(key) for key, metas in registry.functions.items() if metas)

    def __contains__(self, target: object) -> bool:
        return op_name(target) in self.names

    def is_registered(self, target: object) -> bool:
        return target in self

    def __len__(self) -> int:
        return len(self.names)


def op_name(target: object) -> str:
    """A target named as in :class:`TranslatedOps` (a string is already a name)."""
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        return target.name()
    module = getattr(target, "__module__", None) or ""
    return f"{module}.{getattr(target, '__qualname__', repr(target))}"


_KNOWN_TRANSLATIONS: dict[int, TranslatedOps] = {}
"""Opset -> the ops translated at it, once known in this process (from the registry, or
adopted from the compile cache by :func:`adopt_translated_ops`)."""


def translated_ops(opset_version: int | None = None) -> TranslatedOps:
    """The ops the exporter's registry translates at an opset (see :class:`TranslatedOps`);
    builds the registry unless they are already known."""
    opset = default_opset() if opset_version is None else opset_version
    known = _KNOWN_TRANSLATIONS.get(opset)
    if known is None:
        known = _KNOWN_TRANSLATIONS.setdefault(opset, TranslatedOps.of(onnx_registry(opset)))
    return known


def translated_ops_known(opset_version: int | None = None) -> bool:
    opset = default_opset() if opset_version is None else opset_version
    return opset in _KNOWN_TRANSLATIONS


def adopt_translated_ops(opset_version: int | None, names: Iterable[str]) -> None:
    """Takes the translated ops' names for an opset from elsewhere (the compile cache,
    keyed by the versions of torch and onnxscript), so that the registry is built only
    when something is exported. A stale list cannot give a wrong number: translation
    still uses the registry, so an op wrongly listed fails its export and runs in
    PyTorch, and an op wrongly missing runs in PyTorch or decomposed."""
    opset = default_opset() if opset_version is None else opset_version
    _KNOWN_TRANSLATIONS.setdefault(opset, TranslatedOps(names))


def build_exporter_tables(opset_version: int | None = None) -> bool:
    """Builds (once per process and opset) the translated ops and the decomposition table
    for an opset, and the registry unless the translated ops were adopted; returns
    whether anything was built by this call."""

    def misses() -> int:
        tables = (onnx_registry, onnx_friendly_decompositions)
        return sum(table.cache_info().misses for table in tables)

    before = misses()
    onnx_friendly_decompositions(opset_version)  # needs translated_ops(opset_version)
    return misses() > before


_TRACING_PRIMITIVES = ("lift", "lift_fresh")
"""Ops the exporter's table "decomposes" but tracing must see whole (see
:func:`onnx_friendly_decompositions`)."""


@functools.cache
def onnx_friendly_decompositions(
    opset_version: int | None = None,
) -> dict[Any, Callable[..., Any]]:
    """Decompositions that keep ops with an ONNX translation whole (for AOTAutograd and
    the make_fx lowering).

    The exporter builds its table from ``torch._decomp.decomposition_table``, which holds
    a "nop" decomposition of ``aten.lift_fresh`` / ``aten.lift`` into ``aten.alias``. It
    is harmless to ``torch.export`` (its graphs are already lifted) but breaks tracing:
    ``lift_fresh`` is how a tensor constant created inside ``forward`` (GPT-2's
    ``torch.tensor([])``, Llama's rotary constants…) enters the traced graph, and
    make_fx/AOTAutograd turn it into a graph constant only when they see the op itself.
    Decomposed first, the *real* constant reaches the fake-tensor mode as
    ``aten.alias(tensor([]))`` and tracing fails with "Please convert all Tensors to
    FakeTensors first". So those entries are dropped here.
    """
    from torch.onnx._internal.exporter import _decomp

    if opset_version is None:
        return onnx_friendly_decompositions(default_opset())
    # The exporter's own table builder asks only ``op in translated`` of its set.
    table = _decomp.create_onnx_friendly_decomposition_table(
        translated_ops(opset_version)  # type: ignore[arg-type]
    )
    return {
        op: fn
        for op, fn in table.items()
        if getattr(getattr(op, "_schema", None), "name", "").split("::")[-1]
        not in _TRACING_PRIMITIVES
    }


def registry_with(
    opset_version: int | None, translations: Sequence[tuple[Any, Callable[..., Any]]]
) -> Any:
    """A copy of the exporter's registry for an opset with ``translations`` (``(op,
    onnxscript function)`` pairs; an op packet means all its overloads) registered as
    custom translations, which the exporter prefers over torchlib's."""
    import copy

    base = onnx_registry(opset_version)
    if not translations:
        return base
    registry = copy.copy(base)
    registry.functions = {k: list(v) for k, v in base.functions.items()}
    for op, function in translations:
        for overload in _overloads(op):
            registry.register_op(overload, function)
    return registry


def translated_ops_with(
    opset_version: int | None, translations: Sequence[tuple[Any, Callable[..., Any]]]
) -> TranslatedOps:
    """:func:`translated_ops` plus the ops of ``translations`` (as :func:`registry_with`
    registers them), without building the registry when the ops are known."""
    base = translated_ops(opset_version)
    if not translations:
        return base
    return TranslatedOps(
        base.names | {op_name(o) for op, _ in translations for o in _overloads(op)}
    )


def _overloads(op: Any) -> list[Any]:
    """An op packet's overloads (an op: itself)."""
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    return [op]


@functools.cache
def lowering_decompositions(
    opset_version: int | None = None,
) -> dict[Any, Callable[..., Any]]:
    """The decomposition table of both lowerings (make_fx and AOTAutograd):
    :func:`onnx_friendly_decompositions` plus torch's decomposition of batch norm in
    training mode (see :func:`attention_as_math` for the one other change AOTAutograd's
    trace needs).

    ``nll_loss_forward`` (and ``nll_loss2d_forward``) are decomposed too: see
    :data:`_DECOMPOSED_DESPITE_TRANSLATION`.

    ``_native_batch_norm_legit_functional`` (batch norm with batch statistics and
    running-stat updates) has a torchlib translation, but not one that reproduces
    PyTorch's batch statistics, so it had to stay in PyTorch — cutting a CNN's training
    graph at every normalization. Decomposed, it is a mean, a variance and elementwise
    ops (and its backward the decomposed ``native_batch_norm_backward``), all of which
    run in ONNX Runtime. Inference batch norm (``_no_training``) stays one op.
    """
    # Registers prims.fma (Dynamo spells addcmul_(..., value=v) so), which the table
    # decomposes; built before anything imported it, the table missed it for good.
    import torch._inductor.inductor_prims  # noqa: F401
    from torch._decomp import decomposition_table

    from ortlab.backend import _accurate, _decompositions, _scatters, _special

    table = dict(onnx_friendly_decompositions(opset_version))
    for op in _DECOMPOSED_DESPITE_TRANSLATION:
        table[op] = decomposition_table[op]
    table.update(_decompositions.table())  # backward ops torch does not decompose
    table.update(_special.table())  # lgamma, digamma: no ONNX op
    table.update(_scatters.table())  # scatters CUDA's kernels run one index per thread
    table.update(_accurate.table(table))  # PyTorch's numbers at the edges
    for op in _DRAWS_UNLIKE_EAGER:
        table.pop(op, None)
    return table


def torch_decomposition(op: Any) -> Callable[..., Any]:
    """torch's own decomposition of ``op`` (``torch._decomp.decomposition_table``)."""
    from torch._decomp import decomposition_table

    return decomposition_table[op]


def legacy_reduction(size_average: bool | None, reduce: bool | None) -> str:
    """A loss's ``reduction`` from the deprecated ``size_average`` / ``reduce`` pair."""
    from torch.nn import _reduction

    return _reduction.legacy_get_string(size_average, reduce, emit_warning=False)


_DECOMPOSED_DESPITE_TRANSLATION = (
    torch.ops.aten._native_batch_norm_legit_functional.default,
    # torchlib returns a placeholder for the second output, total_weight (the size of the
    # loss, 1 for a scalar), which the backward of a mean reduction divides by: every
    # gradient came out N times too large. Decomposed, the loss and total_weight are a
    # gather, a where and sums, all translated right (the conformance table says so).
    torch.ops.aten.nll_loss_forward.default,
    torch.ops.aten.nll_loss2d_forward.default,
)
"""Ops with a torchlib translation that ortlab's lowerings decompose anyway, because the
translation is wrong for some of their outputs (see :func:`lowering_decompositions`)."""


def _draws_unlike_eager() -> tuple[Any, ...]:
    aten = torch.ops.aten
    ops: list[Any] = []
    for name in ("cauchy", "exponential", "geometric", "log_normal"):
        for packet in (getattr(aten, name, None), getattr(aten, f"{name}_", None)):
            if packet is not None:
                ops.extend(getattr(packet, o) for o in packet.overloads())
    return tuple(ops)


_DRAWS_UNLIKE_EAGER = _draws_unlike_eager()
"""Random ops whose decomposition in torch's table draws other numbers than the op does
(``exponential_`` becomes ``-log1p(-rand_like(x)) / lambd``: ``gumbel_softmax`` gave
other noise than eager under the same seed). Left whole, they run in PyTorch and draw what
eager draws (see ``_rng``)."""


@contextlib.contextmanager
def attention_as_math() -> Iterator[None]:
    """While active, ``F.scaled_dot_product_attention`` runs its composite math
    implementation (``aten._scaled_dot_product_attention_math``): matmul, softmax and
    their gradients instead of a fused kernel.

    Used around AOTAutograd's trace of a training graph. On CPU, attention dispatches to
    ``_scaled_dot_product_flash_attention_for_cpu``, whose ONNX translation computes the
    attention output only, while a training graph saves its ``logsumexp`` for the
    backward: the op and its backward had to stay in PyTorch, cutting every transformer
    layer in two. The math path is all translatable. It is intercepted at the torch-
    function level because the op is CompositeImplicitAutograd (chosen in C++ before any
    decomposition table is consulted); torch's decomposition of the flash op itself is
    no substitute (its ``logsumexp`` does not fit the flash backward kernel, and the
    gradients of the attention inputs came out wrong by orders of magnitude).
    ``F.multi_head_attention_forward`` (``nn.MultiheadAttention``, every
    ``nn.Transformer*`` layer) is itself overridable: the mode is off while it runs, so
    it runs as a copy whose attention is the math path (:func:`_calling_math`).
    """
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention
    math = torch.ops.aten._scaled_dot_product_attention_math.default

    class _AsMath(TorchFunctionMode):
        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            if func is sdpa:
                return _sdpa_math(math, *args, **kwargs)
            if func is multi_head_attention:
                # The mode is off while this runs, so the attention it calls inside would
                # be the fused kernel: run a copy of it that calls the math path instead.
                return _calling_math(func)(*args, **kwargs)
            return func(*args, **kwargs)

    multi_head_attention = torch.nn.functional.multi_head_attention_forward
    with _AsMath():
        yield


def _calling_math(function: Any) -> Any:
    """A copy of ``function`` (of ``torch.nn.functional``) whose calls of
    ``scaled_dot_product_attention`` run the math path: its globals are a copy of the
    module's with that one name replaced (nothing global changes)."""
    math = torch.ops.aten._scaled_dot_product_attention_math.default
    names = dict(function.__globals__)
    if "scaled_dot_product_attention" not in names:  # torch changed how it calls it
        return function
    names["scaled_dot_product_attention"] = functools.partial(_sdpa_math, math)
    copy = types.FunctionType(
        function.__code__,
        names,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy


def _sdpa_math(
    math: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # As scaled_dot_product_attention does before dispatching: the math kernel takes
        # an additive mask (-inf where attention is not allowed), not a boolean one.
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), -math_module.inf
        )
    return math(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        None,
        scale=scale,
        enable_gqa=enable_gqa,
    )[0]


@contextlib.contextmanager
def embedding_bag_as_composite() -> Iterator[None]:
    """While active, ``F.embedding_bag`` runs as :func:`embedding_bag_composite`: a
    gather of the rows and a scatter (sum, max) into the bags, whose gradients autograd
    derives from those ops.

    Used around AOTAutograd's trace. ``aten._embedding_bag`` saves three auxiliary
    outputs (``offset2bag``, ``bag_size``, ``max_indices``) that its backward
    (``_embedding_bag_backward``, no ONNX translation) reads; torchlib's translation
    zero-fills them, so every gradient came out wrong, and its loop over the bags treats
    ``padding_idx=-1`` (none) as the last row, so outputs were wrong too. Like
    :func:`attention_as_math`, it is intercepted at the torch-function level:
    ``embedding_bag`` is CompositeImplicitAutograd. Calls the composite cannot
    reproduce run ``F.embedding_bag`` itself: ``sparse`` gradients, nested inputs, and
    ``scale_grad_by_freq`` (whose CPU kernel divides a row's gradient by the count of
    another index: for indices [2, 2, 3] in one bag, row 3's by 2).
    """
    from torch.overrides import TorchFunctionMode

    embedding_bag = torch.nn.functional.embedding_bag

    class _AsComposite(TorchFunctionMode):
        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            if func is embedding_bag:
                result = _embedding_bag_as_composite(*args, **kwargs)
                if result is not None:
                    return result
            return func(*args, **kwargs)

    with _AsComposite():
        yield


_EMBEDDING_BAG_MODES = {"sum": 0, "mean": 1, "max": 2}


def _embedding_bag_as_composite(
    input: torch.Tensor,
    weight: torch.Tensor,
    offsets: torch.Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: torch.Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> torch.Tensor | None:
    """``F.embedding_bag``'s argument handling, then :func:`embedding_bag_composite`;
    ``None`` for a call the composite does not reproduce (``F.embedding_bag`` runs it,
    and raises where its arguments are wrong)."""
    plain = (
        not sparse
        and not scale_grad_by_freq
        and mode in _EMBEDDING_BAG_MODES
        and weight.dim() == 2
        and not input.is_floating_point()
        and not input.is_nested
        and (per_sample_weights is None or per_sample_weights.shape == input.shape)
    )
    if not plain:
        return None
    if max_norm is not None:  # as F.embedding_bag does: the weight's rows, in place
        with torch.no_grad():
            torch.embedding_renorm_(weight, input, max_norm, norm_type)
    if input.dim() == 2 and offsets is None:
        offsets = torch.arange(
            0, input.numel(), input.size(1), dtype=input.dtype, device=input.device
        )
        include_last_offset = False
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.dim() != 1 or offsets is None or offsets.dim() != 1:
        return None
    num_embeddings = weight.size(0)
    if padding_idx is None:
        padding_idx = -1
    elif -num_embeddings <= padding_idx < 0:
        padding_idx += num_embeddings
    elif not 0 <= padding_idx < num_embeddings:
        return None
    return embedding_bag_composite(
        weight,
        input,
        offsets,
        _EMBEDDING_BAG_MODES[mode],
        per_sample_weights,
        include_last_offset,
        padding_idx,
    )


def embedding_bag_composite(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    mode: int,
    per_sample_weights: torch.Tensor | None,
    include_last_offset: bool,
    padding_idx: int,
) -> torch.Tensor:
    """The first output of ``aten._embedding_bag`` (same arguments: 1-D ``indices``,
    bag starts ``offsets``, ``mode`` 0/1/2 for sum/mean/max, ``padding_idx`` -1 for
    none) as ops whose ONNX translations are right, as are their gradients'.

    The bag of each index is ATen's ``offset2bag`` (a 1 at each bag's start, summed
    along the indices; empty bags are skipped over); indices equal to ``padding_idx``
    go to one extra bag, dropped at the end. Empty bags are zero, like ATen's. For max,
    the gradient of a bag whose maximum several different rows reach is shared between
    them (ATen gives it to one).
    """
    count = indices.shape[0]
    bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    starts = offsets[:bags].long()
    marks = torch.zeros(count + 1, dtype=torch.long, device=indices.device)
    marks = marks.index_add(0, starts, torch.ones_like(starts))
    bag = marks[:count].cumsum(0) - 1
    if padding_idx >= 0:
        bag = torch.where(indices == padding_idx, bags, bag)
    rows = weight.index_select(0, indices)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    width = weight.shape[1]
    total = weight.new_zeros(bags + 1, width)
    if mode == 2:
        where = bag.unsqueeze(1).expand(count, width)
        return total.scatter_reduce(0, where, rows, "amax", include_self=False)[:bags]
    total = total.index_add(0, bag, rows)[:bags]
    if mode == 1:
        ones = torch.ones_like(bag, dtype=weight.dtype)
        sizes = weight.new_zeros(bags + 1).index_add(0, bag, ones)[:bags]
        total = total / sizes.clamp(min=1).unsqueeze(1)
    return total


@functools.cache
def type_promotion_table() -> Any:
    """The exporter's table of type-promotion rules (which args of which ops promote)."""
    from torch.onnx._internal.fx.passes import type_promotion

    return type_promotion.TypePromotionTable()


def promoted_arg_positions(rule: Any) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """``(positions, kwarg names)`` an elementwise rule promotes; ``None`` for other rules."""
    positions = getattr(rule, "promote_args_positions", None)
    if positions is None:
        return None
    return tuple(positions), tuple(getattr(rule, "promote_kwargs_names", ()))


def insert_type_promotion(graph_module: torch.fx.GraphModule) -> None:
    """Makes implicit dtype promotion explicit (``add(f32, i64)`` -> cast + add), in place."""
    from torch.onnx._internal.fx import passes

    passes.InsertTypePromotion(graph_module).run()


_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"
_IRRELEVANT_NOTICES = ("torchvision is not installed",)


class _DropIrrelevantNotices(logging.Filter):
    """Drops the registry's "torchvision is not installed. Skipping torchvision::nms"
    lines (four per registry build; torchvision's ops are not used here), keeping
    every other record, such as a translation that failed to register."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_IRRELEVANT_NOTICES)


@contextlib.contextmanager
def without_registry_notices() -> Iterator[None]:
    """While active, the exporter's registry does not log its irrelevant notices (use
    around anything that builds a registry: ``torch.onnx.export`` builds its own)."""
    logger = logging.getLogger(_REGISTRY_LOGGER)
    notice_filter = _DropIrrelevantNotices()
    logger.addFilter(notice_filter)
    try:
        yield
    finally:
        logger.removeFilter(notice_filter)


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Silences the exporter's per-node warnings (e.g. missing ``nn_module_stack`` in AOT
    graphs, which is expected there) while translating."""
    names = (
        "torch.onnx._internal.exporter._core",
        "torch.onnx._internal.exporter._registration",
        "torch.onnx._internal.exporter",
    )
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def translate_fx_graph(
    graph_module: torch.fx.GraphModule,
    *,
    name: str,
    opset_version: int | None = None,
    registry: Any = None,
    exact_floats: bool = False,
) -> ir.Model:
    """Translates an ATen-level FX graph to an ``onnx_ir.Model`` node by node.

    Shapes and dtypes come from each node's ``meta["val"]``; Dynamo's symbols become
    ``dim_param``s and SymInt placeholders become INT64 scalar inputs. As in
    ``torch.onnx.export``, torchlib's translations are written for its base opset (18)
    and the model is then converted to the target opset (the registry picks newer
    translations, such as ``Gelu``, where the target has them).

    ``exact_floats``: Python numbers an op takes without a dtype to follow become
    DOUBLE constants, not FLOAT ones (see :func:`_python_floats_as_double`).
    """
    import onnx_ir as ir
    from onnxscript import version_converter
    from torch.onnx._internal.exporter import _constants, _core, _ir_passes

    model = ir.Model(
        graph=ir.Graph([], [], nodes=[], name=name),
        ir_version=_constants.ONNX_IR_VERSION,
        producer_name="ortlab",
        producer_version=torch.__version__,
    )
    exact = _python_floats_as_double() if exact_floats else contextlib.nullcontext()
    with quiet_exporter(), exact:
        _core._translate_fx_graph(
            graph_module.graph,
            model,
            graph_like=model.graph,
            owned_graphs={},
            lower="at_conversion",
            registry=registry if registry is not None else onnx_registry(opset_version),
        )
    _ir_passes.add_opset_imports(model)
    target = default_opset() if opset_version is None else opset_version
    if model.opset_imports.get("", target) != target:
        version_converter.convert_version(model, target, fallback=True)
    return model


@contextlib.contextmanager
def _python_floats_as_double() -> Iterator[None]:
    """While the exporter translates, a Python float passed where nothing fixes the
    dtype becomes a DOUBLE constant, not a FLOAT one.

    The exporter's ``_building._determine_input_dtype`` makes such a number FLOAT
    (torchlib's ``masked_fill`` is ``CastLike(value, self)``; ``full``, ``where``,
    ``clamp``, ``add``'s alpha the same), so in a float64 graph ``masked_fill(m, 0.1)``
    gave 0.10000000149 and ``-1e300`` gave ``-inf``. A DOUBLE constant cast to float32
    or lower rounds to what the FLOAT one was, but the swap is used for graphs with
    float64 values only. The caller holds the exporter's translation lock (the
    function is module state).
    """
    import onnx_ir as ir
    from torch.onnx._internal.exporter import _building

    original = _building._determine_input_dtype

    def determine(param: Any, arg: Any, type_binding: Any) -> Any:
        dtype = original(param, arg, type_binding)
        if (
            dtype == ir.DataType.FLOAT
            and isinstance(arg, float)
            and param.type_constraint not in type_binding
            and any(t.dtype == ir.DataType.DOUBLE for t in param.type_constraint.allowed_types)
        ):
            return ir.DataType.DOUBLE
        return dtype

    _building._determine_input_dtype = determine
    try:
        yield
    finally:
        _building._determine_input_dtype = original


def torch_tensor_as_ir(tensor: torch.Tensor, name: str) -> Any:
    """Wraps a torch tensor as an onnx_ir tensor, without copying (exporter's TorchTensor)."""
    from torch.onnx._internal.exporter import _core

    return _core.TorchTensor(tensor, name=name)


def aot_autograd_backend(
    *,
    fw_compiler: Callable[..., Any],
    bw_compiler: Callable[..., Any],
    inference_compiler: Callable[..., Any],
    decompositions: dict[Any, Callable[..., Any]],
) -> Callable[..., Any]:
    """AOTAutograd wrapped as a Dynamo backend, with min-cut rematerialization."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return aot_autograd(
        fw_compiler=fw_compiler,
        bw_compiler=bw_compiler,
        inference_compiler=inference_compiler,
        partition_fn=min_cut_rematerialization_partition,
        decompositions=decompositions,
    )


def is_module_state(value: Any) -> bool:
    """Whether ``value`` is a parameter or buffer of an ``nn.Module`` Dynamo traced.

    Dynamo marks those tensors with ``_dynamo_static_input_type`` (``mark_static_address``,
    done for module state when ``inline_inbuilt_nn_modules`` is on, torch's default);
    ``nn.Parameter`` is checked as well for graphs that bypass that marking.
    """
    if isinstance(value, torch.nn.Parameter):
        return True
    return isinstance(value, torch.Tensor) and (
        getattr(value, "_dynamo_static_input_type", None) is not None
    )


def make_boxed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Marks ``fn(list_of_args)`` as taking boxed arguments, as AOTAutograd expects."""
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(fn)


def schema_accepts(overload: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether the op overload's schema takes these (fake) arguments."""
    try:
        torch._C._check_schema_allow_fake_script_object(overload._schema, *args, **kwargs)
    except RuntimeError:
        return False
    return True


def promoted_dtype(*operands: Any) -> torch.dtype:
    """The dtype PyTorch's default elementwise type promotion gives these operands
    (tensors and Python numbers)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, dtype = elementwise_dtypes(
        *operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
    )
    return dtype


def detect_fake_mode(args: Any) -> Any:
    """Dynamo's FakeTensorMode for these example inputs (or ``None``)."""
    from torch._guards import detect_fake_mode

    return detect_fake_mode(args)


def current_compile_id() -> str | None:
    """Dynamo's id of the frame being compiled, e.g. ``"0/1"``."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except Exception:
        return None
    return None if cid is None else str(cid)


def schema_arg(node: torch.fx.Node, name: str) -> Any:
    """The value of a call's schema argument ``name`` (its default when not given;
    ``None`` when the op has no such argument)."""
    schema = node.target._schema  # type: ignore[union-attr]
    for i, arg in enumerate(schema.arguments):
        if arg.name == name:
            if arg.name in node.kwargs:
                return node.kwargs[arg.name]
            if i < len(node.args) and not arg.kwarg_only:
                return node.args[i]
            return arg.default_value if arg.has_default_value() else None
    return None


def is_higher_order_op(target: Any) -> bool:
    return isinstance(target, torch._ops.HigherOrderOperator)


def rng_state_ops() -> tuple[Any, Any]:
    """``(run_and_save_rng_state, run_with_rng_state)``: the higher-order ops activation
    checkpointing wraps a draw in (the forward saves the generator's state and draws; the
    recompute in the backward draws again from that state, restoring the generator)."""
    from torch._prims import rng_prims

    return rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state


def surely_plain(value: torch.Tensor) -> bool:
    """Whether a (fake) tensor is provably contiguous with storage offset 0, without
    adding a guard on its symbolic sizes (``Tensor.is_contiguous()`` on a symbolic fake
    tensor guards them: the graph would recompile for every new size)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if surely_empty(value):
        return True  # no elements: no layout to get wrong
    if not statically_known_true(value.storage_offset() == 0):
        return False
    expected: Any = 1
    for size, stride in reversed(list(zip(value.shape, value.stride()))):
        if not statically_known_true(size == 1) and not statically_known_true(
            stride == expected
        ):
            return False
        expected = expected * size
    return True


def inputs_share_memory(values: Sequence[Any]) -> bool:
    """Whether two of the (real or fake) tensors among ``values`` are views of one
    storage (overlapping slices of one tensor passed as two arguments)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    storages = [
        StorageWeakRef(v.untyped_storage())
        for v in values
        if isinstance(v, torch.Tensor) and v.layout == torch.strided
    ]
    return len(set(storages)) < len(storages)


def surely_empty(value: torch.Tensor) -> bool:
    """Whether a (fake) tensor provably has no elements (a size statically 0), without
    adding a guard on its symbolic sizes."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return any(statically_known_true(size == 0) for size in value.shape)


def surely_same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two (fake) tensors provably have the same shape, without adding guards."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return a.dim() == b.dim() and all(
        statically_known_true(x == y) for x, y in zip(a.shape, b.shape)
    )


def nodes_as_graph_module(
    graph_module: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node]
) -> tuple[torch.fx.GraphModule, tuple[torch.fx.Node, ...]]:
    """A GraphModule of copies of ``nodes`` (topologically sorted and convex, e.g. a
    contiguous run of the graph's order), whose placeholders stand for the values they
    read from outside (with those values' metadata); returns it and the outside nodes in
    placeholder order. ``CapabilityBasedPartitioner`` fuses partitions with the same
    function (``fuse_as_graphmodule``, not covered by torch's compatibility promise)."""
    from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule

    sub, inputs, _ = fuse_as_graphmodule(
        graph_module, list(nodes), "part", always_return_tuple=True
    )
    return sub, tuple(inputs)


def functionalized(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run under functionalization, for tracing with make_fx (AOTAutograd's way).

    Functionalization is Python's ``FunctionalTensorMode``, as AOTAutograd uses, not
    ``torch.func.functionalize``: the latter's C++ wrapper lets ``aten.size.default``
    reach the fake mode when a CompositeImplicit op (Dynamo keeps
    ``F.multi_head_attention_forward`` whole) runs under it, and the fake mode ``int()``s
    symbolic sizes — a guard that specialised the batch size of every graph.

    After ``fn`` returns, each input whose data it mutated gets one ``copy_`` of its new
    value (traced, at the end of the graph). A metadata mutation of an input
    (``x.t_()``, ``set_``) raises ``NotImplementedError``: the caller falls back to
    AOTAutograd, which handles it.

    An output that is a view of a mutated input (``x.mul_(2); return x[:, :2]``) is
    regenerated from the input after its ``copy_``, with the view's size, strides and
    offset, so it shares the input's memory as in eager (functionalized, it would be a
    slice of the new value: a fresh tensor once ONNX Runtime computes it)::

        before:  mul = x * 2 ; out = slice(mul) ; copy_(x, mul)          out: new memory
        after:   mul = x * 2 ; copy_(x, mul) ; out = as_strided(x, ...)  out: a view of x
    """
    import torch.utils._pytree as pytree
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    def inner(*args: Any) -> Any:
        functionalize = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
        mutated = []
        with torch._C._ExcludeDispatchKeyGuard(functionalize), FunctionalTensorMode():
            f_args = [
                FunctionalTensor.to_functional(a) if isinstance(a, torch.Tensor) else a
                for a in args
            ]
            outputs = fn(*f_args)
            storages = {
                StorageWeakRef(f_arg.untyped_storage()): position
                for position, f_arg in enumerate(f_args)
                if isinstance(f_arg, FunctionalTensor)
            }
            views: list[tuple[int, int, Any]] = []  # (output leaf, input position, view)
            for index, leaf in enumerate(pytree.tree_leaves(outputs)):
                if isinstance(leaf, FunctionalTensor):
                    position = storages.get(StorageWeakRef(leaf.untyped_storage()))
                    if position is not None:
                        views.append(
                            (
                                index,
                                position,
                                (leaf.size(), leaf.stride(), leaf.storage_offset()),
                            )
                        )
            for position, (arg, f_arg) in enumerate(zip(args, f_args)):
                if not isinstance(f_arg, FunctionalTensor):
                    continue
                torch._sync(f_arg)
                if torch._functionalize_has_metadata_mutation(f_arg.elem):  # type: ignore[attr-defined]
                    raise NotImplementedError(
                        f"input {position} has its metadata mutated in place (a view op "
                        "like t_() or set_()); the make_fx lowering does not handle that"
                    )
                if torch._functionalize_has_data_mutation(f_arg.elem):  # type: ignore[attr-defined]
                    mutated.append((arg, torch._from_functional_tensor(f_arg.elem)))

            def unwrap(value: Any) -> Any:
                torch._sync(value)
                return torch._from_functional_tensor(value.elem)

            outputs = pytree.tree_map_only(FunctionalTensor, unwrap, outputs)
        for arg, value in mutated:  # traced as copy_(placeholder, new value)
            arg.copy_(value)
        mutated_inputs = {id(arg) for arg, _ in mutated}
        if views and mutated_inputs:
            leaves, spec = pytree.tree_flatten(outputs)
            for index, position, (size, stride, offset) in views:
                if id(args[position]) in mutated_inputs:
                    leaves[index] = args[position].as_strided(size, stride, offset)
            outputs = pytree.tree_unflatten(leaves, spec)
        return outputs

    return inner


def lower_to_aten(
    graph_module: torch.fx.GraphModule,
    example_inputs: Any,
    decompositions: dict[Any, Callable[..., Any]],
) -> torch.fx.GraphModule:
    """Lowers a Dynamo (torch IR) graph to a *functional* ATen graph without autograd,
    under the backend's fake mode, so symbolic dims stay symbolic (the inference path).

    - Functionalized (:func:`functionalized`): in-place ops on intermediates (``relu_``,
      ``x += y``) become their out-of-place forms, and a mutation of a graph input
      becomes one ``copy_`` into that input at the end of the graph — the only ``copy_``
      left, and the only mutation the support rules see.
    - Node metadata survives (``stack_trace``, ``nn_module_stack``): the graph is replayed
      through an FX interpreter under ``preserve_node_meta``, as AOTAutograd does.
    - Real inputs are fakified with the symbolic context Dynamo recorded for them (as
      AOTAutograd's ``process_inputs`` does), so the ATen graph reuses Dynamo's symbols.
    """
    from torch._dispatch.python import enable_python_dispatcher
    from torch._guards import TracingContext
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    symbolic_sizes = False

    def replay(*args: Any) -> Any:
        # With symbolic sizes, under the Python dispatcher, as AOTAutograd and
        # make_fx(tracing_mode="symbolic") trace: without it a CompositeExplicitAutograd
        # kernel taking an IntArrayRef (constant_pad_nd) is reached with SymInts
        # ("SymIntArrayRef expected to contain only concrete integers":
        # F.pad(x, (0, (-n) % 4)) with every dim symbolic). Static graphs trace as before.
        dispatcher = enable_python_dispatcher() if symbolic_sizes else contextlib.nullcontext()
        with fx_traceback.preserve_node_meta(), dispatcher:
            return torch.fx.Interpreter(graph_module).run(*args)

    functional = functionalized(replay)
    fake_mode = detect_fake_mode(example_inputs)
    if fake_mode is None:
        lowered = make_fx(functional, decomposition_table=decompositions)(*example_inputs)
    else:
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        context = TracingContext.try_get()
        fakes = []
        with fake_mode:
            for node, x in zip(placeholders, example_inputs):
                if isinstance(x, FakeTensor):
                    fakes.append(x if x.fake_mode is fake_mode else fake_mode.from_tensor(x))
                elif isinstance(x, torch.Tensor):
                    symbolic = None
                    if context is not None and x in context.tensor_to_context:
                        symbolic = context.tensor_to_context[x]
                    fakes.append(
                        fake_mode.from_tensor(
                            x,
                            symbolic_context=symbolic,
                            source=getattr(symbolic, "tensor_source", None),
                        )
                    )
                else:
                    example = node.meta.get("example_value")
                    fakes.append(example if isinstance(example, torch.SymInt) else x)
            symbolic_sizes = any(
                isinstance(f, torch.SymInt)
                or (
                    isinstance(f, torch.Tensor)
                    and any(isinstance(s, torch.SymInt) for s in f.shape)
                )
                for f in fakes
            )
            lowered = make_fx(functional, decomposition_table=decompositions)(*fakes)
    # make_fx keeps values nothing reads (e.g. a module's eps passed as a 0-d tensor and
    # read with .item()); they would run eagerly on every call. Mutations are impure and stay.
    lowered.graph.eliminate_dead_code()
    lowered.recompile()
    if fake_mode is not None and fake_mode.shape_env is not None:
        tensorify_python_scalars(lowered, fake_mode)
    return lowered


def tensorify_python_scalars(graph_module: torch.fx.GraphModule, fake_mode: Any) -> None:
    """Dynamo's pass for the floats it made graph inputs (``dynamic=True`` turns Python
    floats such as a config's ``eps``, or ReLU6's bounds, into 0-d tensors read with
    ``.item()``), as AOTAutograd runs it after its trace: float arithmetic becomes tensor
    ops, and a float an op needs as a constant (``hardtanh``'s bounds, which torchlib
    takes as attributes) is specialised — Dynamo then restarts its analysis with that
    float a constant (``TensorifyScalarRestartAnalysis``, which ortlab lets through), so
    it is no longer an input at all.
    """
    from torch.fx.passes import _tensorify_python_scalars

    _tensorify_python_scalars.tensorify_python_scalars(
        graph_module, fake_mode.shape_env, fake_mode
    )


@functools.cache
def _closure_patcher(config: tuple[tuple[str, Any], ...]) -> Callable[[], Callable[[], None]]:
    """Dynamo's closure patcher for this config, made once per config."""
    return torch._dynamo.config._make_closure_patcher(**dict(config))


class _TracingConfig:
    """Dynamo enters a backend's ``backend_ctx_ctor()`` around every call of a callable
    compiled for it, and traces new frames inside: the place for config that must hold
    while tracing. The closure patcher is Dynamo's own for ``dynamic=True`` (~2 µs a call;
    ``config.patch`` costs ~13)."""

    __slots__ = ("_change", "_config", "_revert")

    def __init__(self, config: tuple[tuple[str, Any], ...]) -> None:
        self._config = config
        self._change = _closure_patcher(config)
        self._revert: Callable[[], None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._config,))  # the patcher is a closure: made again

    def __enter__(self) -> None:
        self._revert = self._change()

    def __exit__(self, *exc_info: object) -> None:
        if self._revert is not None:
            self._revert()
            self._revert = None


class _BackendWithTracingConfig:
    """A backend for ``torch._dynamo.optimize`` that traces with some Dynamo config set.

    (``torch.compile`` wraps every backend in an object of its own, which hides a
    ``backend_ctx_ctor``; ``torch._dynamo.optimize``, which ``torch.compile`` calls, reads
    it from the backend it is given.)"""

    def __init__(self, backend: Callable[..., Any], config: dict[str, Any]) -> None:
        # (Only picklable state: torch copies this object's __dict__ onto the function it
        # wraps the backend in, and a copied compiled module pickles that function.)
        self._config = tuple(sorted(config.items()))
        self._torchdynamo_orig_backend = backend  # what dynamo_backend_of follows
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)
        # An attribute, not a method: torch's wrapper takes it from this __dict__.
        self.backend_ctx_ctor = functools.partial(_TracingConfig, self._config)

    def __reduce__(self) -> tuple[Any, ...]:
        # A compiled module is copied (deepcopy, pickle) with its backend: the same
        # backend and config.
        return (type(self), (self._torchdynamo_orig_backend, dict(self._config)))

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return self._torchdynamo_orig_backend(graph_module, example_inputs)

    def reset(self) -> None:
        """``torch._dynamo.reset()`` resets the backends it compiled with: pass it on."""
        reset = getattr(self._torchdynamo_orig_backend, "reset", None)
        if reset is not None:
            reset()


def compile_with_dynamo(
    model: Callable[..., Any],
    backend: Callable[..., Any],
    *,
    dynamic: bool | None,
    fullgraph: bool,
    specialize_floats: bool,
) -> Any:
    """``torch.compile(model, backend=backend, dynamic=..., fullgraph=...,
    isolate_recompiles=True)``; with ``specialize_floats``, Dynamo traces every frame of
    the result with ``specialize_float=True`` (the rest of the process keeps its own
    config)."""
    isolation = {"isolate_recompiles": True} if isolates_recompiles() else {}
    if not specialize_floats:
        return torch.compile(  # type: ignore[call-overload]
            model, backend=backend, dynamic=dynamic, fullgraph=fullgraph, **isolation
        )
    return torch._dynamo.optimize(
        backend=_BackendWithTracingConfig(backend, {"specialize_float": True}),
        nopython=fullgraph,
        dynamic=dynamic,
        **isolation,
    )(model)


@functools.cache
def isolates_recompiles() -> bool:
    """Whether this torch's ``torch.compile`` takes ``isolate_recompiles`` (2.13 does,
    2.11 does not): each compile then has its own Dynamo cache entries and recompile
    limit. Without it, compiles of one code object share the limit."""
    return "isolate_recompiles" in inspect.signature(torch.compile).parameters


def aot_user_outputs() -> range | None:
    """While AOTAutograd compiles a forward or inference graph, the positions of the
    graph's outputs that the user's function returns (after effect tokens and mutated
    inputs; before intermediate bases and the tensors saved for the backward). ``None``
    outside such a compile."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    if meta is None:
        return None
    start = len(meta.tokens) + meta.num_mutated_inp_runtime_indices
    return range(start, start + meta.num_outputs)


@functools.cache
def dynamo_signals() -> tuple[type[BaseException], ...]:
    """Exceptions that are Dynamo's control flow, not failures: raised from inside a
    backend (AOTAutograd's ``TensorifyScalarRestartAnalysis`` re-traces a frame with a
    float specialised), they must reach Dynamo untouched — catching them as a compile
    failure would run a graph eagerly that Dynamo meant to re-trace."""
    from torch._dynamo import exc

    return (exc.RestartAnalysis, exc.SkipFrame)


@dataclasses.dataclass(frozen=True)
class DynamoGraphInfo:
    """What Dynamo knows about the graph it is handing to a backend, read at that moment."""

    compile_id: str | None
    """``"frame/recompile"``, e.g. ``"0/1"`` (the second compile of frame 0)."""
    seconds_in_dynamo: float | None
    """Time since Dynamo started compiling this frame (its trace, up to the backend)."""
    recompile_reason: str | None
    """The guard that failed and made Dynamo compile this frame again, if it did."""
    end_reason: str | None
    """Why the graph ends where it does: a graph-break message, or None at a return."""
    graph_break: bool
    """Whether the graph ends at a graph break (Dynamo could not trace on)."""
    user_stack: tuple[tuple[str, int, str, str], ...]
    """Where the graph ends in the user's code: ``(file, line, function, source)``,
    outermost first."""
    break_stack: tuple[tuple[str, int, str, str], ...] = ()
    """Where the graph break itself is, outermost first, when it is inside a function
    the graph's last line calls (``user_stack`` then ends at that call); empty
    otherwise."""
    input_sources: tuple[str | None, ...] = ()
    """Per graph input, in order, where Dynamo took it from, as people write it
    (``"encoder.layer.0.attention.self.query.weight"``, ``"input_ids"``); ``None`` when
    unknown."""


_SOURCE_PARTS = (
    (re.compile(r"\._(?:modules|parameters|buffers)\['([^']+)'\]"), r".\1"),
    (re.compile(r"^L\['self'\]\."), ""),
    (re.compile(r"^L\['([^']+)'\]"), r"\1"),
)


def readable_source(name: str) -> str:
    """Dynamo's name of a graph input's source as people write it:
    ``L['self']._modules['encoder']._parameters['weight']`` -> ``encoder.weight``,
    ``L['input_ids']`` -> ``input_ids``."""
    for pattern, replacement in _SOURCE_PARTS:
        name = pattern.sub(replacement, name)
    return name


def _input_sources(graph_module: torch.fx.GraphModule) -> tuple[str | None, ...]:
    sources: list[str | None] = []
    for node in graph_module.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", None)
        if callable(name):  # older torch: a method
            name = name()
        sources.append(readable_source(name) if isinstance(name, str) else None)
    return tuple(sources)


def _frames(summaries: Any) -> tuple[tuple[str, int, str, str], ...]:
    return tuple(
        (f.filename, int(f.lineno or 0), f.name, (f.line or "").strip())
        for f in summaries or ()
    )


_UNRECORDED_BREAK_INSIDE_CALL = (
    "Dynamo could not trace inside a call on this line (a property or a function it "
    "calls); Dynamo did not record why: TORCH_LOGS=graph_breaks prints it"
)


def _break_inside_call(reason: Any) -> Any:
    """The graph-break reason Dynamo recorded inside a call, for a graph it ended at
    that call, or ``None``.

    When an inlined callee cannot be traced (transformers' ``loss_function`` calls
    ``logger.warning_once``), Dynamo records the real reason and the callee's stack,
    restarts, and ends the graph before the call with the reason ``"step_unsupported"``
    and the caller's line only. Both reasons are appended to Dynamo's list of graph-break
    reasons, the real one just before; it is taken only if its stack passes through
    the line the graph ends at."""
    if getattr(reason, "reason", None) != "step_unsupported":
        return None
    from torch._dynamo.utils import graph_break_reasons

    stack = getattr(reason, "user_stack", None) or ()
    if not stack:
        return None
    end = (stack[-1].filename, stack[-1].lineno)
    for index in range(len(graph_break_reasons) - 1, 0, -1):
        if graph_break_reasons[index] is reason:
            before = graph_break_reasons[index - 1]
            frames = getattr(before, "user_stack", None) or ()
            if any((f.filename, f.lineno) == end for f in frames[:-1]):
                return before
            return None
    return None


def dynamo_graph_info(graph_module: torch.fx.GraphModule) -> DynamoGraphInfo:
    """Reads Dynamo's compile state for a graph it just captured (never raises).

    Sources: ``GraphModule.compile_subgraph_reason`` (Dynamo's ``GraphCompileReason``:
    why the graph ended, the user stack there, whether it is a graph break) and Dynamo's
    per-frame ``MetricsContext`` (when the frame's compile started, the recompile
    reason it recorded from the failed guards).
    """
    compile_id = current_compile_id()
    seconds = recompile = None
    try:
        from torch._dynamo.utils import get_metrics_context

        metrics = get_metrics_context()
        if metrics.in_progress():
            started = getattr(metrics, "_start_time_ns", 0)
            if started:
                seconds = max(0.0, (time.time_ns() - started) / 1e9)
            recompile = getattr(metrics, "_metrics", {}).get("recompile_reason")
    except Exception:  # a torch without these internals: the records say less
        logger.debug("Dynamo metrics unavailable", exc_info=True)
    reason = getattr(graph_module, "compile_subgraph_reason", None)
    stack: tuple[tuple[str, int, str, str], ...] = ()
    break_stack: tuple[tuple[str, int, str, str], ...] = ()
    end_reason, graph_break = None, False
    if reason is not None:
        graph_break = bool(getattr(reason, "graph_break", False))
        if graph_break:
            end_reason = str(getattr(reason, "reason", "") or "")
            try:
                inside = _break_inside_call(reason)
            except Exception:  # a torch without the list: the caller's line only
                logger.debug("Dynamo graph-break reasons unavailable", exc_info=True)
                inside = None
            if inside is not None:
                end_reason = str(getattr(inside, "reason", "") or end_reason)
                break_stack = _frames(getattr(inside, "user_stack", ()))
            elif end_reason == "step_unsupported":
                end_reason = _UNRECORDED_BREAK_INSIDE_CALL
        stack = _frames(getattr(reason, "user_stack", ()))
    if compile_id is None:
        compile_id = graph_module.meta.get("dynamo_compile_id")
        compile_id = None if compile_id is None else str(compile_id)
    try:
        sources = _input_sources(graph_module)
    except Exception:  # the records then name inputs by their placeholders
        logger.debug("Dynamo input sources unavailable", exc_info=True)
        sources = ()
    return DynamoGraphInfo(
        compile_id=compile_id,
        seconds_in_dynamo=seconds,
        recompile_reason=None if recompile is None else str(recompile),
        end_reason=end_reason,
        graph_break=graph_break,
        user_stack=stack,
        break_stack=break_stack,
        input_sources=sources,
    )


def dynamo_backend_of(compiled: Any) -> Any:
    """The backend object a ``torch.compile``-d module or function was compiled with
    (``OptimizedModule.dynamo_ctx.callback._torchdynamo_orig_backend``), or ``None``.

    For string backends given ``options=``, returns ``(compiler_fn, kwargs)``.
    """
    ctx = getattr(compiled, "dynamo_ctx", None)
    if ctx is None:
        # torch.compile(fn) returns a wrapper whose closure holds the OptimizeContext.
        for cell in getattr(compiled, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if hasattr(value, "callback"):
                ctx = value
                break
    backend = getattr(ctx, "callback", None)
    # CatchErrorsWrapper -> ConvertFrame -> backend: follow the chain of wrappers.
    for _ in range(6):
        inner = getattr(backend, "_torchdynamo_orig_backend", None)
        if inner is None:
            break
        backend = inner
    if backend is None:
        return None
    inner = getattr(backend, "compiler_fn", None)  # _TorchCompileWrapper
    if inner is not None:
        return inner, dict(getattr(backend, "kwargs", {}) or {})
    return backend


def is_fake(value: Any) -> bool:
    """Whether ``value`` is a FakeTensor (Dynamo sometimes hands those to backends)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


# -- used by the lab (numerics, bench, magic) ----------------------------------------------
#
#   torch.utils._pytree                     leaves, maps and key paths of nested outputs
#   OptimizedModule._orig_mod               what torch.compile wrapped (a module) ...
#   fn._torchdynamo_orig_callable           ... or a function
#   torch._ops.OpOverload                   an ATen op overload (its text names the op)
#   torch._dynamo.config.patch / reset      a model's Dynamo settings; a clean Dynamo cache


def tree_leaves(value: Any) -> list[Any]:
    """The leaves of a nested structure (tuples, lists, dicts, registered outputs such as
    ``transformers``' ``ModelOutput``), in order; ``None`` is a leaf."""
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(value)


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    """``value`` with every leaf replaced by ``fn(leaf)``, structure kept."""
    import torch.utils._pytree as pytree

    return pytree.tree_map(fn, value)


def tree_named_leaves(value: Any) -> list[tuple[str, Any]]:
    """``(key path, leaf)`` for every leaf: ``("[0]['logits']", tensor)``; a value that
    is itself a leaf has the path ``""``."""
    import torch.utils._pytree as pytree

    paths = pytree.tree_flatten_with_path(value)[0]
    return [(pytree.keystr(path), leaf) for path, leaf in paths]


def compiled_original(fn: Any) -> Any:
    """What ``torch.compile`` wrapped in ``fn`` (a module or a function), or ``None`` when
    ``fn`` is not a ``torch.compile``-d callable."""
    original = getattr(fn, "_orig_mod", None)  # OptimizedModule
    if isinstance(original, torch.nn.Module):
        return original
    original = getattr(fn, "_torchdynamo_orig_callable", None)  # a compiled function
    return original if callable(original) else None


def is_op_overload(target: Any) -> TypeGuard[torch._ops.OpOverload]:
    """Whether an FX node's target is an ATen/prims op overload (``aten.add.Tensor``)."""
    return isinstance(target, torch._ops.OpOverload)


def is_op_packet(target: Any) -> TypeGuard[torch._ops.OpOverloadPacket]:
    """Whether ``target`` is an op's overload packet (``torch.ops.aten.add``)."""
    return isinstance(target, torch._ops.OpOverloadPacket)


def op_by_name(text: str) -> torch._ops.OpOverload | torch._ops.OpOverloadPacket:
    """The op a name stands for: ``"aten.sin"`` / ``"aten::sin"`` /
    ``"torch.ops.aten.sin"`` (the packet), ``"aten.add.Tensor"`` / ``"aten::add.Tensor"``
    (an overload).

    Raises:
        LookupError: no such op (or overload) is registered with the dispatcher.
    """
    name = text.strip().removeprefix("torch.ops.").replace("::", ".")
    parts = name.split(".")
    if len(parts) not in (2, 3) or not all(parts):
        raise LookupError(f"{text!r} is not an op name such as 'aten.gelu'")
    namespace, op_name = parts[0], parts[1]
    if f"{namespace}::{op_name}" not in _dispatcher_op_names():
        raise LookupError(f"no op {namespace}::{op_name} is registered")
    packet = getattr(getattr(torch.ops, namespace), op_name)
    if len(parts) == 2:
        return packet
    if parts[2] not in packet.overloads():
        raise LookupError(
            f"{namespace}::{op_name} has no overload {parts[2]!r} (it has "
            f"{', '.join(packet.overloads())})"
        )
    return getattr(packet, parts[2])


@functools.cache
def _dispatcher_op_names() -> frozenset[str]:
    return frozenset(name.split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names())


def op_names(namespace: str) -> tuple[str, ...]:
    """Every op name the dispatcher knows in a namespace (``"aten.sin"``...), to suggest
    a close one for a misspelt name."""
    prefix = f"{namespace}::"
    return tuple(
        sorted(
            f"{namespace}.{n.removeprefix(prefix)}"
            for n in _dispatcher_op_names()
            if n.startswith(prefix)
        )
    )


def sympy_size_functions() -> Any:
    """torch's sympy functions of symbolic sizes (``FloorDiv``, ``CeilToInt``,
    ``IntTrueDiv``, ``CeilDiv``, ``PythonMod``, ``Mod``)."""
    from torch.utils._sympy import functions

    return functions


def concrete_fake_mode() -> Any:
    """A FakeTensorMode that also accepts real tensors (to propagate concrete shapes
    through a graph whose metadata is symbolic)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def dynamo_config_patch(config: dict[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """A context manager applying Dynamo settings (a zoo model's ``dynamo_config``)."""
    return torch._dynamo.config.patch(config)


def reset_dynamo() -> None:
    """Forgets every compiled frame (Dynamo's caches and recompile counters)."""
    torch._dynamo.reset()


# -- used by the conformance generator (_conformance_run) ----------------------------------
#
#   torch.testing._internal.common_methods_invocations.op_db   PyTorch's OpInfo database:
#                                                  every op with sample inputs per dtype
#                                                  (importing it needs ``expecttest``)
#   torch._functorch.aot_autograd.aot_function    AOTAutograd on a plain function: its
#                                                  forward and backward graphs, no Dynamo
#   ONNXRegistry.functions                         every op the exporter's registry claims


@functools.cache
def op_db() -> tuple[Any, ...]:
    """PyTorch's OpInfo database (~700 ``OpInfo``s; ``op.sample_inputs(device, dtype,
    requires_grad=...)`` gives an op's samples), imported once (~7 s).

    Raises:
        MissingDependencyError: ``expecttest`` (which torch's test utilities import) is
            not installed.
    """
    from ortlab import errors

    try:
        from torch.testing._internal import common_methods_invocations
    except ImportError as e:
        raise errors.MissingDependencyError(
            f"PyTorch's OpInfo database needs {e.name or 'a test dependency'}: "
            "pip install 'ortlab[test]' (or pip install expecttest)"
        ) from e
    return tuple(common_methods_invocations.op_db)


def aot_function(
    fn: Callable[..., Any],
    *,
    fw_compiler: Callable[..., Any],
    bw_compiler: Callable[..., Any],
    decompositions: dict[Any, Callable[..., Any]],
) -> Callable[..., Any]:
    """``fn`` compiled by AOTAutograd with these compilers (each called with an ATen
    graph and its example inputs; the backward's when a backward first needs it), the
    partitioner ortlab's backend uses and ``decompositions``, for static shapes."""
    from torch._functorch.aot_autograd import aot_function as aot
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return aot(
        fn,
        fw_compiler=fw_compiler,
        bw_compiler=bw_compiler,
        partition_fn=min_cut_rematerialization_partition,
        decompositions=decompositions,
    )


def registered_targets(registry: Any) -> tuple[str, ...]:
    """The ATen/prims overloads an exporter registry has a translation for, as node
    targets read (``"aten.add.Tensor"``, ``"aten.abs.default"``), sorted. The registry
    keys overloads by qualified name (``"aten::abs"``, ``"aten::add.Tensor"``)."""
    found = set()
    for key in registry.functions:
        if not isinstance(key, str) or "::" not in key:
            continue
        namespace, rest = key.split("::", 1)
        if namespace not in ("aten", "prims"):
            continue
        name, _, overload = rest.partition(".")
        found.add(f"{namespace}.{name}.{overload or 'default'}")
    return tuple(sorted(found))


# -- used by the ATen-graph rewrites (_rewrites) -------------------------------------------
#
#   torch.fx.experimental.proxy_tensor.make_fx    a composite traced to ATen on a graph's
#                                                  fake values, to splice into that graph


def trace_aten(fn: Callable[..., Any], args: Sequence[Any]) -> torch.fx.GraphModule:
    """``fn(*args)`` traced to an ATen graph with the lowerings' decompositions
    (:func:`lowering_decompositions`), on fake values from a graph's ``meta["val"]``
    and under their fake mode, so symbolic sizes stay the graph's own symbols."""
    from torch.fx.experimental.proxy_tensor import make_fx

    fake_mode = detect_fake_mode(args)
    tracer = make_fx(fn, decomposition_table=lowering_decompositions())
    if fake_mode is None:
        return tracer(*args)
    with fake_mode:
        return tracer(*args)


# -- used by precompiled models (_precompile) ----------------------------------------------
#
#   torch._dynamo.aot_compile      torch.compile(...).aot_compile (fullgraph capture whose
#                                  bytecode, guards and backend result can be saved, under
#                                  config.enable_aot_compile), AOTCompiledFunction
#                                  (serialize, guard_check, disable_guard_check,
#                                  source_info, _artifacts.compiled_fn),
#                                  aot_compile_types.SerializableCallable;
#                                  torch.compiler.load_compiled_function
#   torch._dynamo.guards           CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
#   torch._dynamo.package          _hash_sourcelines (an inlined source's checksum)
#   torch.fx._graph_pickler        GraphPickler (a Dynamo graph without its weights)
#   torch._dynamo.mark_static_address  (module state, as Dynamo marks it when tracing)
#   torch._functorch.config        bypass_autograd_cache_key (set only during the capture's
#                                  backend call), the bundled-cache flags it sets
#   torch._dynamo.backends.registry.lookup_backend  (``backend="ortlab"`` by name)


def serializable_callable_base() -> type:
    """The base class torch's precompile requires of a backend's result."""
    from torch._dynamo.aot_compile_types import SerializableCallable

    return SerializableCallable


def _savable_guards(entries: Sequence[Any]) -> list[bool]:
    """A ``guard_filter_fn`` keeping every guard torch can save: the ones it cannot are
    object identities (the functions, classes, closures and modules the trace read), which
    a new process cannot check; the precompiled file pins the sources instead."""
    from torch._dynamo.guards import CheckFunctionManager

    unsupported = set(CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)
    return [
        entry.guard_type not in unsupported
        and not unsupported.intersection(entry.derived_guard_types)
        for entry in entries
    ]


_BY_REFERENCE = re.compile(
    r"\btype\(|__class__|__dict__|__mro__|__closure__|__defaults__|__kwdefaults__|"
    r"__func__|__code__|\.keywords\b|\.func\b"
)
"""Guard names that read through a class or a function: torch saves those by reference,
so that a new process rebuilds such a guard from its own class (a class constant, a
method's default, a decorator's closure) and it always passes, as a global's does."""

NOT_READ = object()
"""The value of a guard that Dynamo did not keep (:func:`aot_capture`'s record)."""


def aot_capture(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    backend: Callable[..., Any],
) -> tuple[Any, list[tuple[str, str, str, Any]]]:
    """``torch.compile(fn, backend=backend, fullgraph=True, dynamic=False).aot_compile(
    (args, kwargs))`` with the guards torch can save, Python floats traced as constants
    (as :func:`compile_with_dynamo` does) and the guard check left to the caller.

    Returns:
        The ``AOTCompiledFunction``, and the guards a new process cannot rely on (the
        ones dropped, and those on globals, which a new process rebuilds from its own
        values): each one's name (an expression over ``fn``'s locals and ``G``), kind,
        detail (:func:`_guard_detail`) and the value it read (:data:`NOT_READ` when
        Dynamo did not keep it).

    Raises what Dynamo raises (a graph break, a guard or value it cannot save).
    """
    read: dict[tuple[str, str, str], Any] = {}

    def keep(entries: Sequence[Any]) -> list[bool]:
        kept = _savable_guards(entries)
        for entry, savable in zip(entries, kept):
            if not savable or entry.is_global or _BY_REFERENCE.search(entry.name):
                value = entry.value if entry.has_value else NOT_READ
                read[(entry.name, entry.guard_type, _guard_detail(entry))] = value
        return kept

    with (
        torch._dynamo.config.patch(enable_aot_compile=True, specialize_float=True),
        _grads_set_aside([*args, *kwargs.values()]),
    ):
        compiled = torch.compile(  # type: ignore[call-overload]
            fn,
            backend=backend,
            fullgraph=True,
            dynamic=False,
            options={"guard_filter_fn": keep},
        )
        result = compiled.aot_compile((tuple(args), dict(kwargs)))  # type: ignore[attr-defined]
    result.disable_guard_check()
    return result, [(*key, value) for key, value in read.items()]


def _guard_detail(entry: Any) -> str:
    """What a guard checks beyond its value's name: the key of ``DICT_CONTAINS``, the
    attribute of ``HASATTR`` (the arguments Dynamo bound to its builder), as a repr."""
    keywords = getattr(getattr(entry.orig_guard, "create_fn", None), "keywords", None) or {}
    return repr({k: v for k, v in keywords.items() if k in ("key", "attr", "invert")})


@contextlib.contextmanager
def _grads_set_aside(values: Sequence[Any]) -> Iterator[None]:
    """The ``.grad`` of the modules' parameters and of the tensors among ``values`` set
    to ``None`` while a capture builds its guards, then put back: torch 2.13 saves a
    tensor's guard state with a placeholder for its ``.grad`` that cannot be read back
    ("assigned grad expected to be a Tensor or None but got grad of type _Missing")."""
    tensors: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.nn.Module):
            tensors.extend(value.parameters())
        elif isinstance(value, torch.Tensor):
            tensors.append(value)
    grads = [(t, t.grad) for t in tensors if t.grad is not None]
    for tensor, _ in grads:
        tensor.grad = None
    try:
        yield
    finally:
        for tensor, grad in grads:
            tensor.grad = grad


def under_aot_capture() -> bool:
    """Whether the backend is being called by torch's ahead-of-time capture (``aot_compile``
    turns ``bypass_autograd_cache_key`` on around that call, and nothing else does)."""
    return bool(torch._functorch.config.bypass_autograd_cache_key)


def registered_backend(name: str) -> Callable[..., Any]:
    """The ``torch.compile`` backend registered under ``name``."""
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend(name)


def outside_aot_capture() -> contextlib.AbstractContextManager[Any]:
    """AOTAutograd's config as outside :func:`aot_capture`, for the backend it calls:
    the capture turns on AOTAutograd's bundled cache, whose entries must be inductor's
    compiled code (ortlab's training graphs failed: "expected OutputCode")."""
    return torch._functorch.config.patch(
        {
            "strict_autograd_cache": False,
            "bypass_autograd_cache_key": False,
            "bundled_autograd_cache": False,
            "force_non_lazy_backward_lowering": False,
            "force_autograd_cache": False,
        }
    )


def aot_bytes(compiled: Any) -> bytes:
    """An ``AOTCompiledFunction`` as bytes (raises when something in it cannot be saved)."""
    return bytes(type(compiled).serialize(compiled).serialized_data)


def aot_installed_modules(compiled: Any, fn: Callable[..., Any]) -> dict[str, str]:
    """The modules Dynamo installed in ``fn``'s globals under names of its own (e.g.
    ``___module_collections_<id>_c0``) that the captured bytecode reads: torch 2.13
    saves neither them nor their names, so that loading the capture in a new process
    fails ("Missing required external references"). Name to module name.

    Raises:
        TypeError: the bytecode reads such a global that is not a module.
    """
    import types

    env = compiled._artifacts.runtime_env
    known = {*env.import_sources, *env.used_globals, compiled._artifacts.backend_id}
    found: dict[str, str] = {}
    codes = [env.bytecode]
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        for name in code.co_names:
            if not name.startswith("___") or name in known or name not in fn.__globals__:
                continue
            value = fn.__globals__[name]
            if not isinstance(value, types.ModuleType):
                raise TypeError(f"the capture reads a global it does not save: {name}")
            found[name] = value.__name__
    return found


def aot_import_aliases(compiled: Any) -> dict[str, str]:
    """The names under which the capture's bytecode reads modules, and the modules."""
    return dict(compiled._artifacts.runtime_env.import_sources)


def aot_load(data: bytes, fn: Callable[..., Any], modules: Mapping[str, str]) -> Any:
    """An ``AOTCompiledFunction`` from :func:`aot_bytes` of a capture of ``fn``: with
    ``fn``'s globals (the bytecode may read them, e.g. ``torch``) and the modules of
    :func:`aot_installed_modules` imported again; its guard check left to the caller.
    Raises when the bytes are damaged or were saved by another Python or torch."""
    import importlib
    import io

    f_globals: dict[str, object] = {
        **getattr(fn, "__globals__", {}),
        **{name: importlib.import_module(module) for name, module in modules.items()},
    }
    result: Any = torch.compiler.load_compiled_function(io.BytesIO(data), f_globals=f_globals)
    result.disable_guard_check()
    return result


def aot_backend_result(compiled: Any) -> Any:
    """What the backend returned for an ``AOTCompiledFunction``'s graph."""
    return compiled._artifacts.compiled_fn


def aot_guards_pass(compiled: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether the saved guards hold for this call."""
    return bool(compiled.guard_check(*args, **kwargs))


def aot_guard_failure(compiled: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """Which saved guard failed for this call, in Dynamo's words."""
    manager = compiled._artifacts.guard_manager
    reasons = manager.check_verbose(compiled.prepare_f_locals(*args, **kwargs))
    parts = getattr(reasons, "verbose_code_parts", None)
    if isinstance(parts, (list, tuple)) and parts:
        return "; ".join(str(part).strip() for part in parts)
    return str(reasons)


def aot_changed_sources(compiled: Any) -> list[str]:
    """The sources the trace inlined that differ now from when it was saved (their
    modules and line ranges); empty when every one reads the same."""
    import importlib

    from torch._dynamo.package import _hash_sourcelines

    changed = []
    for source in sorted(
        compiled.source_info().inlined_sources, key=lambda s: (s.module, s.firstlineno)
    ):
        where = f"{source.module}:{source.firstlineno}-{source.lastlineno}"
        try:
            module = importlib.import_module(source.module)
            same = (
                _hash_sourcelines(module, source.firstlineno, source.lastlineno)
                == source.checksum
            )
        except Exception:
            same = False
        if not same:
            changed.append(where)
    return changed


_DYNAMO_ONLY_META = ("example_value", "grapharg", "nn_module_stack", "source_fn_stack")
"""Node metadata of Dynamo's graph that holds real tensors, sources or modules: left out
of a saved graph (the lowering does not need it)."""


def dump_dynamo_graph(graph_module: torch.fx.GraphModule) -> bytes:
    """Dynamo's graph as bytes: its code and fake values, no weights (they are inputs)."""
    from torch.fx._graph_pickler import GraphPickler, Options

    kept = []
    for node in graph_module.graph.nodes:
        kept.append({k: node.meta.pop(k) for k in _DYNAMO_ONLY_META if k in node.meta})
    try:
        return bytes(GraphPickler.dumps(graph_module, Options(ops_filter=None)))
    finally:
        for node, meta in zip(graph_module.graph.nodes, kept):
            node.meta.update(meta)


def load_dynamo_graph(data: bytes) -> tuple[torch.fx.GraphModule, Any]:
    """A graph from :func:`dump_dynamo_graph` and the fake mode of its values."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx._graph_pickler import GraphPickler
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    graph_module = GraphPickler.loads(data, mode)
    if not isinstance(graph_module, torch.fx.GraphModule):
        raise TypeError(f"not a saved graph: {type(graph_module).__name__}")
    # Not Dynamo's graph of this process: AOTAutograd would look for the sources of its
    # inputs (``_dynamo_source``), which stay behind in the process that traced it.
    graph_module.meta.pop("dynamo_compile_id", None)
    graph_module.recompile()
    return graph_module, mode


def fake_static_inputs(mode: Any, args: Sequence[Any]) -> list[Any]:
    """The tensors of ``args`` as static-size fakes of ``mode`` (as Dynamo hands a
    backend its example inputs), other values as they are."""
    return [
        mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a
        for a in args
    ]


def tracing_under(mode: Any) -> contextlib.AbstractContextManager[Any]:
    """The tracing context Dynamo opens around a backend call, for ``mode``."""
    from torch._guards import TracingContext, tracing

    return tracing(TracingContext(mode))


def mark_module_state(model: torch.nn.Module) -> None:
    """Marks the module's parameters and buffers as Dynamo does when it traces them
    (:func:`is_module_state`), for a graph that Dynamo did not trace in this process."""
    for tensor in [*model.parameters(), *model.buffers()]:
        if getattr(tensor, "_dynamo_static_input_type", None) is None:
            torch._dynamo.mark_static_address(tensor, guard=False)
