"""One ATen node call checked against PyTorch through ortlab's own path: a one-node
graph, exported, run by ONNX Runtime and compared output by output.

# NOTE: the check runs exactly what a partition of that one node would run:
#
#   node call (real inputs seen in a lowered graph)
#     -> one-node GraphModule: tensor args become placeholders (meta["val"] = the
#        real input, so ``_conformance.node_key`` keys its form by the input's strides),
#        every other arg is a constant; one ``getitem`` per tensor output
#     -> _export.export_partition(static=True, no freezing, no transforms, no fusions)
#     -> _session.create_session -> _runtime.OrtRunner (zero-copy; strided inputs are
#        made contiguous there, as in every partition)
#     -> each output against PyTorch's own result of the node on the same inputs
#
# The exported session is cached per (op, input shapes and dtypes, constant args): the
# model depends on nothing else, so another sample with the same metadata only runs.
#
# Tolerances (per dtype, ``|ort - torch| <= atol * max(1, scale) + rtol * |torch|``,
# scale the largest magnitude of PyTorch's output): ONNX Runtime's float32 kernels
# (MLAS's vectorised exp/erf/tanh, reductions summed in another order) differ from
# PyTorch's in the last bits, ~1e-6 relative; onnxscript's own OpInfo tests of torchlib
# widen float32 to at most (rtol 3.7e-5, atol 1.8e-4) for the ops that need it
# (convolutions, log_softmax, addmm), with one outlier. Float16 is within a few ulps
# (eps 9.8e-4; PyTorch computes in float32 and rounds once, ONNX Runtime often in half
# precision: onnxscript's overrides reach 1e-2 for reductions), bfloat16 likewise (eps
# 7.8e-3). Absolute errors scale with the output (a sum or matmul cancelling to 0 still
# carries the rounding of its large terms). A floating output of less precise floating
# inputs (``sum(x, dtype=float64)``) gets the inputs' tolerance: torchlib computes in
# the inputs' dtype and casts. Integers and booleans must be equal, except the indices
# of ``sort``/``topk``/``max``... where the input ties: any tied index is right. A
# placeholder (zeros, a constant ``total_weight`` of 1) is off by orders more.
#
# What is not checked: nodes the support rules keep in PyTorch whatever their
# translation does (mutations, random ops, non-tensor results, no translation), and
# nodes with a value of a dtype the runtime cannot carry other than their key's
# (``_to_copy`` of float32 to bfloat16 would be filed under float32).
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from ortlab import _closeness, errors
from ortlab.backend import _dtypes, _export, _runtime, _session, _torch_private

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}
"""``(atol before scaling, rtol)`` per floating dtype (see the module NOTE); other
dtypes are compared exactly."""

_UNINITIALIZED = ("empty", "new_empty")
"""Ops whose outputs are uninitialized memory: only their shape and dtype are checked."""

_UNNAMED_RETURNS: dict[str, tuple[str, ...]] = {
    "_embedding_bag": ("output", "offset2bag", "bag_size", "max_indices"),
    "_embedding_bag_forward_only": ("output", "offset2bag", "bag_size", "max_indices"),
    "native_layer_norm": ("output", "mean", "rstd"),
    "native_group_norm": ("output", "mean", "rstd"),
    "native_batch_norm": ("output", "save_mean", "save_invstd"),
    "_native_batch_norm_legit": ("output", "save_mean", "save_invstd"),
    "_native_batch_norm_legit_functional": (
        "output",
        "save_mean",
        "save_invstd",
        "running_mean",
        "running_var",
    ),
    "_native_batch_norm_legit_no_training": ("output", "save_mean", "save_invstd"),
}
"""Output names of ATen ops whose schema leaves them unnamed (from the ops' docs)."""


_INDEX_OUTPUT: dict[str, int] = {
    "sort": 1,
    "topk": 1,
    "max": 1,
    "min": 1,
    "kthvalue": 1,
    "median": 1,
    "mode": 1,
    "argmax": 0,
    "argmin": 0,
}
"""Ops (their overloads with a ``dim``) with an output of indices into their input along
``dim``: where the input has ties, any index of a tied element is as right as
PyTorch's (only ``sort(stable=True)`` promises one)."""


@dataclasses.dataclass(frozen=True)
class NodeCall:
    """One call of an ATen op overload as it happened in a lowered graph."""

    target: Any
    """The ``OpOverload``."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    """Real values (tensors, lists of tensors, Python constants)."""
    result: Any
    """PyTorch's result of the call."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What checking one node call found."""

    ok: bool
    reason: str = ""
    """Why not (the first disagreeing output, or the error)."""
    outputs: tuple[int, ...] = ()
    """The outputs that disagree; empty when the node failed as a whole."""
    single: bool = True
    """The node returns one tensor (not a tuple or list)."""
    error: bool = False
    """It failed with an error (translation, session or run), not a wrong value."""


def op_name(target: Any) -> str:
    """The ATen op's name without namespace or overload (``"nll_loss_forward"``)."""
    return str(target._schema.name.split("::")[-1])


def output_names(target: Any, count: int) -> list[str]:
    """A name per output (``""`` when neither the schema nor ``_UNNAMED_RETURNS`` has
    one); list outputs (``split``) are not named."""
    returns = target._schema.returns
    names = [r.name for r in returns] if len(returns) == count else [""] * count
    known = _UNNAMED_RETURNS.get(op_name(target), ())
    return [name or (known[i] if i < len(known) else "") for i, name in enumerate(names)]


def _schema_arg(call: NodeCall, name: str) -> Any:
    for i, arg in enumerate(call.target._schema.arguments):
        if arg.name == name:
            if name in call.kwargs:
                return call.kwargs[name]
            if i < len(call.args) and not arg.kwarg_only:
                return call.args[i]
            return arg.default_value if arg.has_default_value() else None
    return None


def skip_reason(call: NodeCall, registry: Any) -> str:
    """Why a node call is not checked ("" when it is): ortlab's support rules keep such
    nodes in PyTorch whatever a check would find."""
    target = call.target
    if not _torch_private.is_op_overload(target):
        return "not an ATen op overload"
    if target._schema.is_mutable:
        return "mutates an input"
    if torch.Tag.nondeterministic_seeded in target.tags and not (
        "scaled_dot_product" in target.__name__ and _schema_arg(call, "dropout_p") == 0
    ):
        return "random"
    if not tensor_result(call.result):
        return "its result is not a tensor"
    if not registry.is_registered(target):
        return "no translation registered"
    return ""


def tensor_result(value: Any) -> bool:
    """Whether a node's result is a tensor or a non-empty list/tuple of tensors (or
    ``None``s), as the support rules require."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, torch.Tensor) or v is None for v in value)
    return False


_MAX_REASON = 300
"""Characters of an error kept as a reason (the exporter's messages run long)."""


_ORT_SOURCE = re.compile(r"/onnxruntime_src/\S+:\d+ [^(]*\([^)]*\) ")
"""Where in ONNX Runtime's C++ an error was raised: noise in a reason."""


def _shorten(text: str) -> str:
    text = _ORT_SOURCE.sub("", text)
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def _tensor_meta(value: torch.Tensor) -> tuple[Any, ...]:
    return ("T", tuple(value.shape), str(value.dtype), value.device.type)


def cache_key(call: NodeCall) -> tuple[Any, ...]:
    """What the exported model of a call depends on: the op, each tensor's shape, dtype
    and device, and the constant arguments."""

    def meta(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _tensor_meta(value)
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, *(meta(v) for v in value))
        if isinstance(value, float):
            return ("f", value.hex())
        return repr(value)

    kwargs = tuple(sorted((k, meta(v)) for k, v in call.kwargs.items()))
    return (str(call.target), meta(call.args), kwargs)


@dataclasses.dataclass(frozen=True)
class OneNode:
    """A node call as a graph of its own (see :func:`one_node_graph`)."""

    gm: torch.fx.GraphModule
    node: torch.fx.Node
    """The op's node (what ``_conformance.node_key`` keys)."""
    inputs: list[torch.Tensor]
    """The tensors to pass, in placeholder order."""
    returned: list[int]
    """The node's outputs the graph returns (``None`` outputs are left out; ``[0]`` for
    a single tensor)."""


def one_node_graph(call: NodeCall) -> OneNode:
    """The call as a graph of its own::

    arg0, arg1 (placeholders)  ->  op(arg0, 0.5, arg1)  ->  getitem 0, getitem 1
    """
    graph = torch.fx.Graph()
    inputs: list[torch.Tensor] = []

    def placeholders(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            node = graph.placeholder(f"arg{len(inputs)}")
            node.meta["val"] = value
            inputs.append(value)
            return node
        if isinstance(value, (list, tuple)):
            return type(value)(placeholders(v) for v in value)
        return value

    args = placeholders(call.args)
    kwargs = {k: placeholders(v) for k, v in call.kwargs.items()}
    node = graph.call_function(call.target, tuple(args), kwargs)
    node.meta["val"] = call.result
    if isinstance(call.result, torch.Tensor):
        graph.output(node)
        returned = [0]
    else:
        returned = [i for i, v in enumerate(call.result) if isinstance(v, torch.Tensor)]
        outputs = []
        for i in returned:
            item = graph.call_function(operator.getitem, (node, i))
            item.meta["val"] = call.result[i]
            outputs.append(item)
        graph.output(tuple(outputs))
    return OneNode(torch.fx.GraphModule(torch.nn.Module(), graph), node, inputs, returned)


def foreign_dtype(call: NodeCall, key_dtype: torch.dtype) -> torch.dtype | None:
    """A dtype among the call's tensors, other than its key's, that ortlab's runtime
    cannot hand to ONNX Runtime (``_dtypes``): the support rules keep such a node in
    PyTorch, and its failure would be filed under the key's dtype (``_to_copy`` of
    float32 to bfloat16 under float32). ``None`` when there is none."""
    values = [*_flat(call.args), *_flat(tuple(call.kwargs.values())), *_flat(call.result)]
    for value in values:
        if value.dtype != key_dtype and not _dtypes.supported(value.dtype):
            return value.dtype
    return None


def _flat(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    return []


def tolerance(
    dtype: torch.dtype, computed_in: torch.dtype | None = None
) -> tuple[float, float]:
    """``(atol before scaling, rtol)`` for outputs of ``dtype`` (0, 0: exact); a
    floating output of a node whose inputs are of a less precise floating dtype
    (``computed_in``: ``sum(x, dtype=float64)`` of float32 ``x``) gets that dtype's."""
    atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    if computed_in is not None and dtype.is_floating_point:
        wider = TOLERANCES.get(computed_in, (0.0, 0.0))
        atol, rtol = max(atol, wider[0]), max(rtol, wider[1])
    return atol, rtol


def difference(
    actual: Any,
    expected: torch.Tensor,
    *,
    values: bool = True,
    computed_in: torch.dtype | None = None,
) -> str:
    """How ONNX Runtime's output differs from PyTorch's ("" when it agrees); ``values``
    False compares shape and dtype only; ``computed_in``: see :func:`tolerance`."""
    if not isinstance(actual, torch.Tensor):
        return f"is a {type(actual).__name__}, not a tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"has shape {tuple(actual.shape)} instead of {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"is {actual.dtype} instead of {expected.dtype}"
    if not values or expected.numel() == 0:
        return ""
    element = _closeness.element_errors(actual, expected)
    atol, rtol = tolerance(expected.dtype, computed_in)
    allowed = element.allowed(atol * max(1.0, element.scale), rtol)
    excess = element.error - allowed
    if not bool((excess > 0).any()):
        return ""
    worst = int(torch.argmax(torch.nan_to_num(excess, nan=float("inf"))))
    error = float(element.error.flatten()[worst])
    bound = float(allowed.flatten()[worst])
    return f"differs: max abs error {error:.3g} (allowed {bound:.3g})"


def _same_element(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def picks_tied_values(call: NodeCall, index: int, actual: Any) -> bool:
    """Whether ``actual``, ONNX Runtime's output ``index`` of an op of
    :data:`_INDEX_OUTPUT`, indexes the same input values as PyTorch's (it picked
    another of tied elements)."""
    name = op_name(call.target)
    arguments = [a.name for a in call.target._schema.arguments]
    if _INDEX_OUTPUT.get(name) != index or "dim" not in arguments:
        return False
    if _schema_arg(call, "stable") is True:
        return False
    source = call.args[0]
    expected = call.result if isinstance(call.result, torch.Tensor) else call.result[index]
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    dim = _schema_arg(call, "dim")
    if dim is None or source.dim() == 0:  # indices into the flattened input
        flat = source.reshape(-1)
        if bool(((actual < 0) | (actual >= flat.numel())).any()):
            return False
        return _same_element(flat[actual.reshape(-1)], flat[expected.reshape(-1)])
    dim = dim % source.dim()
    if _schema_arg(call, "keepdim") is False:
        actual, expected = actual.unsqueeze(dim), expected.unsqueeze(dim)
    if bool(((actual < 0) | (actual >= source.shape[dim])).any()):
        return False
    return _same_element(source.gather(dim, actual), source.gather(dim, expected))


def compare(call: NodeCall, actual: Sequence[Any], returned: Sequence[int]) -> Outcome:
    """ONNX Runtime's outputs (``actual``, for the node's outputs ``returned``) against
    PyTorch's result of the call, every one of them."""
    single = isinstance(call.result, torch.Tensor)
    expected = [call.result] if single else [call.result[i] for i in returned]
    names = output_names(call.target, 1 if single else len(call.result))
    values = not op_name(call.target).startswith(_UNINITIALIZED)
    inputs = [*_flat(call.args), *_flat(tuple(call.kwargs.values()))]
    computed_in = inputs[0].dtype if inputs else None
    bad, reasons = [], []
    for index, got, want in zip(returned, actual, expected):
        why = difference(got, want, values=values, computed_in=computed_in)
        if why and picks_tied_values(call, index, got):
            why = ""
        if why:
            name = names[index] if index < len(names) else ""
            label = "the output" if single else f"output {index}"
            bad.append(index)
            reasons.append(f"{label}{f' ({name})' if name else ''} {why}")
    if not bad:
        return Outcome(True, single=single)
    return Outcome(False, reasons[0], () if single else tuple(bad), single)


@dataclasses.dataclass
class Checker:
    """Checks node calls, keeping each exported session (or the error that stopped it)
    per :func:`cache_key`. One per generation run (:meth:`clear` frees the sessions)."""

    registry: Any
    """The exporter's registry to translate with."""
    provider: str = _session.CPU
    runners: dict[tuple[Any, ...], Any] = dataclasses.field(default_factory=dict)
    """Cache key -> ``OrtRunner``, or the one-line error that stopped the export or
    session."""
    capacity: int = 2000
    """Sessions kept (each holds an ONNX Runtime session's memory)."""
    exports: int = 0
    """Models exported (cache misses)."""

    def clear(self) -> None:
        self.runners.clear()

    def _runner(self, call: NodeCall, one: OneNode) -> Any:
        key = cache_key(call)
        runner = self.runners.pop(key, None)
        if runner is None:
            self.exports += 1
            try:
                runner = self._make_runner(one)
            except Exception as e:
                runner = _shorten(errors.describe(e))
            while len(self.runners) >= self.capacity:  # the least recently used goes
                del self.runners[next(iter(self.runners))]
        self.runners[key] = runner
        return runner

    def _make_runner(self, one: OneNode) -> Any:
        exported = _export.export_partition(
            one.gm,
            name="conformance",
            args=one.inputs,
            static=True,
            frozen={},
            transforms=(),
            registry=self.registry,
            fuse=False,
        )
        # ortlab's session options, quieter: a failing run is a finding, not a log line
        options = _session.default_session_options(threads=1)
        options.log_severity_level = 4
        session = _session.create_session(
            exported.proto.SerializeToString(), [(self.provider, {})], options
        )
        output = next(n for n in one.gm.graph.nodes if n.op == "output").args[0]
        outputs = output if isinstance(output, tuple) else (output,)
        return _runtime.OrtRunner(
            session,
            exported.proto,
            input_fx_values=one.inputs,
            output_fx_values=[n.meta["val"] for n in outputs],
            args=one.inputs,
            frozen={},
            preallocate_output=False,
        )

    def check(self, call: NodeCall, one: OneNode) -> Outcome:
        """The outcome of one call (``one``: its graph, :func:`one_node_graph`)."""
        single = isinstance(call.result, torch.Tensor)
        runner = self._runner(call, one)
        if isinstance(runner, str):
            return Outcome(False, runner, (), single, error=True)
        try:
            actual = runner.run(one.inputs)
        except Exception as e:
            reason = f"ONNX Runtime's run failed: {errors.describe(e)}"
            return Outcome(False, _shorten(reason), (), single, error=True)
        return compare(call, actual, one.returned)
