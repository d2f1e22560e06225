"""How a Dynamo graph becomes the ATen graphs ortlab partitions: declared strategies,
tried in order, and the one place that handles their failures.

# NOTE: :data:`STRATEGIES` is the fallback chain; :func:`lower` tries the ones that
# apply, in order, until one returns the compiled callable:
#
#   strategy      applies when                                  if it fails
#   make_fx       grad off and plain inputs (no AOTAutograd      the next one; the graph's
#                 wrappers: ~0.1 ms less per call), or           record says why
#                 use_aot_autograd=False                         (GraphRecord.fallback)
#   aot_autograd  use_aot_autograd=True (training-capable)       the next one
#   eager         always                                         - (the graph runs in PyTorch;
#                                                                 GraphRecord.error)
#
# Every failure goes through :func:`guard` first: Dynamo's control-flow signals (restart
# the analysis, skip the frame) pass through untouched, ``strict=True`` turns the failure
# into a :class:`~ortlab.CompileError`; otherwise it is recorded and warned about once
# (``ortlab.FallbackWarning``). AOTAutograd's compile of one of its graphs (forward,
# backward) goes through the same :func:`guard` before that graph runs eagerly.
"""

from __future__ import annotations

import dataclasses
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.fx

from ortlab import errors
from ortlab.backend import _options, _torch_private, records

Lowering = records.Lowering

_TEXT: dict[Lowering, str] = {
    "make_fx": "the make_fx lowering",
    "aot_autograd": "the AOTAutograd lowering",
    "eager": "running the graph eagerly",
}


class Host(Protocol):
    """What the strategies need of the backend."""

    @property
    def options(self) -> _options.OrtBackendOptions: ...

    def lower_with_make_fx(
        self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], origin: Any
    ) -> Callable[..., Any]: ...

    def lower_with_aot(
        self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], origin: Any
    ) -> Callable[..., Any]: ...

    def run_eagerly(
        self,
        graph_module: torch.fx.GraphModule,
        *,
        kind: records.GraphKind,
        origin: Any,
        error: str,
        exc: BaseException | None,
        lowering: Lowering = "eager",
    ) -> Callable[..., Any]: ...


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One way to lower a Dynamo graph."""

    name: Lowering
    applies: Callable[[Host, torch.fx.GraphModule, Sequence[Any]], bool]
    lower: Callable[[Host, torch.fx.GraphModule, Sequence[Any], Any, str], Callable[..., Any]]
    """``lower(host, graph, inputs, origin, why)``: the compiled callable; ``why`` says
    what failed before it ("" for the first strategy tried)."""


def _make_fx_applies(host: Host, gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> bool:
    return not host.options.use_aot_autograd or thin_inference_applies(gm, inputs)


def _eager(
    host: Host, gm: torch.fx.GraphModule, inputs: Sequence[Any], origin: Any, why: str
) -> Callable[..., Any]:
    return host.run_eagerly(gm, kind="inference", origin=origin, error=why, exc=None)


STRATEGIES: tuple[Strategy, ...] = (
    Strategy(
        "make_fx",
        _make_fx_applies,
        lambda host, gm, inputs, origin, why: host.lower_with_make_fx(gm, inputs, origin),
    ),
    Strategy(
        "aot_autograd",
        lambda host, gm, inputs: host.options.use_aot_autograd,
        lambda host, gm, inputs, origin, why: host.lower_with_aot(gm, inputs, origin),
    ),
    Strategy("eager", lambda host, gm, inputs: True, _eager),
)
"""The lowering strategies, in the order they are tried (see the module's NOTE)."""


def guard(options: _options.OrtBackendOptions, step: str, error: BaseException) -> None:
    """The first thing done with any failure while compiling: re-raises Dynamo's
    control-flow signals and ortlab's own ``CompileError`` as they are, and raises
    ``CompileError`` under ``strict=True``; returns when the failure may fall back."""
    if isinstance(error, (errors.CompileError, *_torch_private.dynamo_signals())):
        raise error
    if options.strict:
        raise errors.CompileError(
            f"ortlab (strict=True): {step} failed: {errors.describe(error)}. Without "
            "strict=True this graph would run in PyTorch, with the error on its "
            "GraphRecord."
        ) from error


def warn(message: str) -> None:
    """One fall back, said once (``ortlab.FallbackWarning``)."""
    warnings.warn(f"ortlab: {message}", errors.FallbackWarning, stacklevel=4)


def lower(
    host: Host, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], origin: Any
) -> Callable[..., Any]:
    """Tries :data:`STRATEGIES` in order; returns the first one's compiled callable.

    The first failure is recorded on ``origin.fallback`` (every GraphRecord made from
    this graph carries it). Failures are warned about once a later strategy is through
    (the eager strategy's own warning says the last one), not when Dynamo restarts the
    analysis: the graph is then compiled again, and that compile warns.
    """
    _swap_python_functions(graph_module)
    failures: list[tuple[Lowering, str]] = []
    for strategy in STRATEGIES:
        if not strategy.applies(host, graph_module, example_inputs):
            continue
        why = f"lowering to ATen failed: {failures[-1][1]}" if failures else ""
        if why and strategy.name == "eager" and torch.is_grad_enabled():
            why += (
                "; for inference, call the model under torch.no_grad() (or "
                "torch.inference_mode()): it is then lowered without autograd"
            )
        try:
            compiled = strategy.lower(host, graph_module, example_inputs, origin, why)
        except Exception as e:
            guard(host.options, _TEXT[strategy.name], e)
            failures.append((strategy.name, errors.describe(e)))
            if origin.fallback is None:
                following = _next(strategy, host, graph_module, example_inputs)
                origin.fallback = f"{_TEXT[strategy.name]} failed ({failures[0][1]})" + (
                    f"; lowered through {_LABEL[following]} instead"
                    if following in _LABEL
                    else ""
                )
            continue
        said = failures[:-1] if strategy.name == "eager" else failures
        for name, error in said:
            instead = _LABEL.get(strategy.name)
            tail = f"; lowered through {instead} instead" if instead else ""
            warn(f"{_TEXT[name]} failed ({error}){tail}.")
        return compiled
    raise AssertionError("the eager strategy always applies")  # pragma: no cover


