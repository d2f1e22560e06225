"""The facts of the machine a benchmark ran on: cores, threads, versions, load; and
whether its timings can be trusted (:func:`trust_notes`)."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import torch

import ortlab
from ortlab import _html


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


SPREAD_LIMIT = 2.0
"""Timings whose p90 exceeds their p10 by more than this factor are not stable."""


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The machine's 1-minute load average (``None`` where the OS has none)."""
    if not hasattr(os, "getloadavg"):
        return None
    return round(os.getloadavg()[0], 2)


def trust_notes(
    *,
    load: float | None,
    cores: int | None,
    spreads: Mapping[str, tuple[float, float]] = {},
    same_as_eager: Sequence[str] = (),
) -> list[str]:
    """Why timings cannot be trusted, one line per reason (``[]``: nothing against them).

    Args:
        load: The load average while measuring (the larger of before and after).
        cores: The cores the process may use.
        spreads: ``(p10, p90)`` per side or backend, in any one unit.
        same_as_eager: Backends of another runtime whose outputs equal eager's to the
            bit at eager's speed (OpenVINO's ``torch.compile`` backend gave BERT-base
            exactly eager's outputs at eager's speed on an AMD EPYC, and a small MLP its
            own).
    """
    notes = []
    if load is not None and cores and load > cores:
        notes.append(
            f"the machine was busy: load average {_html.number(load)} on {cores} cores, so "
            "the threads of both sides were starved (eager's OpenMP threads most) and "
            "these times and their ratio cannot be trusted: measure again on a quiet "
            "machine"
        )
    for name, (p10, p90) in spreads.items():
        if p10 > 0 and p90 / p10 > SPREAD_LIMIT:
            notes.append(
                f"{name}'s times spread ×{_html.number(p90 / p10)} from p10 to p90 (more "
                f"than ×{_html.number(SPREAD_LIMIT)}): its median is not stable; time more "
                "calls, on a quiet machine"
            )
    for name in same_as_eager:
        notes.append(
            f"{name}'s outputs equal eager's to the bit (max |diff| 0), at eager's speed: "
            "it may have run the model in PyTorch, and then its times are PyTorch's"
        )
    return notes
