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


def test_inputs_written_by_pending_torch_kernels_are_read_after_they_finish():
    # ORT runs on its own stream: without a sync it could read x before the matmul that
    # writes it has finished on torch's stream.
    model = torch.nn.Linear(512, 512).cuda()
    compiled = torch.compile(model, backend="ortlab", dynamic=False)
    a = torch.randn(4096, 4096, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            x = (a @ a)[:64, :512] * 1e-3
            torch.testing.assert_close(compiled(x), model(x), atol=1e-3, rtol=1e-3)


def test_cuda_graphs_replay_static_partitions_and_return_fresh_outputs():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU()).cuda().eval()
    backend = OrtBackend(ortlab.OrtBackendOptions(cuda_graphs=True))
    compiled = torch.compile(model, backend=backend, dynamic=False)
    xs = [torch.randn(8, 64, device="cuda") for _ in range(4)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        for x, out in zip(xs, outs):  # earlier results were not overwritten by replays
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    (session,) = backend.sessions
    assert session.cuda_graph, session.cuda_graph_note
    assert session.run_count == 4 and out.device.type == "cuda"


def test_cuda_graphs_with_symbolic_shapes_run_without_a_graph_and_say_why():
    model = torch.nn.Linear(16, 4).cuda()
    backend = OrtBackend(ortlab.OrtBackendOptions(cuda_graphs=True))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (3, 5):
            x = torch.randn(n, 16, device="cuda")
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    (session,) = backend.sessions
    assert not session.cuda_graph and "symbolic dims" in session.cuda_graph_note


def test_batch_norm_training_on_cuda_runs_in_ort_and_matches():
    # The batch statistics' prims took the 0-d tensor of a number made on CUDA and
    # refused it: the step raised (a ResNet's training on CUDA).
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 4),
        ).cuda()

    model, twin = make(), make()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    y = torch.randint(0, 4, (4,), device="cuda")
    compiled = ortlab.compile(model)
    torch.nn.functional.cross_entropy(compiled(x), y).backward()
    torch.nn.functional.cross_entropy(twin(x), y).backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(model[1].running_mean, twin[1].running_mean)
    graphs = compiled.ortlab_backend.graphs
    assert all(g.eager_node_names == () for g in graphs), [g.eager_node_names for g in graphs]


def test_a_llama_trains_on_cuda_without_per_index_scatters():
    # ONNX Runtime's CUDA ScatterND runs one thread per index: rotary embeddings' slice
    # gradients (32 indices of 32K values each) took 34 ms of a 4-layer Llama's 62 ms of
    # GPU time. They are Pads now, and the embedding's gradient a ScatterElements.
    from ortlab import zoo

    spec = zoo.get("llama")  # the corpus's Llama, trained on its own loss
    model, twin = spec.objective.build().cuda(), spec.objective.build().cuda()
    batch = {k: v.cuda() for k, v in spec.training_inputs().items()}
    compiled = ortlab.compile(model)
    compiled(**batch).loss.backward()
    twin(**batch).loss.backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
    (backward,) = [g for g in compiled.ortlab_backend.graphs if g.kind == "backward"]
    assert len(backward.partitions) == 1 and not backward.eager_node_names
    ops = [n.op_type for n in backward.partitions[0].sessions[0].model.graph.node]
    assert "ScatterND" not in ops and "ScatterElements" in ops and "Pad" in ops
