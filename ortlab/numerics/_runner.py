"""Running a call eagerly and through a fresh ortlab backend, on equal footing.

Both sides get their own clone of the inputs (and of a module, deep-copied), start from the
same RNG state (CPU and every CUDA device in use) and, with ``backward=True``, the same
random output gradient. The compiled side runs under an observer that clones what every
partition received from and returned to ONNX Runtime, for the localisation that follows.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ortlab import _harness
from ortlab.backend import _torch_private

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend, PartitionRecord, RunEvent, SessionRecord


@dataclasses.dataclass
class Capture:
    """A clone of one RunEvent: what ORT received and returned, frozen at that moment."""

    partition: PartitionRecord
    session: SessionRecord
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]


def clone_value(value: Any) -> Any:
    """A detached copy of a tensor (anything else as it is)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return value


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
        out = value.detach().clone()
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


@dataclasses.dataclass
class Side:
    """What one side returned: named outputs, named gradients, wall time."""

    outputs: list[tuple[str, Any]]
    grads: list[tuple[str, torch.Tensor | None]]
    seconds: float


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
    if backward:
        out = fn(*inputs)
    else:
        with torch.no_grad():
            out = fn(*inputs)
    flat = _harness.named_leaves(out)
    grads: list[tuple[str, torch.Tensor | None]] = []
    if backward:
        targets = _grad_targets(module, inputs)
        cots = cotangents if cotangents is not None else _cotangents(flat)
        pairs = [(v, c) for (_, v), c in zip(flat, cots) if c is not None and v.requires_grad]
        if targets and pairs:
            got = torch.autograd.grad(
                [v for v, _ in pairs],
                [t for _, t in targets],
                [c for _, c in pairs],
                allow_unused=True,
            )
            grads = [(f"grad[{n}]", g) for (n, _), g in zip(targets, got)]
        cotangents = cots
    seconds = time.perf_counter() - start
    detached = [(n, v.detach() if isinstance(v, torch.Tensor) else v) for n, v in flat]
    return Side(detached, grads, seconds), cotangents or []


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
) -> Runs:
    """Runs ``fn`` eagerly and compiled with ``backend``, from one RNG state.

    The caller's module, inputs and RNG state are left untouched. Warnings about ortlab
    raised by the compiled run become notes; others are re-issued.
    """
    target = _harness.unwrap_compiled(fn)
    module = target if isinstance(target, torch.nn.Module) else None
    notes: list[str] = []
    # Each side's own copy of a module, whose parameters its gradients are taken for.
    eager_module = copy.deepcopy(module) if module is not None else None
    compiled_module = copy.deepcopy(module) if module is not None else None
    eager_target = eager_module if eager_module is not None else target
    compiled_target = compiled_module if compiled_module is not None else target
    if module is None and backward:
        notes.append("a plain function is not copied: gradients of inputs only")
    recorder = _Recorder()
    remove = backend.add_observer(recorder)
    entry = _harness.fresh_entry(compiled_target, name="ortlab_diff_call")
    compiled = torch.compile(entry, backend=backend, dynamic=dynamic)
    devices = cuda_devices(args)
    with torch.random.fork_rng(devices=devices):
        rng = RngState.capture(devices)
        side = functools.partial(_run_side, args=args, backward=backward, rng_state=rng)
        eager_side, cots = side(eager_target, eager_module, cotangents=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                compiled_side, _ = side(compiled, compiled_module, cotangents=cots)
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
        _replay(compiled, args, backward=backward, cotangents=cots),
        _replay(eager_target, args, backward=backward, cotangents=cots),
    )


def _replay(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    backward: bool,
    cotangents: Sequence[torch.Tensor | None],
) -> Callable[[], None]:
    """A callable running ``fn`` again on fresh clones of the inputs, with the same output
    gradient when ``backward`` (what the sweep times)."""

    def call() -> None:
        inputs = _clone_inputs(args, grad=backward)
        if not backward:
            with torch.no_grad():
                fn(*inputs)
            return
        out = [v for _, v in _harness.named_leaves(fn(*inputs))]
        pairs = [(v, c) for v, c in zip(out, cotangents) if c is not None]
        if pairs:
            torch.autograd.backward([v for v, _ in pairs], [c for _, c in pairs])

    return call
