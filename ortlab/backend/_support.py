"""Which FX nodes may run in ONNX Runtime: an ordered list of named rules, each giving a
reason a person can act on.

# NOTE: :data:`RULES` *is* the decision, in the order it is taken: the first rule that
# speaks about a node decides it, and the node's :class:`~ortlab.backend.records.Verdict`
# names that rule (``Verdict.rule``). Rules are evaluated in one place,
# :meth:`OrtOperatorSupport.verdict`; each is a function whose docstring is its
# documentation (``ortlab.backend.support_rules()`` lists them, the Inspector shows
# them). Rules run at three stages:
#
#   node       when the graph is compiled, node by node, in list order
#   partition  after partitioning: a supported node whose partition is too small
#   session    when ONNX Runtime refused a node as its partition's session was built
#              (the partition is split around it, see ``_executor``): checked first
#
# A registered translation is not trusted on its own word: the conformance table
# (:mod:`ortlab.backend._conformance`, from PyTorch's OpInfo samples run through
# ONNX Runtime) rejects the (op, dtype, form)s whose translation disagrees with PyTorch
# for the outputs the graph reads, and says which supported nodes were verified. The
# table checks the exporter's translations: an op the user translates
# (``custom_translations``) is the user's word, taken before the table is read.
#
# Graph-level analyses (views of graph inputs returned as outputs, storage reads that
# the ONNX value cannot honour) are computed once per graph and handed to the rules as
# ``{node name: reason}`` maps.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from ortlab.backend import _conformance, _dtypes, _rng, _source, _torch_private, records

Stage = Literal["node", "partition", "session"]


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a rule says about a node."""

    supported: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class Rule:
    """One named support rule: ``decide(node, facts)`` returns a :class:`Decision`, or
    ``None`` when the rule has nothing to say about the node."""

    name: str
    decide: Callable[[torch.fx.Node, Facts], Decision | None]
    stage: Stage = "node"

    @property
    def doc(self) -> str:
        """What the rule decides and why (its function's docstring)."""
        return inspect.getdoc(self.decide) or ""


@dataclasses.dataclass
class Facts:
    """What the rules know beyond the node itself: the graph's analyses and options."""

    registry: Any
    """What the exporter's op registry translates: anything with ``is_registered``
    (``_torch_private.TranslatedOps``, or the registry itself)."""
    excluded_ops: tuple[Any, ...] = ()
    """``OrtBackendOptions.excluded_ops``."""
    input_aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Nodes on a view chain from a graph input to a graph output (see
    :func:`input_alias_outputs`), with the reason."""
    storage_readers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Nodes that read memory the ONNX value does not have (``as_strided`` on a
    non-contiguous input it cannot be rebased onto), with the reason."""
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Nodes ONNX Runtime refused when their partition's session was built, with the
    error (the partition was split around them)."""
    too_small: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Supported nodes whose partition is below ``min_partition_size``: node -> size."""
    min_partition_size: int = 1
    conformance: _conformance.Table | None = None
    """The conformance table (``None``: the package's)."""
    custom_ops: frozenset[Any] = frozenset()
    """The ops of ``OrtBackendOptions.custom_translations`` (overloads or packets)."""
    verdict_of: Callable[[torch.fx.Node], records.Verdict] | None = None
    """The verdict of another node of the graph (``getitem`` follows its producer)."""


def target_text(target: Any) -> str:
    """A readable name for a node target: ``aten.mm.default``, ``<built-in function add>``."""
    if _torch_private.is_op_overload(target):
        return (
            f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
        )
    return str(target)


def node_text(node: torch.fx.Node) -> str:
    """The op a node runs, for its verdict: :func:`target_text`, or for a draw
    :mod:`_rng` made at the start of the graph, the op that draws."""
    return target_text(_rng.drawing_op(node) or node.target)


# -- helpers the rules share -------------------------------------------------------------
def _is_overload(node: torch.fx.Node) -> bool:
    return _torch_private.is_op_overload(node.target)


def _tensors_in(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for x in value for v in _tensors_in(x)]
    return []


def _is_tensor_result(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, torch.Tensor) or v is None for v in value)
    return False