def _swap_python_functions(graph_module: torch.fx.GraphModule) -> None:
    """Calls of functions whose torch decomposition is wrong call ortlab's replacement
    instead (``_decompositions.python_functions``), in place, before any lowering."""
    from ortlab.backend import _decompositions

    swaps = _decompositions.python_functions()
    changed = False
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in swaps:
            node.target = swaps[node.target]
            changed = True
    if changed:
        graph_module.recompile()


_LABEL: dict[Lowering | None, str] = {"aot_autograd": "AOTAutograd", "make_fx": "make_fx"}


def _next(
    strategy: Strategy, host: Host, gm: torch.fx.GraphModule, inputs: Sequence[Any]
) -> Lowering | None:
    later = STRATEGIES[STRATEGIES.index(strategy) + 1 :]
    return next((s.name for s in later if s.applies(host, gm, inputs)), None)


_GRAD_MODE_TARGETS = ("_set_grad_enabled", "set_grad_enabled", "enable_grad", "inference_mode")
_AUTOCAST_DEVICES = ("cpu", "cuda")


def _may_write(graph_module: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph may write a tensor in place: an in-place method or
    function (``add_``, ``Tensor.copy_``), an item assignment or augmented operator, an
    op with a mutable schema, or an ``out=`` argument. Errs towards yes."""
    for node in graph_module.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if "out" in node.kwargs or node.target in _WRITING_OPERATORS:
            return True
        if getattr(getattr(node.target, "_schema", None), "is_mutable", False):
            return True
        name = (
            node.target
            if isinstance(node.target, str)
            else getattr(node.target, "__name__", "")
        )
        if name.endswith("_") and not name.startswith("_"):
            return True
    return False


_WRITING_OPERATORS = frozenset(
    {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
     operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
     operator.ixor, operator.ilshift, operator.irshift, operator.imatmul}
)  # fmt: skip


def thin_inference_applies(
    graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> bool:
    """Whether this graph can skip AOTAutograd: it was captured with grad disabled (and
    Dynamo guards on grad mode, so it only ever runs that way), nothing inside switches grad
    mode back on, no autocast, every input is a plain tensor or number, and it writes
    nothing in place where two inputs share memory.

    Skipping AOTAutograd's runtime wrappers saves ~0.1 ms per call, which is most of the
    glue around a small model. Input mutations and input aliases, which AOTAutograd would
    handle, stay in PyTorch through the support rules.
    """
    # torch.is_autocast_enabled() without a device type is CUDA's autocast only: a
    # graph captured under torch.autocast("cpu") was traced by make_fx with autocast on,
    # so its nodes carry autocast's result dtypes (addmm of float32 inputs "returns"
    # bfloat16) and ONNX Runtime refused every such node.
    if torch.is_grad_enabled() or any(map(torch.is_autocast_enabled, _AUTOCAST_DEVICES)):
        return False
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__name__", "") in (
            _GRAD_MODE_TARGETS
        ):
            return False
        # Tensors Dynamo installs on the graph module (a compiled optimizer step's
        # parameters and state) are real tensors make_fx cannot fakify or write to; only
        # AOTAutograd lifts them into inputs ("mutating a non-functional tensor with a
        # functional tensor", "Please convert all Tensors to FakeTensors first").
        if node.op == "get_attr" and isinstance(
            operator.attrgetter(str(node.target))(graph_module), torch.Tensor
        ):
            return False
    # Arguments that share memory (f(base[:8], base[2:]) writing one, reading the other):
    # make_fx traces them as independent tensors, so a read missed the write; AOTAutograd
    # rebuilds both from one base, as eager sees them.
    if _may_write(graph_module) and _torch_private.inputs_share_memory(example_inputs):
        return False
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and type(value) not in (
            torch.Tensor,
            torch.nn.Parameter,
        ):
            fake = _torch_private.is_fake(value)
            if not fake:
                return False
    return True
