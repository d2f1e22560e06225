"""``%ortcompile`` / ``%%ortcompile``: compile a call with ortlab, run it and eager, inspect.

Usage (after ``%load_ext ortlab``)::

    %ortcompile [--static] [--ep NAME]... [--no-aot] [--fullgraph] [--atol A] [--rtol R]
                [--bench N] [--diff | --no-diff] model(x)

    %%ortcompile [options]
    x = torch.randn(8, 2)     # statements: set-up, run in the notebook's namespace
    model(x)                  # last expression: the call that is compiled

The callee of the call is compiled with a fresh :class:`~ortlab.OrtBackend`, run, and run
eagerly on the same arguments. The magic displays the Inspector under a one-line verdict
(nodes in ORT / total, max abs diff, first-call time) and returns an
:class:`OrtCompileResult` for later cells. With ``--diff`` (the default) the numerics
report of :func:`ortlab.diff` adds a Numerics tab. Bad input — no call expression, an
unknown option, an undefined name — is a one-line usage error, not a traceback.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import math
import shlex
import time
from typing import TYPE_CHECKING, Any

from ortlab import _harness, _html, errors
from ortlab.bench import _engine
from ortlab.numerics import _compare

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

USAGE = (
    "%ortcompile [--static] [--ep NAME]... [--no-aot] [--fullgraph] [--atol A] [--rtol R] "
    "[--bench N] [--diff|--no-diff] model(args)"
)


class _UsageError(Exception):
    """Raised while parsing; turned into IPython's ``UsageError`` (no traceback)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and sys.exit
        raise _UsageError(f"{message}. Usage: {USAGE}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%ortcompile", add_help=False, allow_abbrev=False)
    p.add_argument("--static", action="store_true", help="compile with dynamic=False")
    p.add_argument("--ep", action="append", default=[], metavar="NAME", help="preferred EP")
    p.add_argument("--no-aot", action="store_true", help="use_aot_autograd=False")
    p.add_argument("--fullgraph", action="store_true", help="torch.compile(fullgraph=True)")
    p.add_argument("--atol", type=float, default=None)
    p.add_argument("--rtol", type=float, default=None)
    p.add_argument("--bench", type=int, default=0, metavar="N", help="time N calls each")
    p.add_argument("--diff", dest="diff", action="store_true", default=True)
    p.add_argument("--no-diff", dest="diff", action="store_false")
    return p


def parse_arguments(line: str) -> tuple[argparse.Namespace, str]:
    """Splits a magic line into options and the call expression.

    Options come first; the expression starts at the first word that is not an option
    (or an option's value).

    Raises:
        _UsageError: an unknown option, a bad value, or no expression.
    """
    parser = _parser()
    takes_value = {"--ep", "--atol", "--rtol", "--bench"}
    rest = line.strip()
    words: list[str] = []
    while rest.startswith("-"):
        try:
            word = shlex.split(rest.split(None, 1)[0])[0]
        except ValueError as e:
            raise _UsageError(f"cannot parse options: {e}. Usage: {USAGE}") from None
        pieces = rest.split(None, 1)
        rest = pieces[1].lstrip() if len(pieces) > 1 else ""
        words.append(word)
        name = word.split("=", 1)[0]
        if name in takes_value and "=" not in word:
            if not rest:
                raise _UsageError(f"option {name} needs a value. Usage: {USAGE}")
            pieces = rest.split(None, 1)
            words.append(pieces[0])
            rest = pieces[1].lstrip() if len(pieces) > 1 else ""
    options = parser.parse_args(words)
    if options.bench < 0:
        raise _UsageError(f"--bench needs a count >= 0, got {options.bench}. Usage: {USAGE}")
    return options, rest


def _provider_name(name: str) -> str:
    return name if name.endswith("ExecutionProvider") else f"{name}ExecutionProvider"


def max_abs_diff(output: Any, reference: Any) -> float:
    """Largest ``|output - reference|`` over every leaf, by the one comparator
    (:mod:`ortlab.numerics._compare`): NaN against NaN is no difference; a NaN or Inf on
    one side only, a shape mismatch or a different structure is ``inf``."""
    return _compare.max_abs_error(_compare.compare_outputs(output, reference))


