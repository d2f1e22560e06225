"""The standalone HTML report: one self-contained file with the Inspector's content.

# NOTE: the file must open offline, years later, from anywhere: SVG is inlined (XML
# prolog and DTD removed), plots are base64 PNG data URIs, CSS and the few lines of
# JavaScript (click a node to outline its FX ↔ ONNX counterparts) are inline. Nothing is
# fetched: no CDN, no fonts, no ``src``/``href`` outside the file. Tabs are pure CSS
# (radio buttons), so the report works with JavaScript off too. Every model string is
# escaped (``_html.esc``, pandas' escaping, or Graphviz's own XML escaping).
"""

from __future__ import annotations

import datetime
import json
import os
from typing import TYPE_CHECKING, Any

from ortlab import _html
from ortlab.views import _dot, _fragments, _graphs, _style, _subjects, _tables, numerics

if TYPE_CHECKING:
    from ortlab.backend import records

_MAX_TABS = 8

_REPORT_CSS = """
body { margin: 16px 24px; background: #fafafa; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
nav a { margin-right: 12px; }
section.ortlab-subject { background: white; border: 1px solid #ddd; border-radius: 6px;
  padding: 8px 16px 16px 16px; margin: 16px 0; }
.ortlab-tabs > input { position: absolute; opacity: 0; pointer-events: none; }
.ortlab-tabs > label { display: inline-block; padding: 6px 14px; border: 1px solid #ccc;
  border-bottom: none; border-radius: 6px 6px 0 0; background: #eee; cursor: pointer;
  margin-right: 2px; }
.ortlab-tabs > div.ortlab-panel { display: none; border-top: 1px solid #ccc;
  padding-top: 8px; }
details { margin: 8px 0; border: 1px solid #e4e4e4; border-radius: 4px; padding: 4px 8px; }
details > summary { cursor: pointer; font-weight: 600; }
.ortlab-hl polygon, .ortlab-hl ellipse, .ortlab-hl path {
  stroke: HIGHLIGHT !important; stroke-width: 4px !important; }
.ortlab-prov g.node { cursor: pointer; }
""".replace("HIGHLIGHT", _style.HIGHLIGHT)

_TAB_CSS = "".join(
    f".ortlab-tabs > input:nth-of-type({n}):checked ~ div.ortlab-panel:nth-of-type({n})"
    " { display: block; }\n"
    f".ortlab-tabs > input:nth-of-type({n}):checked + label {{ background: white;"
    " font-weight: 600; }\n"
    for n in range(1, _MAX_TABS + 1)
)

# Click an FX node to outline the ONNX nodes it became (and back). The links of each
# partition view live in its container's data-links attribute (JSON, HTML-escaped).
_SCRIPT = """
document.querySelectorAll('.ortlab-prov').forEach(function (box) {
  var links = JSON.parse(box.getAttribute('data-links') || '{}');
  box.addEventListener('click', function (ev) {
    var node = ev.target.closest('g.node');
    if (!node) { return; }
    box.querySelectorAll('.ortlab-hl').forEach(function (el) {
      el.classList.remove('ortlab-hl');
    });
    var ids = [node.id].concat(links[node.id] || []);
    ids.forEach(function (id) {
      var el = document.getElementById(id);
      if (el) { el.classList.add('ortlab-hl'); }
    });
  });
});
"""


def _versions() -> str:
    import onnx
    import onnxruntime
    import torch

    import ortlab

    return (
        f"ortlab {ortlab.__version__} · torch {torch.__version__} · onnx {onnx.__version__} · "
        f"onnxruntime {onnxruntime.__version__}"
    )


def _tabs(group: str, panels: list[tuple[str, str]]) -> str:
    inputs = []
    bodies = []
    for i, (title, body) in enumerate(panels):
        tab_id = f"{group}-t{i}"
        checked = " checked" if i == 0 else ""
        inputs.append(
            f'<input type="radio" name="{group}" id="{tab_id}"{checked}>'
            f'<label for="{tab_id}">{_html.esc(title)}</label>'
        )
        bodies.append(f'<div class="ortlab-panel" data-tab="{_html.esc(title)}">{body}</div>')
    return f'<div class="ortlab-tabs">{"".join(inputs)}{"".join(bodies)}</div>'


