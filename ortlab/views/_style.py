"""The look of every view, defined once: colours, CSS, legends, Graphviz defaults.

The Inspector, the report and the Numerics view draw graphs and tables with these, so that
one thing (an eager node, a graph input, an error beyond tolerance) looks the same
everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from ortlab import _html

# -- colours -----------------------------------------------------------------------------

PALETTE = (
    "#c6dbef",
    "#c7e9c0",
    "#fdd0a2",
    "#dadaeb",
    "#d9f0d3",
    "#fee391",
    "#c7eae5",
    "#e5d8bd",
    "#bcbddc",
    "#a6dba0",
    "#9ecae1",
    "#fdae6b",
)
"""Pastel fills for partitions, cycled; red tones are kept for eager nodes."""
EAGER_FILL = "#fde0dd"
EAGER_LINE = "#cb181d"
IO_FILL = "#f0f0f0"
"""Graph inputs and outputs, in every graph."""
WATERFALL_FILL = "#4c72b0"
"""A compile step's bar in the Timings tab's waterfall."""
HIGHLIGHT = "#d6007e"
"""The outline of chosen nodes (provenance)."""
IDLE_FILL = "white"
"""Nodes without a colour of their own (ONNX nodes; nodes not compared)."""
FUSED_FILL = "#e0ecf4"
"""ONNX Runtime's fused operators (Attention, SkipLayerNormalization...)."""
MODULE_FILLS = ("#fbfbfb", "#f3f3f3", "#ebebeb", "#e3e3e3")
"""Backgrounds of expanded modules, by depth (cycled)."""

PASS_FILL = "#c9f2d0"
"""Numerics: error below 10% of the tolerance."""
NEAR_FILL = "#ffe8a3"
"""Numerics: error from 10% to 100% of the tolerance."""
FAIL_FILL = "#ffb3b3"
"""Numerics: error beyond the tolerance."""
FIRST_LINE = "#b00020"
"""Numerics: the outline of the first divergent node."""
PASS_TEXT = "#1a7f37"
FAIL_TEXT = "#cf222e"


def partition_color(index: int) -> str:
    """The fill colour of the ``index``-th partition of a graph (same in every view)."""
    return PALETTE[index % len(PALETTE)]


def depth_fill(depth: int) -> str:
    """The background of an expanded module ``depth`` levels below the model."""
    return MODULE_FILLS[depth % len(MODULE_FILLS)]


def error_fill(ratio: float | None) -> str:
    """The fill of a compared value: its error over the allowed error, on a log scale
    (``None``: not compared)."""
    if ratio is None:
        return IDLE_FILL
    if ratio >= 1:
        return FAIL_FILL
    return NEAR_FILL if ratio >= 0.1 else PASS_FILL


# -- HTML --------------------------------------------------------------------------------

CSS = f"""
.ortlab-root {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
  font-size: 13px; color: #222; }}
.ortlab-root h3, .ortlab-root h4 {{ margin: 8px 0 4px 0; }}
.ortlab-headline {{ font-weight: 600; padding: 4px 0; }}
.ortlab-note {{ color: #8a4b00; background: #fff6e5; padding: 4px 8px; border-radius: 4px;
  margin: 4px 0; }}
table.ortlab-table, table.ortlab {{ border-collapse: collapse; margin: 4px 0 8px 0;
  font-size: 12px; }}
table.ortlab-table th, table.ortlab-table td, table.ortlab th, table.ortlab td {{
  border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }}
table.ortlab-table th, table.ortlab th {{ background: #f4f4f4; }}
.ortlab-graph {{ overflow: auto; max-height: 960px; border: 1px solid #eee;
  background: white; padding: 2px; }}
.ortlab-graph svg {{ max-width: 100%; height: auto; }}
.ortlab-graph.ortlab-natural svg {{ max-width: none; }}
.ortlab-side {{ display: flex; gap: 8px; align-items: flex-start; }}
.ortlab-side > div {{ flex: 1 1 50%; min-width: 0; }}
.ortlab-legend span {{ display: inline-block; padding: 0 6px; margin-right: 6px;
  border-radius: 3px; border: 1px solid #999; }}
.ortlab-num-pass {{ color: {PASS_TEXT}; font-weight: 600; }}
.ortlab-num-fail {{ color: {FAIL_TEXT}; font-weight: 600; }}
.ortlab-num-first {{ border-left: 4px solid {FIRST_LINE}; background: #fff0f0;
  padding: 4px 8px; margin: 6px 0; }}
.ortlab-first-call {{ border-left: 4px solid #4c72b0; background: #f0f4fa;
  padding: 4px 8px; margin: 6px 0; }}
.ortlab-cause {{ color: #444; margin: 2px 0 6px 0; }}
table.ortlab-timeline td:first-child, table.ortlab-timeline th:first-child {{
  white-space: nowrap; font-weight: 600; }}
table.ortlab-timeline tr.ortlab-reused td {{ color: #777; }}
.ortlab-root .widget-html-content {{ line-height: 1.4; }}
.ortlab-zoom button {{ font-size: 11px; padding: 0 6px; margin: 2px 2px 0 0;
  cursor: pointer; }}
.ortlab-clickable g.node, .ortlab-clickable g.cluster text {{ cursor: pointer; }}
.ortlab-group > summary {{ font-weight: normal; }}
.ortlab-group-eager > summary {{ color: {EAGER_LINE}; font-weight: 600; }}
.ortlab-ops {{ color: #555; margin: 2px 0 4px 0; }}
.ortlab-inputs > summary {{ font-weight: normal; }}
"""
"""The stylesheet of every view (class names ``ortlab-*``)."""


def styled(body_html: str) -> str:
    """``body_html`` with the stylesheet, in a root element: self-contained HTML for a
    notebook output or a widget."""
    return f'<style>{CSS}</style><div class="ortlab-root">{body_html}</div>'


def legend(entries: Sequence[tuple[str, str]]) -> str:
    """A legend of ``(inline CSS of the swatch, label)`` entries; labels are escaped."""
    spans = "".join(f'<span style="{css}">{_html.esc(label)}</span>' for css, label in entries)
    return f'<div class="ortlab-legend">{spans}</div>'


PARTITION_LEGEND = legend(
    [
        (f"background:{PALETTE[0]}", "partition (ONNX Runtime)"),
        (
            f"background:{EAGER_FILL};border-color:{EAGER_LINE}",
            "eager (PyTorch) — hover a node for its reason",
        ),
        (f"background:{IO_FILL}", "inputs / outputs"),
    ]
)
"""The legend of graphs coloured by partition."""

ERROR_LEGEND = legend(
    [
        (f"background:{PASS_FILL}", "error < 10% of tolerance"),
        (f"background:{NEAR_FILL}", "10–100%"),
        (f"background:{FAIL_FILL}", "beyond tolerance"),
        (f"background:{IDLE_FILL}", "not compared"),
        (f"background:{IO_FILL}", "inputs / outputs"),
        (f"border:3px solid {FIRST_LINE}", "first divergent node"),
    ]
)
"""The legend of graphs coloured by numerical error."""

# -- Graphviz ----------------------------------------------------------------------------

GRAPH_ATTRS = (
    'graph [rankdir=TB, nodesep=0.25, ranksep=0.3, fontname="Helvetica", fontsize=11, '
    'bgcolor="white", margin=0.1];\n'
    'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, '
    f'fillcolor="{IDLE_FILL}", margin="0.08,0.03", height=0.3];\n'
    'edge [arrowsize=0.6, color="#555555", fontname="Helvetica", fontsize=8];\n'
)
"""Graph, node and edge defaults of every DOT graph the views write."""
