"""Graphviz DOT: quoting model strings safely, and running ``dot -Tsvg`` once per graph.

# NOTE: the views build DOT source as plain strings (fast, no per-node Python objects of
# a graph library) and hand it to Graphviz's ``dot`` in one subprocess call. Every string
# that comes from a model passes through :func:`quote` first, which makes it a literal
# DOT string whose text Graphviz shows as typed: DOT's own escapes (``\\N``, ``\\G``, ``\\l``)
# and XML entities (``&lt;``) in model strings are neutralised. Graphviz then XML-escapes
# that text in its SVG output, so the SVG can be inlined into HTML as it is.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

from ortlab import errors

DOT_TIMEOUT_SECONDS = 120.0
"""A layout asked for explicitly ("draw anyway", the report) is abandoned after this."""

INTERACTIVE_TIMEOUT_SECONDS = 4.0
"""A layout for an open view is abandoned after this: the view shows its module table and
a button to draw anyway (:data:`DOT_TIMEOUT_SECONDS`), never a cell blocked for minutes."""

INSTALL_HINT = (
    "Graphviz's 'dot' program is not installed, so graphs are shown as tables. "
    "Install Graphviz to see them: 'apt-get install graphviz' (Debian/Ubuntu), "
    "'brew install graphviz' (macOS), 'conda install graphviz', "
    "or https://graphviz.org/download/ — then re-run the cell."
)


class GraphvizError(errors.OrtlabError):
    """``dot`` is missing, failed, or took too long on a graph."""


class LayoutTimeout(GraphvizError):
    """``dot`` took longer than it was given."""


def quote(text: object, *, tooltip: bool = False) -> str:
    """Returns ``text`` as a quoted DOT string that Graphviz displays literally.

    Backslashes are escaped (so ``\\N`` is not replaced by the node name), double quotes
    escaped, ``&`` written as ``&amp;`` (Graphviz would otherwise decode entities such as
    ``&lt;``), and newlines become DOT line breaks. Tooltips go through one more round of
    Graphviz's escape processing than labels, so their backslashes are escaped twice.
    """
    backslash = "\\" * (4 if tooltip else 2)
    s = str(text).replace("\\", backslash).replace('"', '\\"').replace("&", "&amp;")
    s = s.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return f'"{s}"'


def html_text(text: object) -> str:
    """``text`` for a Graphviz HTML-like label: XML-escaped, so markup in model strings
    is shown as typed."""
    return (
        str(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\n", " ")
    )


def attrs(**values: object) -> str:
    """``[key="value", ...]`` for DOT, every value quoted; ``None`` values are skipped."""
    items = [
        f"{k}={quote(v, tooltip=k == 'tooltip')}" for k, v in values.items() if v is not None
    ]
    return "[" + ", ".join(items) + "]" if items else ""


def dot_executable() -> str | None:
    """Path of Graphviz's ``dot``, or ``None`` when it is not installed."""
    return shutil.which("dot")


def dot_available() -> bool:
    """Whether graphs can be rendered (Graphviz's ``dot`` is on ``PATH``)."""
    return dot_executable() is not None


_XML_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_SVG_SIZE = re.compile(r'\b(width|height)="([0-9.]+)pt"')


def render_svg(source: str, *, timeout: float = DOT_TIMEOUT_SECONDS) -> str:
    """Lays out DOT ``source`` with ``dot -Tsvg``; returns SVG ready to inline in HTML.

    The XML prolog, the DOCTYPE (which names an external DTD) and comments are removed,
    so the result references nothing outside itself.

    Raises:
        GraphvizError: ``dot`` is not installed, failed, or exceeded ``timeout`` seconds.
    """
    exe = dot_executable()
    if exe is None:
        raise GraphvizError(INSTALL_HINT)
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=source.encode("utf-8"),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise LayoutTimeout(
            f"Graphviz's dot took more than {timeout:.0f} s to lay out this graph; "
            "it is shown as a table. Collapse modules or partitions to draw it."
        ) from e
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GraphvizError(
            f"Graphviz's dot failed (exit code {done.returncode}): "
            f"{message[-1] if message else 'no message'}"
        )
    svg = _COMMENT.sub("", _XML_PROLOG.sub("", done.stdout.decode("utf-8"), count=1))
    # Graphviz sizes the drawing in points; as pixels it reads at a notebook's scale.
    return _SVG_SIZE.sub(r'\1="\2px"', svg, count=2)


@dataclasses.dataclass
class Rendered:
    """A graph view: its DOT source, its SVG (when ``dot`` could draw it), element ids.

    Attributes:
        dot: The DOT source.
        svg: Inline-ready SVG, or ``None`` when Graphviz is missing or failed.
        ids: Element id in the SVG for each drawn item, keyed by FX node name (FX views)
            or ONNX node index as text (ONNX views); used to highlight provenance.
        note: Why there is no SVG, or what was simplified (collapsed partitions…).
        node_count: Nodes of the source graph (not of the drawing).
        actions: SVG element id -> what a click on it means (``("module", path)``,
            ``("item", key)``; see ``views._gmodel``).
        timed_out: ``dot`` ran out of time (the view offers to draw anyway).
    """

    dot: str
    svg: str | None
    ids: dict[str, str]
    note: str = ""
    node_count: int = 0
    actions: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    timed_out: bool = False

    def _repr_svg_(self) -> str | None:
        return self.svg

    def _repr_html_(self) -> str:
        from ortlab import _html

        note = f'<p class="ortlab-note">{_html.esc(self.note)}</p>' if self.note else ""
        body = self.svg or ""
        return f'<div class="ortlab-graph">{note}{body}</div>'


def render(
    source: str,
    ids: dict[str, str],
    *,
    note: str = "",
    node_count: int = 0,
    actions: dict[str, tuple[str, str]] | None = None,
    timeout: float | None = None,
) -> Rendered:
    """Renders ``source``; a missing or failing ``dot`` becomes the result's note.

    Args:
        source: DOT source.
        ids: See :class:`Rendered`.
        note: What was simplified.
        node_count: Nodes of the source graph.
        actions: See :class:`Rendered`.
        timeout: Seconds ``dot`` may take (``None``: :data:`DOT_TIMEOUT_SECONDS`).
    """
    actions = actions or {}
    try:
        svg = render_svg(source, timeout=DOT_TIMEOUT_SECONDS if timeout is None else timeout)
    except GraphvizError as e:
        return Rendered(
            source,
            None,
            ids,
            note=str(e),
            node_count=node_count,
            actions=actions,
            timed_out=isinstance(e, LayoutTimeout),
        )
    return Rendered(source, svg, ids, note=note, node_count=node_count, actions=actions)
