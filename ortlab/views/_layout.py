"""The module tree drawn at an expansion state, within a node budget.

# NOTE: :func:`layout` turns a :class:`~ortlab.views._hierarchy.Tree` and the modules a
# person expanded into a :class:`~ortlab.views._gmodel.GraphModel`: an expanded module is
# a cluster holding its own nodes and its children; a collapsed one is a box saying what
# is inside (ops, partitions, how many stay in PyTorch in red, where a partition begins
# and ends); a folded run of blocks is one box with its count. Edges join whatever
# stands for each node (the node, or the box of its outermost collapsed module) and are
# counted; an edge that crosses a partition's boundary is drawn in the eager colour when
# it enters or leaves PyTorch, dashed between two partitions.
#
# Never more than ``budget`` nodes are laid out (Graphviz stays within a second or two):
# expansions are kept newest first, and older ones that the newest does not need are
# undone until the drawing fits (the note says which). Weights are never nodes; a box
# counts the weights its ops read. An overlay (:class:`~ortlab.views._gmodel.Overlay`:
# the profile's heat, the numerics' error) paints every node and box by the value of
# the items it stands for.
"""

from __future__ import annotations

import collections
import hashlib
import re
from collections.abc import Collection, Sequence

from ortlab.views import _gmodel, _style
from ortlab.views._hierarchy import ROOT, Fold, Module, Tree
from ortlab.views._items import Item

MAX_LAYOUT_NODES = 200
"""Nodes laid out at most in one drawing."""

DEFAULT_BOXES = 12
"""Boxes of the first drawing of a tree (its readable level)."""


