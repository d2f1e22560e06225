"""The tutorial notebooks: stored clean in git, and each runs top to bottom in a real kernel.

Execution goes through ``ortlab._notebooks.execute`` (nbclient, a kernel running this
interpreter) with ``ORTLAB_FAST=1``; a failing cell fails its notebook's test with the
notebook's name, the cell's index and source, and the traceback. A notebook writes its
files (saved sessions, repro cases) to temporary directories, never next to itself, so
that running the tutorials from a clone leaves the clone as it was.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = (
    "00_quickstart",
    "01_partition_export_execute",
    "02_numerics",
    "03_dynamic_shapes_and_sessions",
    "04_training",
    "05_benchmarks",
)


def _failing_cell(nb, message: str) -> int:
    """Index of the cell whose source nbclient quotes in its error message (-1: unknown)."""
    match = re.search(r"the following cell:\n-+\n(.*?)\n-+\n", message, re.S)
    if match:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and cell.source.strip() == match.group(1).strip():
                return index
    return -1


def test_every_tutorial_notebook_is_present():
    assert tuple(p.stem for p in NOTEBOOKS) == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs_and_honours_fast_mode(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: cell {index} has outputs"
            assert cell.execution_count is None, f"{path.name}: cell {index} has a count"
    assert "ORTLAB_FAST" in code_cells[0].source
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_in_a_kernel(path, tmp_path):
    from ortlab import _notebooks

    try:
        nb = _notebooks.execute(str(path), env={"ORTLAB_FAST": "1"}, cwd=str(tmp_path))
    except nbclient.exceptions.CellExecutionError as e:
        index = _failing_cell(nbformat.read(path, as_version=4), str(e))
        pytest.fail(f"{path.name}: cell {index} failed\n{e}", pytrace=False)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert None not in [c.execution_count for c in code_cells]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not left, f"{path.name} wrote {left} into its working directory; use a temp dir"
    # A failing _repr_*_ is shown as an error output without failing the cell: catch it.
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        assert not errors, (
            f"{path.name}: cell {index} displayed an error: "
            f"{errors[0].ename}: {errors[0].evalue}\n--- cell source ---\n{cell.source}"
        )
