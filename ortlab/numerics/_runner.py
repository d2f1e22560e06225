"""Running a call eagerly and through ortlab, on equal footing.

Both sides get their own clone of the inputs, start from the same RNG state (CPU and every
CUDA device in use) and, with ``backward=True``, run with grad enabled and the same random
output gradient. The compiled side runs under an observer that clones what every partition
received from and returned to ONNX Runtime, for the localisation that follows.

Two ways in: :func:`run_both` compiles the call itself with a fresh backend (each side
then runs its own deep copy of a module), :func:`run_compiled` takes a call compiled
already (its side runs the module it was compiled on; the eager side a deep copy of it).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ortlab import _harness
from ortlab.backend import _torch_private, compile_with

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend, PartitionRecord, RunEvent, SessionRecord


class Progress(Protocol):
    """What a run reports its steps to (the lab's status line, ``views.Status``)."""

    def step(self, name: str) -> None:
        """Starts the step ``name`` (ending the one before)."""

    def watch(self, backend: Any, *, ran: str) -> contextlib.AbstractContextManager[None]:
        """While active, the step follows ``backend``'s compile; ``ran`` says what the
        step does once every partition has run."""


class _Quiet:
    """The progress of a run nobody watches."""

    def step(self, name: str) -> None:
        pass

    def watch(self, backend: Any, *, ran: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


EAGER_STEP = "eager run"
COMPILED_STEP = "compile and first call"


@dataclasses.dataclass
class Capture:
    """A clone of one RunEvent: what ORT received and returned, frozen at that moment."""

    partition: PartitionRecord
    session: SessionRecord
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]


def _storage_elements(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().nbytes() // tensor.element_size()


def owns_its_storage(tensor: torch.Tensor) -> bool:
    """Every element of the tensor's storage is one of its elements, once: a plain copy
    (which keeps dense strides) is then the same memory."""
    if tensor.storage_offset() != 0 or _storage_elements(tensor) != tensor.numel():
        return False
    step = 1  # dense: the strides, sorted, are the running products of the sizes
    for stride, size in sorted((st, sz) for st, sz in zip(tensor.stride(), tensor.size())):
        if size == 1:
            continue
        if stride != step:
            return False
        step *= size
    return True


def clone_value(value: Any, dtype: torch.dtype | None = None) -> Any:
    """A detached copy of a tensor (anything else as it is), optionally in ``dtype``.

    The copy has the tensor's memory layout, not just its values: a view (a transpose, a
    slice, an expand) is copied with its sizes, strides and storage offset over a copy of
    its whole storage. ``as_strided`` reads storage, so a partition run eagerly on a
    contiguous copy of a view it received computes something else than the real graph.
    """
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach()
    target = value.dtype if dtype is None else dtype
    try:
        if owns_its_storage(value):
            return value.to(dtype=target, copy=True)  # keeps dense strides
        count = _storage_elements(value)
        storage = torch.empty(0, dtype=value.dtype, device=value.device)
        storage.set_(value.untyped_storage(), 0, (count,), (1,))
        copied = storage.to(dtype=target, copy=True)
        return copied.as_strided(value.size(), value.stride(), value.storage_offset())
    except (RuntimeError, NotImplementedError):  # no plain storage: sparse, nested ...
        return value.to(dtype=target, copy=True)


def laid_out_like(value: Any, like: Any) -> Any:
    """``value``'s elements in the memory layout of ``like`` (a value of the same shape):
    its sizes, strides and storage offset, over a copy of its storage, so that the elements
    a view does not show keep ``like``'s values. ``value`` itself when either is not a
    tensor, the shapes differ, or ``like`` owns its storage with ``value``'s strides."""
    if not isinstance(value, torch.Tensor) or not isinstance(like, torch.Tensor):
        return value
    if value.shape != like.shape or like.layout != torch.strided:
        return value
    if owns_its_storage(like) and like.stride() == value.stride():
        return value
    laid = clone_value(like, value.dtype)
    # An expanded dimension (stride 0) is written through one of its positions.
    index = tuple(slice(None) if stride else slice(0, 1) for stride in laid.stride())
    try:
        laid[index].copy_(value[index])
    except RuntimeError:  # another overlap: the values alone are what is known
        return value
    return laid


class _Recorder:
    """Observer that keeps clones of every partition run (tensors may be reused later)."""

    def __init__(self) -> None:
        self.captures: list[Capture] = []

    def __call__(self, event: RunEvent) -> None:
        self.captures.append(
            Capture(
                event.partition,
                event.session,
                tuple(clone_value(v) for v in event.inputs),
                tuple(clone_value(v) for v in event.outputs),
            )
        )


def _clone_inputs(args: Sequence[Any], *, grad: bool) -> list[Any]:
    def clone(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        out = clone_value(value)  # a view stays a view: the call sees what it was given
        wants = value.requires_grad or (grad and (out.is_floating_point() or out.is_complex()))
        return out.requires_grad_(wants)

    return [_torch_private.tree_map(clone, a) for a in args]


def _grad_targets(
    module: torch.nn.Module | None, inputs: Sequence[Any]
) -> list[tuple[str, torch.Tensor]]:
    targets: list[tuple[str, torch.Tensor]] = []
    if module is not None:
        targets += [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    for name, leaf in _harness.named_leaves(list(inputs), root="input"):
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            targets.append((name, leaf))
    return targets


def _cotangents(outputs: Sequence[tuple[str, Any]]) -> list[torch.Tensor | None]:
    """Deterministic random output gradients (ones can hide errors that cancel)."""
    gen = torch.Generator().manual_seed(0)
    cots: list[torch.Tensor | None] = []
    for _, value in outputs:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            cot = torch.randn(value.shape, generator=gen, dtype=torch.float64)
            cots.append(cot.to(dtype=value.dtype, device=value.device))
        else:
            cots.append(None)
    return cots


@dataclasses.dataclass(frozen=True)
class RngState:
    """The CPU generator's state, and the CUDA generators' of the devices in use."""

    cpu: torch.Tensor
    cuda: tuple[tuple[int, torch.Tensor], ...]

    @classmethod
    def capture(cls, devices: Sequence[int]) -> RngState:
        cuda = tuple((d, torch.cuda.get_rng_state(d)) for d in devices)
        return cls(torch.get_rng_state(), cuda)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for device, state in self.cuda:
            torch.cuda.set_rng_state(state, device)


def cuda_devices(args: Sequence[Any]) -> list[int]:
    """Indices of the CUDA devices the arguments' tensors live on."""
    leaves = _torch_private.tree_leaves(list(args))
    return sorted(
        {
            a.device.index or 0
            for a in leaves
            if isinstance(a, torch.Tensor) and a.device.type == "cuda"
        }
    )


def _gradients(
    module: torch.nn.Module | None,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    cotangents: Sequence[torch.Tensor | None],
) -> list[tuple[str, torch.Tensor | None]]:
    """``grad[name]`` of ``module``'s parameters and of the inputs that require grad, for
    the output gradients ``cotangents`` (``torch.autograd.grad``: nothing accumulates in
    ``.grad``, so the caller's module is left as it was)."""
    targets = _grad_targets(module, inputs)
    pairs = [
        (v, c)
        for v, c in zip(outputs, cotangents)
        if c is not None and isinstance(v, torch.Tensor) and v.requires_grad
    ]
    if not targets or not pairs:
        return []
    got = torch.autograd.grad(
        [v for v, _ in pairs],
        [t for _, t in targets],
        [c for _, c in pairs],
        allow_unused=True,
    )
    return [(f"grad[{n}]", g) for (n, _), g in zip(targets, got)]


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


@dataclasses.dataclass
class Side:
    """What one side returned: named outputs, named gradients, wall time."""

    outputs: list[tuple[str, Any]]
    grads: list[tuple[str, torch.Tensor | None]]
    seconds: float
    value: Any = None
    """The call's return value as it came (tensors detached)."""


def _run_side(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: Sequence[Any],
    *,
    backward: bool,
    rng_state: RngState,
    cotangents: list[torch.Tensor | None] | None,
) -> tuple[Side, list[torch.Tensor | None]]:
    inputs = _clone_inputs(args, grad=backward)
    rng_state.restore()
    start = time.perf_counter()
    # Grad on for a backward (even inside the caller's no_grad), off otherwise.
    with torch.set_grad_enabled(backward):
        out = fn(*inputs)
    flat = _harness.named_leaves(out)
    grads: list[tuple[str, torch.Tensor | None]] = []
    if backward:
        cots = cotangents if cotangents is not None else _cotangents(flat)
        grads = _gradients(module, inputs, [v for _, v in flat], cots)
        cotangents = cots
    seconds = time.perf_counter() - start
    detached = [(n, _detach(v)) for n, v in flat]
    value = _torch_private.tree_map(_detach, out)
    return Side(detached, grads, seconds, value), cotangents or []


@dataclasses.dataclass
class Runs:
    """Both sides of one comparison, and what the compiled side left behind."""

    eager: Side
    compiled: Side
    backend: OrtBackend
    captures: list[Capture]
    """Every partition run of the compiled side, in order."""
    rng: RngState
    """The RNG state both sides started from (the all-eager reference reuses it)."""
    devices: list[int]
    notes: list[str]
    rerun: Callable[[], None]
    """Runs the compiled side again (same inputs and output gradient): what is timed."""
    eager_rerun: Callable[[], None]
    """Runs the eager side again, likewise (the sweep's eager reference)."""


def run_both(
    fn: Any,
    args: Sequence[Any],
    backend: OrtBackend,
    *,
    backward: bool,
    dynamic: bool | None,
    progress: Progress | None = None,
) -> Runs:
    """Runs ``fn`` eagerly and compiled with ``backend``, from one RNG state.

    Each side runs its own deep copy of a module. The caller's module, inputs and RNG state
    are left untouched. Warnings about ortlab raised by the compiled run become notes;
    others are re-issued. ``progress`` hears of each side as it starts
    (:func:`run_compiled`).
    """
    target = _harness.unwrap_compiled(fn)
    if isinstance(target, torch.nn.Module):
        # The compiled side's own copy (run_compiled copies it again for the eager side):
        # the caller's module is never run, so its state and gradients stay untouched.
        target = copy.deepcopy(target)
    entry = _harness.fresh_entry(target, name="ortlab_diff_call")
    compiled = compile_with(backend, entry, dynamic=dynamic)
    return run_compiled(compiled, target, args, backend, backward=backward, progress=progress)


def run_compiled(
    compiled: Callable[..., Any],
    original: Any,
    args: Sequence[Any],
    backend: OrtBackend,
    *,
    backward: bool,
    capture: bool = True,
    progress: Progress | None = None,
) -> Runs:
    """Runs a call compiled already with ``backend``, and its original eagerly, from one
    RNG state.

    Nothing is compiled here unless the call's guards ask for it (a first call, or inputs
    made to require grad for ``backward``): the records of the compiled side land in
    ``backend`` next to those of earlier calls.

    Args:
        compiled: The compiled call, called as ``compiled(*args)``.
        original: What ``compiled`` calls, run eagerly: a module, a function, or a
            ``functools.partial`` of either (the arguments ``compiled`` binds too). A
            module is deep-copied for the eager side before either side runs; the compiled
            side runs the module itself (the one it was compiled on), and its gradients
            are those of that module's parameters.
        args: Positional inputs, cloned for each side.
        backend: The :class:`~ortlab.OrtBackend` ``compiled`` runs on.
        backward: Also take gradients (grad enabled, a fixed random output gradient);
            otherwise both sides run under ``torch.no_grad()``.
        capture: Record the compiled side's partition runs (for the localisation).
        progress: Told of each side as it starts (:data:`EAGER_STEP`, then
            :data:`COMPILED_STEP`, which watches ``backend``'s compile).
    """
    notes: list[str] = []
    bound_args: tuple[Any, ...] = ()
    bound_kwargs: dict[str, Any] = {}
    if isinstance(original, functools.partial):
        original, bound_args, bound_kwargs = original.func, original.args, original.keywords
    target = _harness.unwrap_compiled(original)
    module = target if isinstance(target, torch.nn.Module) else None
    eager_module = module
    if module is not None:
        try:
            eager_module = copy.deepcopy(module)
        except Exception as e:
            notes.append(
                f"the module could not be copied ({type(e).__name__}: {e}); the eager side "
                "ran on the module itself, before the compiled side"
            )
    eager_target = eager_module if eager_module is not None else target
    if bound_args or bound_kwargs:
        eager_target = functools.partial(eager_target, *bound_args, **bound_kwargs)
    return _run(
        (compiled, module),
        (eager_target, eager_module),
        args,
        backend,
        backward=backward,
        capture=capture,
        notes=notes,
        progress=progress or _Quiet(),
    )


def _run(
    compiled: tuple[Callable[..., Any], torch.nn.Module | None],
    eager: tuple[Callable[..., Any], torch.nn.Module | None],
    args: Sequence[Any],
    backend: OrtBackend,
    *,
    backward: bool,
    capture: bool,
    notes: list[str],
    progress: Progress,
) -> Runs:
    """Both sides: ``(callable, the module whose parameters get gradients)`` each, eager
    first (its output gradient is reused by the compiled side)."""
    compiled_fn, compiled_module = compiled
    eager_fn, eager_module = eager
    if compiled_module is None and backward:
        notes.append(
            "a plain function is not copied: gradients of inputs only (the parameters of "
            "a module it calls are not compared; to pass keyword inputs to a module, diff "
            "functools.partial(model, labels=...))"
        )
    recorder = _Recorder()
    remove = backend.add_observer(recorder) if capture else _no_observer
    devices = cuda_devices(args)
    with torch.random.fork_rng(devices=devices):
        rng = RngState.capture(devices)
        side = functools.partial(_run_side, args=args, backward=backward, rng_state=rng)
        progress.step(EAGER_STEP)
        eager_side, cots = side(eager_fn, eager_module, cotangents=None)
        progress.step(COMPILED_STEP)
        watch = progress.watch(backend, ran="the rest of the compiled call")
        with warnings.catch_warnings(record=True) as caught, watch:
            warnings.simplefilter("always")
            try:
                compiled_side, _ = side(compiled_fn, compiled_module, cotangents=cots)
            finally:
                remove()
    for w in caught:
        if "ortlab" in str(w.message):
            notes.append(str(w.message))  # shown with the report
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    return Runs(
        eager_side,
        compiled_side,
        backend,
        recorder.captures,
        rng,
        devices,
        list(dict.fromkeys(notes)),
        _replay(compiled_fn, compiled_module, args, backward=backward, cotangents=cots),
        _replay(eager_fn, eager_module, args, backward=backward, cotangents=cots),
    )


def _no_observer() -> None:
    """What removing an observer that was never added does."""


def _replay(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: Sequence[Any],
    *,
    backward: bool,
    cotangents: Sequence[torch.Tensor | None],
) -> Callable[[], None]:
    """A callable running ``fn`` again, what the sweep and ``%ortcompile --bench`` time:
    in the grad mode of the first run and, when ``backward``, taking the same gradients for
    the same output gradient. The inputs are cloned at its first call and reused, so that
    timing measures the call, not the copies."""
    cloned: list[list[Any]] = []

    def call() -> None:
        if not cloned:
            cloned.append(_clone_inputs(args, grad=backward))
        inputs = cloned[0]
        with torch.set_grad_enabled(backward):
            out = fn(*inputs)
        if backward:
            leaves = [v for _, v in _harness.named_leaves(out)]
            _gradients(module, inputs, leaves, cotangents)

    return call
