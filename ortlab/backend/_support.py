"""Which FX nodes may run in ONNX Runtime, each with a reason (a :class:`Verdict`).

# NOTE: the exporter's registry says which ATen overloads have an ONNX translation, but
# registered is not always translatable or wise. The rules, in the order applied:
#
#   1. the user's ``excluded_ops``                        -> eager, "excluded by options"
#   2. assertions (``_assert_scalar``…)                   -> eager, they guard Python state
#   3. higher-order ops (cond, scan, wrap…)               -> eager
#   4. a result that is not a tensor (SymInt arithmetic)  -> eager, stays in Python
#   5. ``getitem``                                        -> follows its producer
#   6. in-place / mutating ops                            -> eager, ONNX values are immutable
#   7. dtypes without an ONNX Runtime/numpy mapping       -> eager (complex, bfloat16, fp8)
#   8. RNG ops (``Tag.nondeterministic_seeded``)          -> eager, except attention
#      (scaled_dot_product_*) whose ``dropout_p`` is 0
#   9. ops whose ONNX translation fakes auxiliary outputs  -> eager when those are used
#      batch norm in training mode (batch statistics)    -> eager
#  10. no translation in the registry                     -> eager
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from ortlab.backend import _dtypes, _torch_private, records

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

_SDPA_DROPOUT_KWARG = "dropout_p"

# Ops whose torchlib translation computes only the first output and returns placeholders
# (zeros) for the auxiliary ones (logsumexp, philox seeds…). Running them in ORT is only
# right when nothing reads those outputs — AOTAutograd saves logsumexp for backward.
_PLACEHOLDER_AUX_OUTPUTS = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)


def target_text(target: Any) -> str:
    """A readable name for a node target: ``aten.mm.default``, ``<built-in function add>``."""
    if _torch_private.is_op_overload(target):
        return (
            f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
        )
    if _torch_private.is_op_packet(target):
        return str(target)
    return str(target)


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# ortlab's own wrappers (the lab's fresh entry points, the magic's call) are not the
# user's code either.
_ORTLAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


_DYNAMO_DIR = os.path.join(_TORCH_DIR, "_dynamo") + os.sep


def is_dynamo_file(path: str) -> bool:
    """Whether ``path`` is Dynamo's own code (its wrappers around a compiled call)."""
    return os.path.abspath(path).startswith(_DYNAMO_DIR)


def is_users_file(path: str) -> bool:
    """Whether ``path`` is the user's code: not inside torch or ortlab."""
    absolute = os.path.abspath(path)
    return not absolute.startswith((_TORCH_DIR, _ORTLAB_DIR))


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\s*$')


_RESUMED = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_(?P<line>\d+)$")


def function_name(name: str) -> str:
    """A code object's name as people read it: Dynamo's resume functions (the code after
    a graph break, ``torch_dynamo_resume_in_forward_at_11``) read ``"forward (resumed
    after line 11)"``."""
    match = _RESUMED.match(name)
    if match is None:
        return name
    return f"{match['name']} (resumed after line {match['line']})"


def short_path(path: str) -> str:
    """A path as people read it: ``"cell"`` for a notebook cell, from the package down
    when installed (``transformers/models/gpt2/modeling_gpt2.py``), else relative to the
    working directory when under it, else the file name."""
    absolute = os.path.abspath(path)
    if os.path.basename(os.path.dirname(absolute)).startswith("ipykernel_"):
        return "cell"  # a notebook cell (ipykernel names its code after a hash)
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in absolute:
            return absolute.split(marker, 1)[1]
    cwd = os.getcwd() + os.sep
    if absolute.startswith(cwd):
        return absolute[len(cwd) :]
    return os.path.basename(absolute)


def _frames(trace: str) -> list[tuple[str, int, str, str]]:
    """``(file, line, function, code)`` per frame of a ``stack_trace``, outermost first."""
    frames: list[tuple[str, int, str, str]] = []
    lines = trace.splitlines()
    for i, line in enumerate(lines):
        match = _FRAME.match(line)
        if match is None:
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _FRAME.match(code):
            code = ""
        frames.append((match["file"], int(match["line"]), match["name"], code))
    return frames


