"""The one timer: warm-up, interleaved blocks of single calls, median and p10–p90.

Everything ortlab times in steady state goes through :func:`measure`: ``ortlab.bench``'s
backends, the numerics sweep's configurations, the demo's eager/ortlab columns and
``%ortcompile --bench``.

How
---
- Each callable is warmed up (``Timing.warmup`` untimed calls), then timed one call per
  sample with the garbage collector off (as ``timeit`` does), so that a collection does
  not land in one callable's samples only.
- Interleaved (the default): rounds of blocks of ~``BLOCK_SECONDS`` of calls per
  callable, in an order that rotates from round to round, until each has its samples. A
  change of machine load during the run then reaches every callable alike, so ratios
  stay comparable even when absolute times drift. Each block starts with untimed calls
  for at least ``SETTLE_SECONDS`` (at least one): they pay for the switch from the
  previous callable (caches, and torch's OpenMP threads, which keep spinning for
  milliseconds after an eager op and take cores meanwhile).
- Sequential (``interleave=False``): one callable after another, each to completion.
- A callable that raises gets its error recorded and is timed no more; the others go on.
- Statistics: median, p10 and p90 of the samples (``numpy.percentile``, linear
  interpolation).
- The clock is a parameter (``time.perf_counter`` by default), so that tests drive the
  engine with a fake clock and get block sizes independent of the machine's load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ortlab import errors

Clock = Callable[[], float]
"""Seconds from an arbitrary origin, monotonic (``time.perf_counter``)."""

Step = Callable[[], Any]
"""One call to time, including whatever waits for its result (``cuda.synchronize``)."""

BLOCK_SECONDS = 0.05
"""Interleaved timing: the length of one callable's block of timed calls in a round."""
SETTLE_SECONDS = 0.01
"""Interleaved timing: untimed calls before each block, after switching callables."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """How many calls to time and how (see the module docstring).

    Attributes:
        warmup: Untimed calls of each callable before timing starts.
        iters: Timed calls per callable; ``None``: until ``min_time`` seconds of samples
            (at least ``min_iters`` and at most ``max_iters`` calls).
        min_time: Seconds of timed calls per callable when ``iters`` is ``None``.
        min_iters: Least number of timed calls when ``iters`` is ``None``.
        max_iters: Most timed calls when ``iters`` is ``None``.
        interleave: Rounds of blocks (:data:`BLOCK_SECONDS`) in rotating order;
            ``False``: one callable after another, each to completion.

    Raises:
        UnsupportedOptionError: a value is out of range (the message names it).
    """

    warmup: int = 3
    iters: int | None = None
    min_time: float = 1.0
    min_iters: int = 5
    max_iters: int = 10_000
    interleave: bool = True

    def __post_init__(self) -> None:
        if (
            self.warmup < 0
            or self.min_iters < 1
            or self.max_iters < self.min_iters
            or self.min_time < 0
        ):
            raise errors.UnsupportedOptionError(
                "timing: warmup must be >= 0, min_time >= 0 and 1 <= min_iters <= "
                f"max_iters; got warmup={self.warmup}, min_time={self.min_time}, "
                f"min_iters={self.min_iters}, max_iters={self.max_iters}."
            )
        if self.iters is not None and self.iters < 1:
            raise errors.UnsupportedOptionError(
                f"timing: iters must be >= 1 or None; got {self.iters}."
            )

    def done(self, samples: Sequence[float]) -> bool:
        """Whether a callable with these timed samples has enough."""
        n = len(samples)
        if self.iters is not None:
            return n >= self.iters
        return n >= self.max_iters or (n >= self.min_iters and sum(samples) >= self.min_time)

    def wanted(self, samples: Sequence[float]) -> int:
        """How many more timed calls a callable may need (an upper bound)."""
        return (self.iters if self.iters is not None else self.max_iters) - len(samples)

    def settings(self) -> dict[str, Any]:
        """The values that describe a measurement (for results and reports)."""
        return {
            "warmup": self.warmup,
            "iters": self.iters,
            "min_time_s": self.min_time,
            "min_iters": self.min_iters,
            "max_iters": self.max_iters,
            "interleave": self.interleave,
        }


@dataclasses.dataclass
class Measurement:
    """The timed samples of one callable, or why it could not be timed."""

    name: str
    samples: list[float] = dataclasses.field(default_factory=list)
    """Seconds per call, in the order taken."""
    error: str | None = None
    """``"RuntimeError: ..."`` when the callable raised (its samples are then dropped)."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    def percentile_ms(self, q: float) -> float:
        """The ``q``-th percentile of the samples in milliseconds (NaN without samples)."""
        if not self.samples:
            return float("nan")
        return float(np.percentile(self.samples, q)) * 1e3

    @property
    def median_ms(self) -> float:
        return self.percentile_ms(50)

    @property
    def p10_ms(self) -> float:
        return self.percentile_ms(10)

    @property
    def p90_ms(self) -> float:
        return self.percentile_ms(90)