@dataclasses.dataclass
class OrtCompileResult:
    """What ``%ortcompile`` did: the compiled callable, both outputs and the verdict.

    Attributes:
        expression: The call expression as written.
        compiled: The compiled callee: call it again with other positional inputs (the
            keyword arguments of the magic's call stay bound).
        backend: Its fresh :class:`~ortlab.OrtBackend` (records of every graph).
        output: The compiled call's output.
        eager_output: The eager call's output on the same arguments.
        max_abs_diff: Largest absolute difference between the two outputs.
        first_call_seconds: Wall time of the first compiled call (compile + run).
        eager_seconds: Wall time of the eager call.
        diff: The :func:`ortlab.diff` report, or ``None`` (``--no-diff``, or it failed).
        diff_error: Why the numerics report is missing, when ``--diff`` was asked.
        bench: Median milliseconds per call (``{"ortlab_ms", "eager_ms", "speedup"}``)
            with ``--bench N``: N calls of each, timed interleaved by the bench engine
            (:mod:`ortlab.bench._engine`); else ``None``.
        inspector: The :class:`~ortlab.views.Inspector` shown under the verdict.
        atol: Absolute tolerance given with ``--atol``.
        rtol: Relative tolerance given with ``--rtol``.
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

    @property
    def within_tolerance(self) -> bool | None:
        """When a tolerance was given: every output within it, element by element, as
        ``torch.testing.assert_close`` decides (a tolerance not given is the dtype's
        default); ``None`` otherwise."""
        if self.atol is None and self.rtol is None:
            return None
        diffs = _compare.compare_outputs(
            self.output, self.eager_output, atol=self.atol, rtol=self.rtol
        )
        return all(d.passed for d in diffs)

    @property
    def verdict(self) -> str:
        """One line: nodes in ORT / total, max abs diff, first-call time (and more)."""
        s = self.backend.summary()
        parts = [
            f"ortlab: {s['nodes_in_ort']}/{s['nodes']} nodes in ONNX Runtime "
            f"({s['partitions']} partition{'s' if s['partitions'] != 1 else ''}, "
            f"{s['sessions']} session{'s' if s['sessions'] != 1 else ''})",
            f"max abs diff {self.max_abs_diff:.3g}",
            f"first call {self.first_call_seconds:.2f} s",
        ]
        ok = self.within_tolerance
        if ok is not None:
            parts[1] += " (within tolerance)" if ok else " (OUTSIDE tolerance)"
        if self.diff is not None:
            parts.append("numerics " + ("passed" if self.diff.passed else "FAILED"))
        elif self.diff_error:
            parts.append(f"numerics unavailable: {self.diff_error}")
        if self.bench:
            parts.append(
                f"{self.bench['ortlab_ms']:.3f} ms/call vs eager "
                f"{self.bench['eager_ms']:.3f} ms (x{self.bench['speedup']:.2f})"
            )
        if s["failed_partitions"]:
            parts.append(f"{s['failed_partitions']} partition(s) fell back to eager")
        return " · ".join(parts)

    def __repr__(self) -> str:
        return f"OrtCompileResult({self.expression}: {self.verdict})"

    def _repr_html_(self) -> str:
        return (
            '<div class="ortlab"><b>%ortcompile</b> '
            f"<code>{_html.esc(self.expression)}</code><br>{_html.esc(self.verdict)}</div>"
        )


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
        raise _UsageError(
            f"name {e.name!r} is not defined (run the cell that defines it)"
        ) from None
    except Exception as e:
        raise _UsageError(
            f"could not evaluate the call's callee or arguments: {type(e).__name__}: {e}"
        ) from None
    if not callable(callee):
        raise _UsageError(
            f"{ast.unparse(call.func)} is not callable ({type(callee).__name__})"
        )
    return callee, args, kwargs


def _parse_call(source: str) -> ast.Call:
    source = source.strip()
    if not source:
        raise _UsageError(f"no call expression given. Usage: {USAGE}")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise _UsageError(f"not a Python expression: {e.msg}: {source!r}") from None
    if not isinstance(tree.body, ast.Call):
        raise _UsageError(
            f"{source!r} is not a call expression; write the call to compile, e.g. model(x)"
        )
    return tree.body


def _bench(
    compiled: Any, callee: Any, args: list[Any], kwargs: dict[str, Any], n: int
) -> dict[str, float]:
    """Median ms per call of the compiled and the eager callee, ``n`` calls each.

    Raises:
        OrtlabError: a call failed while being timed.
    """
    timed = _engine.measure(
        {"ortlab": lambda: compiled(*args), "eager": lambda: callee(*args, **kwargs)},
        _engine.Timing(warmup=1, iters=n),
    )
    for m in timed.values():
        if m.error is not None:
            raise errors.OrtlabError(
                f"%ortcompile --bench: the {m.name} call failed: {m.error}"
            )
    ort_ms, eager_ms = timed["ortlab"].median_ms, timed["eager"].median_ms
    return {
        "ortlab_ms": ort_ms,
        "eager_ms": eager_ms,
        "speedup": eager_ms / ort_ms if ort_ms else math.inf,
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
        _UsageError: the expression is not a call, or names in it are undefined.
    """
    import ortlab
    from ortlab import views

    call = _parse_call(expression)
    callee, args, kwargs = _evaluate_call(call, namespace)
    backend_options: dict[str, Any] = {"use_aot_autograd": not options.no_aot}
    if options.ep:
        backend_options["preferred_execution_providers"] = [
            _provider_name(e) for e in options.ep
        ]
    # A fresh code object per magic call: a fresh backend per call on the same forward
    # would otherwise pile up recompilations until Dynamo's limit falls back to eager.
    compiled = ortlab.compile(
        _harness.fresh_entry(callee, name="ortcompile_call", kwargs=kwargs),
        dynamic=not options.static,
        fullgraph=options.fullgraph,
        **backend_options,
    )
    start = time.perf_counter()
    eager_output = callee(*args, **kwargs)
    eager_seconds = time.perf_counter() - start
    start = time.perf_counter()
    output = compiled(*args)
    first_call = time.perf_counter() - start
    result = OrtCompileResult(
        expression=expression.strip(),
        compiled=compiled,
        backend=ortlab.backend_of(compiled),
        output=output,
        eager_output=eager_output,
        max_abs_diff=max_abs_diff(output, eager_output),
        first_call_seconds=first_call,
        eager_seconds=eager_seconds,
        atol=options.atol,
        rtol=options.rtol,
    )
    if options.bench:
        result.bench = _bench(compiled, callee, args, kwargs, options.bench)
    if options.diff:
        target = functools.partial(callee, **kwargs) if kwargs else callee
        try:
            result.diff = ortlab.diff(
                target,
                *args,
                atol=options.atol,
                rtol=options.rtol,
                dynamic=not options.static,
                **backend_options,
            )
        except Exception as e:  # the compiled result stands; say why numerics are missing
            result.diff_error = f"{type(e).__name__}: {e}"
    result.inspector = views.Inspector(
        result.backend, diff=result.diff, headline=result.verdict
    )
    if display is not None:
        display(result.inspector)
    return result


