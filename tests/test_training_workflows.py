"""Training set-ups that users add around a model, each trained with the model's own loss:
activation checkpointing (transformers' ``activation_checkpointing_enable``, both of
torch's checkpoint implementations) and a frozen base with a few trainable layers (how
adapters and partial fine-tuning train). Gradients and a few optimizer steps are eager's,
and every node ran in ONNX Runtime."""

from __future__ import annotations

import copy

import pytest
import torch
from models import encoder_masks
from training_helpers import assert_all_in_onnx_runtime, assert_gradients_match, causal_lm

import ortlab


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # a left-padded row
    return ids, mask


def _train_like_eager(model: torch.nn.Module, steps: int = 3) -> ortlab.OrtBackend:
    """Trains ``model`` compiled and a copy eagerly with AdamW on the same batch; checks
    the first step's gradients and every step's loss against eager's."""
    reference = copy.deepcopy(model)
    backend = ortlab.OrtBackend()
    compiled = torch.compile(model, backend=backend)
    ids, mask = _batch()
    optimizers = [
        torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
        for m in (model, reference)
    ]
    for step in range(steps):
        loss = compiled(input_ids=ids, attention_mask=mask, labels=ids).loss
        expected = reference(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        expected.backward()
        torch.testing.assert_close(loss, expected, msg=f"step {step}")
        if step == 0:
            assert_gradients_match(model, reference)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    return backend


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_activation_checkpointing_trains_like_eager_in_onnx_runtime(reentrant):
    model = causal_lm("Llama").train()
    model.activation_checkpointing_enable({"use_reentrant": reentrant})
    backend = _train_like_eager(model)
    assert {g.kind for g in backend.graphs} == {"forward", "backward"}
    assert_all_in_onnx_runtime(backend)


def test_frozen_base_with_trainable_layers_trains_like_eager_in_onnx_runtime():
    model = causal_lm("Llama").train()
    trainable = ("self_attn.q_proj", "self_attn.v_proj", "lm_head")
    for name, p in model.named_parameters():
        p.requires_grad_(any(part in name for part in trainable))
    backend = _train_like_eager(model)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(model.get_parameter(n).grad is None for n in frozen)
    assert_all_in_onnx_runtime(backend)


_OPTIMIZERS = {
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False),
    "adamw-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, foreach=False),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=False),
}


@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_a_compiled_optimizer_step_updates_like_eager(name):
    """``torch.compile(optimizer.step)``: Dynamo puts the parameters and their state on
    the graph as attributes (make_fx cannot lower them; AOTAutograd does). Rows of the
    embedding absent from the batch have zero gradients: RMSprop's and Adagrad's
    ``sqrt(v) + eps`` is then eps alone, which the ONNX optimizer used to remove (NaN).
    Dynamo spells ``addcmul_`` with a value as ``prims.fma``, which is decomposed."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    reference = copy.deepcopy(model)
    optimizer, eager = (_OPTIMIZERS[name](m.parameters()) for m in (model, reference))
    backend = ortlab.OrtBackend(ortlab.OrtBackendOptions(strict=True))
    step = torch.compile(optimizer.step, backend=backend)
    ids = torch.tensor([[1, 2, 3]])
    for _ in range(2):
        for m, update in ((model, step), (reference, eager.step)):
            m.zero_grad()
            m(ids).square().sum().backward()
            update()
    for (key, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(got, want, msg=key)
    for p, r in zip(model.parameters(), reference.parameters()):
        for (key, got), want in zip(optimizer.state[p].items(), eager.state[r].values()):
            torch.testing.assert_close(got, want, msg=key)
    assert backend.graphs and all(g.lowering == "aot_autograd" for g in backend.graphs)
    assert_all_in_onnx_runtime(backend)  # Dynamo's prims.fma (addcmul_) included


def test_foreach_updates_run_in_onnx_runtime_as_their_per_tensor_ops():
    """An EMA of the weights (``torch._foreach_lerp_``) and ``clip_grad_norm_`` (its
    ``_foreach_norm`` and ``_foreach_mul_``), compiled: no ``_foreach_*`` op has a
    translation, and each ran in PyTorch between partitions."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    ema = copy.deepcopy(model).requires_grad_(False)
    reference, reference_ema = copy.deepcopy(model), copy.deepcopy(ema)
    x = torch.randn(5, 4)
    for m in (model, reference):
        m(x).square().sum().backward()

    def update(model, ema):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.1)
        return norm

    backend = ortlab.OrtBackend(ortlab.OrtBackendOptions(strict=True))
    norm = torch.compile(update, backend=backend)(model, ema)
    torch.testing.assert_close(norm, update(reference, reference_ema))
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)
    for got, want in zip(ema.parameters(), reference_ema.parameters(), strict=True):
        torch.testing.assert_close(got, want)
    assert_all_in_onnx_runtime(backend)


