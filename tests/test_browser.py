"""Real browsers: the report in headless Chromium, and the Inspector in a live JupyterLab
(``browser_support``: Debian's Chromium through Playwright, offline; the report and
JupyterLab's front end must work without the network)."""

from __future__ import annotations

import pathlib
import re

import browser_support
import pytest
import torch
from browser_support import (
    ARTIFACTS,
    for_docs,
    offline_page,
    option_index,
    run_notebook,
)

import ortlab
from ortlab import zoo

pytestmark = pytest.mark.browser


browser = browser_support.browser
jupyterlab = browser_support.jupyterlab


# -- (a) the standalone report ----------------------------------------------------------


def test_report_renders_offline_in_chromium_with_working_tabs_and_provenance(browser):
    compiled = {}
    for name in ("custom_op", "mlp"):
        model, args = zoo.get(name).instantiate()
        c = ortlab.compile(model)
        out = c(*args)
        out.sum().backward()  # forward and backward graphs, as in the demo
        with torch.no_grad():
            c(*zoo.get(name).example_inputs(16))
        compiled[name] = c
    path = ortlab.report(compiled, ARTIFACTS / "report.html")

    page, blocked, errors = offline_page(browser, ("file://", "data:"))
    page.goto(pathlib.Path(path).as_uri())
    section = page.locator("section#s0")
    section.locator("label", has_text="Summary").wait_for()
    assert section.locator("text=no ONNX translation").first.is_visible()

    section.locator("label", has_text="Partitions").click()
    panel = section.locator('div.ortlab-panel[data-tab="Partitions"]')
    graph = panel.locator(".ortlab-graph svg").first
    graph.wait_for(state="visible")
    assert graph.bounding_box()["height"] > 100
    assert panel.locator("g.cluster").count() >= 2
    page.screenshot(path=str(ARTIFACTS / "report_partitions.png"))

    # Clicking an FX node outlines the ONNX nodes it became (inline JavaScript).
    prov = panel.locator(".ortlab-prov").first
    prov.scroll_into_view_if_needed()
    prov.locator("g.node.ortlab-ort").first.click()
    assert prov.locator(".ortlab-hl").count() >= 2
    onnx = prov.locator(":scope > div").nth(1)
    onnx.screenshot(path=str(ARTIFACTS / "report_onnx_view.png"))

    section.locator("label", has_text="Timings").click()
    waterfall = section.locator('div.ortlab-panel[data-tab="Timings"] .ortlab-waterfall')
    waterfall.first.wait_for(state="visible")
    bars = waterfall.first.locator("div[style*='position:absolute']")
    assert bars.count() >= 5 and bars.first.bounding_box()["width"] > 0
    assert not blocked, blocked
    assert not errors, errors


# -- (b) the Inspector in a live JupyterLab ---------------------------------------------

NOTEBOOK_CELLS = [
    "%load_ext ortlab\n"
    "import torch, ortlab\n"
    "from ortlab import zoo\n"
    "net, (h,) = zoo.get('custom_op').instantiate()",
    "r = %ortcompile --no-diff net(h)",
    "r.compiled(h).sum().backward()  # grad on: new graphs; the Inspector above follows",
    "ortlab.inspect(r.compiled)",
]


# A model with a graph break (print), a recompile (a new dtype) and an op that stays in
# PyTorch (rand_like): the Summary's timeline and the verdicts' source lines.
HISTORY_CELLS = [
    "import torch, ortlab\n"
    "from torch import nn\n"
    "\n"
    "class Noisy(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.fc = nn.Linear(8, 8)\n"
    "\n"
    "    def forward(self, x):\n"
    "        y = self.fc(x).relu()\n"
    '        print("a graph break")\n'
    "        noisy = y + torch.rand_like(y)  # random: stays in PyTorch\n"
    "        return noisy * 2",
    "net = Noisy()\n"
    "compiled = ortlab.compile(net)\n"
    "with torch.no_grad():\n"
    "    compiled(torch.randn(4, 8))\n"
    "    compiled(torch.randn(16, 8))  # a new batch size: recompiled, batch symbolic\n"
    "    compiled(torch.randn(32, 8))\n"
    "    net.double()  # a new dtype: Dynamo recompiles\n"
    "    compiled(torch.randn(4, 8, dtype=torch.float64))\n"
    "ortlab.inspect(compiled)",
]


