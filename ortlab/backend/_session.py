"""Execution-provider choice, session options and ``InferenceSession`` creation.

# NOTE: provider order is preferred > inferred (from input devices, then the graph's
# output devices) > default (``["CPUExecutionProvider"]``). Providers this onnxruntime
# build does not have are dropped with one warning naming each (once per backend), and
# CPU is always appended as the last resort so a session can always be made.
#
# Threads: ORT's defaults (one spinning thread per core) fight torch's OpenMP threads for
# the same cores; measured 2-3x slower on a 2-core machine. Unless the user passes
# ``ort_session_options``, sessions have spinning off and the intra-op thread count that
# ``_threads`` chooses (``torch.get_num_threads()``, or one for short runs).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ortlab import errors
from ortlab.backend import _plugins

if TYPE_CHECKING:
    import onnx
    import onnxruntime

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

_DEVICE_TYPE_TO_EP = {"cuda": CUDA, "cpu": CPU}
# Higher first when several devices are seen.
_EP_PRIORITY = {CUDA: 0, CPU: 100}

Provider = tuple[str, dict[str, Any]]


def available_providers() -> tuple[str, ...]:
    """The providers of this onnxruntime build, then the plugin providers installed
    (``_plugins``)."""
    import onnxruntime

    built_in = tuple(onnxruntime.get_available_providers())
    return built_in + tuple(n for n in _plugins.names() if n not in built_in)


def infer_providers_from_values(values: Iterable[Any]) -> tuple[str, ...]:
    """Providers suggested by the devices of tensors (or fake tensors) in ``values``."""
    seen: set[str] = set()
    for v in values:
        if isinstance(v, torch.Tensor):
            ep = _DEVICE_TYPE_TO_EP.get(v.device.type)
            if ep is not None:
                seen.add(ep)
    return tuple(sorted(seen, key=lambda ep: _EP_PRIORITY.get(ep, 50)))


def select_providers(
    *,
    preferred: Sequence[Provider] | None,
    inferred: Sequence[str],
    default: Sequence[Provider] | None,
    available: Sequence[str],
    warned: set[str],
) -> list[Provider]:
    """Orders, de-duplicates and filters providers; CPU always comes last.

    Args:
        warned: Provider names already warned about (updated in place), so that each
            missing provider is reported once.
    """
    chosen: list[Provider] = []
    names: set[str] = set()
    candidates = [
        *(preferred or ()),
        *((ep, {}) for ep in inferred),
        *(default if default is not None else ((CPU, {}),)),
    ]
    cuda = CUDA in inferred
    for name, opts in candidates:
        if name in names:
            continue
        if cuda and _plugins.is_plugin(name):
            continue  # it runs CPU tensors only: CUDA partitions go to the CUDA provider
        if name not in available:
            if name not in warned:
                warned.add(name)
                hint = _install_hint(name)
                warnings.warn(
                    f"ortlab: execution provider {name!r} {_why_missing(name)} (available: "
                    f"{', '.join(available)}); it is skipped.{' ' + hint if hint else ''}",
                    RuntimeWarning,
                    stacklevel=3,
                )
            continue
        names.add(name)
        chosen.append((name, _with_torch_precision(name, dict(opts))))
    if CPU not in names:
        chosen.append((CPU, {}))
    return chosen


def _why_missing(name: str) -> str:
    """Why provider ``name`` is not available, as a predicate."""
    why = _plugins.unusable(name) if _plugins.is_plugin(name) else ""
    return f"cannot run here: {why}" if why else "is not available in this onnxruntime build"


def _install_hint(name: str) -> str:
    """What to install for a missing provider (``""``: installed, and of no use here)."""
    if _plugins.is_plugin(name) and _plugins.unusable(name):
        return ""
    if name == _plugins.OPENVINO:
        return "Install OpenVINO's plugin provider (pip install 'ortlab[openvino]')."
    return "Install onnxruntime-gpu (pip install 'ortlab[gpu]') for CUDA."


def _with_torch_precision(name: str, opts: dict[str, Any]) -> dict[str, Any]:
    """CUDA provider options with TF32 as PyTorch has it for float32 matrix products,
    unless the caller set ``use_tf32``. ONNX Runtime's CUDA provider uses TF32 by
    default, where PyTorch does not (``torch.backends.cuda.matmul.allow_tf32``, set by
    ``torch.set_float32_matmul_precision``): a Linear(64, 128) on an H200 differed from
    PyTorch's by up to 5e-4 (22% relative). Read when the session is created."""
    if name == CUDA and "use_tf32" not in opts:
        opts["use_tf32"] = "1" if torch.backends.cuda.matmul.allow_tf32 else "0"
    return opts


def default_session_options(threads: int | None = None) -> onnxruntime.SessionOptions:
    """Session options that share the cores politely with PyTorch (see module NOTE):
    ``threads`` intra-op threads (``None``: ``torch.get_num_threads()``), no spinning."""
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads or max(1, torch.get_num_threads())
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    return so


def trial_session_options(threads: int | None = None) -> onnxruntime.SessionOptions:
    """:func:`default_session_options` for sessions that may be refused on purpose (the
    search for the nodes ONNX Runtime refuses): ONNX Runtime's own error lines (the CUDA
    provider logs each refusal) would repeat, once a trial, what the search records."""
    so = default_session_options(threads)
    so.log_severity_level = 4
    return so


