"""The backends a benchmark compares, each made into a zero-argument call to time.

- ``"eager"``: plain PyTorch, the reference;
- ``"ortlab"`` / ``"ortlab-frozen"``: :func:`ortlab.compile` (``freeze_parameters=True``
  for the second);
- ``"ortlab-openvino"``: :func:`ortlab.compile` with OpenVINO's plugin provider preferred
  (``pip install 'ortlab[openvino]'``): each session runs on it or on the CPU provider,
  whichever is faster;
- ``"ort"``: the ONNX Runtime floor (:mod:`ortlab.bench._floor`);
- ``"ort+dynamo"``: the floor, then Dynamo's entry on the model with a backend that runs
  nothing (:class:`ortlab.bench._floor.FloorBehindDynamo`): the least a ``torch.compile``
  backend running the floor's session could cost;
- ``"openvino"``: a peer, OpenVINO's ``torch.compile`` backend (``pip install
  'ortlab[peers]'``) on the CPU in float32 with the run's threads (its default precision
  is bfloat16 on CPUs that have it, and its default threads all cores);
- any other name: ``torch.compile(backend=name)`` (``"inductor"``, ``"aot_eager"``...).

Every backend gets its own deep copy of a module and, when compiled, a wrapper function
with a code object of its own (:func:`ortlab._harness.fresh_entry`), so that Dynamo's
caches of one backend never meet another's.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

import ortlab.backend
from ortlab import _deps, _harness, errors
from ortlab.bench import _floor

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend

DEFAULT_BACKENDS = ("eager", "inductor", "ortlab", "ort")
"""What :func:`ortlab.bench` compares unless told otherwise."""

OPENVINO = "openvino"
"""The peer backend's name: OpenVINO's ``torch.compile`` backend, where installed."""

ORTLAB_OPENVINO = "ortlab-openvino"
"""ortlab with OpenVINO's plugin provider for ONNX Runtime preferred, where installed."""
OPENVINO_PROVIDER = "OpenVINOExecutionProvider"


def check_backends(backends: Any) -> tuple[str, ...]:
    """``backends`` as a tuple of distinct names.

    Raises:
        UnsupportedOptionError: not a sequence of names, empty, or a name repeats.
    """
    if isinstance(backends, str) or not all(isinstance(b, str) for b in backends):
        raise errors.UnsupportedOptionError(
            f"bench: backends must be a sequence of names such as {list(DEFAULT_BACKENDS)}; "
            f"got {backends!r}."
        )
    if not backends:
        raise errors.UnsupportedOptionError("bench: backends is empty; name at least one.")
    if len(set(backends)) != len(backends):
        raise errors.UnsupportedOptionError(f"bench: backends repeat a name: {backends!r}.")
    return tuple(backends)


def prepare_target(fn: Callable[..., Any], *, eval_mode: bool) -> Any:
    """A backend's own copy of a module, in eval or train mode (a function as it is)."""
    if not isinstance(fn, torch.nn.Module):
        return fn
    # A module compiled before may carry its backend as an attribute (it holds live
    # sessions, which cannot be copied); the copies share it instead.
    memo = {
        id(v): v
        for m in fn.modules()
        for v in vars(m).values()
        if isinstance(v, ortlab.backend.OrtBackend)
    }
    model = copy.deepcopy(fn, memo)
    model.train(not eval_mode)
    return model


def prepare_args(args: tuple[Any, ...], target: Any, *, training: bool) -> tuple[Any, ...]:
    """Inputs for one backend; in training mode, what gradients are taken for."""
    if not training or isinstance(target, torch.nn.Module):
        return args
    # A function has no parameters: differentiate w.r.t. its floating-point inputs.
    return tuple(
        a.detach().clone().requires_grad_(True)
        if isinstance(a, torch.Tensor) and a.is_floating_point()
        else a
        for a in args
    )


