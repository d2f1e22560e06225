"""Precompiled models: Dynamo's trace kept on disk, so that a new process skips it.

# NOTE: with the compile cache, a new process's first call of a compiled model still runs
# Dynamo's trace and guard building: on BERT-base that is half of the cached first call,
# and no cache behind ``torch.compile`` can skip it. torch's ahead-of-time capture can:
# a whole-graph capture whose bytecode, guards and backend result are saved to bytes,
# for a backend whose result can serialize itself. :func:`precompile` uses it:
#
#   first process  Dynamo captures ``model(*args, **kwargs)`` whole, with static sizes,
#                  the model passed as an argument (its weights stay out of the file);
#                  ortlab compiles the graph as usual; the file keeps Dynamo's bytecode
#                  and guards, the sources the trace read (their checksums) and Dynamo's
#                  graph (code and fake values, see ``_capture``).
#   next process   the file is read; the first call lowers and partitions Dynamo's graph
#                  again, and each partition's ONNX model comes from the compile cache.
#
# torch drops the guards on object identities (the functions, classes and closures the
# trace read), and rebuilds those on globals and on what it read through a class or a
# function from the new process's values: the file keeps fingerprints of those values
# and of the model's classes and hooks (``_identity``). It is not used when a source it
# read has changed, when it was saved by other versions or on another machine
# (``_cache.environment_digest``), when its guards fail on the example inputs or when a
# fingerprint differs: the model is traced again and the file replaced. A later call
# whose inputs the guards refuse (another shape, dtype, grad mode) runs through
# ``ortlab.compile(model)``, with a warning. The file is a pickle: load only files you
# trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ortlab import errors
from ortlab.backend import _backend, _cache, _capture, _identity, _options, _torch_private

FORMAT = 1
"""The file format; files of another format are traced again."""

FILE_NAME = "precompiled.bin"
"""An entry's file in the compile cache."""

_MAGIC = b"ortlab-precompiled\n"


