"""The ``%ortcompile`` line: its options (one table, :data:`OPTIONS`, from which both
the IPython parser with its generated help and the plain parser of
:func:`parse_arguments` are built), how a line splits into options and the call, and the
:class:`~ortlab.OrtBackendOptions` the options make. The magic itself is
:mod:`ortlab.magic`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import shlex
import textwrap
from typing import Any

import ortlab.backend
from ortlab import errors

BENCH_WARMUP = 3
"""``--bench N``: untimed calls of each side before the N timed ones."""

USAGE = "%ortcompile [options] model(args)   (%ortcompile -h lists the options)"

DESCRIPTION = """\
Compile a call with ortlab (once, with a fresh backend), run it and eager on the same
arguments from the same RNG state, and show the Inspector under a one-line verdict.
Returns an OrtCompileResult (.compiled, .backend, .output, .eager_output, .diff, .bench,
.profile).

  %ortcompile [options] model(x)
  %%ortcompile [options]     (cell: set-up statements, then the call on its last line)

Mode: a module in eval() mode, or a function called with grad disabled, runs inference
under torch.no_grad() (one inference graph, no backward); a module in train() mode, or a
function called with grad enabled, runs training (forward + backward, gradients
compared). --infer and --train choose.
"""

_Option = tuple[tuple[str, ...], dict[str, Any]]

OPTIONS: tuple[_Option, ...] = (
    (("-h", "--help"), {"action": "store_true", "help": "print this help; nothing runs"}),
    (
        ("--infer",),
        {
            "action": "store_true",
            "help": "inference: run under torch.no_grad() (one inference graph, no backward)",
        },
    ),
    (
        ("--train",),
        {
            "action": "store_true",
            "help": "training: run, time and diff forward + backward (the loss: the outputs "
            "times a fixed random gradient); gradients of the parameters and "
            "floating-point inputs are compared",
        },
    ),
    (
        ("--static",),
        {"action": "store_true", "help": "torch.compile(dynamic=False): static shapes"},
    ),
    (
        ("--dynamic",),
        {
            "action": "store_true",
            "help": "torch.compile(dynamic=True): every size symbolic from the first call "
            "(default: torch's, static first, the sizes that change symbolic on recompile)",
        },
    ),
    (("--fullgraph",), {"action": "store_true", "help": "torch.compile(fullgraph=True)"}),
    (
        ("--ep",),
        {
            "action": "append",
            "default": [],
            "metavar": "NAME",
            "help": "preferred execution provider, repeatable: CUDA or "
            "CUDAExecutionProvider (option preferred_execution_providers)",
        },
    ),
    (
        ("--no-aot",),
        {
            "action": "store_true",
            "help": "lower without AOTAutograd (option use_aot_autograd=False)",
        },
    ),
    (
        ("--option",),
        {
            "action": "append",
            "default": [],
            "metavar": "KEY=VALUE",
            "help": "set any OrtBackendOptions field (listed below), repeatable; VALUE is a "
            "Python literal (2, True, None, 'text', [...]) or a name defined in the "
            "notebook; applied after --ep and --no-aot",
        },
    ),
    (
        ("--atol",),
        {
            "type": float,
            "default": None,
            "metavar": "A",
            "help": "absolute tolerance (default: the dtype's, as torch.testing.assert_close)",
        },
    ),
    (
        ("--rtol",),
        {"type": float, "default": None, "metavar": "R", "help": "relative tolerance"},
    ),
    (
        ("--bench",),
        {
            "type": int,
            "default": 0,
            "metavar": "N",
            "help": f"time N calls of the compiled call and of eager each, after "
            f"{BENCH_WARMUP} warm-up calls, in interleaved blocks (the bench engine); "
            "show the median and p10-p90 of each",
        },
    ),
    (
        ("--profile",),
        {
            "type": int,
            "default": 0,
            "metavar": "N",
            "help": "profile N runs of the compiled call (ortlab.profile): where the time "
            "goes by FX node, module and source line (a Profile tab), and options tried on "
            "this model (freeze_parameters, min_partition_size) with the gain measured",
        },
    ),
    (
        ("--diff",),
        {
            "dest": "diff",
            "action": "store_true",
            "default": True,
            "help": "add the numerics report of the same call: outputs, gradients, "
            "partitions, first divergent node (the default)",
        },
    ),
    (("--no-diff",), {"dest": "diff", "action": "store_false", "help": "no numerics report"}),
    (
        ("call",),
        {
            "nargs": "*",
            "metavar": "CALL",
            "help": "the call to compile, e.g. model(x); in a cell, the cell's last line",
        },
    ),
)

_TAKES_VALUE = frozenset(
    name
    for names, settings in OPTIONS
    if settings.get("action", "store") in ("store", "append")
    for name in names
    if name.startswith("-")
)


def epilog() -> str:
    fields = [f.name for f in dataclasses.fields(ortlab.backend.OrtBackendOptions)]
    listed = textwrap.fill(
        "OrtBackendOptions fields for --option (documented on ortlab.OrtBackendOptions): "
        + ", ".join(fields)
        + ".",
        width=88,
    )
    return (
        f"{listed}\n\nExamples:\n"
        "  %ortcompile --bench 20 model(x)\n"
        "  %ortcompile --profile 10 model(x)\n"
        "  %ortcompile --train --atol 1e-4 model(x)\n"
        "  %ortcompile --option min_partition_size=2 --option freeze_parameters=True m(x)\n"
        "  %ortcompile --option custom_translations=my_table net(x)\n"
    )


class UsageError(errors.OrtlabError):
    """Bad input to the magic; shown as IPython's one-line ``UsageError``."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and sys.exit
        raise UsageError(message)


