"""The standalone HTML report: parses, is self-contained, escapes every model string."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from test_views_helpers import compile_zoo, parse

import ortlab
from ortlab import views, zoo
from ortlab.views import _dot

# Tags the report may contain: its own HTML (a drawing's zoom buttons included), Graphviz
# SVG, and nothing else. A model string that escaped escaping (``<built-in function
# getitem>``) would add a tag.
HTML_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "h4",
    "p", "nav", "a", "main", "section", "div", "span", "input", "label", "table",
    "thead", "tbody", "tr", "th", "td", "caption", "details", "summary", "img", "b",
    "code", "br", "script", "button",
}  # fmt: skip
SVG_TAGS = {"svg", "g", "polygon", "ellipse", "path", "text", "polyline", "defs"}


@pytest.fixture(scope="module")
def zoo_backends():
    custom, _ = compile_zoo("custom_op")
    mlp, _ = compile_zoo("mlp", grad=True, batches=(4,))
    return {"custom_op": custom, "mlp <train>": mlp.ortlab_backend}


def _getitem_model():
    """A graph with ``<built-in function getitem>`` targets and an eager custom op."""
    zoo.get("custom_op").build()  # registers ortlab_zoo::soft_clip
    soft_clip = torch.ops.ortlab_zoo.soft_clip

    def f(x):
        a, b = torch.split(x, 2, dim=1)
        return soft_clip(a, 2.0) * b.sigmoid()

    return f


def test_report_is_one_self_contained_html_file_with_every_tab(zoo_backends, tmp_path):
    path = ortlab.report(zoo_backends, tmp_path / "nested" / "zoo.html")
    assert path == str(tmp_path / "nested" / "zoo.html")
    text = (tmp_path / "nested" / "zoo.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    doc = parse(text)
    sections = [a for t, a in doc.tags if t == "section"]
    assert [s["id"] for s in sections] == ["s0", "s1"]
    labels = re.findall(r"<label for=\"tabs\d-t\d\">([^<]+)</label>", text)
    assert labels == ["Summary", "Partitions", "ONNX", "Sessions", "Timings"] * 2
    # Graphs: one FX view per graph, an ONNX view per session, and an FX view per
    # session of a partition that does not hold its whole graph (else drawn above).
    backends = [ortlab.backend_of(v) for v in zoo_backends.values()]
    graphs = sum(len(b.graphs) for b in backends)
    sessions = sum(len(b.sessions) for b in backends)
    partial = sum(
        len(p.sessions)
        for b in backends
        for g in b.graphs
        for p in g.partitions
        if len(p.node_names) < g.node_count
    )
    if _dot.dot_available():
        assert text.count("<svg") >= graphs + sessions + partial
        assert text.count('class="cluster ') >= sum(len(b.partitions) for b in backends)
    images = [a["src"] for t, a in doc.tags if t == "img"]
    assert images == []  # the waterfalls are HTML
    assert "soft_clip" in text and "no ONNX translation" in text
    assert "mlp &lt;train&gt;" in text  # the entry name is escaped too


def test_report_references_nothing_outside_itself(zoo_backends, tmp_path):
    text = open(ortlab.report(zoo_backends, tmp_path / "r.html"), encoding="utf-8").read()
    doc = parse(text)
    for tag, attrs in doc.tags:
        assert tag != "link" and tag != "iframe" and tag != "object"
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href", "action", "poster", "data"):
                assert value.startswith(("#", "data:")), (tag, name, value[:80])
            if name.startswith("xmlns"):
                continue  # namespace names, never fetched
            assert not re.match(r"\s*([a-z]+:)?//", value or ""), (tag, name, value[:80])
    assert len([t for t, _ in doc.tags if t == "script"]) == 1
    assert not [t for t, a in doc.tags if t == "script" and "src" in a]
    assert "@import" not in text and "url(" not in text
    assert "<!DOCTYPE svg" not in text and "<?xml" not in text


def test_report_escapes_every_string_that_comes_from_a_model(tmp_path):
    compiled = ortlab.compile(_getitem_model())
    with torch.no_grad():
        compiled(torch.randn(3, 4))
    backend = compiled.ortlab_backend
    targets = {v.target for g in backend.graphs for v in g.verdicts}
    assert "<built-in function getitem>" in targets
    # Strings a hostile model could carry: reasons and errors are rendered everywhere.
    verdict = next(v for g in backend.graphs for v in g.verdicts if not v.supported)
    verdict.reason = "<img src=x onerror=alert(1)> & <script>alert(2)</script>"
    backend.partitions[0].error = "<b>boom</b> in <built-in function getitem>"

    text, doc = _report_of(backend, tmp_path)
    assert "<built-in function" not in text and "<script>alert" not in text
    assert "&lt;built-in function getitem&gt;" in text
    visible = "".join(doc.text)
    assert "<img src=x onerror=alert(1)>" in visible
    assert "<b>boom</b> in <built-in function getitem>" in visible


def _report_of(backend, tmp_path):
    """The report's text and parsed document, checked for markup of its own only: known
    tags, one script (its own), one image (the timings plot)."""
    text = open(ortlab.report(backend, tmp_path / "r.html"), encoding="utf-8").read()
    doc = parse(text)
    tags = {t for t, _ in doc.tags}
    assert tags <= HTML_TAGS | SVG_TAGS, tags - HTML_TAGS - SVG_TAGS
    assert len([t for t, _ in doc.tags if t == "script"]) == 1
    assert not [t for t, _ in doc.tags if t == "img"]  # the timings waterfall is HTML
    return text, doc


def test_report_escapes_source_lines_graph_causes_and_the_timeline(tmp_path):
    compiled = ortlab.compile(_getitem_model())
    with torch.no_grad():
        compiled(torch.randn(3, 4))
    backend = compiled.ortlab_backend
    # A source line is the user's code, quoted: it may hold any markup.
    hostile = "model.py:3 in forward: y = '<script>alert(1)</script>' & x"
    for verdict in backend.graphs[0].verdicts:
        verdict.source = hostile
    backend.graphs[0].graph_break = "<img src=x onerror=alert(2)> in print"
    backend.graphs[0].graph_break_source = hostile
    backend.timeline[0] = dataclasses.replace(backend.timeline[0], detail=hostile)

    text, doc = _report_of(backend, tmp_path)
    assert "<script>alert" not in text and "<img src=x" not in text
    visible = "".join(doc.text)
    assert visible.count(hostile) >= 4  # by source line, eager nodes, cause, timeline
    assert "<img src=x onerror=alert(2)> in print" in visible


def test_report_html_without_graphviz_keeps_tables_and_says_how_to_install(
    zoo_backends, monkeypatch, tmp_path
):
    monkeypatch.setenv("PATH", str(tmp_path))
    text = views.report_html(zoo_backends["custom_op"])
    assert "<svg" not in text
    assert "apt-get install graphviz" in text
    assert "soft_clip" in text and "node_addmm" in text  # FX and ONNX node tables


def test_report_of_a_diff_report_has_a_numerics_tab(tmp_path):
    model, args = zoo.get("mlp").instantiate()
    with torch.no_grad():
        diff = ortlab.diff(model, *args)
    text = open(ortlab.report(diff, tmp_path / "d.html"), encoding="utf-8").read()
    labels = re.findall(r"<label for=\"tabs0-t\d\">([^<]+)</label>", text)
    assert labels[-1] == "Numerics"
    assert repr(diff.backend) in text.replace("&#x27;", "'") or "OrtBackend(" in text