@contextlib.contextmanager
def settled_heap() -> Iterator[Callable[[], None]]:
    """For runs that compile one model after another and time each first call: yields
    ``settle``, which collects garbage and moves every object left into the collector's
    permanent generation (``gc.freeze``), so that the next model's first call pays for
    collecting its own objects only. Without it, each full collection walks everything
    the earlier models left alive (measured in the corpus coverage: 0.35 s after the
    first model, 0.6-1.0 s by the sixth), in whichever compile step it interrupts, or
    between steps, where no timing row explains it. The heap is unfrozen on exit."""

    def settle() -> None:
        gc.collect()
        gc.freeze()

    try:
        yield settle
    finally:
        gc.unfreeze()


def _fail(measurement: Measurement, error: Exception) -> None:
    measurement.error = errors.describe(error)
    measurement.samples = []


def _time_block(samples: list[float], step: Step, timing: Timing, clock: Clock) -> None:
    """Appends one block of timed calls (all remaining calls when not interleaving)."""
    if timing.interleave:
        start = clock()
        calls = 0
        while calls == 0 or clock() - start < SETTLE_SECONDS:
            step()
            calls += 1
        estimate = max((clock() - start) / calls, 1e-6)
        if samples:
            estimate = float(np.median(samples[-5:]))
        count = max(1, min(int(BLOCK_SECONDS / estimate), timing.wanted(samples)))
    else:
        count = timing.wanted(samples)
    for _ in range(count):
        start = clock()
        step()
        samples.append(clock() - start)
        if not timing.interleave and timing.done(samples):
            break


def measure(
    steps: Mapping[str, Step],
    timing: Timing,
    *,
    clock: Clock = time.perf_counter,
) -> dict[str, Measurement]:
    """Warms up and times every callable of ``steps`` (see the module docstring).

    Args:
        steps: Name -> zero-argument callable; timed in this order in the first round.
        timing: How many calls, interleaved or not.
        clock: The clock samples are read from.

    Returns:
        A :class:`Measurement` per name, in the order of ``steps``.
    """
    results = {name: Measurement(name) for name in steps}
    for name, step in steps.items():
        try:
            for _ in range(timing.warmup):
                step()
        except Exception as e:  # one callable's failure never stops the others
            _fail(results[name], e)
    pending = [name for name in steps if results[name].error is None]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        rounds = 0
        while pending:
            # Rotate the order so that no callable always follows the same other one.
            shift = rounds % len(pending)
            for name in pending[shift:] + pending[:shift]:
                try:
                    _time_block(results[name].samples, steps[name], timing, clock)
                except Exception as e:
                    _fail(results[name], e)
            pending = [
                n
                for n in pending
                if results[n].error is None and not timing.done(results[n].samples)
            ]
            rounds += 1
    finally:
        if was_enabled:
            gc.enable()
    return results
