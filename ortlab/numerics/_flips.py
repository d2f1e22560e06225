"""Decision flips: discrete results that differ from eager because rounding crossed a
discontinuity, not because an op is wrong.

A *decision node* has a discrete result (booleans of a comparison, integer indices of
argmax, sort, topk or max pooling) and floating-point operands. For every partition run,
:func:`find_flips` compares each decision node's value in the ortlab run with its value in
the all-eager run of the same graphs, and calls a difference a flip when

1. the node's operands, as ONNX Runtime computed them, agree with eager's within the
   intermediate tolerance (:mod:`ortlab.numerics._compare`): nothing upstream is wrong;
2. the op run eagerly on ONNX Runtime's operands decides as ONNX Runtime did at every
   flipped element: the op itself is right (a wrong comparison, say ``Less`` for
   ``Greater``, is a divergent node, never a flip).

# NOTE: why flips get their own finding. An operand a few units in the last place away
# from a threshold (a ReLU's pre-activation at 1e-5, two equal candidates of a max pool)
# lands on either side depending on summation order; ONNX Runtime and PyTorch sum in
# different orders, so either may be "right", and float64 decides. Downstream of the
# decision nothing is continuous any more: one flipped element of a ReLU mask moves a
# weight gradient by a fifth of its size (measured on ResNet-18; inductor does the same on
# other seeds). Error accounting by tolerance would blame every node downstream, or, with
# each partition right on its own inputs, nobody ("the error accumulates").
#
# What is compared, and with what:
# - the reference is the all-eager run of the graphs (``_localise``'s carried-in run);
#   without one, the partition's graph run eagerly on the inputs ONNX Runtime received;
# - ONNX Runtime's value of a node is the partition run's own output or input where the
#   node is one, else the debug copy of the model (intermediates as outputs, ``_debug``),
#   run only for partitions where a flip is suspected: where the partition's graph run
#   eagerly on ONNX Runtime's inputs, or ONNX Runtime's output, or a compared node, differs
#   from the reference. So a flip inside a partition that leaves all of its outputs within
#   tolerance (a mask used and dropped there) is found where nodes are compared
#   (``nodes=True``); a flip that matters downstream shows at the partition's outputs, or
#   in the inputs of the partition that decides again (a backward graph's ReLU mask).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ortlab.backend import _torch_private
from ortlab.numerics import _compare, _debug, _findings, _interpret, _records

if TYPE_CHECKING:
    from ortlab.backend import OrtBackendOptions
    from ortlab.numerics._runner import Capture

_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_PASS_THROUGH = frozenset({"detach", "alias", "clone", "lift_fresh_copy"})
"""Ops that hand their operand on unchanged: looked through to name the real operand."""
_CLAMPS = frozenset({"relu", "clamp_min", "clamp", "hardtanh", "threshold"})
"""Ops whose input (a pre-activation) is shown next to their output."""
_ALONG_DIM = {"argmax": 1, "argmin": 1, "max": 1, "min": 1, "sort": 1, "topk": 2}
"""Ops returning indices along ``dim``: the position of ``dim`` among their arguments."""
_POOLS = {
    "max_pool1d_with_indices": 1,
    "max_pool2d_with_indices": 2,
    "max_pool3d_with_indices": 3,
}
"""Max pooling: indices into the flattened trailing spatial dims (how many)."""


def _packet(node: torch.fx.Node) -> str:
    """``"le"`` for ``aten.le.Scalar`` (``""`` for anything but an ATen op)."""
    if not _torch_private.is_op_overload(node.target):
        return ""
    return str(node.target).split(".")[1]


def _meta_dtype(node: torch.fx.Node) -> torch.dtype | None:
    value = node.meta.get("val")
    return value.dtype if isinstance(value, torch.Tensor) else None


def _is_float(node: torch.fx.Node) -> bool:
    dtype = _meta_dtype(node)
    return dtype is not None and dtype.is_floating_point


@dataclasses.dataclass(frozen=True)
class Site:
    """A node with a discrete result, and the op that decided it."""

    result: torch.fx.Node
    decider: torch.fx.Node
    """``result`` itself, or the multi-output op ``result`` is a ``getitem`` of."""
    item: int | None
    """Which output of ``decider`` ``result`` is (``None``: its only one)."""
    operands: tuple[torch.fx.Node, ...]
    """The decider's floating-point operands."""
    shown: tuple[tuple[str, torch.fx.Node], ...]
    """Values shown at a flipped element, with their labels: operands through
    pass-through ops, and a clamp's input (the pre-activation of a ReLU)."""

    @property
    def names(self) -> set[str]:
        """Every node whose value deciding on a flip needs."""
        nodes = [self.result, *self.decider.all_input_nodes, *(n for _, n in self.shown)]
        return {n.name for n in nodes}


