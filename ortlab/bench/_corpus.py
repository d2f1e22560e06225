"""The corpus benchmark: public architectures under every backend, against the corpus
targets (``ortlab bench --corpus``, part of ``make bench``).

:func:`run_corpus` benchmarks corpus models (:func:`ortlab.zoo.corpus`) like the zoo
benchmark does (:func:`ortlab.bench._zoo.bench_zoo_model`: eager, inductor, ortlab,
ortlab-frozen and the bare-ORT floor, each model in one run, timed interleaved by the one
timer) and writes ``corpus.md``, ``corpus.json`` and ``corpus.png``. The report shows
each backend's median and p10-p90, ortlab's first call with its compile steps next to
the floor's export and session creation, and the targets:

- on every model whose first call is **one partition** (one graph, one ONNX Runtime
  partition, no tensor op left in PyTorch; size arithmetic such as ``batch * seq`` is a
  Python number outside any partition and does not count:
  :func:`ortlab.bench._coverage.one_partition_but_sizes`, read from the ortlab row's own
  records): ortlab-frozen at most 1.10x the floor, ortlab (default options) at most 1.25x
  (:data:`ONE_PARTITION_TARGETS`) — and the same ratios against ``ort+dynamo``, the
  floor behind Dynamo's entry (:func:`ortlab.bench._floor.dynamo_entry`), which is what
  any ``torch.compile`` backend pays at least. Where ``ort+dynamo`` alone is beyond a
  ratio to the floor, the cell says so: no ``torch.compile`` backend can meet it there;
- on every model where the floor is ahead of inductor: ortlab ahead of inductor too.

Inductor's first compile takes 25-60 s per model on a small CPU, so the default selection
(:data:`CORPUS_BENCH_MODELS`) is the fast subset plus two larger one-partition CNNs;
``--corpus all`` runs all of it, and ``--fast`` makes a smoke run without inductor.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ortlab.backend
from ortlab import zoo
from ortlab.bench import (
    _backends,
    _coverage,
    _coverage_report,
    _engine,
    _format,
    _machine,
    _plots,
    _result,
    _zoo,
)

CORPUS_BENCH_MODELS = (
    *zoo.corpus_names(ci=True),
    "resnet18",
    "efficientnet",
)
"""What ``ortlab bench --corpus`` (and ``make bench``) runs without a selection: the fast
subset (one model per family kind) and two larger CNNs that compile to one partition."""

CORPUS_BACKENDS = ("eager", "inductor", "ortlab", "ortlab-frozen", "ort", "ort+dynamo")
"""Backends of the corpus benchmark (``fast``: without inductor)."""

ONE_PARTITION_TARGETS = (
    ("ortlab-frozen", "ort", 1.10),
    ("ortlab", "ort", 1.25),
    ("ortlab-frozen", "ort+dynamo", 1.10),
    ("ortlab", "ort+dynamo", 1.25),
)
"""``(backend, reference, most)`` on one-partition models: median over the reference's."""

BEHIND_DYNAMO = "ort+dynamo"
"""The floor behind Dynamo's entry: the least a ``torch.compile`` backend costs."""

_FAST_TIMING = dict(warmup=1, min_time=0.05, min_iters=3, max_iters=20)
_FULL_TIMING = dict(warmup=3, min_time=1.0, min_iters=10, max_iters=2000)


def medians(result: _result.BenchResult) -> dict[str, float]:
    """Median per backend that ran without error."""
    frame = result.frame
    return {
        b: float(m)
        for b, m, e in zip(frame["backend"], frame["median_ms"], frame["error"])
        if not e and _format.finite(m)
    }


def is_one_partition(result: _result.BenchResult) -> bool | None:
    """Whether the ortlab row's first call was one partition, size arithmetic aside
    (``None``: no ortlab row)."""
    backend = result.ortlab_backends.get("ortlab")
    if backend is None:
        return None
    return _coverage.one_partition_but_sizes(backend.graphs)


