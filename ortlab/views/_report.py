"""The standalone HTML report: one self-contained file with the Inspector's content.

# NOTE: the file must open offline, years later, from anywhere: SVG is inlined (XML
# prolog and DTD removed), plots are base64 PNG data URIs, CSS and the few lines of
# JavaScript (click a node to outline its FX ↔ ONNX counterparts; open a module, search
# nodes: ``_explorer``) are inline. The panels are the Inspector's tabs as declared in
# ``_tabs.TABS``, in their static form. Nothing is
# fetched: no CDN, no fonts, no ``src``/``href`` outside the file. Tabs are pure CSS
# (radio buttons), so the report works with JavaScript off too. Every model string is
# escaped (``_html.esc``, pandas' escaping, or Graphviz's own XML escaping).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from ortlab import _html
from ortlab.views import (
    _compare,
    _dot,
    _explorer,
    _fragments,
    _graphs,
    _profile,
    _style,
    _subjects,
    _tabs,
)

_MAX_TABS = 10

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
.ortlab-explorer g.node, .ortlab-explorer g.cluster text { cursor: pointer; }
.ortlab-explorer-search { width: 420px; margin: 4px 0; }
.ortlab-hits { max-height: 180px; overflow: auto; margin: 2px 0; padding-left: 18px; }
.ortlab-hits li { cursor: pointer; }
.ortlab-hits li:hover { text-decoration: underline; }
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


def _tabs_html(group: str, panels: list[tuple[str, str]]) -> str:
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


def _subject_html(index: int, subject: _subjects.Subject, max_nodes: int) -> str:
    context = _tabs.Context(subject, f"r{index}-", max_nodes=max_nodes)
    panels = [(tab.title, tab.html(context)) for tab in _tabs.tabs_for(subject)]
    return (
        f'<section class="ortlab-subject" id="s{index}">'
        f"<h2>{_html.esc(subject.name)}</h2>"
        f"<p>{_html.esc(repr(subject.backend))}</p>"
        + _tabs_html(f"tabs{index}", panels)
        + "</section>"
    )


def report_html(
    obj: Any,
    *,
    diff: Any = None,
    profile: Any = None,
    title: str = "ortlab report",
    max_nodes: int = _graphs.DEFAULT_MAX_NODES,
) -> str:
    """The report of ``obj`` as one self-contained HTML document (a string).

    Args:
        obj: A backend, a compiled callable, a ``DiffReport``, an ``ortlab.profile`` or
            ``ortlab.compare`` result, or a mapping of names to backends (one section per
            entry).
        diff: A ``DiffReport`` (or a mapping of the same names to reports) for Numerics.
        profile: An ``ortlab.profile`` result (or a mapping of the same names to them)
            for a Profile tab.
        title: The document title.
        max_nodes: Graphs with more nodes are drawn one box per partition.
    """
    obj, profile, prelude = _compare.unpack(obj, profile)
    obj, profile = _profile.unpack(obj, profile)
    subjects = _subjects.subjects(obj, diff)
    profiles = _profile.for_subjects(subjects, profile)
    nav = "".join(f'<a href="#s{i}">{_html.esc(s.name)}</a>' for i, s in enumerate(subjects))
    for i, subject in enumerate(subjects):
        subject.profile = profiles.get(i)
    sections = prelude + "".join(
        _subject_html(i, s, max_nodes) for i, s in enumerate(subjects)
    )
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
        f"<script>{_SCRIPT}{_explorer.SCRIPT}</script>"
        "</body></html>\n"
    )


def report(
    obj: Any,
    path: str | os.PathLike[str],
    *,
    diff: Any = None,
    profile: Any = None,
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
        profile: An ``ortlab.profile`` result (or a mapping of names to them) for a
            Profile tab; ``obj`` may be a profile or a comparison itself.
        title: The document title.
        max_nodes: Graphs with more nodes are drawn one box per partition.

    Returns:
        The path written, as a string.
    """
    text = report_html(obj, diff=diff, profile=profile, title=title, max_nodes=max_nodes)
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