# NOTE: ONNX Runtime's MatMulScaleFusion (level EXTENDED, on by default) folds a
# MatMul's Mul or Div by a scalar into com.microsoft FusedMatMul's ``alpha``, a float32
# attribute (``1/c`` for a Div). In a float64 model that rounds the scale to float32:
# ``(a @ b) / 3`` was off by 3e-8 relative, float64 attention by 4e-7 (1e-16 without it).
# Models that compute in float64 are made without it.
_FLOAT64_INEXACT = ("MatMulScaleFusion",)


def computes_in_float64(model: onnx.ModelProto) -> bool:
    """The model has a float64 input, output, intermediate value, initializer or cast."""
    import onnx

    double = onnx.TensorProto.DOUBLE
    graph = model.graph
    values = (*graph.input, *graph.output, *graph.value_info)
    return (
        any(v.type.tensor_type.elem_type == double for v in values)
        or any(t.data_type == double for t in graph.initializer)
        or any(
            a.name == "to" and a.i == double
            for n in graph.node
            if n.op_type == "Cast"
            for a in n.attribute
        )
    )


def inexact_optimizers(model: onnx.ModelProto) -> tuple[str, ...]:
    """ONNX Runtime optimizers this model must be made without (see the NOTE above):
    those that round float64 to float32, when it :func:`computes_in_float64`."""
    return _FLOAT64_INEXACT if computes_in_float64(model) else ()


def create_session(
    model_bytes: bytes,
    providers: Sequence[Provider],
    session_options: onnxruntime.SessionOptions | None,
    threads: int | None = None,
    *,
    disabled_optimizers: Sequence[str] = (),
) -> onnxruntime.InferenceSession:
    """Creates the session, turning ORT's refusal into a :class:`SessionError`.

    Args:
        session_options: The user's options, used as given; ``None``: ortlab's defaults
            with ``threads`` intra-op threads (``None``: ``torch.get_num_threads()``).
        disabled_optimizers: ONNX Runtime optimizers to leave out
            (:func:`inexact_optimizers`).
    """
    import onnxruntime

    plugins = [(name, opts) for name, opts in providers if _plugins.is_plugin(name)]
    if plugins:
        return _plugin_session(
            model_bytes, providers, plugins, session_options, threads, disabled_optimizers
        )
    try:
        return onnxruntime.InferenceSession(
            model_bytes,
            sess_options=session_options or default_session_options(threads),
            providers=[name for name, _ in providers],
            provider_options=[opts for _, opts in providers],
            disabled_optimizers=list(disabled_optimizers) or None,
        )
    except Exception as e:
        raise errors.SessionError(
            f"onnxruntime refused the model ({errors.describe(e)})"
        ) from e


def _plugin_session(
    model_bytes: bytes,
    providers: Sequence[Provider],
    plugins: list[Provider],
    session_options: onnxruntime.SessionOptions | None,
    threads: int | None,
    disabled_optimizers: Sequence[str],
) -> onnxruntime.InferenceSession:
    """A session on plugin providers (see ``_plugins``); ONNX Runtime's CPU provider runs
    what they do not take. The providers go on options of the session's own (ortlab's
    defaults with the settings of ``session_options`` that can be read: the listed
    attributes, not config entries): ``add_provider_for_devices`` changes the options it
    is called on, and a second session on the same options is refused."""
    import onnxruntime

    others = [name for name, _ in providers if name != CPU and not _plugins.is_plugin(name)]
    if others:
        raise errors.SessionError(
            f"plugin providers ({', '.join(n for n, _ in plugins)}) cannot share a session "
            f"with {', '.join(others)}: name one or the other"
        )
    count = threads or max(1, torch.get_num_threads())
    options = default_session_options(count)
    if session_options is not None:
        for name in _DESCRIBED:
            setattr(options, name, getattr(session_options, name))
        count = options.intra_op_num_threads or count
    _plugins.add_providers(options, plugins, count)
    try:
        return onnxruntime.InferenceSession(
            model_bytes,
            sess_options=options,
            disabled_optimizers=list(disabled_optimizers) or None,
        )
    except Exception as e:
        raise errors.SessionError(
            f"onnxruntime refused the model on {plugins[0][0]} ({errors.describe(e)})"
        ) from e


@functools.cache
def _probe_model() -> bytes:
    """A one-node model (``Relu``) to try session options on."""
    import onnx
    from onnx import helper

    value = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "probe", [value], [out]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10
    )
    return model.SerializeToString()


def probe_session_options(options: onnxruntime.SessionOptions) -> None:
    """Creates a session of a one-node model with ``options`` (raises what ONNX Runtime
    raises for them)."""
    import onnxruntime

    onnxruntime.InferenceSession(_probe_model(), sess_options=options, providers=[CPU])


_DESCRIBED = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "graph_optimization_level",
    "execution_mode",
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "optimized_model_filepath",
    "enable_profiling",
    "profile_file_prefix",
    "log_severity_level",
)


def describe_session_options(options: onnxruntime.SessionOptions) -> str:
    """The settable attributes of ``SessionOptions`` with their values (config entries
    added with ``add_session_config_entry`` cannot be listed)."""
    return ", ".join(f"{name}={getattr(options, name, None)!r}" for name in _DESCRIBED)
