"""ONNX Runtime's plugin execution providers: a provider shipped as a library in its own
package (``onnxruntime-ep-openvino``, ``pip install 'ortlab[openvino]'``), registered with
ONNX Runtime at run time.

# NOTE: ONNX Runtime (1.23 and later) loads such a library with
# ``register_execution_provider_library`` and lists the devices it serves
# (``get_ep_devices()``). A session runs on it only through
# ``SessionOptions.add_provider_for_devices``: once registered, the provider's name is
# listed by ``get_available_providers()``, but a session given that name in
# ``providers=`` runs on the CPU provider alone, without a word (OpenVINO's plugin 1.8.1
# under onnxruntime 1.31.1). So ortlab registers the plugins installed, and makes
# sessions on them with their CPU devices (the tensors it binds are in host memory).
#
# A plugin package is found by its module's name (``onnxruntime_ep_*``, the distribution
# ``onnxruntime-ep-*``); it has ``get_library_path()`` and ``get_ep_name()``.
#
# OpenVINO computes float32 models in bfloat16 on processors with AMX unless its
# inference precision is set to f32 (``precision="FP32"`` alone does not do it): a 4-layer
# BERT's forward differed from the CPU provider's by 1.9e-2 of its scale with the plugin's
# defaults and by 2.1e-6 with ``INFERENCE_PRECISION_HINT=f32`` (a Sapphire Rapids Xeon).
# ortlab sets f32, and the thread count it gives the session, unless the provider options
# carry a ``load_config`` of their own.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib
import importlib.metadata
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ortlab import errors

if TYPE_CHECKING:
    import onnxruntime

logger = logging.getLogger(__name__)

OPENVINO = "OpenVINOExecutionProvider"

_PREFIX = "onnxruntime-ep-"


@dataclasses.dataclass(frozen=True)
class Plugin:
    """An installed plugin package."""

    name: str
    """The provider's name (``"OpenVINOExecutionProvider"``)."""
    package: str
    """The distribution (``"onnxruntime-ep-openvino"``)."""
    version: str
    library: str
    """The provider's shared library."""


@functools.cache
def installed() -> dict[str, Plugin]:
    """The plugin providers installed, by provider name (a package that does not import
    or has no library is left out, with a debug log line)."""
    found: dict[str, Plugin] = {}
    for module_name in _plugin_modules():
        package = module_name.replace("_", "-")
        try:
            module = importlib.import_module(module_name)
            plugin = Plugin(
                module.get_ep_name(),
                package,
                importlib.metadata.version(package),
                module.get_library_path(),
            )
        except Exception:  # a broken or foreign package is not a provider
            logger.debug("plugin package %s skipped", package, exc_info=True)
            continue
        found.setdefault(plugin.name, plugin)
    return found


def _plugin_modules() -> list[str]:
    """The importable top-level packages named ``onnxruntime_ep_*`` (read from the import
    path's folders: scanning every installed distribution's metadata took 0.1 s)."""
    names: set[str] = set()
    for entry in sys.path:
        if os.path.isdir(entry or "."):
            pattern = os.path.join(entry or ".", _PREFIX.replace("-", "_") + "*")
            names.update(os.path.basename(p) for p in glob.glob(pattern) if os.path.isdir(p))
    return sorted(n for n in names if n.isidentifier())


def is_plugin(name: str) -> bool:
    """``name`` is a plugin provider installed here."""
    return name in installed()


def names() -> tuple[str, ...]:
    """The plugin providers installed here that can run sessions here
    (:func:`unusable`)."""
    return tuple(n for n in installed() if not unusable(n))


_lock = threading.Lock()
_registered: dict[str, str] = {}
"""Plugin provider name -> why it cannot run sessions here (``""``: it can)."""


def unusable(name: str) -> str:
    """Why installed plugin provider ``name`` cannot run sessions here (``""`` when it
    can): its library could not be registered, or it lists no CPU device. The library is
    registered on the first call (once per process; one the user registered already is
    used as it is)."""
    with _lock:
        if name not in _registered:
            _registered[name] = _register(installed()[name])
        return _registered[name]


def _register(plugin: Plugin) -> str:
    """Registers ``plugin``'s library; why it cannot be used (``""``: it can)."""
    import onnxruntime

    if not _devices(plugin.name):
        try:
            onnxruntime.register_execution_provider_library(plugin.name, plugin.library)
        except Exception as e:
            # Registered already (by the user, under this name): its devices decide.
            if not _devices(plugin.name) and "already registered" not in str(e):
                return (
                    f"{plugin.package} {plugin.version} could not be registered with "
                    f"onnxruntime {onnxruntime.__version__} ({errors.describe(e)})"
                )
    if not _devices(plugin.name):
        # OpenVINO's plugin 1.8.1 lists none on an AMD EPYC (Zen 4, AVX-512).
        return (
            f"{plugin.package} {plugin.version} lists no CPU device on this processor "
            f"({_cpu_vendor()})"
        )
    return ""


def _cpu_vendor() -> str:
    """The processor's vendor, as ONNX Runtime reads it."""
    import onnxruntime

    cpu = onnxruntime.OrtHardwareDeviceType.CPU
    vendors = {d.device.vendor for d in onnxruntime.get_ep_devices() if d.device.type == cpu}
    return f"vendor {', '.join(sorted(vendors))}" if vendors else "vendor unknown"


def cpu_devices(name: str) -> list[Any]:
    """The CPU devices of plugin provider ``name`` (its library registered first, see
    :func:`unusable`).

    Raises:
        SessionError: the library cannot be registered, or lists no CPU device.
    """
    why = unusable(name)
    if why:
        raise errors.SessionError(f"{name} cannot run here: {why}")
    return _devices(name)


def _devices(name: str) -> list[Any]:
    import onnxruntime

    cpu = onnxruntime.OrtHardwareDeviceType.CPU
    return [
        d for d in onnxruntime.get_ep_devices() if d.ep_name == name and d.device.type == cpu
    ]


def provider_options(name: str, given: Mapping[str, Any], threads: int) -> dict[str, str]:
    """The options a session on plugin ``name`` gets: ``given``, and for OpenVINO float32
    precision and ``threads`` threads unless ``given`` has a ``load_config`` (see NOTE)."""
    options = {key: str(value) for key, value in given.items()}
    if name == OPENVINO and "load_config" not in options:
        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": str(threads)}
        options["load_config"] = json.dumps({"CPU": config})
    return options


def add_providers(
    session_options: onnxruntime.SessionOptions,
    plugins: Sequence[tuple[str, Mapping[str, Any]]],
    threads: int,
) -> None:
    """Puts the plugin providers on ``session_options``, in order (ONNX Runtime's CPU
    provider runs what they do not take)."""
    for name, given in plugins:
        session_options.add_provider_for_devices(
            cpu_devices(name), provider_options(name, given, threads)
        )


def versions(provider_names: list[str]) -> list[str]:
    """``"package==version"`` of each plugin among ``provider_names`` (for cache keys)."""
    table = installed()
    return [f"{table[n].package}=={table[n].version}" for n in provider_names if n in table]
