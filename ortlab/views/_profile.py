"""The Profile view of :func:`ortlab.profile`: where the time goes, as tables, an icicle
chart by module and a heat overlay on the FX graph.

# NOTE: everything is static HTML (the Inspector's Profile tab shows the same string in a
# widget; the report inlines it): tables with inline bars, the icicle chart as inline SVG
# built here (no matplotlib, no JavaScript), the heat overlay drawn by Graphviz
# (``_heat``: a large graph one box per module, with the module's total). Colours say a
# share of the *call*, the same scale in every view of a profile. Every model string is
# escaped (``_html.esc``, or ``_dot.quote`` for Graphviz).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ortlab import _deps, _html
from ortlab.views import _fragments, _heat, _style

if TYPE_CHECKING:
    import pandas as pd

    from ortlab.profiling import Profile

TAB_TITLE = "Profile"
"""The title of the Profile tab (Inspector and report)."""

HEAT = _heat.HEAT
PART_FILL = _heat.PART_FILL
heat_fill = _heat.heat_fill
HEAT_LEGEND = _heat.HEAT_LEGEND
TOP = 15
"""Rows of each top-N table."""


_ms = _heat.ms
_share = _heat.share
_percent = _heat.percent


def _bar(fraction: float, fill: str = HEAT[4]) -> str:
    width = max(0.0, min(1.0, fraction)) * 100
    return (
        '<div style="background:#f0f0f0;width:120px;height:10px">'
        f'<div style="background:{fill};width:{width:.1f}%;height:10px"></div></div>'
    )


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], bars: Sequence[str] = ()
) -> str:
    """An HTML table of escaped cells, with an optional column of (trusted) bar HTML."""
    head = "".join(f"<th>{_html.esc(h)}</th>" for h in headers)
    if bars:
        head += "<th></th>"
    body = []
    for i, row in enumerate(rows):
        cells = "".join(f"<td>{_html.esc(c)}</td>" for c in row)
        if bars:
            cells += f"<td>{bars[i]}</td>"
        body.append(f"<tr>{cells}</tr>")
    body_html = "".join(body)
    table = f"<thead><tr>{head}</tr></thead><tbody>{body_html}</tbody>"
    return f'<table class="ortlab">{table}</table>'


# -- tables -------------------------------------------------------------------------------


def summary_html(profile: Profile) -> str:
    """The call and its parts in one table."""
    rows = profile.summary_rows()
    head = (
        f"<p><b>{_ms(profile.call_seconds)} ms per call</b> (median of {profile.runs} runs), "
        f"<b>{profile.attribution}</b>: the parts below, each measured on its own, "
        "against the call measured whole.</p>"
    )
    return head + _table(("part", "ms per call"), rows)


def modules_html(profile: Profile, top: int = TOP) -> str:
    """Top modules by time (their submodules included)."""
    groups = [g for g in profile.by_module() if g.key][:top]
    if not groups:
        return _fragments.note("no module information on these nodes")
    rows = [
        (
            g.key,
            g.label,
            _ms(g.seconds),
            _percent(profile, g.seconds),
            _ms(g.self_seconds),
            g.nodes,
        )
        for g in groups
    ]
    bars = [_bar(_share(profile, g.seconds)) for g in groups]
    return _table(("module", "class", "ms", "% of call", "own ms", "nodes"), rows, bars)


def sources_html(profile: Profile, top: int = TOP) -> str:
    """Top source lines by time."""
    groups = profile.by_source()[:top]
    rows = [(g.key, _ms(g.seconds), _percent(profile, g.seconds), g.nodes) for g in groups]
    bars = [_bar(_share(profile, g.seconds)) for g in groups]
    return _table(("source line", "ms", "% of call", "nodes"), rows, bars)


def op_types_html(profile: Profile, top: int = TOP) -> str:
    """ONNX Runtime's op types by time."""
    groups = profile.by_op_type()[:top]
    if not groups:
        return _fragments.note("no ONNX Runtime node was profiled")
    rows = [
        (g.key, g.label, _ms(g.seconds), _percent(profile, g.seconds), g.nodes) for g in groups
    ]
    bars = [_bar(_share(profile, g.seconds)) for g in groups]
    return _table(("op type", "provider", "ms", "% of call", "nodes"), rows, bars)


def nodes_html(profile: Profile, top: int = TOP) -> str:
    """Top FX nodes by time."""
    nodes = profile.top_nodes(top)
    rows = [
        (
            n.node,
            n.target,
            "ONNX Runtime" if n.placement == "ort" else "PyTorch",
            _ms(n.seconds),
            _percent(profile, n.seconds),
            n.module or "(model)",
            n.source,
            ", ".join(n.ort_nodes[:4]) + (" …" if len(n.ort_nodes) > 4 else ""),
        )
        for n in nodes
    ]
    bars = [_bar(_share(profile, n.seconds)) for n in nodes]
    return _table(
        (
            "FX node",
            "op",
            "runs in",
            "ms",
            "% of call",
            "module",
            "source",
            "ONNX Runtime nodes",
        ),
        rows,
        bars,
    )


