"""Outputs that a reshape ends are returned before it and viewed in PyTorch: ONNX Runtime
copies a graph output that a reshape produces (an LM head's logits, a step of GPT-2's
training: 103 MB a call), where a view is free."""

from __future__ import annotations

import types

import numpy.testing
import pytest
import torch
from runtime_helpers import single_partition, static_runner

from ortlab import OrtBackend, OrtBackendOptions
from ortlab.backend import _build, _runtime, load_test_case
from ortlab.backend.records import SessionRecord


def _compile(fn, **options):
    backend = OrtBackend(OrtBackendOptions(**options))
    return torch.compile(fn, backend=backend, dynamic=False), backend


def _ran_in_ort(backend):
    assert backend.execution_count >= 1
    assert all(p.error is None for p in backend.partitions), [
        p.error for p in backend.partitions
    ]


def _producers(proto):
    return {out: node for node in proto.graph.node for out in node.output}


def _viewed(x, w):
    """Two outputs that end in a reshape (the exporter folds a reshape around a matrix
    product into a batched MatMul, unless the product is used twice)."""
    y = x.reshape(-1, x.shape[-1]) @ w
    return y.view(x.shape[0], x.shape[1], w.shape[1]), (y + 1).unsqueeze(0)


@pytest.mark.parametrize("preallocate", [False, True], ids=["ort-allocates", "preallocated"])
def test_a_reshaped_output_is_returned_before_the_reshape(preallocate):
    f = _viewed
    compiled, backend = _compile(f, preallocate_output=preallocate)
    x, w = torch.randn(2, 3, 4), torch.randn(4, 5)
    got, expected = compiled(x, w), f(x, w)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.is_contiguous()
        torch.testing.assert_close(g, e)
    _ran_in_ort(backend)
    (session,) = backend.sessions
    proto = session.model
    producers = _producers(proto)
    ops = [producers[o.name].op_type for o in proto.graph.output]
    assert "Reshape" not in ops and "Unsqueeze" not in ops, ops
    assert _runtime.output_views(proto) == (((6, 5), (2, 3, 5)), ((6, 5), (1, 6, 5)))
    # The record (and the lab, which shows it) says what PyTorch gets.
    assert session.output_schema == (
        "float32[6,5] viewed as [2,3,5]",
        "float32[6,5] viewed as [1,6,5]",
    )
    # The next call reuses the session and views its new outputs the same way.
    x2 = torch.randn(2, 3, 4)
    for g, e in zip(compiled(x2, w), f(x2, w)):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w: (x.reshape(6, 4), x @ w),  # a graph input's: nothing computed
        lambda x, w: (x @ w, (x @ w).reshape(-1)),  # its input is an output already
        lambda x, w: ((x @ w).reshape(-1), (x @ w).flatten()),  # two views of one value
    ],
    ids=["graph-input", "input-is-an-output", "two-views"],
)
def test_outputs_that_cannot_be_returned_before_their_reshape_stay_right(fn):
    compiled, backend = _compile(fn)
    x, w = torch.randn(2, 3, 4), torch.randn(4, 5)
    got, expected = compiled(x, w), fn(x, w)
    for g, e in zip(
        torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)
    ):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)
    _ran_in_ort(backend)


def test_symbolic_sizes_keep_the_reshape_in_the_graph():
    def f(x, w):
        return (x.reshape(-1, 4) @ w).view(x.shape[0], 3, 5)

    backend = OrtBackend()
    compiled = torch.compile(f, backend=backend, dynamic=True)
    w = torch.randn(4, 5)
    for batch in (2, 5):
        x = torch.randn(batch, 3, 4)
        torch.testing.assert_close(compiled(x, w), f(x, w))
    _ran_in_ort(backend)
    assert all(_runtime.output_views(s.model) == (None,) for s in backend.sessions)
    assert all("viewed" not in text for s in backend.sessions for text in s.output_schema)