def _call_model(model: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """What is captured: the model is an argument, so its weights are inputs."""
    return model(*args, **kwargs)


class Precompiled:
    """A model compiled by :func:`precompile`; call it as the model.

    Attributes:
        model: The model it calls.
        ortlab_backend: The backend whose records show its graphs (the Inspector takes
            the result itself).
        source: ``"file"`` (Dynamo's trace read back), ``"traced"`` (traced in this
            process) or ``"compile"`` (it could not be captured whole: every call runs
            through ``ortlab.compile(model)``).
        path: The file it was read from or saved to; ``None`` when there is none.
        note: Why a file was not used or not saved, or why the model is not captured.
    """

    def __init__(
        self,
        model: Callable[..., Any],
        backend: _backend.OrtBackend,
        captured: Any,
        *,
        source: str,
        path: str | None,
        note: str | None,
    ) -> None:
        self.model = model
        self.ortlab_backend = backend
        self.source = source
        self.path = path
        self.note = note
        self._captured = captured
        self._compiled: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        captured = self._captured
        if captured is not None and _torch_private.aot_guards_pass(
            captured, (self.model, *args), kwargs
        ):
            return captured(self.model, *args, **kwargs)
        return self._compiled_model(args, kwargs)(*args, **kwargs)

    def _compiled_model(
        self, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Callable[..., Any]:
        """``ortlab.compile(model)`` with the same backend, for calls the capture does
        not fit (the first such call warns, saying which guard failed)."""
        with self._lock:
            if self._compiled is None:
                if self._captured is not None:
                    failed = _torch_private.aot_guard_failure(
                        self._captured, (self.model, *args), kwargs
                    )
                    why = f"a call the precompiled graph does not fit ({_readable(failed)})"
                    self.ortlab_backend.notes.append(f"precompile: {why}")
                    warnings.warn(
                        f"ortlab: {why}: it runs through ortlab.compile(model) "
                        "instead, traced by Dynamo in this process; so do later calls the "
                        "capture does not fit, without another warning.",
                        errors.FallbackWarning,
                        stacklevel=3,
                    )
                self._compiled = _backend.compile_with(self.ortlab_backend, self.model)
            return self._compiled

    def __repr__(self) -> str:
        where = f", path={self.path!r}" if self.path else ""
        return f"Precompiled({type(self.model).__name__}, source={self.source!r}{where})"

    def _repr_html_(self) -> str:
        return self.ortlab_backend._repr_html_()


_WRAPPER_NAMES = (
    (re.compile(r"L\['args'\]\[(\d+)\]"), r"argument \1"),
    (re.compile(r"L\['kwargs'\]\[('[^']*')\]"), r"keyword argument \1"),
    (re.compile(r"L\['kwargs'\]"), "the keyword arguments"),
    (re.compile(r"L\['args'\]"), "the positional arguments"),
    (re.compile(r"L\['model'\]"), "model"),
)


def _readable(failure: str) -> str:
    """A failed guard in the user's terms: the call's arguments, not those of the wrapper
    that is captured (``_call_model``), and without Dynamo's source comments."""
    parts = []
    for part in failure.split("; "):
        text = part.split(" # ", 1)[0].strip()
        for pattern, replacement in _WRAPPER_NAMES:
            text = pattern.sub(replacement, text)
        parts.append(text)
    return "; ".join(parts)


class _Unusable(Exception):
    """A saved capture that must not be used (the message says why)."""


def _file_bytes(captured: Any, identities: Sequence[Sequence[str]]) -> bytes:
    modules = {
        **_identity.installed_modules([name for name, *_ in identities], _call_model),
        **_torch_private.aot_installed_modules(captured, _call_model),
    }
    header = {
        "format": FORMAT,
        "environment": _cache.environment_digest(),
        "python": sys.version,
        "modules": modules,
        "read": [list(entry) for entry in identities],
    }
    return _MAGIC + json.dumps(header).encode() + b"\n" + _torch_private.aot_bytes(captured)


def _model_code(model: Callable[..., Any]) -> list[tuple[str, str, str, Any]]:
    """The model's code, as guard names: each class among its modules (its and its
    bases' methods' code) and the modules' hooks, or the function. Dynamo guards a
    module's class by its name only, and the sources it pins are lines of files: a class
    defined twice under one name, a method patched onto a base, or a class from a
    notebook cell would pass both; and it does not guard a module's hooks."""
    if not isinstance(model, torch.nn.Module):
        return [("model", "VALUE", "", model)]
    found: dict[type, str] = {}
    for path, module in model.named_modules():
        found.setdefault(type(module), path)
    return [
        # Dynamo does not guard a module's own hooks (skip_nnmodule_hook_guards).
        (_HOOKS, "VALUE", "", _identity.evaluate(_HOOKS, {"model": model})),
        *[
            (f"type(model.get_submodule({path!r}))" if path else "type(model)", "VALUE", "", c)
            for c, path in found.items()
        ],
    ]


_HOOKS = (
    "[(n, [*m._forward_pre_hooks.values()], [*m._forward_hooks.values()], "
    "[*m._backward_pre_hooks.values()], [*m._backward_hooks.values()]) "
    "for n, m in model.named_modules() if m._forward_pre_hooks or m._forward_hooks "
    "or m._backward_pre_hooks or m._backward_hooks]"
)
"""The hooks of the model's modules, as a guard name (see :func:`_model_code`)."""


def _identities(
    read: Sequence[tuple[str, str, str, Any]],
    model: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> list[list[str]]:
    """Fingerprints of what the capture read that a new process must check itself (see
    ``_identity``); a guard whose value Dynamo did not keep is evaluated here.

    Raises:
        ValueError: a name that cannot be evaluated (the capture is then not saved).
    """
    where = _identity.scope(_call_model, (model, *args), kwargs, {})
    values = []
    for name, kind, detail, value in [*read, *_model_code(model)]:
        if value is _torch_private.NOT_READ:
            try:
                value = _identity.evaluate(name, where)
            except Exception as e:
                raise ValueError(f"what the trace read cannot be checked: {name}") from e
        values.append((name, kind, detail, value))
    return _identity.record(values)


def _read(
    data: bytes, model: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """The capture saved in ``data``, checked for this process and these inputs.

    Raises:
        _Unusable: the reason it must not be used.
    """
    if not data.startswith(_MAGIC):
        raise _Unusable("it is not a file of ortlab.precompile")
    line, _, body = data[len(_MAGIC) :].partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _Unusable("it was written by another version of ortlab")
    if header.get("environment") != _cache.environment_digest():
        raise _Unusable(
            "it was saved with other versions of torch, ONNX Runtime, the exporter or "
            "ortlab, or on another machine"
        )
    try:
        captured = _torch_private.aot_load(body, _call_model, header.get("modules") or {})
    except Exception as e:
        raise _Unusable(f"it could not be read ({errors.describe(e)})") from e
    if not isinstance(_torch_private.aot_backend_result(captured), _capture.DynamoGraph):
        raise _Unusable("it was not saved by ortlab.precompile")
    changed = _torch_private.aot_changed_sources(captured)
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise _Unusable(f"code it traced has changed ({', '.join(changed[:3])}{more})")
    if not _torch_private.aot_guards_pass(captured, (model, *args), kwargs):
        failed = _torch_private.aot_guard_failure(captured, (model, *args), kwargs)
        raise _Unusable(f"its guards refuse the example inputs ({_readable(failed)})")
    modules = {**_torch_private.aot_import_aliases(captured), **(header.get("modules") or {})}
    recorded = header.get("read")
    if not isinstance(recorded, list):
        raise _Unusable("it was written by another version of ortlab")
    differ = _identity.changed(
        recorded, _identity.scope(_call_model, (model, *args), kwargs, modules)
    )
    if differ:
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise _Unusable(
            "what the trace read is not what this process holds "
            f"({', '.join(differ[:3])}{more})"
        )
    return captured


def _value_key(value: Any, depth: int = 0) -> str:
    if isinstance(value, torch.Tensor):
        return (
            f"tensor {value.dtype} {tuple(value.shape)} {tuple(value.stride())} "
            f"{value.device.type} grad={value.requires_grad}"
        )
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if depth > 4:
        return type(value).__qualname__
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_value_key(v, depth + 1) for v in value)
        return f"{type(value).__name__}[{inner}]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k!r}: {_value_key(v, depth + 1)}" for k, v in value.items())
        return "{" + inner + "}"
    state = getattr(value, "__dict__", None)  # e.g. a key/value cache: its tensors' shapes
    if isinstance(state, dict):
        return f"{type(value).__qualname__}({_value_key(state, depth + 1)})"
    return f"{type(value).__qualname__} {value!r}"


def cache_key(
    model: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """The compile-cache key of a capture: the environment, the model's class, its state's
    names, shapes and dtypes, its modules' training flags and its ``config`` (if it has
    one), the inputs' types and shapes, and grad mode. (What the key leaves out, the
    checks of :func:`_read` catch: the entry is then replaced.)"""
    kind = type(model)
    parts = [
        f"precompiled {FORMAT}",
        _cache.environment_digest(),
        sys.version,
        f"{kind.__module__}.{kind.__qualname__}",
        f"grad={torch.is_grad_enabled()}",
        _value_key(list(args)),
        _value_key(dict(kwargs)),
    ]
    if isinstance(model, torch.nn.Module):
        parts.extend(f"{name}: {_value_key(t)}" for name, t in model.state_dict().items())
        parts.append(
            "training=" + "".join("1" if m.training else "0" for m in model.modules())
        )
        config = getattr(model, "config", None)
        to_json = getattr(config, "to_json_string", None)
        parts.append(to_json() if callable(to_json) else repr(config))
    else:
        parts.append(getattr(model, "__qualname__", repr(kind)))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class _Store:
    """Where a capture is kept: a file the user named, or an entry of the compile cache."""

    def __init__(
        self, path: str | None, cache: _cache.CompileCache | None, key: str | None
    ) -> None:
        self.path, self._cache, self._key = path, cache, key

    @property
    def where(self) -> str | None:
        if self.path is not None:
            return self.path
        if self._cache is not None and self._key is not None:
            return os.path.join(self._cache.root, self._key[:2], self._key, FILE_NAME)
        return None

    def read(self) -> bytes | None:
        if self.path is not None:
            try:
                with open(self.path, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        if self._cache is not None and self._key is not None:
            return self._cache.load_file(self._key, FILE_NAME)
        return None

    def write(self, data: bytes) -> None:
        if self.path is not None:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            staging = f"{self.path}.incoming-{os.getpid()}"
            with open(staging, "wb") as f:
                f.write(data)
            os.replace(staging, self.path)
        elif self._cache is not None and self._key is not None:
            self._cache.discard(self._key)  # a stale entry is replaced
            self._cache.store_file(self._key, FILE_NAME, data)


def precompile(
    model: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    options: _options.OrtBackendOptions | Mapping[str, Any] | None = None,
    **option_kwargs: Any,
) -> Precompiled:
    """Compiles ``model`` for calls like ``model(*args, **kwargs)`` and keeps Dynamo's
    trace on disk, so that the same line in a new process skips it.

    The first process captures the model whole (no graph breaks; static sizes) and saves
    the capture: in the compile cache (``compile_cache`` option, ``$ORTLAB_CACHE_DIR``)
    or at ``path``. A later process reads it back instead of tracing, and its first call
    takes each partition's ONNX model from the compile cache. Calls the capture does not
    fit (another shape, dtype or grad mode) run through :func:`ortlab.compile`, with a
    warning; so does the whole model when it cannot be captured whole.

    Args:
        model: The module or function.
        args, kwargs: Example inputs; the sizes, dtypes and grad mode the capture is for.
        path: The file to keep the capture in (default: the compile cache).
        options: :class:`OrtBackendOptions` or a dict; ``option_kwargs`` are merged in.

    Returns:
        A :class:`Precompiled` callable.
    """
    resolved = _options.OrtBackendOptions.from_value(options)
    if option_kwargs:
        resolved = resolved.replace(**option_kwargs)
    backend = _backend.OrtBackend(resolved)
    kwargs = dict(kwargs or {})
    if isinstance(model, torch.nn.Module):
        _torch_private.mark_module_state(model)
    if path is not None:
        store = _Store(os.fspath(path), None, None)
    else:
        cache = _cache.open_cache(resolved.compile_cache)
        store = _Store(None, cache, cache_key(model, args, kwargs) if cache else None)
    note = None
    data = store.read()
    if data is not None:
        try:
            captured = _read(data, model, args, kwargs)
        except _Unusable as e:
            note = f"the saved capture was not used: {e}; traced again"
        else:
            _torch_private.aot_backend_result(captured).bind(backend)
            return Precompiled(
                model, backend, captured, source="file", path=store.where, note=None
            )
    try:
        captured, read = _torch_private.aot_capture(
            _call_model, (model, *args), kwargs, backend
        )
    except Exception as e:
        if resolved.strict:
            raise errors.CompileError(f"precompile: {errors.describe(e)}") from e
        why = f"the model cannot be captured whole ({errors.describe(e)})"
        warnings.warn(
            f"ortlab: precompile: {why}; it runs through ortlab.compile(model) instead, "
            "and nothing is saved.",
            errors.FallbackWarning,
            stacklevel=2,
        )
        backend.notes.append(f"precompile: {why}")
        return Precompiled(model, backend, None, source="compile", path=None, note=why)
    where = store.where
    if where is None:
        note = "not saved: the compile cache is off and no path was given"
    else:
        try:
            store.write(_file_bytes(captured, _identities(read, model, args, kwargs)))
        except Exception as e:
            note = f"not saved: {errors.describe(e)}"
            where = None
        else:
            if not os.path.exists(where):
                note, where = "not saved: the compile cache could not be written", None
    return Precompiled(model, backend, captured, source="traced", path=where, note=note)
