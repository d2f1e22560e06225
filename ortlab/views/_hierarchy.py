"""The model's own module tree over a graph's nodes: modules, repeated blocks folded, the
partitions and eager nodes inside each, and search.

# NOTE: FX nodes (``nn_module_stack``) and ONNX nodes (the exporter's ``name_scopes``)
# both carry the module paths they come from (:mod:`ortlab.views._items`), so both graphs
# are drawn as the model's module tree:
#
#   (model)                         encoder          (BertEncoder)
#    ├ embeddings   (BertEmbeddings)  layer.0–11 ×12 (BertLayer): 43 ops each
#    ├ encoder      (BertEncoder)  ->  [one box: the twelve layers have one structure]
#    └ pooler       (BertPooler)
#
# A module's *signature* is its class, its own nodes' ops and its children's labels and
# signatures; siblings named ``prefix<N>`` in a row with one signature are a
# :class:`Fold` (``layer.0–11 ×12``), drawn once with its count until one of them is
# expanded (then the fold splits around it: ``layer.0–6 ×7``, ``layer.7``,
# ``layer.8–11 ×4``). Each module counts its ops per partition and the ones that stay in
# PyTorch, for every level of the drawing (:mod:`ortlab.views._layout`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
from collections.abc import Iterable, Sequence

from ortlab.views._items import Item

ROOT = ""
"""The path of the tree's root: the compiled module (or function) itself."""

MAX_HITS = 50
"""Search results listed at most."""

_INDEXED = re.compile(r"^(.*?)(\d+)$")


@dataclasses.dataclass(eq=False)
class Module:
    """One module of the tree with the items directly in it and counts of all below.

    Attributes:
        path: Its full path (``encoder.layer.0``); ``""`` for the root.
        label: Its path relative to its parent (``layer.0``).
        cls: Its class name (``BertLayer``), ``""`` when unknown.
        parent: The module holding it (``None`` for the root).
        children: Its submodules, in the order of their first node that reads another
            (a random draw the backend makes at the start of the graph does not move its
            module).
        items: The items directly in it (not in a submodule).
        ops: Op counts of every op below it.
        groups: Ops per partition below it (FX views).
        eager: Ops below it that run in PyTorch.
        weights: Weights read by ops below it.
        weight_bytes: Their size, where known.
        signature: A digest of its structure (see the module NOTE).
    """

    path: str
    label: str
    cls: str = ""
    parent: Module | None = None
    children: list[Module] = dataclasses.field(default_factory=list)
    items: list[Item] = dataclasses.field(default_factory=list)
    ops: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    groups: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    eager: int = 0
    weights: int = 0
    weight_bytes: int = 0
    signature: str = ""

    @property
    def count(self) -> int:
        """Ops below it."""
        return sum(self.ops.values())

    @property
    def title(self) -> str:
        """``"layer.0 (BertLayer)"``."""
        name = self.label or "(model)"
        return f"{name} ({self.cls})" if self.cls else name


@dataclasses.dataclass(frozen=True)
class Fold:
    """Sibling modules in a row with one structure, drawn as one box with their count.

    Attributes:
        members: Their paths, in order.
        prefix: The label they share before their number (``"layer."``).
        numbers: Their numbers as written (``("0", ..., "11")``).
    """

    members: tuple[str, ...]
    prefix: str
    numbers: tuple[str, ...]

    @property
    def label(self) -> str:
        """``"layer.0–11 ×12"``."""
        return f"{self.prefix}{self.numbers[0]}–{self.numbers[-1]} ×{len(self.members)}"


@dataclasses.dataclass(frozen=True)
class Hit:
    """A search result: an item (``key``) or a module (``key`` is ``None``)."""

    key: str | None
    module: str
    text: str


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def _order_children(module: Module, position: dict[str, int]) -> tuple[int, int]:
    """Sorts the children of ``module`` and below by their first node that reads another
    (a node that reads none, such as a random draw the backend makes at the start of the
    graph, does not move its module); returns that position and the first position under
    ``module``."""
    reading = [position[i.key] for i in module.items if i.inputs]
    first = [position[i.key] for i in module.items]
    keys = {}
    for child in module.children:
        child_reading, child_first = _order_children(child, position)
        keys[child.path] = child_reading
        reading.append(child_reading)
        first.append(child_first)
    module.children.sort(key=lambda c: keys[c.path])
    lowest = min(first, default=0)
    return min((r for r in reading if r >= 0), default=lowest), lowest


