"""Benchmarks: eager vs inductor vs ortlab vs bare ONNX Runtime, measured honestly.

:func:`bench` times one model (or function) on the same inputs under several backends and
returns a :class:`BenchResult` (a pandas DataFrame plus machine facts, a plot, text, HTML,
markdown and JSON). :func:`run_zoo` does it for the model zoo and writes
``results.md`` / ``results.json`` / ``results.png`` (``ortlab bench``, ``make bench``);
:func:`run_corpus` for the public-architecture corpus (``corpus.*``, ``ortlab bench
--corpus``, also in ``make bench``); :func:`run_realsize`, :func:`run_training` and
:func:`run_generation` for public checkpoints' sizes (``realsize.*``, ``training.*``,
``generation.*``: ``ortlab bench --real-size``, also in ``make bench``), and
``_first_call.run_first_call`` for a new process's first call with the compile cache and
:func:`ortlab.precompile` (``first_call.*``, part of ``--real-size``).

Modules: ``_engine`` (the one timer, also used by the numerics sweep, the demo and
``%ortcompile --bench``), ``_backends`` (each backend as a call to time), ``_floor`` (the
bare-ORT floor), ``_bench`` (:func:`bench`), ``_result`` / ``_format`` / ``_plots`` (the
result and how it is written), ``_machine`` (machine facts), ``_zoo`` (the zoo runner,
its targets and report), ``_corpus`` (the corpus runner, its targets and report),
``_coverage`` / ``_coverage_report`` (the corpus coverage of ``ortlab demo --corpus``:
compile, outputs, decode step, gradients, first call, latency) and ``_grads`` (a training
step's gradients against eager and float64, and the rule that judges them), ``_realsize``
(real-size inference with the floor and OpenVINO's backend as a peer), ``_training`` (a
training step with the model's own loss and an optimizer), ``_generation``
(``generate()`` with a compiled forward) and ``_first_call`` (fresh processes).
"""

from __future__ import annotations

from ortlab.bench._backends import DEFAULT_BACKENDS
from ortlab.bench._bench import bench
from ortlab.bench._corpus import CORPUS_BENCH_MODELS, ONE_PARTITION_TARGETS, run_corpus
from ortlab.bench._engine import Measurement, Timing, measure
from ortlab.bench._generation import run_generation
from ortlab.bench._machine import machine_facts
from ortlab.bench._plots import plot_zoo
from ortlab.bench._realsize import REALSIZE_MODELS, run_realsize
from ortlab.bench._result import COLUMNS, BenchResult
from ortlab.bench._training import TRAINING_MODELS, run_training
from ortlab.bench._zoo import (
    FIRST_CALL_TARGET_S,
    RATIO_TARGETS,
    TARGET_MODELS,
    ZOO_BACKENDS,
    ZOO_BATCH,
    ZOO_MODELS,
    run_zoo,
    targets_table,
    zoo_markdown,
)

__all__ = [
    # Entry points
    "bench",
    "run_zoo",
    "run_corpus",
    "run_realsize",
    "run_training",
    "run_generation",
    # Results
    "BenchResult",
    "COLUMNS",
    "DEFAULT_BACKENDS",
    "machine_facts",
    # The timer
    "measure",
    "Timing",
    "Measurement",
    # The zoo benchmark: models, targets, report
    "ZOO_MODELS",
    "ZOO_BACKENDS",
    "ZOO_BATCH",
    "TARGET_MODELS",
    "RATIO_TARGETS",
    "FIRST_CALL_TARGET_S",
    "targets_table",
    "zoo_markdown",
    "plot_zoo",
    # The corpus benchmark
    "CORPUS_BENCH_MODELS",
    "ONE_PARTITION_TARGETS",
    # The real-size benchmarks
    "REALSIZE_MODELS",
    "TRAINING_MODELS",
]