@pytest.mark.notebook
def test_inspector_renders_in_jupyterlab_and_shows_partitions(browser, jupyterlab):
    jupyterlab.write("inspector", NOTEBOOK_CELLS)
    page, blocked, errors = run_notebook(browser, jupyterlab, "inspector", len(NOTEBOOK_CELLS))

    inspectors = page.locator(".ortlab-inspector")
    inspectors.nth(1).wait_for(state="attached", timeout=150_000)  # both cells rendered
    inspector = inspectors.first
    headline = inspector.locator(".ortlab-headline").first
    assert "nodes in ONNX Runtime" in headline.inner_text()

    inspector.locator(".lm-TabBar-tab", has_text="Partitions").click()
    graph = inspector.locator(".ortlab-partition-graph svg").first
    graph.wait_for(state="visible", timeout=30_000)
    assert inspector.locator(".ortlab-partition-graph g.cluster").count() == 2
    sessions = inspector.locator(".ortlab-sessions table").first
    sessions.wait_for(state="visible", timeout=30_000)
    assert "inputs" in sessions.inner_text()
    inspector.locator(".ortlab-fx-view svg").first.wait_for(state="visible")
    inspector.locator(".ortlab-onnx-view svg").first.wait_for(state="visible")

    # Provenance: choosing FX node addmm outlines the ONNX Gemm it became.
    fx_choice = inspector.locator(".ortlab-choose-fx-node select")
    # (ipywidgets writes option labels with non-breaking spaces)
    fx_options = [
        o.replace("\xa0", " ") for o in fx_choice.locator("option").all_inner_texts()
    ]
    addmm = [i for i, o in enumerate(fx_options) if o.startswith("addmm → ")]
    assert addmm, fx_options
    fx_choice.select_option(index=addmm[0])
    page.wait_for_function(
        """() => {
          const root = document.querySelector('.ortlab-inspector .ortlab-onnx-view');
          const gemm = [...root.querySelectorAll('g.node')]
            .find(g => g.textContent.includes('Gemm'));
          const shape = gemm && gemm.querySelector('path, polygon');
          return shape && getComputedStyle(shape).stroke === 'rgb(214, 0, 126)';
        }""",
        timeout=30_000,
    )
    assert "became 1 ONNX node: Gemm" in inspector.locator(".ortlab-provenance").inner_text()
    inspector.screenshot(path=str(ARTIFACTS / "inspector_partitions.png"))

    # The backward pass (third cell, grad on: new forward and backward graphs) ran after
    # the widget was shown: its session, created by that run, is offered in the ONNX tab,
    # so the widget updated itself.
    inspector.locator(".lm-TabBar-tab", has_text="ONNX").click()
    onnx_choice = inspector.locator(".ortlab-choose-onnx-session select")
    # (the tab is built when first shown: wait for its choices)
    onnx_choice.locator("option", has_text="backward").first.wait_for(
        state="attached", timeout=60_000
    )
    options = onnx_choice.locator("option").all_inner_texts()
    backward = [i for i, o in enumerate(options) if "backward" in o]
    assert backward, options
    onnx_choice.select_option(index=backward[0])
    page.wait_for_function(
        "() => document.querySelector('.ortlab-inspector')"
        ".querySelectorAll('.ortlab-onnx-tab g.node').length > 10",
        timeout=30_000,
    )
    inspector.locator(".ortlab-onnx-tab svg").first.wait_for(state="visible")
    inspector.locator(".ortlab-onnx-tab").screenshot(path=str(ARTIFACTS / "onnx_view.png"))
    page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"))
    assert not blocked, blocked
    assert not errors, errors


