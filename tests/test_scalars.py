"""Python numbers and dtypes the translations get wrong (``_scalars``): a number where the
op takes a tensor (``1.0 - int_mask``) and rounding integers run in ONNX Runtime, with
PyTorch's dtype and values, without a split."""

from __future__ import annotations

import pytest
import torch

import ortlab
from ortlab.backend import _scalars

_MASK = torch.tensor([1, 0, 3])
_X3 = torch.tensor([0.3, -1.7, 2.9])
_X23 = torch.tensor([[0.3, -1.7, 2.9], [1.1, 0.6, -0.4]])


def _compiled_graphs(fn, *args):
    backend = ortlab.OrtBackend()
    out = torch.compile(fn, backend=backend)(*args)
    return out, backend.graphs


@pytest.mark.parametrize(
    "fn, args",
    [
        # XLNet: input_mask = 1.0 - attention_mask (int64), then float arithmetic.
        (
            lambda m, x: (1.0 - m) * x,
            (torch.tensor([[1, 1, 0], [1, 0, 0]]), torch.randn(2, 3)),
        ),
        (
            lambda m, x: (2.5 - m.to(torch.int32)) + x,
            (torch.tensor([1, 0, 3]), torch.randn(3)),
        ),
        (lambda m, x: (0.1 - x.double()) * m, (torch.tensor([1, 0, 3]), torch.randn(3))),
        (lambda m, x: (1.5 - x.half()) * 2, (torch.tensor([1, 0, 3]), torch.randn(3))),
        (
            lambda m, x: (300 - m.to(torch.uint8)) * 3,
            (torch.tensor([1, 0, 3]), torch.randn(3)),
        ),
    ],
    ids=["float-int64", "float-int32", "float-float64", "float-float16", "int-uint8"],
)
def test_number_as_first_operand_runs_in_ort(fn, args):
    out, graphs = _compiled_graphs(fn, *args)
    expected = fn(*args)
    assert out.dtype == expected.dtype
    # float16: ONNX Runtime's kernels may round differently from PyTorch's by an ulp
    tolerance = {"atol": 2e-3, "rtol": 2e-3} if expected.dtype == torch.float16 else {}
    torch.testing.assert_close(out, expected, **tolerance)
    for graph in graphs:
        assert graph.eager_node_names == (), [graph.verdict(n) for n in graph.eager_node_names]
        assert not graph.split_partitions
        assert len(graph.partitions) == 1


@pytest.mark.parametrize("op", [torch.floor, torch.ceil, torch.round, torch.trunc])
def test_rounding_an_integer_tensor_runs_in_ort(op):
    fn = lambda a: op(a) * 2  # noqa: E731
    a = torch.tensor([-3, 0, 7])
    out, graphs = _compiled_graphs(fn, a)
    assert out.dtype == torch.int64
    assert torch.equal(out, fn(a))
    (graph,) = graphs
    assert graph.eager_node_names == (), [graph.verdict(n) for n in graph.eager_node_names]


def test_add_of_a_number_is_left_alone():
    """``add.Tensor(x, 2)`` has an overload for the number (``add.Scalar``): untouched."""
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda x: x + 2, tracing_mode="fake")(
        torch.tensor([1, 2])
    )
    assert _scalars.for_onnx(gm) is gm


def _put(x, i):
    y = x * 2
    y[i] = 7.0
    return y


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i: x[i] + 1,
        _put,
        lambda x, i: (x * 1).index_put((i,), torch.ones(()), accumulate=True),
    ],
    ids=["index", "setitem", "index_put-accumulate"],
)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_int32_indices_run_in_ort(fn, grad):
    """PyTorch indexes with int32 tensors as with int64 (flex attention's block masks);
    GatherND/ScatterND take int64 only, and ONNX Runtime refused the model."""
    x = torch.arange(12.0).reshape(4, 3)
    i = torch.tensor([3, 0, 3], dtype=torch.int32)
    with torch.set_grad_enabled(grad):
        out, graphs = _compiled_graphs(fn, x, i)
        torch.testing.assert_close(out, fn(x, i), rtol=0, atol=0)
    for graph in graphs:
        assert graph.eager_node_names == (), [graph.verdict(n) for n in graph.eager_node_names]
        assert not graph.split_partitions


# -- float64 graphs: Python floats, and factories of the default dtype ----------------------

_X64 = torch.tensor([[0.25, -1.5, 3.0], [-0.5, 2.0, -7.0]], dtype=torch.float64)

_FLOAT64_NUMBERS = {
    "masked_fill": lambda x: x.masked_fill(x > 0, 0.1),
    "masked_fill beyond float32": lambda x: x.masked_fill(x > 0, -1e300),
    "where": lambda x: torch.where(x > 0, x, 0.1),
    "clamp": lambda x: x.clamp(min=0.1),
    "full": lambda x: torch.full((2, 3), 0.1, dtype=torch.float64) * x,
    "add's alpha": lambda x: x.add(x * x, alpha=0.1),
    "rsub of a mask": lambda x: 1.1 - (x > 0).to(torch.float64),
    "nan_to_num": lambda x: (x / 0).nan_to_num(nan=0.1, posinf=1e300, neginf=-0.3),
    "an integer times a float": lambda x: torch.arange(3) * 0.1 + x,
}