def suffix(key: str) -> str:
    """A key (node key, module path) as an SVG id suffix: its safe characters and a
    short digest (so ``a.b`` and ``a_b`` differ)."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", key)[-40:]
    return f"{safe}-{hashlib.blake2b(key.encode(), digest_size=3).hexdigest()}"


def _fill_of(groups: collections.Counter[str], eager: int, colors: dict[str, str]) -> str:
    if eager and not groups:
        return _style.EAGER_FILL
    if len(groups) == 1 and not eager:
        return colors.get(next(iter(groups)), _style.IDLE_FILL)
    return _style.IDLE_FILL


def _groups_text(groups: collections.Counter[str]) -> str:
    if len(groups) == 1:
        return next(iter(groups))
    shown = ", ".join(f"{g} ×{c}" for g, c in groups.most_common(3))
    return shown + (f", … {len(groups) - 3} more" if len(groups) > 3 else "")


class _Drawing:
    """One layout in progress (see :func:`layout`)."""

    def __init__(
        self,
        tree: Tree,
        expanded: set[str],
        highlight: Collection[str],
        id_prefix: str,
        colors: dict[str, str],
        budget: int,
        overlay: _gmodel.Overlay | None = None,
    ) -> None:
        self.tree = tree
        self.overlay = overlay
        self.expanded = expanded
        self.highlight = set(highlight)
        self.prefix = id_prefix
        self.colors = colors
        self.budget = budget
        self.model = _gmodel.GraphModel("modules")
        self.rep: dict[str, str] = {}  # item key -> the SVG id standing for it
        self.boxes: dict[str, list[str]] = collections.defaultdict(list)  # id -> items
        self.counter = 0
        self.marks = _partition_marks(tree)

    def new_id(self, kind: str, key: str | None = None) -> str:
        """An SVG id: ``<prefix><kind><suffix>``; the suffix of a node or module is
        :func:`suffix` of its key (the same in every drawing of the tree)."""
        if key is not None:
            return f"{self.prefix}{kind}{suffix(key)}"
        self.counter += 1
        return f"{self.prefix}{kind}{self.counter}"

    # -- nodes -------------------------------------------------------------------------
    def item_node(self, item: Item) -> _gmodel.Node:
        node = self._item_node(item)
        if item.kind == "op":
            self.paint(node, [item.key])
        return node

    def paint(self, node: _gmodel.Node, keys: Sequence[str]) -> None:
        """Paints ``node`` with the overlay's value of the items it stands for."""
        if self.overlay is not None:
            self.overlay.paint(node, self.overlay.of(keys))

    def _item_node(self, item: Item) -> _gmodel.Node:
        node_id = self.new_id("n", item.key)
        self.rep[item.key] = node_id
        self.model.ids[item.key] = node_id
        self.model.actions[node_id] = ("item", item.key)
        if item.kind in ("input", "output"):
            label = f"{item.name}\n{item.value}" if item.value else item.name
            return _gmodel.Node(
                node_id,
                label,
                kind="placeholder" if item.kind == "input" else "output",
                tooltip=item.tooltip or item.name,
                fill=_style.IO_FILL,
                shape="ellipse",
                highlighted=item.key in self.highlight,
            )
        label = f"{item.name}\n{item.op}"
        if item.value:
            label += f"\n{item.value}"
        marks = self.marks.get(item.key, ())
        if marks:
            label += "\n" + "\n".join(marks)
        if item.eager:
            return _gmodel.Node(
                node_id,
                label,
                kind="eager",
                tooltip=item.tooltip,
                fill=_style.EAGER_FILL,
                line=_style.EAGER_LINE,
                penwidth=2,
                highlighted=item.key in self.highlight,
            )
        fill = self.colors.get(item.group or "", _style.IDLE_FILL)
        if item.op.startswith("com.microsoft."):
            fill = _style.FUSED_FILL
        return _gmodel.Node(
            node_id,
            label,
            kind="ort" if item.group is not None else "onnx",
            tooltip=item.tooltip,
            fill=fill,
            highlighted=item.key in self.highlight,
        )

    def box(self, modules: Sequence[Module], fold: Fold | None) -> _gmodel.Node:
        """A collapsed module, or a folded run of them."""
        first = modules[0]
        node_id = self.new_id("f" if fold else "m", first.path)
        for module in modules:
            self._claim(module, node_id)
            self.model.ids[module.path] = node_id
        self.model.actions[node_id] = ("module", first.path)
        ops: collections.Counter[str] = collections.Counter()
        groups: collections.Counter[str] = collections.Counter()
        eager = weights = 0
        for module in modules:
            ops.update(module.ops)
            groups.update(module.groups)
            eager += module.eager
            weights += module.weights
        title = fold.label if fold else first.label or "(model)"
        lines = [_gmodel.Line(title + (f" · {first.cls}" if first.cls else ""), bold=True)]
        lines += [_gmodel.Line(f.label) for f in _child_folds(self.tree, first)[:2]]
        each = f" each ({sum(ops.values())} in all)" if fold else ""
        count = sum(ops.values()) // len(modules) if fold else sum(ops.values())
        text = f"{count} ops{each}"
        if groups:
            text += f" · {_groups_text(groups)}"
        lines.append(_gmodel.Line(text))
        if eager:
            lines.append(
                _gmodel.Line(f"{eager} in PyTorch", color=_style.EAGER_LINE, bold=True)
            )
        lines += [_gmodel.Line(m) for m in _marks_text(self.boxes[node_id], self.marks)]
        tooltip = [
            ", ".join(m.path for m in modules) if fold else first.path or "(model)",
            first.cls,
            ", ".join(f"{op} ×{c}" for op, c in ops.most_common(8)),
        ]
        if weights:
            tooltip.append(f"{weights} weights read")
        if eager:
            tooltip.append(f"{eager} ops run in PyTorch")
        tooltip.append("click to expand")
        highlighted = any(k in self.highlight for k in self.boxes[node_id])
        node = _gmodel.Node(
            node_id,
            lines,
            kind="fold" if fold else "module",
            tooltip="\n".join(t for t in tooltip if t),
            fill=_fill_of(groups, eager, self.colors),
            line=_style.EAGER_LINE if eager else "#555555",
            penwidth=2 if eager else 1.2,
            shape="box3d" if fold else None,
            highlighted=highlighted,
        )
        self.paint(node, self.boxes[node_id])
        return node

    def _claim(self, module: Module, node_id: str) -> None:
        stack = [module]
        while stack:
            m = stack.pop()
            for item in m.items:
                self.rep[item.key] = node_id
                self.boxes[node_id].append(item.key)
                self.model.ids[item.key] = node_id
            stack.extend(m.children)

    # -- modules -----------------------------------------------------------------------
    def module(self, module: Module, depth: int) -> list[_gmodel.Node | _gmodel.Cluster]:
        """What an expanded module holds: its own nodes, then its children."""
        out: list[_gmodel.Node | _gmodel.Cluster] = []
        own = [i for i in module.items if i.kind not in ("weight",)]
        if module.path == ROOT:
            own = [i for i in own if i.kind == "op"]  # inputs and outputs go around
        if len(own) > self.budget // 2:
            out.extend(self.summary_boxes(module, own))
        else:
            out.extend(self.item_node(i) for i in own)
        children = module.children
        i = 0
        while i < len(children):
            child = children[i]
            fold = self.tree.folds.get(child.path)
            if fold is None:
                out.append(self.child(child, depth))
                i += 1
                continue
            run = [c for c in children[i : i + len(fold.members)]]
            i += len(run)
            segment: list[Module] = []
            for member in run:
                if member.path in self.expanded:
                    out.extend(self.segment(segment, fold))
                    segment = []
                    out.append(self.child(member, depth))
                else:
                    segment.append(member)
            out.extend(self.segment(segment, fold))
        return out

    def segment(self, members: list[Module], fold: Fold) -> list[_gmodel.Node]:
        if not members:
            return []
        if len(members) == 1:
            return [self.box(members, None)]
        numbers = tuple(m.label[len(fold.prefix) :] for m in members)
        part = Fold(tuple(m.path for m in members), fold.prefix, numbers)
        return [self.box(members, part)]

    def child(self, module: Module, depth: int) -> _gmodel.Node | _gmodel.Cluster:
        if module.path not in self.expanded:
            return self.box([module], None)
        cluster_id = self.new_id("c", module.path)
        self.model.ids[module.path] = cluster_id
        self.model.actions[cluster_id] = ("module", module.path)
        label = [_gmodel.Line(module.title, bold=True)]
        if module.eager:
            label.append(
                _gmodel.Line(f"{module.eager} in PyTorch", color=_style.EAGER_LINE, bold=True)
            )
        return _gmodel.Cluster(
            cluster_id,
            label,
            self.module(module, depth + 1),
            kind="module-open",
            tooltip=f"{module.path} ({module.cls})\nclick the label to collapse",
            fill=_style.depth_fill(depth),
            line=_style.EAGER_LINE if module.eager else "#999999",
        )

    def summary_boxes(self, module: Module, items: list[Item]) -> list[_gmodel.Node]:
        """A module with too many nodes of its own to draw: one box per partition (and
        one for its nodes in PyTorch)."""
        by_group: dict[tuple[str | None, bool], list[Item]] = collections.defaultdict(list)
        for item in items:
            by_group[(item.group, item.eager)].append(item)
        out = []
        for (group, eager), members in by_group.items():
            node_id = self.new_id("s")
            for item in members:
                self.rep[item.key] = node_id
                self.boxes[node_id].append(item.key)
                self.model.ids[item.key] = node_id
            ops = collections.Counter(i.op for i in members)
            where = "PyTorch" if eager else group or "ops"
            label = f"{len(members)} ops · {where}\n" + "\n".join(
                f"{op} ×{c}" for op, c in ops.most_common(3)
            )
            node = _gmodel.Node(
                node_id,
                label,
                kind="eager" if eager else "group",
                tooltip=", ".join(f"{op} ×{c}" for op, c in ops.most_common()),
                fill=_style.EAGER_FILL if eager else self.colors.get(group or "", "white"),
                line=_style.EAGER_LINE if eager else None,
                shape="box3d",
                highlighted=any(i.key in self.highlight for i in members),
            )
            self.paint(node, [i.key for i in members])
            out.append(node)
        return out

    # -- edges -------------------------------------------------------------------------
    def edges(self) -> None:
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        crossing: dict[tuple[str, str], str] = {}
        items = self.tree.items
        for key in self.tree.order:
            item = items[key]
            dst = self.rep.get(key)
            for src_key in item.inputs:
                src_item = items.get(src_key)
                src = self.rep.get(src_key)
                if src is None or dst is None or src == dst or src_item is None:
                    continue
                counts[(src, dst)] += 1
                if src_item.kind == "op" and item.kind == "op":
                    if src_item.eager != item.eager:
                        crossing[(src, dst)] = "eager"
                    elif src_item.group != item.group:
                        crossing.setdefault((src, dst), "partition")
        for (src, dst), count in counts.items():
            kind = crossing.get((src, dst))
            self.model.edges.append(
                _gmodel.Edge(
                    src,
                    dst,
                    label=f"×{count}" if count > 1 else "",
                    color=_style.EAGER_LINE if kind else None,
                    dashed=kind == "partition",
                    bold=kind == "eager",
                )
            )


