"""``ortlab.bench``: one model on the same inputs under several backends, measured honestly.

Per backend: build it and time its first call (compile + run; for ``"ort"``, export +
session + run), then all backends that started are warmed up and timed together by the
engine (:mod:`ortlab.bench._engine`: interleaved blocks, median and p10-p90). Outputs (and
gradients, in training mode) are compared with eager's by the one comparator
(:mod:`ortlab.numerics._compare`). A backend that fails becomes a row with its error; it
never stops the others. Threads are set once for the whole run (torch's intra-op threads;
ONNX Runtime gets the same number through ortlab's session options) and recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ortlab import _deps, _harness, errors
from ortlab.bench import _backends, _engine, _floor, _machine, _result
from ortlab.numerics import _compare

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend
    from ortlab.numerics._runner import Progress

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Run:
    """What one backend produced: its first call, its outputs (and grads), its records."""

    backend: str
    first_call_s: float = math.nan
    outputs: list[torch.Tensor] | None = None
    ortlab_backend: OrtBackend | None = None
    error: str | None = None
    measurement: _engine.Measurement | None = None
    first_call_steps: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per step of the first call (:func:`first_call_steps`)."""


def bench(
    fn: Callable[..., Any],
    *args: Any,
    backends: Sequence[str] = _backends.DEFAULT_BACKENDS,
    warmup: int = 3,
    iters: int | None = None,
    min_time: float = 1.0,
    min_iters: int = 5,
    max_iters: int = 10_000,
    interleave: bool = True,
    threads: int | None = None,
    training: bool = False,
    no_grad: bool = True,
    eval: bool | None = None,
    dynamic: bool | None = None,
    ortlab_options: Mapping[str, Any] | None = None,
    progress: bool = True,
    name: str | None = None,
) -> _result.BenchResult:
    """Times ``fn(*args)`` under several backends on the same inputs.

    Backends:

    - ``"eager"``: plain PyTorch, the reference for ``ratio_to_eager`` and ``max_abs_diff``.
    - ``"inductor"``: ``torch.compile(backend="inductor")`` (its first call builds C++ and
      may take a minute on CPU).
    - ``"ortlab"``: :func:`ortlab.compile`; its row also counts graphs, partitions,
      sessions and the nodes that run in ONNX Runtime.
    - ``"ortlab-frozen"``: the same with ``freeze_parameters=True``.
    - ``"ort"``: the ONNX Runtime floor — the whole model exported once with
      ``torch.onnx.export(..., dynamo=True)`` (and fused as ortlab's partitions are) and
      run by one bare session on the provider of the inputs' device, with ortlab's
      zero-copy hand-off (inference only).
    - ``"ort+dynamo"``: the floor, then the model under ``torch.compile`` with a backend
      that runs nothing: the least a ``torch.compile`` backend running the floor's
      session could cost (inference only).
    - any other name is passed to ``torch.compile(backend=name)`` (e.g. ``"aot_eager"``).

    Args:
        fn: An ``nn.Module`` (deep-copied for each backend) or a function; a
            ``torch.compile``-d one is unwrapped to what was compiled.
        *args: Positional inputs, used unchanged by every backend.
        backends: Names to run, in order.
        warmup: Calls after the first one, before timing starts.
        iters: Timed calls per backend; ``None`` times until ``min_time`` has passed
            (at least ``min_iters`` and at most ``max_iters`` calls).
        min_time: Seconds of timed calls per backend when ``iters`` is ``None``.
        min_iters: Least number of timed calls when ``iters`` is ``None``.
        max_iters: Most timed calls when ``iters`` is ``None``.
        interleave: Time the backends in rounds of ~50 ms blocks of calls, in rotating
            order, so that a change of machine load during the run reaches every
            backend alike (each block starts with >= 10 ms of untimed calls: they pay
            for the switch from another backend). ``False``: one backend after another.
        threads: torch intra-op threads for the run (ONNX Runtime gets the same);
            ``None`` keeps the current setting. Restored afterwards.
        training: Time forward + backward (loss = sum of the outputs) instead of forward.
            Gradients are compared with eager's in ``max_abs_diff``.
        no_grad: Inference only: run under ``torch.no_grad()``.
        eval: Put a module copy in eval mode; ``None`` means eval for inference and train
            mode for ``training=True``.
        dynamic: Passed to ``torch.compile`` for the compiled backends (``None``: its
            default, static shapes for a call repeated on the same inputs).
        ortlab_options: Backend options for ``"ortlab"`` / ``"ortlab-frozen"`` (e.g.
            ``{"excluded_ops": ["aten.gelu"]}``) and the providers of ``"ort"``.
        progress: Show progress: in a notebook a status line (each backend's first call,
            with an ortlab backend's compile phase, then the timing), in a terminal a
            progress bar (tqdm); never in a pipe or CI log.
        name: Label of the result; defaults to the module's class or function's name.

    Returns:
        A :class:`~ortlab.bench.BenchResult` with one row per backend.

    Raises:
        UnsupportedOptionError: an argument is out of range (a failing backend does not
            raise; its row carries the error).
    """
    backends = _backends.check_backends(backends)
    timing = _engine.Timing(warmup, iters, min_time, min_iters, max_iters, interleave)
    if threads is not None and threads < 1:
        raise errors.UnsupportedOptionError(f"bench: threads must be >= 1; got {threads}.")
    from ortlab import views  # the status line: a view, loaded when a benchmark runs

    fn = _harness.unwrap_compiled(fn)
    label = name or _callable_name(fn)
    status = views.status_line(f"ortlab.bench {label}", enabled=progress)
    # A notebook shows the status line; the bar is for a terminal.
    bar = (
        None
        if status.widget is not None
        else _progress_bar(len(backends), label, enabled=progress)
    )
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        # Taken before the runs, so that the load average is that of everything else.
        machine = _machine.machine_facts()
        runs, steps = _start_all(
            fn,
            args,
            backends,
            bar=bar,
            status=status,
            label=label,
            training=training,
            no_grad=no_grad,
            eval_mode=(not training) if eval is None else eval,
            dynamic=dynamic,
            ortlab_options=dict(ortlab_options or {}),
        )
        if bar is not None:
            bar.set_description(f"{label}: timing")
        status.step(f"timing {', '.join(steps) or 'nothing'}")
        with _backends.grad_mode(training=training, no_grad=no_grad):
            measured = _engine.measure(steps, timing)
        if bar is not None:
            bar.update(1)
    finally:
        torch.set_num_threads(old_threads)
        status.done()
        if bar is not None:
            bar.close()
    for run in runs:
        run.measurement = measured.get(run.backend)
        if run.measurement is not None and run.measurement.error is not None:
            run.error = run.measurement.error
    settings = {
        **timing.settings(),
        "threads": machine["torch_threads"],
        "training": training,
        "no_grad": no_grad and not training,
        "eval": (not training) if eval is None else eval,
        "dynamic": dynamic,
        "ortlab_options": {k: repr(v) for k, v in (ortlab_options or {}).items()},
    }
    return result_of(runs, machine=machine, settings=settings, name=label)


