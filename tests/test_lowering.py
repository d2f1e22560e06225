"""Lowering a Dynamo graph to ATen: the thin (make_fx, functionalized) inference path,
AOTAutograd, and what each keeps of the user's program (mutations, aliases, metadata)."""

from __future__ import annotations

import copy

import pytest
import torch
from models import Net
from torch import nn

import ortlab
from ortlab import OrtBackend, OrtBackendOptions


def test_no_grad_graphs_skip_aot_autograd():
    model = Net()
    compiled = ortlab.compile(copy.deepcopy(model))
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.kind == "inference" and graph.lowering == "make_fx"
    # With grad enabled the same model goes through AOTAutograd (forward + backward).
    compiled(x).sum().backward()
    assert [g.lowering for g in compiled.ortlab_backend.graphs][1:] == ["aot_autograd"] * 2


def test_thin_path_keeps_outputs_that_alias_inputs_as_views():
    def f(x):
        return x.view(-1), x.t()[1:], x.sin()

    compiled = ortlab.compile(f)
    x = torch.randn(3, 4)
    with torch.no_grad():
        flat, sliced, s = compiled(x)
    torch.testing.assert_close(s, x.sin())
    x.add_(1)  # the views must see the mutation, as in eager
    torch.testing.assert_close(flat, x.view(-1))
    torch.testing.assert_close(sliced, x.t()[1:])
    graph = compiled.ortlab_backend.graphs[0]
    kept = [v for v in graph.verdicts if "view of a graph input" in v.reason]
    assert kept and all(not v.supported for v in kept)


def test_thin_path_applies_input_mutation():
    def f(x, buf):
        buf.mul_(2)
        return x + buf

    compiled = ortlab.compile(f)
    x, buf = torch.randn(4), torch.ones(4)
    with torch.no_grad():
        out = compiled(x, buf)
    torch.testing.assert_close(buf, torch.full((4,), 2.0))
    torch.testing.assert_close(out, x + 2)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.mul_(2), x[:, :2])[1],
        lambda x: (x.t().add_(1), x.t()[1:])[1],
        lambda x: (x.mul_(2), x.view(-1), x.exp())[1:],
    ],
    ids=["slice", "transposed", "flat-and-computed"],
)
def test_an_output_viewing_a_mutated_input_shares_its_memory_as_in_eager(fn):
    """Functionalized, the output would be a slice of the new value (new memory once ORT
    computes it); eager, aot_eager and inductor return a view of the input."""
    x, expected_x = torch.randn(3, 4), None
    expected_x = x.clone()
    with torch.no_grad():
        expected = fn(expected_x)
        got = ortlab.compile(fn)(x)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    torch.testing.assert_close(x, expected_x)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride()
        shares = g.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert shares == (
            e.untyped_storage().data_ptr() == expected_x.untyped_storage().data_ptr()
        )


def test_function_that_enables_grad_inside_uses_aot_autograd():
    def f(x):
        with torch.enable_grad():
            return (x * 2).sum()

    compiled = ortlab.compile(f)
    with torch.no_grad():
        compiled(torch.randn(3))
    assert all(g.lowering == "aot_autograd" for g in compiled.ortlab_backend.graphs)


def test_arguments_sharing_memory_see_each_others_writes_as_in_eager():
    # make_fx traced two overlapping views as independent tensors: b read a's old values.
    def f(a, b):
        a.add_(1)
        return b * 2

    backend = ortlab.OrtBackend()
    base, expected_base = torch.arange(10.0), torch.arange(10.0)
    expected = f(expected_base[:8], expected_base[2:])
    with torch.no_grad():
        result = torch.compile(f, backend=backend)(base[:8], base[2:])
    torch.testing.assert_close(result, expected)
    torch.testing.assert_close(base, expected_base)
    (graph,) = backend.graphs
    assert graph.lowering == "aot_autograd"


@pytest.mark.parametrize("write", ["add_", "setitem"])
def test_only_a_write_sends_arguments_sharing_memory_through_aot_autograd(write):
    # Two slices of one buffer (rotary cos/sin) read and not written keep make_fx.
    def read(a, b):
        return a * 2 + b

    def written(a, b):
        if write == "add_":
            a.add_(1)
        else:
            a[0] = 5.0
        return b * 2

    base = torch.arange(10.0)
    for fn, lowering in ((read, "make_fx"), (written, "aot_autograd")):
        backend = ortlab.OrtBackend()
        expected_base = base.clone()
        expected = fn(
            expected_base[:5], expected_base[5:] if fn is read else expected_base[2:7]
        )
        with torch.no_grad():
            args = (base[:5], base[5:]) if fn is read else (base[:5], base[2:7])
            result = torch.compile(fn, backend=backend)(*args)
        torch.testing.assert_close(result, expected)
        torch.testing.assert_close(base, expected_base)
        assert [g.lowering for g in backend.graphs] == [lowering]