def _child_folds(tree: Tree, module: Module) -> list[Fold]:
    seen: dict[Fold, None] = {}
    for child in module.children:
        fold = tree.folds.get(child.path)
        if fold is not None:
            seen[fold] = None
    return list(seen)


def _marks_text(keys: Sequence[str], marks: dict[str, tuple[str, ...]]) -> list[str]:
    """The partition marks of a box's items; counted when there are more than two."""
    found = list(dict.fromkeys(m for k in keys for m in marks.get(k, ())))
    if len(found) <= 2:
        return found
    begins = sum(m.endswith("begins") for m in found)
    return [f"{begins} partitions begin, {len(found) - begins} end here"]


def _partition_marks(tree: Tree) -> dict[str, tuple[str, ...]]:
    """Item key -> ``"▶ fused_0 begins"`` / ``"fused_0 ends ◀"`` on the first and last
    node of each partition (FX views)."""
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    for key in tree.order:
        item = tree.items[key]
        if item.kind == "op" and item.group is not None:
            first.setdefault(item.group, key)
            last[item.group] = key
    if len(first) < 1:
        return {}
    marks: dict[str, list[str]] = collections.defaultdict(list)
    for group, key in first.items():
        marks[key].append(f"▶ {group} begins")
    for group, key in last.items():
        marks[key].append(f"{group} ends ◀")
    return {k: tuple(v) for k, v in marks.items()}