def _root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose value ``node`` hands on unchanged (through ``detach`` and alike)."""
    while node.op == "call_function" and _packet(node) in _PASS_THROUGH and node.args:
        if not isinstance(node.args[0], torch.fx.Node):
            break
        node = node.args[0]
    return node


def _shown(operands: Sequence[torch.fx.Node]) -> tuple[tuple[str, torch.fx.Node], ...]:
    shown: list[tuple[str, torch.fx.Node]] = []
    for operand in operands:
        root = _root(operand)
        shown.append((root.name, root))
        if root.op == "call_function" and _packet(root) in _CLAMPS:
            source = root.args[0] if root.args else None
            if isinstance(source, torch.fx.Node):
                shown.append((f"{source.name} (input of {root.name})", source))
    return tuple(shown)


def sites(gm: torch.fx.GraphModule) -> list[Site]:
    """The decision nodes of a partition's graph, in topological order."""
    found = []
    for node in gm.graph.nodes:
        dtype = _meta_dtype(node)
        if node.op != "call_function" or dtype is None:
            continue
        if dtype.is_floating_point or dtype.is_complex:
            continue
        decider, item = node, None
        source = node.args[0] if node.args else None
        if node.target is operator.getitem and isinstance(source, torch.fx.Node):
            decider, item = source, int(node.args[1])  # type: ignore[arg-type]
        operands = tuple(n for n in decider.all_input_nodes if _is_float(n))
        if decider.op == "call_function" and operands:
            found.append(Site(node, decider, item, operands, _shown(operands)))
    return found


def names_of(found: Sequence[Site]) -> set[str]:
    """Every node whose value the sites need (what the interpreters keep)."""
    return set().union(*(s.names for s in found)) if found else set()


def _arg(node: torch.fx.Node, name: str, position: int | None, default: Any) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    if position is not None and len(node.args) > position:
        return node.args[position]
    return default


