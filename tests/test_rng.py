"""Random draws: PyTorch's numbers, bit for bit, and graphs that do not break at them.

Random ops run in PyTorch (ONNX Runtime's generator is not PyTorch's). Each one used to
cut its graph; ``_rng`` makes the draws at the start of the graph, from the layouts they
read, so the rest stays in one partition. Every case is run under one seed in eager and
compiled: the values must be eager's exactly, and the only nodes left in PyTorch are the
draws.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ortlab
from ortlab.backend import _rng

SEED = 123


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where the other has NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def _run(fn, inputs, grad: bool):
    """Output, input gradients and the generator's state after (what a later draw
    of the user's reads)."""
    copies = [x.detach().clone().requires_grad_(grad) for x in inputs]
    torch.manual_seed(SEED)
    out = fn(*copies)
    if grad:
        out.float().sum().backward()
        return out.detach(), [x.grad for x in copies], torch.get_rng_state()
    return out, [], torch.get_rng_state()


def _compiled_matches_eager(
    fn, *inputs, grad=True, dynamic=None, same_state=True
) -> ortlab.OrtBackend:
    backend = ortlab.OrtBackend()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    expected, expected_grads, expected_state = _run(fn, inputs, grad)
    for _ in range(2):  # the first call compiles; both must draw what eager draws
        out, grads, state = _run(compiled, inputs, grad)
        assert _bits_equal(out, expected)
        for g, e in zip(grads, expected_grads, strict=True):
            assert _bits_equal(g, e)
        assert torch.equal(state, expected_state) or not same_state
    return backend


def _left_in_pytorch(backend: ortlab.OrtBackend) -> list[tuple[str, str, str]]:
    return [
        (graph.kind, v.target, v.rule)
        for graph in backend.graphs
        for v in graph.verdicts
        if not v.supported and v.rule != "output-selection"
    ]


def _one_partition_per_graph(backend: ortlab.OrtBackend) -> None:
    assert backend.graphs
    for graph in backend.graphs:
        assert not graph.error, graph.error
        assert len(graph.partitions) == 1, (graph.kind, _left_in_pytorch(backend))
        assert graph.partitions[0].run_count >= 1


def _exact(x):  # ops ONNX Runtime computes exactly as PyTorch does (one rounding each)
    return x * 2


def _drop_path(x):  # transformers' drop_path (ConvNeXt, Swin, BEiT)
    keep = 0.8
    noise = keep + torch.rand((x.shape[0], 1, 1), dtype=x.dtype, device=x.device)
    noise.floor_()
    return _exact(x).div(keep) * noise + 1


def _timm_drop_path(x):  # timm's: a Bernoulli draw into a new tensor
    y = _exact(x)
    return y * y.new_empty((y.shape[0], 1, 1)).bernoulli_(0.8) / 0.8 + 1


CASES = {
    "dropout": (lambda x: F.dropout(F.dropout(_exact(x), 0.1) + 1, 0.5) * 3, (16, 64)),
    "dropout p=1": (lambda x: F.dropout(_exact(x), 1.0) + 1, (16, 64)),
    "dropout of a transpose": (lambda x: F.dropout(_exact(x).t(), 0.2) + 1, (16, 64)),
    "dropout2d": (lambda x: F.dropout2d(_exact(x), 0.3) + 1, (2, 8, 6, 6)),
    "alpha_dropout": (lambda x: F.alpha_dropout(_exact(x), 0.3, True) + 1, (16, 64)),
    "drop_path (rand)": (_drop_path, (4, 5, 6)),
    "drop_path (bernoulli_)": (_timm_drop_path, (4, 5, 6)),
    "rand_like of a transpose": (lambda x: _exact(x).t() + torch.rand_like(x.t()), (16, 64)),
    "uniform_": (lambda x: _exact(x) + torch.empty_like(x).uniform_(-1, 1), (16, 64)),
    "normal_": (lambda x: _exact(x) + torch.empty_like(x).normal_(0, 2), (16, 64)),
    "randint": (lambda x: _exact(x) + torch.randint(0, 5, x.shape), (16, 64)),
    "randperm": (lambda x: _exact(x)[torch.randperm(x.shape[0])] + 1, (16, 64)),
    # The decompositions in torch's table draw other numbers than these ops
    # (exponential_ becomes -log1p(-rand_like) / lambd: gumbel_softmax's noise).
    "exponential_": (lambda x: _exact(x) + torch.empty_like(x).exponential_(1.5), (16, 64)),
    "cauchy_": (lambda x: _exact(x) + torch.empty_like(x).cauchy_(), (16, 64)),
    "geometric_": (lambda x: _exact(x) + torch.empty_like(x).geometric_(0.3), (16, 64)),
    "log_normal_": (lambda x: _exact(x) + torch.empty_like(x).log_normal_(), (16, 64)),
}


