"""``%ortcompile`` / ``%%ortcompile``: compile a call once, run it and eager, inspect.

Usage (after ``%load_ext ortlab``; ``%ortcompile -h`` or ``%ortcompile?`` prints every
option)::

    %ortcompile [options] model(x)

    %%ortcompile [options]
    x = torch.randn(8, 2)     # statements: set-up, run in the notebook's namespace
    model(x)                  # last expression: the call that is compiled

This module owns the magic: the choice of mode, the run, and :class:`OrtCompileResult`;
its options (one table, from which both the IPython parser with its generated help and
the plain parser of :func:`parse_arguments` are built) are :mod:`ortlab._magic_options`.

What a call does (:func:`run_ortcompile`):

- **mode**: inference (under ``torch.no_grad()``: one inference graph, no backward) for a
  module in ``eval()`` mode or a function called with grad disabled; training (forward
  and backward, gradients of the parameters and floating-point inputs compared) for a
  module in ``train()`` mode or a function called with grad enabled. ``--infer`` and
  ``--train`` choose; the verdict names the mode.
- **compile once**: the callee is compiled with one fresh :class:`~ortlab.OrtBackend`
  (every ``OrtBackendOptions`` field settable, ``--option KEY=VALUE``); that compiled call
  and eager run once each from the same RNG state (the eager side on a deep copy of a
  module), and the numerics report is built from that same call's captured partition
  runs (:func:`ortlab.numerics._diff.compare_runs`, the second half of
  ``diff_compiled``) — nothing is compiled a second time.
- ``--bench N``: both sides timed by the bench engine (:mod:`ortlab.bench._engine`:
  warm-up, interleaved blocks, median and p10–p90), in the run's mode.
- ``--profile N``: :func:`ortlab.profile` of the compiled call (N runs, in the run's mode):
  a Profile tab (time by FX node, module, source line) and, for inference, the options
  tried on this model with the gain measured (the verdict names the recommended ones).
- the Inspector is displayed under a one-line verdict and an :class:`OrtCompileResult`
  returned. Bad input (no call expression, an unknown option, a bad option value, an
  undefined name) is a one-line usage error, not a traceback.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import ortlab.backend
from ortlab import _deps, _harness, _html, _magic_options, errors, profiling
from ortlab._magic_options import BENCH_WARMUP, USAGE, UsageError, parse_arguments
from ortlab.bench import _engine, _format, _machine
from ortlab.numerics import _compare, _diff, _runner

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend

__all__ = [
    "OrtCompileResult",
    "load_ipython_extension",
    "max_abs_diff",
    "ortcompile",
    "parse_arguments",
    "run_ortcompile",
]


def _training(callee: Any, options: argparse.Namespace) -> bool:
    """The mode: ``--train``/``--infer``; else a module's ``training`` flag (under grad
    mode), else the current grad mode."""
    if options.train or options.infer:
        return bool(options.train)
    if isinstance(callee, torch.nn.Module):
        return callee.training and torch.is_grad_enabled()
    return torch.is_grad_enabled()


def max_abs_diff(output: Any, reference: Any) -> float:
    """Largest ``|output - reference|`` over every leaf, by the one comparator
    (:mod:`ortlab.numerics._compare`): NaN against NaN is no difference; a NaN or Inf on
    one side only, a shape mismatch or a different structure is ``inf``."""
    return _compare.max_abs_difference(output, reference)


@dataclasses.dataclass
class OrtCompileResult:
    """What ``%ortcompile`` did: the compiled callable, both outputs and the verdict.

    Attributes:
        expression: The call expression as written.
        compiled: The compiled callee: call it again with other positional inputs (the
            keyword arguments of the magic's call stay bound).
        backend: Its fresh :class:`~ortlab.OrtBackend`: the records of this one compile.
        output: The compiled call's output (tensors detached).
        eager_output: The eager call's output on the same arguments and RNG state.
        max_abs_diff: Largest absolute difference between the two outputs.
        first_call_seconds: Wall time of the first compiled call (compile + run; with the
            backward in training mode).
        eager_seconds: Wall time of the eager call (likewise).
        mode: ``"inference"`` (under ``torch.no_grad()``) or ``"training"`` (forward +
            backward).
        gradients: Training: ``{"grad[name]": tensor}`` of the compiled call, for the
            parameters and the floating-point inputs; else ``None``.
        eager_gradients: The same of the eager call.
        grad_max_abs_diff: Training: largest absolute difference between the gradients.
        diff: The numerics report of this call, or ``None`` (``--no-diff``, or it failed).
        diff_error: Why the numerics report is missing, when ``--diff`` was asked.
        bench: With ``--bench N``, milliseconds per call from the bench engine
            (:mod:`ortlab.bench._engine`: ``warmup`` untimed calls, then N timed calls of
            each side in interleaved blocks): ``ortlab_ms``/``eager_ms`` (medians),
            ``ortlab_p10_ms``, ``ortlab_p90_ms``, ``eager_p10_ms``, ``eager_p90_ms``,
            ``speedup`` (eager / ortlab medians), ``calls``, ``warmup``; else ``None``.
        bench_error: Why the timing is missing, when ``--bench`` was asked.
        freeze: With ``--bench N`` on an inference call of a module whose parameters
            enter ONNX Runtime as inputs: ``freeze_parameters=True`` compiled, checked
            and timed against this compile (:class:`~ortlab.profiling.Advice`).
        lab_seconds: The magic's own time beside the first call: the eager run, the
            numerics, the timing, the drawing (``0`` until the call ends).
        lab_steps: Those seconds per step.
        profile: With ``--profile N``, the :class:`~ortlab.profiling.Profile` of the
            compiled call (inference: with the options tried on the model); else ``None``.
        profile_error: Why the profile is missing, when ``--profile`` was asked.
        inspector: The :class:`~ortlab.views.Inspector` shown under the verdict.
        atol: Absolute tolerance given with ``--atol``.
        rtol: Relative tolerance given with ``--rtol``.
        notes: Warnings about ortlab raised by the compiled call, and anything the
            comparison could not do.
    """

    expression: str
    compiled: Any
    backend: OrtBackend
    output: Any
    eager_output: Any
    max_abs_diff: float
    first_call_seconds: float
    eager_seconds: float = 0.0
    diff: Any = None
    diff_error: str | None = None
    bench: dict[str, float] | None = None
    inspector: Any = None
    atol: float | None = None
    rtol: float | None = None
    mode: str = "inference"
    gradients: dict[str, torch.Tensor | None] | None = None
    eager_gradients: dict[str, torch.Tensor | None] | None = None
    grad_max_abs_diff: float | None = None
    bench_error: str | None = None
    lab_seconds: float = 0.0
    lab_steps: dict[str, float] = dataclasses.field(default_factory=dict)
    profile: Any = None
    profile_error: str | None = None
    freeze: Any = None
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def within_tolerance(self) -> bool | None:
        """When a tolerance was given: every output (and gradient) within it, element by
        element, as ``torch.testing.assert_close`` decides (a tolerance not given is the
        dtype's default); ``None`` otherwise."""
        if self.atol is None and self.rtol is None:
            return None
        diffs = _compare.compare_outputs(
            self.output, self.eager_output, atol=self.atol, rtol=self.rtol
        )
        if self.gradients is not None:
            diffs += _compare.compare_outputs(
                self.gradients, self.eager_gradients, atol=self.atol, rtol=self.rtol
            )
        return all(d.passed for d in diffs)

    @property
    def verdict(self) -> str:
        """One line: mode, nodes in ORT / total, max abs diff, first-call time (and more)."""
        s = self.backend.summary()
        training = self.mode == "training"
        parts = [
            f"ortlab, {self.mode}: {s['nodes_in_ort']}/{s['nodes']} nodes in ONNX Runtime "
            f"({s['graphs']} graph{'s' if s['graphs'] != 1 else ''}, "
            f"{s['partitions']} partition{'s' if s['partitions'] != 1 else ''}, "
            f"{s['sessions']} session{'s' if s['sessions'] != 1 else ''})",
            f"max abs diff {self.max_abs_diff:.3g}",
            f"first call {self.first_call_seconds:.2f} s"
            + (" (forward + backward)" if training else "")
            + self._lab_text(),
        ]
        if self.grad_max_abs_diff is not None:
            parts[1] += f", gradients {self.grad_max_abs_diff:.3g}"
        ok = self.within_tolerance
        if ok is not None:
            parts[1] += " (within tolerance)" if ok else " (OUTSIDE tolerance)"
        if self.diff is not None:
            parts.append("numerics " + ("passed" if self.diff.passed else "FAILED"))
        elif self.diff_error:
            parts.append(f"numerics unavailable: {self.diff_error}")
        if self.bench:
            parts.append(_bench_line(self.bench))
        elif self.bench_error:
            parts.append(f"timing failed: {self.bench_error}")
        if self.freeze is not None:
            parts.append(self.freeze.text)
        if self.profile is not None:
            parts.append(_profile_line(self.profile))
        elif self.profile_error:
            parts.append(f"profile failed: {self.profile_error}")
        if s["failed_partitions"]:
            parts.append(f"{s['failed_partitions']} partition(s) fell back to eager")
        if not s["graphs"]:
            parts.append(
                "no graph reached ortlab: Dynamo ran the call in PyTorch (see the notes)"
            )
        return " · ".join(parts)

    def _lab_text(self) -> str:
        """`` · lab 1.9 s (numerics 1.2 s, drawing 0.3 s)``: the lab's own time beside
        the first call's (``""`` before it is known)."""
        if self.lab_seconds <= 0:
            return ""
        steps = ", ".join(
            f"{name} {seconds:.1f} s"
            for name, seconds in self.lab_steps.items()
            if seconds >= 0.05
        )
        return f" · lab {self.lab_seconds:.1f} s" + (f" ({steps})" if steps else "")

    def __repr__(self) -> str:
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return f"OrtCompileResult({self.expression}: {self.verdict}){notes}"

    def _repr_html_(self) -> str:
        notes = "".join(f"<br>Note: {_html.esc(n)}" for n in self.notes)
        return (
            '<div class="ortlab"><b>%ortcompile</b> '
            f"<code>{_html.esc(self.expression)}</code><br>{_html.esc(self.verdict)}"
            f"{notes}</div>"
        )


def _profile_line(profile: Any) -> str:
    """The profile in the verdict: its call, the top module, the recommended options."""
    modules = [g for g in profile.by_module() if g.key]
    top = ""
    if modules and profile.call_seconds > 0:
        share = modules[0].seconds / profile.call_seconds
        top = f", top module {modules[0].key} {share:.0%}"
    line = f"profile {profile.call_seconds * 1e3:.3g} ms ({profile.coverage:.0%} attributed"
    line += f"{top})"
    advised = [
        f"{a.setting} x{a.gain:.2f}" for a in profile.advice if a.recommended and a.gain
    ]
    return line + (f"; measured here, try {', '.join(advised)}" if advised else "")


def _evaluate_call(call: ast.Call, namespace: dict[str, Any]) -> tuple[Any, list[Any], dict]:
    """Evaluates the callee and arguments of ``call`` in ``namespace``."""

    def ev(node: ast.expr) -> Any:
        code = compile(ast.Expression(body=node), "<ortcompile>", "eval")
        return eval(code, namespace)

    try:
        callee = ev(call.func)
        args: list[Any] = []
        for a in call.args:
            if isinstance(a, ast.Starred):
                args.extend(ev(a.value))
            else:
                args.append(ev(a))
        kwargs: dict[str, Any] = {}
        for k in call.keywords:
            if k.arg is None:
                kwargs.update(ev(k.value))
            else:
                kwargs[k.arg] = ev(k.value)
    except NameError as e:
        raise UsageError(
            f"name {e.name!r} is not defined (run the cell that defines it)"
        ) from None
    except Exception as e:
        raise UsageError(
            f"could not evaluate the call's callee or arguments: {errors.describe(e)}"
        ) from None
    if not callable(callee):
        raise UsageError(f"{ast.unparse(call.func)} is not callable ({type(callee).__name__})")
    return callee, args, kwargs


def _parse_call(source: str) -> ast.Call:
    source = source.strip()
    if not source:
        raise UsageError(f"no call expression given. Usage: {USAGE}")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise UsageError(f"not a Python expression: {e.msg}: {source!r}") from None
    if not isinstance(tree.body, ast.Call):
        raise UsageError(
            f"{source!r} is not a call expression; write the call to compile, e.g. model(x)"
        )
    return tree.body


_GENERATE = (
    "generate() calls the module's forward: %ortcompile compiled model.forward and ran "
    "generate() with it; to keep it compiled, model.forward = ortlab.compile(model.forward)"
)
_FREEZE_HINT = (
    "the module's parameters enter ONNX Runtime as inputs every call (it cannot pre-pack "
    "or fold them): %ortcompile --bench 20 ... also compiles with freeze_parameters=True "
    "and measures the gain on this model"
)
_NO_GRAPH = (
    "Dynamo compiled no graph for this call, so it ran in PyTorch without ortlab: it "
    "computes nothing (Dynamo hands a graph without operations to no backend), the "
    "function is skipped by Dynamo (torch.compiler.disable, a C extension), or its frame "
    "reached Dynamo's recompile limit (torch.compiler.config.recompile_limit): compile "
    "with --dynamic, or raise torch._dynamo.config.cache_size_limit"
)


def _bench_line(b: dict[str, float]) -> str:
    """The timing in the verdict, three significant digits, and why it cannot be trusted
    when it cannot (a busy machine, times spread more than twice from p10 to p90)."""
    ms = _format.fmt3
    line = (
        f"median [p10–p90] of {b['calls']:.0f} calls: ortlab {ms(b['ortlab_ms'])} ms "
        f"[{ms(b['ortlab_p10_ms'])}–{ms(b['ortlab_p90_ms'])}] vs eager "
        f"{ms(b['eager_ms'])} ms [{ms(b['eager_p10_ms'])}–{ms(b['eager_p90_ms'])}] "
        f"(speed-up ×{ms(b['speedup'])})"
    )
    notes = _bench_trust(b)
    if notes:
        line += " — NOT TRUSTWORTHY: " + "; ".join(notes)
    return line


def _bench_trust(b: dict[str, float]) -> list[str]:
    return _machine.trust_notes(
        load=b.get("load_avg"),
        cores=int(b["cores"]) if b.get("cores") else None,
        spreads={
            "ortlab": (b["ortlab_p10_ms"], b["ortlab_p90_ms"]),
            "eager": (b["eager_p10_ms"], b["eager_p90_ms"]),
        },
    )


def _bench(runs: _runner.Runs, n: int) -> dict[str, float]:
    """Both sides of ``runs`` timed by the bench engine, in the runs' mode, with the
    machine's load (the larger of before and after) and cores.

    Raises:
        OrtlabError: a call failed while being timed.
    """
    before = _machine.load_average()
    timed = _engine.measure(
        {"ortlab": runs.rerun, "eager": runs.eager_rerun},
        _engine.Timing(warmup=BENCH_WARMUP, iters=n),
    )
    after = _machine.load_average()
    loads = [v for v in (before, after) if v is not None]
    for m in timed.values():
        if m.error is not None:
            raise errors.OrtlabError(f"the {m.name} call failed: {m.error}")
    ort, eager = timed["ortlab"], timed["eager"]
    return {
        "calls": n,
        "warmup": BENCH_WARMUP,
        "ortlab_ms": ort.median_ms,
        "ortlab_p10_ms": ort.p10_ms,
        "ortlab_p90_ms": ort.p90_ms,
        "eager_ms": eager.median_ms,
        "eager_p10_ms": eager.p10_ms,
        "eager_p90_ms": eager.p90_ms,
        "speedup": eager.median_ms / ort.median_ms if ort.median_ms else math.inf,
        "cores": _machine.usable_cores(),
        **({"load_avg": max(loads)} if loads else {}),
    }


def run_ortcompile(
    options: argparse.Namespace,
    expression: str,
    namespace: dict[str, Any],
    *,
    display: Any = None,
) -> OrtCompileResult:
    """Compiles, runs and compares the call ``expression`` (the magic without IPython).

    Args:
        options: Parsed options (:func:`parse_arguments`).
        expression: The call expression, e.g. ``"model(x)"``.
        namespace: Where names are looked up (the notebook's ``user_ns``).
        display: Called with the Inspector to show it (``IPython.display.display``).

    Raises:
        UsageError: the expression is not a call, names in it are undefined, or a
            backend option is unknown or invalid.
    """
    from ortlab import views

    callee, args, kwargs = _evaluate_call(_parse_call(expression), namespace)
    callee = _harness.unwrap_compiled(callee)  # compiling a compiled call would nest
    backend_options = _magic_options.backend_options(options, namespace)
    generating = _harness.generate_method(callee)
    training = False if generating is not None else _training(callee, options)
    compiled, backend, callee = _compile_call(callee, kwargs, options, backend_options)
    status = views.Status(
        f"%ortcompile {expression.strip()}",
        live=display is not None and _harness.in_notebook(),
    )
    if display is not None:
        status.show(display)
    # The one compiled call (it compiles) and the eager one; the report reuses its runs.
    runs = _runner.run_compiled(
        compiled,
        functools.partial(callee, **kwargs) if kwargs else callee,
        args,
        backend,
        backward=training,
        capture=options.diff,
        progress=status,
    )
    result = _result_of(expression, compiled, backend, runs, options, training)
    result.notes += _notes(result, callee, options, backend_options)
    _lab_steps(result, runs, options, callee, tuple(args), status)
    status.step("drawing")
    result.inspector = views.Inspector(
        backend, diff=result.diff, headline=result.verdict, profile=result.profile
    )
    if display is not None:
        display(result.inspector)
    status.done()
    result.lab_seconds = max(0.0, status.seconds - result.first_call_seconds)
    result.lab_steps = {_runner.EAGER_STEP: runs.eager.seconds}
    result.lab_steps.update(
        (step, seconds)
        for step, seconds in status.timed().items()
        if step not in (_runner.EAGER_STEP, _runner.COMPILED_STEP)  # the first call's
    )
    result.inspector.set_headline(result.verdict)
    return result


def _compile_call(
    callee: Any,
    kwargs: dict[str, Any],
    options: argparse.Namespace,
    backend_options: ortlab.backend.OrtBackendOptions,
) -> tuple[Callable[..., Any], OrtBackend, Any]:
    """The compiled call (taking the positional arguments), its backend, and what runs
    eagerly beside it: ``callee`` itself, or for a module's ``generate`` the module's own
    ``generate`` run with its forward compiled (what ``generate`` calls)."""
    compile_options: dict[str, Any] = dict(
        dynamic=False if options.static else (True if options.dynamic else None),
        fullgraph=options.fullgraph,
        options=backend_options,
    )
    # A fresh code object per magic call: a fresh backend per call on the same forward
    # would otherwise pile up recompilations until Dynamo's limit falls back to eager.
    generating = _harness.generate_method(callee)
    if generating is None:
        entry = _harness.fresh_entry(callee, name="ortcompile_call", kwargs=kwargs)
        compiled = ortlab.backend.compile(entry, **compile_options)
        return compiled, ortlab.backend.backend_of(compiled), callee
    forward = ortlab.backend.compile(
        _harness.fresh_forward(generating.__self__, name="ortcompile_forward"),
        **compile_options,
    )
    backend = ortlab.backend.backend_of(forward)
    compiled = _harness.fresh_entry(
        _harness.forward_compiled_in(generating, forward),
        name="ortcompile_generate",
        kwargs=kwargs,
    )
    compiled.ortlab_backend = backend  # type: ignore[attr-defined]
    return compiled, backend, generating


def _result_of(
    expression: str,
    compiled: Any,
    backend: OrtBackend,
    runs: _runner.Runs,
    options: argparse.Namespace,
    training: bool,
) -> OrtCompileResult:
    result = OrtCompileResult(
        expression=expression.strip(),
        compiled=compiled,
        backend=backend,
        output=runs.compiled.value,
        eager_output=runs.eager.value,
        max_abs_diff=max_abs_diff(runs.compiled.value, runs.eager.value),
        first_call_seconds=runs.compiled.seconds,
        eager_seconds=runs.eager.seconds,
        atol=options.atol,
        rtol=options.rtol,
        mode="training" if training else "inference",
        notes=list(runs.notes),
    )
    if training:
        result.gradients = dict(runs.compiled.grads)
        result.eager_gradients = dict(runs.eager.grads)
        result.grad_max_abs_diff = max_abs_diff(result.gradients, result.eager_gradients)
    return result


def _notes(
    result: OrtCompileResult,
    callee: Any,
    options: argparse.Namespace,
    backend_options: ortlab.backend.OrtBackendOptions,
) -> list[str]:
    """What the verdict alone does not say: generate() compiled through its forward,
    parameters that freezing could help (measured with ``--bench``), no graph."""
    notes = []
    if _harness.generate_method(callee) is not None:
        notes.append(_GENERATE)
    frozen = backend_options.freeze_parameters
    if result.mode == "inference" and not (options.bench or frozen):
        if isinstance(callee, torch.nn.Module) and any(True for _ in callee.parameters()):
            notes.append(_FREEZE_HINT)
    if not result.backend.graphs:
        notes.append(_NO_GRAPH)
    return notes


def _lab_steps(
    result: OrtCompileResult,
    runs: _runner.Runs,
    options: argparse.Namespace,
    callee: Any,
    args: tuple[Any, ...],
    status: Any,
) -> None:
    """The numerics, the timing (with the freeze trial) and the profile asked for, each
    a step of the status line; a failure is said on the result, never raised."""
    training = result.mode == "training"
    if options.diff:
        status.step("numerics")
        try:
            result.diff = _diff.compare_runs(
                runs, atol=options.atol, rtol=options.rtol, backward=training
            )
        except Exception as e:  # the compiled result stands; say why numerics are missing
            result.diff_error = errors.describe(e)
    if options.bench:
        status.step(f"timing {options.bench} calls of each")
        try:
            result.bench = _bench(runs, options.bench)
            result.notes.extend(_bench_trust(result.bench))
        except errors.OrtlabError as e:
            result.bench_error = str(e)
        if not training and isinstance(callee, torch.nn.Module):
            status.step("trying freeze_parameters=True")
            with torch.no_grad():  # an inference call's mode, as --profile runs it
                result.freeze = profiling.freeze_trial(
                    result.compiled, args, {}, runs=options.bench, model=callee
                )
    if options.profile:
        status.step("profile")
        try:
            with torch.set_grad_enabled(training):
                result.profile = profiling.profile(
                    result.compiled, *args, runs=options.profile, advise=not training
                )
        except errors.OrtlabError as e:
            result.profile_error = str(e)


def ortcompile(
    shell: Any,
    line: str,
    cell: str | None = None,
    *,
    parser: argparse.ArgumentParser | None = None,
) -> OrtCompileResult | None:
    """The magic's body: ``line`` holds options (and, for the line magic, the call).

    Args:
        shell: The IPython shell (its ``user_ns`` is the namespace).
        line: The magic's line.
        cell: The cell's body for ``%%ortcompile``.
        parser: The options' parser (see :func:`parse_arguments`).

    Returns:
        The result, or ``None`` after printing the help (``-h``).

    Raises:
        IPython.core.error.UsageError: bad input, shown as one line.
    """
    display_mod = _deps.require("IPython.display")
    error_mod = _deps.require("IPython.core.error")
    parser = parser if parser is not None else _magic_options.parser_of_options()
    try:
        options, rest = parse_arguments(line, parser=parser)
        if options.help:
            print(parser.format_help().removeprefix("::\n\n"))
            return None
        if cell is None:
            expression = rest
        else:
            if rest:
                raise UsageError(
                    f"%%ortcompile takes only options on its first line, got {rest!r}. "
                    f"Usage: %%ortcompile [options], then the cell"
                )
            expression = _split_cell(cell, shell)
        return run_ortcompile(options, expression, shell.user_ns, display=display_mod.display)
    except UsageError as e:
        raise error_mod.UsageError(f"%ortcompile: {e}") from None


def _split_cell(cell: str, shell: Any) -> str:
    """Runs a cell's statements but the last as set-up; returns the last expression."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as e:
        raise UsageError(f"the cell is not valid Python: {e.msg} (line {e.lineno})") from None
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise UsageError("the cell's last line must be the call to compile, e.g. model(x)")
    setup = ast.Module(body=tree.body[:-1], type_ignores=[])
    if setup.body:
        code = compile(setup, "<ortcompile set-up>", "exec")
        exec(code, shell.user_ns)
    return ast.unparse(tree.body[-1].value)


def _magic(ipython: Any) -> Callable[..., OrtCompileResult | None]:
    """The magic function for ``ipython``, declared with IPython's ``magic_arguments``
    from the options' table (:data:`ortlab._magic_options.OPTIONS`): its docstring (what
    ``%ortcompile?`` and ``-h`` show) is the generated help, and its parser parses the
    options."""
    magic_arguments = _deps.require("IPython.core.magic_arguments")

    def magic(line: str, cell: str | None = None) -> OrtCompileResult | None:
        return ortcompile(ipython, line, cell, parser=decorated.parser)

    magic.__doc__ = _magic_options.DESCRIPTION
    decorated: Any = magic
    # magic_arguments adds arguments in source order, i.e. the reverse of application.
    for names, settings in reversed(_magic_options.OPTIONS):
        decorated = magic_arguments.argument(*names, **settings)(decorated)
    decorated = magic_arguments.kwds(epilog=_magic_options.epilog())(decorated)
    return magic_arguments.magic_arguments(name="ortcompile")(decorated)


def load_ipython_extension(ipython: Any) -> None:
    """Registers ``%ortcompile`` / ``%%ortcompile`` (``%load_ext ortlab`` calls this)."""
    ipython.register_magic_function(
        _magic(ipython), magic_kind="line_cell", magic_name="ortcompile"
    )
