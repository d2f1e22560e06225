"""The one A/B chooser: which of two ways to run a session's model is faster on its first
inputs (a one-thread twin against more threads, the unfused model against the fused one).

# NOTE: every comparison is measured the same way:
#
#   run A once (its allocations; and it sizes the run)
#     >= below: keep A, untimed (a long run gains nothing measurable from either change,
#               and B would cost a session and its runs)
#   make B (failure: keep A), run B once (its allocations; failure: keep A)
#   RUNS times: run A, run B (alternating, so that a change of load hits both alike)
#   keep B when its median is lower (ties keep A)
#
# ONNX Runtime runs do not change their inputs, so the runs are side-effect free. The
# clock is a parameter: tests use a fake one.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Generic, Literal, TypeVar

from ortlab import errors

RUNS = 5
"""Timed runs of each candidate, after its first run."""

B = TypeVar("B")


@dataclasses.dataclass(frozen=True)
class Race(Generic[B]):
    """The outcome of :func:`faster`."""

    kept: Literal["a", "b"]
    b: B | None
    """B as made (``None`` when it was not made, or failed)."""
    first_seconds: float
    """A's first run."""
    a_seconds: float | None = None
    """A's median (``None``: not timed, its first run was long enough)."""
    b_seconds: float | None = None
    """B's median (``None``: not timed)."""
    error: str | None = None
    """Why B could not be made or run (A is kept)."""
    seconds: float = 0.0
    """Time spent choosing: every run, and making B."""

    @property
    def timed(self) -> bool:
        return self.a_seconds is not None and self.b_seconds is not None

    def medians(self, a: str, b: str) -> str:
        """``"0.250 ms <a> vs 0.400 ms <b> (median of 5 runs each)"``."""
        assert self.a_seconds is not None and self.b_seconds is not None
        return (
            f"{self.a_seconds * 1e3:.3f} ms {a} vs {self.b_seconds * 1e3:.3f} ms {b} "
            f"(median of {RUNS} runs each)"
        )


def faster(
    run_a: Callable[[], object],
    make_b: Callable[[], tuple[B, Callable[[], object]]],
    *,
    below: float,
    clock: Callable[[], float] = time.perf_counter,
) -> Race[B]:
    """Times A against B (see the module's NOTE).

    Args:
        run_a: Runs A once.
        make_b: Makes B; returns it and what runs it once.
        below: A first run of A this long or longer keeps A, untimed.
        clock: Seconds.
    """
    start = clock()
    mark = clock()
    run_a()
    first = clock() - mark
    if first >= below:
        return Race("a", None, first, seconds=clock() - start)
    try:
        b, run_b = make_b()
        run_b()
    except Exception as e:  # A works: keep it
        return Race("a", None, first, error=errors.describe(e), seconds=clock() - start)
    a_times, b_times = [], []
    for _ in range(RUNS):
        mark = clock()
        run_a()
        a_times.append(clock() - mark)
        mark = clock()
        run_b()
        b_times.append(clock() - mark)
    a_median, b_median = statistics.median(a_times), statistics.median(b_times)
    kept: Literal["a", "b"] = "b" if b_median < a_median else "a"
    return Race(kept, b, first, a_median, b_median, seconds=clock() - start)
