"""The names inputs are shown by: the parameter, buffer or argument each placeholder binds
(``GraphRecord.source_of``), and input lists summarised as
``"2 inputs + 199 weights (418 MiB)"`` with the detail one click away.

# NOTE: Dynamo names where each graph input comes from (``encoder.layer.0.attention.
# self.query.weight``, ``input_ids``, ``args[0]``); the lab shows that name wherever a
# placeholder would appear (verdicts, sessions, ONNX inputs, numerics, the timeline). A
# *weight* is an input read from the module: its name is an attribute path
# (``embeddings.word_embeddings.weight``). Arguments are written as the call passed
# them (``input_ids``, ``args[0]``, ``kwargs['mask']``); a bare name is taken for an
# argument, so the parameters of a module compiled on its own (``weight`` of a bare
# ``nn.Linear``) count as inputs. Initializers (frozen parameters) are weights.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ortlab import _html

if TYPE_CHECKING:
    from ortlab.backend import records

_ITEM_SIZES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}
_TYPE_TEXT = re.compile(r"^(\w+)\[([^\]]*)\]$")


def bound_name(graph: records.GraphRecord | None, name: str) -> str:
    """The parameter, buffer or argument a placeholder binds, else ``name``."""
    return graph.source_of(name) if graph is not None else name


def is_weight(bound: str) -> bool:
    """Whether a bound name is a module's parameter or buffer (see the module NOTE)."""
    return "." in bound and "[" not in bound.split(".", 1)[0]


def label(graph: records.GraphRecord | None, name: str) -> str:
    """``"encoder.layer.0.output.dense.weight (arg5_1)"``, or ``name`` when it binds
    nothing known."""
    bound = bound_name(graph, name)
    return name if bound == name else f"{bound} ({name})"


def value_bytes(type_text: str) -> int | None:
    """Bytes of a value typed ``float32[768,768]`` (``None`` with a symbolic dim)."""
    match = _TYPE_TEXT.match(type_text.strip())
    if match is None or match.group(1) not in _ITEM_SIZES:
        return None
    size = _ITEM_SIZES[match.group(1)]
    for dim in filter(None, match.group(2).split(",")):
        if not dim.strip().isdigit():
            return None
        size *= int(dim)
    return size


def bytes_text(count: int) -> str:
    """``"418 MiB"``, ``"12.5 KiB"``, ``"96 B"`` (three significant digits)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{_html.number(value)} {unit}" if unit != "B" else f"{count} B"
        value /= 1024
    return f"{count} B"  # pragma: no cover


@dataclasses.dataclass(frozen=True)
class Input:
    """One input of a graph or session as the lab shows it.

    Attributes:
        name: The placeholder or ONNX input name.
        bound: The parameter, buffer or argument it binds (``name`` when unknown).
        type: ``"float32[768,768]"``.
        weight: A parameter, buffer or initializer.
        nbytes: Its size, when every dim is known.
    """

    name: str
    bound: str
    type: str
    weight: bool
    nbytes: int | None = None

    @property
    def shown(self) -> str:
        return self.bound if self.bound == self.name else f"{self.bound} ({self.name})"


def session_inputs(
    session: records.SessionRecord, graph: records.GraphRecord | None
) -> list[Input]:
    """A session's inputs (then its frozen weights), named by what they bind."""
    out = []
    for name, text in zip(session.input_names, session.input_schema):
        bound = bound_name(graph, name)
        weight = is_weight(bound)
        out.append(Input(name, bound, text, weight, value_bytes(text) if weight else None))
    initializers = {t.name: t for t in session.model.graph.initializer}
    for name in session.frozen_inputs:
        tensor = initializers.get(name)
        size = len(tensor.raw_data) if tensor is not None and tensor.raw_data else None
        out.append(Input(name, bound_name(graph, name), "initializer", True, size))
    return out


def graph_inputs(graph: records.GraphRecord) -> list[Input]:
    """A graph's placeholders, named by what they bind."""
    from ortlab.views import _items

    out = []
    for node in graph.graph_module.graph.nodes:
        if node.op != "placeholder":
            continue
        bound = bound_name(graph, node.name)
        text = _items.value_text(node.meta.get("val"))
        weight = is_weight(bound)
        out.append(
            Input(node.name, bound, text, weight, value_bytes(text) if weight else None)
        )
    return out


def summary(inputs: Sequence[Input]) -> str:
    """``"2 inputs + 199 weights (418 MiB)"``; ``"3 inputs: float32[s0,8], ..."`` when
    there are no weights and few inputs."""
    plain = [i for i in inputs if not i.weight]
    weights = [i for i in inputs if i.weight]
    if not weights:
        if len(plain) <= 3:
            return ", ".join(i.type for i in plain) or "no inputs"
        return f"{len(plain)} inputs"
    sizes = [i.nbytes for i in weights if i.nbytes is not None]
    size = f" ({bytes_text(sum(sizes))})" if sizes else ""
    head = (
        ", ".join(f"{i.bound}: {i.type}" for i in plain)
        if len(plain) <= 2
        else f"{len(plain)} inputs"
    )
    count = f"{len(weights)} weight{'s' if len(weights) != 1 else ''}{size}"
    return f"{head} + {count}" if plain else count


def detail_html(inputs: Sequence[Input]) -> str:
    """The summary, with every input (name, what it binds, type, size) one click away."""
    rows = [
        (
            i.bound,
            i.name,
            i.type,
            "weight" if i.weight else "input",
            bytes_text(i.nbytes) if i.nbytes is not None else "",
        )
        for i in sorted(inputs, key=lambda i: i.weight)
    ]
    table = _html.table(("binds", "name", "type", "role", "size"), rows)
    return (
        f'<details class="ortlab-inputs"><summary>{_html.esc(summary(inputs))}</summary>'
        f"{table}</details>"
    )