def sessions_html(profile: Profile) -> str:
    """Each profiled session: bare run, profiled run, the partition's call."""
    rows = [
        (
            f"graph {s.graph_index} {s.partition} #{s.session_index}",
            _ms(s.partition_seconds),
            _ms(s.run_seconds),
            _ms(s.profiled_run_seconds),
            _ms(s.kernel_seconds),
            s.threads if s.threads is not None else "-",
            f"{s.onnx_nodes} → {s.optimized_nodes}",
        )
        for s in profile.sessions
    ]
    return _table(
        (
            "session",
            "partition call ms",
            "ONNX Runtime run ms",
            "run under profiler ms",
            "kernels ms",
            "threads",
            "ONNX nodes → ORT nodes",
        ),
        rows,
    )


def advice_html(profile: Profile) -> str:
    """The options tried on the model, with the gain measured."""
    if not profile.advice:
        return ""
    rows = [
        (
            a.setting,
            _ms(a.current_seconds) if a.current_seconds else "-",
            _ms(a.trial_seconds) if a.trial_seconds else "-",
            f"x{a.gain:.2f}" if a.gain else "-",
            "recommended" if a.recommended else "no clear gain",
            a.why + (f" ({a.note})" if a.note else ""),
        )
        for a in profile.advice
    ]
    return _table(("option", "now ms", "with it ms", "gain", "verdict", "why tried"), rows)


def advice_lines(profile: Profile) -> list[str]:
    """The recommended options, one line each (the magic's headline)."""
    return [
        f"{a.setting} measured x{a.gain:.2f} faster on this model"
        for a in profile.advice
        if a.recommended and a.gain
    ]


# -- icicle -------------------------------------------------------------------------------


def _module_tree(profile: Profile) -> dict[str, tuple[str, float, list[str]]]:
    """path -> (class, seconds, child paths), the model's root first."""
    seconds: dict[str, float] = collections.defaultdict(float)
    classes: dict[str, str] = {"": profile.model_class}
    children: dict[str, list[str]] = collections.defaultdict(list)
    for n in profile.nodes:
        stack = [p for p, _ in n.modules] or [""]
        if stack[0] != "":
            stack = ["", *stack]
        for path, cls in n.modules:
            classes.setdefault(path, cls)
        for parent, child in itertools.pairwise(stack):
            if child not in children[parent]:
                children[parent].append(child)
        for path in dict.fromkeys(stack):
            seconds[path] += n.seconds
    return {p: (classes.get(p, ""), seconds[p], children.get(p, [])) for p in seconds}


def icicle_svg(
    profile: Profile, *, width: int = 960, row: int = 22, max_depth: int = 8
) -> str:
    """An icicle chart of the call: the call on top, then its parts and the model's
    modules, each module above its submodules, widths in proportion to time."""
    total = max(profile.call_seconds, profile.attributed_seconds, 1e-12)
    tree = _module_tree(profile)
    rects: list[str] = []

    def rect(x: float, depth: int, seconds: float, label: str, tip: str, fill: str) -> None:
        w = seconds / total * width
        if w < 0.5:
            return
        y = depth * row
        text = ""
        if w > 36:
            shown = (
                label
                if len(label) * 6.5 < w - 6
                else label[: max(1, int((w - 6) / 6.5) - 1)] + "…"
            )
            text = (
                f'<text x="{x + 3:.1f}" y="{y + row - 7}" font-size="11" '
                f'fill="{"white" if fill == HEAT[-1] else "#222"}">{_html.esc(shown)}</text>'
            )
        rects.append(
            f'<g><title>{_html.esc(tip)}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
            f'height="{row - 2}" fill="{fill}" stroke="#888" stroke-width="0.5"></rect>'
            f"{text}</g>"
        )

    call_tip = f"the call: {_ms(profile.call_seconds)} ms"
    rect(0, 0, total, f"call {_ms(profile.call_seconds)} ms", call_tip, PART_FILL)
    x = 0.0
    for o in profile.overheads:
        if o.kind != "unattributed" and o.seconds > 0:
            rect(x, 1, o.seconds, o.kind, f"{o.label}: {_ms(o.seconds)} ms", PART_FILL)
            x += o.seconds / total * width

    def module(path: str, x: float, depth: int) -> None:
        cls, seconds, kids = tree[path]
        name = path.rsplit(".", 1)[-1] if path else (cls or "model")
        tip = (
            f"{path or cls or 'model'} ({cls}): {_ms(seconds)} ms, "
            f"{_percent(profile, seconds)}% of the call"
        )
        rect(x, depth, seconds, name, tip, heat_fill(_share(profile, seconds)))
        if depth >= max_depth:
            return
        for kid in sorted(kids, key=lambda k: -tree[k][1]):
            module(kid, x, depth + 1)
            x += tree[kid][1] / total * width

    if "" in tree:
        module("", x, 1)
        x += tree[""][1] / total * width
    rest = profile.unattributed_seconds
    if rest > 0:
        rect(x, 1, rest, "unattributed", f"unattributed: {_ms(rest)} ms", "#f7f7f7")
    depth = 1 + max((p.count(".") + 2 for p in tree if p), default=1)
    height = min(depth, max_depth + 1) * row + 2
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="Helvetica, Arial, sans-serif">{"".join(rects)}</svg>'
    )


