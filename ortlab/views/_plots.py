"""Plots (matplotlib): the compile-time breakdown as a waterfall or bar chart.

Figures are built with ``matplotlib.figure.Figure`` (not ``pyplot``), so plotting never
changes global pyplot state nor needs a GUI backend; notebooks show them inline and the
report embeds them as base64 PNG.
"""

from __future__ import annotations

import base64
import io
from typing import Any, TypeAlias

from ortlab import _deps, errors
from ortlab.views import _tables

# Annotations name matplotlib types as Any: the package is optional and imported lazily.
Axes: TypeAlias = Any
Figure: TypeAlias = Any

_COLORS = (
    "#4c72b0",
    "#55a868",
    "#c44e52",
    "#8172b2",
    "#ccb974",
    "#64b5cd",
    "#dd8452",
    "#937860",
)


def plot_timings(obj: Any, *, kind: str = "waterfall", ax: Axes | None = None) -> Figure:
    """Plots where compile time went: support, partition, type promotion, translate, …

    Args:
        obj: A backend, compiled callable, ``DiffReport``, graph record(s) or a mapping.
        kind: ``"waterfall"`` (each step starts where the previous one ended) or ``"bar"``.
        ax: Axes to draw into; by default a new figure is made.

    Returns:
        The matplotlib figure.

    Raises:
        UnsupportedOptionError: ``kind`` is neither ``"waterfall"`` nor ``"bar"``.
    """
    if kind not in ("waterfall", "bar"):
        raise errors.UnsupportedOptionError(
            f"plot_timings(kind={kind!r}): use kind='waterfall' or kind='bar'."
        )
    figure_mod = _deps.require("matplotlib.figure")
    frame = _tables.timings_frame(obj)
    if ax is None:
        fig = figure_mod.Figure(figsize=(6.4, 0.35 * len(frame) + 1.0), dpi=100)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    ms = frame["seconds"] * 1e3
    steps = list(frame["step"])
    y = list(range(len(steps)))
    colors = [_COLORS[i % len(_COLORS)] for i in y]
    left = frame["start"] * 1e3 if kind == "waterfall" else 0
    ax.barh(y, ms, left=left, color=colors)
    ax.set_yticks(y, labels=steps)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds")
    total = float(ms.sum())
    ax.set_title(f"compile time by step ({kind}), total {total:.1f} ms", fontsize=10)
    ends = (frame["start"] * 1e3 + ms) if kind == "waterfall" else ms
    for yi, end, value in zip(y, ends, ms):
        ax.annotate(
            f"{value:.1f}",
            (float(end), yi),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.margins(x=0.15)
    fig.tight_layout()
    return fig


def figure_png(fig: Figure, *, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def figure_img_html(fig: Figure, *, alt: str = "plot") -> str:
    """An ``<img>`` with the figure embedded as a base64 PNG data URI (self-contained)."""
    from ortlab import _html

    data = base64.b64encode(figure_png(fig)).decode("ascii")
    return f'<img alt="{_html.esc(alt)}" src="data:image/png;base64,{data}"/>'
