"""The one A/B chooser (``_choose.faster``), on a fake clock."""

from __future__ import annotations

import pytest

from ortlab.backend import _choose


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _race(a_ms: float, b_ms: float, *, below_ms: float = 2.0, fail: bool = False):
    clock, order = _Clock(), []

    def runs(name: str, ms: float):
        def run() -> None:
            order.append(name)
            clock.now += ms / 1e3

        return run

    def make_b():
        if fail:
            raise RuntimeError("no second session")
        clock.now += 1e-3  # making B costs time too
        return "B", runs("b", b_ms)

    race = _choose.faster(runs("a", a_ms), make_b, below=below_ms / 1e3, clock=clock)
    return race, order


def test_a_short_first_run_is_timed_against_b_alternately_and_the_faster_kept():
    race, order = _race(0.4, 0.25)
    assert order == ["a", "b"] + ["a", "b"] * _choose.RUNS
    assert race.kept == "b" and race.b == "B"
    assert (race.a_seconds, race.b_seconds) == pytest.approx((0.4e-3, 0.25e-3))
    assert race.medians("A", "B") == "0.400 ms A vs 0.250 ms B (median of 5 runs each)"
    assert race.seconds == pytest.approx((1 + _choose.RUNS) * (0.4e-3 + 0.25e-3) + 1e-3)


def test_ties_keep_a():
    race, _ = _race(0.3, 0.3)
    assert race.kept == "a" and race.timed


def test_a_long_first_run_keeps_a_untimed_without_making_b():
    race, order = _race(5.0, 0.1)
    assert order == ["a"] and race.kept == "a" and race.b is None and not race.timed
    assert race.first_seconds == pytest.approx(5e-3)


def test_b_that_cannot_be_made_keeps_a_and_says_why():
    race, order = _race(0.4, 0.1, fail=True)
    assert order == ["a"] and race.kept == "a" and race.b is None
    assert race.error == "RuntimeError: no second session"
