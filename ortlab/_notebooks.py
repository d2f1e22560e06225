"""Executing notebooks with a real Jupyter kernel, and exporting them to HTML.

Used by ``ortlab demo --notebook`` and by the notebook tests. The kernel is the Python
running ortlab (its kernelspec is installed into ``sys.prefix`` on first use), so a
notebook sees exactly this environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from ortlab import _deps

KERNEL_NAME = "python3"


def ensure_kernelspec() -> str:
    """Installs this interpreter's ipykernel spec into ``sys.prefix`` when missing."""
    kernelspec = _deps.require("jupyter_client.kernelspec")
    manager = kernelspec.KernelSpecManager()
    try:
        spec = manager.get_kernel_spec(KERNEL_NAME)
        if os.path.realpath(spec.argv[0]) == os.path.realpath(sys.executable):
            return KERNEL_NAME
    except Exception:  # no such kernel yet
        pass
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL_NAME],
        check=True,
        capture_output=True,
    )
    return KERNEL_NAME


def execute(
    path: str,
    *,
    timeout: int = 600,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
):
    """Executes a notebook top to bottom; returns the executed ``NotebookNode``.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (names the cell).
    """
    nbformat = _deps.require("nbformat")
    nbclient = _deps.require("nbclient")
    kernel = ensure_kernelspec()
    notebook = nbformat.read(path, as_version=4)
    old_env = dict(os.environ)
    os.environ.update(env or {})
    try:
        client = nbclient.NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name=kernel,
            resources={"metadata": {"path": cwd or os.path.dirname(os.path.abspath(path))}},
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    return notebook


def execute_to_html(path: str, out_path: str, *, env: Mapping[str, str] | None = None) -> str:
    """Executes ``path`` and writes it as standalone HTML to ``out_path``."""
    nbconvert = _deps.require("nbconvert")
    notebook = execute(path, env=env)
    body, _ = nbconvert.HTMLExporter().from_notebook_node(notebook)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(body)
    return out_path