def _drawn(tree: Tree, expanded: set[str], budget: int) -> int:
    """Nodes a layout of ``expanded`` would draw."""
    total = sum(1 for i in tree.root.items if i.kind in ("input", "output"))
    for path in [ROOT, *expanded]:
        module = tree.modules.get(path)
        if module is not None:
            own = sum(1 for i in module.items if i.kind == "op")
            total += min(own, budget // 2) + _boxes(tree, module, expanded)
    return total


def _boxes(tree: Tree, module: Module, expanded: set[str]) -> int:
    count = 0
    previous: Fold | None = None
    for child in module.children:
        fold = tree.folds.get(child.path)
        if child.path in expanded:
            count += 0  # a cluster: its content is counted on its own
            previous = None
        elif fold is None or fold != previous:
            count += 1
            previous = fold
    return count


def fit(tree: Tree, expanded: Sequence[str], budget: int) -> tuple[list[str], list[str]]:
    """The expansions kept (with their ancestors) and the ones undone to stay within
    ``budget`` nodes; later expansions win over earlier ones."""
    order = list(dict.fromkeys(p for p in expanded if p in tree.modules and p != ROOT))
    kept: list[str] = []
    undone: list[str] = []
    for path in reversed(order):
        trial = set(kept) | set(tree.ancestors(path))
        if not kept or _drawn(tree, trial, budget) <= budget:
            kept = list(dict.fromkeys([*kept, *tree.ancestors(path)]))
        else:
            undone.append(path)
    return kept, undone


def layout(
    tree: Tree,
    *,
    expanded: Sequence[str] | None = None,
    highlight: Collection[str] = (),
    id_prefix: str = "",
    colors: dict[str, str] | None = None,
    caption: str = "",
    budget: int = MAX_LAYOUT_NODES,
    overlay: _gmodel.Overlay | None = None,
) -> _gmodel.GraphModel:
    """The module tree drawn with ``expanded`` modules open (see the module NOTE).

    Args:
        tree: The module tree.
        expanded: Module paths to open, oldest first (``None``: the tree's readable
            first level, :data:`DEFAULT_BOXES` boxes).
        highlight: Item keys to outline (a collapsed module holding one is outlined).
        id_prefix: Prefix of the SVG ids (unique per page).
        colors: Partition name -> fill colour.
        caption: The line on top.
        budget: Nodes laid out at most.
        overlay: A measure painted over the nodes and boxes (the profile's heat).
    """
    if expanded is None:
        expanded = tree.default_expanded(DEFAULT_BOXES)
    kept, undone = fit(tree, expanded, budget)
    drawing = _Drawing(tree, set(kept), highlight, id_prefix, colors or {}, budget, overlay)
    model = drawing.model
    model.caption = caption
    model.node_count = sum(1 for i in tree.items.values() if i.kind == "op")
    inputs = [i for i in tree.root.items if i.kind == "input"]
    outputs = [i for i in tree.root.items if i.kind == "output"]
    model.items.extend(drawing.item_node(i) for i in inputs)
    model.items.extend(drawing.module(tree.root, 0))
    model.items.extend(drawing.item_node(i) for i in outputs)
    drawing.edges()
    notes = []
    if undone:
        notes.append(
            f"{len(undone)} earlier expansion{'s' if len(undone) > 1 else ''} closed to keep "
            f"the drawing under {budget} nodes: {', '.join(undone[:4])}"
        )
    model.note = "; ".join(notes)
    return model
