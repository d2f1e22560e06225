"""Real browsers: the report in headless Chromium, and the Inspector in a live JupyterLab.

Chromium is Debian's (``make browser`` installs it with apt-get); Playwright drives it
through ``executable_path`` and never downloads a browser. Every request that would leave
the machine is blocked and fails the test: the report and JupyterLab's front end (from the
``jupyterlab`` and ``jupyterlab_widgets`` wheels) must work offline. Screenshots land in
``artifacts/browser/`` (git-ignored); with ``ORTLAB_SCREENSHOTS_TO_DOCS=1`` the README's
images of the lab are written to ``docs/`` as well.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

import ortlab
from ortlab import zoo

pytestmark = pytest.mark.browser

ARTIFACTS = pathlib.Path(__file__).resolve().parents[1] / "artifacts" / "browser"
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed (make browser: apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, timeout=60_000)
        yield b
        b.close()


def offline_page(browser, allowed: tuple[str, ...]):
    """A page whose requests outside ``allowed`` prefixes are aborted and recorded."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []
    errors: list[str] = []

    def route(r):
        url = r.request.url
        if url.startswith(allowed):
            r.continue_()
        else:
            blocked.append(url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page, blocked, errors


def for_docs(name: str) -> list[pathlib.Path]:
    """Where a screenshot shown in the README goes: ``artifacts/browser/``, and ``docs/``
    when ``ORTLAB_SCREENSHOTS_TO_DOCS=1``."""
    paths = [ARTIFACTS / name]
    if os.environ.get("ORTLAB_SCREENSHOTS_TO_DOCS") == "1":
        paths.append(DOCS / name)
    return paths


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
    plot = section.locator('div.ortlab-panel[data-tab="Timings"] img').first
    plot.wait_for(state="visible")
    assert page.evaluate("(img) => img.naturalWidth", plot.element_handle()) > 100
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server on localhost whose kernel is this interpreter; always stopped."""
    nbformat = pytest.importorskip("nbformat")
    jupyter = pathlib.Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        pytest.skip("jupyter is not installed next to this Python (pip install jupyterlab)")
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "work"
    root.mkdir()
    # A kernel spec pinned to this very interpreter (the project venv).
    kernel_dir = base / "path" / "kernels" / "ortlab-test"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    sys.executable,
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "ortlab test",
                "language": "python",
            }
        )
    )
    # No news, no update checks: the page must not reach for the internet.
    settings = base / "config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    for name, sources in (("inspector", NOTEBOOK_CELLS), ("history", HISTORY_CELLS)):
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {
            "name": "ortlab-test",
            "display_name": "ortlab test",
            "language": "python",
        }
        nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
        nbformat.write(nb, str(root / f"{name}.ipynb"))

    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_PATH=str(base / "path"),
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        IPYTHONDIR=str(base / "ipython"),
    )
    log_path = base / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                str(jupyter),
                "lab",
                "--no-browser",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.allow_root=True",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",
                "--LabApp.expose_app_in_browser=True",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kernels stop with it
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited: {log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not start: {log_path.read_text()[-2000:]}")
                time.sleep(0.5)
        yield url, token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server shuts its kernels down
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        _kill_kernels_of(base / "runtime")


def _kill_kernels_of(runtime_dir: pathlib.Path) -> None:
    """Kills kernels still running with a connection file in ``runtime_dir`` (ours only)."""
    marker = str(runtime_dir).encode()
    for proc_dir in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc_dir / "cmdline").read_bytes()
        except OSError:
            continue
        if b"ipykernel" in cmdline and marker in cmdline:
            try:
                os.kill(int(proc_dir.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_notebook(browser, jupyterlab, name: str, cell_count: int):
    """Opens notebook ``name`` in JupyterLab, waits for an idle kernel and starts running
    every cell; returns the page and its blocked requests and page errors."""
    url, token = jupyterlab
    host = url.replace("http://", "")
    page, blocked, errors = offline_page(browser, (url, f"ws://{host}", "data:", "blob:"))
    page.set_viewport_size({"width": 1400, "height": 2400})  # the whole Inspector in view
    # A workspace of its own: JupyterLab would otherwise reopen the notebooks of earlier
    # tests beside this one.
    page.goto(f"{url}/lab/workspaces/{name}/tree/{name}.ipynb?token={token}")
    # Wait for the notebook's cells and an idle kernel before running anything.
    page.wait_for_function(
        "(n) => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length == n",
        arg=cell_count,
        timeout=90_000,
    )
    page.get_by_text("ortlab test | Idle").wait_for(timeout=90_000)
    assert page.locator(".jp-Notebook .jp-CodeCell").count() == cell_count
    # Fire and forget: the command's promise settles only when every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    return page, blocked, errors


@pytest.mark.notebook
def test_inspector_renders_in_jupyterlab_and_shows_partitions(browser, jupyterlab):
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
    assert "input_schema" in sessions.inner_text()
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

    # Partitions tab, graph 1 (after the graph break): its cause, the eager rand_like in
    # red with its verdict and source line as tooltip, and the eager-node table below.
    inspector.locator(".lm-TabBar-tab", has_text="Partitions").click()
    choose = inspector.locator(".ortlab-choose-graph select")
    choose.wait_for(state="visible", timeout=30_000)
    choose.select_option(index=_option_index(choose, "1: "))
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
    assert "rand_like" in title and "random op" in title, title
    # (a notebook cell is named "cell"; its line numbers are the cell's own)
    line = r"noisy = y \+ torch.rand_like\(y\)"
    assert re.search(r"from cell:12 in forward \S+.*: " + line, title), title
    table = view.locator("table").last
    row = table.locator("tbody tr").first.locator("td").all_inner_texts()
    assert row[0] == "rand_like" and "random op" in row[2], row
    assert re.match(r"cell:12 in forward \S+.*: " + line, row[3]), row
    for path in for_docs("verdict_source.png"):
        view.screenshot(path=str(path))
    assert not blocked, blocked
    assert not errors, errors


def _option_index(select, label_start: str) -> int:
    """The index of the option of ``select`` whose label starts with ``label_start``."""
    # (ipywidgets writes option labels with non-breaking spaces)
    labels = [o.replace("\xa0", " ") for o in select.locator("option").all_inner_texts()]
    found = [i for i, label in enumerate(labels) if label.startswith(label_start)]
    assert found, (label_start, labels)
    return found[0]
