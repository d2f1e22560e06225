"""bfloat16 and float16 arithmetic on CPU runs in ONNX Runtime in float32, between casts,
where its CPU provider has no kernel for the narrow type: PyTorch's bits for elementwise
ops, and a bfloat16 autocast training step in one partition per graph (it was cut into
dozens, with the matrix products and activations in PyTorch)."""

from __future__ import annotations

import copy

import pytest
import torch
from training_helpers import causal_lm

import ortlab
from ortlab.backend import _precision


def _ops(backend: ortlab.OrtBackend) -> list[str]:
    (session,) = backend.sessions
    return [n.op_type for n in session.model.graph.node]


def _all_in_onnx_runtime(backend: ortlab.OrtBackend) -> None:
    for graph in backend.graphs:
        assert not graph.eager_node_names, [graph.verdict(n) for n in graph.eager_node_names]
        assert len(graph.partitions) == 1


def test_bfloat16_elementwise_arithmetic_gives_eagers_bits_in_onnx_runtime():
    def f(x, y):
        return torch.nn.functional.gelu(x * y + x).sin() / (y.abs() + 1)

    torch.manual_seed(0)
    x, y = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16)
    backend = ortlab.OrtBackend()
    got = torch.compile(f, backend=backend)(x, y)
    # Each op computed in float32 and rounded once, as PyTorch's CPU kernels do.
    assert got.dtype == torch.bfloat16 and torch.equal(got, f(x, y))
    _all_in_onnx_runtime(backend)
    assert "Cast" in _ops(backend)


def test_a_bfloat16_mlp_runs_in_onnx_runtime_with_eagers_result():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)
    ).to(torch.bfloat16)
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    backend = ortlab.OrtBackend()
    with torch.no_grad():
        got = torch.compile(mlp.eval(), backend=backend)(x)
        expected = mlp(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)  # a float32 product, rounded once
    _all_in_onnx_runtime(backend)
    ops = _ops(backend)
    assert "Gemm" in ops or "MatMul" in ops


@pytest.mark.parametrize("factory", ["zeros_like", "ones_like", "full_like"])
def test_a_bfloat16_tensor_made_like_a_mask_trains_in_onnx_runtime(factory):
    """transformers builds attention masks as ``zeros_like(mask, dtype=bfloat16)``: in a
    training graph it became a bfloat16 Expand, which ONNX Runtime's CPU provider lacks
    (a FallbackWarning and a cut partition in BERT or GPT-2 under autocast)."""
    make = {
        "zeros_like": lambda m: torch.zeros_like(m, dtype=torch.bfloat16),
        "ones_like": lambda m: torch.ones_like(m, dtype=torch.bfloat16),
        "full_like": lambda m: torch.full_like(m, 0.3, dtype=torch.bfloat16),
    }[factory]

    def f(x):
        return (make(x > 0) * x).sum()

    x = torch.randn(2, 8, dtype=torch.bfloat16)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    backend = ortlab.OrtBackend()
    got = torch.compile(f, backend=backend)(x1)
    expected = f(x2)
    got.backward()
    expected.backward()
    assert torch.equal(got, expected) and torch.equal(x1.grad, x2.grad)
    (forward,) = [g for g in backend.graphs if g.kind == "forward"]
    assert not forward.eager_node_names and len(forward.partitions) == 1


@pytest.mark.parametrize(
    "f",
    [
        lambda x: (x + 1) * 3,
        lambda x: ((x.float() * 1e-3).half() + 1).float(),
        lambda x: torch.cumprod(1 + x * 1e-3, -1),
        lambda x: ((x + 1).t().reshape(-1)[::3] * 3).exp(),
    ],
    ids=["chain", "rounded-then-widened", "cumprod", "through-moves"],
)
def test_a_float16_chain_rounds_after_every_op_as_eager(f):
    """ONNX Runtime runs float16 Add and Mul in float32 between casts it inserts, and
    drops the casts between two such ops: the chain rounded once, at its end (21% of
    ``(x + 1) * 3`` differed; ``cumprod`` by 8 ulps). Each op is written in float32
    between casts of ortlab's own, which ONNX Runtime keeps."""
    torch.manual_seed(0)
    x = torch.rand(2, 2000, dtype=torch.float16)
    backend = ortlab.OrtBackend()
    with torch.no_grad():
        got = torch.compile(f, backend=backend)(x)
    assert torch.equal(got, f(x))