def _start_all(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    backends: Sequence[str],
    *,
    bar: Any,
    status: Progress,
    label: str,
    training: bool,
    no_grad: bool,
    **kwargs: Any,
) -> tuple[list[_Run], dict[str, _engine.Step]]:
    """Builds every backend and times its first call (a step of ``status`` each);
    returns the runs and the steps of those that started."""
    runs: list[_Run] = []
    steps: dict[str, _engine.Step] = {}
    for backend in backends:
        if bar is not None:
            bar.set_description(f"{label}: {backend}")
        run = _Run(backend)
        status.step(f"{backend}: build and first call")
        with _backends.grad_mode(training=training, no_grad=no_grad):
            step = _start(run, fn, args, status=status, training=training, **kwargs)
        runs.append(run)
        if step is not None:
            steps[backend] = step
        if bar is not None:
            bar.update(1)
    return runs, steps


def _start(
    run: _Run,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    status: Progress,
    training: bool,
    eval_mode: bool,
    dynamic: bool | None,
    ortlab_options: dict[str, Any],
) -> _engine.Step | None:
    """Builds one backend and times its first call; ``None`` when it failed (the run
    carries the error). ``status`` follows an ortlab backend's compile."""
    try:
        target = _backends.prepare_target(fn, eval_mode=eval_mode)
        call_args = _backends.prepare_args(args, target, training=training)
        # The first call's clock starts before the backend is built: "ort" exports and
        # creates its session here, the compiled backends on their first call.
        start = time.perf_counter()
        call, ortlab_backend = _backends.make_call(
            run.backend,
            target,
            call_args,
            training=training,
            dynamic=dynamic,
            ortlab_options=ortlab_options,
        )
        step = _backends.make_step(call, target, call_args, training=training)
        watch = (
            status.watch(ortlab_backend, ran="the rest of the first call")
            if ortlab_backend is not None
            else contextlib.nullcontext()
        )
        with watch:
            run.outputs = step()
        run.first_call_s = time.perf_counter() - start
        run.ortlab_backend = ortlab_backend
        run.first_call_steps = first_call_steps(call, ortlab_backend, run.first_call_s)
    except Exception as e:  # one backend's failure is a row, never a crash
        logger.debug("bench: backend %r failed", run.backend, exc_info=True)
        run.error = errors.describe(e)
        return None
    return step


