"""The lab on a real model in a live JupyterLab: a 12-layer BERT (BERT-base's graph, width
64) drawn by module, searched, named, timed, and kept in the saved notebook.

Times are measured in the page (``Date.now()`` against the kernel's ``time.time()`` on
the same machine) and written to ``artifacts/browser/lab_timings.json``; the bounds
asserted here only catch minutes (a loaded 2-core machine must pass), the targets (first
paint within 3 s, a tab or an expansion within 2 s) are for a quiet machine and are read
from that file.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import browser_support
import pytest
from browser_support import (
    ARTIFACTS,
    for_docs,
    open_notebook,
    option_index,
    run_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.notebook]

MINUTES_NOT_SECONDS = 60.0
"""A view taking longer than this is broken, whatever the machine's load."""

HIGHLIGHT = "rgb(214, 0, 126)"

BERT_CELLS = [
    "%load_ext ortlab\n"
    "import time, torch, ortlab\n"
    "from transformers import BertConfig, BertModel\n"
    "torch.manual_seed(0)\n"
    "# BERT-base's graph (12 layers) with small weights\n"
    "config = BertConfig(hidden_size=64, num_attention_heads=2, intermediate_size=256)\n"
    "model = BertModel(config).eval()\n"
    "x = torch.randint(0, 1000, (1, 128))",
    "compiled = ortlab.compile(model)\nwith torch.no_grad():\n    compiled(x)",
    "print(f'START {time.time():.3f}')\nortlab.inspect(compiled)",
]


browser = browser_support.browser
jupyterlab = browser_support.jupyterlab


def _now(page) -> float:
    return float(page.evaluate("() => Date.now() / 1000"))


def _timed_wait(page, script: str, timeout_ms: float = 120_000) -> float:
    """Seconds until ``script`` (a JS expression) is truthy, polled every 50 ms."""
    start = _now(page)
    page.wait_for_function(f"() => {script}", polling=50, timeout=timeout_ms)
    return _now(page) - start


def _text(page, selector: str) -> str:
    """The text of every element matching ``selector`` in the Inspector, hidden or not
    (collapsed ``<details>`` included)."""
    return str(
        page.evaluate(
            "(s) => [...document.querySelectorAll(s)].map(e => e.textContent).join('\\n')",
            f".ortlab-inspector {selector}",
        )
    )


def _stroke_of_highlighted(page, pane: str) -> bool:
    return bool(
        page.evaluate(
            """([pane, color]) => [...document.querySelectorAll(
                 `.ortlab-inspector ${pane} g.node, .ortlab-inspector ${pane} g.cluster`)]
               .some(g => { const s = g.querySelector('path, polygon');
                            return s && getComputedStyle(s).stroke === color; })""",
            [pane, HIGHLIGHT],
        )
    )


def _shut_down_kernels(jupyterlab) -> None:
    url, token = jupyterlab
    with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)
    for session in sessions:
        request = urllib.request.Request(
            f"{url}/api/sessions/{session['id']}?token={token}", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=30).close()


