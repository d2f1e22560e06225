"""The notebook lab: graph views, tables, plots, the Inspector widget and the HTML report.

Everything here reads the backend's records only. Heavy optional packages (ipywidgets,
pandas, matplotlib, IPython) are imported on first use; Graphviz's ``dot`` program draws
the graphs, and without it every view falls back to tables with a note on installing it.
"""

from __future__ import annotations

from ortlab._harness import in_notebook
from ortlab.views._cache import clear as clear_drawings
from ortlab.views._compare import comparison_html
from ortlab.views._dot import GraphvizError, Rendered, dot_available, render_svg
from ortlab.views._graphs import (
    DEFAULT_MAX_NODES,
    FlatNode,
    Provenance,
    flat_nodes,
    fx_graph_view,
    module_view,
    onnx_view,
    partition_view,
    provenance,
)
from ortlab.views._heat import heat_view
from ortlab.views._inspector import Inspector, PartitionViewer, inspect
from ortlab.views._plots import plot_timings
from ortlab.views._profile import icicle_svg, profile_frame, profile_html
from ortlab.views._report import report, report_html
from ortlab.views._status import Status, status_line
from ortlab.views._tables import (
    eager_sources_frame,
    graphs_frame,
    partitions_frame,
    reasons_frame,
    sessions_frame,
    timings_frame,
    verdicts_frame,
)
from ortlab.views._timeline import FirstCall, TimelineRow, first_call, timeline_rows

__all__ = [
    # Entry points
    "inspect",
    "report",
    "report_html",
    # Widgets
    "Inspector",
    "PartitionViewer",
    "in_notebook",
    "Status",
    "status_line",
    # Graphs (Graphviz)
    "fx_graph_view",
    "module_view",
    "partition_view",
    "onnx_view",
    "flat_nodes",
    "FlatNode",
    "provenance",
    "Provenance",
    "Rendered",
    "render_svg",
    "dot_available",
    "GraphvizError",
    "DEFAULT_MAX_NODES",
    "clear_drawings",
    # Tables (pandas) and plots (matplotlib)
    "graphs_frame",
    "partitions_frame",
    "verdicts_frame",
    "reasons_frame",
    "sessions_frame",
    "timings_frame",
    "eager_sources_frame",
    "plot_timings",
    # Where the time goes (ortlab.profile) and what changed (ortlab.compare)
    "profile_html",
    "profile_frame",
    "icicle_svg",
    "heat_view",
    "comparison_html",
    # What happened when
    "timeline_rows",
    "TimelineRow",
    "first_call",
    "FirstCall",
]
