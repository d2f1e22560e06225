"""Helpers for the lab-layer tests (no tests here): zoo records, SVG parsing, big graphs."""

from __future__ import annotations

import html.parser
import xml.etree.ElementTree as ET

import torch
import torch.fx

import ortlab
from ortlab import zoo
from ortlab.backend import records

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"


def compile_zoo(name: str, *, batches=(4, 16), grad: bool = False, **options):
    """Compiles a zoo model with a fresh backend and runs it; returns (compiled, model)."""
    spec = zoo.get(name)
    model = spec.build()
    compiled = ortlab.compile(model, **options)
    if grad:
        out = compiled(*spec.example_inputs(batches[0]))
        out.sum().backward()
        for b in batches[1:]:
            compiled(*spec.example_inputs(b))
    else:
        with torch.no_grad():
            for b in batches:
                compiled(*spec.example_inputs(b))
    return compiled, model


def parse_svg(svg: str) -> ET.Element:
    """Parses Graphviz SVG (well-formed XML once the prolog is gone)."""
    return ET.fromstring(svg)


def svg_groups(root: ET.Element, css_class: str) -> list[ET.Element]:
    """``<g>`` elements whose class attribute contains ``css_class``."""
    return [g for g in root.iter(f"{SVG}g") if css_class in (g.get("class") or "").split()]


def svg_element(root: ET.Element, element_id: str) -> ET.Element | None:
    return next((g for g in root.iter() if g.get("id") == element_id), None)


def tooltip(element: ET.Element) -> str:
    """The xlink:title (tooltip) inside an SVG node or cluster group."""
    for a in element.iter(f"{SVG}a"):
        if a.get(XLINK_TITLE) is not None:
            return a.get(XLINK_TITLE)
    return ""


def texts(element: ET.Element) -> list[str]:
    return [t.text or "" for t in element.iter(f"{SVG}text")]


def synthetic_graph_record(n_ops: int = 2000, every: int = 50) -> records.GraphRecord:
    """A GraphRecord of a generated FX graph: runs of supported ops split by eager nodes.

    Every ``every``-th op is an eager ``aten.nonzero`` (unsupported); the runs between
    them are partitions ``fused_0``, ``fused_1``, …. Some ops add a skip connection.
    """
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    prev, prev2 = x, x
    partitions: list[records.PartitionRecord] = []
    verdicts: list[records.Verdict] = []
    run: list[str] = []
    tiny = torch.fx.Graph()
    tiny.output(tiny.placeholder("a"))
    tiny_gm = torch.fx.GraphModule(torch.nn.Module(), tiny)

    def close_run() -> None:
        if run:
            partitions.append(
                records.PartitionRecord(
                    name=f"fused_{len(partitions)}",
                    graph_index=0,
                    graph_kind="inference",
                    graph_module=tiny_gm,
                    node_names=tuple(run),
                )
            )
            run.clear()

    for i in range(n_ops):
        if i % every == every - 1:
            node = graph.call_function(torch.ops.aten.nonzero.default, (prev,))
            verdicts.append(
                records.Verdict(node.name, "aten.nonzero.default", False, "data-dependent")
            )
            close_run()
        else:
            if i % 7 == 3:
                node = graph.call_function(torch.ops.aten.add.Tensor, (prev, prev2))
            else:
                node = graph.call_function(torch.ops.aten.relu.default, (prev,))
            verdicts.append(records.Verdict(node.name, str(node.target), True, "registered"))
            run.append(node.name)
        prev2, prev = prev, node
    close_run()
    graph.output(prev)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    return records.GraphRecord(
        index=0,
        kind="inference",
        graph_module=gm,
        partitioned=None,
        partitions=partitions,
        verdicts=verdicts,
    )


class _Collector(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(text: str) -> _Collector:
    collector = _Collector()
    collector.feed(text)
    collector.close()
    return collector