def _cell(ratio: float, most: float, *, strict: bool = False, dynamo: float = math.nan) -> str:
    """``"1.08 met"`` / ``"1.31 missed"``; ``dynamo``: the floor behind Dynamo's entry
    over the floor, named in a missed cell when it alone is beyond ``most``."""
    text = _format.target_cell(ratio, most, _format.fmt_ratio(ratio), strict=strict)
    if _format.target_verdict(text) == "missed" and _format.finite(dynamo) and dynamo > most:
        text += f" (Dynamo's entry alone: {_format.fmt_ratio(dynamo)})"
    return text


def target_rows(
    results: Sequence[_result.BenchResult], one_partition: Mapping[str, bool | None]
) -> list[list[str]]:
    """One row per model: ``[model, one partition, a cell per ONE_PARTITION_TARGETS,
    ortlab/inductor cell]``; a cell reads ``"1.08 met"``, ``"1.31 missed"`` (with
    ``"(Dynamo's entry alone: 2.10)"`` where the floor behind Dynamo's entry is already
    beyond the target), ``"n/a"`` (a backend it needs is missing or failed) or says why
    the target does not apply."""
    rows = []
    for r in results:
        by_backend = medians(r)
        single = one_partition.get(r.name)
        cells = [r.name, {True: "yes", False: "no", None: "?"}[single]]
        dynamo = by_backend.get(BEHIND_DYNAMO, math.nan) / by_backend.get("ort", math.nan)
        for backend, ref, most in ONE_PARTITION_TARGETS:
            if single:
                ratio = by_backend.get(backend, math.nan) / by_backend.get(ref, math.nan)
                alone = dynamo if ref == "ort" else math.nan
                cells.append(_cell(ratio, most, dynamo=alone))
            else:
                cells.append("not one partition")
        ort, inductor = by_backend.get("ort", math.nan), by_backend.get("inductor", math.nan)
        if not (_format.finite(ort) and _format.finite(inductor)):
            cells.append("n/a")
        elif ort < inductor:
            ratio = by_backend.get("ortlab", math.nan) / inductor
            cells.append(_cell(ratio, 1.0, strict=True))
        else:
            cells.append(f"floor behind inductor ({_format.fmt_ratio(ort / inductor)})")
        rows.append(cells)
    return rows


def target_summary(rows: Sequence[Sequence[str]]) -> list[tuple[str, int, int]]:
    """``(target, met, missed)`` counted over :func:`target_rows`' cells."""
    names = [
        *(
            f"{b} / {ref} ≤ {most:.2f} (one partition)"
            for b, ref, most in ONE_PARTITION_TARGETS
        ),
        "ortlab ahead of inductor where the floor is",
    ]
    out = []
    for i, name in enumerate(names, start=2):
        cells = [row[i] for row in rows]
        out.append(
            (
                name,
                sum(_format.target_verdict(c) == "met" for c in cells),
                sum(_format.target_verdict(c) == "missed" for c in cells),
            )
        )
    return out


def spread(result: _result.BenchResult, backend: str) -> str:
    """``"12.3 (11.9–13.0)"``: a backend's median and p10–p90 in ms (``"error"`` where
    it failed, ``""`` where it is not in the result)."""
    frame = result.frame[result.frame["backend"] == backend]
    if frame.empty:
        return ""
    rec = frame.iloc[0]
    if rec["error"]:
        return "error"
    median = _format.fmt_ms(rec["median_ms"])
    low, high = _format.fmt_ms(rec["p10_ms"]), _format.fmt_ms(rec["p90_ms"])
    return f"{median} ({low}–{high})" if median else ""


def first_call(result: _result.BenchResult, backend: str) -> float:
    """A backend's first call in seconds (NaN where it is not in the result)."""
    frame = result.frame[result.frame["backend"] == backend]
    return float(frame["first_call_s"].iloc[0]) if not frame.empty else math.nan