def test_a_foreach_op_kept_whole_leaves_the_rest_of_the_graph_in_onnx_runtime():
    """``_foreach_maximum`` with a number has no per-tensor op taking a number: it keeps
    its op, and the graph around it is still lowered and run in ONNX Runtime."""

    def f(xs):
        return [y.sin() + 1 for y in torch._foreach_maximum([x * 2 for x in xs], 0.1)]

    xs = [torch.randn(3), torch.randn(2, 2)]
    backend = ortlab.OrtBackend()
    for got, want in zip(torch.compile(f, backend=backend)(xs), f(xs), strict=True):
        torch.testing.assert_close(got, want)
    (graph,) = backend.graphs
    assert graph.fallback is None and len(graph.partitions) == 2
    assert {graph.verdict(n).rule for n in graph.eager_node_names} >= {"no-translation"}


def test_a_query_row_whose_finite_mask_hides_every_key_trains_as_pytorchs_math_kernel():
    """Falcon with ALiBi masks a left-padded query row with ``finfo.min`` (finite) on
    every key. ortlab traces attention as PyTorch's math kernel, whose gradient is the
    softmax's. PyTorch's CPU flash kernel, which eager takes by default, rebuilds the
    row's probabilities in its backward from a log-sum-exp that rounded to the mask
    value, so they come back as 1 instead of 1/keys: its gradient for such a row is
    ``keys`` times larger. ortlab gives the math kernel's (and eager attention's)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, w = (
        torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(i)) for i in range(4)
    )
    mask = torch.zeros(1, 2, 3, 3)
    mask[..., 0, :] = torch.finfo(torch.float32).min  # query 0 sees no key

    def f(q, k, v):
        return (
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask) * w
        ).sum()

    def gradients(fn):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*inputs).backward()
        return [t.grad for t in inputs]

    backend = ortlab.OrtBackend()
    got = gradients(torch.compile(f, backend=backend))
    with sdpa_kernel(SDPBackend.MATH):
        math = gradients(f)
    for name, g, m in zip("qkv", got, math):
        torch.testing.assert_close(g, m, msg=name)
    assert_all_in_onnx_runtime(backend)
    # The default CPU kernel's gradient for the masked row: keys (3) times the softmax's.
    flash = gradients(f)
    torch.testing.assert_close(flash[0][..., 0, :], 3 * math[0][..., 0, :])
    torch.testing.assert_close(flash[0][..., 1:, :], math[0][..., 1:, :])


@pytest.mark.parametrize("mask", ["none", "padding", "causal"])
def test_a_transformer_encoder_layer_trains_whole_in_onnx_runtime(mask):
    """nn.MultiheadAttention (need_weights=False, as nn.TransformerEncoderLayer calls it)
    calls attention inside F.multi_head_attention_forward, where ortlab's switch to the
    math kernel did not reach: the fused kernel and its backward stayed in PyTorch and
    cut every layer's graphs in three."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=32, dropout=0.0, batch_first=True
    )
    reference = copy.deepcopy(layer)
    x = torch.randn(3, 6, 16)
    kwargs = encoder_masks(mask, "src_mask")
    backend = ortlab.OrtBackend()
    torch.compile(layer, backend=backend)(x, **kwargs).square().mean().backward()
    reference(x, **kwargs).square().mean().backward()
    for (name, p), q in zip(layer.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert_all_in_onnx_runtime(backend)
    assert [len(g.partitions) for g in backend.graphs] == [1, 1]
