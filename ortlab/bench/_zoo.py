"""The project's benchmark: the model zoo under every backend, checked against its targets.

:func:`run_zoo` (``ortlab bench``, ``make bench``) benchmarks zoo models at the batch
sizes below and writes ``results.md`` (:func:`zoo_markdown`), ``results.json`` and
``results.png`` (:func:`~ortlab.bench.plot_zoo`). The performance targets
(:data:`RATIO_TARGETS`, :data:`FIRST_CALL_TARGET_S`) are checked on :data:`TARGET_MODELS`
with ratios of medians measured in the same run.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

import ortlab.backend
from ortlab import errors, zoo
from ortlab.backend import _torch_private
from ortlab.bench import _backends, _bench, _format, _machine, _plots, _result

ZOO_MODELS = ("mlp", "gelu_mlp", "cnn", "transformer_layer", "tiny_llama")
"""Zoo models :func:`run_zoo` benchmarks by default."""

ZOO_BACKENDS = ("eager", "inductor", "ortlab", "ortlab-frozen", "ort")
"""Backends :func:`run_zoo` runs by default (``fast``: without inductor)."""

ZOO_BATCH = {"gelu_mlp": 64, "cnn": 8, "transformer_layer": 8, "tiny_llama": 2}
"""Batch size per model (others: the zoo's default); tiny_llama's sequence length (8) is
fixed by the zoo."""

TARGET_MODELS = ("gelu_mlp", "cnn", "transformer_layer")
"""Zoo models the performance targets are set on."""

RATIO_TARGETS = (
    ("ortlab", "ort", 1.25),
    ("ortlab", "eager", 1.05),
    ("ortlab-frozen", "ort", 1.10),
)
"""``(backend, reference, most)``: the backend's median over the reference's at most."""

FIRST_CALL_TARGET_S = 1.5
"""ortlab's first call (compile + run) at most, in seconds."""

_FAST_TIMING = dict(warmup=1, min_time=0.05, min_iters=3, max_iters=20)
_FULL_TIMING = dict(warmup=5, min_time=2.0, min_iters=20, max_iters=2000)


def run_zoo(
    out_dir: str | os.PathLike[str],
    *,
    fast: bool = False,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    threads: int = 2,
    training: bool = False,
    progress: bool = True,
) -> str:
    """Benchmarks zoo models and writes ``results.md``, ``results.json``, ``results.png``.

    Args:
        out_dir: Folder for the results (created if missing).
        fast: Few iterations (a smoke run for tests and CI); without ``backends``, also
            leaves out inductor, whose first call builds C++ for up to a minute.
        models: Zoo model names; ``None`` means :data:`ZOO_MODELS`.
        backends: Backend names; ``None`` means :data:`ZOO_BACKENDS` (minus inductor when
            ``fast``).
        threads: torch and ONNX Runtime intra-op threads.
        training: Time forward + backward instead of inference (no "ort" row then).
        progress: Show a progress bar in a terminal or notebook.

    Returns:
        The markdown written to ``results.md``.

    Raises:
        UnsupportedOptionError: an unknown model or a bad backend list (before anything
            runs).
    """
    out = Path(out_dir)
    models = tuple(models) if models is not None else ZOO_MODELS
    for m in models:
        zoo.get(m)  # unknown names fail before anything runs
    if backends is None:
        backends = tuple(b for b in ZOO_BACKENDS if not (fast and b == "inductor"))
    if training:
        backends = tuple(b for b in backends if b != "ort")
    backends = _backends.check_backends(backends)
    out.mkdir(parents=True, exist_ok=True)
    machine = _machine.machine_facts()
    machine["torch_threads"] = threads  # what every bench() below runs with
    if any(b.startswith("ortlab") for b in backends):
        # Paid once per process by whichever model compiled first; kept out of its row.
        machine["exporter_warm_up_s"] = round(ortlab.backend.warm_up(), 2)
    timing = _FAST_TIMING if fast else _FULL_TIMING
    results = [
        bench_zoo_model(
            m, backends, threads=threads, training=training, progress=progress, **timing
        )
        for m in models
    ]
    if "transformers" in sys.modules:  # imported by tiny_llama, after the facts were taken
        machine["transformers"] = _machine.version_of("transformers")
    if hasattr(os, "getloadavg"):
        # Includes this benchmark's own threads; well above them means others competed.
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    markdown = zoo_markdown(results, fast=fast, machine=machine)
    (out / "results.md").write_text(markdown, encoding="utf-8")
    payload = {"machine": machine, "fast": fast, "models": [r.to_dict() for r in results]}
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    _plots.plot_zoo(results, out / "results.png")
    return markdown


def bench_zoo_model(
    name: str,
    backends: Sequence[str],
    *,
    threads: int,
    training: bool,
    progress: bool,
    **timing: Any,
) -> _result.BenchResult:
    """One zoo model at its benchmark batch size (:data:`ZOO_BATCH`), with its Dynamo
    settings; a model that cannot be built gives a result whose every row says why."""
    entry = zoo.get(name)
    batch = ZOO_BATCH.get(name, entry.default_batch)
    try:
        model, inputs = entry.build(), entry.example_inputs(batch)
    except Exception as e:
        # e.g. tiny_llama without transformers: every backend row carries the reason.
        runs = _bench.failed_runs(backends, errors.describe(e))
        return _bench.result_of(runs, machine=_machine.machine_facts(), settings={}, name=name)
    with _torch_private.dynamo_config_patch(dict(entry.dynamo_config)):
        result = _bench.bench(
            model,
            *inputs,
            backends=backends,
            threads=threads,
            training=training,
            progress=progress,
            name=name,
            **timing,
        )
    result.settings["batch"] = batch
    result.settings["input_shapes"] = [
        list(t.shape) for t in inputs if isinstance(t, torch.Tensor)
    ]
    return result


def targets_table(results: Sequence[_result.BenchResult]) -> list[list[str]] | None:
    """Rows ``[model, cell per target...]`` with ``"1.30 missed"`` / ``"0.96 met"``
    for the target models present, or ``None`` when none is (or the backends a target
    needs are missing, whose cells then read ``"n/a"``)."""
    rows = []
    for r in results:
        if r.name not in TARGET_MODELS:
            continue
        medians = {
            b: m
            for b, m, e in zip(r.frame["backend"], r.frame["median_ms"], r.frame["error"])
            if not e
        }
        firsts = dict(zip(r.frame["backend"], r.frame["first_call_s"]))
        cells = [r.name]
        for backend, ref, most in RATIO_TARGETS:
            ratio = medians.get(backend, math.nan) / medians.get(ref, math.nan)
            cells.append(_format.target_cell(ratio, most, _format.fmt_ratio(ratio)))
        first = firsts.get("ortlab", math.nan) if "ortlab" in medians else math.nan
        cells.append(_format.target_cell(first, FIRST_CALL_TARGET_S, f"{first:.2f} s"))
        rows.append(cells)
    return rows or None


def zoo_markdown(
    results: Sequence[_result.BenchResult],
    *,
    fast: bool = False,
    machine: Mapping[str, Any] | None = None,
) -> str:
    """The markdown report of :func:`run_zoo`: summary, targets, full table, machine,
    settings, errors."""
    if machine is None:
        machine = results[0].machine if results else _machine.machine_facts()
    settings = results[0].settings if results else {}
    lines = ["# ortlab benchmarks", ""]
    if fast:
        lines += [
            "> **Fast mode**: a handful of iterations; a smoke run, not a measurement.",
            "",
        ]
    mode = "training (forward + backward)" if settings.get("training") else "inference"
    lines += [
        f"Steady-state median per call in ms ({mode}, {machine['torch_threads']} threads); "
        "ratios below 1 are faster than the reference.",
        "",
        _summary_table(results),
        "",
    ]
    targets = None if settings.get("training") else targets_table(results)
    if targets:
        headers = [
            "model",
            *(f"{b} / {ref} ≤ {most:.2f}" for b, ref, most in RATIO_TARGETS),
            f"ortlab first call ≤ {FIRST_CALL_TARGET_S} s",
        ]
        lines += [
            "## Targets",
            "",
            "The project's performance targets, checked on this run (ratios of medians "
            "measured in this one run)." + (" Fast mode: not a measurement." if fast else ""),
            "",
            _format.markdown_table(headers, targets),
            "",
        ]
    lines += ["## Per backend", ""]
    if results:
        full_rows = [[r.name, *row] for r in results for row in _format.display_rows(r.frame)]
        lines += [_format.markdown_table(["model", *_format.HEADERS], full_rows), ""]
    lines += [
        "`first call` is compile + first run (for `ort`: export + session + run); "
        "`× eager` / `× ort` divide the median by eager's / ort's; `max |diff|` is against "
        "eager's output; `g/p/s` are the ortlab backend's graphs / partitions / sessions "
        "and `in ORT` its nodes that run in ONNX Runtime.",
        "",
        *_format.machine_section(machine),
    ]
    shown = ("warmup", "iters", "min_time_s", "min_iters", "max_iters", "dynamic", "eval")
    setting_rows = [(k, settings.get(k)) for k in shown if k in settings]
    lines += [
        "## Settings",
        "",
        _format.markdown_table(
            ("setting", "value"), [*setting_rows, ("batch / shapes", _shapes_text(results))]
        ),
        "",
        *_format.errors_section(results),
    ]
    return "\n".join(lines)


def _summary_table(results: Sequence[_result.BenchResult]) -> str:
    """Median per model and backend, and ortlab's ratios to ort and eager."""
    backends = list(dict.fromkeys(b for r in results for b in r.frame["backend"]))
    ratio_cols = [
        (b, ref)
        for b in ("ortlab", "ortlab-frozen")
        if b in backends
        for ref in ("ort", "eager")
        if ref in backends
    ]
    headers = ["model", *(f"{b} ms" for b in backends), *(f"{b} / {r}" for b, r in ratio_cols)]
    rows = []
    for r in results:
        medians = dict(zip(r.frame["backend"], r.frame["median_ms"]))
        errors_ = dict(zip(r.frame["backend"], r.frame["error"]))
        row = [r.name]
        for b in backends:
            row.append("error" if errors_.get(b) else _format.fmt_ms(medians.get(b, math.nan)))
        for b, ref in ratio_cols:
            row.append(
                _format.fmt_ratio(medians.get(b, math.nan) / medians.get(ref, math.nan))
            )
        rows.append(row)
    return _format.markdown_table(headers, rows)


def _shapes_text(results: Sequence[_result.BenchResult]) -> str:
    parts = []
    for r in results:
        shapes = r.settings.get("input_shapes")
        if shapes is not None:
            parts.append(f"{r.name}: " + " ".join("×".join(map(str, s)) for s in shapes))
    return "; ".join(parts)
