"""``ortlab.profile``: where the time of a compiled call goes, down to FX nodes, modules
and source lines.

# NOTE: the steps are :mod:`._measure`'s (capture, time the call and its parts together,
# profile each session in ONNX Runtime) and :mod:`._attribute`'s arithmetic. The call is
# made in the grad mode the caller is in (profile inference under ``torch.no_grad()``; a
# training call's backward is not profiled). Dynamo's entry is timed on a compile of
# the same model with a backend that runs nothing (``bench._floor.dynamo_entry``): its
# first call is a Dynamo trace (seconds on a large model), paid once, untimed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

import ortlab.backend
from ortlab import _harness, errors
from ortlab.bench import _floor
from ortlab.profiling import _attribute, _measure, _records

DEFAULT_RUNS = 10
"""Timed runs of the call and of each part (medians are taken)."""
WARMUP = 2
"""Untimed runs of the call and of the parts first."""


def profile(
    compiled: Any,
    *args: Any,
    runs: int = DEFAULT_RUNS,
    warmup: int = WARMUP,
    entry: bool = True,
    advise: bool = False,
    label: str = "",
    clock: Callable[[], float] = time.perf_counter,
    **kwargs: Any,
) -> _records.Profile:
    """Profiles one compiled call: every part of its time, attributed to FX nodes,
    modules and the user's source lines.

    The call is made as given (under ``torch.no_grad()`` for inference); each partition's
    ONNX Runtime run is split by ONNX Runtime node with its profiler, each node credited
    to the FX nodes it computes; eager nodes, ortlab's glue and Dynamo's entry are timed;
    what the parts do not explain is reported as unattributed.

    Args:
        compiled: What ``ortlab.compile`` (or ``torch.compile(..., backend="ortlab")``)
            returned; compiled on the first call if it has not run on such inputs yet.
        *args: The call's positional arguments.
        runs: Timed runs of the call and of its parts (medians are reported).
        warmup: Untimed runs first.
        entry: Time Dynamo's entry on a twin compile of the model (a Dynamo trace, paid
            once); ``False``: it stays in the unattributed rest.
        advise: Also try ``freeze_parameters`` and ``min_partition_size`` on this model
            and report the gain measured (``Profile.advice``; compiles the model again).
        label: A name for the profile (views, comparisons).
        clock: The clock every part is timed with (a fake one in tests; ONNX Runtime's
            kernel times come from its own profiler and are used as proportions).
        **kwargs: The call's keyword arguments.

    Returns:
        A :class:`~ortlab.profiling.Profile`.

    Raises:
        UnsupportedOptionError: ``compiled`` was not compiled with ortlab.
        OrtlabError: the call, or one of its parts, failed while being timed.
    """
    if runs < 1 or warmup < 0:
        raise errors.UnsupportedOptionError(
            f"profile: runs must be >= 1 and warmup >= 0; got runs={runs}, warmup={warmup}"
        )
    if isinstance(compiled, ortlab.backend.OrtBackend):
        raise errors.UnsupportedOptionError(
            "profile: pass the compiled callable (what ortlab.compile or torch.compile "
            "returned), not its OrtBackend: the profile has to make the call"
        )
    backend = ortlab.backend.backend_of(compiled)
    grad, mode_note = _grad_mode(backend)

    def call() -> Any:
        with torch.set_grad_enabled(grad):
            return compiled(*args, **kwargs)

    call()  # compiles when needed; the capture sees a steady-state call
    graph_runs = _measure.capture(backend, call)
    if not graph_runs:
        raise errors.OrtlabError(
            "profile: the call ran no graph of this backend (did it run eagerly, or "
            "was it compiled with another backend?)"
        )
    twin = _entry(compiled, args, kwargs, grad) if entry else None
    measured = _measure.measure(
        call, twin, graph_runs, backend, runs=runs, warmup=warmup, clock=clock
    )
    _measure.profile_sessions(backend, graph_runs, runs=runs)
    original = _harness.unwrap_compiled(compiled)
    model_class = type(original).__name__ if isinstance(original, torch.nn.Module) else ""
    result = _attribute.build(measured, model_class=model_class)
    result.label = label
    result.backend = backend
    if mode_note:
        result.notes.append(mode_note)
    if not entry:
        result.notes.append("Dynamo's entry was not timed (entry=False): it is unattributed")
    if advise:
        from ortlab.profiling import _advice

        result.advice = _advice.advise(
            compiled, args, kwargs, result, graph_runs, runs=runs, clock=clock
        )
    return result


def _entry(
    compiled: Any, args: tuple[Any, ...], kwargs: dict[str, Any], grad: bool
) -> Callable[[], Any] | None:
    """Dynamo's entry alone for this call (``bench._floor.dynamo_entry``), or ``None``
    when the compiled object has nothing to unwrap."""
    original = _harness.unwrap_compiled(compiled)
    if original is compiled:
        return None
    target = functools.partial(original, **kwargs) if kwargs else original
    twin = _floor.dynamo_entry(target)

    def run() -> Any:
        with torch.set_grad_enabled(grad):
            return twin(*args)

    return run


def _grad_mode(backend: Any) -> tuple[bool, str]:
    """Whether to profile with grad enabled, and a note when that is not the caller's
    mode: the mode of the graphs the model was compiled with (only inference graphs:
    no grad; only training graphs: grad), else the caller's. Profiling a model compiled
    under ``no_grad`` with grad on compiled and profiled another graph, silently."""
    current = torch.is_grad_enabled()
    kinds = {g.kind for g in backend.graphs}
    if kinds == {"inference"} and current:
        return False, (
            "profiled under torch.no_grad(), as the model was compiled (the call was made "
            "with grad enabled; call ortlab.profile under the mode to profile)"
        )
    if kinds and "inference" not in kinds and not current:
        return True, (
            "profiled with grad enabled, as the model was compiled for training (the call "
            "was made under no_grad)"
        )
    return current, ""