def _matches_excluded(target: Any, excluded: Iterable[Any]) -> bool:
    """Whether ``target`` is one of ``excluded`` (resolved by the options to ops:
    overloads, packets, or Python callables)."""
    packet = target.overloadpacket if _torch_private.is_op_overload(target) else None
    return any(item is target or (packet is not None and item is packet) for item in excluded)


def used_outputs(node: torch.fx.Node) -> tuple[int, ...] | None:
    """The outputs of a multi-output node that the graph reads (``getitem`` users that
    are used themselves); ``None`` for a single-output node."""
    if not isinstance(node.meta.get("val"), (list, tuple)):
        return None
    return tuple(
        sorted(
            int(user.args[1])  # type: ignore[arg-type]
            for user in node.users
            if user.target is operator.getitem and user.users
        )
    )


def _read_outputs(node: torch.fx.Node) -> Any:
    """The node's value (``meta["val"]``); of a multi-output node, the outputs the graph
    reads, when it reads some: the others are never handed to anyone (CUDA's flash
    attention also returns its longest sequence lengths as integers and its RNG state as
    uint64)."""
    value = node.meta["val"]
    used = used_outputs(node)
    if used and all(i < len(value) for i in used):
        return [value[i] for i in used]
    return value


_ASSERTIONS = frozenset(
    {
        torch.ops.aten._assert_scalar.default,
        torch.ops.aten._assert_async.default,
        torch.ops.aten._assert_async.msg,
        torch.ops.aten._assert_tensor_metadata.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
        torch.ops.aten.sym_constrain_range.default,
    }
)