def first_call_steps(
    call: Any, ortlab_backend: OrtBackend | None, first_call_s: float
) -> dict[str, float]:
    """Where a backend's first call went, in seconds per step: the ortlab backend's
    compile steps (``OrtBackend.compile_timings``, those that took time), or the floor's
    export, session creation (and for ``"ort+dynamo"`` Dynamo's trace of the no-op entry)
    and first run; empty for other backends.
    """
    if ortlab_backend is not None:
        return {k: v for k, v in ortlab_backend.compile_timings().items() if v > 0}
    behind = call if isinstance(call, _floor.FloorBehindDynamo) else None
    floor = behind.floor if behind is not None else call
    if not isinstance(floor, _floor.OrtFloor):
        return {}
    steps = {"export": floor.export_seconds, "session": floor.session_seconds}
    if behind is not None and behind.entry_first_seconds is not None:
        steps["dynamo"] = behind.entry_first_seconds
    steps["first_run"] = max(0.0, first_call_s - sum(steps.values()))
    return steps


def result_of(
    runs: Sequence[Any],
    *,
    machine: dict[str, Any],
    settings: dict[str, Any],
    name: str,
) -> _result.BenchResult:
    """The :class:`~ortlab.bench.BenchResult` of runs (one row each)."""
    pd = _deps.require("pandas")
    rows = [_row(r, runs) for r in runs]
    return _result.BenchResult(
        frame=pd.DataFrame(rows, columns=list(_result.COLUMNS)),
        machine=machine,
        settings=settings,
        name=name,
        ortlab_backends={
            r.backend: r.ortlab_backend for r in runs if r.ortlab_backend is not None
        },
        first_call_steps={
            r.backend: dict(r.first_call_steps) for r in runs if r.first_call_steps
        },
    )


def failed_runs(backends: Sequence[str], error: str) -> list[_Run]:
    """Runs of backends that could not start (e.g. the model could not be built)."""
    return [_Run(b, error=error) for b in backends]


def _row(run: _Run, runs: Sequence[_Run]) -> dict[str, Any]:
    m = run.measurement if run.error is None else None
    median = m.median_ms if m is not None else math.nan
    refs = {r.backend: r for r in runs}
    summary = run.ortlab_backend.summary() if run.ortlab_backend and run.error is None else {}
    return {
        "backend": run.backend,
        "first_call_s": run.first_call_s,
        "median_ms": median,
        "p10_ms": m.p10_ms if m is not None else math.nan,
        "p90_ms": m.p90_ms if m is not None else math.nan,
        "ratio_to_eager": _ratio(median, refs.get("eager")),
        "ratio_to_ort": _ratio(median, refs.get("ort")),
        "max_abs_diff": _max_abs_diff(run, refs.get("eager")),
        "graphs": summary.get("graphs", math.nan),
        "partitions": summary.get("partitions", math.nan),
        "sessions": summary.get("sessions", math.nan),
        "nodes_in_ort": summary.get("nodes_in_ort", math.nan),
        "nodes": summary.get("nodes", math.nan),
        "iters": len(m.samples) if m is not None else 0,
        "error": run.error or "",
    }


def _ratio(median_ms: float, ref: _Run | None) -> float:
    if ref is None or ref.error is not None or ref.measurement is None:
        return math.nan
    return median_ms / ref.measurement.median_ms if ref.measurement.samples else math.nan


def _max_abs_diff(run: _Run, ref: _Run | None) -> float:
    """The largest difference of a run's outputs (and gradients) to eager's, by the one
    comparator: NaN against NaN is no difference, NaN against a number is infinite."""
    if ref is None or run.outputs is None or ref.outputs is None:
        return math.nan
    if run is ref:
        return 0.0
    return _compare.max_abs_error(_compare.compare_outputs(run.outputs, ref.outputs))


def _callable_name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__name__", type(fn).__name__)


def _progress_bar(total: int, label: str, *, enabled: bool) -> Any:
    if not enabled or not _harness.interactive():
        return None
    tqdm = _deps.require("tqdm.auto")
    # One step per backend built, one for the timing of them all.
    return tqdm.tqdm(total=total + 1, desc=label, unit="step", leave=False)
