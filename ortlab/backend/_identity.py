"""What a saved capture read that torch does not check in a new process, in a form that
a new process can check.

# NOTE: torch saves a capture's guards, but not all of them hold across processes:
#
#   - guards on object identities (the functions, classes and closures the trace read)
#     cannot be saved at all, and are dropped;
#   - guards on globals (a module's flag, ``os.environ``, a registry of functions) are
#     saved by the name they read, and built again from the values the *new* process
#     holds, so that they always pass.
#
# Either way a capture read back could run code, or take branches, that the model no
# longer runs: a monkeypatched method, a module-level choice of function, an environment
# variable read in ``forward``, a class redefined in a notebook cell. So for every such
# guard the capture records the name it reads (a Python expression over the frame's
# locals and its globals ``G``) and a fingerprint of the value there: what a constant is,
# what a function's code, defaults and closure are, what a class's methods are. A new
# process evaluates each name again and compares; any difference, or a name it cannot
# evaluate, means the capture is not used.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib
import inspect
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

_MAX_DEPTH = 4
"""Containers and objects deeper than this are fingerprinted by their type only."""

_MAX_ITEMS = 256
"""Items of a container fingerprinted one by one (the rest by their count)."""

_BUILTIN_KINDS = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


def _name(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", type(obj).__name__)
    return f"{getattr(obj, '__module__', None)}.{qualname}"


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


class _Fingerprints:
    """Fingerprints of values: what a constant is; a function's code, with its defaults and
    closure a few levels deep; a class's bases and its methods' code (not its other
    attributes, which libraries fill lazily: cached flags, ``__slotnames__``); an
    object's type and state a few levels deep. Classes are memoized."""

    def __init__(self) -> None:
        self._classes: dict[int, str] = {}

    def of(self, value: Any, depth: int = 0) -> str:
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            return f"{type(value).__name__}:{value!r}"
        if isinstance(value, types.ModuleType):
            return f"module:{value.__name__}"
        if isinstance(value, type):
            return f"class:{self._class(value)}"
        if isinstance(value, types.CodeType):
            return f"code:{_code(value)}"
        if isinstance(value, types.FunctionType):
            return f"function:{self._function(value, depth)}"
        if isinstance(value, types.MethodType):
            return f"method:{self.of(value.__func__, depth)}:{_name(type(value.__self__))}"
        if isinstance(value, _BUILTIN_KINDS):
            owner = getattr(value, "__objclass__", None)
            return f"builtin:{_name(owner) if owner else ''}:{_name(value)}"
        if isinstance(value, torch.Tensor):
            return f"tensor:{value.dtype}:{tuple(value.shape)}:{value.device.type}"
        if depth >= _MAX_DEPTH:
            return f"deep:{_name(type(value))}"
        if isinstance(value, (property, staticmethod, classmethod, functools.partial)):
            inner = [
                getattr(value, a, None)
                for a in ("fget", "fset", "__func__", "func", "args", "keywords")
            ]
            return f"{type(value).__name__}:{_digest(self.of(v, depth + 1) for v in inner)}"
        if isinstance(value, (tuple, list)):
            return f"{_name(type(value))}:{len(value)}:{self._items(value, depth)}"
        if isinstance(value, (set, frozenset)):
            members = sorted(self.of(v, depth + 1) for v in value)
            return f"{_name(type(value))}:{len(value)}:{_digest(members)}"
        if isinstance(value, Mapping):
            keys = list(value)[:_MAX_ITEMS]
            parts = [f"{self.of(k, depth + 1)}={self.of(value[k], depth + 1)}" for k in keys]
            return f"{_name(type(value))}:{len(value)}:{_digest(parts)}"
        state = getattr(value, "__dict__", None)
        kind = self.of(type(value), depth + 1)
        if isinstance(state, dict):
            return f"object:{kind}:{self.of(state, depth + 1)}"
        # A value of a C type (a dtype, a device, finfo, a NumPy scalar): its repr names
        # it, unless the repr is only its address.
        text = repr(value)
        return f"object:{kind}:{'' if ' at 0x' in text else text}"

    def _items(self, items: Iterable[Any], depth: int) -> str:
        return _digest(self.of(v, depth + 1) for _, v in zip(range(_MAX_ITEMS), items))

    def _function(self, fn: types.FunctionType, depth: int) -> str:
        parts = [_name(fn), _code(fn.__code__)]
        if depth < _MAX_DEPTH:
            parts += [
                self.of(fn.__defaults__, depth + 1),
                self.of(fn.__kwdefaults__, depth + 1),
            ]
            for cell in fn.__closure__ or ():
                try:
                    parts.append(self.of(cell.cell_contents, depth + 1))
                except ValueError:  # an empty cell
                    parts.append("empty")
        return _digest(parts)

    def _class(self, cls: type) -> str:
        """The class's name and, for it and each of its bases, its methods' code (a
        method patched onto a base is inherited without a guard of Dynamo's)."""
        known = self._classes.get(id(cls))
        if known is None:
            parts = []
            for owner in cls.__mro__:
                parts.append(_name(owner))
                if owner.__module__ == "builtins":
                    continue
                for key, member in sorted(vars(owner).items()):
                    inner = getattr(member, "__func__", getattr(member, "fget", member))
                    if isinstance(inner, types.FunctionType):
                        parts.append(f"{key}={_code(inner.__code__)}")
            known = self._classes[id(cls)] = f"{_name(cls)}:{_digest(parts)}"
        return known


