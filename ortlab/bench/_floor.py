"""The ONNX Runtime floor: the whole model exported once and run by one bare session.

``torch.onnx.export(..., dynamo=True)`` exports the model; the session is made and run the
way the backend makes and runs a partition's (:func:`ortlab.backend.create_session`):
providers from the devices of the inputs (so CUDA inputs run on the CUDA provider, on
their device), ortlab's session options, and the zero-copy torch <-> OrtValue hand-off.
What ortlab adds on top of ONNX Runtime is then the ratio of the two rows: Dynamo, the
partitions' glue, eager ops — not a difference of providers or of copies.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

import ortlab.backend
from ortlab import errors
from ortlab.backend import _torch_private


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
        export_seconds: ``torch.onnx.export`` of the whole model.
        session_seconds: Creating its session (and choosing its threads).

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
        start = time.perf_counter()
        model = _export(module, args)
        self.export_seconds = time.perf_counter() - start
        flat = _inputs(args)
        if len(flat) != len(model.graph.input):
            names = ", ".join(i.name for i in model.graph.input)
            raise errors.ExportError(
                f"the exported model has {len(model.graph.input)} inputs ({names}) but the "
                f"call passes {len(flat)} values"
            )
        start = time.perf_counter()
        # Its threads are chosen as the backend chooses a partition's (on these inputs).
        self.session = ortlab.backend.create_session(
            model, like=flat, options=options, choose_threads=True
        )
        self.session_seconds = time.perf_counter() - start

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        return self.session.run(_inputs(args))


def _inputs(args: tuple[Any, ...]) -> list[Any]:
    """The call's values as the exported model takes them: flattened, ``None`` left out."""
    return [a for a in _torch_private.tree_leaves(args) if a is not None]
