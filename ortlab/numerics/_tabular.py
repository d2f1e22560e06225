"""The shared shape of numerics records: a row of raw values (DataFrames) and a row of
display text (the text ``repr`` and the HTML tables of :mod:`ortlab.views.numerics`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

VERDICT = "verdict"
"""The header of the pass/FAIL column of every display table (the views colour it)."""


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("pass" if passed else "FAIL")


class Tabular:
    """A record shown as a table row: raw ``values()`` under ``COLUMNS`` (DataFrames),
    display ``cells()`` under ``HEADERS`` (text and HTML tables)."""

    COLUMNS: ClassVar[tuple[str, ...]] = ()
    HEADERS: ClassVar[tuple[str, ...]] = ()
    FORMATS: ClassVar[tuple[Callable[[Any], str], ...]] = ()
    """How each raw value reads in a cell, when ``cells()`` is ``values()`` formatted
    column by column (records whose cells are not, override ``cells``)."""

    def values(self) -> tuple[Any, ...]:
        """Raw values, one per ``COLUMNS``."""
        raise NotImplementedError

    def cells(self) -> tuple[str, ...]:
        """Display text, one per ``HEADERS``."""
        if not self.FORMATS:
            raise NotImplementedError
        return tuple(fmt(value) for fmt, value in zip(self.FORMATS, self.values()))

    def row(self) -> dict[str, Any]:
        """Raw values keyed by ``COLUMNS``."""
        return dict(zip(self.COLUMNS, self.values()))
