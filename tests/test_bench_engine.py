"""The one timer (ortlab.bench._engine), driven by a fake clock: block sizes, rotation,
failure isolation, statistics. No assertion here depends on the machine's speed."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from ortlab import errors
from ortlab.bench import _engine


class _FakeClock:
    """Only the fake steps advance it, so block sizes follow from the step durations,
    whatever the machine's load."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _step(log, name, clock=None, seconds=0.0, fail_after=None):
    def step():
        if fail_after is not None and log.count(name) >= fail_after:
            raise RuntimeError(f"{name} broke")
        log.append(name)
        if clock is not None:
            clock.now += seconds

    return step


def test_interleaved_timing_alternates_in_blocks_and_isolates_failures():
    clock = _FakeClock()
    log = []
    steps = {
        "a": _step(log, "a", clock, seconds=0.004),
        "b": _step(log, "b", clock, seconds=0.004),
        "c": _step(log, "c", fail_after=3),
    }
    timing = _engine.Timing(warmup=0, iters=30, min_time=0, min_iters=1, max_iters=30)
    a, b, c = _engine.measure(steps, timing, clock=clock).values()
    assert len(a.samples) == len(b.samples) == 30 and a.error is b.error is None
    assert a.samples == pytest.approx([0.004] * 30)
    # Each block: 3 untimed settling calls of 4 ms (the first to reach 10 ms), then
    # int(50 ms / 4 ms) = 12 timed calls; "b" starts right after the first block of "a".
    assert log.index("b") == 3 + 12
    assert log[15:30] == ["b"] * 15
    # "c" fails on its 4th call (in its first block); round 2 rotates the order: "b"
    # leads, then "a". 30 samples take blocks of 12, 12 and 6.
    assert log[30:33] == ["c"] * 3
    assert log[33:48] == ["b"] * 15 and log[48:63] == ["a"] * 15
    assert log.count("a") == log.count("b") == 30 + 3 * 3
    assert c.error == "RuntimeError: c broke" and c.samples == [] and not c.ok


def test_sequential_timing_runs_each_callable_to_completion_after_its_warm_up():
    log = []
    steps = {"a": _step(log, "a"), "b": _step(log, "b")}
    timing = _engine.Timing(warmup=2, min_time=0.0, min_iters=4, max_iters=4, interleave=False)
    results = _engine.measure(steps, timing, clock=_FakeClock())
    assert log == ["a"] * 2 + ["b"] * 2 + ["a"] * 4 + ["b"] * 4
    assert [len(m.samples) for m in results.values()] == [4, 4]


def test_min_time_stops_between_min_and_max_iters():
    clock = _FakeClock()
    log = []
    steps = {"a": _step(log, "a", clock, seconds=0.1)}
    timing = _engine.Timing(
        warmup=0, min_time=0.35, min_iters=2, max_iters=50, interleave=False
    )
    (a,) = _engine.measure(steps, timing, clock=clock).values()
    assert len(a.samples) == 4  # 0.4 s is the first sum of samples >= 0.35 s
    capped = _engine.Timing(
        warmup=0, min_time=10.0, min_iters=2, max_iters=6, interleave=False
    )
    (b,) = _engine.measure(steps, capped, clock=clock).values()
    assert len(b.samples) == 6


def test_a_failing_warm_up_is_an_error_and_others_are_still_timed():
    log = []
    steps = {"bad": _step(log, "bad", fail_after=0), "good": _step(log, "good")}
    timing = _engine.Timing(warmup=1, iters=3, interleave=False)
    bad, good = _engine.measure(steps, timing, clock=_FakeClock()).values()
    assert bad.error == "RuntimeError: bad broke" and bad.samples == []
    assert good.error is None and len(good.samples) == 3


def test_statistics_are_numpy_percentiles_in_milliseconds():
    samples = [0.001, 0.002, 0.004, 0.003, 0.010]
    m = _engine.Measurement("x", samples)
    assert m.median_ms == pytest.approx(3.0)
    assert m.p10_ms == pytest.approx(np.percentile(samples, 10) * 1e3)
    assert m.p90_ms == pytest.approx(np.percentile(samples, 90) * 1e3)
    assert m.p10_ms <= m.median_ms <= m.p90_ms
    assert math.isnan(_engine.Measurement("empty").median_ms)


def test_the_garbage_collector_is_off_while_timing_and_restored_after():
    states = []
    steps = {"a": lambda: states.append(gc.isenabled())}
    assert gc.isenabled()
    _engine.measure(steps, _engine.Timing(warmup=1, iters=2, interleave=False))
    assert states == [True, False, False]  # warm-up with it, timed calls without
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup": -1}, "warmup"),
        ({"iters": 0}, "iters"),
        ({"min_iters": 0}, "min_iters"),
        ({"min_iters": 5, "max_iters": 4}, "max_iters"),
        ({"min_time": -1.0}, "min_time"),
    ],
)
def test_timing_rejects_values_out_of_range(kwargs, message):
    with pytest.raises(errors.UnsupportedOptionError, match=message):
        _engine.Timing(**kwargs)


def test_a_settled_heap_is_frozen_after_each_settle_and_unfrozen_on_exit():
    with pytest.raises(RuntimeError, match="planted"):
        with _engine.settled_heap() as settle:
            assert gc.get_freeze_count() == 0
            settle()
            assert gc.get_freeze_count() > 0  # earlier objects: no full collection walks them
            raise RuntimeError("planted")
    assert gc.get_freeze_count() == 0
