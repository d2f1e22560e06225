"""What every lab tool does around a call: unwrap it, call it afresh, flatten what it returns.

The numerics, the benchmarks, the demo and ``%ortcompile`` all take a user's callable
(perhaps already ``torch.compile``-d), compile it again, run it and compare or time its
outputs. The few steps they share are here, once, with one rule each:

- :func:`unwrap_compiled`: a ``torch.compile``-d module or function is replaced by what
  was compiled (compiling a compiled callable would nest compilers: "eager" would not be
  eager);
- :func:`fresh_entry`: a function with a code object (and name) of its own around a
  callable. Dynamo caches compiled code per code object: several compilations of one
  ``forward`` (one per backend, per sweep configuration, per magic call) would pile
  their cache entries onto it and hit the recompile limit, after which Dynamo silently
  runs eager; and it remembers the sizes a frame saw per code name, so entries of one
  name would make each other's sizes symbolic;
- :func:`named_leaves` / :func:`tensor_leaves`: the values of a nested output, in order
  (``"output[0]['logits']"``), whatever the nesting (tuples, lists, dicts, registered
  output classes such as ``transformers``' ``ModelOutput``);
- :func:`in_notebook` / :func:`interactive`: whether widgets can be shown, and whether a
  progress bar has anyone to read it.
"""

from __future__ import annotations

import functools
import itertools
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ortlab.backend import _torch_private


def unwrap_compiled(fn: Any) -> Any:
    """The module or function behind a ``torch.compile``-d ``fn`` (``fn`` itself when it
    was not compiled)."""
    original = _torch_private.compiled_original(fn)
    return fn if original is None else original


def fresh_entry(
    target: Callable[..., Any], *, name: str, kwargs: Mapping[str, Any] | None = None
) -> Callable[..., Any]:
    """A function calling ``target(*args, **kwargs)`` whose code object is brand new, and
    whose name is too: ``name`` and a number (``"ortlab_diff_call_3"``).

    Dynamo keeps the sizes each frame has seen ("automatic dynamic shapes") per file,
    first line and name of its code, not per code object: entries of one name would
    share them, and the second model benchmarked or diffed in a process would be
    compiled with symbolic sizes because the first had other ones.

    Args:
        target: What the function calls.
        name: The start of the function's (and its code object's) name, shown in
            Dynamo's logs.
        kwargs: Keyword arguments bound for every call.
    """
    bound = dict(kwargs or {})

    def call(*args: Any) -> Any:
        return target(*args, **bound)

    return _numbered_copy(call, name)


_ENTRY_NUMBERS = itertools.count(1)


def _numbered_copy(call: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``call`` with a code object of its own named ``name`` and a number."""
    unique = f"{name}_{next(_ENTRY_NUMBERS)}"
    code = call.__code__.replace(co_name=unique)  # co_qualname: Python 3.11+ only
    return types.FunctionType(code, call.__globals__, unique, None, call.__closure__)


def generate_method(fn: Any) -> Any:
    """``fn`` when it is a module's bound ``generate`` method, or wraps one (a compiled
    module's ``generate``), else ``None``. Such a ``generate`` calls the module's
    ``forward`` (its ``__self__``): that is what to compile (see
    :func:`forward_compiled_in`)."""
    for candidate in (fn, getattr(fn, "__wrapped__", None)):
        owner = getattr(candidate, "__self__", None)
        if getattr(candidate, "__name__", "") == "generate" and isinstance(
            owner, torch.nn.Module
        ):
            return candidate
    return None


def fresh_forward(module: torch.nn.Module, *, name: str) -> Callable[..., Any]:
    """:func:`fresh_entry` for ``module.forward``, taking keywords, with the forward's
    signature and name (``generate`` inspects the signature to tell model keywords from
    its own)."""
    forward = module.forward

    def call(*args: Any, **kwargs: Any) -> Any:
        return forward(*args, **kwargs)

    return functools.update_wrapper(_numbered_copy(call, name), forward)


def forward_compiled_in(
    generate: Callable[..., Any], compiled_forward: Callable[..., Any]
) -> Callable[..., Any]:
    """``generate`` (a module's bound method, :func:`generate_method`) run with the
    module's ``forward`` replaced by ``compiled_forward`` for the call only."""
    method = generate_method(generate)
    if method is None:
        raise TypeError(f"{generate!r} is not a module's generate method")
    module = method.__self__

    def generate_compiled(*args: Any, **kwargs: Any) -> Any:
        had_own = "forward" in vars(module)
        own = vars(module).get("forward")
        module.forward = compiled_forward  # type: ignore[method-assign]
        try:
            return method(*args, **kwargs)
        finally:
            if had_own:
                module.forward = own  # type: ignore[method-assign]
            else:
                del module.forward

    return generate_compiled


OBJECT_DEPTH = 3
"""How deep :func:`named_leaves` looks into the attributes of objects that hold tensors."""


def named_leaves(value: Any, root: str = "output") -> list[tuple[str, Any]]:
    """``(name, leaf)`` for every value in a nested output, in order.

    A single value is named ``root``; values inside a structure ``root`` followed by
    their key path: ``"output[0]"``, ``"output['logits']"``. An object that is no
    structure but holds tensors in its public attributes (``transformers``'
    ``DynamicCache``: layers of keys and values) stands for those tensors,
    ``"output['past_key_values'].layers[0].keys"``: compared as an object, two caches
    are never equal.
    """
    out: list[tuple[str, Any]] = []
    for path, leaf in _torch_private.tree_named_leaves(value):
        out.extend(_tensors_inside(root + path, leaf, OBJECT_DEPTH))
    return out


def _tensors_inside(name: str, leaf: Any, depth: int) -> list[tuple[str, Any]]:
    """The tensors in ``leaf``'s public attributes, named by their path; ``leaf`` itself
    when it is a tensor, holds none, or is a module, class or function."""
    plain = (type, types.FunctionType, types.ModuleType, torch.nn.Module)
    if isinstance(leaf, torch.Tensor) or isinstance(leaf, plain) or depth == 0:
        return [(name, leaf)]
    try:
        attributes = vars(leaf)
    except TypeError:  # no __dict__ (numbers, strings, slots)
        return [(name, leaf)]
    found = []
    for attr, value in attributes.items():
        if attr.startswith("_"):
            continue
        for path, sub in _torch_private.tree_named_leaves(value):
            inside = _tensors_inside(f"{name}.{attr}{path}", sub, depth - 1)
            found += [(n, v) for n, v in inside if isinstance(v, torch.Tensor)]
    return found or [(name, leaf)]


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors of a nested output, in order (other values are left out)."""
    return [v for v in _torch_private.tree_leaves(value) if isinstance(v, torch.Tensor)]


def _ipython_shell() -> Any:
    ipython = sys.modules.get("IPython")  # imported by a kernel already, never by us
    return ipython.get_ipython() if ipython is not None else None


def in_ipython() -> bool:
    """Whether code runs under IPython (a kernel or a terminal shell): results displayed
    there need no printing."""
    return _ipython_shell() is not None


def in_notebook() -> bool:
    """Whether code runs in a Jupyter kernel, where widgets can be shown."""
    # By class name along the MRO: Colab's and other kernels' shells subclass it.
    return any(c.__name__ == "ZMQInteractiveShell" for c in type(_ipython_shell()).__mro__)


def interactive() -> bool:
    """Whether a person watches: a notebook, or a terminal on stderr (never a pipe or CI
    log)."""
    return in_notebook() or sys.stderr.isatty()
