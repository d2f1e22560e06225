"""``ortlab.diff``: is the ortlab-compiled call right, and if not, where does it go wrong?

:func:`diff` compiles the call itself, with a fresh backend; :func:`diff_compiled` checks
a call compiled already (``%ortcompile`` compiles once and diffs that). Both end in
:func:`compare_runs`, which turns the two sides' runs into a :class:`DiffReport`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

import ortlab.backend
from ortlab import _harness, errors
from ortlab.numerics import _compare, _localise, _records, _reference, _report, _runner, _sweep

COMPARE_STEP = "comparison (outputs, partitions, nodes)"
"""The status line's step after both runs (:func:`diff`)."""


@dataclasses.dataclass(frozen=True)
class _Request:
    """What :func:`diff` was asked, the same for every comparison of a sweep."""

    fn: Any
    args: Sequence[Any]
    atol: _compare.Tolerance
    rtol: _compare.Tolerance
    backward: bool
    dynamic: bool | None
    nodes: bool | None
    options: Any

    def once(
        self, backend_options: Mapping[str, Any], progress: _runner.Progress | None = None
    ) -> tuple[_report.DiffReport, _runner.Runs]:
        """One comparison with these backend options on top of ``options`` (its steps
        told to ``progress``)."""
        options = ortlab.backend.OrtBackendOptions.from_value(self.options)
        merged = options.replace(**backend_options) if backend_options else options
        return _diff_once(self, ortlab.backend.OrtBackend(merged), progress)

    def timed_once(
        self, backend_options: Mapping[str, Any]
    ) -> tuple[_report.DiffReport, Callable[[], None]]:
        """One comparison, and a callable running its compiled side again (the sweep)."""
        report, runs = self.once(backend_options)
        return report, runs.rerun


def _diff_once(
    request: _Request,
    backend: ortlab.backend.OrtBackend,
    progress: _runner.Progress | None = None,
) -> tuple[_report.DiffReport, _runner.Runs]:
    """One comparison with ``backend``; also returns both sides' runs."""
    runs = _runner.run_both(
        request.fn,
        request.args,
        backend,
        backward=request.backward,
        dynamic=request.dynamic,
        progress=progress,
    )
    if progress is not None:
        progress.step(COMPARE_STEP)
    report = compare_runs(
        runs,
        atol=request.atol,
        rtol=request.rtol,
        backward=request.backward,
        nodes=request.nodes,
    )
    return report, runs


def compare_runs(
    runs: _runner.Runs,
    *,
    atol: _compare.Tolerance = None,
    rtol: _compare.Tolerance = None,
    backward: bool = False,
    nodes: bool | None = None,
) -> _report.DiffReport:
    """The report on two sides run already (:func:`_runner.run_both` or
    :func:`_runner.run_compiled`): outputs, gradients, every captured partition run.

    Args:
        runs: Both sides, and the compiled side's captured partition runs.
        atol: Absolute tolerance, as :func:`diff` takes it.
        rtol: Relative tolerance, likewise.
        backward: Whether the runs took gradients (said in the report).
        nodes: Compare intermediate nodes, as :func:`diff` takes it.
    """
    backend = runs.backend
    notes = list(runs.notes)
    if not backend.graphs:
        notes.append("Dynamo compiled no graph: the compiled call ran entirely in eager")
    eager, compiled = runs.eager, runs.compiled

    def compare(name: str, got: Any, ref: Any) -> _records.TensorDiff:
        atol_, rtol_ = _compare.tolerance_for(atol, name), _compare.tolerance_for(rtol, name)
        return _compare.compare_tensors(
            name, got, ref, atol=atol_, rtol=rtol_, keep_samples=True
        )

    outputs = [
        compare(name, got, ref)
        for (name, ref), (_, got) in zip(eager.outputs, compiled.outputs)
    ]
    if len(eager.outputs) != len(compiled.outputs):
        notes.append(
            f"eager returned {len(eager.outputs)} values, the compiled call "
            f"{len(compiled.outputs)}"
        )
    gradients = []
    for (name, ref), (_, got) in zip(eager.grads, compiled.grads):
        if ref is not None and got is not None:
            gradients.append(compare(name, got, ref))
        elif ref is not None or got is not None:
            gradients.append(
                _records.TensorDiff(
                    name, (), "", 0.0, 0.0, False, note="gradient missing on one side"
                )
            )
    if backward and not gradients:
        notes.append("backward=True, but no gradient was compared")
    # The all-eager reference replays the runs' RNG state; the caller's is kept.
    with torch.random.fork_rng(devices=runs.devices):
        partitions = _localise.partition_diffs(
            backend,
            runs.captures,
            atol=_compare.intermediate_tolerance(atol),
            rtol=_compare.intermediate_tolerance(rtol),
            nodes=nodes,
            rng_state=runs.rng,
        )
    return _report.DiffReport(
        outputs,
        gradients,
        partitions,
        backend,
        atol,
        rtol,
        backward,
        eager_seconds=eager.seconds,
        compiled_seconds=compiled.seconds,
        notes=notes,
    )