def outer_frames(graph_module: torch.fx.GraphModule) -> list[tuple[str, int, str, str]]:
    """The frames of the first node stack trace of the graph that has user code, from its
    outermost user frame down (or, for a graph of torch modules only, from its outermost
    frame outside Dynamo's wrappers); ``[]`` when no node has a stack trace."""
    fallback: list[tuple[str, int, str, str]] = []
    for node in graph_module.graph.nodes:
        frames = _frames(node.meta.get("stack_trace") or "")
        for i, frame in enumerate(frames):
            if is_users_file(frame[0]):
                return frames[i:]
        if not fallback:
            fallback = [f for f in frames if not is_dynamo_file(f[0])]
    return fallback


def outer_module(graph_module: torch.fx.GraphModule) -> str:
    """``"Sequential.forward"``: the outermost module of the graph's first node that
    records its module stack (a graph of torch modules has no user frames); ``""``."""
    for node in graph_module.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            _, module_class = next(iter(stack.values()))
            return f"{getattr(module_class, '__name__', module_class)}.forward"
    return ""


def user_source(node: torch.fx.Node) -> str:
    """Where ``node`` comes from in the user's code: ``"model.py:12 in forward: y = f(x)"``.

    The innermost frame of the node's ``stack_trace`` (Dynamo records it; the lowering
    keeps it) that is not inside torch or ortlab, so a ``F.linear`` call points at the
    user's line, not at ``torch/nn/functional.py``. ``""`` when the node has none.
    """
    trace = node.meta.get("stack_trace")
    if not trace:
        return ""
    frames = _frames(trace)
    if not frames:
        return ""
    outside = [f for f in frames if is_users_file(f[0])]
    file, line, name, code = (outside or frames)[-1]
    text = f"{short_path(file)}:{line} in {function_name(name)}"
    return f"{text}: {code}" if code else text


def _matches_excluded(target: Any, excluded: Iterable[Any]) -> bool:
    for item in excluded:
        if item is target:
            return True
        if _torch_private.is_op_overload(target):
            if item is target.overloadpacket:
                return True
            if isinstance(item, str):
                text = item.replace("::", ".").removeprefix("torch.ops.")
                full = target_text(target)
                packet = full.rsplit(".", 1)[0]
                if text in (full, packet):
                    return True
        elif isinstance(item, str) and item == target_text(target):
            return True
    return False


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


