"""The module tree of a graph: folded repeated blocks, partitions and eager nodes at every
level, search, the node budget, the panes that draw it and the static explorer."""

from __future__ import annotations

import html
import json
import re

import pytest
import torch
from test_views_helpers import parse_svg, svg_element
from torch import nn

import ortlab
from ortlab import views
from ortlab.views import _cache, _dot, _explorer, _graphs, _hierarchy, _items, _layout

needs_dot = pytest.mark.skipif(
    not _dot.dot_available(), reason="Graphviz's dot is not installed (make graphviz)"
)


class Block(nn.Module):
    def __init__(self, noisy: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)
        self.noisy = noisy

    def forward(self, x):
        y = self.fc2(self.fc1(x).relu())
        if self.noisy:  # a random op: stays in PyTorch, and makes this block different
            y = y + torch.normal(y, 1.0)  # it reads y, so it is drawn here: cuts the graph
        return x + y


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList([Block(noisy=i == 4) for i in range(12)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


@pytest.fixture(scope="module")
def stack():
    """A twelve-block stack (block 4 has an eager random op), compiled and run once:
    more nodes than a drawing shows one by one."""
    torch.manual_seed(0)
    compiled = ortlab.compile(Stack().eval())
    with torch.no_grad():
        compiled(torch.randn(3, 4))
    return compiled.ortlab_backend


def test_fx_nodes_carry_their_module_path_as_people_write_it(stack):
    graph = stack.graphs[0]
    scopes = {n.name: n.scope for n in _items.flat_nodes(graph) if n.scope}
    assert ("layers", "layers.0") not in scopes.values()  # a ModuleList is not a level
    assert any(s[-1] == "layers.3.fc1" and s[0] == "layers.3" for s in scopes.values())
    assert _items.module_path("L['self'].encoder.layer[7]") == "encoder.layer.7"
    assert _items.module_path("L['self']._modules['a']._modules['b']") == "a.b"
    assert _items.module_path("L['self']") == ""


def test_repeated_blocks_fold_into_one_box_and_a_different_one_splits_the_run(stack):
    tree = _graphs.tree_of(stack.graphs[0])
    assert [m.label for m in tree.root.children] == [
        "embed", *(f"layers.{i}" for i in range(12)), "head",
    ]  # fmt: skip
    folds = {f.label for f in tree.folds.values()}
    # Block 4 holds a random op: its structure differs, the run is cut around it.
    assert folds == {"layers.0–3 ×4", "layers.5–11 ×7"}
    assert "layers.4" not in tree.folds
    four = tree.modules["layers.4"]
    assert four.eager >= 1 and tree.root.eager == four.eager
    assert tree.modules["layers.0"].count == tree.modules["layers.1"].count
    assert tree.modules["layers.0"].weights == 4  # two weights and two biases


@needs_dot
def test_the_first_drawing_shows_the_fold_with_its_count_and_the_eager_block_in_red(stack):
    graph = stack.graphs[0]
    rendered = views.module_view(graph, id_prefix="t-")
    root = parse_svg(rendered.svg)
    text = " ".join(root.itertext())
    assert "layers.0–3 ×4" in text and "layers.5–11 ×7" in text
    assert "in PyTorch" in text  # the eager block's box says so
    fold_id = rendered.ids["layers.2"]  # a folded block: its fold's box stands for it
    assert fold_id == rendered.ids["layers.0"] and rendered.actions[fold_id][0] == "module"
    eager_box = svg_element(root, rendered.ids["layers.4"])
    assert "ortlab-module" in eager_box.get("class")
    shapes = [e for e in eager_box.iter() if e.tag.endswith(("polygon", "path"))]
    assert shapes[0].get("stroke") == "#cb181d"


def test_expanding_a_folded_block_splits_the_fold_around_it(stack):
    tree = _graphs.tree_of(stack.graphs[0])
    model = _layout.layout(tree, expanded=["layers.2"])
    labels = [
        node.label if isinstance(node.label, str) else node.label[0].text
        for node in model.nodes()
        if node.kind in ("fold", "module")
    ]
    assert any(t.startswith("layers.0–1 ×2") for t in labels), labels
    assert any(t.startswith("layers.3 ") for t in labels), labels  # a fold of one: a box
    assert any(t.startswith("layers.5–11 ×7") for t in labels), labels
    cluster = model.ids["layers.2"]
    assert model.actions[cluster] == ("module", "layers.2")
    inside = {k for k, v in model.ids.items() if k in tree.items and v != cluster}
    assert any(tree.items[k].module.startswith("layers.2.") for k in inside)


def test_a_node_moved_to_the_start_does_not_move_its_module():
    # A random draw of block m2 made at the start of the graph (see the backend's _rng;
    # it reads no other node): the blocks keep the order of their first node that
    # reads one, m0 m1 m2 m3. A module used twice (m0 again at the end) stays first.
    def item(m: int, i: int, reads: tuple[str, ...] = ("x",)) -> _items.Item:
        return _items.Item(
            f"n{m}_{i}", f"n{m}_{i}", "aten.relu", "op", (f"m{m}",), ("M",), reads
        )

    items = [item(2, 0, reads=())] + [item(m, i) for m in range(4) for i in range(1, 5)]
    items.append(item(0, 9))
    tree = _hierarchy.Tree(items)
    assert [c.label for c in tree.root.children] == ["m0", "m1", "m2", "m3"]


def test_no_drawing_lays_out_more_than_the_budget_later_expansions_win():
    items = [
        _items.Item(f"n{m}_{i}", f"n{m}_{i}", "aten.relu", "op", (f"m{m}",), ("M",))
        for m in range(8)
        for i in range(40)
    ]
    tree = _hierarchy.Tree(items)
    model = _layout.layout(tree, expanded=[f"m{m}" for m in range(8)], budget=100)
    assert model.drawn <= 100
    assert "m7" in model.ids and model.ids["n7_0"] != model.ids["m7"]  # the newest open
    assert "closed to keep the drawing under 100 nodes" in model.note


def test_search_finds_nodes_by_name_op_module_reason_and_source(stack):
    tree = _graphs.tree_of(stack.graphs[0])
    by_module = tree.search("layers.4.fc2")
    assert by_module and all(h.module.startswith("layers.4") for h in by_module if h.key)
    by_reason = tree.search("random op")
    assert [tree.items[h.key].op for h in by_reason if h.key] == ["aten.normal.Tensor_float"]
    by_source = tree.search("normal(y, 1.0)")
    assert by_source and by_source[0].key == by_reason[0].key
    assert tree.expansion_for([by_reason[0].key]) == ["layers.4"]
    assert tree.search("  ") == []


def test_partitions_begin_and_end_marks_are_on_their_first_and_last_nodes(stack):
    tree = _graphs.tree_of(stack.graphs[0])
    marks = _layout._partition_marks(tree)
    groups = {i.group for i in tree.items.values() if i.group}
    begins = [m for ms in marks.values() for m in ms if m.endswith("begins")]
    assert len(begins) == len(groups) >= 2  # the eager op cuts the graph in two


def test_ids_of_a_node_are_the_same_in_every_drawing(stack):
    tree = _graphs.tree_of(stack.graphs[0])
    key = next(k for k, i in tree.items.items() if i.module == "layers.5.fc1")
    a = _layout.layout(tree, expanded=["layers.5", "layers.5.fc1"], id_prefix="p1-")
    b = _layout.layout(tree, expanded=["layers.5.fc1"], id_prefix="p2-")
    assert a.ids[key].removeprefix("p1-") == b.ids[key].removeprefix("p2-")
    assert a.ids[key].removeprefix("p1-") == "n" + _layout.suffix(key)


@needs_dot
def test_panes_draw_from_the_backend_cache_and_clicks_open_modules(stack):
    _cache.clear(stack)
    viewer = views.PartitionViewer(stack)
    first = viewer.graph_pane.rendered
    cached = len(_cache.of(stack))
    again = views.PartitionViewer(stack)  # a second Inspector lays nothing out again
    assert again.graph_pane.rendered is first and len(_cache.of(stack)) == cached
    assert viewer.graph_pane.hierarchical
    assert "layers.4" in viewer.graph_pane.current_expansion()  # the first level
    box = first.ids["head"]
    assert first.actions[box] == ("module", "head")
    viewer.bridge.value = f"graph|{box}|1"  # what the drawing's onclick writes
    assert "head" in viewer.graph_pane.current_expansion()
    assert viewer.graph_pane.rendered is not first
    cluster = viewer.graph_pane.rendered.ids["head"]  # open: a cluster, its label
    assert cluster != box
    viewer.bridge.value = f"graph|{cluster}|2"
    assert "head" not in viewer.graph_pane.current_expansion()


@needs_dot
def test_a_search_hit_opens_its_modules_and_outlines_the_node(stack):
    viewer = views.PartitionViewer(stack)
    hits = viewer.find("random op")
    assert hits and hits[0][1][0] == "fx"
    key = hits[0][1][1]
    assert viewer.hits.value == hits[0][1]  # one hit: chosen at once
    ids = viewer.graph_pane.element_ids([key])
    assert ids and ids[0] in viewer.style.value
    assert viewer.graph_pane.rendered.actions[ids[0]] == ("item", key)
    assert "random" in viewer.provenance.value


@needs_dot
def test_a_drawing_that_times_out_shows_the_module_table_and_a_button(stack, monkeypatch):
    _cache.clear(stack)
    monkeypatch.setattr(_dot, "INTERACTIVE_TIMEOUT_SECONDS", 1e-4)
    viewer = views.PartitionViewer(stack)
    pane = viewer.graph_pane
    assert pane.rendered.timed_out and pane.button.layout.display != "none"
    assert "layers.0–3 ×4" in html.unescape(viewer.graph_view.value)  # the module table
    pane.button.click()  # draw anyway, with the long timeout
    assert pane.rendered.svg is not None and pane.button.layout.display == "none"
    _cache.clear(stack)


@needs_dot
def test_the_static_explorer_has_a_page_per_module_and_a_search_index(stack):
    tree = _graphs.tree_of(stack.graphs[0])
    text = _explorer.explorer_html(tree, prefix="x-")
    pages = re.findall(r'data-module="([^"]*)"', text)
    assert pages[0] == "" and "layers.0" in pages and "layers.1" not in pages  # folded
    modules = json.loads(html.unescape(re.search(r'data-modules="([^"]*)"', text).group(1)))
    assert [m[0] for m in modules.values()].count("layers.4") == 1
    assert modules[_layout.suffix("layers.7")] == ["layers.7", "", "layers.5"]
    index = json.loads(html.unescape(re.search(r'data-items="([^"]*)"', text).group(1)))
    assert any("random" in entry[1] for entry in index)
    assert text.count("<svg") == len(pages)


@needs_dot
def test_the_static_explorer_stops_drawing_pages_past_its_size_budget(stack, monkeypatch):
    # Each page draws the whole tree: an unfolded model's pages made a 2-layer training
    # Llama's report 11.5 MB. Past the budget the remaining modules get no page (a click
    # opens their nearest drawn ancestor's).
    tree = _graphs.tree_of(stack.graphs[0])
    whole = _explorer.explorer_html(tree, prefix="x-")
    first = whole.split('<div class="ortlab-page"')[1]
    monkeypatch.setattr(_explorer, "MAX_BYTES", len(first) + 30)  # two pages are over
    text = _explorer.explorer_html(tree, prefix="x-")
    pages = re.findall(r'data-module="([^"]*)"', text)
    assert len(re.findall(r'data-module="([^"]*)"', whole)) > 2
    assert pages == ["", re.findall(r'data-module="([^"]*)"', whole)[1]]
