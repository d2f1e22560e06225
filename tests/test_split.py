"""Split, don't drop: a node ONNX Runtime refuses runs in PyTorch, the rest of its
partition in ONNX Runtime; a run error that is the inputs' fault is raised as eager
raises it and leaves the partition in ONNX Runtime."""

from __future__ import annotations

import onnxscript
import pytest
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import ortlab
from ortlab.backend import _split


@onnxscript.script()
def _sin_refused(x: FLOAT) -> FLOAT:
    # A model ONNX Runtime refuses: MatMul of [n] by [n, 1, 1]... shape inference fails.
    bad = op.Reshape(x, op.Constant(value_ints=[-1, 1, 3]))
    return op.MatMul(x, op.Transpose(bad, perm=[0, 2, 1]))


@onnxscript.script()
def _sin_fails_at_run(x: FLOAT) -> FLOAT:
    # A valid model whose run fails on inputs PyTorch runs (the size is not a multiple of 7).
    return op.Reshape(op.Sin(x), op.Constant(value_ints=[-1, 7]))


def _compile(fn, translation):
    return ortlab.compile(fn, custom_translations={torch.ops.aten.sin.default: translation})


def _chain(x):
    return x.cos().mul(2).sin().exp().add(1)


@pytest.mark.parametrize("translation", [_sin_refused, _sin_fails_at_run])
def test_a_refused_node_runs_in_pytorch_and_the_rest_of_its_partition_in_onnx_runtime(
    translation,
):
    x = torch.randn(2, 4)
    compiled = _compile(_chain, translation)
    with torch.no_grad(), pytest.warns(ortlab.FallbackWarning, match="refused 1 of its nodes"):
        torch.testing.assert_close(compiled(x), _chain(x))
    backend = compiled.ortlab_backend
    (graph,) = backend.graphs
    assert graph.eager_node_names == ("sin",)
    sin = graph.verdict("sin")
    assert sin.rule == "refused-by-onnxruntime" and "runs in PyTorch" in sin.reason
    assert [p.name for p in graph.partitions] == ["fused_0_0", "fused_0_1"]
    assert all(p.split_from == "fused_0" for p in graph.partitions)
    (parent,) = graph.split_partitions
    assert parent.error.startswith("split: ONNX Runtime refused 1 node(s) (sin)")
    # The record's graph reads as if sin had been unsupported from the start.
    calls = [n.target for n in graph.partitioned.graph.nodes if n.op != "placeholder"]
    assert "fused_0_0" in calls and "fused_0_1" in calls and "fused_0" not in calls
    assert [e.kind for e in backend.timeline].count("split") == 1
    # Later calls run the parts in ONNX Runtime, with no new warning.
    with torch.no_grad():
        y = torch.randn(2, 4)
        torch.testing.assert_close(compiled(y), _chain(y))
    assert [p.run_count for p in graph.partitions] == [2, 2]


def test_the_search_s_trial_sessions_keep_onnx_runtime_s_error_lines_quiet(monkeypatch):
    # The CUDA provider logs every refused session: a bfloat16 BERT's search printed 11
    # error lines for one refused node, each repeating what the records hold.
    from ortlab.backend import _session

    made = []
    create = _session.create_session

    def recording(model, providers, options, *args, **kwargs):
        made.append(options)
        return create(model, providers, options, *args, **kwargs)

    monkeypatch.setattr(_session, "create_session", recording)
    compiled = _compile(_chain, _sin_refused)
    with torch.no_grad(), pytest.warns(ortlab.FallbackWarning, match="refused 1 of its nodes"):
        compiled(torch.randn(2, 4))
    trials = [o for o in made if o is not None and o.log_severity_level == 4]
    assert len(trials) >= 2  # the search made its trial sessions quiet


def test_the_split_keeps_training_right():
    x = torch.randn(3, 4, requires_grad=True)
    compiled = _compile(_chain, _sin_refused)
    with pytest.warns(ortlab.FallbackWarning, match="refused"):
        compiled(x).sum().backward()
    expected = x.detach().clone().requires_grad_()
    _chain(expected).sum().backward()
    torch.testing.assert_close(x.grad, expected.grad)


def test_bisection_pins_each_refused_node_and_counts_its_trials():
    def fn(x):
        return x.cos().sin().exp().sin().tanh()

    gm = torch.fx.symbolic_trace(fn)
    gm = _aten(fn, torch.randn(4))
    tried = []

    def trial(part, args):
        names = [n.name for n in part.graph.nodes if n.op == "call_function"]
        tried.append(names)
        if any(name.startswith("sin") for name in names):
            raise RuntimeError("refused")

    search = _split.find_refused(gm, [torch.randn(4)], trial)
    assert sorted(search.refused) == ["sin", "sin_1"]
    assert search.trials == len(tried) <= 9


def test_an_interaction_is_not_pinned_on_single_nodes():
    gm = _aten(lambda x: x.cos().sin(), torch.randn(4))

    def trial(part, args):
        if len([n for n in part.graph.nodes if n.op == "call_function"]) > 1:
            raise RuntimeError("only together")

    search = _split.find_refused(gm, [torch.randn(4)], trial)
    assert not search.refused and "only the whole" in search.note


def test_an_unpinnable_refusal_leaves_the_whole_partition_in_pytorch(monkeypatch):
    monkeypatch.setattr(
        _split,
        "find_refused",
        lambda gm, args, trial, **_: _split.Search({}, 3, 0.1, "why not"),
    )
    x = torch.randn(2, 4)
    compiled = _compile(_chain, _sin_refused)
    with torch.no_grad(), pytest.warns(ortlab.FallbackWarning, match="no split: why not"):
        torch.testing.assert_close(compiled(x), _chain(x))
    (partition,) = compiled.ortlab_backend.partitions
    assert partition.state == "eager" and "no split: why not" in partition.error


def test_a_bad_input_raises_as_in_eager_and_the_partition_stays_in_onnx_runtime():
    embedding = torch.nn.Embedding(10, 4)

    def fn(ids):
        return embedding(ids).relu() * 2

    compiled = ortlab.compile(fn)
    good = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        compiled(good)
        with pytest.raises(IndexError):
            fn(torch.tensor([[1, 2, 12]]))  # eager's error...
        with pytest.raises(IndexError):
            compiled(torch.tensor([[1, 2, 12]]))  # ...is ortlab's too
        for _ in range(5):
            torch.testing.assert_close(compiled(good), fn(good))
    (partition,) = compiled.ortlab_backend.partitions
    assert partition.state == "ort" and partition.error is None
    assert partition.run_count == 6


def _aten(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def test_the_node_an_export_error_names_is_tried_first():
    """A translation error names its FX node ("Error when translating node %sin"): that
    node alone, then the nodes before it and those after it: three trials, where
    bisecting takes ~2 log2(n)."""
    error = RuntimeError("outer")
    error.__cause__ = ValueError("Error when translating node %sin : [num_users=1] = ...")
    assert _split.named_node(error) == "sin"
    assert _split.named_node(RuntimeError("no node here")) is None

    x = torch.randn(2, 4)
    gm = torch.fx.experimental.proxy_tensor.make_fx(_chain)(x)

    def trial(part, inputs):
        if any(n.target is torch.ops.aten.sin.default for n in part.graph.nodes):
            raise RuntimeError("refused")

    guided = _split.find_refused(gm, (x,), trial, suspect="sin")
    assert set(guided.refused) == {"sin"} and guided.trials == 3
    bisected = _split.find_refused(gm, (x,), trial)
    assert set(bisected.refused) == {"sin"} and bisected.trials > 2