def test_dead_nodes_are_removed_from_inference_graphs():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    compiled = ortlab.compile(model)
    with torch.no_grad():
        compiled(torch.randn(3, 4))
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.eager_node_names == (), graph.verdicts


def test_without_aot_autograd_inference_runs_in_ort_and_training_stays_correct():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    backend = OrtBackend(OrtBackendOptions(use_aot_autograd=False))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.graphs[0].kind == "inference" and backend.execution_count == 1
    # With grad needed, the partition runs in PyTorch so autograd sees every op.
    out = compiled(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    # Grad mode is part of Dynamo's guards: the grad-enabled call compiled a second graph,
    # whose partition ran eagerly.
    assert backend.partitions[-1].eager_run_count >= 1
    assert backend.partitions[-1].run_count == 0


class _ResidualBlock(nn.Module):
    """In-place ops on intermediates, as torchvision's ResNet writes them."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn(self.conv(x)))
        out += x
        return self.relu(out)


def test_in_place_ops_on_intermediates_do_not_split_the_graph():
    model = nn.Sequential(_ResidualBlock(), _ResidualBlock()).eval()
    compiled = ortlab.compile(copy.deepcopy(model))
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    (graph,) = compiled.ortlab_backend.graphs
    assert graph.lowering == "make_fx"
    assert len(graph.partitions) == 1
    assert graph.eager_node_names == ()
    assert not any("copy_" in v.target for v in graph.verdicts)


def test_only_a_real_input_mutation_is_refused_and_says_so():
    def f(x, buf):
        h = x.relu()
        h.mul_(3)  # an intermediate: functionalized away
        buf.add_(h)  # the caller's tensor: kept, as one copy_ at the end
        return h.sin()

    compiled = ortlab.compile(f)
    x, buf = torch.randn(5), torch.zeros(5)
    expected_buf = buf + x.relu() * 3
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, buf), (x.relu() * 3).sin())
    torch.testing.assert_close(buf, expected_buf)
    (graph,) = compiled.ortlab_backend.graphs
    (copy_,) = [v for v in graph.verdicts if v.target.startswith("aten.copy_")]
    assert not copy_.supported and "mutates an input in place" in copy_.reason
    assert [v.node for v in graph.verdicts if not v.supported] == [copy_.node]
    assert len(graph.partitions) == 1


class _WithConstant(nn.Module):
    """Creates a tensor constant in forward (GPT-2 does: ``torch.tensor([])``)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x) * torch.tensor([1.0, 2.0, 3.0]) + torch.tensor(0.5)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_tensor_constants_created_in_forward_lower_without_fallback(grad):
    model = _WithConstant()
    compiled = ortlab.compile(copy.deepcopy(model))
    x = torch.randn(4, 3)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(compiled(x), model(x))
    graphs = compiled.ortlab_backend.graphs
    assert graphs and all(g.error is None and not g.fallback for g in graphs)
    assert graphs[0].lowering == ("aot_autograd" if grad else "make_fx")
    assert compiled.ortlab_backend.execution_count >= 1


def test_lowered_nodes_keep_the_users_source_line():
    def f(x):
        y = x.cos()
        return torch.ops.aten.bernoulli(y.sigmoid())  # random: stays in PyTorch

    compiled = ortlab.compile(f)
    with torch.no_grad():
        compiled(torch.randn(4))
    (graph,) = compiled.ortlab_backend.graphs
    line = f.__code__.co_firstlineno + 2
    bernoulli = next(v for v in graph.verdicts if "bernoulli" in v.target)
    assert bernoulli.source.startswith(f"tests/test_lowering.py:{line} in f: ")
    assert "bernoulli" in bernoulli.source
    cos = next(v for v in graph.verdicts if v.target.startswith("aten.cos"))
    assert cos.source.startswith(f"tests/test_lowering.py:{line - 1} in f: y = x.cos()")


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 4).unbind(2)
        out = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            is_causal=mask is None,
        )
        return out.transpose(1, 2).flatten(2)