# -- the rules, in the order they are listed in RULES -------------------------------------
def _refused_by_onnxruntime(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """ONNX Runtime refused this node (its session could not be built, or its first run
    failed) when the node's partition was built: the partition was split around it, so
    the node runs in PyTorch and the rest of the partition in ONNX Runtime."""
    error = facts.refused.get(node.name)
    if error is None:
        return None
    return Decision(
        False,
        f"ONNX Runtime refused it ({error}); it runs in PyTorch, and the rest of its "
        "partition in ONNX Runtime. Report the translation, or supply a correct one "
        "with OrtBackendOptions(custom_translations={op: onnxscript_function})",
    )


def _excluded_by_user(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """The user listed the op in ``OrtBackendOptions.excluded_ops``."""
    if facts.excluded_ops and _matches_excluded(node.target, facts.excluded_ops):
        return Decision(False, "excluded by OrtBackendOptions.excluded_ops")
    return None


def _runtime_assertion(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Assertions on sizes and scalars (``_assert_scalar``, ``sym_constrain_range``...)
    guard Python state: they stay in PyTorch."""
    if node.target in _ASSERTIONS:
        return Decision(False, "runtime assertion on Python/symbolic values; stays in PyTorch")
    return None


def _higher_order_op(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Higher-order operators (``cond``, ``scan``, ``wrap``...) hold nested graphs that a
    partition-level translation does not take."""
    if _torch_private.is_higher_order_op(node.target):
        return Decision(
            False,
            f"higher-order operator {getattr(node.target, '__name__', node.target)!s} "
            "(control flow or a nested graph) has no partition-level ONNX translation",
        )
    return None


def _no_metadata(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A node without ``meta["val"]`` (shape and dtype) cannot be exported."""
    if "val" not in node.meta:
        return Decision(False, "no shape/dtype metadata (meta['val']) to export it with")
    return None


def _tensor_to_python(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """``.item()`` (``_local_scalar_dense``) reads a tensor into a Python number, which
    the code after it uses in Python."""
    if node.target is torch.ops.aten._local_scalar_dense.default:
        return Decision(
            False, "reads a tensor into a Python number (.item()); stays in PyTorch"
        )
    return None


def _python_scalar(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A node whose result is not a tensor (``SymInt`` size arithmetic) stays in Python;
    a multi-output node is judged by the outputs the graph reads."""
    value = _read_outputs(node)
    if not _is_tensor_result(value):
        return Decision(
            False,
            f"computes a Python/symbolic scalar ({type(value).__name__}); size arithmetic "
            "stays in Python",
        )
    return None


def _output_selection(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """``getitem`` selects one output of a multi-output node: it goes where its producer
    goes."""
    if node.target is not operator.getitem:
        return None
    producer = node.args[0]
    if not (isinstance(producer, torch.fx.Node) and producer.op == "call_function"):
        return Decision(False, "selects from a value produced outside a partition")
    assert facts.verdict_of is not None
    if facts.verdict_of(producer).supported:
        return Decision(True, "selects an output of a supported node")
    return Decision(False, "selects an output of a node that runs in PyTorch")


def _input_alias_output(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A view chain from a graph input to a graph output stays in PyTorch, so that the
    output shares the input's memory as in eager (ONNX Runtime returns new tensors).
    For graphs lowered without AOTAutograd, and for AOTAutograd's forward graphs: it
    rebuilds such outputs from the compiled output's strides (``as_strided``) when it cannot
    replay the views, as with symbolic sizes."""
    reason = facts.input_aliases.get(node.name)
    return None if reason is None else Decision(False, reason)


def _storage_reader(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Ops that read their input's memory rather than its values (``as_strided``) on an
    input whose strides the ONNX value cannot honour (a non-contiguous graph input,
    which ONNX Runtime receives as a contiguous copy), and the views leading to them."""
    reason = facts.storage_readers.get(node.name)
    return None if reason is None else Decision(False, reason)


def _in_place(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Ops that mutate an input in place: ONNX values are immutable."""
    if _is_overload(node) and node.target._schema.is_mutable:  # type: ignore[union-attr]
        return Decision(
            False,
            "mutates an input in place; ONNX values are immutable, so it runs in PyTorch",
        )
    return None


def _unsupported_dtype(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A value of a dtype that cannot cross into ONNX Runtime (complex, float8...; see
    ``_dtypes.DTYPES``)."""
    for arg in (*node.args, *node.kwargs.values(), _read_outputs(node)):
        args = arg if isinstance(arg, (list, tuple)) else (arg,)
        for a in args:
            meta = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
            for t in _tensors_in(meta):
                if not _dtypes.supported(t.dtype):
                    return Decision(False, _dtypes.unsupported_reason(t.dtype))
    return None


_REDUCING = frozenset(
    {
        "sum", "nansum", "mean", "prod", "amax", "amin", "max", "min", "aminmax",
        "argmax", "argmin", "logsumexp", "linalg_vector_norm", "norm", "var", "std",
        "var_mean", "std_mean", "any", "all", "count_nonzero",
        "mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot",
    }
)  # fmt: skip
"""ATen ops that reduce or contract a dim (ONNX's Reduce*, ArgMax/ArgMin, MatMul/Gemm)."""


def _empty_input(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A reduction or matrix product (:data:`_REDUCING`) of a tensor with no elements:
    ONNX Runtime's reductions get empty inputs wrong (``mean(-1)`` of a (0, 5) tensor
    came back (0, 5), not (0,); ``sum(-1)`` of a (3, 0) tensor came back empty, not
    zeros), and such an op costs nothing in PyTorch. Other ops on empty tensors
    (elementwise, views, the ``cat`` of an empty KV cache) run in ONNX Runtime."""
    if not _is_overload(node) or node.target.overloadpacket.__name__ not in _REDUCING:  # type: ignore[union-attr]
        return None
    results = _tensors_in(node.meta.get("val"))
    for arg in (*node.args, *node.kwargs.values()):
        args = arg if isinstance(arg, (list, tuple)) else (arg,)
        for a in args:
            if not isinstance(a, torch.fx.Node):
                continue
            for t in _tensors_in(a.meta.get("val")):
                if _torch_private.surely_empty(t) and not all(
                    _torch_private.surely_same_shape(r, t) for r in results
                ):
                    return Decision(
                        False,
                        f"reduces an empty tensor of shape {tuple(t.shape)}; ONNX "
                        "Runtime's reductions return their input's shape for an empty "
                        "input, so it runs in PyTorch",
                    )
    return None


def _float64_rounds(*names: str) -> Callable[[torch.fx.Node], bool]:
    """A float64 node one of whose named number arguments float32 cannot hold exactly."""

    def applies(node: torch.fx.Node) -> bool:
        results = _tensors_in(node.meta.get("val"))
        if not results or results[0].dtype != torch.float64:
            return False
        return any(
            isinstance(v := _torch_private.schema_arg(node, name), float)
            and not _dtypes.float32_holds(v)
            for name in names
        )

    return applies


_FLOAT32_ATTRIBUTES = (
    "its translation takes the number as a float32 attribute (ONNX's float attributes "
    "are 32-bit), which loses this float64 graph's precision"
)

_WRONG_TRANSLATIONS: dict[Any, tuple[Callable[[torch.fx.Node], bool], str]] = {
    # The float64 ops ortlab's decompositions cannot write out (see
    # ``_decompositions._float64_rounded`` for hardtanh, addcmul, addmm, celu, GELU).
    torch.ops.aten.addbmm.default: (_float64_rounds("beta", "alpha"), _FLOAT32_ATTRIBUTES),
    torch.ops.aten._native_batch_norm_legit_no_training.default: (
        _float64_rounds("eps"),
        _FLOAT32_ATTRIBUTES,
    ),
    torch.ops.aten.avg_pool2d.default: (
        lambda node: _torch_private.schema_arg(node, "divisor_override") is not None,
        "its translation ignores divisor_override (divides by the window's size)",
    ),
    torch.ops.aten.avg_pool3d.default: (
        lambda node: _torch_private.schema_arg(node, "divisor_override") is not None,
        "its translation ignores divisor_override (divides by the window's size)",
    ),
    torch.ops.aten.erfc.default: (
        lambda node: True,
        "its translation is 1 - erf(x), which loses the tail: 1e-3 relative off at 3, "
        "and 0 from 4 on (eager: erfc(4) = 1.5e-8, erfc(9) = 4.1e-37)",
    ),
    torch.ops.aten.scatter_reduce.two: (
        lambda node: _torch_private.schema_arg(node, "reduce") == "mean",
        "its translation keeps the last value written at a repeated index, not the mean",
    ),
    # bfloat16 MoE experts (transformers' Qwen2-MoE, Mixtral, DeepSeek-V3 on CPU).
    torch.ops.aten._grouped_mm.default: (
        lambda node: True,
        "its translation fails to convert (ConversionError), so the partition was split "
        "with a FallbackWarning on every compile",
    ),
}
"""Translations known to give wrong numbers for some arguments, found by running
workflows against eager (the conformance samples missed these arguments or dtypes):
``op -> (applies(node), what is wrong)``."""


def _wrong_translation(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """The op's translation is known to be wrong for these arguments
    (:data:`_WRONG_TRANSLATIONS`): it runs in PyTorch, whatever the conformance table
    says."""
    known = _WRONG_TRANSLATIONS.get(node.target)
    if known is None or not known[0](node):
        return None
    return Decision(False, f"{known[1]}; it runs in PyTorch")


def _random(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Random ops (``Tag.nondeterministic_seeded``; see :func:`_rng.is_random`) stay in
    PyTorch, whose RNG ONNX Runtime does not reproduce; :mod:`_rng` makes them first in
    the graph where it can, so that they do not cut it."""
    if not _rng.is_random(node):
        return None
    if _rng.drawing_op(node) is not None:
        return Decision(
            False,
            "random draw (ONNX Runtime's RNG differs from PyTorch's), made in PyTorch at the "
            "start of the graph, from the sizes and strides of what it reads, so that the "
            "ops around it stay in one partition",
        )
    return Decision(
        False,
        "random op (nondeterministic_seeded): ONNX Runtime's RNG differs from PyTorch's, "
        "so it runs in PyTorch to keep results reproducible",
    )


def _batch_norm_training(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Batch norm in training mode: its translation does not reproduce PyTorch's batch
    statistics (ortlab's lowerings decompose it; this catches graphs that kept it)."""
    if (
        _is_overload(node)
        and "batch_norm" in node.target.__name__  # type: ignore[union-attr]
        and _torch_private.schema_arg(node, "training") is True
    ):
        return Decision(
            False,
            "batch norm in training mode: the ONNX translation does not reproduce "
            "PyTorch's batch statistics (measured wrong); runs in PyTorch",
        )
    return None


def _no_translation(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """No ONNX translation is registered for the op (in torchlib or the user's
    ``custom_translations``)."""
    if facts.registry.is_registered(node.target):
        return None
    op = target_text(node.target)
    return Decision(
        False,
        f"no ONNX translation of {op} in the exporter's registry (onnxscript torchlib); "
        "it runs in PyTorch. To run it in ONNX Runtime, write one in onnxscript and pass "
        "OrtBackendOptions(custom_translations={torch.ops."
        + op.rsplit(".", 1)[0]
        + ": my_onnxscript_function})",
    )


def _custom_translation(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """The user translates the op (``custom_translations``): it runs in ONNX Runtime
    with that translation. The conformance table, which checks the exporter's
    translations, says nothing about it."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if target not in facts.custom_ops and (packet is None or packet not in facts.custom_ops):
        return None
    return Decision(
        True,
        f"translated by custom_translations[{target_text(target)}] (yours: ortlab's "
        "conformance table checks the exporter's translations, not this one)",
    )


_PLACEHOLDER_OUTPUTS: dict[str, str] = {
    "_scaled_dot_product_flash_attention": "logsumexp and the RNG state",
    "_scaled_dot_product_efficient_attention": "logsumexp and the RNG state",
    "_scaled_dot_product_cudnn_attention": "logsumexp and the RNG state",
}
"""Ops whose torchlib translation computes output 0 only and returns placeholders
(zeros) for the others, by op name prefix, with what those outputs are."""


def _placeholder_outputs(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """Attention ops whose translation returns placeholders for every output but the
    first (logsumexp, the RNG state), when the graph reads one of those: AOTAutograd
    saves logsumexp for the backward, which would divide by zeros. Known from torchlib's
    source, and checked whether or not the conformance table has sampled the op."""
    if not _is_overload(node):
        return None
    name = node.target.__name__  # type: ignore[union-attr]
    what = next((v for k, v in _PLACEHOLDER_OUTPUTS.items() if name.startswith(k)), None)
    used = used_outputs(node)
    if what is None or not used or used == (0,):
        return None
    return Decision(
        False,
        f"outputs {[i for i in used if i]} ({what}) are used, but the ONNX translation "
        "returns placeholders for them; runs in PyTorch",
    )


def _conformance_finding(node: torch.fx.Node, facts: Facts) -> _conformance.Finding:
    if not _is_overload(node):
        return _conformance.NOT_VERIFIED
    return _conformance.lookup_node(node, target_text(node.target), facts.conformance)


_MISSING_KERNEL = ("Could not find an implementation", "NOT_IMPLEMENTED")
"""How ONNX Runtime says it has no kernel for an op and type (true of every input)."""


def _missing_kernel(finding: _conformance.Finding) -> bool:
    return finding.errors_only and any(m in finding.reason for m in _MISSING_KERNEL)


def _loud_only(finding: _conformance.Finding) -> bool:
    """Whether a failing finding saw only errors that depend on the sample (a session
    refused for one shape, a run error): where one happens, the partition is split
    around the node; it never returns a wrong number. A missing kernel is not one."""
    return finding.errors_only and not _missing_kernel(finding)


def _device_off_cpu(node: torch.fx.Node) -> str | None:
    """The device a node computes on when it is not the CPU (``"cuda"``), else ``None``."""
    values = _tensors_in(node.meta.get("val"))
    for arg in node.all_input_nodes:
        values += _tensors_in(arg.meta.get("val"))
    return next((v.device.type for v in values if v.device.type != "cpu"), None)


def _kernel_missing_on_the_cpu_only(
    node: torch.fx.Node, finding: _conformance.Finding
) -> bool:
    """The conformance suite runs on ONNX Runtime's CPU provider: a kernel missing there
    (bfloat16 ``MatMul``, ``Sigmoid``, ...) says nothing of a node on CUDA, whose provider
    has kernels of its own. Such a node runs in ONNX Runtime, not verified; a kernel that
    provider lacks too gets the partition split around it (``refused-by-onnxruntime``)."""
    return _missing_kernel(finding) and _device_off_cpu(node) is not None


def _disagrees_with_pytorch(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """The conformance table found that the op's translation disagrees with PyTorch, for
    this dtype and form, on an output the graph reads (an unused auxiliary output that is
    wrong does not matter), or that ONNX Runtime has no kernel for it. Failures that were
    only errors on some samples (a shape ONNX Runtime refuses) do not reject the node: if
    one happens, the partition is split around it (rule ``refused-by-onnxruntime``)."""
    finding = _conformance_finding(node, facts)
    if not finding.fails_for(used_outputs(node)) or _loud_only(finding):
        return None
    if _kernel_missing_on_the_cpu_only(node, finding):
        return None
    key = _conformance.node_key(node)
    where = f" for {_conformance.describe_key(key)}" if key else ""
    return Decision(
        False,
        f"the ONNX translation disagrees with PyTorch{where} ({finding.reason}; found by "
        "ortlab's conformance suite); it runs in PyTorch",
    )


def _verified(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """The translation was verified against PyTorch by the conformance suite for this
    dtype and form: it runs in ONNX Runtime."""
    finding = _conformance_finding(node, facts)
    if finding.status != "verified":
        return None
    what = _conformance.describe_key(_conformance.node_key(node))
    return Decision(
        True,
        f"translated by the exporter's registry and verified against PyTorch "
        f"({what}; {finding.samples} sample(s))",
    )


def _translated(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A registered translation that conformance never sampled for this dtype and form:
    it runs in ONNX Runtime, and the verdict says it is not verified."""
    what = _conformance.describe_key(_conformance.node_key(node))
    finding = _conformance_finding(node, facts)
    if finding.status == "fails" and _kernel_missing_on_the_cpu_only(node, finding):
        return Decision(
            True,
            f"translated by the exporter's registry (torchlib); not verified against PyTorch "
            f"for {what} on {_device_off_cpu(node)} (the conformance suite runs on ONNX "
            "Runtime's CPU provider, which has no kernel for it): if this provider has "
            "none either, its partition is split around it",
        )
    if finding.status == "fails":  # errors only, on some samples (see _loud_only)
        return Decision(
            True,
            f"translated by the exporter's registry (torchlib); for {what} the "
            f"conformance suite saw it fail on {finding.failures} of {finding.samples} "
            f"sample(s) ({finding.reason}), never with a wrong value: where it fails, its "
            "partition is split around it",
        )
    return Decision(
        True,
        f"translated by the exporter's registry (torchlib); not verified against PyTorch "
        f"for {what}",
    )


def _partition_too_small(node: torch.fx.Node, facts: Facts) -> Decision | None:
    """A supported node whose partition would be smaller than ``min_partition_size``
    stays in PyTorch (a tiny partition's call costs more than it runs)."""
    size = facts.too_small.get(node.name)
    if size is None:
        return None
    return Decision(
        False,
        f"supported, but its partition would have {size} node(s), fewer than "
        f"min_partition_size={facts.min_partition_size}; stays in PyTorch",
    )


RULES: tuple[Rule, ...] = (
    Rule("refused-by-onnxruntime", _refused_by_onnxruntime, stage="session"),
    Rule("excluded-by-user", _excluded_by_user),
    Rule("runtime-assertion", _runtime_assertion),
    Rule("higher-order-op", _higher_order_op),
    Rule("no-metadata", _no_metadata),
    Rule("tensor-to-python", _tensor_to_python),
    Rule("python-scalar", _python_scalar),
    Rule("output-selection", _output_selection),
    Rule("input-alias-output", _input_alias_output),
    Rule("storage-reader", _storage_reader),
    Rule("in-place", _in_place),
    Rule("unsupported-dtype", _unsupported_dtype),
    Rule("empty-input", _empty_input),
    Rule("random", _random),
    Rule("batch-norm-training", _batch_norm_training),
    Rule("no-translation", _no_translation),
    Rule("custom-translation", _custom_translation),
    Rule("placeholder-outputs", _placeholder_outputs),
    Rule("wrong-translation", _wrong_translation),
    Rule("disagrees-with-pytorch", _disagrees_with_pytorch),
    Rule("verified", _verified),
    Rule("translated", _translated),
    Rule("partition-too-small", _partition_too_small, stage="partition"),
)
"""Every support rule, in the order they are taken (see the module's NOTE)."""

_BY_NAME = {r.name: r for r in RULES}

GRAPH_NOT_COMPILED = "graph-not-compiled"
"""The rule name on the verdicts of a graph ortlab could not compile at all (it runs in
PyTorch as Dynamo handed it over; see :func:`graph_not_compiled`)."""


def rule(name: str) -> Rule:
    """The rule called ``name``."""
    return _BY_NAME[name]


class OrtOperatorSupport(OperatorSupportBase):
    """Operator support for ``CapabilityBasedPartitioner`` that also explains itself.

    ``verdict(node)`` evaluates :data:`RULES` once per node (node stage) and returns a
    :class:`~ortlab.backend.records.Verdict` naming the rule that decided;
    :meth:`after_partitioning` applies the partition stage.
    """

    def __init__(self, facts: Facts) -> None:
        super().__init__()
        self.facts = dataclasses.replace(facts, verdict_of=self.verdict)
        self._verdicts: dict[torch.fx.Node, records.Verdict] = {}

    def is_node_supported(
        self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node
    ) -> bool:
        return node.op == "call_function" and self.verdict(node).supported

    def verdict(self, node: torch.fx.Node) -> records.Verdict:
        """Decides (once) whether ``node`` may run in ONNX Runtime, and why."""
        cached = self._verdicts.get(node)
        if cached is None:
            name, decision = self._decide(node)
            cached = records.Verdict(
                node.name,
                node_text(node),
                decision.supported,
                decision.reason,
                _source.user_source(node),
                rule=name,
            )
            self._verdicts[node] = cached
        return cached

    def _decide(self, node: torch.fx.Node) -> tuple[str, Decision]:
        for candidate in RULES:
            if candidate.stage == "partition":
                continue
            decision = candidate.decide(node, self.facts)
            if decision is not None:
                return candidate.name, decision
        raise AssertionError("the last node rule always decides")  # pragma: no cover

    def after_partitioning(
        self, verdicts: list[records.Verdict], too_small: Mapping[str, int]
    ) -> list[records.Verdict]:
        """The verdicts once the partitioner grouped the supported nodes: the partition
        stage's rules re-decide supported nodes (e.g. a group below
        ``min_partition_size``)."""
        if not too_small:
            return verdicts
        self.facts.too_small = dict(too_small)
        nodes = {n.name: n for n in self._verdicts}
        decided = []
        for verdict in verdicts:
            node = nodes.get(verdict.node)
            if verdict.supported and node is not None:
                for candidate in RULES:
                    if candidate.stage != "partition":
                        continue
                    decision = candidate.decide(node, self.facts)
                    if decision is not None:
                        verdict = dataclasses.replace(
                            verdict,
                            supported=decision.supported,
                            reason=decision.reason,
                            rule=candidate.name,
                        )
                        break
            decided.append(verdict)
        return decided


def refused(
    verdicts: Iterable[records.Verdict], errors_by_node: Mapping[str, str]
) -> list[records.Verdict]:
    """``verdicts`` with those of the nodes ONNX Runtime refused decided again by the
    session-stage rule (see ``_split``)."""
    facts = Facts(registry=None, refused=errors_by_node)
    decided = []
    for verdict in verdicts:
        if verdict.node in errors_by_node:
            decision = _refused_by_onnxruntime(_NamedNode(verdict.node), facts)  # type: ignore[arg-type]
            assert decision is not None
            verdict = dataclasses.replace(
                verdict,
                supported=False,
                reason=decision.reason,
                rule="refused-by-onnxruntime",
            )
        decided.append(verdict)
    return decided


@dataclasses.dataclass(frozen=True)
class _NamedNode:
    """Stands for a node where a rule reads its name only."""

    name: str


def graph_not_compiled(gm: torch.fx.GraphModule, error: str) -> list[records.Verdict]:
    """The verdicts of a graph ortlab could not compile (it runs in PyTorch whole)."""
    reason = f"ortlab could not compile this graph ({error}); it runs in PyTorch"
    return [
        records.Verdict(
            n.name,
            node_text(n),
            False,
            reason,
            _source.user_source(n),
            rule=GRAPH_NOT_COMPILED,
        )
        for n in gm.graph.nodes
        if n.op == "call_function"
    ]


def _returns_alias(target: Any) -> bool:
    """Whether an op's result is its first argument's memory: a view (``t``, ``slice``)
    or an in-place op (``copy_`` returns the tensor it wrote)."""
    if not _torch_private.is_op_overload(target):
        return False
    returns = target._schema.returns
    return bool(target.is_view or (returns and returns[0].alias_info is not None))


def input_alias_outputs(
    gm: torch.fx.GraphModule, outputs: range | None = None, *, inference: bool = False
) -> dict[str, str]:
    """View chains from a graph input to a graph output (those at ``outputs``' positions;
    ``None``: every output), which must stay in PyTorch so the output keeps aliasing the
    input (ORT would return a copy). With ``outputs`` given (AOTAutograd's user outputs),
    or ``inference`` (the graph runs without autograd), views of another output returned
    beside it stay too (:func:`_output_alias_outputs`).

    ::

        x (input) -> t -> view -> output     both views stay eager: out shares x's storage
    """
    aliases: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            aliases.add(node)
        elif (
            node.op == "call_function"
            # getitem picks one view out of a multi-output view op (split, unbind)
            and (_returns_alias(node.target) or node.target is operator.getitem)
            and node.args
            and node.args[0] in aliases
        ):
            aliases.add(node)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    returned = torch.fx.node.map_arg(output.args[0], lambda n: n)
    values = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    if outputs is not None:
        values = [v for i, v in enumerate(values) if i in outputs]
    pending = [
        a
        for a in values
        if isinstance(a, torch.fx.Node) and a in aliases and a.op == "call_function"
    ]
    forced: dict[str, str] = {}
    while pending:
        node = pending.pop()
        if node.name in forced:
            continue
        forced[node.name] = (
            "a view of a graph input returned as an output: stays in PyTorch so the output "
            "keeps sharing the input's memory"
        )
        producer = node.args[0]
        if isinstance(producer, torch.fx.Node) and producer.op == "call_function":
            pending.append(producer)
    if outputs is not None or inference:
        forced.update(_output_alias_outputs(values, returned, static_too=inference))
    return forced


def _output_alias_outputs(
    users: list[Any], returned: Any, *, static_too: bool = False
) -> dict[str, str]:
    """View chains with symbolic arguments from one graph output to another of the
    user's (``y, y[:, : n // 2]``). AOTAutograd rebuilds such an output from its base
    output with ``as_strided`` on the compiled output's strides when it cannot replay the
    views, which ONNX Runtime's copy does not have: the chain stays in PyTorch.

    ``static_too`` (inference graphs): every such chain. Without autograd nothing
    rebuilds the view (make_fx has no runtime wrappers, and AOTAutograd's inference
    wrappers return the compiled outputs as they are): run in ONNX Runtime, ``y`` and
    ``y[:, -1]`` would come back as two copies, and a write into one would no longer
    show in the other."""
    every = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    bases = {v for v in every if isinstance(v, torch.fx.Node)}
    forced: dict[str, str] = {}
    for value in users:
        chain, node = [], value
        while (
            isinstance(node, torch.fx.Node)
            and node.op == "call_function"
            and (_returns_alias(node.target) or node.target is operator.getitem)
            and node.args
        ):
            chain.append(node)
            node = node.args[0]
            if node in bases:
                break
        if node not in bases or not chain:
            continue
        if not static_too and not any(map(_has_symbolic_args, chain)):
            continue
        sizes = "" if static_too else ", with symbolic sizes,"
        for view in chain:
            forced[view.name] = (
                f"a view of another graph output{sizes} returned as an output: stays in "
                "PyTorch so the output keeps sharing that output's memory"
            )
    return forced


def _has_symbolic_args(node: torch.fx.Node) -> bool:
    found = []
    torch.fx.node.map_arg(
        (node.args, node.kwargs),
        lambda a: found.append(isinstance(a.meta.get("val"), torch.SymInt)),
    )
    return any(found)