def ortcompile(shell: Any, line: str, cell: str | None = None) -> OrtCompileResult:
    """The magic's body: ``line`` holds options (and, for the line magic, the call).

    Raises:
        IPython.core.error.UsageError: bad input, shown as one line.
    """
    from ortlab import _deps

    display_mod = _deps.require("IPython.display")
    error_mod = _deps.require("IPython.core.error")
    try:
        if cell is None:
            options, expression = parse_arguments(line)
        else:
            options, rest = parse_arguments(line)
            if rest:
                raise _UsageError(
                    f"%%ortcompile takes only options on its first line, got {rest!r}. "
                    f"Usage: %%{USAGE[1:]}"
                )
            expression = _split_cell(cell, shell)
        return run_ortcompile(options, expression, shell.user_ns, display=display_mod.display)
    except _UsageError as e:
        raise error_mod.UsageError(f"%ortcompile: {e}") from None


def _split_cell(cell: str, shell: Any) -> str:
    """Runs a cell's statements but the last as set-up; returns the last expression."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as e:
        raise _UsageError(f"the cell is not valid Python: {e.msg} (line {e.lineno})") from None
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise _UsageError("the cell's last line must be the call to compile, e.g. model(x)")
    setup = ast.Module(body=tree.body[:-1], type_ignores=[])
    if setup.body:
        code = compile(setup, "<ortcompile set-up>", "exec")
        exec(code, shell.user_ns)
    return ast.unparse(tree.body[-1].value)


def load_ipython_extension(ipython: Any) -> None:
    """Registers ``%ortcompile`` / ``%%ortcompile`` (``%load_ext ortlab`` calls this)."""

    def magic(line: str, cell: str | None = None) -> OrtCompileResult:
        return ortcompile(ipython, line, cell)

    magic.__doc__ = __doc__
    ipython.register_magic_function(magic, magic_kind="line_cell", magic_name="ortcompile")