@pytest.mark.parametrize("name", list(_FLOAT64_NUMBERS))
def test_python_floats_in_a_float64_graph_keep_double_precision(name):
    # The exporter made a float the op takes without a dtype a FLOAT constant, cast to
    # double after its precision was gone: 0.1 became 0.10000000149, -1e300 became -inf.
    fn = _FLOAT64_NUMBERS[name]
    result, graphs = _compiled_graphs(fn, _X64)
    assert torch.equal(result, fn(_X64))
    assert [v.node for g in graphs for v in g.verdicts if not v.supported] == []


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.ones(3) / 3 + x,
        lambda x: torch.zeros(3) + x,
        lambda x: torch.scalar_tensor(0.1) + x,
        lambda x: torch.linspace(0, 1, 3) + x,
    ],
    ids=["ones", "zeros", "scalar_tensor", "linspace"],
)
def test_factories_of_a_float64_default_dtype_run_in_ort(fn):
    # torchlib's translations made float32 where the graph declared double, and ONNX
    # Runtime refused the node (a FallbackWarning, which the suite turns into an error).
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        x = torch.tensor([0.5, -1.0, 2.0])
        result, graphs = _compiled_graphs(fn, x)
        expected = fn(x)
    finally:
        torch.set_default_dtype(previous)
    assert result.dtype == torch.float64
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    assert all(not g.eager_node_names for g in graphs)


_FLOAT32_ATTRIBUTES = {
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x, -0.3, 0.7),
    "addcmul": lambda x: torch.addcmul(x, x, x, value=0.3),
    "addmm": lambda x: torch.addmm(x, x, x.T @ x, beta=0.3, alpha=0.7),
    "celu": lambda x: torch.nn.functional.celu(x, 0.3),
    "gelu tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}


@pytest.mark.parametrize("name", list(_FLOAT32_ATTRIBUTES))
def test_numbers_float32_cannot_hold_keep_double_precision_in_onnx_runtime(name):
    # ONNX's float attributes are 32-bit: hardtanh's bounds, addcmul's value, addmm's
    # alpha/beta, celu's alpha and GELU's tanh constants were rounded (1.5e-9 to
    # 3.9e-8 relative). In float64 such calls are decomposed; float32 keeps the op.
    fn = _FLOAT32_ATTRIBUTES[name]
    result, graphs = _compiled_graphs(fn, _X64)
    torch.testing.assert_close(result, fn(_X64), rtol=1e-14, atol=1e-13)
    assert all(not g.eager_node_names for g in graphs)
    _, graphs = _compiled_graphs(fn, _X64.float())
    assert all(not g.eager_node_names for g in graphs)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.nn.functional.batch_norm(
            x, torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype), eps=0.3
        ),
        lambda x: torch.addbmm(x, x[None], (x.T @ x)[None], beta=0.3, alpha=0.7),
    ],
    ids=["batch_norm eps", "addbmm"],
)
def test_float32_attributes_without_a_decomposition_keep_a_float64_op_in_pytorch(fn):
    result, graphs = _compiled_graphs(fn, _X64)
    assert torch.equal(result, fn(_X64))
    refused = {v.rule for g in graphs for v in g.verdicts if not v.supported}
    assert refused - {"output-selection"} == {"wrong-translation"}, refused


def test_a_float64_layer_norm_trains_in_onnx_runtime():
    # ONNX Runtime has no double LayerNormalization kernel: it refused every float64
    # layer norm (a FallbackWarning each, the partition cut around it). Decomposed.
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 8), torch.nn.LayerNorm(8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    ).double()
    reference = copy.deepcopy(model)
    backend = ortlab.OrtBackend()
    torch.compile(model, backend=backend)(_X64).pow(2).sum().backward()
    reference(_X64).pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=1e-14)
    assert {g.kind for g in backend.graphs} == {"forward", "backward"}
    assert all(not g.eager_node_names for g in backend.graphs)


