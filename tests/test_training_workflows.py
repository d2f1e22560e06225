"""Training set-ups that users add around a model, each trained with the model's own loss:
activation checkpointing (transformers' ``activation_checkpointing_enable``, both of
torch's checkpoint implementations) and a frozen base with a few trainable layers (how
adapters and partial fine-tuning train). Gradients and a few optimizer steps are eager's,
and every node ran in ONNX Runtime."""

from __future__ import annotations

import copy

import pytest
import torch
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
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, foreach=False),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=False),
}


@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_a_compiled_optimizer_step_updates_like_eager(name):
    """``torch.compile(optimizer.step)``: Dynamo puts the parameters and their state on
    the graph as attributes (make_fx cannot lower them; AOTAutograd does). Rows of the
    embedding absent from the batch have zero gradients: RMSprop's and Adagrad's
    ``sqrt(v) + eps`` is then eps alone, which the ONNX optimizer used to remove (NaN)."""
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
