"""Never a wrong number: common layers through ortlab, in eval and train mode, forward and
backward, against eager PyTorch (including buffers such as running statistics)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ortlab


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0]


LAYERS = {
    "batchnorm1d": (lambda: nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)), (16, 8)),
    "batchnorm2d": (
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)),
        (2, 3, 8, 8),
    ),
    "layernorm": (lambda: nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)), (4, 8)),
    "groupnorm": (lambda: nn.Sequential(nn.Conv2d(4, 4, 1), nn.GroupNorm(2, 4)), (2, 4, 5, 5)),
    "instancenorm": (lambda: nn.InstanceNorm1d(4, affine=True), (2, 4, 7)),
    "softmax": (lambda: nn.Sequential(nn.Linear(6, 6), nn.LogSoftmax(-1)), (3, 6)),
    "pools": (
        lambda: nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), nn.MaxPool2d(2), nn.AvgPool2d(2)),
        (2, 2, 8, 8),
    ),
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(3, 5, 3), nn.SiLU()), (2, 3, 9)),
    "dropout": (lambda: nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5)), (3, 6)),
    "upsample": (lambda: nn.Upsample(scale_factor=2, mode="nearest"), (1, 2, 3, 3)),
    "mha": (SelfAttention, (2, 5, 8)),
}


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_matches_eager(name, train, grad):
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    reference = make().train(train)
    model = copy.deepcopy(reference)
    compiled = ortlab.compile(model)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    x_ref = x.clone().requires_grad_(grad)
    x = x.requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        for step in range(2):  # twice: running statistics must evolve identically
            torch.manual_seed(step)  # dropout in train mode draws what eager draws
            got = compiled(x)
            torch.manual_seed(step)
            want = reference(x_ref)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
            if grad:
                got.square().sum().backward()
                want.square().sum().backward()
    if grad:
        torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-4, rtol=1e-4)
    for (bname, b_ref), b in zip(reference.named_buffers(), model.buffers()):
        torch.testing.assert_close(b, b_ref, msg=f"buffer {bname}")
    if grad:
        for (pname, p_ref), p in zip(reference.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.grad, p_ref.grad, atol=1e-4, rtol=1e-4, msg=pname)
    backend = compiled.ortlab_backend
    assert all(p.error is None for p in backend.partitions), [
        p.error for p in backend.partitions
    ]
