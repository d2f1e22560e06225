"""Overlays on the one graph model: the profile's heat drawn as the model's module tree
(modules as clusters, a collapsed module with its total), and the numerics' error on
typed nodes of the same model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ortlab
from ortlab.views import _gmodel, _heat, _layout


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(4)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.blocks(x)).sin()


@pytest.fixture(scope="module")
def profile():
    torch.manual_seed(0)
    compiled = ortlab.compile(Stack().eval())
    with torch.no_grad():
        return ortlab.profile(compiled, torch.randn(3, 8), runs=1)


def _clusters(items):
    for item in items:
        if isinstance(item, _gmodel.Cluster):
            yield item
            yield from _clusters(item.children)


def _seconds(profile, prefix: str) -> float:
    return sum(
        n.seconds for n in profile.nodes if n.graph_index == 0 and n.module.startswith(prefix)
    )


def test_heat_of_a_small_graph_opens_every_module_as_a_cluster(profile):
    model = _heat.heat_model(profile)
    opened = {c.tooltip.split(" ", 1)[0] for c in _clusters(model.items)}
    assert {"blocks", "blocks.0", "blocks.0.fc", "head"} <= opened
    times = {n.node: n.seconds for n in profile.nodes if n.graph_index == 0}
    addmm = next(n for n in model.nodes() if n.id == model.ids["addmm"])
    assert addmm.fill == _heat.heat_fill(_heat.share(profile, times["addmm"]))
    assert f"{_heat.ms(times['addmm'])} ms" in addmm.label
    assert model.name == "heat" and model.drawn <= _layout.MAX_LAYOUT_NODES


def test_heat_of_a_large_graph_folds_the_blocks_into_one_box_with_their_total(profile):
    model = _heat.heat_model(profile, max_nodes=3)
    assert "drawn by module" in model.note
    fold = next(n for n in model.nodes() if n.kind == "fold")
    assert model.ids["blocks.0"] == model.ids["blocks.3"] == fold.id
    total = _seconds(profile, "blocks.")
    text = " ".join(line.text for line in fold.label)
    assert "0–3 ×4" in text
    assert f"{_heat.ms(total)} ms ({_heat.percent(profile, total)}%)" in text
    assert fold.fill == _heat.heat_fill(_heat.share(profile, total))
    head = next(n for n in model.nodes() if n.id == model.ids["head"])
    assert f"{_heat.ms(_seconds(profile, 'head'))} ms" in " ".join(
        line.text for line in head.label
    )


def test_an_overlay_paints_a_box_by_the_combined_value_of_what_it_holds():
    overlay = _gmodel.Overlay(
        {"a": 1.0, "b": 3.0},
        fill=lambda v: "red" if v > 2 else "green",
        text=lambda v: f"{v:g} units",
        combine=max,
        light_text=frozenset({"red"}),
        missing="white",
    )
    box = _gmodel.Node("m", [_gmodel.Line("module")], kind="module")
    overlay.paint(box, overlay.of(["a", "b", "c"]))
    assert (box.fill, box.fontcolor, box.label[-1].text) == ("red", "white", "3 units")
    blank = _gmodel.Node("n", "c", fill="pink")
    overlay.paint(blank, overlay.of(["c"]))
    assert blank.fill == "white" and blank.label == "c"
    assert 'fontcolor="white"' in _gmodel.to_dot(_gmodel.GraphModel("g", items=[box]))


def test_numerics_overlays_are_graph_models_with_the_error_on_typed_nodes():
    from numerics_helpers import sigmoid_to_relu

    from ortlab import zoo
    from ortlab.views import _style, numerics

    model, inputs = zoo.get("custom_op").instantiate()
    report = ortlab.diff(model, *inputs, pre_ort_model_transforms=[sigmoid_to_relu])
    part = report.failing_partitions[0]
    fx = numerics.fx_overlay_model(report, part, id_prefix="p-")
    assert isinstance(fx, _gmodel.GraphModel)
    first = next(n for n in fx.nodes() if n.id == fx.ids["sigmoid"])
    assert (first.id, first.kind, first.fill) == ("p-sigmoid", "ort", _style.FAIL_FILL)
    assert (first.xlabel, first.line) == ("first divergent", _style.FIRST_LINE)
    assert {n.kind for n in fx.nodes()} >= {"placeholder", "output", "ort"}
    assert numerics.fx_overlay(report, part, id_prefix="p-") == _gmodel.to_dot(fx)
    onnx = numerics.onnx_overlay_model(report, part)
    assert onnx is not None
    marked = [n for n in onnx.nodes() if n.xlabel]
    assert [(n.kind, n.fill) for n in marked] == [("onnx", _style.FAIL_FILL)]
    assert {n.kind for n in onnx.nodes()} == {"onnx-input", "onnx", "onnx-output"}


class _SigmoidBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.sigmoid(self.fc(x)) + x


class _Deep(nn.Module):
    """Sixty blocks (over 200 FX nodes), one of them to be made wrong in ONNX."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[_SigmoidBlock() for _ in range(60)])

    def forward(self, x):
        return self.blocks(x)


def test_numerics_of_a_large_partition_are_drawn_by_module_with_the_worst_error():
    import onnx

    from ortlab.backend import records
    from ortlab.views import _graphs, _style, numerics

    def last_sigmoid_to_relu(model: onnx.ModelProto) -> None:
        # A sigmoid's ONNX spelling ends in its Reciprocal (_passes.exact_sigmoid).
        ends = [n for n in model.graph.node if n.op_type == "Reciprocal"]
        sigmoids = [n for n in ends if (records.fx_node_of(n) or "").startswith("sigmoid")]
        sigmoids[-1].op_type = "Relu"  # blocks.59 only

    torch.manual_seed(0)
    report = ortlab.diff(
        _Deep().eval(), torch.randn(2, 8), pre_ort_model_transforms=[last_sigmoid_to_relu]
    )
    (part,) = report.failing_partitions
    assert numerics._graph_size(report, part) > _graphs.MAX_DRAWN_NODES
    fx, onnx_model = numerics.module_overlay_models(report, part, id_prefix="p-")
    assert fx is not None and onnx_model is not None
    for model in (fx, onnx_model):
        assert model.drawn <= _layout.MAX_LAYOUT_NODES
        assert any(n.kind in ("module", "fold") for n in model.nodes())
        # blocks.59's sigmoid (in its box, or drawn alone where its block differs) fails:
        # one FX node, five ONNX nodes (Constant, Neg, Exp, Add and the planted Relu);
        # its label says by how much.
        failing = [n for n in model.nodes() if n.fill == _style.FAIL_FILL]
        expected = 1 if model is fx else 5
        assert len(failing) == expected, [(n.label, n.fill) for n in model.nodes()]
        label = failing[0].label
        text = label if isinstance(label, str) else " ".join(line.text for line in label)
        assert "× allowed" in text
    html = numerics.partition_html(report, part)
    assert "drawn by module, each box filled by the worst error" in html