def _provenance_links(
    session: records.SessionRecord, fx: _dot.Rendered, onnx: _dot.Rendered
) -> dict[str, list[str]]:
    prov = _graphs.provenance(session)
    links: dict[str, list[str]] = {}
    for fx_name, indices in prov.fx_to_onnx.items():
        fx_id = fx.ids.get(fx_name)
        onnx_ids = [onnx.ids[str(i)] for i in indices if str(i) in onnx.ids]
        if fx_id is None:
            continue
        links.setdefault(fx_id, []).extend(onnx_ids)
        for onnx_id in onnx_ids:
            links.setdefault(onnx_id, []).append(fx_id)
    return links


def _partition_html(
    prefix: str, graph: records.GraphRecord, part: records.PartitionRecord
) -> str:
    fx = _graphs.partition_view(part, graph, id_prefix=f"{prefix}fx-")
    blocks = []
    if not part.sessions:
        reason = part.error or "the partition has not run yet"
        blocks.append(
            '<div class="ortlab-side"><div>'
            + _fragments.graph_html(fx, _fragments.partition_nodes_table(part))
            + "</div><div>"
            + _fragments.note(f"No ONNX model for {part.name}: {reason}.")
            + "</div></div>"
        )
    for s in part.sessions:
        onnx = _graphs.onnx_view(s, id_prefix=f"{prefix}s{s.index}-")
        links = _provenance_links(s, fx, onnx)
        title = (
            f"session {s.index}: {', '.join(s.input_schema)} → {', '.join(s.output_schema)}"
        )
        data = _html.esc(json.dumps(links))
        side = (
            f'<div class="ortlab-side ortlab-prov" data-links="{data}"><div>'
            + _fragments.graph_html(fx, _fragments.partition_nodes_table(part))
            + "</div><div>"
            + _fragments.graph_html(onnx, _fragments.onnx_nodes_table(s))
            + "</div></div>"
        )
        body = (
            "<p>Click a node to outline its counterparts (FX ↔ ONNX).</p>"
            + side
            + "<h4>Provenance</h4>"
            + _fragments.provenance_table(s)
        )
        blocks.append(
            f"<details{' open' if s.index == 0 else ''}><summary>{_html.esc(title)}</summary>"
            f"{body}</details>"
        )
    state = "" if part.state == "ort" else " · eager (failed)"
    summary = (
        f"{part.name} · {len(part.node_names)} nodes · {len(part.sessions)} sessions{state}"
    )
    error = _fragments.note(f"Runs in PyTorch: {part.error}") if part.error else ""
    return (
        f'<details class="ortlab-partition" open><summary>{_html.esc(summary)}</summary>'
        + error
        + "".join(blocks)
        + "<h4>Verdicts</h4>"
        + _fragments.partition_verdicts_html(part, graph)
        + "<h4>Sessions</h4>"
        + _tables.frame_html(_tables.sessions_frame(part))
        + "</details>"
    )


def _partitions_panel(prefix: str, backend: Any, max_nodes: int) -> str:
    if not backend.graphs:
        return _fragments.note("Nothing compiled yet: call the compiled model first.")
    out = [_style.PARTITION_LEGEND]
    for g in backend.graphs:
        gp = f"{prefix}g{g.index}-"
        rendered = _graphs.fx_graph_view(g, max_nodes=max_nodes, id_prefix=gp)
        out.append(f"<h3>Graph {g.index} ({_html.esc(g.kind)})</h3>")
        out.append(_fragments.graph_cause_html(g))
        out.append(_fragments.graph_html(rendered, _fragments.fx_nodes_table(g)))
        out.append(_fragments.eager_nodes_html(g))
        for i, part in enumerate(g.partitions):
            out.append(_partition_html(f"{gp}p{i}-", g, part))
    return "".join(out)