def parser_of_options() -> argparse.ArgumentParser:
    """The options as a plain argparse parser (the magic itself uses IPython's, built from
    the same table)."""
    p = _Parser(
        prog="%ortcompile",
        description=DESCRIPTION,
        epilog=epilog(),
        add_help=False,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for names, settings in OPTIONS:
        p.add_argument(*names, **settings)
    return p


def _first_word(text: str) -> tuple[str, str]:
    """The first word of ``text`` and the rest. Spaces inside quotes or brackets do not
    end a word (``--option 'excluded_ops=["a", "b"]'``)."""
    depth, quote, i = 0, "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c.isspace() and depth == 0:
            break
        i += 1
    if quote:
        raise UsageError(f"unterminated quote in the options: {text!r}. Usage: {USAGE}")
    return text[:i], text[i:].lstrip()


def _unquote(word: str) -> str:
    """A word entirely in quotes without them; any other word as written (so that
    ``dump_path='out/p'`` keeps the quotes that make its value a string literal)."""
    if word[:1] in ("'", '"') and word[-1:] == word[0]:
        parts = shlex.split(word)
        if len(parts) == 1:
            return parts[0]
    return word


def parse_arguments(
    line: str, *, parser: argparse.ArgumentParser | None = None
) -> tuple[argparse.Namespace, str]:
    """Splits a magic line into options and the call expression.

    Options come first; the expression starts at the first word that is not an option
    (or an option's value) and is returned as written.

    Args:
        line: The magic's line.
        parser: The parser of the options (the IPython magic passes its own, built by
            ``magic_arguments`` from the same table); ``None``: a plain argparse one.

    Raises:
        UsageError: an unknown option, a bad value, ``--infer`` with ``--train``.
    """
    parser = parser if parser is not None else parser_of_options()
    rest = line.strip()
    words: list[str] = []
    wants_value = False
    while rest and (wants_value or rest.startswith("-")):
        word, rest = _first_word(rest)
        word = _unquote(word)
        words.append(word)
        if wants_value:
            wants_value = False
        else:
            wants_value = word in _TAKES_VALUE  # not --bench=5
    if wants_value:
        raise UsageError(f"option {words[-1]} needs a value. Usage: {USAGE}")
    try:
        options = parser.parse_args(words)
    except Exception as e:  # the plain parser's UsageError, or IPython's UsageError
        raise UsageError(f"{e}. Usage: {USAGE}") from None
    if options.bench < 0 or options.profile < 0:
        raise UsageError(f"--bench and --profile need a count >= 0. Usage: {USAGE}")
    if options.infer and options.train:
        raise UsageError("--infer and --train exclude each other: give one")
    if options.static and options.dynamic:
        raise UsageError("--static and --dynamic exclude each other: give one")
    return options, rest


_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _option_value(key: str, text: str, namespace: dict[str, Any]) -> Any:
    """``--option KEY=TEXT``: a Python literal, else a (dotted) name of the notebook."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    head = text.split(".")[0]
    if _NAME.fullmatch(text) and head in namespace:
        value = namespace[head]
        try:
            for attribute in text.split(".")[1:]:
                value = getattr(value, attribute)
        except AttributeError as e:
            raise UsageError(f"--option {key}={text}: {e}") from None
        return value
    raise UsageError(
        f"--option {key}={text}: {text!r} is neither a Python literal (2, True, None, "
        "'text', [...]) nor a name defined in the notebook; quote a string: "
        f"{key}='{text}'"
    )


def backend_options(
    options: argparse.Namespace, namespace: dict[str, Any]
) -> ortlab.backend.OrtBackendOptions:
    """The backend's options: the shorthands, then every ``--option``, validated by
    :class:`~ortlab.OrtBackendOptions` itself.

    Raises:
        UsageError: a malformed ``--option``, or the dataclass's own message for an
            unknown key or a bad value.
    """
    # The lab keeps each session's last run, for SessionRecord.save and the Inspector.
    changes: dict[str, Any] = {"keep_last_run": True}
    if options.no_aot:
        changes["use_aot_autograd"] = False
    if options.ep:
        changes["preferred_execution_providers"] = [_provider_name(e) for e in options.ep]
    for item in options.option:
        key, equals, text = item.partition("=")
        if not equals or not key.strip():
            raise UsageError(
                f"--option {item}: write KEY=VALUE, e.g. --option min_partition_size=2"
            )
        changes[key.strip()] = _option_value(key.strip(), text.strip(), namespace)
    try:
        return ortlab.backend.OrtBackendOptions.from_value(changes)
    except errors.UnsupportedOptionError as e:
        raise UsageError(" ".join(str(e).split())) from None


def _provider_name(name: str) -> str:
    return name if name.endswith("ExecutionProvider") else f"{name}ExecutionProvider"