# -- the tab ------------------------------------------------------------------------------


def profile_html(profile: Profile, *, graphs: bool = True, id_prefix: str = "pf-") -> str:
    """The whole Profile view as one self-contained HTML string."""
    parts = [
        summary_html(profile),
        "<h4>Where the time goes, by module</h4>",
        f'<div class="ortlab-graph">{icicle_svg(profile)}</div>',
        HEAT_LEGEND,
        "<h4>Top modules</h4>",
        modules_html(profile),
        "<h4>Top source lines</h4>",
        sources_html(profile),
        "<h4>Top FX nodes</h4>",
        nodes_html(profile),
        "<h4>ONNX Runtime op types</h4>",
        op_types_html(profile),
    ]
    if profile.advice:
        parts += ["<h4>Options tried on this model</h4>", advice_html(profile)]
    if profile.sessions:
        parts += ["<h4>Sessions</h4>", sessions_html(profile)]
    if graphs:
        parts += ["<h4>Heat overlay</h4>", _heat.heat_html(profile, id_prefix=id_prefix)]
    parts += [_fragments.note(n) for n in profile.notes]
    return _style.styled("".join(parts))


def profile_widget(profile: Profile) -> Any:
    """The Profile tab's widget (the same HTML)."""
    widgets = _deps.require("ipywidgets")
    return widgets.HTML(profile_html(profile), layout=widgets.Layout(width="100%"))


def tab(profile: Profile, *, id_prefix: str = "pf-") -> tuple[str, str]:
    """``(title, html)`` of the Profile tab, for the report."""
    return TAB_TITLE, profile_html(profile, id_prefix=id_prefix)


def for_subjects(subjects: Sequence[Any], profile: Any) -> dict[int, Profile]:
    """Which subject of a view each profile belongs to: ``profile`` is a
    :class:`Profile` (the subject of its backend, else the first) or a mapping of
    subject names to profiles."""
    if profile is None:
        return {}
    if isinstance(profile, Mapping):
        return {i: profile[s.name] for i, s in enumerate(subjects) if s.name in profile}
    for i, s in enumerate(subjects):
        if profile.backend is s.backend:
            return {i: profile}
    return {0: profile}


def unpack(obj: Any, profile: Any) -> tuple[Any, Any]:
    """What the Inspector and the report show for ``obj``: a :class:`Profile` stands for
    its backend, with itself as the profile (``profile`` otherwise)."""
    from ortlab.profiling import Profile

    if isinstance(obj, Profile) and obj.backend is not None:
        return obj.backend, obj if profile is None else profile
    return obj, profile


def profile_frame(profile: Profile, by: str = "node") -> pd.DataFrame:
    """The profile as a DataFrame: ``by="node"`` (one row per FX node), ``"module"``,
    ``"source"`` or ``"op_type"`` (one row per group), largest first."""
    pd = _deps.require("pandas")
    if by == "node":
        rows = [
            {
                "graph": n.graph_index,
                "node": n.node,
                "target": n.target,
                "placement": n.placement,
                "partition": n.partition,
                "ms": n.seconds * 1e3,
                "module": n.module,
                "module_class": n.module_class,
                "source": n.source,
                "ort_nodes": ", ".join(n.ort_nodes),
            }
            for n in sorted(profile.nodes, key=lambda n: -n.seconds)
        ]
        return pd.DataFrame(rows)
    groups = {
        "module": profile.by_module,
        "source": profile.by_source,
        "op_type": profile.by_op_type,
    }
    if by not in groups:
        from ortlab import errors

        raise errors.UnsupportedOptionError(
            f"profile_frame: by must be 'node', 'module', 'source' or 'op_type'; got {by!r}"
        )
    return pd.DataFrame(
        [
            {
                by: g.key,
                "ms": g.seconds * 1e3,
                "self_ms": g.self_seconds * 1e3,
                "nodes": g.nodes,
                "label": g.label,
            }
            for g in groups[by]()
        ]
    )
