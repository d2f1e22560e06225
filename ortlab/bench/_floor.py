"""The ONNX Runtime floor: the whole model exported once and run by one bare session.

``torch.onnx.export(..., dynamo=True)`` exports the model, and its session is built by
the steps that build an inference partition's (:func:`ortlab.backend.build_model_session`:
ONNX Runtime's fused operators as option ``ort_fusions`` says, checked against PyTorch
and timed against the unfused model, threads chosen), made and run the way the backend
makes and runs a partition's (:func:`ortlab.backend.create_session`): providers from
the devices of the inputs (so CUDA inputs run on the CUDA provider, on their device),
ortlab's session options, and the zero-copy torch <-> OrtValue hand-off. What ortlab
adds on top of ONNX Runtime is then the ratio of the two rows: Dynamo, the partitions'
glue, eager ops — not a difference of providers, of copies or of fused operators.

:func:`dynamo_entry` is the other reference point: the model under ``torch.compile`` as
:func:`ortlab.compile` compiles it, with a backend that runs nothing. Called right after
the floor (the ``"ort+dynamo"`` row of a benchmark) it is the least a ``torch.compile``
backend running the floor's session could cost.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

import ortlab.backend
from ortlab import _harness, errors
from ortlab.backend import _torch_private

if TYPE_CHECKING:
    pass


class _AsModule(torch.nn.Module):
    """Lets ``torch.onnx.export`` take a plain function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _export(module: torch.nn.Module, args: tuple[Any, ...]) -> Any:
    """The exported ``onnx.ModelProto``, with the exporter's progress, its warnings about
    optional packages (torchvision) and its optimizer's notes on constants it leaves
    unfolded ("Evaluation failed: ...") kept out of the benchmark's output."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript.optimizer")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, args, dynamo=True, verbose=False)
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
    if program is None:  # pragma: no cover - dynamo=True always returns a program
        raise errors.ExportError("torch.onnx.export returned no ONNXProgram")
    return program.model_proto


class OrtFloor:
    """The floor's callable: built on construction (export + session), so that the first
    call time of the ``"ort"`` row holds export, session creation and the first run, like
    the compiled backends' first call.

    Attributes:
        export_seconds: ``torch.onnx.export`` of the whole model, and its fusions.
        session_seconds: Creating its session (and choosing its threads).
        fusions: ONNX Runtime fusions applied to the model, by name.
        fusion_note: How the fused and unfused models compared (the faster runs), or
            why no fusions were applied where they were tried (or why the fused model
            was given up).
        model: The ONNX model the floor runs.

    Raises:
        ExportError: the model does not export, or its inputs are not the call's.
        SessionError: ONNX Runtime refused the model.
    """

    def __init__(
        self,
        target: Any,
        args: tuple[Any, ...],
        *,
        options: ortlab.backend.OrtBackendOptions | Mapping[str, Any] | None = None,
    ) -> None:
        module = target if isinstance(target, torch.nn.Module) else _AsModule(target)
        resolved = ortlab.backend.OrtBackendOptions.from_value(options)
        start = time.perf_counter()
        exported = _export(module, args)
        export_seconds = time.perf_counter() - start
        flat = _inputs(args)
        if len(flat) != len(exported.graph.input):
            names = ", ".join(i.name for i in exported.graph.input)
            raise errors.ExportError(
                f"the exported model has {len(exported.graph.input)} inputs ({names}) but "
                f"the call passes {len(flat)} values"
            )

        def expected() -> list[Any]:
            with torch.no_grad():
                return _inputs(module(*args))

        # Fused, checked and timed as the backend builds a partition's session, its
        # threads chosen on these inputs.
        built = ortlab.backend.build_model_session(
            exported, like=flat, options=resolved, expected=expected
        )
        self.session = built.session
        self.model = built.model
        self.fusions, self.fusion_note = built.fusions, built.fusion_note
        self.export_seconds = export_seconds + built.fuse_seconds
        self.session_seconds = built.session_seconds

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        return self.session.run(_inputs(args))


def _inputs(args: Any) -> list[Any]:
    """Values as the exported model takes (or returns) them: flattened, ``None`` left
    out."""
    return [a for a in _torch_private.tree_leaves(args) if a is not None]


def dynamo_entry(target: Any, *, dynamic: bool | None = None) -> Callable[..., Any]:
    """``target`` compiled as :func:`ortlab.compile` compiles it (floats specialized,
    ``dynamic`` as given) with a backend that runs nothing: each graph returns the
    outputs of its first run. A call then costs Dynamo's frame entry, its guards and the
    bytecode around the graphs: the least any ``torch.compile`` backend costs per call.

    A module is deep-copied (Dynamo's caches never meet another compile of it).
    """

    def first_outputs(graph_module: torch.fx.GraphModule, example_inputs: Any) -> Any:
        cache: list[Any] = []

        def run(*args: Any) -> Any:
            if not cache:
                cache.append(graph_module(*args))
            return cache[0]

        return run

    copied = copy.deepcopy(target) if isinstance(target, torch.nn.Module) else target
    return _torch_private.compile_with_dynamo(
        _harness.fresh_entry(copied, name="dynamo_entry"),
        first_outputs,
        dynamic=dynamic,
        fullgraph=False,
        specialize_floats=True,
    )


class FloorBehindDynamo:
    """The ``"ort+dynamo"`` row's callable: the floor's session, then Dynamo's entry on
    the same model (:func:`dynamo_entry`, called right after ONNX Runtime ran, as in a
    real compiled call, whose guards find the CPU caches full of the model's data).
    Returns the floor's outputs."""

    def __init__(self, floor: OrtFloor, entry: Callable[..., Any]) -> None:
        self.floor = floor
        self.entry = entry
        self.entry_first_seconds: float | None = None
        """The entry's first call: Dynamo's trace of the model (part of this row's first
        call)."""

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        outputs = self.floor(*args)
        if self.entry_first_seconds is None:
            start = time.perf_counter()
            self.entry(*args)
            self.entry_first_seconds = time.perf_counter() - start
        else:
            self.entry(*args)
        return outputs