def _gather(site: Site, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor | None:
    """``values`` (the decider's first operand) at ``indices`` (its index result), shaped
    like ``indices``; ``None`` for ops whose indices this does not know."""
    packet = _packet(site.decider)
    indices = indices.to(torch.int64)
    if packet in _POOLS:
        spatial = _POOLS[packet]
        flat = values.flatten(-spatial)
        return flat.gather(-1, indices.flatten(-spatial)).reshape(indices.shape)
    if packet not in _ALONG_DIM:
        return None
    stable = str(site.decider.target).endswith(".stable")
    dim = _arg(site.decider, "dim", None if stable else _ALONG_DIM[packet], -1)
    if dim is None:  # argmax over everything: a flat index
        return values.reshape(-1)[indices.reshape(-1)].reshape(indices.shape)
    dim = int(dim) % values.dim()
    if packet in ("sort", "topk") or indices.dim() == values.dim():
        return values.gather(dim, indices)
    return values.gather(dim, indices.unsqueeze(dim)).squeeze(dim)


def _at(value: Any, shape: torch.Size, index: tuple[int, ...]) -> float | None:
    if not isinstance(value, torch.Tensor):
        return float(value) if isinstance(value, (int, float)) else None
    try:
        return float(torch.broadcast_to(value, shape)[index])
    except RuntimeError:
        return None


def _match(got: Any, like: Any) -> Any:
    """ONNX Runtime's value in the eager value's dtype and shape where only the runtime's
    conventions differ (int32 indices, ``(1,)`` for ``()``)."""
    if not isinstance(got, torch.Tensor) or not isinstance(like, torch.Tensor):
        return got
    if got.dtype != like.dtype and got.numel() == like.numel():
        got = got.to(like.dtype)
    if got.shape != like.shape and got.numel() == like.numel():
        got = got.reshape(like.shape)
    return got


@dataclasses.dataclass
class _RunValues:
    """The values one partition run's sites are judged on, by FX node name."""

    reference: Mapping[str, Any]
    """The all-eager run's (else the graph run eagerly on ONNX Runtime's inputs)."""
    local: Mapping[str, Any]
    """The partition's graph run eagerly on ONNX Runtime's inputs."""
    ort: dict[str, Any]
    """What ONNX Runtime computed, where known."""

    def compiled(self, name: str) -> Any:
        """ONNX Runtime's value, else the eager one on ONNX Runtime's inputs."""
        return self.ort[name] if name in self.ort else self.local.get(name)


def _differs(got: Any, ref: Any) -> bool:
    if not isinstance(got, torch.Tensor) or not isinstance(ref, torch.Tensor):
        return False
    got = _match(got, ref)
    return got.shape == ref.shape and not torch.equal(got.to(ref.device), ref)


def _ort_known(capture: Capture, reference: Mapping[str, Any]) -> dict[str, Any]:
    """The partition's inputs (frozen ones as the model holds them) and outputs."""
    record, session = capture.partition, capture.session
    frozen = _debug.frozen_initializers(session.model, session.frozen_inputs)
    inputs = zip(record.input_names, capture.inputs)
    known = {name: frozen.get(name, value) for name, value in inputs}
    for name, value in zip(record.output_names, capture.outputs):
        known[name] = _match(value, reference.get(name))
    return known


def _fetch(
    capture: Capture,
    names: Collection[str],
    values: _RunValues,
    options: OrtBackendOptions,
    notes: list[str],
) -> None:
    """Adds ONNX Runtime's values of ``names`` to ``values.ort`` from a debug model run."""
    mapping, _, _ = _debug.onnx_values(capture.session.model, sorted(names))
    if not mapping:
        return
    try:
        found, note = _debug.run_debug_model(capture, sorted(set(mapping.values())), options)
    except Exception as e:
        notes.append(f"decision flips: could not run the debug model: {type(e).__name__}: {e}")
        return
    if note:
        notes.append(note)
    for name, onnx_name in mapping.items():
        if onnx_name in found:
            values.ort[name] = _match(found[onnx_name], values.local.get(name))


def _judge(
    site: Site,
    values: _RunValues,
    *,
    atol: float | None,
    rtol: float | None,
) -> tuple[torch.Tensor, float, float] | str:
    """The flipped elements, the operands' largest error and its tolerance; or why the
    difference is not a flip."""
    name = site.result.name
    ref, got = values.reference.get(name), values.ort.get(name)
    if not isinstance(ref, torch.Tensor) or not isinstance(got, torch.Tensor):
        return f"ONNX Runtime's value of {name} is unknown"
    if got.shape != ref.shape:
        return f"{name} has another shape in ONNX Runtime"
    flipped = got.to(ref.device) != ref
    if not bool(flipped.any()):
        return ""
    worst, allowed = 0.0, 0.0
    for operand in site.operands:
        eager, mine = values.reference.get(operand.name), values.compiled(operand.name)
        shown = _root(operand).name
        if eager is None or mine is None:
            return f"a value of operand {shown} is unknown"
        diff = _compare.compare_tensors(shown, mine, eager, atol=atol, rtol=rtol, scale=0.0)
        if not diff.passed:
            return f"operand {shown} differs from eager beyond tolerance"
        worst, allowed = max(worst, diff.max_abs_error), max(allowed, diff.atol)
    env = {n: values.compiled(n.name) for n in site.decider.all_input_nodes}
    try:
        with torch.no_grad():
            mine = _interpret.local_value(site.decider, env)
    except Exception as e:
        return f"{site.decider.name} could not be rerun ({type(e).__name__})"
    if site.item is not None:
        mine = mine[site.item]
    mine = _match(mine, ref)
    if not isinstance(mine, torch.Tensor) or mine.shape != ref.shape:
        return f"{site.decider.name} rerun on ONNX Runtime's operands gave another shape"
    if not torch.equal(mine.to(ref.device)[flipped], got.to(ref.device)[flipped]):
        return (
            f"{_interpret.target_text(site.decider)} decides otherwise on ONNX Runtime's "
            "operands (the op's own error)"
        )
    return flipped, worst, allowed


def _values_at(
    site: Site, values: _RunValues, index: tuple[int, ...], shape: torch.Size
) -> tuple[tuple[_findings.FlipValue, ...], float | None]:
    """The values shown at a flipped element, and a comparison's constant threshold."""
    name = site.result.name
    if site.item is not None or _packet(site.decider) in ("argmax", "argmin"):
        first = site.decider.args[0] if site.decider.args else None
        if not isinstance(first, torch.fx.Node):
            return (), None
        eager_x, ort_x = values.reference.get(first.name), values.compiled(first.name)
        ref, got = values.reference[name], values.ort[name]
        shown = []
        for whose, indices in (("eager", ref), ("ORT", got)):
            if not isinstance(eager_x, torch.Tensor) or not isinstance(ort_x, torch.Tensor):
                break
            at_eager, at_ort = _gather(site, eager_x, indices), _gather(site, ort_x, indices)
            if at_eager is None or at_ort is None:
                break
            choice = indices[index].item()
            shown.append(
                _findings.FlipValue(
                    f"{first.name} at {whose}'s choice {choice}",
                    float(at_eager[index]),
                    float(at_ort[index]),
                )
            )
        return tuple(shown), None
    shown = []
    for label, node in site.shown:
        eager = _at(values.reference.get(node.name), shape, index)
        ort = _at(values.compiled(node.name), shape, index)
        if eager is not None and ort is not None:
            shown.append(_findings.FlipValue(label, eager, ort))
    threshold = None
    if _packet(site.decider) in _COMPARISONS:
        constants = [a for a in site.decider.args[:2] if isinstance(a, (int, float))]
        if constants and not isinstance(constants[0], bool):
            threshold = float(constants[0])
    return tuple(shown), threshold


def find_flips(
    capture: Capture,
    result: _records.PartitionDiff,
    found: Sequence[Site],
    reference: Mapping[str, Any] | None,
    local: Mapping[str, Any],
    *,
    atol: float | None,
    rtol: float | None,
    options: OrtBackendOptions,
    source: Callable[[str], str],
) -> list[_findings.DecisionFlip]:
    """The decision flips of one partition run (module docstring).

    Args:
        capture: What ONNX Runtime received and returned in this run.
        result: Its comparison so far (compared nodes suggest suspects; notes go there).
        found: The partition's decision :func:`sites`.
        reference: Values of the all-eager run inside this partition, by node name
            (``None`` when there was none).
        local: Values of the partition's graph run eagerly on ONNX Runtime's inputs.
        atol: Intermediate absolute tolerance (the operands must be within it).
        rtol: Intermediate relative tolerance.
        options: The backend's options (the debug model's session).
        source: The user's source line of a node, by name.
    """
    values = _RunValues(reference if reference is not None else local, local, {})
    values.ort.update(_ort_known(capture, values.reference))
    failing = {n.node for n in result.nodes if n.diff is not None and not n.diff.passed}
    suspects = [
        s
        for s in found
        if _differs(values.compiled(s.result.name), values.reference.get(s.result.name))
        or s.result.name in failing
    ]
    if not suspects:
        return []
    missing = names_of(suspects) - set(values.ort)
    if missing:
        _fetch(capture, missing, values, options, result.notes)
    flips = []
    for site in suspects:
        judged = _judge(site, values, atol=atol, rtol=rtol)
        if isinstance(judged, str):
            if judged:
                result.notes.append(
                    f"{site.result.name} differs from eager but is not classified as a "
                    f"decision flip: {judged}"
                )
            continue
        flipped, worst, allowed = judged
        ref, got = values.reference[site.result.name], values.ort[site.result.name]
        index = tuple(int(i) for i in torch.nonzero(flipped)[0])
        at_first, threshold = _values_at(site, values, index, ref.shape)
        flips.append(
            _findings.DecisionFlip(
                result.graph_index,
                result.graph_kind,
                result.name,
                result.run,
                site.result.name,
                _interpret.target_text(site.decider),
                list(capture.partition.graph_module.graph.nodes).index(site.decider),
                source(site.decider.name),
                int(flipped.sum()),
                ref.numel(),
                index,
                ref[index].item(),
                got.to(ref.device)[index].item(),
                at_first,
                threshold,
                worst,
                allowed,
            )
        )
    return flips