def test_numbers_become_cpu_scalars_as_pytorch_wraps_them_on_any_device():
    """A number in a tensor slot becomes a 0-d *CPU* tensor, as PyTorch wraps numbers:
    ops take one beside tensors of any device, and prims (which do not broadcast) take no
    other 0-d tensor. Made on the graph's device, batch norm's training statistics on
    CUDA (``prims.div(sum, 8192.0)``) failed in export and again in PyTorch: a ResNet's
    training step raised. Traced on fake CUDA tensors (no GPU needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode()
    with mode:
        x = torch.empty(1, 4, 1, 1, device="cuda")
    graph = torch.fx.Graph()
    t = graph.placeholder("t")
    t.meta["val"] = x
    out = graph.call_function(torch.ops.prims.div.default, (t, 8192.0))
    with mode:
        out.meta["val"] = torch.ops.prims.div.default(x, 8192.0)
    graph.output(out)
    rewritten = _scalars.for_onnx(torch.fx.GraphModule({}, graph))
    (number,) = [
        n for n in rewritten.graph.nodes if n.target == torch.ops.aten.scalar_tensor.default
    ]
    assert number.kwargs["device"] == torch.device("cpu")
    result = FakeTensorProp(rewritten, mode).propagate(x)
    assert result.device.type == "cuda" and result.shape == (1, 4, 1, 1)


_BIG_INT32 = torch.tensor([[2**30, 2**30, 2**30], [5, -7, 9]], dtype=torch.int32)
_HALVES = torch.full((4, 5000), 0.1, dtype=torch.float16)
_SMALL = torch.tensor([[3, -3, 2, 0], [0, 0, 0, 0]])
_UNIFORM = torch.rand(256, 7, generator=torch.Generator().manual_seed(0)) * 4 + 1


@pytest.mark.parametrize(
    "fn, x",
    [
        # transformers' pooling: an integer mask's mean as a float
        (lambda x: x.mean(-1, dtype=torch.float32), torch.tensor([[1, 0, 2], [3, 4, 4]])),
        (lambda x: x.mean((0, 1), dtype=torch.float64), torch.tensor([[1, 0], [3, 5]])),
        (lambda x: (x > 0).mean(-1, dtype=torch.float32), _X23),  # bool: ReduceMean refused
        (lambda x: x.sum(-1), _BIG_INT32),  # int64 in PyTorch: no wrap at 2**31
        (lambda x: x.sum(), _BIG_INT32),
        (lambda x: (x > 2).sum(-1), _BIG_INT32),  # bool
        (lambda x: x.sum(-1, dtype=torch.float32), _HALVES),  # accumulated in float32
        (lambda x: x.sum(dtype=torch.float32), _HALVES),
        # left to the translation's cast after: a sum to bool
        (lambda x: x.sum(-1, dtype=torch.bool), _SMALL),
        # a CPU mean to float16/bfloat16 sums in float32 and rounds once
        (lambda x: x.mean(-1, dtype=torch.float16), torch.tensor([[70000.0, 0.0]])),
        (lambda x: x.mean(-1, dtype=torch.float16), torch.tensor([[70000, 0]])),
        (lambda x: x.mean(-1, dtype=torch.float16), _UNIFORM),
        (lambda x: x.mean(-1, dtype=torch.bfloat16), _UNIFORM),
        (lambda x: x.mean(-1, keepdim=True, dtype=torch.float64), torch.tensor([[1, 2]])),
        (lambda x: torch.softmax(x * 50, -1, dtype=torch.float32), _HALVES[:, :7]),
        (lambda x: torch.log_softmax(x, 0, torch.float64), _X23),
    ],
)
def test_reductions_compute_in_their_result_dtype(fn, x):
    """torchlib reduces in the input's dtype and casts the result: the integer mean of
    [3, 4, 4] came back 3.0, an int32 sum wrapped at 2**31 where PyTorch's int64 does not,
    a float16 sum of 5000 × 0.1 accumulated in float16. The input is cast first. (On the
    CPU the lowering casts the sums' inputs already: the means are the ones it left.)"""
    expected = fn(x)
    with torch.no_grad():  # inference lowering: ops as called, fewer decompositions
        out, graphs = _compiled_graphs(fn, x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=0)
    (graph,) = graphs
    assert not graph.eager_node_names and len(graph.partitions) == 1


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda x: x.sum(-1, dtype=torch.float32), _HALVES),
        (lambda x: x.sum(dtype=torch.float32), _HALVES),
        (lambda x: x.sum(-1), _BIG_INT32),
        (lambda x: x.mean(-1, dtype=torch.float32), _BIG_INT32),
    ],
)
def test_a_reduction_s_input_is_cast_to_its_result_dtype(fn, x):
    """The rewrite itself, on the ops as traced without decompositions (a CUDA graph
    keeps float16 sums: no widening there)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, tracing_mode="fake")(x)
    (reduction,) = [n for n in gm.graph.nodes if n.target in _scalars._REDUCTIONS_WITH_DTYPE]
    rewritten = _scalars.for_onnx(gm)
    (after,) = [n for n in rewritten.graph.nodes if n.target == reduction.target]
    cast = after.args[0]
    assert cast.target == torch.ops.aten._to_copy.default
    assert cast.kwargs["dtype"] == reduction.meta["val"].dtype
    assert after.kwargs == reduction.kwargs  # dtype= stays: the result's
    torch.testing.assert_close(rewritten(x), fn(x), rtol=0, atol=0)