def diff(
    fn: Callable[..., Any],
    *args: Any,
    atol: _compare.Tolerance = None,
    rtol: _compare.Tolerance = None,
    backward: bool = False,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    dynamic: bool | None = None,
    nodes: bool | None = None,
    repeat: int = 5,
    options: ortlab.backend.OrtBackendOptions | Mapping[str, Any] | None = None,
    reference: str | None = None,
    **backend_options: Any,
) -> _report.DiffReport:
    """Compares an ortlab-compiled call of ``fn`` with eager PyTorch on the same inputs.

    Both sides start from the same RNG state; a module is deep-copied for each side, so
    neither run can affect the other (or ``fn``). Example::

        report = ortlab.diff(model, x, atol=1e-4, rtol=1e-4)
        report.passed, report.first_divergent, report.to_frame()

    Args:
        fn: An ``nn.Module`` or function (a ``torch.compile``-d one is unwrapped first).
        *args: Positional inputs, cloned for each run.
        atol: Absolute tolerance: a number, or ``{output name: number}``; ``None``: the
            ``torch.testing.assert_close`` default of each dtype (the rules:
            :mod:`ortlab.numerics._compare`).
        rtol: Relative tolerance, like ``atol``.
        backward: Also compare gradients of the parameters and of every floating-point
            input (made to require grad), for a fixed random output gradient.
        sweep: ``{"providers": [...], "graph_optimization_level": [...], <option>: [...]}``:
            repeat the diff for every combination (keys may be any ``OrtBackendOptions``
            field too) and time it; rows land in ``report.sweep``. Providers this
            onnxruntime build lacks give a "skipped" row.
        dynamic: Passed to ``torch.compile`` (``None``: its default, as
            :func:`ortlab.compile`).
        nodes: Compare intermediate nodes: ``None`` in failing partitions only, ``True`` in
            every partition, ``False`` never.
        repeat: Timed calls per sweep configuration (the median is reported).
        options: An ``OrtBackendOptions`` (or dict) to start from.
        reference: ``"float64"``: also run the call eagerly in float64 and say whether
            ortlab is as close to it as eager is (``report.reference``; it costs a float64
            run). Use it to judge a decision flip (``report.flips``).
        **backend_options: ``OrtBackendOptions`` fields, e.g. ``pre_ort_model_transforms``,
            ``excluded_ops``.

    Returns:
        A :class:`~ortlab.numerics.DiffReport`.

    Raises:
        UnsupportedOptionError: an unknown backend option, sweep key or reference.

    In a notebook a status line says what it is doing while it works (eager run →
    compile and first call, with the compile's phase → comparison → float64 reference
    → sweep) and is closed when it returns.
    """
    if not callable(fn):
        raise errors.UnsupportedOptionError(
            f"ortlab.diff needs a module or function to call; got {type(fn).__name__}."
        )
    if reference not in (None, "float64"):
        raise errors.UnsupportedOptionError(
            f"ortlab.diff(reference={reference!r}): the reference is 'float64' or None."
        )
    valid = {f.name for f in dataclasses.fields(ortlab.backend.OrtBackendOptions)}
    unknown = sorted(set(backend_options) - valid)
    if unknown:  # the message lists the options; keyword inputs are a partial's
        try:
            ortlab.backend.OrtBackendOptions.from_value(dict(backend_options))
        except errors.UnsupportedOptionError as e:
            raise errors.UnsupportedOptionError(
                f"{e} ortlab.diff's keyword arguments are backend options: to pass "
                f"keyword inputs to the model, diff functools.partial(model, "
                f"{unknown[0]}=...) with the positional inputs."
            ) from None
    if sweep:
        _sweep.configurations(sweep)  # a bad sweep fails before anything runs

    from ortlab import views  # the status line: a view, loaded when a diff runs

    request = _Request(fn, args, atol, rtol, backward, dynamic, nodes, options)
    status = views.status_line(f"ortlab.diff {getattr(fn, '__name__', type(fn).__name__)}")
    try:
        report, runs = request.once(backend_options, progress=status)
        if reference == "float64":
            status.step("float64 reference")
            report.reference = _reference.float64_reference(fn, args, runs, backward=backward)
        if sweep:
            status.step("sweep")
            report.sweep = _sweep.run_sweep(
                sweep,
                request.timed_once,
                runs.eager_rerun,
                backend_options=backend_options,
                repeat=repeat,
            )
    finally:
        status.done()
    return report


def diff_compiled(
    compiled: Callable[..., Any],
    *args: Any,
    original: Callable[..., Any] | None = None,
    atol: _compare.Tolerance = None,
    rtol: _compare.Tolerance = None,
    backward: bool = False,
    nodes: bool | None = None,
) -> _report.DiffReport:
    """Compares a call compiled already with ortlab against its eager original.

    :func:`diff` without compiling again: the report is about the graphs, partitions and
    sessions of ``compiled``'s own backend (a first call compiles them there). Both sides
    start from the same RNG state; a module is deep-copied for the eager side, and the
    compiled side runs the module ``compiled`` was compiled on. Example::

        compiled = ortlab.compile(model)
        report = ortlab.numerics.diff_compiled(compiled, x, atol=1e-4)

    Args:
        compiled: The result of :func:`ortlab.compile` or a ``torch.compile``-d callable
            with an :class:`~ortlab.OrtBackend`, called as ``compiled(*args)``.
        *args: Positional inputs, cloned for each run.
        original: What ``compiled`` calls, run eagerly: a module, a function, or a
            ``functools.partial`` of either with the arguments ``compiled`` binds;
            ``None``: what ``compiled`` was compiled from.
        atol: Absolute tolerance, as :func:`diff` takes it.
        rtol: Relative tolerance, likewise.
        backward: Also compare gradients, as :func:`diff` does. The inputs are then made
            to require grad, which recompiles a call compiled for inputs that did not.
        nodes: Compare intermediate nodes, as :func:`diff` takes it.

    Returns:
        A :class:`~ortlab.numerics.DiffReport`.

    Raises:
        UnsupportedOptionError: ``compiled`` was not compiled with ortlab.
    """
    backend = ortlab.backend.backend_of(compiled)
    if original is None:
        original = _harness.unwrap_compiled(compiled)
    runs = _runner.run_compiled(compiled, original, args, backend, backward=backward)
    return compare_runs(runs, atol=atol, rtol=rtol, backward=backward, nodes=nodes)