def _code(code: types.CodeType) -> str:
    """A code object's instructions, constants (nested code too), names and signature.
    (Not ``marshal``'s bytes: they mark shared objects by reference count, which differs
    from process to process; nor the constants' reprs: a ``frozenset``'s order follows
    the string hash seed.)"""
    return _digest(
        [
            code.co_qualname,
            code.co_code.hex(),
            _digest(_constant(c) for c in code.co_consts),
            repr(code.co_names),
            repr(code.co_varnames),
            repr(code.co_freevars),
            repr(code.co_cellvars),
            f"{code.co_argcount}/{code.co_posonlyargcount}/{code.co_kwonlyargcount}",
            str(code.co_flags),
        ]
    )


def _constant(value: Any) -> str:
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, (frozenset, set)):
        return f"{type(value).__name__}({sorted(_constant(v) for v in value)})"
    if isinstance(value, tuple):
        return f"({', '.join(_constant(v) for v in value)})"
    return repr(value)


class GuardGlobals(dict):  # type: ignore[type-arg]
    """The globals ``G`` that guard names read in a new process: the captured function's
    module, the modules Dynamo installed under names of its own (``__import_<module>``,
    with ``_dot_`` for dots), and builtins (``__builtins_dict___<n>``)."""

    def __init__(self, fn: Callable[..., Any], modules: Mapping[str, str]) -> None:
        # Modules by name, as a new process finds them, not the objects Dynamo installed
        # in ``fn``'s globals when it traced (a module imported again since is another).
        super().__init__(
            (k, v)
            for k, v in getattr(fn, "__globals__", {}).items()
            if not k.startswith("__import_")
        )
        for alias, module in modules.items():
            self[alias] = importlib.import_module(module)

    def __missing__(self, key: str) -> Any:
        if key.startswith("__builtins_dict___"):
            return builtins.__dict__
        if key.startswith("__import_"):
            return importlib.import_module(key[len("__import_") :].replace("_dot_", "."))
        raise KeyError(key)


_GLOBAL = re.compile(r"G\['([^']+)'\]")


def installed_modules(names: Iterable[str], fn: Callable[..., Any]) -> dict[str, str]:
    """The modules that guard names read from ``fn``'s globals under names Dynamo chose
    in this process (e.g. ``_<id>_c0``), which a new process must be told: name to
    module name."""
    found = {}
    for name in names:
        for key in _GLOBAL.findall(name):
            value = getattr(fn, "__globals__", {}).get(key)
            if isinstance(value, types.ModuleType):
                found[key] = value.__name__
    return found


def scope(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    modules: Mapping[str, str],
) -> dict[str, Any]:
    """Where guard names are evaluated: ``fn``'s parameters bound to the call, and ``G``."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return {**bound.arguments, "G": GuardGlobals(fn, modules)}


def evaluate(name: str, where: Mapping[str, Any]) -> Any:
    """The value a guard name reads here."""
    return eval(name, {"__builtins__": builtins}, dict(where))


def _checked(kind: str, detail: Mapping[str, Any], value: Any) -> Any:
    """The part of ``value`` a guard of this kind checks (a guard on a mapping's key
    checks that key, not the whole mapping: ``os.environ`` differs from shell to shell)."""
    if kind == "TYPE_MATCH":
        return type(value)
    if kind in ("DICT_CONTAINS", "DICT_NOT_CONTAINS") and "key" in detail:
        return ("contains", detail["key"] in value)
    if kind == "NOT_PRESENT_IN_GENERIC_DICT" and "attr" in detail:
        return ("present", detail["attr"] in getattr(value, "__dict__", {}))
    if kind == "HASATTR" and "attr" in detail:
        return ("hasattr", hasattr(value, detail["attr"]))
    if kind == "SEQUENCE_LENGTH":
        return ("length", len(value))
    if kind in ("DICT_KEYS_MATCH", "DICT_VERSION"):
        return ("keys", list(value))
    return value


def record(read: Sequence[tuple[str, str, str, Any]]) -> list[list[str]]:
    """``[name, kind, detail, fingerprint]`` for each value a capture read (its guard's
    name, kind and detail, see ``_torch_private.aot_capture``)."""
    prints = _Fingerprints()
    return [
        [
            name,
            kind,
            detail,
            prints.of(_checked(kind, ast.literal_eval(detail or "{}"), value)),
        ]
        for name, kind, detail, value in read
    ]


def changed(recorded: Sequence[Sequence[str]], where: Mapping[str, Any]) -> list[str]:
    """The recorded names whose checked value here differs from the capture's (or that
    cannot be evaluated here), in their order."""
    prints = _Fingerprints()
    found = []
    for entry in recorded:
        try:
            name, kind, detail, expected = entry
            now = prints.of(
                _checked(kind, ast.literal_eval(detail or "{}"), evaluate(name, where))
            )
        except Exception:
            name, now, expected = str(entry[0]) if entry else "?", None, ""
        if now != expected and name not in found:
            found.append(name)
    return found