def make_call(
    backend: str,
    target: Any,
    args: tuple[Any, ...],
    *,
    training: bool,
    dynamic: bool | None,
    ortlab_options: Mapping[str, Any],
) -> tuple[Callable[..., Any], OrtBackend | None]:
    """The callable of one backend, and its :class:`~ortlab.OrtBackend` for ortlab rows.

    Raises:
        UnsupportedOptionError: ``"ort"`` with ``training=True`` (inference only).
    """
    name = f"bench_{backend.replace('-', '_').replace('+', '_')}"
    if backend == "eager":
        return target, None
    if backend in ("ortlab", "ortlab-frozen", ORTLAB_OPENVINO):
        # A benchmark's first call is a cold one: no compile cache unless asked for.
        options = {"compile_cache": False, **ortlab_options}
        if backend == "ortlab-frozen":
            options["freeze_parameters"] = True
        if backend == ORTLAB_OPENVINO:
            if OPENVINO_PROVIDER not in ortlab.backend.available_providers():
                raise errors.UnsupportedOptionError(
                    "bench: ortlab-openvino needs OpenVINO's plugin provider, which is "
                    "not installed (pip install 'ortlab[openvino]') or cannot run here "
                    "(ortlab.backend.available_providers() leaves it out)"
                )
            options["preferred_execution_providers"] = [OPENVINO_PROVIDER]
        entry = _harness.fresh_entry(target, name=name)
        compiled = ortlab.backend.compile(entry, dynamic=dynamic, **options)
        return compiled, ortlab.backend.backend_of(compiled)
    if backend in ("ort", "ort+dynamo"):
        if training:
            raise errors.UnsupportedOptionError(
                f'bench: the "{backend}" floor runs inference only; leave it out of '
                "backends when training=True."
            )
        floor = _floor.OrtFloor(target, args, options=ortlab_options)
        if backend == "ort":
            return floor, None
        entry = _floor.dynamo_entry(target, dynamic=dynamic)
        return _floor.FloorBehindDynamo(floor, entry), None
    entry = _harness.fresh_entry(target, name=name)
    if backend == OPENVINO:
        return openvino_compile(entry, dynamic=dynamic), None
    return torch.compile(entry, backend=backend, dynamic=dynamic), None


def openvino_compile(fn: Callable[..., Any], *, dynamic: bool | None) -> Callable[..., Any]:
    """``fn`` under OpenVINO's ``torch.compile`` backend, float32 on the CPU, with torch's
    intra-op threads.

    Raises:
        MissingDependencyError: OpenVINO is not installed (the ``peers`` extra).
    """
    _deps.require("openvino.torch")  # registers the "openvino" Dynamo backend
    config = {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": str(torch.get_num_threads()),
    }
    options: dict[str, Any] = {"device": "CPU", "config": config}
    return torch.compile(fn, backend=OPENVINO, dynamic=dynamic, options=options)


def make_step(
    call: Callable[..., Any], target: Any, args: tuple[Any, ...], *, training: bool
) -> Callable[[], list[torch.Tensor]]:
    """One timed call: the outputs (inference), or outputs and gradients (training, loss =
    sum of the floating-point outputs), synchronized with the inputs' CUDA devices.

    Raises:
        UnsupportedOptionError: ``training=True`` and nothing requires grad.
    """
    sync = _synchronizer(args)
    if not training:

        def infer() -> list[torch.Tensor]:
            outputs = _harness.tensor_leaves(call(*args))
            sync()
            return outputs

        return infer
    parameters = list(target.parameters()) if isinstance(target, torch.nn.Module) else []
    grads_of = [
        *(p for p in parameters if p.requires_grad),
        *(a for a in args if isinstance(a, torch.Tensor) and a.requires_grad),
    ]
    if not grads_of:
        raise errors.UnsupportedOptionError(
            "bench(training=True): nothing requires grad — pass a module with trainable "
            "parameters or floating-point inputs."
        )

    def train() -> list[torch.Tensor]:
        for t in grads_of:
            t.grad = None
        outputs = _harness.tensor_leaves(call(*args))
        loss = sum(o.float().sum() for o in outputs if o.is_floating_point())
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise errors.UnsupportedOptionError(
                "bench(training=True): the outputs do not depend on anything that "
                "requires grad, so there is no backward to time."
            )
        loss.backward()
        if all(t.grad is None for t in grads_of):
            raise errors.OrtlabError("bench(training=True): backward produced no gradient.")
        # A parameter the loss does not reach has no grad; zeros keep positions aligned.
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in grads_of]
        sync()
        return [o.detach() for o in outputs] + [g.detach() for g in grads]

    return train


def _synchronizer(args: tuple[Any, ...]) -> Callable[[], None]:
    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        return torch.cuda.synchronize
    return lambda: None


def grad_mode(*, training: bool, no_grad: bool) -> contextlib.AbstractContextManager[Any]:
    """The grad mode calls run under: ``no_grad`` for inference unless told otherwise."""
    return contextlib.nullcontext() if training or not no_grad else torch.no_grad()
