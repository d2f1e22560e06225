"""How benchmark numbers are written: display rows, markdown tables, JSON values, colours.

Shared by :class:`~ortlab.bench.BenchResult`'s text, HTML and markdown, the zoo report
and ``benchmarks/profile_call.py``; model strings are escaped (``html.escape``) wherever
they reach markdown, since markdown renderers pass HTML through.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

HEADERS = (
    "backend",
    "first call (s)",
    "median (ms)",
    "p10 (ms)",
    "p90 (ms)",
    "× eager",
    "× ort",
    "max |diff|",
    "g/p/s",
    "in ORT",
    "iters",
    "error",
)
"""Headers of :func:`display_rows`."""

_COLORS = {
    "eager": "#7f7f7f",
    "inductor": "#ff7f0e",
    "ortlab": "#1f77b4",
    "ortlab-frozen": "#17becf",
    "ort": "#2ca02c",
}


def backend_color(name: str) -> str:
    """The colour of a backend in every benchmark plot."""
    return _COLORS.get(name, "#9467bd")


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def nan_to(value: Any, default: float) -> float:
    return float(value) if finite(value) else default


def fmt(value: Any, spec: str) -> str:
    return spec.format(value) if finite(value) else ("inf" if value == math.inf else "")


def sig3(value: float) -> str:
    """A number with three significant digits, never in exponent form below 1e6
    (``1234`` -> ``"1230"``, ``0.0312`` -> ``"0.0312"``)."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    rounded = round(value, 2 - magnitude)
    if rounded and math.floor(math.log10(abs(rounded))) > magnitude:  # 99.96 -> 100
        magnitude += 1
    return f"{rounded:.{max(0, 2 - magnitude)}f}"


def fmt_ms(value: Any) -> str:
    """Milliseconds with three significant digits or so (``""`` when not measured)."""
    if not finite(value):
        return ""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def fmt_ratio(value: Any) -> str:
    return f"{value:.2f}" if finite(value) else ""


def fmt3(value: Any) -> str:
    """A measured value with three significant digits (``""`` when not measured): how
    ``ortlab.bench`` and ``%ortcompile --bench`` print times and ratios."""
    return sig3(float(value)) if finite(value) else ("inf" if value == math.inf else "")


def trust_lines(machine: Mapping[str, Any], frame: pandas.DataFrame | None) -> list[str]:
    """Why the timings of a result cannot be trusted (see ``_machine.trust_notes``):
    the load while it ran, and each backend's p10-p90 spread."""
    from ortlab.bench import _machine

    loads = [machine.get(k) for k in ("load_avg_1m", "load_avg_1m_after")]
    known = [float(v) for v in loads if v is not None and finite(v)]
    spreads = {}
    same_as_eager = []
    if frame is not None:
        for rec in frame.to_dict("records"):
            if finite(rec.get("p10_ms")) and finite(rec.get("p90_ms")):
                spreads[str(rec["backend"])] = (float(rec["p10_ms"]), float(rec["p90_ms"]))
            if _looks_like_eager(rec):
                same_as_eager.append(str(rec["backend"]))
    cores = machine.get("usable_cores") or machine.get("cores")
    return _machine.trust_notes(
        load=max(known) if known else None,
        cores=cores,
        spreads=spreads,
        same_as_eager=same_as_eager,
    )


OTHER_RUNTIMES = ("openvino",)
"""Peer backends that run the model in a runtime of their own: outputs equal to eager's
to the bit, at eager's speed, are a sign that they handed it back to PyTorch."""

EAGER_SPEED = 1.2
"""A median within this factor of eager's, either way, is "at eager's speed"."""


def _looks_like_eager(rec: Mapping[str, Any]) -> bool:
    """A peer of another runtime whose outputs equal eager's to the bit at eager's
    speed (exact outputs alone are no sign: integer outputs, a ReLU, a reshape)."""
    given = rec.get("ratio_to_eager")
    ratio = float(given) if given is not None and finite(given) else math.nan
    return (
        rec["backend"] in OTHER_RUNTIMES
        and rec.get("max_abs_diff") == 0.0
        and 1 / EAGER_SPEED <= ratio <= EAGER_SPEED
    )


def target_cell(value: float, most: float, text: str, *, strict: bool = False) -> str:
    """A target's cell: ``"<text> met"`` when ``value`` is at most ``most`` (below it
    with ``strict``), ``"<text> missed"`` otherwise, ``"n/a"`` when it is not a number.
    A caller may append ``" (why)"``; :func:`target_verdict` reads the verdict back."""
    if not finite(value):
        return "n/a"
    met = value < most if strict else value <= most
    return f"{text} {'met' if met else 'missed'}"


def target_verdict(cell: str) -> str:
    """``"met"`` / ``"missed"`` of a :func:`target_cell` (``""`` for any other cell)."""
    words = cell.split(" (", 1)[0].split()
    return words[-1] if len(words) >= 2 and words[-1] in ("met", "missed") else ""


def display_rows(frame: pandas.DataFrame) -> list[list[str]]:
    """The rows of a result frame as display text (headers: :data:`HEADERS`)."""
    rows = []
    for rec in frame.to_dict("records"):
        counts = ""
        if finite(rec["graphs"]):
            counts = f"{int(rec['graphs'])}/{int(rec['partitions'])}/{int(rec['sessions'])}"
        in_ort = ""
        if finite(rec["nodes"]):
            in_ort = f"{int(rec['nodes_in_ort'])}/{int(rec['nodes'])}"
        rows.append(
            [
                rec["backend"],
                fmt(rec["first_call_s"], "{:.2f}"),
                fmt3(rec["median_ms"]),
                fmt3(rec["p10_ms"]),
                fmt3(rec["p90_ms"]),
                fmt3(rec["ratio_to_eager"]),
                fmt3(rec["ratio_to_ort"]),
                fmt(rec["max_abs_diff"], "{:.1e}"),
                counts,
                in_ort,
                str(rec["iters"]),
                rec["error"],
            ]
        )
    return rows


def machine_rows(machine: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return list(machine.items())


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; every cell is HTML-escaped and ``|``-escaped."""

    def cell(v: Any) -> str:
        text = html.escape(str(v), quote=False)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |"]
    lines.append("|" + "|".join(" --- " for _ in headers) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def json_value(value: Any) -> Any:
    """A frame value as JSON takes it (NaN/inf become ``null``, numpy scalars Python)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf
    if hasattr(value, "item"):  # numpy scalars
        return json_value(value.item())
    return value


def frame_records(frame: pandas.DataFrame) -> list[dict[str, Any]]:
    return [{k: json_value(v) for k, v in rec.items()} for rec in frame.to_dict("records")]


def machine_section(machine: Mapping[str, Any]) -> list[str]:
    """The ``## Machine`` section of a markdown report, as lines."""
    return ["## Machine", "", markdown_table(("fact", "value"), machine_rows(machine)), ""]


def errors_section(results: Sequence[Any]) -> list[str]:
    """The ``## Errors`` section of a markdown report (a row per backend that failed on a
    model of ``results``, :class:`~ortlab.bench.BenchResult` s), as lines; none when
    nothing failed."""
    seen = [
        (r.name, b, e)
        for r in results
        for b, e in zip(r.frame["backend"], r.frame["error"])
        if e
    ]
    if not seen:
        return []
    return ["## Errors", "", markdown_table(("model", "backend", "error"), seen), ""]
