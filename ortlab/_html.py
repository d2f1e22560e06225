"""Tiny text and HTML helpers built on the standard library (``html.escape``).

Records, reports and results render themselves with these, so a notebook shows them
well without widgets. Every string that can come from a model is escaped here, once, and
every measured number is written by :func:`number` (text tables and HTML alike).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any


def number(value: Any) -> str:
    """A measured value as table text: ``"-"`` for ``None``, ``"yes"``/``"no"`` for bools,
    three significant digits for floats (``"0"``, ``"inf"``, ``"nan"`` as such), other
    values as ``str``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        text = f"{value:.3g}"
        if "e+" in text and abs(value) < 1e6:  # 1.04e+03 ms reads 1040 ms
            text = f"{float(text):.0f}"
        return "0" if value == 0 else text
    return str(value)


def esc(value: Any) -> str:
    """HTML-escapes ``str(value)``, quotes included."""
    return html.escape(str(value), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str = "") -> str:
    """Renders rows as an HTML table; every cell is escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<table class="ortlab">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def block(title: str, body_html: str) -> str:
    """A titled section; ``title`` is escaped, ``body_html`` must already be safe HTML."""
    return f'<div class="ortlab"><b>{esc(title)}</b>{body_html}</div>'


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Renders rows as a plain-text table with aligned columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
