"""The backend's result under torch's ahead-of-time capture: one that saves itself.

# NOTE: ``torch.compile(f, fullgraph=True).aot_compile(...)`` (and :func:`ortlab.precompile`,
# built on it) requires the backend's result to serialize itself, so that
# ``save_compiled_function`` can write it and ``torch.compiler.load_compiled_function``
# read it back in another process. ortlab's compiled graph holds ONNX Runtime sessions
# and cannot be saved; what is saved instead is Dynamo's graph (its code and fake values;
# the weights are inputs) and the options, and the graph read back is compiled again at
# its first call, with each partition's ONNX model from the compile cache. The backend
# notices the capture (``_torch_private.under_aot_capture``) and answers with
# :func:`capture`.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ortlab import errors
from ortlab.backend import _torch_private


class DynamoGraph(_torch_private.serializable_callable_base()):  # type: ignore[misc]
    """ortlab's compiled graph and the Dynamo graph it was compiled from, which is what
    is saved. Read back, it has only the latter, and compiles it at its first call with
    the backend it is bound to (:meth:`bind`), else with ``backend="ortlab"`` and the
    options it was saved with."""

    def __init__(
        self,
        graph_bytes: bytes | None,
        compiled: Callable[..., Any] | None = None,
        *,
        options: Any = None,
        unsaved_reason: str | None = None,
    ) -> None:
        self.graph_bytes = graph_bytes
        self.options = options
        self.unsaved_reason = unsaved_reason
        self._compiled = compiled
        self._backend: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    @classmethod
    def serialize_compile_artifacts(cls, fn: DynamoGraph) -> bytes:
        if fn.graph_bytes is None:
            raise errors.CompileError(f"Dynamo's graph cannot be saved: {fn.unsaved_reason}")
        try:
            options = pickle.dumps(fn.options)
        except Exception as e:
            raise errors.CompileError(
                f"the options cannot be saved ({errors.describe(e)}): callables such as "
                "pre_ort_model_transforms must be importable functions"
            ) from e
        return pickle.dumps({"graph": fn.graph_bytes, "options": options})

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> DynamoGraph:
        saved = pickle.loads(data)
        return cls(saved["graph"], options=pickle.loads(saved["options"]))

    def bind(self, backend: Callable[..., Any]) -> None:
        """The backend that compiles the graph read back (its records show it)."""
        self._backend = backend

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compile(args)
        return compiled(*args)

    def _compile(self, args: Sequence[Any]) -> Callable[..., Any]:
        with self._lock:
            if self._compiled is None:
                if self.graph_bytes is None:
                    raise errors.CompileError("a saved graph without its graph")
                backend = self._backend
                if backend is None:
                    registered = _torch_private.registered_backend("ortlab")
                    options = self.options

                    def backend(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
                        return registered(gm, inputs, options=options)

                graph_module, mode = _torch_private.load_dynamo_graph(self.graph_bytes)
                # The sizes are static (the capture's): fakes of this call's tensors are
                # the example inputs Dynamo handed the backend when it traced.
                fakes = _torch_private.fake_static_inputs(mode, args)
                with _torch_private.tracing_under(mode):
                    self._compiled = backend(graph_module, fakes)
            return self._compiled


def capture(
    backend: Callable[..., Any],
    graph_module: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: Any,
) -> DynamoGraph:
    """``backend``'s result for a graph torch's ahead-of-time capture hands it: compiled
    as usual (outside the capture's AOTAutograd settings, which expect inductor's code),
    with Dynamo's graph as bytes, taken before the backend lowers it."""
    graph_bytes, reason = None, None
    try:
        graph_bytes = _torch_private.dump_dynamo_graph(graph_module)
    except Exception as e:  # saved only if it can be; it runs either way
        reason = errors.describe(e)
    with _torch_private.outside_aot_capture():
        compiled = backend(graph_module, example_inputs)
    result = DynamoGraph(graph_bytes, compiled, options=options, unsaved_reason=reason)
    result.bind(backend)
    return result
