"""The live status line of ``ortlab.diff`` and ``ortlab.bench``: in a notebook it steps
through their real phases (and follows a compile), elsewhere it shows nothing."""

from __future__ import annotations

import pytest
import torch

import ortlab
from ortlab import _harness, zoo
from ortlab.numerics import _diff, _runner
from ortlab.views import _status

pytest.importorskip("ipywidgets")
IPython_display = pytest.importorskip("IPython.display")

FAST = dict(warmup=1, iters=5, min_time=0.0)


class Shown:
    """The widgets a call displayed, and every text each of them showed."""

    def __init__(self) -> None:
        self.widgets: list = []
        self.values: list[str] = []

    def __call__(self, widget, **options) -> None:
        self.widgets.append(widget)
        self.values.append(widget.value)
        widget.observe(lambda change: self.values.append(change["new"]), names="value")


@pytest.fixture
def notebook(monkeypatch):
    """Runs as in a Jupyter kernel; returns what was displayed."""
    shown = Shown()
    monkeypatch.setattr(_harness, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython_display, "display", shown)
    monkeypatch.setattr(_status, "POLL_SECONDS", 0.002)  # the compile's phase is seen
    return shown


def _order(text: str, *steps: str) -> list[int]:
    return [text.index(step) for step in steps]


def test_diff_in_a_notebook_steps_through_its_phases_and_closes_the_line(notebook):
    model, inputs = zoo.get("mlp").instantiate()
    report = ortlab.diff(model, *inputs, reference="float64")
    assert report.passed
    (widget,) = notebook.widgets
    final = widget.value
    assert "ortlab.diff" in final
    steps = (
        _runner.EAGER_STEP,
        _runner.COMPILED_STEP,
        _diff.COMPARE_STEP,
        "float64 reference",
    )
    positions = _order(final, *steps)
    assert positions == sorted(positions), final
    assert widget.comm is None  # closed: the saved notebook keeps no trace
    # The compile's phase is read from the backend's records while the compiled side
    # runs, and only then: the eager run is no Dynamo trace.
    details = " | ".join(notebook.values)
    assert f"{_runner.COMPILED_STEP}: Dynamo trace" in details
    assert f"{_runner.EAGER_STEP}: " not in details
    assert "eager run (the reference)" not in details


def test_diff_outside_a_notebook_shows_nothing(monkeypatch, capsys):
    shown = Shown()
    monkeypatch.setattr(IPython_display, "display", shown)
    ortlab.diff(lambda x: x.sin() + 1, torch.randn(4))
    assert shown.widgets == []
    captured = capsys.readouterr()
    assert captured.out == captured.err == ""


def test_bench_in_a_notebook_shows_each_backend_and_the_timing_not_a_bar(notebook, capsys):
    model, inputs = zoo.get("mlp").instantiate()
    result = ortlab.bench(model, *inputs, backends=("eager", "ortlab"), name="tiny", **FAST)
    assert (result.frame["error"] == "").all()
    (widget,) = notebook.widgets
    final = widget.value
    steps = ("eager: build and first call", "ortlab: build and first call", "timing eager")
    positions = _order(final, "ortlab.bench tiny", *steps)
    assert positions == sorted(positions), final
    assert widget.comm is None
    details = " | ".join(notebook.values)
    assert "ortlab: build and first call: Dynamo trace" in details
    assert "tiny" not in capsys.readouterr().err  # no tqdm bar beside the line


def test_bench_without_progress_shows_no_status_line(notebook):
    model, inputs = zoo.get("mlp").instantiate()
    ortlab.bench(model, *inputs, backends=("eager",), progress=False, **FAST)
    assert notebook.widgets == []


def test_an_inspector_shown_in_a_notebook_has_a_status_line_unless_one_is_live(monkeypatch):
    widgets, outputs, updates = [], [], []

    class Handle:
        def update(self, obj, raw=False):
            updates.append(obj)

    def display(obj, raw=False, display_id=None):
        if hasattr(obj, "value") and hasattr(obj, "observe"):
            widgets.append(obj)
            obj.observe(lambda change: outputs.append(change["new"]), names="value")
        else:
            outputs.append(obj)
        return Handle() if display_id else None

    monkeypatch.setattr(_harness, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython_display, "display", display)
    model, inputs = zoo.get("mlp").instantiate()
    compiled = ortlab.compile(model, compile_cache=False)
    compiled(*inputs)
    ortlab.inspect(compiled)._ipython_display_()
    (line,) = widgets
    text = " ".join(v for v in outputs if isinstance(v, str))
    assert "ortlab.inspect(" in text and "summary and module drawings" in text
    assert "widget" in line.value and line.comm is None  # closed
    # Its output emptied first: a saved notebook keeps no view of a closed widget.
    assert updates == [{"text/plain": ""}]
    assert any(isinstance(o, dict) and "text/html" in o for o in outputs)
    # Inside another lab call (%ortcompile's line on screen) it shows none of its own.
    outer = _status.status_line("%ortcompile")
    ortlab.inspect(compiled)._ipython_display_()
    outer.done()
    assert len(widgets) == 2 and widgets[1] is outer.widget