def first_call_rows(results: Sequence[_result.BenchResult]) -> list[list[str]]:
    """Per model: ortlab's first call and its steps (:data:`FIRST_CALL_STEPS` of the
    coverage report, the rest as "other"), the floor's first call with its export and
    session creation, and inductor's first call."""
    rows = []
    for r in results:
        steps = r.first_call_steps.get("ortlab", {})
        ort = r.first_call_steps.get("ort", {})
        shown, other = _coverage_report.split_steps(steps)
        rows.append(
            [
                r.name,
                _format.fmt(first_call(r, "ortlab"), "{:.2f}"),
                *(f"{v:.2f}" for v in shown),
                f"{other:.2f}",
                _format.fmt(first_call(r, "ort"), "{:.2f}"),
                _format.fmt(ort.get("export", math.nan), "{:.2f}"),
                _format.fmt(ort.get("session", math.nan), "{:.2f}"),
                _format.fmt(first_call(r, "inductor"), "{:.2f}"),
            ]
        )
    return rows


def corpus_markdown(
    results: Sequence[_result.BenchResult],
    one_partition: Mapping[str, bool | None],
    *,
    fast: bool = False,
    machine: Mapping[str, Any] | None = None,
) -> str:
    """The corpus benchmark's report: medians, targets, first calls, per backend,
    machine, errors."""
    if machine is None:
        machine = results[0].machine if results else _machine.machine_facts()
    backends = list(dict.fromkeys(b for r in results for b in r.frame["backend"]))
    lines = ["# ortlab corpus benchmark", ""]
    if fast:
        lines += [
            "> **Fast mode**: a handful of iterations; a smoke run, not a measurement.",
            "",
        ]
    ratio_cols = [
        ("ortlab", "ort"),
        ("ortlab-frozen", "ort"),
        (BEHIND_DYNAMO, "ort"),
        ("ortlab", BEHIND_DYNAMO),
        ("ortlab-frozen", BEHIND_DYNAMO),
        ("ortlab", "inductor"),
        ("ortlab", "eager"),
    ]
    ratio_cols = [(b, ref) for b, ref in ratio_cols if b in backends and ref in backends]
    headers = [
        "model",
        "family",
        "one partition",
        *(f"{b} ms" for b in backends),
        *(f"{b} / {ref}" for b, ref in ratio_cols),
    ]
    rows = []
    for r in results:
        by_backend = medians(r)
        single = one_partition.get(r.name)
        rows.append(
            [
                r.name,
                zoo.get(r.name).family,
                {True: "yes", False: "no", None: "?"}[single],
                *(spread(r, b) for b in backends),
                *(
                    _format.fmt_ratio(
                        by_backend.get(b, math.nan) / by_backend.get(ref, math.nan)
                    )
                    for b, ref in ratio_cols
                ),
            ]
        )
    lines += [
        f"Inference, steady-state median per call in ms with p10–p90 "
        f"({machine.get('torch_threads')} threads), every backend of a model timed in one "
        "run, interleaved; ratios below 1 are faster than the reference. `ort` is the floor: "
        "the whole model exported with `torch.onnx.export`, fused as ortlab's partitions "
        "are (`ort_fusions`), and run by one bare session, zero-copy. `ort+dynamo` is the "
        "floor followed by Dynamo's entry into the model with a backend that runs "
        "nothing: the least a `torch.compile` backend running the floor's session could "
        "cost.",
        "",
        _format.markdown_table(headers, rows),
        "",
    ]
    targets = target_rows(results, one_partition)
    lines += [
        "## Targets",
        "",
        "On one-partition models: ortlab-frozen ≤ 1.10× the floor and ortlab ≤ 1.25× "
        "the floor, and the same against `ort+dynamo` (the floor behind Dynamo's entry); "
        "wherever the floor is ahead of inductor, ortlab ahead of inductor (ratio < 1). "
        "A missed cell against the floor names `ort+dynamo / ort` where it alone is "
        "beyond the target: there no `torch.compile` backend can meet it. Ratios of "
        "medians from this one run." + (" Fast mode: not a measurement." if fast else ""),
        "",
        _format.markdown_table(
            [
                "model",
                "one partition",
                *(f"{b} / {ref} ≤ {most:.2f}" for b, ref, most in ONE_PARTITION_TARGETS),
                "ortlab / inductor < 1 where ort < inductor",
            ],
            targets,
        ),
        "",
        _format.markdown_table(("target", "met", "missed"), target_summary(targets)),
        "",
        "## First call",
        "",
        "Seconds. ortlab's first call is compile + run, split into its compile steps "
        "(`translate` = type promotion + translation + serialization + transforms, `fuse` = "
        "the rewrite with ONNX Runtime's fused operators); the "
        "floor's is `torch.onnx.export` + session creation + run.",
        "",
        _format.markdown_table(
            [
                "model",
                "ortlab first call",
                *_coverage_report.FIRST_CALL_STEPS,
                "other",
                "ort first call",
                "ort export",
                "ort session",
                "inductor first call",
            ],
            first_call_rows(results),
        ),
        "",
        "## Per backend",
        "",
    ]
    full_rows = [[r.name, *row] for r in results for row in _format.display_rows(r.frame)]
    lines += [
        _format.markdown_table(["model", *_format.HEADERS], full_rows),
        "",
        *_format.machine_section(machine),
        *_format.errors_section(results),
    ]
    return "\n".join(lines)


