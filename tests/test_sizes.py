"""Symbolic sizes from the graph's inputs: size arithmetic no longer cuts partitions."""

from __future__ import annotations

import torch
from torch.nn import functional as F

import ortlab
from ortlab.backend import _sizes


class _ChannelsLastBlock(torch.nn.Module):
    """ConvNeXt's pattern: a strided conv, then a Linear over channels-last activations
    (the lowering reshapes by the sizes of the conv's output), pooled with ceil_mode."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 2, stride=2)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return F.max_pool2d(F.gelu(h), 2, ceil_mode=True)


_MODEL = _ChannelsLastBlock().eval()


def _block(x):
    return _MODEL(x)


def test_sizes_of_intermediates_do_not_split_the_partition():
    compiled = ortlab.compile(_block, dynamic=True)
    with torch.no_grad():
        for shape in ((2, 3, 14, 18), (3, 3, 10, 12), (4, 3, 16, 16)):
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), _block(x))
    graphs = compiled.ortlab_backend.graphs
    assert len(graphs) == 1 and len(graphs[0].partitions) == 1, graphs[0].verdicts
    graph = graphs[0].graph_module.graph
    reads = graph.find_nodes(op="call_function", target=torch.ops.aten.sym_size.int)
    assert all(n.args[0].op == "placeholder" for n in reads)
    # What stays in Python is size arithmetic on the inputs' sizes, nothing else.
    eager = [graphs[0].verdict(n) for n in graphs[0].eager_node_names]
    assert eager and all("size arithmetic" in v.reason for v in eager)


def test_the_rewrite_is_what_merged_the_partitions(monkeypatch):
    monkeypatch.setattr(_sizes, "reads_intermediate_sizes", lambda gm: False)
    compiled = ortlab.compile(_block, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(2, 3, 14, 18))
    (graph,) = compiled.ortlab_backend.graphs
    assert len(graph.partitions) > 1


def test_static_graphs_are_left_as_they_are():
    gm = torch.fx.symbolic_trace(lambda x: x.sin())
    assert not _sizes.reads_intermediate_sizes(gm)
    assert _sizes.sizes_from_inputs(gm) == 0
