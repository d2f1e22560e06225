"""Benchmarks: eager vs inductor vs ortlab vs bare ONNX Runtime, measured honestly.

:func:`bench` times one model (or function) on the same inputs under several backends and
returns a :class:`BenchResult` (a pandas DataFrame plus machine facts, a plot, text, HTML,
markdown and JSON). :func:`run_zoo` does it for the model zoo and writes
``results.md`` / ``results.json`` / ``results.png`` (``make bench``, ``ortlab bench``).

# NOTE: what "honest" means here, and why each rule exists:
#
# - Dynamo caches compiled code per *code object*. Benchmarking several backends on one
#   model through the same ``forward`` would pile their cache entries onto one code object
#   (guards of one backend checked before the next, and the recompile limit of 8 hit), so
#   every backend gets a wrapper function with a code object of its own, and every
#   ``nn.Module`` a deep copy of its own.
# - The first call (compile + run) is reported apart from the steady state; steady state is
#   the median / p10 / p90 of single calls after a warm-up, with the garbage collector off
#   (as ``timeit`` does) so a collection does not land in one backend's samples only.
# - Threads are set once for the whole run (torch's intra-op threads; ortlab and the "ort"
#   floor give ONNX Runtime the same number) and recorded in ``BenchResult.machine``.
# - ``"ort"`` is the floor for ONNX Runtime: the whole model exported once with
#   ``torch.onnx.export(..., dynamo=True)`` and run by a bare ``InferenceSession``. Its
#   timed call includes the torch -> numpy -> torch conversions, as a user would pay them.
# - A backend that fails becomes a row with its error; it never stops the other backends.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import html
import io
import itertools
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import ortlab.backend
from ortlab import _deps, _html, errors

if TYPE_CHECKING:
    import pandas

    from ortlab.backend import OrtBackend

logger = logging.getLogger(__name__)

BUILTIN_BACKENDS = ("eager", "inductor", "ortlab", "ortlab-frozen", "ort")
"""Backend names with a meaning of their own; any other name goes to ``torch.compile``."""

DEFAULT_BACKENDS = ("eager", "inductor", "ortlab", "ort")

COLUMNS = (
    "backend",
    "first_call_s",
    "median_ms",
    "p10_ms",
    "p90_ms",
    "ratio_to_eager",
    "ratio_to_ort",
    "max_abs_diff",
    "graphs",
    "partitions",
    "sessions",
    "nodes_in_ort",
    "nodes",
    "iters",
    "error",
)
"""Columns of :attr:`BenchResult.frame`, in order."""

ZOO_MODELS = ("mlp", "gelu_mlp", "cnn", "transformer_layer", "tiny_llama")
"""Zoo models :func:`run_zoo` benchmarks by default (each at its default batch)."""

ZOO_BACKENDS = ("eager", "inductor", "ortlab", "ortlab-frozen", "ort")

_wrapper_ids = itertools.count()


# --- result --------------------------------------------------------------------------------


@dataclasses.dataclass
class BenchResult:
    """What :func:`bench` measured: one row per backend, plus the machine it ran on.

    Ratios are ``median_ms / median_ms of eager`` (``ratio_to_eager``) and of ``"ort"``
    (``ratio_to_ort``): below 1 is faster than the reference.
    """

    frame: pandas.DataFrame
    """One row per backend, columns :data:`COLUMNS`."""
    machine: dict[str, Any]
    """Cores, threads, library versions, Python and platform."""
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """How it was measured: warm-up, iterations or minimum time, modes, threads."""
    name: str = ""
    """What was benchmarked (a zoo model name or the function's name)."""
    ortlab_backends: dict[str, OrtBackend] = dataclasses.field(
        default_factory=dict, repr=False
    )
    """The :class:`~ortlab.OrtBackend` of each ortlab row, by backend name, to inspect
    what was compiled (``ortlab.inspect(result.ortlab_backends["ortlab"])``)."""

    def row(self, backend: str) -> dict[str, Any]:
        """The row of ``backend`` as a dict.

        Raises:
            KeyError: ``backend`` was not benchmarked.
        """
        rows = self.frame[self.frame["backend"] == backend]
        if rows.empty:
            raise KeyError(
                f"backend {backend!r} is not in this BenchResult; "
                f"it has {list(self.frame['backend'])}"
            )
        return rows.iloc[0].to_dict()

    def plot(self, ax: Any = None) -> Any:
        """A bar chart of the steady-state median per backend, p10-p90 as error bars.

        Args:
            ax: A matplotlib Axes to draw into; ``None`` makes a new figure.

        Returns:
            The matplotlib Figure.
        """
        plt = _deps.require("matplotlib.pyplot")
        if ax is None:
            fig, ax = plt.subplots(figsize=(1.4 * max(3, len(self.frame)) + 1.5, 3.2))
        else:
            fig = ax.figure
        frame = self.frame
        names = list(frame["backend"])
        medians = [_nan_to(v, 0.0) for v in frame["median_ms"]]
        low = [max(0.0, m - _nan_to(p, m)) for m, p in zip(medians, frame["p10_ms"])]
        high = [max(0.0, _nan_to(p, m) - m) for m, p in zip(medians, frame["p90_ms"])]
        colors = [_backend_color(n) for n in names]
        bars = ax.bar(names, medians, yerr=[low, high], color=colors, capsize=3)
        for bar, top, ratio, error in zip(bars, high, frame["ratio_to_eager"], frame["error"]):
            label = "error" if error else (f"{ratio:.2f}× eager" if _finite(ratio) else "")
            ax.annotate(
                label,
                # above the p90 whisker, so that the label never sits on it
                (bar.get_x() + bar.get_width() / 2, bar.get_height() + top),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
        ax.set_ylabel("steady-state median (ms)")
        threads = self.settings.get("threads")
        ax.set_title(f"{self.name or 'benchmark'} ({threads} threads)")
        ax.margins(y=0.2)
        fig.tight_layout()
        return fig

    def to_dict(self) -> dict[str, Any]:
        """Plain data (rows, machine, settings) that ``json.dumps`` accepts."""
        return {
            "name": self.name,
            "machine": self.machine,
            "settings": self.settings,
            "results": _frame_records(self.frame),
        }

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The result as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def to_markdown(self) -> str:
        """A markdown table of the rows, followed by the machine facts."""
        headers, rows = _display_rows(self.frame)
        parts = []
        if self.name:
            parts.append(f"**{html.escape(self.name, quote=False)}**\n")
        parts.append(_markdown_table(headers, rows))
        parts.append("")
        parts.append(_markdown_table(("machine", ""), _machine_rows(self.machine)))
        return "\n".join(parts) + "\n"

    def __repr__(self) -> str:
        headers, rows = _display_rows(self.frame)
        title = f"BenchResult({self.name})" if self.name else "BenchResult"
        facts = ", ".join(
            f"{k}={self.machine.get(k)}" for k in ("cores", "torch_threads", "torch")
        )
        return f"{title}: {facts}\n{_html.text_table(headers, rows)}"

    def _repr_html_(self) -> str:
        headers, rows = _display_rows(self.frame)
        facts = ", ".join(f"{k}: {v}" for k, v in _machine_rows(self.machine))
        body = _html.table(headers, rows) + f"<p><small>{_html.esc(facts)}</small></p>"
        return _html.block(f"Benchmark: {self.name}" if self.name else "Benchmark", body)


# --- bench ---------------------------------------------------------------------------------


def bench(
    fn: Callable[..., Any],
    *args: Any,
    backends: Sequence[str] = DEFAULT_BACKENDS,
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
    dynamic: bool | None = True,
    ortlab_options: Mapping[str, Any] | None = None,
    progress: bool = True,
    name: str | None = None,
) -> BenchResult:
    """Times ``fn(*args)`` under several backends on the same inputs.

    Backends:

    - ``"eager"``: plain PyTorch, the reference for ``ratio_to_eager`` and ``max_abs_diff``.
    - ``"inductor"``: ``torch.compile(backend="inductor")`` (its first call builds C++ and
      may take a minute on CPU).
    - ``"ortlab"``: :func:`ortlab.compile`; its row also counts graphs, partitions,
      sessions and the nodes that run in ONNX Runtime.
    - ``"ortlab-frozen"``: the same with ``freeze_parameters=True``.
    - ``"ort"``: the ONNX Runtime floor — the whole model exported once with
      ``torch.onnx.export(..., dynamo=True)`` and run by a bare ``InferenceSession``
      (inference only).
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
        dynamic: Passed to ``torch.compile`` for the compiled backends.
        ortlab_options: Backend options for ``"ortlab"`` / ``"ortlab-frozen"`` (e.g.
            ``{"excluded_ops": ["aten.gelu"]}``).
        progress: Show a progress bar (tqdm) when running in a terminal or a notebook.
        name: Label of the result; defaults to the module's class or function's name.

    Returns:
        A :class:`BenchResult` with one row per backend.

    Raises:
        UnsupportedOptionError: an argument is out of range (a failing backend does not
            raise; its row carries the error).
    """
    backends = _check_backends(backends)
    if warmup < 0 or min_iters < 1 or max_iters < min_iters or min_time < 0:
        raise errors.UnsupportedOptionError(
            "bench: warmup must be >= 0, min_time >= 0 and 1 <= min_iters <= max_iters; "
            f"got warmup={warmup}, min_time={min_time}, min_iters={min_iters}, "
            f"max_iters={max_iters}."
        )
    if iters is not None and iters < 1:
        raise errors.UnsupportedOptionError(f"bench: iters must be >= 1 or None; got {iters}.")
    if threads is not None and threads < 1:
        raise errors.UnsupportedOptionError(f"bench: threads must be >= 1; got {threads}.")
    fn = _unwrap_compiled(fn)
    label = name or _callable_name(fn)
    bar = _progress_bar(len(backends), label, enabled=progress)
    try:
        return _bench(
            fn,
            args,
            backends=backends,
            timing=_Timing(warmup, iters, min_time, min_iters, max_iters, interleave),
            threads=threads,
            training=training,
            no_grad=no_grad,
            eval_mode=(not training) if eval is None else eval,
            dynamic=dynamic,
            ortlab_options=dict(ortlab_options or {}),
            name=label,
            bar=bar,
        )
    finally:
        if bar is not None:
            bar.close()


@dataclasses.dataclass(frozen=True)
class _Timing:
    warmup: int
    iters: int | None
    min_time: float
    min_iters: int
    max_iters: int
    interleave: bool = True

    def done(self, samples: Sequence[float]) -> bool:
        """Whether a backend with these timed samples has enough."""
        n = len(samples)
        if self.iters is not None:
            return n >= self.iters
        return n >= self.max_iters or (n >= self.min_iters and sum(samples) >= self.min_time)

    def wanted(self, samples: Sequence[float]) -> int:
        """How many more timed calls a backend may need (an upper bound)."""
        return (self.iters if self.iters is not None else self.max_iters) - len(samples)


@dataclasses.dataclass
class _Run:
    """What one backend produced: timings, its first outputs (and grads), records."""

    backend: str
    first_call_s: float = math.nan
    samples: list[float] = dataclasses.field(default_factory=list)
    outputs: list[torch.Tensor] | None = None
    summary: dict[str, Any] | None = None
    ortlab_backend: OrtBackend | None = None
    error: str | None = None


def _bench(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    backends: Sequence[str],
    timing: _Timing,
    threads: int | None,
    training: bool,
    no_grad: bool,
    eval_mode: bool,
    dynamic: bool | None,
    ortlab_options: dict[str, Any],
    name: str,
    bar: Any,
) -> BenchResult:
    pd = _deps.require("pandas")
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        # Taken before the runs, so that the load average is that of everything else.
        machine = machine_facts()
        runs: list[_Run] = []
        steps: dict[str, tuple[Callable[[], Any], Callable[[], None]]] = {}
        for backend in backends:
            if bar is not None:
                bar.set_description(f"{name}: {backend}")
            run, step = _start_backend(
                backend,
                fn,
                args,
                timing=timing,
                training=training,
                no_grad=no_grad,
                eval_mode=eval_mode,
                dynamic=dynamic,
                ortlab_options=ortlab_options,
            )
            runs.append(run)
            if step is not None:
                steps[backend] = step
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.set_description(f"{name}: timing")
        _time_backends(runs, steps, timing, no_grad=no_grad and not training)
        if bar is not None:
            bar.update(1)
    finally:
        torch.set_num_threads(old_threads)
    settings = {
        "warmup": timing.warmup,
        "iters": timing.iters,
        "min_time_s": timing.min_time,
        "min_iters": timing.min_iters,
        "max_iters": timing.max_iters,
        "interleave": timing.interleave,
        "threads": machine["torch_threads"],
        "training": training,
        "no_grad": no_grad and not training,
        "eval": eval_mode,
        "dynamic": dynamic,
        "ortlab_options": {k: repr(v) for k, v in ortlab_options.items()},
    }
    frame = pd.DataFrame([_row(r, runs) for r in runs], columns=list(COLUMNS))
    return BenchResult(
        frame=frame,
        machine=machine,
        settings=settings,
        name=name,
        ortlab_backends={
            r.backend: r.ortlab_backend for r in runs if r.ortlab_backend is not None
        },
    )


def _row(run: _Run, runs: Sequence[_Run]) -> dict[str, Any]:
    median = statistics.median(run.samples) * 1e3 if run.samples else math.nan
    p10, p90 = (
        (_percentile(run.samples, 10) * 1e3, _percentile(run.samples, 90) * 1e3)
        if run.samples
        else (math.nan, math.nan)
    )
    refs = {r.backend: r for r in runs}
    summary = run.summary or {}
    return {
        "backend": run.backend,
        "first_call_s": run.first_call_s,
        "median_ms": median,
        "p10_ms": p10,
        "p90_ms": p90,
        "ratio_to_eager": _ratio(median, refs.get("eager")),
        "ratio_to_ort": _ratio(median, refs.get("ort")),
        "max_abs_diff": _max_abs_diff(run, refs.get("eager")),
        "graphs": summary.get("graphs", math.nan),
        "partitions": summary.get("partitions", math.nan),
        "sessions": summary.get("sessions", math.nan),
        "nodes_in_ort": summary.get("nodes_in_ort", math.nan),
        "nodes": summary.get("nodes", math.nan),
        "iters": len(run.samples),
        "error": run.error or "",
    }


def _ratio(median_ms: float, ref: _Run | None) -> float:
    if ref is None or not ref.samples or not _finite(median_ms):
        return math.nan
    return median_ms / (statistics.median(ref.samples) * 1e3)


def _max_abs_diff(run: _Run, ref: _Run | None) -> float:
    if ref is None or run.outputs is None or ref.outputs is None:
        return math.nan
    if run is ref:
        return 0.0
    if len(run.outputs) != len(ref.outputs):
        return math.inf
    worst = 0.0
    for a, b in zip(run.outputs, ref.outputs):
        if a.shape != b.shape:
            return math.inf
        if a.numel() == 0:
            continue
        diff = (a.detach().double().cpu() - b.detach().double().cpu()).abs().max().item()
        worst = max(worst, diff if not math.isnan(diff) else math.inf)
    return worst


# --- one backend ---------------------------------------------------------------------------


def _start_backend(
    backend: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    timing: _Timing,
    training: bool,
    no_grad: bool,
    eval_mode: bool,
    dynamic: bool | None,
    ortlab_options: dict[str, Any],
) -> tuple[_Run, tuple[Callable[[], Any], Callable[[], None]] | None]:
    """Builds one backend, times its first call and warms it up; returns its run and the
    ``(step, sync)`` to time (``None`` when it failed: the run carries the error)."""
    run = _Run(backend)
    try:
        target = _prepare_target(fn, eval_mode=eval_mode)
        call_args = _prepare_args(args, target, training=training)
        grad_mode = contextlib.nullcontext() if training or not no_grad else torch.no_grad()
        sync = _synchronizer(args)
        with grad_mode:
            # The first call's clock starts before the backend is built: "ort" exports
            # and creates its session here, the compiled backends on their first call.
            start = time.perf_counter()
            call, ortlab_backend = _make_call(
                backend,
                target,
                call_args,
                training=training,
                dynamic=dynamic,
                ortlab_options=ortlab_options,
            )
            step = _make_step(call, target, call_args, training=training)
            run.outputs = step()
            sync()
            run.first_call_s = time.perf_counter() - start
            for _ in range(timing.warmup):
                step()
            sync()
        run.ortlab_backend = ortlab_backend
    except Exception as e:  # one backend's failure is a row, never a crash
        _record_failure(run, e)
        return run, None
    return run, (step, sync)


def _record_failure(run: _Run, error: Exception) -> None:
    logger.debug("bench: backend %r failed", run.backend, exc_info=True)
    run.error = f"{type(error).__name__}: {_first_line(error)}"
    run.samples = []


def _time_backends(
    runs: Sequence[_Run],
    steps: Mapping[str, tuple[Callable[[], Any], Callable[[], None]]],
    timing: _Timing,
    *,
    no_grad: bool,
) -> None:
    """Times every backend that started, one after another or in interleaved rounds; a
    backend that fails while being timed becomes an error row."""
    by_name = {run.backend: run for run in runs}
    pending = list(steps)
    grad_mode = torch.no_grad() if no_grad else contextlib.nullcontext()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection must not land in one backend's samples
    try:
        with grad_mode:
            rounds = 0
            while pending:
                # Rotate the order so that no backend always follows the same other one.
                shift = rounds % len(pending)
                for name in pending[shift:] + pending[:shift]:
                    run = by_name[name]
                    step, sync = steps[name]
                    try:
                        _time_block(run.samples, step, sync, timing)
                    except Exception as e:
                        _record_failure(run, e)
                pending = [
                    n
                    for n in pending
                    if by_name[n].error is None and not timing.done(by_name[n].samples)
                ]
                rounds += 1
    finally:
        if was_enabled:
            gc.enable()
    for name in steps:
        run = by_name[name]
        if run.ortlab_backend is not None and run.error is None:
            run.summary = run.ortlab_backend.summary()


_BLOCK_SECONDS = 0.05
"""Interleaved timing: the length of one backend's block of timed calls in a round."""
_SETTLE_SECONDS = 0.01
"""Interleaved timing: untimed calls before each block, after switching backends."""


def _time_block(
    samples: list[float], step: Callable[[], Any], sync: Callable[[], None], timing: _Timing
) -> None:
    """Appends one block of timed calls to ``samples`` (all remaining calls when
    ``timing.interleave`` is off). In interleaved mode the block starts with untimed
    calls (at least one, for at least _SETTLE_SECONDS): they pay for the switch from the
    previous backend (caches, thread pools)."""
    if timing.interleave:
        # Settle: untimed calls for at least _SETTLE_SECONDS (torch's OpenMP threads spin
        # for milliseconds after the previous backend's last op, competing for cores).
        start = time.perf_counter()
        calls = 0
        while calls == 0 or time.perf_counter() - start < _SETTLE_SECONDS:
            step()
            sync()
            calls += 1
        estimate = max((time.perf_counter() - start) / calls, 1e-6)
        if samples:
            estimate = statistics.median(samples[-5:])
        count = max(1, min(int(_BLOCK_SECONDS / estimate), timing.wanted(samples)))
    else:
        count = timing.wanted(samples)
    for _ in range(count):
        start = time.perf_counter()
        step()
        sync()
        samples.append(time.perf_counter() - start)
        if not timing.interleave and timing.done(samples):
            break


def _unwrap_compiled(fn: Any) -> Any:
    """The original module or function behind a ``torch.compile``-d one.

    Benchmarking a compiled callable would nest compilers ("eager" would not be eager);
    every backend starts from what was compiled instead.
    """
    original = getattr(fn, "_orig_mod", None)  # torch._dynamo OptimizedModule
    if isinstance(fn, torch.nn.Module) and isinstance(original, torch.nn.Module):
        return original
    return getattr(fn, "_torchdynamo_orig_callable", fn)  # a compiled function


def _prepare_target(fn: Callable[..., Any], *, eval_mode: bool) -> Any:
    if isinstance(fn, torch.nn.Module):
        from ortlab.backend import OrtBackend

        # A module compiled before may carry its backend as an attribute (it holds live
        # sessions, which cannot be copied); the copies share it instead.
        memo = {
            id(v): v
            for m in fn.modules()
            for v in vars(m).values()
            if isinstance(v, OrtBackend)
        }
        model = copy.deepcopy(fn, memo)
        model.train(not eval_mode)
        return model
    return fn


def _prepare_args(args: tuple[Any, ...], target: Any, *, training: bool) -> tuple[Any, ...]:
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


def _fresh_wrapper(target: Any, tag: str) -> Callable[..., Any]:
    """A function calling ``target`` whose code object is new (Dynamo caches per code)."""

    def bench_call(*args: Any) -> Any:
        return target(*args)

    code = bench_call.__code__.replace(co_name=f"bench_{tag}_{next(_wrapper_ids)}")
    return types.FunctionType(
        code, bench_call.__globals__, code.co_name, None, bench_call.__closure__
    )


def _make_call(
    backend: str,
    target: Any,
    args: tuple[Any, ...],
    *,
    training: bool,
    dynamic: bool | None,
    ortlab_options: dict[str, Any],
) -> tuple[Callable[..., Any], OrtBackend | None]:
    tag = backend.replace("-", "_")
    if backend == "eager":
        return target, None
    if backend in ("ortlab", "ortlab-frozen"):
        import ortlab

        options = dict(ortlab_options)
        if backend == "ortlab-frozen":
            options["freeze_parameters"] = True
        compiled = ortlab.compile(_fresh_wrapper(target, tag), dynamic=dynamic, **options)
        return compiled, ortlab.backend_of(compiled)
    if backend == "ort":
        if training:
            raise errors.UnsupportedOptionError(
                'bench: the "ort" floor runs inference only; leave it out of backends '
                "when training=True."
            )
        return _OrtFloor(target, args), None
    # "inductor" and any other torch.compile backend name.
    return torch.compile(_fresh_wrapper(target, tag), backend=backend, dynamic=dynamic), None


def _make_step(
    call: Callable[..., Any], target: Any, args: tuple[Any, ...], *, training: bool
) -> Callable[[], list[torch.Tensor]]:
    if not training:

        def infer() -> list[torch.Tensor]:
            return _flatten_tensors(call(*args))

        return infer
    grads_of = [
        *(p for p in _parameters(target) if p.requires_grad),
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
        outputs = _flatten_tensors(call(*args))
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
        return [o.detach() for o in outputs] + [g.detach() for g in grads]

    return train


def _parameters(target: Any) -> list[torch.Tensor]:
    return list(target.parameters()) if isinstance(target, torch.nn.Module) else []


def _synchronizer(args: tuple[Any, ...]) -> Callable[[], None]:
    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        return torch.cuda.synchronize
    return lambda: None


# --- the ONNX Runtime floor ----------------------------------------------------------------


class _AsModule(torch.nn.Module):
    """Lets ``torch.onnx.export`` take a plain function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


class _OrtFloor:
    """The whole model exported once and run by a bare ``InferenceSession``.

    Built on construction (export + session), so the first-call time of the "ort" row
    holds export, session creation and the first run, like the compiled backends'.
    """

    def __init__(self, target: Any, args: tuple[Any, ...]) -> None:
        import onnxruntime

        module = target if isinstance(target, torch.nn.Module) else _AsModule(target)
        # The exporter prints its progress on stdout and logs/warns about optional
        # packages (torchvision); none of it belongs in a benchmark table.
        onnx_logger = logging.getLogger("torch.onnx")
        level = onnx_logger.level
        onnx_logger.setLevel(logging.ERROR)
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = torch.onnx.export(module, args, dynamo=True, verbose=False)
        finally:
            onnx_logger.setLevel(level)
        if program is None:  # pragma: no cover - dynamo=True always returns a program
            raise errors.ExportError("torch.onnx.export returned no ONNXProgram")
        self.session = onnxruntime.InferenceSession(
            program.model_proto.SerializeToString(),
            sess_options=ortlab.backend.default_session_options(),
            providers=["CPUExecutionProvider"],
        )
        self.input_names = [i.name for i in self.session.get_inputs()]
        flat = [a for a in _flatten(args) if a is not None]
        if len(flat) != len(self.input_names):
            raise errors.ExportError(
                f"the exported model has {len(self.input_names)} inputs "
                f"({', '.join(self.input_names)}) but the call passes {len(flat)} values"
            )

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        flat = [a for a in _flatten(args) if a is not None]
        feed = {name: _to_numpy(a) for name, a in zip(self.input_names, flat)}
        return [torch.from_numpy(o) for o in self.session.run(None, feed)]


def _to_numpy(value: Any) -> Any:
    import numpy as np

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().contiguous().numpy()
    return np.asarray(value)


def _flatten(value: Any) -> Iterator[Any]:
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _flatten(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _flatten(v)
    else:
        yield value


def _flatten_tensors(value: Any) -> list[torch.Tensor]:
    if hasattr(value, "to_tuple") and callable(value.to_tuple):  # transformers ModelOutput
        value = value.to_tuple()
    return [v for v in _flatten(value) if isinstance(v, torch.Tensor)]


# --- machine facts -------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    """Cores, threads, library versions, Python and platform of this process."""
    import onnx
    import onnxruntime

    import ortlab

    facts: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "onnxscript": _version_of("onnxscript"),
        "ortlab": ortlab.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if hasattr(os, "getloadavg"):
        # Other work on the machine skews every timing; the load says how much there was
        # (taken before a benchmark starts, so it is the load of everything else).
        facts["load_avg_1m"] = round(os.getloadavg()[0], 2)
    if "transformers" in sys.modules:
        facts["transformers"] = _version_of("transformers")
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
    return facts


def _version_of(module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --- the zoo -------------------------------------------------------------------------------

# Batch sizes the issue asks for; tiny_llama's sequence length (8) is fixed by the zoo.
_ZOO_BATCH = {"gelu_mlp": 64, "cnn": 8, "transformer_layer": 8, "tiny_llama": 2}


def run_zoo(
    out_dir: str | os.PathLike[str],
    *,
    fast: bool = False,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    threads: int = 2,
    training: bool = False,
    progress: bool = True,
) -> str:
    """Benchmarks zoo models and writes ``results.md``, ``results.json``, ``results.png``.

    Args:
        out_dir: Folder for the results (created if missing).
        fast: Few iterations (a smoke run for tests and CI); without ``backends``, also
            leaves out inductor, whose first call builds C++ for up to a minute.
        models: Zoo model names; ``None`` means :data:`ZOO_MODELS`.
        backends: Backend names; ``None`` means :data:`ZOO_BACKENDS` (minus inductor when
            ``fast``).
        threads: torch and ONNX Runtime intra-op threads.
        training: Time forward + backward instead of inference (no "ort" row then).
        progress: Show a progress bar in a terminal or notebook.

    Returns:
        The markdown written to ``results.md``.
    """
    from ortlab import zoo

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models = tuple(models) if models is not None else ZOO_MODELS
    for m in models:
        zoo.get(m)  # unknown names fail before anything runs
    if backends is None:
        backends = tuple(b for b in ZOO_BACKENDS if not (fast and b == "inductor"))
    if training:
        backends = tuple(b for b in backends if b != "ort")
    backends = _check_backends(backends)
    timing = (
        dict(warmup=1, min_time=0.05, min_iters=3, max_iters=20)
        if fast
        else dict(warmup=5, min_time=2.0, min_iters=20, max_iters=2000)
    )
    machine = machine_facts()
    machine["torch_threads"] = threads  # what every bench() below runs with
    if any(b.startswith("ortlab") for b in backends):
        # Paid once per process by whichever model compiled first; kept out of its row.
        machine["exporter_warm_up_s"] = round(ortlab.backend.warm_up(), 2)
    results: list[BenchResult] = []
    for m in models:
        results.append(
            _bench_zoo_model(
                m, backends, threads=threads, training=training, progress=progress, **timing
            )
        )
    if "transformers" in sys.modules:  # imported by tiny_llama, after the facts were taken
        machine["transformers"] = _version_of("transformers")
    if hasattr(os, "getloadavg"):
        # Includes this benchmark's own threads; well above them means others competed.
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    markdown = zoo_markdown(results, fast=fast, machine=machine)
    (out / "results.md").write_text(markdown, encoding="utf-8")
    payload = {
        "machine": machine,
        "fast": fast,
        "models": [r.to_dict() for r in results],
    }
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    plot_zoo(results, out / "results.png")
    return markdown


def _bench_zoo_model(
    name: str, backends: Sequence[str], *, threads: int, training: bool, progress: bool, **kw
) -> BenchResult:
    from ortlab import zoo

    entry = zoo.get(name)
    batch = _ZOO_BATCH.get(name, entry.default_batch)
    try:
        model, inputs = entry.build(), entry.example_inputs(batch)
    except Exception as e:
        # e.g. tiny_llama without transformers: every backend row carries the reason.
        return _failed_result(name, backends, f"{type(e).__name__}: {_first_line(e)}")
    config: dict[str, Any] = dict(entry.dynamo_config)
    with torch._dynamo.config.patch(config):
        result = bench(
            model,
            *inputs,
            backends=backends,
            threads=threads,
            training=training,
            progress=progress,
            name=name,
            **kw,
        )
    result.settings["batch"] = batch
    result.settings["input_shapes"] = [
        list(t.shape) for t in inputs if isinstance(t, torch.Tensor)
    ]
    return result


def _failed_result(name: str, backends: Sequence[str], error: str) -> BenchResult:
    pd = _deps.require("pandas")
    rows = [_row(_Run(b, error=error), []) for b in backends]
    return BenchResult(
        frame=pd.DataFrame(rows, columns=list(COLUMNS)),
        machine=machine_facts(),
        settings={},
        name=name,
    )


TARGET_MODELS = ("gelu_mlp", "cnn", "transformer_layer")
"""Zoo models the performance targets are set on."""

RATIO_TARGETS = (
    ("ortlab", "ort", 1.25),
    ("ortlab", "eager", 1.05),
    ("ortlab-frozen", "ort", 1.10),
)
"""``(backend, reference, most)``: the backend's median over the reference's at most."""

FIRST_CALL_TARGET_S = 1.5
"""ortlab's first call (compile + run) at most, in seconds."""


def targets_table(results: Sequence[BenchResult]) -> list[list[str]] | None:
    """Rows ``[model, cell per target...]`` with ``"1.30 missed"`` / ``"0.96 met"``
    for the target models present, or ``None`` when none is (or the backends a target
    needs are missing, whose cells then read ``"n/a"``)."""
    rows = []
    for r in results:
        if r.name not in TARGET_MODELS:
            continue
        medians = {
            b: m
            for b, m, e in zip(r.frame["backend"], r.frame["median_ms"], r.frame["error"])
            if not e
        }
        firsts = dict(zip(r.frame["backend"], r.frame["first_call_s"]))
        cells = [r.name]
        for backend, ref, most in RATIO_TARGETS:
            ratio = medians.get(backend, math.nan) / medians.get(ref, math.nan)
            cells.append(_target_cell(ratio, most, _fmt_ratio(ratio)))
        first = firsts.get("ortlab", math.nan) if "ortlab" in medians else math.nan
        cells.append(_target_cell(first, FIRST_CALL_TARGET_S, f"{first:.2f} s"))
        rows.append(cells)
    return rows or None


def _target_cell(value: float, most: float, text: str) -> str:
    if not _finite(value):
        return "n/a"
    return f"{text} {'met' if value <= most else 'missed'}"


def zoo_markdown(
    results: Sequence[BenchResult],
    *,
    fast: bool = False,
    machine: Mapping[str, Any] | None = None,
) -> str:
    """The markdown report of :func:`run_zoo`: summary, full table, machine, settings."""
    if machine is None:
        machine = results[0].machine if results else machine_facts()
    settings = results[0].settings if results else {}
    backends = list(dict.fromkeys(b for r in results for b in r.frame["backend"]))
    lines = ["# ortlab benchmarks", ""]
    if fast:
        lines += [
            "> **Fast mode**: a handful of iterations; a smoke run, not a measurement.",
            "",
        ]
    mode = "training (forward + backward)" if settings.get("training") else "inference"
    lines += [
        f"Steady-state median per call in ms ({mode}, {machine['torch_threads']} threads); "
        "ratios below 1 are faster than the reference.",
        "",
    ]
    headers = ["model", *(f"{b} ms" for b in backends)]
    ratio_cols = [
        (b, ref)
        for b in ("ortlab", "ortlab-frozen")
        if b in backends
        for ref in ("ort", "eager")
        if ref in backends
    ]
    headers += [f"{b} / {ref}" for b, ref in ratio_cols]
    rows = []
    for r in results:
        medians = dict(zip(r.frame["backend"], r.frame["median_ms"]))
        errors_ = dict(zip(r.frame["backend"], r.frame["error"]))
        row = [r.name]
        for b in backends:
            row.append("error" if errors_.get(b) else _fmt_ms(medians.get(b, math.nan)))
        for b, ref in ratio_cols:
            row.append(_fmt_ratio(medians.get(b, math.nan) / medians.get(ref, math.nan)))
        rows.append(row)
    lines += [_markdown_table(headers, rows), ""]
    targets = None if settings.get("training") else targets_table(results)
    if targets:
        target_headers = [
            "model",
            *(f"{b} / {ref} ≤ {most:.2f}" for b, ref, most in RATIO_TARGETS),
            f"ortlab first call ≤ {FIRST_CALL_TARGET_S} s",
        ]
        lines += [
            "## Targets",
            "",
            "The project's performance targets, checked on this run (ratios of medians "
            "measured in this one run)." + (" Fast mode: not a measurement." if fast else ""),
            "",
            _markdown_table(target_headers, targets),
            "",
        ]
    lines += ["## Per backend", ""]
    headers_full = ["model", *_display_rows(results[0].frame)[0]] if results else []
    full_rows = [[r.name, *row] for r in results for row in _display_rows(r.frame)[1]]
    if results:
        lines += [_markdown_table(headers_full, full_rows), ""]
    lines += [
        "`first call` is compile + first run (for `ort`: export + session + run); "
        "`× eager` / `× ort` divide the median by eager's / ort's; `max |diff|` is against "
        "eager's output; `g/p/s` are the ortlab backend's graphs / partitions / sessions "
        "and `in ORT` its nodes that run in ONNX Runtime.",
        "",
    ]
    lines += ["## Machine", "", _markdown_table(("fact", "value"), _machine_rows(machine)), ""]
    shown = ("warmup", "iters", "min_time_s", "min_iters", "max_iters", "dynamic", "eval")
    lines += [
        "## Settings",
        "",
        _markdown_table(
            ("setting", "value"),
            [(k, settings.get(k)) for k in shown if k in settings]
            + [("batch / shapes", _shapes_text(results))],
        ),
        "",
    ]
    errors_seen = [
        (r.name, b, e)
        for r in results
        for b, e in zip(r.frame["backend"], r.frame["error"])
        if e
    ]
    if errors_seen:
        lines += ["## Errors", "", _markdown_table(("model", "backend", "error"), errors_seen)]
        lines.append("")
    return "\n".join(lines)


def plot_zoo(
    results: Sequence[BenchResult], path: str | os.PathLike[str] | None = None
) -> Any:
    """Grouped bars: each backend's median relative to eager, per zoo model.

    Args:
        results: One :class:`BenchResult` per model.
        path: Where to save the PNG; ``None`` only returns the figure.

    Returns:
        The matplotlib Figure.
    """
    if path is not None and "matplotlib.pyplot" not in sys.modules:
        _deps.require("matplotlib").use("Agg")  # headless when called from a terminal
    plt = _deps.require("matplotlib.pyplot")
    backends = list(dict.fromkeys(b for r in results for b in r.frame["backend"]))
    fig, (ax_rel, ax_first) = plt.subplots(
        1, 2, figsize=(max(8, 2.2 * len(results) + 4), 4), gridspec_kw={"width_ratios": [3, 2]}
    )
    width = 0.8 / max(1, len(backends))
    for i, b in enumerate(backends):
        rel, first = [], []
        for r in results:
            row = r.frame[r.frame["backend"] == b]
            # NaN (an error row) draws no bar; 0 would break the log scale.
            rel.append(float(row["ratio_to_eager"].iloc[0]) if len(row) else math.nan)
            first.append(_nan_to(row["first_call_s"].iloc[0], 0.0) if len(row) else 0.0)
        xs = [x + (i - (len(backends) - 1) / 2) * width for x in range(len(results))]
        ax_rel.bar(xs, rel, width, label=b, color=_backend_color(b))
        ax_first.bar(xs, first, width, label=b, color=_backend_color(b))
    names = [r.name for r in results]
    for ax in (ax_rel, ax_first):
        ax.set_xticks(range(len(results)), names, rotation=20, ha="right")
    ax_rel.axhline(1.0, color="black", linewidth=0.8)
    ax_rel.set_ylabel("median / eager median (log; lower is faster)")
    ax_rel.set_yscale("log")
    ax_rel.set_title("Steady state")
    ax_first.set_ylabel("seconds")
    ax_first.set_title("First call (compile + run)")
    ax_first.set_yscale("log")
    ax_first.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    threads = results[0].machine.get("torch_threads") if results else "?"
    fig.suptitle(f"ortlab benchmarks ({threads} threads)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


# --- formatting ----------------------------------------------------------------------------

_COLORS = {
    "eager": "#7f7f7f",
    "inductor": "#ff7f0e",
    "ortlab": "#1f77b4",
    "ortlab-frozen": "#17becf",
    "ort": "#2ca02c",
}


def _backend_color(name: str) -> str:
    return _COLORS.get(name, "#9467bd")


def _display_rows(frame: pandas.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = [
        "backend",
        "first call (s)",
        "median (ms)",
        "p10 (ms)",
        "p90 (ms)",
        "× eager",
        "× ort",
        "max |diff|",
        "g/p/s",
        "in ORT",
        "iters",
        "error",
    ]
    rows = []
    for rec in frame.to_dict("records"):
        counts = ""
        if _finite(rec["graphs"]):
            counts = f"{int(rec['graphs'])}/{int(rec['partitions'])}/{int(rec['sessions'])}"
        in_ort = ""
        if _finite(rec["nodes"]):
            in_ort = f"{int(rec['nodes_in_ort'])}/{int(rec['nodes'])}"
        rows.append(
            [
                rec["backend"],
                _fmt(rec["first_call_s"], "{:.2f}"),
                _fmt_ms(rec["median_ms"]),
                _fmt_ms(rec["p10_ms"]),
                _fmt_ms(rec["p90_ms"]),
                _fmt_ratio(rec["ratio_to_eager"]),
                _fmt_ratio(rec["ratio_to_ort"]),
                _fmt(rec["max_abs_diff"], "{:.1e}"),
                counts,
                in_ort,
                str(rec["iters"]),
                rec["error"],
            ]
        )
    return headers, rows


def _machine_rows(machine: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in machine.items()]


def _shapes_text(results: Sequence[BenchResult]) -> str:
    parts = []
    for r in results:
        shapes = r.settings.get("input_shapes")
        if shapes is not None:
            parts.append(f"{r.name}: " + " ".join("×".join(map(str, s)) for s in shapes))
    return "; ".join(parts)


def _markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        # Escaped like HTML too: markdown renderers pass tags through, names may hold any.
        text = html.escape(str(v), quote=False)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |"]
    lines.append("|" + "|".join(" --- " for _ in headers) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _frame_records(frame: pandas.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in frame.to_dict("records"):
        out.append({k: _json_value(v) for k, v in rec.items()})
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf
    if hasattr(value, "item"):  # numpy scalars
        return _json_value(value.item())
    return value


def _fmt(value: Any, spec: str) -> str:
    return spec.format(value) if _finite(value) else ("inf" if value == math.inf else "")


def _fmt_ms(value: Any) -> str:
    if not _finite(value):
        return ""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _fmt_ratio(value: Any) -> str:
    return f"{value:.2f}" if _finite(value) else ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _nan_to(value: Any, default: float) -> float:
    return float(value) if _finite(value) else default


def _percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _callable_name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__name__", type(fn).__name__)


def _check_backends(backends: Sequence[str]) -> tuple[str, ...]:
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


def _interactive() -> bool:
    # A notebook kernel (IPython already imported by it) or a terminal; never a pipe/CI.
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        shell = ipython.get_ipython()
        if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
            return True
    return sys.stderr.isatty()


def _progress_bar(total: int, label: str, *, enabled: bool) -> Any:
    if not enabled or not _interactive():
        return None
    tqdm = _deps.require("tqdm.auto")
    return tqdm.tqdm(total=total, desc=label, unit="backend", leave=False)


# --- command line --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ortlab._bench [--out DIR] [--fast] [--models a,b] [--backends a,b]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ortlab._bench", description=__doc__)
    parser.add_argument("--out", default="benchmarks", help="folder for results.*")
    parser.add_argument("--fast", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--models", help=f"comma-separated, default {','.join(ZOO_MODELS)}")
    parser.add_argument(
        "--backends", help=f"comma-separated, default {','.join(ZOO_BACKENDS)}"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--training", action="store_true", help="time forward + backward")
    ns = parser.parse_args(argv)
    markdown = run_zoo(
        ns.out,
        fast=ns.fast,
        models=ns.models.split(",") if ns.models else None,
        backends=ns.backends.split(",") if ns.backends else None,
        threads=ns.threads,
        training=ns.training,
    )
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
