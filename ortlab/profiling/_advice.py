"""Advice from measurements: options tried on the profiled model, with the gain measured.

# NOTE: an option is suggested only after a trial on this model, never from a rule of
# thumb. Each trial compiles the model again with the one option changed (a fresh entry,
# the backend's other options kept), checks its outputs against the current compile's
# (the one comparator), and times both calls together (the bench engine, interleaved).
# What is tried, and when:
#
#   freeze_parameters=True   an inference graph whose partitions receive parameters as
#                            inputs (ONNX Runtime cannot pre-pack or fold them)
#   min_partition_size=N     partitions whose call (glue and ONNX Runtime) takes longer
#                            than their nodes take in PyTorch, timed on the inputs they
#                            received; N keeps every partition that wins in ONNX Runtime
#
# A trial is *recommended* when it is at least ``MIN_GAIN`` faster and its p90 is below
# the current median (a difference beyond the spread of either). The magic's
# ``--profile`` and the Inspector's Profile tab show every trial, recommended or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import ortlab.backend
from ortlab import _harness, errors
from ortlab.bench import _engine
from ortlab.numerics import _compare
from ortlab.profiling import _measure, _records

if TYPE_CHECKING:
    from ortlab.profiling._records import Profile

MIN_GAIN = 1.05
"""A trial must run the call at least this many times faster to be recommended."""

Advice = _records.Advice


def _weight_inputs(graph_runs: list[_measure.GraphRun]) -> list[str]:
    names = []
    for run in graph_runs:
        if run.graph.kind != "inference":
            continue
        for p in run.partitions:
            for name, value in zip(p.partition.input_names, p.fed):
                if isinstance(value, torch.nn.Parameter):
                    names.append(run.graph.source_of(name))
    return list(dict.fromkeys(names))


def _freeze_advice(weights: list[str]) -> Advice:
    shown = ", ".join(weights[:3]) + (
        f" and {len(weights) - 3} more" if len(weights) > 3 else ""
    )
    return Advice(
        "freeze_parameters",
        True,
        f"{len(weights)} parameters enter ONNX Runtime as inputs every call ({shown})",
    )


def _bound(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*inputs)


def _partition_trial(
    graph_runs: list[_measure.GraphRun], current: int, runs: int, clock: Callable[[], float]
) -> tuple[int | None, str]:
    """The ``min_partition_size`` to try (``None``: none) and why: partitions timed in
    ONNX Runtime (their module's call) and in PyTorch (their FX graph) on the inputs they
    received."""
    losing: list[tuple[int, str]] = []
    winning: list[int] = []
    for run in graph_runs:
        for p in run.partitions:
            module = getattr(run.module, p.partition.name, None)
            if module is None:
                continue
            inputs = p.inputs
            eager = p.partition.graph_module
            timed = _engine.measure(
                {"ort": _bound(module, inputs), "eager": _bound(eager, inputs)},
                _engine.Timing(warmup=1, iters=runs),
                clock=clock,
            )
            if any(m.error for m in timed.values()):
                continue
            ort_ms, eager_ms = timed["ort"].median_ms, timed["eager"].median_ms
            size = len(p.partition.node_names)
            if eager_ms < ort_ms:
                losing.append(
                    (
                        size,
                        f"{p.partition.name} ({size} nodes): {ort_ms:.3g} ms in "
                        f"ONNX Runtime with its glue vs {eager_ms:.3g} ms in PyTorch",
                    )
                )
            else:
                winning.append(size)
    smallest_winner = min(winning, default=None)
    small = [(s, why) for s, why in losing if smallest_winner is None or s < smallest_winner]
    if not small:
        return None, ""
    threshold = max(s for s, _ in small) + 1
    if threshold <= current:
        return None, ""
    return threshold, "; ".join(why for _, why in small)


def advise(
    compiled: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    profile: Profile,
    graph_runs: list[_measure.GraphRun],
    *,
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Advice]:
    """Tries the options the profile points at (module NOTE)."""
    backend = ortlab.backend.backend_of(compiled)
    options = backend.options
    candidates: list[Advice] = []
    weights = _weight_inputs(graph_runs)
    if not options.freeze_parameters and weights:
        candidates.append(_freeze_advice(weights))
    size, why = _partition_trial(graph_runs, options.min_partition_size, runs, clock)
    if size is not None:
        candidates.append(Advice("min_partition_size", size, why))
    for advice in candidates:
        try_option(advice, compiled, args, kwargs, runs=runs, clock=clock)
    return candidates


def freeze_trial(
    compiled: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    runs: int,
    model: torch.nn.Module | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Advice | None:
    """``freeze_parameters=True`` tried on an inference call of a module with parameters
    (measured, see the module NOTE); ``None`` where the backend freezes already, the call
    compiled no inference graph, or the module has no parameters.

    Args:
        model: The module whose parameters enter ONNX Runtime (default: what
            ``compiled`` compiled, when a module).
    """
    backend = ortlab.backend.backend_of(compiled)
    original = model if model is not None else _harness.unwrap_compiled(compiled)
    inference = any(g.kind == "inference" for g in backend.graphs)
    if backend.options.freeze_parameters or not inference:
        return None
    if not isinstance(original, torch.nn.Module):
        return None
    weights = [name for name, _ in original.named_parameters()]
    if not weights:
        return None
    advice = _freeze_advice(weights)
    try_option(advice, compiled, args, kwargs, runs=runs, clock=clock)
    return advice


def try_option(
    advice: Advice,
    compiled: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Compiles the model again with ``advice``'s option, checks the trial's outputs and
    times it against ``compiled`` (fills ``advice``; a failed trial says why in its
    note)."""
    original = _harness.unwrap_compiled(compiled)
    if original is compiled:
        advice.note = "the compiled object has no model to compile again"
        return
    options = ortlab.backend.backend_of(compiled).options
    grad = torch.is_grad_enabled()

    def call(c: Any, keywords: dict[str, Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.set_grad_enabled(grad):
                return c(*args, **keywords)

        return run

    try:
        trial = ortlab.backend.compile(
            _harness.fresh_entry(original, name="ortlab_advice", kwargs=kwargs),
            options=options.replace(**{advice.option: advice.value}),
        )
        _trial(advice, call(compiled, kwargs), call(trial, {}), runs, clock)
    except (errors.OrtlabError, RuntimeError) as e:
        advice.note = f"the trial failed: {errors.describe(e)}"


def _trial(
    advice: Advice,
    current: Callable[[], Any],
    run: Callable[[], Any],
    runs: int,
    clock: Callable[[], float],
) -> None:
    """Checks the trial's outputs against the current call's and times both together."""
    diffs = _compare.compare_outputs(run(), current())
    if not all(d.passed for d in diffs):
        advice.note = (
            f"its outputs differ from the current compile's by up to "
            f"{_compare.max_abs_error(diffs):.3g}"
        )
    timed = _engine.measure(
        {"current": current, "trial": run}, _engine.Timing(warmup=2, iters=runs), clock=clock
    )
    for m in timed.values():
        if m.error is not None:
            raise errors.OrtlabError(f"the {m.name} call failed: {m.error}")
    now, new = timed["current"], timed["trial"]
    advice.current_seconds, advice.trial_seconds = now.median_ms * 1e-3, new.median_ms * 1e-3
    advice.current_p90_seconds, advice.trial_p90_seconds = now.p90_ms * 1e-3, new.p90_ms * 1e-3
    advice.recommended = (
        not advice.note
        and advice.trial_seconds * MIN_GAIN <= advice.current_seconds
        and advice.trial_p90_seconds < advice.current_seconds
    )
