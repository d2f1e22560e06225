"""Partitioning: which supported nodes are fused together, and which stay in PyTorch."""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

from ortlab import OrtBackend, OrtBackendOptions, zoo


def test_excluded_ops_split_the_partition():
    def f(x):
        return torch.nn.functional.gelu(x.sin()).cos()

    backend = OrtBackend(OrtBackendOptions(excluded_ops=["aten.gelu"]))
    compiled = torch.compile(f, backend=backend, dynamic=True)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), f(x))
    (graph,) = backend.graphs
    assert len(graph.partitions) == 2
    gelu = next(v for v in graph.verdicts if v.target.startswith("aten.gelu"))
    assert not gelu.supported and "excluded" in gelu.reason


def test_custom_op_without_translation_splits_into_two_partitions():
    spec = zoo.get("custom_op")
    model, (x,) = spec.instantiate()
    backend = OrtBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=spec.atol, rtol=spec.rtol)
    (graph,) = backend.graphs
    assert len(graph.partitions) == 2
    verdict = next(v for v in graph.verdicts if "soft_clip" in v.target)
    assert not verdict.supported
    assert "no ONNX translation" in verdict.reason
    assert verdict.node in graph.eager_node_names
    assert all(p.run_count == 1 and p.error is None for p in graph.partitions)


def test_partitions_are_numbered_in_the_order_they_run():
    def f(x):
        y = torch.relu(x) + 1
        y = torch.linalg.matrix_exp(y)  # no translation: it splits the graph
        return torch.sigmoid(y) * 2

    backend = OrtBackend()
    compiled = torch.compile(f, backend=backend)
    x = torch.randn(3, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), f(x))
    (graph,) = backend.graphs
    assert [(p.name, p.node_names) for p in graph.partitions] == [
        ("fused_0", ("relu", "add")),
        ("fused_1", ("sigmoid", "mul")),
    ]


def test_min_partition_size_keeps_tiny_partitions_in_pytorch():
    spec = zoo.get("custom_op")
    spec.build()  # registers the custom op
    (x,) = spec.example_inputs()

    def f(x):
        h = torch.ops.ortlab_zoo.soft_clip(x.sin(), 2.0)  # a 1-node partition before it
        return (h.cos() + 1).exp() * 2  # a 4-node partition after it

    for size, partitions in ((1, 2), (2, 1), (5, 0)):
        backend = OrtBackend(OrtBackendOptions(min_partition_size=size))
        compiled = torch.compile(f, backend=backend, dynamic=True)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), f(x))
        (graph,) = backend.graphs
        assert len(graph.partitions) == partitions, size
        small = [v for v in graph.verdicts if "min_partition_size" in v.reason]
        assert len(small) == {1: 0, 2: 1, 5: 5}[size]
        assert all(not v.supported and f"min_partition_size={size}" in v.reason for v in small)
        torch._dynamo.reset()


def _soft_clip_translation():
    @onnxscript.script()
    def soft_clip(x: FLOAT, limit: float) -> FLOAT:
        lim = op.CastLike(limit, x)
        return op.Mul(lim, op.Tanh(op.Div(x, lim)))

    return soft_clip


def test_custom_translations_run_a_custom_op_in_ort():
    spec = zoo.get("custom_op")
    model = spec.build()
    translations = {torch.ops.ortlab_zoo.soft_clip.default: _soft_clip_translation()}
    backend = OrtBackend(OrtBackendOptions(custom_translations=translations))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in spec.batch_sizes:
            (x,) = spec.example_inputs(batch)
            torch.testing.assert_close(compiled(x), model(x), atol=spec.atol, rtol=spec.rtol)
    # Two graphs (batch 1 is specialised), one partition each: the op no longer splits.
    assert [len(g.partitions) for g in backend.graphs] == [1, 1]
    assert all(g.eager_node_names == () for g in backend.graphs)
    soft_clip = next(v for v in backend.graphs[0].verdicts if "soft_clip" in v.target)
    assert soft_clip.supported
    assert backend.summary()["failed_partitions"] == 0
