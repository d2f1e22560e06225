"""CUDA execution provider and device-side zero-copy (needs a GPU and onnxruntime-gpu)."""

from __future__ import annotations

import pytest
import torch

import ortlab
from ortlab import OrtBackend

onnxruntime = pytest.importorskip("onnxruntime")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available()
        or "CUDAExecutionProvider" not in onnxruntime.get_available_providers(),
        reason="needs a CUDA GPU and onnxruntime-gpu (pip install 'ortlab[gpu]')",
    ),
]


def test_cuda_inputs_select_the_cuda_provider_and_stay_on_device():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU()).cuda()
    backend = OrtBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        out = compiled(x)
        torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    assert out.device.type == "cuda"
    (session,) = backend.sessions
    assert session.providers[0] == "CUDAExecutionProvider"


def test_cuda_training_gradients_match():
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
    )
    model = model.cuda()
    reference = [p.detach().clone() for p in model.parameters()]
    compiled = ortlab.compile(model)
    x = torch.randn(5, 16, device="cuda")
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)
    assert len(reference) == len(grads)


def test_mixed_device_inputs():
    def f(data, ref_cpu):
        ref_cpu += 1
        return torch.reshape(data, ref_cpu.shape)

    compiled = torch.compile(f, backend="ortlab", dynamic=True)
    data, ref = torch.randn(4, 8, device="cuda"), torch.randn(8, 4)
    out = compiled(data, ref.clone())
    torch.testing.assert_close(out, data.view(8, 4))