def test_the_logits_of_a_training_step_are_viewed_and_the_gradients_match():
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(50, 8)

    def step(tokens, labels):
        hidden = torch.tanh(embedding(tokens).view(-1, 8))
        # Tied weights and a flattened matrix product, as GPT-2's LM head.
        logits = (hidden @ embedding.weight.t()).view(2, 7, 50)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 50), labels.view(-1))
        return logits, loss

    tokens, labels = torch.randint(0, 50, (2, 7)), torch.randint(0, 50, (2, 7))
    compiled, backend = _compile(step)
    logits, loss = compiled(tokens, labels)
    loss.backward()
    got = embedding.weight.grad.clone()
    embedding.weight.grad = None
    expected_logits, expected_loss = step(tokens, labels)
    expected_loss.backward()
    torch.testing.assert_close(logits, expected_logits)
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(got, embedding.weight.grad)
    _ran_in_ort(backend)
    (forward,) = (g for g in backend.graphs if g.kind == "forward")
    (session,) = (s for p in forward.partitions for s in p.sessions)
    assert any(_runtime.output_views(session.model)), "the logits are returned as a view"


def test_the_fixed_buffer_runner_views_its_outputs():
    x, w = torch.randn(2, 3, 4), torch.randn(4, 5)
    proto, inputs, outputs = single_partition(_viewed, (x, w))
    assert any(_runtime.output_views(proto))
    runner = static_runner(proto, inputs, outputs, (x, w))
    assert [b.shape for b in runner._out_buffers] == [(6, 5), (6, 5)]
    for got, want in zip(runner.run((x, w)), _viewed(x, w)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_a_saved_session_with_a_viewed_output_reruns_as_saved(tmp_path):
    import onnxruntime

    compiled, backend = _compile(_viewed, keep_last_run=True)
    x, w = torch.randn(2, 3, 4), torch.randn(4, 5)
    with torch.no_grad():
        compiled(x, w)
    (session,) = backend.sessions
    proto, inputs, expected = load_test_case(session.save(tmp_path / "case"))
    ort_session = onnxruntime.InferenceSession(proto.SerializeToString())
    names = [i.name for i in ort_session.get_inputs()]
    for got, want in zip(ort_session.run(None, dict(zip(names, inputs))), expected):
        assert got.shape == want.shape == (6, 5)
        numpy.testing.assert_allclose(got, want, rtol=1.3e-6, atol=1e-5)


def test_an_output_reshaped_to_its_own_shape_is_not_shown_as_viewed():
    """GPT-2's training step returns a LayerNorm output before a reshape that keeps its
    shape ([2,16,32] to [2,16,32]): it is still returned before the reshape (ONNX
    Runtime would copy it), but the record shows the plain schema."""
    from onnx import TensorProto, helper

    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], [n]) for n in "ab"],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        outputs,
    )
    model = helper.make_model(graph)
    entry = model.metadata_props.add()
    entry.key = _runtime.VIEW_KEY
    entry.value = '{"a": [[2, 3], [2, 3]], "b": [[2, 3], [6]]}'

    class _Session:
        def get_providers(self):
            return ["CPUExecutionProvider"]

    partition = types.SimpleNamespace(name="p", sessions=[], dropped_sessions=0)
    record = SessionRecord(**_build._model_fields(partition, model, _Session()))
    assert record.output_schema == ("float32[2,3]", "float32[2,3] viewed as [6]")


@pytest.mark.filterwarnings("ignore::ortlab.FallbackWarning")  # data-dependent graphs
def test_an_output_returned_before_its_reshape_can_be_written_in_place_later():
    # In a training graph the runner runs inside AOTAutograd's autograd Function, and a
    # view made there may not be written in place later ("a view ... created inside a
    # custom Function"): Longformer's training step raised at ``attn_output[...] = ...``
    # after a graph break. The runner's outputs alias ORT's buffer without being views.
    transformers = pytest.importorskip("transformers")
    config = transformers.LongformerConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, attention_window=4,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LongformerForSequenceClassification(config).train()
    ids = torch.randint(3, 128, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, -4:] = 0
    inputs = dict(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1]))
    expected = model(**inputs).loss
    compiled = torch.compile(model, backend=OrtBackend(), dynamic=False)
    loss = compiled(**inputs).loss
    loss.backward()
    torch.testing.assert_close(loss, expected)