def test_bert_inspector_is_fast_navigable_by_module_named_and_kept_when_saved(
    browser, jupyterlab
):
    jupyterlab.write("bert", BERT_CELLS)
    page, blocked, errors = run_notebook(browser, jupyterlab, "bert", len(BERT_CELLS))
    timings: dict[str, float] = {}

    # First paint: from the cell's start (the kernel's clock) to the Summary on screen.
    page.wait_for_function(
        """() => { const s = document.querySelector('.ortlab-inspector .ortlab-summary');
                   if (s && s.offsetParent && s.textContent.includes('nodes in ONNX')) {
                     window.__painted = window.__painted || Date.now() / 1000;
                     return true; } }""",
        polling=50,
        timeout=900_000,  # the compile of the cell before (tens of seconds here)
    )
    start = page.locator(".jp-OutputArea-output", has_text="START").first.inner_text()
    started = float(re.search(r"START ([0-9.]+)", start).group(1))
    timings["first_paint_s"] = page.evaluate("() => window.__painted") - started
    inspector = page.locator(".ortlab-inspector").first
    summary = _text(page, ".ortlab-summary")
    # Parameters by their names; weights summarised, with the detail one click away.
    assert re.search(r"\+ \d+ weights \([0-9.]+ [KM]iB\)", summary), summary[:2000]
    assert "encoder.layer.0.attention.self.query.weight" in summary
    for path in for_docs("images/lab_summary.png"):
        inspector.screenshot(path=str(path))

    # The Partitions tab: the graph drawn as the model's module tree.
    inspector.locator(".lm-TabBar-tab", has_text="Partitions").click()
    timings["partitions_tab_s"] = _timed_wait(
        page, "document.querySelector('.ortlab-inspector .ortlab-partition-graph svg')"
    )
    graph = inspector.locator(".ortlab-partition-graph")
    drawn = graph.locator("svg").first.text_content()
    assert "encoder" in drawn and "×12" in drawn, drawn[:2000]
    assert "embeddings" in drawn and "pooler" in drawn
    for path in for_docs("images/lab_modules.png"):
        graph.screenshot(path=str(path))

    # A click on a module opens it.
    box = graph.locator("g.node.ortlab-module", has_text="embeddings").first
    box.locator("text").first.click()
    timings["expand_s"] = _timed_wait(
        page,
        "[...document.querySelectorAll('.ortlab-inspector .ortlab-partition-graph "
        "g.cluster')].some(c => c.textContent.includes('embeddings (BertEmbeddings)'))",
    )

    # Search finds a node inside layer 7: its modules open, it is outlined.
    search = inspector.locator(".ortlab-choose-search input")
    search.fill("encoder.layer.7.attention.self.query")
    search.press("Enter")
    hits = inspector.locator(".ortlab-choose-hits select")
    hits.wait_for(state="visible", timeout=60_000)
    index = option_index(hits, "FX · ")
    start_search = _now(page)
    hits.select_option(index=index)
    page.wait_for_function(
        """() => [...document.querySelectorAll(
                 '.ortlab-inspector .ortlab-partition-graph g.cluster')]
               .some(c => c.textContent.includes('layer.7 (BertLayer)'))""",
        polling=50,
        timeout=120_000,
    )
    page.wait_for_function(
        "() => document.querySelector('.ortlab-inspector .ortlab-provenance')"
        ".textContent.includes('FX node')",
        timeout=60_000,
    )
    timings["search_hit_s"] = _now(page) - start_search
    assert _stroke_of_highlighted(page, ".ortlab-partition-graph")
    for path in for_docs("images/lab_search.png"):
        inspector.screenshot(path=str(path))

    # The ONNX tab: the session's model by module, its inputs named and summarised.
    inspector.locator(".lm-TabBar-tab", has_text="ONNX").click()
    timings["onnx_tab_s"] = _timed_wait(
        page, "document.querySelector('.ortlab-inspector .ortlab-onnx-tab svg')"
    )
    info = _text(page, ".ortlab-onnx-info")
    assert "weights" in info and "embeddings.word_embeddings.weight" in info
    for path in for_docs("images/lab_onnx.png"):
        inspector.locator(".ortlab-onnx-tab").screenshot(path=str(path))

    inspector.locator(".lm-TabBar-tab", has_text="Sessions").click()
    timings["sessions_tab_s"] = _timed_wait(
        page, "document.querySelector('.ortlab-inspector .ortlab-sessions-tab table')"
    )
    sessions = _text(page, ".ortlab-sessions-tab")
    assert re.search(r"\d+ weights", sessions) and "pooler.dense.weight" in sessions
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "lab_timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    for name, seconds in timings.items():
        assert seconds < MINUTES_NOT_SECONDS, (name, timings)
    assert not blocked, blocked
    assert not errors, errors

    # Saved, then reopened without running anything: the static view stands in.
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    saved = jupyterlab.root / "bert.ipynb"
    deadline = time.monotonic() + 60
    while "data-ortlab-static" not in saved.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "data-ortlab-static" in saved.read_text()
    page.close()
    _shut_down_kernels(jupyterlab)
    page, blocked, errors = open_notebook(
        browser, jupyterlab, "bert", len(BERT_CELLS), workspace="bert-reopened"
    )
    static = page.locator(".ortlab-static").first
    static.wait_for(state="visible", timeout=60_000)
    time.sleep(3)  # the widget manager gives up on the missing models after 2 s
    assert "nodes in ONNX Runtime" in static.inner_text()
    assert static.locator("svg").first.is_visible()
    assert "encoder" in static.locator("svg").first.text_content()
    assert not page.get_by_text("Error displaying widget").first.is_visible()
    assert page.locator(".ortlab-inspector").count() == 0
    for path in for_docs("images/lab_reopened.png"):
        page.screenshot(path=str(path))
    assert not blocked, blocked
