"""A live status line for long lab calls: what ``%ortcompile``, ``ortlab.diff``,
``ortlab.bench`` or a displayed Inspector is doing now (Dynamo trace and lowering →
export → session → first run → eager run → numerics → drawing; a benchmark's backends
one by one, then the timing) and how long each step took.

# NOTE: in a notebook the line is a small widget updated in place (also from the
# thread that watches a compile: widget updates are messages, safe from any thread);
# when the call ends its output is emptied (through its display id) and the widget
# closed, so a saved notebook keeps no trace of it (the headline has the times). The
# compile itself runs inside Dynamo, so its steps are read from the backend's records
# as they appear (:func:`compile_phase`, polled every :data:`POLL_SECONDS`): no graph
# yet -> Dynamo is tracing or lowering; a partition without a session -> it is being
# exported; ... Elsewhere the status keeps the steps' times and shows nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ortlab import _deps, _harness, _html

POLL_SECONDS = 0.25
"""How often a watched compile's records are read."""

_shown = 0
"""Status lines on screen now: a lab call inside another (the Inspector ``%ortcompile``
displays) shows none of its own."""
_SHOWN_LOCK = threading.Lock()


def compile_phase(backend: Any, *, ran: str = "eager run (the reference)") -> str:
    """What a backend's first call is doing, read from its records; ``ran`` once every
    partition has a session and one has run (what the caller does next)."""
    graphs = list(backend.graphs)
    if not graphs:
        return "Dynamo trace and lowering to ATen"
    pending = [p for g in graphs for p in g.partitions if p.state == "ort" and not p.sessions]
    if pending:
        p = pending[0]
        return f"export {p.name} ({len(p.node_names)} nodes) to ONNX and make its session"
    if backend.execution_count == 0:
        return "first run in ONNX Runtime"
    return ran


class Status:
    """A status line (see the module NOTE).

    Args:
        title: What is working (``"%ortcompile model(x)"``).
        live: Show it as a widget (in a notebook).
        clock: Seconds since some origin (tests pass a fake one).
    """

    def __init__(
        self, title: str, *, live: bool, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.title = title
        self.clock = clock
        self.steps: list[tuple[str, float]] = []
        self.current: str | None = None
        self.detail = ""
        self._started = self._step_started = clock()
        self._lock = threading.Lock()
        self.widget: Any = None
        self._shown = False
        self._handle: Any = None
        if live:
            widgets = _deps.require("ipywidgets")
            self.widget = widgets.HTML()
            self.widget.add_class("ortlab-status")
            self._draw()

    @property
    def seconds(self) -> float:
        """Seconds since the status started."""
        return self.clock() - self._started

    def show(self, display: Callable[..., Any]) -> None:
        """Displays the line (nothing when it is not live) with ``display``
        (``IPython.display.display``: called with ``display_id=True``, its handle
        empties the output when the line closes)."""
        global _shown
        if self.widget is not None and not self._shown:
            self._handle = display(self.widget, display_id=True)
            self._shown = True
            with _SHOWN_LOCK:
                _shown += 1

    def step(self, name: str) -> None:
        """Ends the current step (its time kept) and starts ``name``."""
        with self._lock:
            now = self.clock()
            if self.current is not None:
                self.steps.append((self.current, now - self._step_started))
            self.current, self.detail, self._step_started = name, "", now
        self._draw()

    def note(self, detail: str) -> None:
        """Says what the current step is doing (drawn when it changed)."""
        with self._lock:
            if detail == self.detail:
                return
            self.detail = detail
        self._draw()

    def done(self) -> None:
        """Ends the last step and closes the line."""
        self.step("")
        with self._lock:
            self.steps = [s for s in self.steps if s[0]]
            self.current = None
        if self.widget is not None:
            # The output is emptied before the widget closes: a saved notebook would
            # otherwise keep a view of a widget that no longer exists, which JupyterLab
            # shows as "Error displaying widget: model not found" when it is reopened.
            update = getattr(self._handle, "update", None)
            if update is not None:
                update({"text/plain": ""}, raw=True)
            self.widget.close()
        self._forget()

    def _forget(self) -> None:
        global _shown
        if self._shown:
            self._shown = False
            with _SHOWN_LOCK:
                _shown -= 1

    def timed(self) -> dict[str, float]:
        """Seconds per finished step, in order."""
        return dict(self.steps)

    @contextlib.contextmanager
    def watch(self, backend: Any, *, ran: str = "eager run (the reference)") -> Iterator[None]:
        """While active, the current step's detail follows ``backend``'s compile
        (:func:`compile_phase`, with ``ran`` once it has run)."""
        if self.widget is None:
            yield
            return
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(POLL_SECONDS):
                try:
                    self.note(compile_phase(backend, ran=ran))
                except Exception:  # records changing under the reader: try again
                    continue

        thread = threading.Thread(target=poll, name="ortlab-status", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def text(self) -> str:
        """The line: the finished steps with their times, then the current one."""
        done = [f"{name} {_seconds(seconds)}" for name, seconds in self.steps if name]
        now = ""
        if self.current:
            now = self.current + (f": {self.detail}" if self.detail else "") + " …"
        return f"{self.title}: " + " → ".join([*done, now] if now else done)

    def _draw(self) -> None:
        if self.widget is not None:
            self.widget.value = (
                '<div class="ortlab-status" style="font-family:monospace;color:#555">'
                f"{_html.esc(self.text())} ({_seconds(self.seconds)})</div>"
            )


def status_line(title: str, *, enabled: bool = True) -> Status:
    """A status line for a lab call (``ortlab.diff``, ``ortlab.bench``, an Inspector's
    display): shown at once in a notebook (when ``enabled`` and no other line is on
    screen: the call runs inside another lab call), through IPython's ``display``;
    elsewhere it keeps its steps' times and shows nothing.

    Args:
        title: What is working (``"ortlab.diff(Net)"``).
        enabled: Whether the caller wants it shown at all (``bench(progress=False)``).
    """
    live = enabled and _harness.in_notebook() and not _shown
    status = Status(title, live=live)
    if live:
        status.show(_deps.require("IPython.display").display)
    return status


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.0f} ms"