def test_float16_moves_stay_float16():
    """A gather, transpose, reshape or slice has float16 kernels: no casts around them
    (widening an embedding's table on every call made a lookup 26x slower)."""
    table = torch.randn(1000, 64, dtype=torch.float16)

    def f(i):
        return torch.nn.functional.embedding(i, table).permute(1, 0).reshape(-1)[::2]

    backend = ortlab.OrtBackend()
    i = torch.tensor([3, 999, 0])
    with torch.no_grad():
        got = torch.compile(f, backend=backend)(i)
    assert torch.equal(got, f(i))
    assert "Cast" not in _ops(backend)


def test_what_onnx_runtime_runs_in_the_narrow_type_stays_narrow():
    def f(x, y):
        return torch.cat([x.t(), y.t()]).reshape(-1)

    gm = torch.fx.experimental.proxy_tensor.make_fx(f)(
        torch.randn(2, 3, dtype=torch.bfloat16), torch.randn(2, 3, dtype=torch.bfloat16)
    )
    assert _precision.for_onnx(gm) is gm  # cat, t and reshape have bfloat16 kernels


def _float32_gradient_errors(model, reference, float32):
    """Per parameter, the gradient's distance to the float32 model's, over its scale."""
    return {
        name: ((p.grad - f.grad).abs().max() / f.grad.abs().max()).item()
        for (name, p), f in zip(model.named_parameters(), float32.parameters())
    }


def test_a_bfloat16_autocast_training_step_runs_whole_in_onnx_runtime():
    model = causal_lm("Qwen2").train()
    reference, float32 = copy.deepcopy(model), copy.deepcopy(model)
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    backend = ortlab.OrtBackend()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.compile(model, backend=backend)(input_ids=ids, labels=ids).loss
        expected = reference(input_ids=ids, labels=ids).loss
    exact = float32(input_ids=ids, labels=ids).loss
    for value in (loss, expected, exact):
        value.backward()
    # Both bfloat16 runs are as far from float32 as bfloat16 rounding puts them.
    assert abs(loss.item() - exact.item()) <= 2 * abs(expected.item() - exact.item()) + 1e-3
    ours = _float32_gradient_errors(model, reference, float32)
    eagers = _float32_gradient_errors(reference, model, float32)
    for name, error in ours.items():
        assert error <= 2 * eagers[name] + 1e-3, (name, error, eagers[name])
    assert {g.kind for g in backend.graphs} == {"forward", "backward"}
    for graph in backend.graphs:
        assert not graph.eager_node_names, [graph.verdict(n) for n in graph.eager_node_names]
        assert len(graph.partitions) == 1


def test_bfloat16_autocast_inference_runs_whole_in_onnx_runtime():
    """Under ``no_grad`` and CPU autocast (``torch.is_autocast_enabled()`` alone asks
    about CUDA's): every Linear used to be refused, its float32 inputs "returning"
    bfloat16."""
    model = causal_lm("Qwen2").eval()
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    backend = ortlab.OrtBackend()
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = torch.compile(model, backend=backend)(input_ids=ids).logits
            expected = model(input_ids=ids).logits
        exact = model(input_ids=ids).logits
    assert got.dtype == expected.dtype == torch.bfloat16
    # As far from float32 as eager's bfloat16 run is.
    error, eagers = ((y.float() - exact).abs().max().item() for y in (got, expected))
    assert error <= 2 * eagers + 1e-3, (error, eagers)
    (graph,) = backend.graphs
    assert not graph.eager_node_names and len(graph.partitions) == 1