def _onnx_panel(backend: Any) -> str:
    sessions = [(p, s) for p in backend.partitions for s in p.sessions]
    if not sessions:
        return _fragments.note("No ONNX model yet: call the compiled model first.")
    out = [
        "<p>Each model is drawn next to its FX subgraph in the Partitions tab.</p>",
    ]
    for p, s in sessions:
        title = f"graph {p.graph_index} ({p.graph_kind}) · {p.name} · session {s.index}"
        out.append(
            f"<details open><summary>{_html.esc(title)}</summary>"
            + _fragments.onnx_model_info(s)
            + "<h4>Nodes</h4>"
            + _fragments.onnx_nodes_table(s)
            + "</details>"
        )
    return "".join(out)


def _subject_html(index: int, subject: _subjects.Subject, max_nodes: int) -> str:
    prefix = f"r{index}-"
    backend = subject.backend
    panels = [
        ("Summary", _fragments.summary_html(backend)),
        ("Partitions", _partitions_panel(prefix, backend, max_nodes)),
        ("ONNX", _onnx_panel(backend)),
        ("Sessions", _tables.frame_html(_tables.sessions_frame(backend))),
        ("Timings", _fragments.timings_html(backend)),
    ]
    if subject.diff is not None:
        panels.append(("Numerics", numerics.numerics_html(subject.diff)))
    return (
        f'<section class="ortlab-subject" id="s{index}">'
        f"<h2>{_html.esc(subject.name)}</h2>"
        f"<p>{_html.esc(repr(backend))}</p>" + _tabs(f"tabs{index}", panels) + "</section>"
    )


def report_html(
    obj: Any,
    *,
    diff: Any = None,
    title: str = "ortlab report",
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
) -> str:
    """The report of ``obj`` as one self-contained HTML document (a string).

    Args:
        obj: A backend, a compiled callable, a ``DiffReport``, or a mapping of names to
            those (one section per entry).
        diff: A ``DiffReport`` (or a mapping of the same names to reports) for Numerics.
        title: The document title.
        max_nodes: Graphs with more nodes are drawn one box per partition.
    """
    subjects = _subjects.subjects(obj, diff)
    nav = "".join(f'<a href="#s{i}">{_html.esc(s.name)}</a>' for i, s in enumerate(subjects))
    sections = "".join(_subject_html(i, s, max_nodes) for i, s in enumerate(subjects))
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    dot_note = "" if _dot.dot_available() else _fragments.note(_dot.INSTALL_HINT)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_html.esc(title)}</title>"
        f"<style>{_style.CSS}{_REPORT_CSS}{_TAB_CSS}</style></head>"
        '<body class="ortlab-root">'
        f"<header><h1>{_html.esc(title)}</h1>"
        f"<p>{_html.esc(when)} · {_html.esc(_versions())}</p>"
        f"<nav>{nav}</nav>{dot_note}</header>"
        f"<main>{sections}</main>"
        f"<script>{_SCRIPT}</script>"
        "</body></html>\n"
    )


def report(
    obj: Any,
    path: str | os.PathLike[str],
    *,
    diff: Any = None,
    title: str = "ortlab report",
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
) -> str:
    """Writes the self-contained HTML report of ``obj`` to ``path``.

    The file has the Inspector's content (summary, partitions with FX and ONNX graphs,
    verdicts, sessions, timings, numerics when given), opens offline and references
    nothing outside itself. Parent folders are created.

    Args:
        obj: A backend, a compiled callable, a ``DiffReport``, or a mapping of names to
            those (one section per entry).
        path: Where to write the ``.html`` file.
        diff: A ``DiffReport`` (or a mapping of the same names to reports) for Numerics.
        title: The document title.
        max_nodes: Graphs with more nodes are drawn one box per partition.

    Returns:
        The path written, as a string.
    """
    text = report_html(obj, diff=diff, title=title, max_nodes=max_nodes)
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
