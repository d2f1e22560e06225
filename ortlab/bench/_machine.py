"""The facts of the machine a benchmark ran on: cores, threads, versions, load."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

import torch

import ortlab


def machine_facts() -> dict[str, Any]:
    """Cores, threads, library versions, Python, platform and the 1-minute load average of
    this process's machine (taken before a benchmark starts: the load of everything else).
    """
    import onnx
    import onnxruntime

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
        "onnxscript": version_of("onnxscript"),
        "ortlab": ortlab.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if hasattr(os, "getloadavg"):
        # Other work on the machine skews every timing; the load says how much there was.
        facts["load_avg_1m"] = round(os.getloadavg()[0], 2)
    if "transformers" in sys.modules:
        facts["transformers"] = version_of("transformers")
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
    return facts


def version_of(package: str) -> str:
    """The installed version of ``package``, or ``"not installed"``."""
    try:
        return metadata.version(package)
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