def _schema_arg(node: torch.fx.Node, name: str) -> Any:
    """The value of the op's schema argument ``name`` (its default when not given;
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


def _dropout_p(node: torch.fx.Node) -> Any:
    """The ``dropout_p`` argument of an attention op (``None`` when it has none)."""
    return _schema_arg(node, _SDPA_DROPOUT_KWARG)


class OrtOperatorSupport(OperatorSupportBase):
    """Operator support for ``CapabilityBasedPartitioner`` that also explains itself.

    ``verdict(node)`` returns a :class:`~ortlab.backend.records.Verdict`; verdicts are
    cached per node, so ``getitem`` can follow its producer's verdict.
    """

    def __init__(
        self,
        registry: Any,
        *,
        excluded_ops: Iterable[Any] = (),
        forced_eager: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._registry = registry
        self._excluded = tuple(excluded_ops)
        self._forced = dict(forced_eager or {})
        self._verdicts: dict[torch.fx.Node, records.Verdict] = {}

    def is_node_supported(
        self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node
    ) -> bool:
        return node.op == "call_function" and self.verdict(node).supported

    def verdict(self, node: torch.fx.Node) -> records.Verdict:
        """Decides (once) whether ``node`` may run in ONNX Runtime, and why."""
        cached = self._verdicts.get(node)
        if cached is None:
            supported, reason = self._decide(node)
            cached = records.Verdict(
                node.name, target_text(node.target), supported, reason, user_source(node)
            )
            self._verdicts[node] = cached
        return cached

    def _decide(self, node: torch.fx.Node) -> tuple[bool, str]:
        target = node.target
        if node.name in self._forced:
            return False, self._forced[node.name]
        if self._excluded and _matches_excluded(target, self._excluded):
            return False, "excluded by OrtBackendOptions.excluded_ops"
        if target in _ASSERTIONS:
            return False, "runtime assertion on Python/symbolic values; stays in PyTorch"
        if _torch_private.is_higher_order_op(target):
            return False, (
                f"higher-order operator {getattr(target, '__name__', target)!s} (control "
                "flow or a nested graph) has no partition-level ONNX translation"
            )
        if "val" not in node.meta:
            return False, "no shape/dtype metadata (meta['val']) to export it with"
        value = node.meta["val"]
        if target is torch.ops.aten._local_scalar_dense.default:
            return False, "reads a tensor into a Python number (.item()); stays in PyTorch"
        if not _is_tensor_result(value):
            return False, (
                f"computes a Python/symbolic scalar ({type(value).__name__}); size "
                "arithmetic stays in Python"
            )
        if target is operator.getitem:
            producer = node.args[0]
            if isinstance(producer, torch.fx.Node) and producer.op == "call_function":
                if self.verdict(producer).supported:
                    return True, "selects an output of a supported node"
                return False, "selects an output of a node that runs in PyTorch"
            return False, "selects from a value produced outside a partition"
        if _torch_private.is_op_overload(target) and target._schema.is_mutable:
            return False, (
                "mutates an input in place; ONNX values are immutable, so it runs in PyTorch"
            )
        for arg in (*node.args, *node.kwargs.values(), value):
            args = arg if isinstance(arg, (list, tuple)) else (arg,)
            for a in args:
                meta = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
                for t in _tensors_in(meta):
                    if not _dtypes.supported(t.dtype):
                        return False, _dtypes.unsupported_reason(t.dtype)
        if (
            _torch_private.is_op_overload(target)
            and torch.Tag.nondeterministic_seeded in target.tags
        ):
            if "scaled_dot_product" in target.__name__ and _dropout_p(node) == 0:
                pass  # attention without dropout is deterministic
            else:
                return False, (
                    "random op (nondeterministic_seeded): ONNX Runtime's RNG differs from "
                    "PyTorch's, so it runs in PyTorch to keep results reproducible"
                )
        if (
            _torch_private.is_op_overload(target)
            and "batch_norm" in target.__name__
            and _schema_arg(node, "training") is True
        ):
            return False, (
                "batch norm in training mode: the ONNX translation does not reproduce "
                "PyTorch's batch statistics (measured wrong); runs in PyTorch"
            )
        if _torch_private.is_op_overload(target) and target.__name__.startswith(
            _PLACEHOLDER_AUX_OUTPUTS
        ):
            used = sorted(
                int(user.args[1])  # type: ignore[arg-type]
                for user in node.users
                if user.target is operator.getitem and user.args[1] != 0 and user.users
            )
            if used:
                return False, (
                    f"outputs {used} (e.g. logsumexp, saved for backward) are used, but the "
                    "ONNX translation returns placeholders for them; runs in PyTorch"
                )
        if not self._registry.is_registered(target):
            return False, (
                "no ONNX translation registered in the exporter (onnxscript torchlib); "
                "register one or keep it in PyTorch"
            )
        return True, "translated by the exporter's registry (torchlib)"


def input_alias_outputs(gm: torch.fx.GraphModule) -> dict[str, str]:
    """View chains from a graph input to a graph output, which must stay in PyTorch so the
    output keeps aliasing the input (ORT would return a copy).

    ::

        x (input) -> t -> view -> output     both views stay eager: out shares x's storage
    """
    aliases: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            aliases.add(node)
        elif (
            node.op == "call_function"
            and _torch_private.is_op_overload(node.target)
            and node.target.is_view
            and node.args
            and node.args[0] in aliases
        ):
            aliases.add(node)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    pending = [a for a in output.all_input_nodes if a in aliases and a.op == "call_function"]
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
    return forced