def run_corpus(
    out_dir: str | os.PathLike[str],
    *,
    selection: str | Sequence[str] | None = None,
    fast: bool = False,
    backends: Sequence[str] | None = None,
    threads: int = 2,
    progress: bool = True,
) -> str:
    """Benchmarks corpus models and writes ``corpus.md``, ``corpus.json``, ``corpus.png``.

    Args:
        out_dir: Folder for the results (created if missing).
        selection: Corpus models (:func:`ortlab.bench._coverage.select`: ``"all"``,
            ``"ci"``, a family, names); ``None``: :data:`CORPUS_BENCH_MODELS`.
        fast: Few iterations; without ``backends``, also without inductor.
        backends: Backend names; ``None``: :data:`CORPUS_BACKENDS` (minus inductor when
            ``fast``).
        threads: torch and ONNX Runtime intra-op threads.
        progress: Show a progress bar in a terminal or notebook.

    Returns:
        The markdown written to ``corpus.md``.

    Raises:
        UnsupportedOptionError: an unknown model or a bad backend list (before anything
            runs).
    """
    names = _coverage.select(selection) if selection is not None else CORPUS_BENCH_MODELS
    if backends is None:
        backends = tuple(b for b in CORPUS_BACKENDS if not (fast and b == "inductor"))
    backends = _backends.check_backends(backends)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = _machine.machine_facts()
    machine["torch_threads"] = threads
    if any(b.startswith("ortlab") for b in backends):
        machine["exporter_warm_up_s"] = round(ortlab.backend.warm_up(), 2)
    timing = _FAST_TIMING if fast else _FULL_TIMING
    results = []
    one_partition: dict[str, bool | None] = {}
    with _engine.settled_heap() as settle:
        for name in names:
            settle()  # first calls do not collect the earlier models' objects
            result = _zoo.bench_zoo_model(
                name, backends, threads=threads, training=False, progress=progress, **timing
            )
            one_partition[name] = is_one_partition(result)
            results.append(result)
    if "transformers" in sys.modules:
        machine["transformers"] = _machine.version_of("transformers")
    if hasattr(os, "getloadavg"):
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    markdown = corpus_markdown(results, one_partition, fast=fast, machine=machine)
    (out / "corpus.md").write_text(markdown, encoding="utf-8")
    payload = {
        "machine": machine,
        "fast": fast,
        "one_partition": one_partition,
        "targets": target_rows(results, one_partition),
        "models": [r.to_dict() for r in results],
    }
    (out / "corpus.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    _plots.plot_zoo(results, out / "corpus.png")
    return markdown
