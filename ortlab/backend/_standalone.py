"""Sessions outside a compiled graph: how lab code makes and runs an ONNX Runtime session.

The numerics' debug models (a partition's model with intermediates as extra outputs) and
the benchmark's bare-ORT floor (a whole model exported once) run in ONNX Runtime without
a compiled graph around them. They get their sessions here, built only on the backend's
own pieces, so that they choose providers, set session options and hand tensors over
exactly as a partition does:

- providers: :func:`_session.select_providers` (preferred > inferred from the devices of
  the inputs > default, CPU last), or the exact providers of a session being reproduced;
- session options: ``OrtBackendOptions.ort_session_options``, else
  :func:`_session.default_session_options`;
- runs: :class:`_runtime.OrtRunner` (torch tensors in and out, no numpy copies; outputs
  on the device of the inputs when the session runs there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import onnx
import torch

from ortlab import errors
from ortlab.backend import _options, _runtime, _session, _threads

if TYPE_CHECKING:
    import onnxruntime

# ONNX Runtime's names of the element types the runner hands over (``NodeArg.type``).
_ORT_TYPES = {
    "tensor(float16)": onnx.TensorProto.FLOAT16,
    "tensor(float)": onnx.TensorProto.FLOAT,
    "tensor(double)": onnx.TensorProto.DOUBLE,
    "tensor(int8)": onnx.TensorProto.INT8,
    "tensor(int16)": onnx.TensorProto.INT16,
    "tensor(int32)": onnx.TensorProto.INT32,
    "tensor(int64)": onnx.TensorProto.INT64,
    "tensor(uint8)": onnx.TensorProto.UINT8,
    "tensor(bool)": onnx.TensorProto.BOOL,
}


class StandaloneSession:
    """One ONNX Runtime session on a whole model, run on torch tensors without copies.

    Made by :func:`create_session`; its inputs must keep the dtypes, ranks and devices of
    the values it was created ``like``.
    """

    def __init__(
        self,
        session: onnxruntime.InferenceSession,
        runner: _runtime.OrtRunner,
        threads: _threads.ThreadChoice,
    ) -> None:
        self.session = session
        """The ``onnxruntime.InferenceSession``."""
        self.threads = threads
        """Its intra-op thread count and how it was chosen."""
        self._runner = runner

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._runner.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._runner.output_names

    @property
    def providers(self) -> tuple[str, ...]:
        """The execution providers the session uses, in priority order."""
        return tuple(self.session.get_providers())

    def run(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        """Runs the model on ``inputs`` (one per model input, in order: tensors or Python
        numbers); returns its outputs in order.

        Raises:
            SessionError: the inputs do not match what the session was created for, or
                ONNX Runtime failed.
        """
        if len(inputs) != len(self.input_names) or not self._runner.matches(inputs):
            raise errors.SessionError(
                f"the inputs ({_describe(inputs)}) do not match the session's "
                f"({', '.join(self.input_names)}: {_describe_specs(self._runner)}); "
                "create a session like these inputs."
            )
        try:
            return self._runner.run(inputs)
        except Exception as e:
            raise errors.SessionError(
                f"onnxruntime failed to run the model ({errors.describe(e)})"
            ) from e

    __call__ = run

    def __repr__(self) -> str:
        return (
            f"StandaloneSession(inputs={list(self.input_names)}, "
            f"outputs={list(self.output_names)}, providers={list(self.providers)})"
        )


def create_session(
    model: onnx.ModelProto,
    *,
    like: Sequence[Any],
    options: _options.OrtBackendOptions | Mapping[str, Any] | None = None,
    providers: Sequence[str] | None = None,
    choose_threads: bool = False,
) -> StandaloneSession:
    """Creates a session on ``model`` for inputs like ``like``, as the backend would.

    Args:
        model: The ONNX model; its graph inputs are fed in order.
        like: Example values for the model's inputs (tensors or Python numbers): their
            devices choose providers (unless ``providers`` is given) and later runs must
            match their dtypes, ranks and devices.
        options: Backend options: preferred / default providers, whether to infer them
            from devices, and the session options.
        providers: Exact provider names, e.g. a ``SessionRecord.providers`` whose session
            is being reproduced; provider options come from ``options`` when it names
            the same provider.
        choose_threads: With ``intra_op_threads="auto"``, time the session on ``like``
            (real inputs then) against a one-thread twin and keep the faster, as the
            backend does for its partitions (``StandaloneSession.threads`` tells).

    Raises:
        SessionError: ONNX Runtime refused the model, or an output has a dtype the
            zero-copy hand-off does not support.
    """
    resolved = _options.OrtBackendOptions.from_value(options)
    chosen = _providers(resolved, like, providers)
    model_bytes = model.SerializeToString()

    def make_runner(threads: int | None) -> _runtime.OrtRunner:
        session = _session.create_session(
            model_bytes, chosen, resolved.ort_session_options, threads
        )
        typed = _with_output_types(model, session)
        device = _output_device(like, session.get_providers()[0])
        try:
            return _runtime.OrtRunner(
                session,
                typed,
                input_fx_values=tuple(like),
                output_fx_values=tuple(_output_like(vi, device) for vi in typed.graph.output),
                args=tuple(like),
                frozen={},
                preallocate_output=False,
            )
        except (TypeError, ValueError) as e:
            raise errors.SessionError(f"cannot run this model on torch tensors: {e}") from e

    runner, choice = _threads.choose(
        resolved,
        chosen[0][0],
        make_runner,
        run=lambda r: r.run(like),
        probe_threads=choose_threads,
    )
    return StandaloneSession(runner.session, runner, choice)


def _providers(
    options: _options.OrtBackendOptions, like: Sequence[Any], exact: Sequence[str] | None
) -> list[_session.Provider]:
    if exact is not None:
        # Options normalise providers to (name, options) pairs; reuse the options given
        # for a provider by name.
        given = cast(
            "tuple[_session.Provider, ...]",
            (
                *(options.default_execution_providers or ()),
                *(options.preferred_execution_providers or ()),
            ),
        )
        configured = {name: opts for name, opts in given}
        return _session.select_providers(
            preferred=[(name, configured.get(name, {})) for name in exact],
            inferred=(),
            default=(),
            available=_session.available_providers(),
            warned=set(),
        )
    inferred: tuple[str, ...] = ()
    if options.infer_execution_providers:
        inferred = _session.infer_providers_from_values(like)
    return _session.select_providers(
        preferred=options.preferred_execution_providers,  # type: ignore[arg-type]
        inferred=inferred,
        default=options.default_execution_providers,  # type: ignore[arg-type]
        available=_session.available_providers(),
        warned=set(),
    )


def _with_output_types(
    model: onnx.ModelProto, session: onnxruntime.InferenceSession
) -> onnx.ModelProto:
    """``model``, or a copy whose outputs without an element type (e.g. intermediates
    added as outputs) carry the one ONNX Runtime inferred."""
    missing = [i for i, o in enumerate(model.graph.output) if not o.type.tensor_type.elem_type]
    if not missing:
        return model
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    inferred = session.get_outputs()
    for i in missing:
        elem = _ORT_TYPES.get(inferred[i].type)
        if elem is not None:
            typed.graph.output[i].type.tensor_type.elem_type = elem
    return typed


def _output_device(like: Sequence[Any], first_provider: str) -> torch.device:
    """Where outputs go: the inputs' CUDA device when the session runs on CUDA."""
    if first_provider == _session.CUDA:
        for value in like:
            if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                return value.device
    return torch.device("cpu")


def _output_like(value_info: onnx.ValueInfoProto, device: torch.device) -> torch.Tensor:
    """An empty tensor with an output's dtype, rank and device (what the runner checks)."""
    tensor_type = value_info.type.tensor_type
    rank = len(tensor_type.shape.dim) if tensor_type.HasField("shape") else 0
    dtype = _runtime.onnx_elem_to_torch(tensor_type.elem_type)
    return torch.empty((0,) * rank, dtype=dtype, device=device)


def _describe(values: Sequence[Any]) -> str:
    return ", ".join(
        f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)} on {v.device}"
        if isinstance(v, torch.Tensor)
        else type(v).__name__
        for v in values
    )


def _describe_specs(runner: _runtime.OrtRunner) -> str:
    return ", ".join(
        f"{str(s.dtype).removeprefix('torch.')} rank {s.rank} on {s.device}"
        for s in runner.specs
    )
