"""What the browser tests share: Debian's Chromium driven by Playwright, offline pages,
and a JupyterLab server on localhost whose kernel is this interpreter.

Chromium is Debian's (``make browser`` installs it with apt-get); Playwright drives it
through ``executable_path`` and never downloads a browser. Every request that would leave
the machine is blocked and fails the test. Screenshots land in ``artifacts/browser/``
(git-ignored); with ``ORTLAB_SCREENSHOTS_TO_DOCS=1`` the README's images of the lab are
written to ``docs/`` as well.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

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


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed (make browser: apt-get install chromium)")


def launch_browser():
    """Chromium, headless (a generator: a test module's ``browser`` fixture yields
    from it)."""
    executable = chromium_path()
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


class Lab(tuple):
    """A running JupyterLab: ``(url, token)``, and its root folder."""

    def __new__(cls, url: str, token: str, root: pathlib.Path) -> Lab:
        lab = super().__new__(cls, (url, token))
        lab.root = root
        return lab

    def write(self, name: str, sources: list[str]) -> None:
        """Writes notebook ``name`` (cells ``sources``, the test kernel) into the root."""
        import nbformat

        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {
            "name": "ortlab-test",
            "display_name": "ortlab test",
            "language": "python",
        }
        nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
        nbformat.write(nb, str(self.root / f"{name}.ipynb"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_jupyterlab(tmp_path_factory):
    """A JupyterLab server on localhost whose kernel is this interpreter, as a
    :class:`Lab`; always stopped (a generator: a test module's ``jupyterlab`` fixture
    yields from it)."""
    pytest.importorskip("nbformat")
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
        yield Lab(url, token, root)
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


def open_notebook(browser, jupyterlab, name: str, cell_count: int, workspace: str = ""):
    """Opens notebook ``name`` in JupyterLab and waits for its cells and an idle kernel;
    returns the page and its blocked requests and page errors."""
    url, token = jupyterlab
    host = url.replace("http://", "")
    page, blocked, errors = offline_page(browser, (url, f"ws://{host}", "data:", "blob:"))
    page.set_viewport_size({"width": 1400, "height": 2400})  # the whole Inspector in view
    # A workspace of its own: JupyterLab would otherwise reopen the notebooks of earlier
    # tests beside this one.
    page.goto(f"{url}/lab/workspaces/{workspace or name}/tree/{name}.ipynb?token={token}")
    # Wait for the notebook's cells and an idle kernel before running anything.
    page.wait_for_function(
        "(n) => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length == n",
        arg=cell_count,
        timeout=90_000,
    )
    page.get_by_text("ortlab test | Idle").wait_for(timeout=90_000)
    assert page.locator(".jp-Notebook .jp-CodeCell").count() == cell_count
    return page, blocked, errors


def run_notebook(browser, jupyterlab, name: str, cell_count: int):
    """Opens notebook ``name`` (see :func:`open_notebook`) and starts running every
    cell; returns the page and its blocked requests and page errors."""
    page, blocked, errors = open_notebook(browser, jupyterlab, name, cell_count)
    # Fire and forget: the command's promise settles only when every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    return page, blocked, errors


def option_index(select, label_start: str) -> int:
    """The index of the option of ``select`` whose label starts with ``label_start``."""
    # (ipywidgets writes option labels with non-breaking spaces)
    labels = [o.replace("\xa0", " ") for o in select.locator("option").all_inner_texts()]
    found = [i for i, label in enumerate(labels) if label.startswith(label_start)]
    assert found, (label_start, labels)
    return found[0]


@pytest.fixture(scope="module")
def browser():
    """Chromium for one test module (test modules bind it: ``browser = ...browser``)."""
    yield from launch_browser()


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server for one test module."""
    yield from start_jupyterlab(tmp_path_factory)