@pytest.mark.notebook
def test_inspector_summary_shows_the_timeline_and_verdicts_their_source_line(
    browser, jupyterlab
):
    jupyterlab.write("history", HISTORY_CELLS)
    page, blocked, errors = run_notebook(browser, jupyterlab, "history", len(HISTORY_CELLS))
    inspector = page.locator(".ortlab-inspector").first
    inspector.wait_for(state="attached", timeout=150_000)

    # Summary (the first tab): the first call in one line, then the timeline of graph
    # runs: the graph break, the recompiles (a new batch size, a new dtype) and their
    # guards, the runs that reused graphs.
    summary = inspector.locator(".ortlab-summary")
    timeline = summary.locator("table.ortlab-timeline")
    timeline.wait_for(state="visible", timeout=30_000)
    first_call = summary.locator(".ortlab-first-call").inner_text()
    assert re.match(r"First call [0-9.]+ m?s \(graphs 0, 1\): ", first_call), first_call
    rows = [r.locator("td").all_inner_texts() for r in timeline.locator("tbody tr").all()]
    runs = ["run 1", "run 2", "run 3", "run 4", "runs 5–6", "run 7", "run 8"]
    assert [r[0] for r in rows] == runs, rows
    assert "ends at a graph break at" in rows[0][1] and 'print("a graph break")' in rows[0][1]
    assert "recompile of forward (cell): " in rows[2][1] and "size mismatch" in rows[2][1]
    assert rows[4][1] == "graphs 2, 3 reused, nothing compiled"
    assert "recompile of forward (cell): " in rows[5][1] and "dtype mismatch" in rows[5][1]
    graphs = summary.locator("h4", has_text=re.compile(r"^Graphs$"))
    graphs = graphs.locator("xpath=following-sibling::*[1]")
    assert "recompile of forward (cell): " in graphs.inner_text()
    top = inspector.bounding_box()
    bottom = graphs.bounding_box()
    for path in for_docs("summary_timeline.png"):
        page.screenshot(
            path=str(path),
            clip={
                "x": top["x"],
                "y": top["y"],
                "width": top["width"],
                "height": bottom["y"] + bottom["height"] - top["y"] + 8,
            },
        )

    # Partitions tab, graph 1 (after the graph break): its cause, the eager rand_like (drawn
    # at the start of the graph) in red with its verdict and source line as tooltip, and
    # the eager-node table below.
    inspector.locator(".lm-TabBar-tab", has_text="Partitions").click()
    choose = inspector.locator(".ortlab-choose-graph select")
    choose.wait_for(state="visible", timeout=30_000)
    choose.select_option(index=option_index(choose, "1: "))
    view = inspector.locator(".ortlab-partition-graph")
    page.wait_for_function(
        """() => {
          const view = document.querySelector('.ortlab-inspector .ortlab-partition-graph');
          return view && view.textContent.includes('Graph 1 (inference)')
            && view.querySelector('g.node.ortlab-eager');
        }""",
        timeout=30_000,
    )
    eager_node = view.locator("g.node.ortlab-eager").first
    title = eager_node.locator("a").first.get_attribute("xlink:title") or ""
    assert "rand_like" in title and "random draw" in title, title
    # (a notebook cell is named "cell"; its line numbers are the cell's own)
    line = r"noisy = y \+ torch.rand_like\(y\)"
    assert re.search(r"from cell:12 in forward \S+.*: " + line, title), title
    # Below the drawing, the eager nodes grouped by rule and reason (open), each with
    # its source line.
    group = view.locator("details.ortlab-group-eager").first
    assert "random draw" in group.locator("summary").inner_text()
    row = group.locator("tbody tr").first.locator("td").all_inner_texts()
    assert row[0].startswith("rand_like"), row  # drawn first, under its name (FX may suffix)
    assert re.match(r"cell:12 in forward \S+.*: " + line, row[3]), row
    for path in for_docs("verdict_source.png"):
        view.screenshot(path=str(path))
    assert not blocked, blocked
    assert not errors, errors
