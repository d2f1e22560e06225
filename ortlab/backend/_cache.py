"""The compile cache on disk: a partition's ONNX model and what was decided for it, so
that a new process does not export, fuse, check and time the same partition again.

# NOTE: one entry per partition session, under a key that pins everything its model and
# decisions depend on:
#
#   key = sha256 of: the entry format, ortlab's backend source, the versions of torch,
#         onnx, onnxscript, onnx-ir and onnxruntime, the machine (architecture, CPU
#         flags, cores, torch threads), the options that shape the model or its
#         decisions, the providers, the partition's FX code, its inputs' dtypes, shapes
#         and strides (concrete ones for a static export), and the bytes of every frozen
#         tensor
#   entry = <key>/model.onnx + <key>/meta.json (the decisions: fused or not and why,
#           threads and why, the clean-ups, the model's sha256)
#
# Beside the entries, ``tables/`` keeps the names of the ops the exporter's registry
# translates, per opset and environment, so that a first call whose partitions all hit
# never builds the registry (see ``_torch_private.TranslatedOps``).
#
# A partition whose model cannot be keyed (``pre_ort_model_transforms``: callables;
# a custom translation whose source cannot be read) is not cached. An entry whose bytes
# do not match their checksum, or that ONNX Runtime refuses, is deleted and rebuilt,
# never run. Entries are written atomically (a temporary directory, then a rename); the
# oldest-used are evicted beyond ``max_bytes``. ``ORTLAB_CACHE_DIR`` moves the cache
# (``off`` turns it off); ``ortlab.clear_cache()`` empties it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ortlab import errors
from ortlab.backend import _plugins

if TYPE_CHECKING:
    import onnx
    import torch.fx

FORMAT = 1
"""The entry format; entries of another format are never read (the key includes it)."""

DEFAULT_MAX_BYTES = 2 * 2**30
"""Cache size beyond which the oldest-used entries are evicted."""

ENVIRONMENT = "ORTLAB_CACHE_DIR"
"""Where the cache lives (``off``, ``0`` or empty: no cache)."""

_OFF = ("", "0", "off", "false", "no")


def default_directory() -> str | None:
    """``$ORTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/ortlab/compile``, else
    ``~/.cache/ortlab/compile``; ``None`` when the environment turns the cache off."""
    value = os.environ.get(ENVIRONMENT)
    if value is not None:
        return None if value.strip().lower() in _OFF else value
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ortlab", "compile")


def directory_for(option: bool | str | None) -> str | None:
    """The cache directory ``OrtBackendOptions.compile_cache`` asks for (``None``: off)."""
    if option is False:
        return None
    if isinstance(option, str):
        return option
    return default_directory()


@dataclasses.dataclass(frozen=True)
class Decisions:
    """What was decided for a cached model, so that a hit decides nothing again."""

    fused: bool
    fusions: dict[str, int]
    fusion_note: str | None
    threads: int | None
    threads_note: str | None
    threads_probed_from: int | None
    """The thread count a probed session was timed at (see ``_threads``)."""
    passes: dict[str, bool]
    export_method: str
    frozen_inputs: tuple[int, ...]
    provider_note: str | None = None
    """Why a plugin provider, or the CPU provider instead, runs it (``_build``)."""
    cpu_instead: bool = False
    """The CPU provider runs it in place of the plugin provider preferred."""


@dataclasses.dataclass(frozen=True)
class Hit:
    """A cache entry that checked out."""

    model: onnx.ModelProto
    decisions: Decisions
    key: str
    seconds: float
    """Reading and checking it."""


class CompileCache:
    """One cache directory (see the module's NOTE)."""

    def __init__(self, root: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key)

    def _read(self, key: str, name: str) -> tuple[dict[str, Any], bytes] | None:
        """The meta and the bytes of file ``name`` of the entry under ``key``, when its
        checksum matches; ``None`` when missing, or corrupt (then deleted)."""
        path = self._path(key)
        try:
            with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
                meta = json.load(f)
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            # No entry; or half of one (a process stopped while it evicted): deleted, or
            # the next store could not rename a new one into its place.
            if os.path.isdir(path):
                self.discard(key)
            return None
        except (OSError, ValueError):
            self.discard(key)
            return None
        if (
            not isinstance(meta, dict)
            or meta.get("format") != FORMAT
            or meta.get("sha256") != hashlib.sha256(data).hexdigest()
        ):
            self.discard(key)
            return None
        return meta, data

    def _used(self, key: str) -> None:
        with contextlib.suppress(OSError):  # a cache this process may read, not write
            os.utime(self._path(key))  # used: evicted last

    def load(self, key: str) -> Hit | None:
        """The entry under ``key``, or ``None`` (missing, or corrupt: then deleted)."""
        import onnx

        start = time.perf_counter()
        found = self._read(key, "model.onnx")
        if found is None:
            return None
        meta, data = found
        try:
            model = onnx.load_from_string(data)
            decisions = Decisions(
                **{
                    **meta["decisions"],
                    "frozen_inputs": tuple(meta["decisions"]["frozen_inputs"]),
                }
            )
        except Exception:
            self.discard(key)
            return None
        self._used(key)
        return Hit(model, decisions, key, time.perf_counter() - start)

    def store(self, key: str, model_bytes: bytes, decisions: Decisions) -> None:
        """Writes an entry atomically, then evicts the oldest-used beyond the bound.
        A cache that cannot be written is skipped (the compile does not depend on it)."""
        meta = {
            "format": FORMAT,
            "sha256": hashlib.sha256(model_bytes).hexdigest(),
            "decisions": dataclasses.asdict(decisions),
        }
        self._write(key, {"model.onnx": model_bytes}, meta)

    def load_file(self, key: str, name: str) -> bytes | None:
        """The bytes kept under ``key`` by :meth:`store_file`, or ``None`` (missing, or
        corrupt: then deleted)."""
        found = self._read(key, name)
        if found is None:
            return None
        if found[0].get("file") != name:
            self.discard(key)
            return None
        self._used(key)
        return found[1]

    def store_file(self, key: str, name: str, data: bytes) -> None:
        """Keeps ``data`` as an entry of its own (atomically, evicted like the others;
        skipped if it cannot be written)."""
        self._write(
            key,
            {name: data},
            {"format": FORMAT, "file": name, "sha256": hashlib.sha256(data).hexdigest()},
        )

    def _write(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> None:
        target = self._path(key)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".incoming-", dir=os.path.dirname(target))
            for name, data in files.items():
                with open(os.path.join(staging, name), "wb") as f:
                    f.write(data)
            with open(os.path.join(staging, "meta.json"), "w", encoding="utf-8") as f:
                json.dump(meta, f)
            try:
                os.rename(staging, target)
            except OSError:  # another process wrote it first
                shutil.rmtree(staging, ignore_errors=True)
            self.evict()
        except OSError:
            return

    def _names_path(self, table: str) -> str:
        return os.path.join(self.root, "tables", f"{table}-{environment_digest()[:24]}.json")

    def load_names(self, table: str) -> list[str] | None:
        """A list of names kept under ``table`` for this environment (versions, machine,
        ortlab's backend code), or ``None`` (missing, or corrupt: then deleted)."""
        path = self._names_path(table)
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            names = saved["names"]
            digest = hashlib.sha256("\n".join(names).encode()).hexdigest()
            if saved.get("format") == FORMAT and saved.get("sha256") == digest:
                return [str(name) for name in names]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            pass
        with contextlib.suppress(OSError):
            os.remove(path)
        return None

    def store_names(self, table: str, names: Sequence[str]) -> None:
        """Keeps ``names`` under ``table`` (atomically; skipped if it cannot be written)."""
        path = self._names_path(table)
        saved = {
            "format": FORMAT,
            "names": list(names),
            "sha256": hashlib.sha256("\n".join(names).encode()).hexdigest(),
        }
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, staging = tempfile.mkstemp(prefix=".incoming-", dir=os.path.dirname(path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(saved, f)
            os.replace(staging, path)
        except OSError:
            return

    def discard(self, key: str) -> None:
        shutil.rmtree(self._path(key), ignore_errors=True)

    def _entries(self) -> list[tuple[float, int, str]]:
        """``(last used, bytes, path)`` of every entry."""
        found: list[tuple[float, int, str]] = []
        if not os.path.isdir(self.root):
            return found
        for shard in os.listdir(self.root):
            shard_path = os.path.join(self.root, shard)
            if not os.path.isdir(shard_path):
                continue
            for name in os.listdir(shard_path):
                path = os.path.join(shard_path, name)
                if name.startswith(".") or not os.path.isdir(path):
                    continue
                size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
                found.append((os.path.getmtime(path), size, path))
        return found

    def size(self) -> int:
        """Bytes held by the entries."""
        return sum(size for _, size, _ in self._entries())

    def evict(self) -> None:
        """Deletes the oldest-used entries until the cache fits ``max_bytes``."""
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            shutil.rmtree(path, ignore_errors=True)
            total -= size

    def clear(self) -> int:
        """Deletes every entry; returns the bytes freed."""
        freed = self.size()
        if os.path.isdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)
        return freed


def open_cache(option: bool | str | None) -> CompileCache | None:
    """The cache ``OrtBackendOptions.compile_cache`` asks for (``None``: off)."""
    root = directory_for(option)
    return CompileCache(root) if root else None


def clear_cache(directory: str | None = None) -> int:
    """Empties the compile cache (``directory``: the default one); returns the bytes
    freed."""
    root = directory or default_directory()
    return CompileCache(root).clear() if root else 0


# -- keys --------------------------------------------------------------------------------
@functools.cache
def environment_digest() -> str:
    """What every key shares in this process: versions, machine, ortlab's backend code."""
    import onnx
    import onnx_ir
    import onnxruntime
    import onnxscript

    digest = hashlib.sha256()
    parts = [
        f"format={FORMAT}",
        f"torch={torch.__version__}",
        f"onnx={onnx.__version__}",
        f"onnxscript={onnxscript.__version__}",
        f"onnx_ir={onnx_ir.__version__}",
        f"onnxruntime={onnxruntime.__version__}",
        f"machine={platform.machine()}",
        f"cpu={_cpu_flags()}",
        f"cores={os.cpu_count()}",
    ]
    digest.update("\n".join(parts).encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):  # the code that makes the models
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.processor()


def _value_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{tuple(value.shape)}{tuple(value.stride())}@{value.device.type}"
    return repr(value)


def _translation_text(function: Any) -> str:
    """What a custom translation is, for a key (raises when it cannot be read)."""
    proto = getattr(function, "to_function_proto", None)
    if proto is not None:
        return proto().SerializeToString().hex()
    return inspect.getsource(function)


class Unkeyable(Exception):
    """The partition's model depends on something a key cannot pin."""


def partition_key(
    *,
    graph_module: torch.fx.GraphModule,
    args: Sequence[Any],
    static: bool,
    frozen: Mapping[int, torch.Tensor],
    options: Any,
    providers: Iterable[tuple[str, Mapping[str, Any]]],
    fuse: bool | None,
    optimize: bool,
    threads: int,
) -> str:
    """The key of a partition's session (see the module's NOTE).

    Raises:
        Unkeyable: ``pre_ort_model_transforms`` are set, or a custom translation cannot
            be read.
    """
    if options.pre_ort_model_transforms:
        raise Unkeyable("pre_ort_model_transforms are callables")
    if options.cuda_graphs:
        raise Unkeyable("CUDA graphs are captured per process")
    digest = hashlib.sha256(environment_digest().encode())
    try:
        translations = [
            f"{op}:{_translation_text(fn)}" for op, fn in options.custom_translations or ()
        ]
    except (OSError, TypeError) as e:
        raise Unkeyable(f"a custom translation's source: {errors.describe(e)}") from e
    names = [name for name, _ in providers]
    fields = [
        f"opset={options.opset_version}",
        f"fuse={fuse}",
        f"optimize={optimize}",
        f"threads={options.intra_op_threads}/{threads}",
        f"session_options={options.ort_session_options is not None}",
        f"dynamic={options.dynamic_shapes}/{static}",
        f"cuda_graphs={options.cuda_graphs}",
        f"providers={names}",
        f"plugins={_plugins.versions(names)}",
        f"translations={translations}",
        graph_module.code,
    ]
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            fields.append(f"{node.name}:{_value_text(node.meta.get('val'))}")
    if static:
        fields.extend(_value_text(a) for a in args)
    digest.update("\n".join(fields).encode())
    for index in sorted(frozen):
        tensor = frozen[index].detach()
        digest.update(f"frozen {index} {_value_text(tensor)}".encode())
        digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    plain = tensor.contiguous().cpu().reshape(-1)
    return plain.view(torch.uint8).numpy().tobytes() if plain.numel() else b""
