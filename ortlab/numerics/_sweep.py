"""``ortlab.diff(..., sweep=...)``: the same comparison under several configurations, timed.

Each configuration (a combination of execution providers, graph optimisation levels and
backend options) is compared with eager on its own fresh backend; then eager and every
configuration that ran are timed together, interleaved, by the bench engine
(:mod:`ortlab.bench._engine`), so that their latencies are comparable.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ortlab.backend
from ortlab import errors
from ortlab.bench import _engine
from ortlab.numerics import _report

_OPT_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
_SPECIAL_KEYS = ("providers", "graph_optimization_level")

EAGER_LABEL = "eager (PyTorch)"

DiffOnce = Callable[[Mapping[str, Any]], tuple[_report.DiffReport, Callable[[], None]]]
"""Runs one comparison with these backend options; returns its report and a callable
that runs the compiled side again (what is timed)."""


def _opt_level(value: Any) -> Any:
    import onnxruntime

    if isinstance(value, onnxruntime.GraphOptimizationLevel):
        return value
    if isinstance(value, str) and value.upper() in _OPT_LEVELS:
        return getattr(onnxruntime.GraphOptimizationLevel, value.upper())
    raise errors.UnsupportedOptionError(
        f"sweep graph_optimization_level {value!r} is not one of {', '.join(_OPT_LEVELS)} "
        "(or an onnxruntime.GraphOptimizationLevel)."
    )


def _provider_names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return [value[0]]
    return [v if isinstance(v, str) else v[0] for v in value]


def configurations(sweep: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep's values, in order.

    Raises:
        UnsupportedOptionError: a key is not ``providers``, ``graph_optimization_level``
            or an ``OrtBackendOptions`` field, its values are not a non-empty list, or a
            level is not one of ONNX Runtime's.
    """
    valid = {f.name for f in dataclasses.fields(ortlab.backend.OrtBackendOptions)}
    keys = list(sweep)
    for key in keys:
        if key not in _SPECIAL_KEYS and key not in valid:
            raise errors.UnsupportedOptionError(
                f"sweep key {key!r} is not 'providers', 'graph_optimization_level' or an "
                f"OrtBackendOptions field ({', '.join(sorted(valid))})."
            )
        values = sweep[key]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise errors.UnsupportedOptionError(
                f"sweep[{key!r}] must be a non-empty list of values; got {values!r}."
            )
    for level in sweep.get("graph_optimization_level", ()):
        _opt_level(level)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(sweep[k] for k in keys))]


def label(settings: Mapping[str, Any]) -> str:
    """``"CPU / ORT_DISABLE_ALL / freeze_parameters=True"``."""
    parts = []
    for key, value in settings.items():
        if key == "providers":
            text = "+".join(
                p.removesuffix("ExecutionProvider") for p in _provider_names(value)
            )
        elif key == "graph_optimization_level":
            text = getattr(value, "name", str(value))
        else:
            text = f"{key}={value!r}"
        parts.append(text)
    return " / ".join(parts)


def _backend_options(settings: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """The backend options of one configuration, on top of ``base``."""
    options = dict(base)
    if "providers" in settings:
        value = settings["providers"]
        options["preferred_execution_providers"] = (
            [value] if isinstance(value, (str, tuple)) else list(value)
        )
    if "graph_optimization_level" in settings:
        so = ortlab.backend.default_session_options()
        so.graph_optimization_level = _opt_level(settings["graph_optimization_level"])
        options["ort_session_options"] = so
    options.update({k: v for k, v in settings.items() if k not in _SPECIAL_KEYS})
    return options


def _row(
    label_: str, settings: dict[str, Any], report: _report.DiffReport
) -> _report.SweepRow:
    tensors = [*report.outputs, *report.gradients]
    return _report.SweepRow(
        label_,
        settings,
        "ok",
        providers=tuple(
            dict.fromkeys(p for s in report.backend.sessions for p in s.providers)
        ),
        passed=report.passed,
        max_abs_error=report.max_abs_error,
        mean_abs_error=max((t.mean_abs_error for t in tensors), default=0.0),
        max_rel_error=max((t.max_rel_error for t in tensors), default=0.0),
        report=report,
    )


def run_sweep(
    sweep: Mapping[str, Sequence[Any]],
    diff_once: DiffOnce,
    eager_call: Callable[[], None],
    *,
    backend_options: Mapping[str, Any],
    repeat: int,
) -> list[_report.SweepRow]:
    """The eager row, then one row per configuration (see the module docstring).

    Args:
        sweep: ``{"providers": [...], "graph_optimization_level": [...], <option>: [...]}``.
        diff_once: Compares one configuration (given its backend options).
        eager_call: One eager call, as the compiled calls are timed.
        backend_options: Options every configuration starts from.
        repeat: Timed calls per configuration (the median is reported).

    Raises:
        UnsupportedOptionError: a bad sweep key or value.
    """
    available = set(ortlab.backend.available_providers())
    rows = [_report.SweepRow(EAGER_LABEL, {}, "ok")]
    steps: dict[str, Callable[[], Any]] = {"0": eager_call}  # keyed by row index
    for settings in configurations(sweep):
        name = label(settings)
        missing = [
            p for p in _provider_names(settings.get("providers", ())) if p not in available
        ]
        if missing:
            rows.append(
                _report.SweepRow(
                    name,
                    dict(settings),
                    f"skipped: {', '.join(missing)} not available in this onnxruntime "
                    f"build (available: {', '.join(sorted(available))})",
                )
            )
            continue
        try:
            report, rerun = diff_once(_backend_options(settings, backend_options))
        except errors.UnsupportedOptionError:
            raise
        except Exception as e:
            rows.append(
                _report.SweepRow(name, dict(settings), f"error: {type(e).__name__}: {e}")
            )
            continue
        steps[str(len(rows))] = rerun
        rows.append(_row(name, dict(settings), report))
    timed = _engine.measure(steps, _engine.Timing(warmup=1, iters=max(1, repeat)))
    for key, measurement in timed.items():
        row = rows[int(key)]
        if measurement.error is not None:
            row.status = f"error: {measurement.error}"
        else:
            row.latency_ms = measurement.median_ms
    return rows