class Tree:
    """The module tree of a list of items (see the module NOTE).

    Args:
        items: The graph's items, in graph order.
    """

    def __init__(self, items: Sequence[Item]) -> None:
        self.items: dict[str, Item] = {i.key: i for i in items}
        self.order: list[str] = [i.key for i in items]
        self.root = Module(ROOT, "")
        self.modules: dict[str, Module] = {ROOT: self.root}
        for item in items:
            self._place(item)
        _order_children(self.root, {key: i for i, key in enumerate(self.order)})
        consumers: dict[str, list[str]] = collections.defaultdict(list)
        for item in items:
            for src in item.inputs:
                consumers[src].append(item.key)
        self._count(self.root, consumers)
        self.folds: dict[str, Fold] = {}
        for module in self.modules.values():
            for fold in _folds(module):
                for member in fold.members:
                    self.folds[member] = fold

    def _place(self, item: Item) -> None:
        parent = self.root
        if item.kind == "op":
            for depth, path in enumerate(item.scope):
                module = self.modules.get(path)
                if module is None:
                    label = path
                    if parent.path and path.startswith(parent.path + "."):
                        label = path[len(parent.path) + 1 :]
                    cls = item.classes[depth] if depth < len(item.classes) else ""
                    module = Module(path, label, cls, parent)
                    self.modules[path] = module
                    parent.children.append(module)
                parent = module
        parent.items.append(item)

    def _count(self, module: Module, consumers: dict[str, list[str]]) -> set[str]:
        """Fills the counts and signatures below ``module``; returns the weights read."""
        read: set[str] = set()
        for child in module.children:
            read |= self._count(child, consumers)
            module.ops.update(child.ops)
            module.groups.update(child.groups)
            module.eager += child.eager
        for item in module.items:
            if item.kind != "op":
                continue
            module.ops[item.op] += 1
            if item.group is not None and not item.eager:
                module.groups[item.group] += 1
            module.eager += item.eager
            read.update(
                src
                for src in item.inputs
                if getattr(self.items.get(src), "kind", "") == "weight"
            )
        module.weights = len(read)
        module.weight_bytes = sum(self.items[w].nbytes or 0 for w in read)
        module.signature = _digest(
            module.cls,
            tuple(i.op for i in module.items if i.kind == "op"),
            tuple((_INDEXED.sub(r"\1#", c.label), c.signature) for c in module.children),
        )
        return read

    # -- questions ---------------------------------------------------------------------
    def module_of(self, key: str) -> Module:
        """The module directly holding an item."""
        item = self.items[key]
        return self.modules.get(item.module, self.root) if item.kind == "op" else self.root

    def ancestors(self, path: str) -> list[str]:
        """The paths from the root's child down to ``path`` itself (``[]`` for the root)."""
        module = self.modules.get(path)
        out = []
        while module is not None and module.path != ROOT:
            out.append(module.path)
            module = module.parent
        return out[::-1]

    def expansion_for(self, keys: Iterable[str]) -> list[str]:
        """The modules to expand so that these items are drawn as nodes."""
        out: dict[str, None] = {}
        for key in keys:
            if key in self.items:
                out.update(dict.fromkeys(self.ancestors(self.module_of(key).path)))
        return list(out)

    @property
    def has_modules(self) -> bool:
        """Whether any node carries a module scope (else there is no hierarchy)."""
        return bool(self.root.children)

    def search(self, query: str, *, limit: int = MAX_HITS) -> list[Hit]:
        """Items whose name, op, module path, verdict reason or source line contain
        ``query`` (case-insensitive), then modules whose path does; at most ``limit``."""
        needle = query.strip().lower()
        if not needle:
            return []
        hits = []
        for key in self.order:
            item = self.items[key]
            if item.kind != "weight" and needle in item.search:
                where = item.module or "(model)"
                hits.append(Hit(key, item.module, f"{item.name} · {item.op} · {where}"))
                if len(hits) >= limit:
                    return hits
        for path, module in self.modules.items():
            if path and needle in path.lower():
                hits.append(Hit(None, path, f"module {module.title} · {module.count} ops"))
                if len(hits) >= limit:
                    break
        return hits

    def default_expanded(self, target: int) -> list[str]:
        """A readable first level: modules that hold modules, expanded breadth-first while
        the drawing stays within ``target`` boxes; a module that is its parent's only
        child is always expanded; folded blocks stay folded."""
        expanded: list[str] = []
        visible = _own_boxes(self.root, self.folds, set())
        queue = list(self.root.children)
        while queue:
            module = queue.pop(0)
            if module.path in self.folds or not module.children:
                continue
            cost = _own_boxes(module, self.folds, set()) - 1
            only_child = module.parent is not None and len(module.parent.children) == 1
            if only_child or visible + cost <= target:
                expanded.append(module.path)
                visible += cost
                queue.extend(module.children)
        return expanded


def _own_boxes(module: Module, folds: dict[str, Fold], expanded: set[str]) -> int:
    """Nodes drawn for ``module`` expanded, its children collapsed (folds as one)."""
    drawn = sum(1 for i in module.items if i.kind != "weight")
    seen: set[Fold] = set()
    for child in module.children:
        fold = folds.get(child.path)
        if fold is None or child.path in expanded:
            drawn += 1
        elif fold not in seen:
            seen.add(fold)
            drawn += 1
    return drawn


def _folds(module: Module) -> list[Fold]:
    """Runs of at least two children named ``prefix<N>`` with one signature, that hold
    modules themselves (blocks; two linear layers ``fc1``, ``fc2`` stay apart)."""
    out = []
    run: list[tuple[Module, str, str]] = []

    def close() -> None:
        if len(run) >= 2:
            out.append(
                Fold(tuple(m.path for m, _, _ in run), run[0][1], tuple(n for _, _, n in run))
            )
        run.clear()

    for child in module.children:
        match = _INDEXED.match(child.label)
        if match is None or not child.children:
            close()
            continue
        prefix, number = match.group(1), match.group(2)
        if run and (prefix != run[0][1] or child.signature != run[0][0].signature):
            close()
        run.append((child, prefix, number))
    close()
    return out
