"""How ortlab names an error in one line (records, warnings, tables)."""

from __future__ import annotations

from ortlab import errors


def test_an_error_is_named_by_its_type_and_first_non_blank_line():
    assert errors.describe(ValueError("bad value\nmore detail")) == "ValueError: bad value"
    assert errors.describe(RuntimeError("\n\n  Fail: [ONNXRuntimeError]  \n")) == (
        "RuntimeError: Fail: [ONNXRuntimeError]"
    )


def test_an_error_without_a_message_is_named_by_its_type():
    assert errors.describe(AssertionError()) == "AssertionError"
    assert errors.describe(KeyError("   \n ")) == "KeyError: '   \\n '"
    assert errors.first_line("  \n \n") == ""
