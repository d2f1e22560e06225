"""Every private PyTorch API ortlab uses, in one place.

# NOTE: ortlab relies on internals of the PyTorch ONNX exporter and of AOTAutograd that
# carry no stability promise. They are all imported here and nowhere else, so that a
# PyTorch upgrade breaks one module, and tests/test_torch_private.py pins their behaviour:
#
#   torch.onnx._internal.exporter._registration.ONNXRegistry   op registry (torchlib)
#   torch.onnx._internal.exporter._core._translate_fx_graph     FX -> onnx_ir, no re-trace
#   torch.onnx._internal.exporter._core._set_shape_type         shape/dtype of an onnx_ir value
#   torch.onnx._internal.exporter._ir_passes.add_opset_imports  opset imports of a new model
#   torch.onnx._internal.exporter._constants.ONNX_IR_VERSION
#   torch.onnx._internal.exporter._decomp                       ONNX-friendly decompositions
#   torch.onnx._internal.fx.passes.InsertTypePromotion          explicit dtype promotion
#   torch.onnx._internal.fx.passes.type_promotion.TypePromotionTable  which ops promote
#   torch._dynamo.backends.common.aot_autograd                  AOTAutograd as a backend
#   torch._functorch.partitioners.min_cut_rematerialization_partition
#   torch._guards.detect_fake_mode / CompileContext             Dynamo's fake mode, compile id
#   torch.onnx._constants.ONNX_DEFAULT_OPSET                    torch.onnx.export's opset
#   Tensor._dynamo_static_input_type                            Dynamo's mark on module state
#
# When an import or signature check fails, ``DIRECT_TRANSLATION_ERROR`` says why and the
# exporter falls back to the public ``torch.onnx.export(..., dynamo=True)`` path.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

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
        return f"{type(e).__name__}: {e}"
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
    with quiet_exporter():  # "torchvision is not installed. Skipping torchvision::nms"
        return _registration.ONNXRegistry.from_torchlib(opset_version=opset_version)


@functools.cache
def onnx_friendly_decompositions(
    opset_version: int | None = None,
) -> dict[Any, Callable[..., Any]]:
    """Decompositions that keep ops with an ONNX translation whole (for AOTAutograd)."""
    from torch.onnx._internal.exporter import _decomp

    if opset_version is None:
        return onnx_friendly_decompositions(default_opset())
    registry = onnx_registry(opset_version)
    return _decomp.create_onnx_friendly_decomposition_table(
        set(_decomp.get_onnx_implemented_overloads(registry))
    )


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
    graph_module: torch.fx.GraphModule, *, name: str, opset_version: int | None = None
) -> ir.Model:
    """Translates an ATen-level FX graph to an ``onnx_ir.Model`` node by node.

    Shapes and dtypes come from each node's ``meta["val"]``; Dynamo's symbols become
    ``dim_param``s and SymInt placeholders become INT64 scalar inputs. As in
    ``torch.onnx.export``, torchlib's translations are written for its base opset (18)
    and the model is then converted to the target opset (the registry picks newer
    translations, such as ``Gelu``, where the target has them).
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
    with quiet_exporter():
        _core._translate_fx_graph(
            graph_module.graph,
            model,
            graph_like=model.graph,
            owned_graphs={},
            lower="at_conversion",
            registry=onnx_registry(opset_version),
        )
    _ir_passes.add_opset_imports(model)
    target = default_opset() if opset_version is None else opset_version
    if model.opset_imports.get("", target) != target:
        version_converter.convert_version(model, target, fallback=True)
    return model


def set_value_shape_type(value: ir.Value, meta_value: Any) -> None:
    """Sets dtype and (symbolic) shape of an onnx_ir value from a fake tensor / SymInt."""
    from torch.onnx._internal.exporter import _core

    _core._set_shape_type(value, meta_value, complex_to_float=True)


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


def is_higher_order_op(target: Any) -> bool:
    return isinstance(target, torch._ops.HigherOrderOperator)


def lower_to_aten(
    graph_module: torch.fx.GraphModule,
    example_inputs: Any,
    decompositions: dict[Any, Callable[..., Any]],
) -> torch.fx.GraphModule:
    """Lowers a Dynamo (torch IR) graph to ATen without autograd, under the backend's fake
    mode, so symbolic dims stay symbolic. Used when ``use_aot_autograd=False``.

    Real inputs are fakified with the symbolic context Dynamo recorded for them (as
    AOTAutograd's ``process_inputs`` does), so the ATen graph reuses Dynamo's symbols.
    """
    from torch._guards import TracingContext
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.proxy_tensor import make_fx

    fake_mode = detect_fake_mode(example_inputs)
    if fake_mode is None:
        return make_fx(graph_module, decomposition_table=decompositions)(*example_inputs)
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
        lowered = make_fx(graph_module, decomposition_table=decompositions)(*fakes)
    # make_fx keeps values nothing reads (e.g. a module's eps passed as a 0-d tensor and
    # read with .item()); they would run eagerly on every call. Mutations are impure and stay.
    lowered.graph.eliminate_dead_code()
    lowered.recompile()
    return lowered


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
    for _ in range(4):
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


def is_op_overload(target: Any) -> bool:
    """Whether an FX node's target is an ATen/prims op overload (``aten.add.Tensor``)."""
    return isinstance(target, torch._ops.OpOverload)


def dynamo_config_patch(config: dict[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """A context manager applying Dynamo settings (a zoo model's ``dynamo_config``)."""
    return torch._dynamo.config.patch(config)


def reset_dynamo() -> None:
    """Forgets every compiled frame (Dynamo's caches and recompile counters)."""
    torch._dynamo.reset()