class _Ema(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("ema", torch.ones(8, dtype=torch.bfloat16))

    def forward(self, x):
        self.ema.mul_(0.9).add_(x.mean(0) * 0.1)
        return x * self.ema


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_a_bfloat16_buffer_written_in_place_is_written(grad):
    """The write-back of a buffer goes to the buffer, not to a float32 copy of it."""
    x = torch.randn(4, 8, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    model, reference = _Ema(), _Ema()
    with torch.set_grad_enabled(grad):
        got = torch.compile(model, backend=ortlab.OrtBackend())(x.requires_grad_(grad))
        expected = reference(x)
    assert torch.equal(model.ema, reference.ema) and not torch.equal(model.ema, _Ema().ema)
    assert torch.equal(got, expected)


@pytest.mark.parametrize(
    "view", [lambda x: x.expand(2, 4, 8), lambda x: x.diagonal()], ids=["expand", "diagonal"]
)
def test_a_returned_view_of_a_bfloat16_input_stays_a_view(view):
    x = torch.zeros(4, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        y = torch.compile(view, backend=ortlab.OrtBackend())(x)
    x.add_(1)  # as in eager, the view sees the write
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert torch.equal(y, view(x))


@pytest.mark.filterwarnings("ignore::ortlab.FallbackWarning")
def test_bfloat16_index_put_accumulating_keeps_eagers_rounding():
    """PyTorch rounds after each addition of a repeated index (256 for 300 ones here):
    computing in float32 would give 300."""

    def f(values, index):
        return torch.zeros(1, dtype=torch.bfloat16).index_put((index,), values, True)

    values, index = torch.ones(300, dtype=torch.bfloat16), torch.zeros(300, dtype=torch.long)
    got = torch.compile(f, backend=ortlab.OrtBackend())(values, index)
    assert torch.equal(got, f(values, index)) and got.item() == 256


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_number_meets_a_narrow_tensor_rounded_where_pytorch_rounds_it(dtype):
    # PyTorch rounds the number to the tensor's dtype for add, sub, comparisons and
    # remainder (fp16(0.1) == 0.1 is true), and not for mul and div: computed in
    # float32 with the number as it came, 0.1 == fp16(0.1) was false.
    def f(x):
        return (x == 0.1, x >= 0.1, x < 1 / 3, x > 0.1, x - 0.3333, 0.3333 + x,
                x.remainder(0.3), x * 0.3333, x / 0.3333)  # fmt: skip

    x = torch.cat([torch.tensor([0.1, 0.2, 1 / 3]), torch.randn(500) * 3]).to(dtype)
    compiled = ortlab.compile(f)
    for got, expected in zip(compiled(x), f(x), strict=True):
        assert torch.equal(got, expected)
    assert not compiled.ortlab_backend.graphs[0].eager_node_names


def test_bfloat16_grouped_mm_stays_bfloat16_in_pytorch_and_the_rest_runs():
    # transformers' MoE experts call _grouped_mm in bfloat16 on CPU (Qwen2-MoE, Mixtral,
    # DeepSeek-V3). Widened to float32 like the ops around it, its meta function (bfloat16
    # only) failed the whole graph: every graph of those models ran in PyTorch.
    def f(x, w, offs):
        return torch.relu(torch.nn.functional.grouped_mm(x * 2.0, w, offs=offs)) + 1.0

    torch.manual_seed(0)
    x, w = (
        torch.randn(8, 16, dtype=torch.bfloat16),
        torch.randn(2, 16, 32, dtype=torch.bfloat16),
    )
    offs = torch.tensor([3, 8], dtype=torch.int32)
    backend = ortlab.OrtBackend()
    with torch.no_grad():
        out = torch.compile(f, backend=backend)(x, w, offs)
    torch.testing.assert_close(out, f(x, w, offs))
    (graph,) = backend.graphs
    assert graph.error is None
    left = [graph.verdict(n) for n in graph.eager_node_names]
    assert [(v.target, v.rule) for v in left] == [
        ("aten._grouped_mm.default", "wrong-translation")
    ]
    assert len(graph.partitions) == 2 and all(p.run_count == 1 for p in graph.partitions)