@pytest.mark.parametrize("masked", [False, True], ids=["causal", "boolean mask"])
def test_training_attention_lowers_to_math_and_stays_in_one_partition(masked):
    model = _Attention()
    reference = copy.deepcopy(model)
    compiled = ortlab.compile(model)
    x = torch.randn(2, 5, 8)
    # A padding mask as transformers builds it: True where attention is allowed.
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril() if masked else None
    if masked:
        mask[1, :, :, 3:] = False
    compiled(x, mask).pow(2).sum().backward()
    reference(x, mask).pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    backend = compiled.ortlab_backend
    assert [g.kind for g in backend.graphs] == ["forward", "backward"]
    for graph in backend.graphs:
        assert len(graph.partitions) == 1, graph.verdicts
        assert not any("attention" in v.target for v in graph.verdicts)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_batch_norm_in_training_mode_runs_in_ort(grad):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))
    model.train()
    reference = copy.deepcopy(model)
    compiled = ortlab.compile(model, dynamic=False)
    x = torch.randn(4, 3, 8, 8)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(compiled(x), reference(x), atol=1e-5, rtol=1e-5)
    # The running statistics were updated as eager updates them.
    for name, buffer in reference.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name], buffer)
    first = compiled.ortlab_backend.graphs[0]
    assert not any("batch_norm" in v.target for v in first.verdicts)
    assert len(first.partitions) == 1
    eager = [first.verdict(n) for n in first.eager_node_names]
    if grad:  # AOTAutograd writes the running statistics back itself
        assert eager == []
    else:  # running_mean, running_var, num_batches_tracked: one write-back each
        assert [v.target for v in eager] == ["aten.copy_.default"] * 3


def test_floats_an_op_needs_as_constants_are_specialised():
    # dynamic=True makes Python floats graph inputs; ReLU6's bounds (hardtanh's min/max)
    # must be constants in ONNX: Dynamo's tensorify pass specialises them.
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU6(), nn.LayerNorm(6, eps=1e-3))
    compiled = ortlab.compile(copy.deepcopy(model), dynamic=True)
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(compiled(x), model(x))
    backend = compiled.ortlab_backend
    assert backend.summary()["failed_partitions"] == 0, [p.error for p in backend.partitions]
    assert all(g.eager_node_names == () for g in backend.graphs)
    targets = [v.target for g in backend.graphs for v in g.verdicts]
    assert not any("_local_scalar_dense" in t for t in targets)


def _attention_ops(gm):
    return {str(n.target) for n in gm.graph.nodes if "attention" in str(n.target)}


def test_attention_is_lowered_as_math_off_cpu_and_as_one_op_on_cpu():
    """CUDA's fused attention kernels have translations that fail or none: an inference
    graph off the CPU lowers attention as its math (all translatable; BERT-base on an
    H200 went from 13 partitions to 1), where on CPU it stays one op that ONNX Runtime's
    attention fusions recognise."""
    from ortlab.backend import _backend, _torch_private

    def f(q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    gm = torch.fx.symbolic_trace(f)
    inputs = [torch.randn(1, 2, 8, 16) for _ in range(3)] + [torch.zeros(1, 1, 8, 8)]
    decompositions = _torch_private.lowering_decompositions()
    off_cpu = [t.to("meta") for t in inputs]
    for device_inputs, expected in [
        (inputs, {"aten._scaled_dot_product_flash_attention_for_cpu.default"}),
        (off_cpu, set()),
    ]:
        with _backend.attention_lowering(device_inputs):
            aten = _torch_private.lower_to_aten(gm, inputs, decompositions)
        assert _attention_ops(aten) == expected


def test_the_thin_path_chooses_the_attention_lowering_by_the_inputs(monkeypatch):
    from ortlab.backend import _backend

    seen = []
    real = _backend.attention_lowering

    def spy(example_inputs):
        seen.append([t.device.type for t in example_inputs if isinstance(t, torch.Tensor)])
        return real(example_inputs)

    monkeypatch.setattr(_backend, "attention_lowering", spy)
    compiled = ortlab.compile(
        lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q) + 1
    )
    q = torch.randn(1, 2, 8, 16)
    with torch.no_grad():
        torch.testing.assert_close(
            compiled(q), torch.nn.functional.scaled_dot_product_attention(q, q, q) + 1
        )
    assert seen == [["cpu"]]


def test_a_pad_of_symbolic_size_lowers_without_aot_autograd():
    """``F.pad(x, (0, (-n) % 4))`` with every size symbolic reached a C++ kernel that
    takes concrete sizes ("SymIntArrayRef expected to contain only concrete integers"):
    make_fx failed, with a warning, and AOTAutograd lowered the graph."""

    def fn(x):
        return torch.nn.functional.pad(x * 2, (0, (-x.shape[-1]) % 4)) + 1

    compiled = ortlab.compile(fn, dynamic=True)
    with torch.no_grad():
        for shape in [(2, 5), (3, 7), (3, 6)]:
            x = torch.arange(float(shape[0] * shape[1])).reshape(shape)
            torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
    assert {g.lowering for g in compiled.ortlab_backend.graphs} == {"make_fx"}
