"""What a benchmark measured: :class:`BenchResult`, one row per backend plus the machine."""

from __future__ import annotations

import dataclasses
import html
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ortlab import _html
from ortlab.bench import _format, _plots

if TYPE_CHECKING:
    import pandas

    from ortlab.backend import OrtBackend

COLUMNS = (
    "backend",
    "first_call_s",
    "median_ms",
    "p10_ms",
    "p90_ms",
    "ratio_to_eager",
    "ratio_to_ort",
    "max_abs_diff",
    "graphs",
    "partitions",
    "sessions",
    "nodes_in_ort",
    "nodes",
    "iters",
    "error",
)
"""Columns of :attr:`BenchResult.frame`, in order."""


@dataclasses.dataclass
class BenchResult:
    """What :func:`ortlab.bench` measured: one row per backend, plus the machine it ran on.

    Ratios are ``median_ms / median_ms of eager`` (``ratio_to_eager``) and of ``"ort"``
    (``ratio_to_ort``): below 1 is faster than the reference.
    """

    frame: pandas.DataFrame
    """One row per backend, columns :data:`COLUMNS`."""
    machine: dict[str, Any]
    """Cores, threads, library versions, Python and platform."""
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """How it was measured: warm-up, iterations or minimum time, modes, threads."""
    name: str = ""
    """What was benchmarked (a zoo model name or the function's name)."""
    ortlab_backends: dict[str, OrtBackend] = dataclasses.field(
        default_factory=dict, repr=False
    )
    """The :class:`~ortlab.OrtBackend` of each ortlab row, by backend name, to inspect
    what was compiled (``ortlab.inspect(result.ortlab_backends["ortlab"])``)."""
    first_call_steps: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    """Where each backend's first call went, seconds per step, by backend name: an ortlab
    row's compile steps (``OrtBackend.compile_timings``), the ``"ort"`` row's export,
    session creation and first run."""

    def row(self, backend: str) -> dict[str, Any]:
        """The row of ``backend`` as a dict.

        Raises:
            KeyError: ``backend`` was not benchmarked.
        """
        rows = self.frame[self.frame["backend"] == backend]
        if rows.empty:
            raise KeyError(
                f"backend {backend!r} is not in this BenchResult; "
                f"it has {list(self.frame['backend'])}"
            )
        return rows.iloc[0].to_dict()

    def plot(self, ax: Any = None) -> Any:
        """A bar chart of the steady-state median per backend, p10-p90 as error bars.

        Args:
            ax: A matplotlib Axes to draw into; ``None`` makes a new figure.

        Returns:
            The matplotlib Figure.
        """
        return _plots.plot_result(self, ax)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (rows, machine, settings) that ``json.dumps`` accepts."""
        return {
            "name": self.name,
            "machine": self.machine,
            "settings": self.settings,
            "results": _format.frame_records(self.frame),
            "first_call_steps": self.first_call_steps,
        }

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The result as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def to_markdown(self) -> str:
        """A markdown table of the rows, followed by the machine facts."""
        parts = []
        if self.name:
            parts.append(f"**{html.escape(self.name, quote=False)}**\n")
        parts.append(_format.markdown_table(_format.HEADERS, _format.display_rows(self.frame)))
        parts.append("")
        parts.append(
            _format.markdown_table(("machine", ""), _format.machine_rows(self.machine))
        )
        parts.extend(f"\n**Warning:** {html.escape(n, quote=False)}" for n in self.trust_notes)
        return "\n".join(parts) + "\n"

    @property
    def trust_notes(self) -> list[str]:
        """Why these timings cannot be trusted: the machine's load while they were taken
        exceeded its cores, or a backend's p90 exceeds its p10 twice over (``[]``: none
        of those)."""
        return _format.trust_lines(self.machine, self.frame)

    def __repr__(self) -> str:
        title = f"BenchResult({self.name})" if self.name else "BenchResult"
        facts = ", ".join(
            f"{k}={self.machine.get(k)}" for k in ("cores", "torch_threads", "torch")
        )
        table = _html.text_table(_format.HEADERS, _format.display_rows(self.frame))
        warnings = "".join(f"\nWarning: {n}" for n in self.trust_notes)
        return f"{title}: {facts}\n{table}{warnings}"

    def _repr_html_(self) -> str:
        facts = ", ".join(f"{k}: {v}" for k, v in _format.machine_rows(self.machine))
        body = _html.table(_format.HEADERS, _format.display_rows(self.frame))
        body += f"<p><small>{_html.esc(facts)}</small></p>"
        body += "".join(
            f'<p class="ortlab-note">Warning: {_html.esc(n)}</p>' for n in self.trust_notes
        )
        return _html.block(f"Benchmark: {self.name}" if self.name else "Benchmark", body)
