"""How many intra-op threads an ONNX Runtime session on the CPU gets.

# NOTE: ONNX Runtime parallelises inside each op. With spinning off (see _session), each
# parallel op wakes the other threads, which costs more than it saves on small ops: on a
# 2-core machine the corpus's small transformers ran 1.3-1.5x faster in ORT with one
# thread than with two (GPT-2, 2 layers: 0.36 vs 0.54 ms per compiled call), while
# EfficientNet (2-3 ms a run) and ResNet-18 (40 ms) need both. The run time, not the
# FLOP count, tells them apart (a depthwise-convolution CNN of 8 MFLOP wants two
# threads, a 5 MFLOP audio encoder one), so "auto" measures:
#
#   session with torch.get_num_threads() threads -> its first run
#     >= PROBE_BELOW_SECONDS: keep it (not probed)
#     <  PROBE_BELOW_SECONDS: make a one-thread twin, time both alternately on the same
#                              inputs (``_choose.faster``), keep the faster (ties keep the
#                              first)
#
# ORT runs do not change their inputs, so the probe runs are side-effect free; they are
# paid once per session, in the first call (``SessionRecord.timings["threads"]``). The
# probe sees the first inputs only, and a session with symbolic dims serves every size:
# a one-thread session whose run later takes REGROW_AFTER_SECONDS is made again with the
# full count (the partition does it, once).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TypeVar

import torch

from ortlab.backend import _choose, _options, _session

PROBE_BELOW_SECONDS = 2e-3
"""Sessions whose run takes less than this with several threads try one thread."""
PROBE_RUNS = _choose.RUNS
"""Timed runs per candidate (after a first run)."""
REGROW_AFTER_SECONDS = 10e-3
"""A session given one thread whose run later takes this long (its inputs grew: one
session serves every batch size) is made again with ``torch.get_num_threads()``."""

R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count of one session and why."""

    threads: int | None
    """Intra-op threads (``None``: ONNX Runtime's own default, from the user's session
    options)."""
    note: str
    """Why, in words (with the probe's medians when there was one)."""
    seconds: float = 0.0
    """Time spent choosing (the probe runs and the twin's creation)."""
    probed_from: int | None = None
    """The thread count the session was made with and timed at, when it was probed
    (``None``: not probed)."""


def initial(
    options: _options.OrtBackendOptions, first_provider: str
) -> tuple[ThreadChoice, bool]:
    """The thread count to create a session with, and whether to probe one thread."""
    if options.ort_session_options is not None:
        given = options.ort_session_options.intra_op_num_threads
        return ThreadChoice(given or None, "set by ort_session_options"), False
    if options.intra_op_threads != "auto":
        threads = int(options.intra_op_threads)
        return ThreadChoice(threads, "set by intra_op_threads"), False
    threads = max(1, torch.get_num_threads())
    if threads == 1:
        return ThreadChoice(1, "torch.get_num_threads() is 1"), False
    if first_provider != _session.CPU:
        note = f"not probed: the session runs on {first_provider}"
        return ThreadChoice(threads, note), False
    return ThreadChoice(threads, ""), True


def choose(
    options: _options.OrtBackendOptions,
    first_provider: str,
    make: Callable[[int | None], R],
    run: Callable[[R], object],
    *,
    probe_threads: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[R, ThreadChoice]:
    """A session's runner, made by ``make(threads)`` with the count ``options`` give and,
    under ``"auto"`` on the CPU (and ``probe_threads``), probed against a one-thread twin
    (:func:`probe`)."""
    choice, wanted = initial(options, first_provider)
    runner = make(choice.threads)
    if not (wanted and probe_threads) or choice.threads is None:
        return runner, choice
    return probe(runner, choice.threads, twin=lambda: make(1), run=run, clock=clock)


def probe(
    runner: R,
    threads: int,
    *,
    twin: Callable[[], R],
    run: Callable[[R], object],
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[R, ThreadChoice]:
    """Times ``runner`` (``threads`` threads) and, when its run is short, a one-thread
    ``twin()``, the way every A/B choice is timed (``_choose.faster``); returns the faster
    and the choice.

    Args:
        runner: The session's runner, made with ``threads`` intra-op threads.
        twin: Makes the same session with one thread.
        run: Runs a runner once on the session's first inputs.
        clock: Seconds (a fake one in tests).
    """

    def make_twin() -> tuple[R, Callable[[], object]]:
        single = twin()
        return single, lambda: run(single)

    race = _choose.faster(
        lambda: run(runner), make_twin, below=PROBE_BELOW_SECONDS, clock=clock
    )
    if race.error is not None:
        note = f"{threads} threads: the one-thread twin failed ({race.error})"
        return runner, ThreadChoice(threads, note, race.seconds, threads)
    if not race.timed:
        note = (
            f"{threads} threads: a run takes {race.first_seconds * 1e3:.2f} ms (one thread "
            f"is tried under {PROBE_BELOW_SECONDS * 1e3:g} ms)"
        )
        return runner, ThreadChoice(threads, note, race.seconds, threads)
    assert race.a_seconds is not None and race.b_seconds is not None
    medians = (
        f"{race.b_seconds * 1e3:.3f} ms with 1 thread vs {race.a_seconds * 1e3:.3f} ms "
        f"with {threads} (median of {_choose.RUNS} runs each)"
    )
    if race.kept == "b" and race.b is not None:
        return race.b, ThreadChoice(1, f"1 thread: {medians}", race.seconds, threads)
    return runner, ThreadChoice(
        threads, f"{threads} threads: {medians}", race.seconds, threads
    )
