"""The view of :func:`ortlab.compare`: what differs between two compiles, and what it did
to the time (per part, module, FX node and op type) and to the numbers.

# NOTE: static HTML, like the Profile view (``_profile``): tables with a diverging bar
# per row (green: b faster, red: b slower, in proportion to the largest change shown);
# every model string escaped. In the report, a comparison is a section of its own above
# the two compiles, each shown with its Profile tab.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ortlab import _html
from ortlab.views import _fragments, _style

if TYPE_CHECKING:
    from ortlab.profiling._comparison import Comparison, TimeChange

FASTER = "#1a9850"
SLOWER = "#d73027"
TOP = 15
"""Rows of each time table."""
WHAT = {
    "option": "Options",
    "graph": "Graphs",
    "placement": "Nodes that changed place",
    "session": "Sessions",
    "frozen": "Inputs frozen as initializers (or no longer)",
}


def _ms(seconds: float) -> str:
    return _html.number(seconds * 1e3)


def _delta_bar(delta: float, scale: float) -> str:
    """A bar growing left (faster, green) or right (slower, red) from the middle."""
    fraction = min(1.0, abs(delta) / scale) if scale > 0 else 0.0
    width = fraction * 60
    fill = FASTER if delta < 0 else SLOWER
    side = f"margin-left:{60 - width:.1f}px" if delta < 0 else "margin-left:60px"
    return (
        '<div style="width:120px;height:10px;background:#f0f0f0;position:relative">'
        f'<div style="{side};width:{width:.1f}px;height:10px;background:{fill}"></div></div>'
    )


def _times_table(rows: Sequence[TimeChange], labels: tuple[str, str], first: str) -> str:
    if not rows:
        return ""
    a, b = labels
    scale = max((abs(r.delta_seconds) for r in rows), default=0.0)
    body = []
    for r in rows:
        cells = [r.label or r.key, _ms(r.a_seconds), _ms(r.b_seconds), _ms(r.delta_seconds)]
        body.append(
            "<tr>"
            + "".join(f"<td>{_html.esc(c)}</td>" for c in cells)
            + f"<td>{_delta_bar(r.delta_seconds, scale)}</td></tr>"
        )
    head = "".join(
        f"<th>{_html.esc(h)}</th>" for h in (first, f"{a} ms", f"{b} ms", f"{b} − {a} ms", "")
    )
    body_html = "".join(body)
    table = f"<thead><tr>{head}</tr></thead><tbody>{body_html}</tbody>"
    return f'<table class="ortlab">{table}</table>'


def headline_html(cmp: Comparison) -> str:
    """The call's time in a and b, and the outputs' difference."""
    a, b = cmp.labels
    parts = []
    if cmp.call is not None:
        c = cmp.call
        ratio = c.a_seconds / c.b_seconds if c.b_seconds else float("nan")
        parts.append(
            f"<p><b>{_html.esc(a)}</b>: {_ms(c.a_seconds)} ms per call · "
            f"<b>{_html.esc(b)}</b>: {_ms(c.b_seconds)} ms per call · {_html.esc(b)} takes "
            f"<b>{1 / ratio if ratio else float('nan'):.2f}×</b> the time of {_html.esc(a)} "
            "(medians, timed together)</p>"
        )
    if cmp.outputs:
        passed = all(d.passed for d in cmp.outputs)
        parts.append(
            f"<p>Outputs of {_html.esc(b)} against {_html.esc(a)}: max abs diff "
            f"{_html.number(cmp.max_abs_diff)} "
            f"({'within' if passed else 'OUTSIDE'} the dtype's tolerance)</p>"
        )
    if cmp.nodes and cmp.call is not None:
        pa, pb = cmp.profiles
        if pa is not None and pb is not None:
            delta = pb.call_seconds - pa.call_seconds
            parts.append(
                f"<p>The profiles' calls differ by {_ms(delta)} ms; their FX nodes and parts "
                f"account for {_ms(cmp.explained_seconds)} ms of it (the rest is the change "
                "in what neither explains).</p>"
            )
    return "".join(parts)


FOLD_ROWS = 10
"""A group of changes with more rows than this is one collapsed line."""


def changes_html(cmp: Comparison) -> str:
    """Everything that differs in the records, grouped."""
    a, b = cmp.labels
    if not cmp.changes:
        return _fragments.note("the two compiles' records do not differ")
    out = []
    for what, title in WHAT.items():
        rows = cmp.of(what)
        if not rows:
            continue
        out.append(f"<h4>{_html.esc(title)}</h4>")
        table = _fragments.paged_table(
            ("", a, b, ""), [(c.key, c.a, c.b, c.detail) for c in rows]
        )
        if len(rows) > FOLD_ROWS:  # BERT-base's 201 frozen weights: one line, opened on click
            names = ", ".join(c.detail or c.key for c in rows[:3])
            table = (
                f'<details class="ortlab-changes"><summary>{len(rows)} rows: '
                f"{_html.esc(names)}, …</summary>{table}</details>"
            )
        out.append(table)
    return "".join(out)


def comparison_html(cmp: Comparison, *, top: int = TOP) -> str:
    """The whole comparison as one self-contained HTML string."""
    labels = cmp.labels
    parts = [headline_html(cmp), changes_html(cmp)]
    if cmp.parts:
        parts += ["<h4>Parts of the call</h4>", _times_table(cmp.parts, labels, "part")]
    if cmp.modules:
        parts += [
            "<h4>Modules, largest change first</h4>",
            _times_table(cmp.modules[:top], labels, "module"),
        ]
    if cmp.nodes:
        parts += [
            "<h4>FX nodes, largest change first</h4>",
            _times_table(cmp.nodes[:top], labels, "FX node"),
        ]
    if cmp.op_types:
        parts += [
            "<h4>ONNX Runtime op types</h4>",
            _times_table(cmp.op_types[:top], labels, "op type"),
        ]
    parts += [_fragments.note(n) for n in cmp.notes]
    return _style.styled("".join(parts))


def unpack(obj: Any, profile: Any) -> tuple[Any, Any, str]:
    """What the report shows for ``obj``: a comparison stands for its two compiles (named
    by its labels, each with its profile) under the comparison's own section."""
    from ortlab.profiling._comparison import Comparison

    if not isinstance(obj, Comparison):
        return obj, profile, ""
    a, b = cmp_labels = obj.labels
    subjects = {a: obj.backends[0], b: obj.backends[1]}
    profiles = {label: p for label, p in zip(cmp_labels, obj.profiles) if p is not None}
    section = (
        '<section class="ortlab-subject" id="compare">'
        f"<h2>{_html.esc(a)} vs {_html.esc(b)}</h2>{comparison_html(obj)}</section>"
    )
    return subjects, profiles or profile, section
