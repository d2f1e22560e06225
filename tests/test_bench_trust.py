"""Benchmarks say when they cannot be trusted, and print three significant digits."""

from __future__ import annotations

import pandas as pd
import pytest

from ortlab import magic
from ortlab.bench import _format, _machine, _result


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1234.0, "1230"),
        (0.0312, "0.0312"),
        (5.284, "5.28"),
        (99.96, "100"),
        (0.9996, "1.00"),
        (-2.345, "-2.35"),
        (0.0, "0"),
    ],
)
def test_sig3_prints_three_significant_digits_without_an_exponent(value, text):
    assert _format.sig3(value) == text


def test_trust_notes_name_a_busy_machine_and_a_wide_spread():
    assert _machine.trust_notes(load=1.9, cores=2, spreads={"ort": (1.0, 1.9)}) == []
    busy = _machine.trust_notes(load=4.1, cores=2)
    assert len(busy) == 1 and "load average 4.1 on 2 cores" in busy[0]
    spread = _machine.trust_notes(load=None, cores=2, spreads={"eager": (1.0, 2.5)})
    assert len(spread) == 1 and spread[0].startswith("eager's times spread ×2.5")


def test_a_peer_whose_outputs_equal_eagers_to_the_bit_is_flagged():
    rows = [
        {"backend": "eager", "max_abs_diff": 0.0, "ratio_to_eager": 1.0},
        {"backend": "inductor", "max_abs_diff": 0.0, "ratio_to_eager": 0.97},  # same kernels
        {"backend": "openvino", "max_abs_diff": 0.0, "ratio_to_eager": 0.96},
    ]
    frame = pd.DataFrame([{c: None for c in _result.COLUMNS} | row for row in rows])

    def notes() -> list[str]:
        return _result.BenchResult(frame, {"cores": 2, "load_avg_1m": 0.5}).trust_notes

    (note,) = notes()
    assert note.startswith("openvino's outputs equal eager's to the bit (max |diff| 0), at")
    frame.loc[2, "max_abs_diff"] = 2e-6  # computed its own
    assert notes() == []
    frame.loc[2, ["max_abs_diff", "ratio_to_eager"]] = [0.0, 14.0]  # exact, and its own speed
    assert notes() == []


def _result_on(load: float, p90: float) -> _result.BenchResult:
    frame = pd.DataFrame(
        [
            {c: None for c in _result.COLUMNS}
            | {"backend": "eager", "median_ms": 10.0, "p10_ms": 9.0, "p90_ms": p90}
        ]
    )
    return _result.BenchResult(frame, {"cores": 2, "load_avg_1m": load})


def test_bench_result_warns_in_text_markdown_and_html_when_not_trustworthy():
    quiet = _result_on(0.5, 11.0)
    assert quiet.trust_notes == []
    assert "Warning" not in repr(quiet) + quiet.to_markdown() + quiet._repr_html_()
    busy = _result_on(3.0, 30.0)
    assert len(busy.trust_notes) == 2
    for text in (repr(busy), busy.to_markdown(), busy._repr_html_()):
        assert "load average 3 on 2 cores" in text and "spread ×3.33" in text


def test_the_magic_s_timing_line_warns_on_a_busy_machine():
    b = {
        "calls": 5,
        "ortlab_ms": 1.23456,
        "ortlab_p10_ms": 1.2,
        "ortlab_p90_ms": 1.3,
        "eager_ms": 6.51,
        "eager_p10_ms": 6.0,
        "eager_p90_ms": 7.0,
        "speedup": 6.51 / 1.23456,
        "cores": 2,
    }
    line = magic._bench_line(b | {"load_avg": 1.0})
    assert "ortlab 1.23 ms [1.20–1.30] vs eager 6.51 ms" in line
    assert "(speed-up ×5.27)" in line and "NOT TRUSTWORTHY" not in line
    line = magic._bench_line(b | {"load_avg": 4.0})
    assert "NOT TRUSTWORTHY: the machine was busy: load average 4 on 2 cores" in line


def test_table_numbers_have_three_digits_and_no_exponent_below_a_million():
    from ortlab import _html

    assert [_html.number(v) for v in (1039.3, 123456.0, 0.5, 4.1)] == [
        "1040", "123000", "0.5", "4.1",
    ]  # fmt: skip
    assert _html.number(2.5e6) == "2.5e+06" and _html.number(3.58e-6) == "3.58e-06"