@pytest.mark.parametrize("name", CASES)
def test_draws_are_eagers_and_the_graph_stays_whole(name):
    fn, shape = CASES[name]
    torch.manual_seed(0)
    # F.dropout(x, 1.0) draws nothing in eager; torch's lowering makes it a
    # native_dropout, which draws (aot_eager's generator moves on too): values agree.
    backend = _compiled_matches_eager(fn, torch.randn(shape), same_state=name != "dropout p=1")
    _one_partition_per_graph(backend)
    left = _left_in_pytorch(backend)
    assert left and all(rule == "random" for _, _, rule in left), left


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dropout_scales_as_aten_does_in_every_float_dtype(dtype):
    # ATen multiplies by mask * scale with the scale rounded to the dtype: x * 1.1111 in
    # float32 rounded once to float16 differs from it in about a quarter of the values.
    torch.manual_seed(0)
    x = torch.randn(64, 64, dtype=dtype) * 10
    backend = _compiled_matches_eager(lambda x: F.dropout(x * 2, 0.1) + 1, x)
    _one_partition_per_graph(backend)


def test_dropout_of_channels_last_and_non_finite_values_is_eagers():
    torch.manual_seed(0)
    image = torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last)
    image[0, 0, 0, 0], image[1, 1, 1, 1] = float("inf"), float("nan")
    # The mask follows the input's memory order; inf * 0 is NaN, as in eager.
    backend = _compiled_matches_eager(lambda x: F.dropout(x * 2, 0.3) + 1, image, grad=False)
    _one_partition_per_graph(backend)


def test_a_draw_that_reads_the_graph_stays_and_later_draws_keep_their_order():
    def fn(x):
        y = F.dropout(x * 2, 0.1)  # drawn first
        z = torch.bernoulli(torch.sigmoid(y)) * y  # reads y: drawn where it is
        return F.dropout(z + 1, 0.2) * 3  # after it: stays after it

    torch.manual_seed(0)
    backend = _compiled_matches_eager(fn, torch.randn(16, 64))
    forward = backend.graphs[0]
    left = [v.target for v in forward.verdicts if v.rule == "random"]
    assert left == [
        "aten.native_dropout.default",  # the first one, made at the start
        "aten.bernoulli.default",
        "aten.native_dropout.default",
    ]
    reasons = [v.reason for v in forward.verdicts if v.rule == "random"]
    assert "start of the graph" in reasons[0] and "start" not in reasons[2]


def _checkpointed(x):
    def block(t):
        return F.dropout(t * 2, 0.3) * 2

    from torch.utils.checkpoint import checkpoint

    return checkpoint(block, x, use_reentrant=False) + F.dropout(x, 0.2)


def _cond(x):
    y = torch.cond(
        x.sum() > 0, lambda t: F.dropout(t, 0.5), lambda t: t * torch.rand_like(t), (x * 2,)
    )
    return y + torch.rand_like(x)


def test_draws_after_a_nested_graph_that_draws_stay_behind_it():
    # cond draws inside its own graphs: a draw after it moved in front of it drew the
    # other's numbers.
    torch.manual_seed(0)
    _compiled_matches_eager(_cond, torch.randn(4, 6), grad=False)


def _checkpointed_blocks(x):
    from torch.utils.checkpoint import checkpoint

    def block(t):
        return t + F.dropout(torch.relu(F.dropout(t * 2, 0.3)) * 3, 0.2)

    for _ in range(3):
        x = checkpoint(block, x, use_reentrant=False)
    return x


@pytest.mark.parametrize("fn", [_checkpointed, _checkpointed_blocks])
def test_checkpointed_dropout_is_drawn_first_in_the_forward_and_the_recompute(fn):
    # Activation checkpointing wraps each dropout of a block in run_and_save_rng_state
    # (forward) and run_with_rng_state (the backward's recompute): both stayed in
    # PyTorch between partitions (three blocks: 7 forward and 3 backward partitions).
    # The forward's draw keeps its place among the draws, with the state it saves; the
    # recompute draws from that state and leaves the generator as it was.
    torch.manual_seed(0)
    backend = _compiled_matches_eager(fn, torch.randn(4, 6))
    _one_partition_per_graph(backend)
    kinds = {g.kind: g for g in backend.graphs}
    made = {
        kind: sorted(
            {n.target.__name__ for n in g.graph_module.graph.nodes if _rng.is_random(n)}
        )
        for kind, g in kinds.items()
    }
    assert made == {
        "forward": ["dropout_mask", "dropout_mask_saving_state"]
        if fn is _checkpointed
        else ["dropout_mask_saving_state"],
        "backward": ["dropout_mask_from_state"],
    }


