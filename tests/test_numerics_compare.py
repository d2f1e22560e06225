"""The one comparator (ortlab.numerics._compare): assert_close semantics, NaN/Inf rules,
exact integers, the magnitude rule of decision flips' operands, nested outputs (the
intermediate rule, eager's rounding: tests/test_numerics_blame.py)."""

from __future__ import annotations

import math

import pytest
import torch

from ortlab import numerics
from ortlab.numerics import _compare


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("tol", [None, 1e-3])
def test_compare_tensors_decides_like_assert_close(dtype, tol):
    gen = torch.Generator().manual_seed(1)
    for trial in range(40):
        expected = torch.randn(64, generator=gen).to(dtype)
        noise = torch.randn(64, generator=gen) * 10 ** (-7 + trial % 6)
        actual = (expected.double() + noise.double()).to(dtype)
        if trial % 5 == 0:
            expected[3] = actual[3] = float("nan")  # NaN matching NaN is equal
        if trial % 7 == 0:
            expected[4] = actual[4] = float("inf")
        try:
            torch.testing.assert_close(actual, expected, atol=tol, rtol=tol, equal_nan=True)
            reference = True
        except AssertionError:
            reference = False
        result = numerics.compare_tensors("t", actual, expected, atol=tol, rtol=tol)
        assert result.passed == reference, (trial, result)
        assert (result.ratio <= 1) == result.passed  # what the views colour by


def test_default_tolerances_follow_assert_close_per_dtype():
    assert numerics.default_tolerance(torch.float32) == (1e-5, 1.3e-6)
    assert numerics.default_tolerance(torch.float16) == (1e-5, 1e-3)
    assert numerics.default_tolerance(torch.int64) == (0.0, 0.0)
    result = numerics.compare_tensors("t", torch.ones(3), torch.ones(3) + 2e-5)
    assert (result.atol, result.rtol, result.passed) == (1e-5, 1.3e-6, False)


def test_nan_and_inf_on_one_side_fail_with_infinite_error_and_are_counted():
    expected = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    actual = torch.tensor([1.0, float("inf"), float("nan"), float("nan")])
    result = numerics.compare_tensors("t", actual, expected, atol=1e3, rtol=1e3)
    assert not result.passed
    assert result.max_abs_error == math.inf
    assert (result.nan_eager, result.nan_ort, result.inf_eager, result.inf_ort) == (1, 2, 0, 1)
    assert result.mismatched == 2  # the shared NaN is not a mismatch
    assert "nan 1/2" in result.nonfinite and "inf 0/1" in result.nonfinite


def test_integer_and_bool_values_are_compared_exactly_whatever_the_tolerance():
    ints = numerics.compare_tensors(
        "i", torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), atol=10, rtol=10
    )
    assert ints.exact and not ints.passed and ints.mismatched == 1
    flags = numerics.compare_tensors(
        "b", torch.tensor([True, False]), torch.tensor([True, True]), atol=1, rtol=1
    )
    assert flags.exact and not flags.passed and flags.max_abs_error == 1.0
    assert numerics.compare_tensors("s", 3, 3).passed
    assert not numerics.compare_tensors("s", 3, 4).passed


def test_shape_mismatch_fails_with_a_note():
    result = numerics.compare_tensors("t", torch.zeros(2, 3), torch.zeros(3, 2))
    assert not result.passed and "shape differs" in result.note


def test_magnitude_rule_scales_atol_with_operand_magnitude():
    expected = torch.tensor([0.0, 1000.0])
    actual = torch.tensor([5e-4, 1000.0])  # rounding noise of a value near 1000
    assert not numerics.compare_tensors("t", actual, expected).passed
    scaled = numerics.compare_tensors("t", actual, expected, scale=0.0)
    assert scaled.passed and scaled.atol == pytest.approx(1e-2)
    # Below magnitude 1 the magnitude rule is the output rule.
    small = numerics.compare_tensors("t", torch.tensor([2e-5]), torch.zeros(1), scale=0.5)
    assert not small.passed and small.atol == 1e-5


def test_float64_rule_allows_twice_eagers_error_and_floors_it_at_the_magnitude():
    assert numerics._compare.float64_allowed(1e-3, scale=1.0) == 2e-3
    # Eager rounding exactly onto float64 does not ask ortlab for zero error.
    assert numerics._compare.float64_allowed(0.0, scale=10.0) == pytest.approx(2e-5)


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "actual, expected",
    [
        (torch.tensor([1.0, 2.5, -3.0]), torch.tensor([1.0, 2.0, -3.25])),
        (torch.tensor([_NAN, 1.0]), torch.tensor([_NAN, 1.5])),  # NaN against NaN: 0
        (torch.tensor([_NAN, 1.0]), torch.tensor([0.0, 1.0])),  # NaN on one side: inf
        (torch.tensor([_INF, 1.0]), torch.tensor([_INF, 1.0])),
        (torch.tensor([_INF, 1.0]), torch.tensor([-_INF, 1.0])),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0])),  # shapes: inf
        (torch.tensor(2.0), torch.tensor([2.5])),  # 0-d against (1,)
        ((torch.ones(2), torch.ones(3)), (torch.ones(2),)),  # structure: inf
        ({"a": torch.arange(4), "b": 3}, {"a": torch.arange(4) + 1, "b": 3}),
        (torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex64) * 1j),
        (torch.ones(0, 3), torch.ones(0, 3)),
        (torch.ones(3, dtype=torch.bfloat16), torch.ones(3) * 1.01),
    ],
)
def test_the_largest_difference_alone_is_the_comparators(actual, expected):
    """%ortcompile's max abs diff took every leaf's full statistics (11 s for BERT-base's
    gradients, against well under a second for the largest difference alone)."""
    full = _compare.max_abs_error(_compare.compare_outputs(actual, expected))
    assert _compare.max_abs_difference(actual, expected) == full