def test_the_graph_may_begin_with_the_draws_it_moves():
    # The first node was the first draw: new nodes went before an erased node.
    torch.manual_seed(0)
    backend = _compiled_matches_eager(
        lambda x: F.dropout(x, 0.3) + F.dropout(x, 0.5), torch.randn(4, 6)
    )
    _one_partition_per_graph(backend)


def test_like_draws_keep_their_own_dtype_and_device():
    # rand_like(x, dtype=...) raised TypeError (the stand-in's dtype given twice).
    def fn(x):
        noise = torch.rand_like(x, dtype=torch.float64) + torch.randn_like(x, device="cpu")
        return x * 2 + noise + torch.randint_like(x, 0, 5, dtype=torch.float64)

    torch.manual_seed(0)
    backend = _compiled_matches_eager(fn, torch.randn(4, 6), grad=False)
    _one_partition_per_graph(backend)


def test_dropout_of_an_empty_tensor():
    # Eager's mask of no elements is float32; the fake one bool: the session refused it.
    torch.manual_seed(0)
    _compiled_matches_eager(lambda x: F.dropout(x * 2, 0.3) + 1, torch.randn(0, 6))


def test_dropout_with_symbolic_sizes_is_drawn_first_too():
    torch.manual_seed(0)
    backend = _compiled_matches_eager(
        lambda x: F.dropout(x * 2, 0.1) + 1, torch.randn(16, 64), dynamic=True
    )
    _one_partition_per_graph(backend)


def test_dropout_in_a_no_grad_call_of_a_model_in_train_mode():
    # Monte Carlo dropout: inference graphs (lowered by make_fx) draw first as well.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.1), nn.ReLU(), nn.Dropout(0.2))
    model.train()

    def fn(x):
        with torch.no_grad():
            return model(x)

    backend = _compiled_matches_eager(fn, torch.randn(16, 64), grad=False)
    _one_partition_per_graph(backend)
    assert backend.graphs[0].kind == "inference"


def test_moved_draws_are_named_by_the_op_that_draws():
    node = torch.fx.Graph().call_function(_rng.draw_like, (torch.ops.aten.rand_like.default,))
    assert _rng.drawing_op(node) is torch.ops.aten.rand_like.default
    assert _rng.is_random(node)


def _bert_classifier(**extra):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        **extra,
    )
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config).train()


def _trains_like_eager(model: torch.nn.Module) -> ortlab.OrtBackend:
    """Two steps of ``model`` compiled and of an eager copy, each drawn from the same
    seed: losses, gradients and the generator's state after each step are eager's."""
    eager = copy.deepcopy(model)
    backend = ortlab.OrtBackend()
    compiled = torch.compile(model, backend=backend)
    ids = torch.randint(0, 128, (4, 16))
    labels = torch.tensor([0, 1, 2, 1])
    for step in range(2):
        torch.manual_seed(SEED + step)
        loss = compiled(input_ids=ids, labels=labels).loss
        loss.backward()
        state = torch.get_rng_state()
        torch.manual_seed(SEED + step)
        expected = eager(input_ids=ids, labels=labels).loss
        expected.backward()
        assert torch.equal(state, torch.get_rng_state())
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    _one_partition_per_graph(backend)
    return backend


def test_bert_trains_with_its_default_dropout_in_one_partition_per_graph():
    # A classifier fine-tuned as users do: dropout 0.1 on hidden states and attention
    # probabilities, the model's own loss. The forward graph was in 6 pieces here (one
    # layer: 5 dropouts), 15 with four layers.
    model = _bert_classifier(num_hidden_layers=1, attn_implementation="sdpa")
    backend = _trains_like_eager(model)
    forward = next(g for g in backend.graphs if g.kind == "forward")
    drawn = [v.target for v in forward.verdicts if v.rule == "random"]
    assert drawn == ["aten.native_dropout.default"] * 5


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_bert_trains_with_checkpointing_and_dropout_in_one_partition_per_graph(reentrant):
    # transformers' gradient_checkpointing_enable with the default dropout: 7 forward and
    # 7 backward partitions of a 2-layer BERT, the checkpointed dropouts between them.
    model = _bert_classifier(num_hidden_layers=2)
    model.gradient_checkpointing_enable({"use_reentrant": reentrant})
    _trains_like_eager(model)
