"""Zero-copy runtime edge cases: dtypes, scalars, empty / non-contiguous inputs, aliasing,
mutation, preallocated outputs, static export, and the no-AOT inference path."""

from __future__ import annotations

import copy

import pytest
import torch
from runtime_helpers import single_partition, static_runner

import ortlab
from ortlab import OrtBackend, OrtBackendOptions


def _compile(fn, backend=None, **kwargs):
    backend = backend or OrtBackend()
    kwargs.setdefault("dynamic", True)
    return torch.compile(fn, backend=backend, **kwargs), backend


def _ran_in_ort(backend, runs=1):
    assert backend.execution_count >= runs
    assert all(p.error is None for p in backend.partitions), [
        p.error for p in backend.partitions
    ]


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32]
)
def test_dtypes_round_trip(dtype):
    def f(x):
        return x * 3 + x

    compiled, backend = _compile(f)
    x = (torch.randn(6) * 10).to(dtype)
    out = compiled(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, f(x))
    _ran_in_ort(backend)


def test_bool_outputs_come_back_as_bool():
    def f(x):
        return x > 0, (x > 0).logical_not()

    compiled, backend = _compile(f)
    x = torch.randn(7)
    a, b = compiled(x)
    assert a.dtype == torch.bool and b.dtype == torch.bool
    assert torch.equal(a, x > 0) and torch.equal(b, x <= 0)
    _ran_in_ort(backend)


def test_mixed_dtype_promotion_is_exact():
    def f(x, i, m):
        return x + i, x * m, i / 2

    compiled, backend = _compile(f)
    x, i, m = torch.randn(4), torch.arange(4), torch.tensor([True, False, True, False])
    for got, want in zip(compiled(x, i, m), f(x, i, m)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    _ran_in_ort(backend)


def test_symint_inputs_and_python_scalars_cross_the_boundary():
    def f(x):
        n = x.shape[0]
        return x * n + torch.full_like(x, 0.5) * (n - 1)

    compiled, backend = _compile(f)
    for n in (3, 5, 9):
        x = torch.randn(n, 2)
        torch.testing.assert_close(compiled(x), f(x))
    _ran_in_ort(backend, runs=3)
    # The SymInt is computed in Python and fed to ORT as a 0-d int64 input.
    schema = backend.sessions[0].input_schema
    assert "int64[]" in schema, schema


def test_zero_dim_tensor_outputs_and_reductions():
    def f(x):
        return x.sum(), x.amax(), x.mean(dim=0)

    compiled, backend = _compile(f)
    x = torch.randn(5, 3)
    for got, want in zip(compiled(x), f(x)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)
    _ran_in_ort(backend)


def test_non_contiguous_inputs():
    def f(x):
        return torch.tanh(x) * 2

    compiled, backend = _compile(f)
    base = torch.randn(6, 8)
    for x in (base.t(), base[:, ::2], base[1:4]):
        torch.testing.assert_close(compiled(x), f(x))
    _ran_in_ort(backend)


def test_empty_tensors():
    def f(x):
        return x.relu() + 1

    compiled, backend = _compile(f, dynamic=False)
    x = torch.randn(0, 4)
    out = compiled(x)
    assert out.shape == (0, 4)
    _ran_in_ort(backend)


def test_aliasing_outputs_keep_view_semantics():
    def f(x):
        y = x.sin()
        return y, y.view(-1), x.view(2, -1)

    compiled, backend = _compile(f)
    x = torch.randn(4, 3)
    got = compiled(x)
    for g, w in zip(got, f(x)):
        torch.testing.assert_close(g, w)
    # The view of the input is still a view of the input (AOTAutograd regenerates it).
    assert got[2].data_ptr() == x.data_ptr()
    _ran_in_ort(backend)


def test_input_mutation_is_applied_to_the_callers_tensor():
    def f(x, buf):
        buf.add_(1)
        return x * buf

    compiled, backend = _compile(f)
    x, buf = torch.randn(4), torch.zeros(4)
    ref_buf = buf.clone()
    out = compiled(x, buf)
    expected = f(x, ref_buf)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(buf, ref_buf)
    _ran_in_ort(backend)


@pytest.mark.parametrize("dynamic", [True, False])
def test_preallocated_outputs_match(dynamic):
    def f(x, y):
        return x @ y, (x @ y).relu().sum(dim=1)

    backend = OrtBackend(OrtBackendOptions(preallocate_output=True))
    compiled, _ = _compile(f, backend, dynamic=dynamic)
    for n in (3, 6):
        x, y = torch.randn(n, 4), torch.randn(4, 5)
        for got, want in zip(compiled(x, y), f(x, y)):
            torch.testing.assert_close(got, want)
    _ran_in_ort(backend, runs=2)


def test_scalar_inputs_reuse_cached_tensors_without_mixing_values():
    import onnx

    from ortlab.backend import _runtime

    def spec(elem_type):
        vi = onnx.helper.make_tensor_value_info("s", elem_type, [])
        return _runtime._InputSpec(vi, 0, 0)

    ints = spec(onnx.TensorProto.INT64)
    first = ints.convert(8)
    assert ints.convert(8) is first and first.item() == 8 and first.dtype == torch.int64
    assert ints.convert(9).item() == 9
    bools = spec(onnx.TensorProto.BOOL)
    assert bools.convert(True).item() is True and bools.convert(1).dtype == torch.bool
    for n in range(200):  # bounded: the cache is cleared, values stay right
        assert ints.convert(n).item() == n
    assert len(ints._scalars) <= _runtime._MAX_CACHED_SCALARS
    floats = spec(onnx.TensorProto.FLOAT)
    zero = floats.convert(0.0)
    assert floats.convert(0.0) is zero and not torch.signbit(zero)
    assert torch.signbit(floats.convert(-0.0))  # -0.0 == 0.0 as a dict key: not mixed up
    assert torch.isnan(floats.convert(float("nan")))
    assert floats.convert(2.5).item() == 2.5 and floats.convert(2.5).dtype == torch.float32


def _static_partition():
    """A CPU partition of f(x, y) = (x @ y + 1, x @ y > 0), exported with static shapes,
    and what a runner needs to serve it."""

    def f(x, y):
        z = x @ y + 1
        return z, z > 0

    x, y = torch.randn(3, 4), torch.randn(4, 5)
    proto, inputs, outputs = single_partition(f, (x, y))
    return f, proto, inputs, outputs, (x, y)


def test_static_binding_runner_copies_through_fixed_buffers():

    f, proto, inputs, outputs, args = _static_partition()
    runner = static_runner(proto, inputs, outputs, args)
    bound = [b.data_ptr() for b in (*runner._in_buffers, *runner._out_buffers)]
    first = runner.run(args)
    kept = [t.clone() for t in first]
    for got, want in zip(first, f(*args)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    # A transposed (non-contiguous) argument is copied in like any other.
    other = (torch.randn(4, 3).t(), torch.randn(4, 5))
    second = runner.run(other)
    for got, want in zip(second, f(*other)):
        torch.testing.assert_close(got, want)
    # Results are copies: the next call does not overwrite what the caller holds.
    for a, b in zip(first, kept):
        assert torch.equal(a, b)
    assert all(r.data_ptr() not in bound for r in (*first, *second))
    assert bound == [b.data_ptr() for b in (*runner._in_buffers, *runner._out_buffers)]
    assert runner.matches(other) and not runner.matches((torch.randn(2, 4), args[1]))


def test_static_binding_blocker_names_what_stands_in_the_way():
    import copy

    import onnx
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ortlab.backend import _runtime

    _, proto, _, outputs, args = _static_partition()
    first = proto.graph.input[0].name

    def blocker(model=proto, args=args, outputs=outputs, provider="CUDAExecutionProvider"):
        return _runtime.static_binding_blocker(
            model, outputs, args, (0, 1), first_provider=provider
        )

    assert blocker() == f"input {first!r} is on cpu, not CUDA"
    assert "is a Python scalar" in blocker(args=(3, args[1]))
    # Fake CUDA tensors (no GPU needed) pass the device checks and reach the rest.
    with FakeTensorMode():
        cuda_args = tuple(torch.empty(a.shape, device="cuda") for a in args)
        cuda_outputs = tuple(
            torch.empty(o.shape, dtype=o.dtype, device="cuda") for o in outputs
        )
    assert blocker(args=cuda_args, outputs=cuda_outputs) == ""
    assert blocker(args=cuda_args, outputs=cuda_outputs, provider="CPUExecutionProvider") == (
        "the session's first execution provider is CPUExecutionProvider"
    )
    assert "is on cpu, not CUDA" in blocker(
        args=cuda_args, outputs=(cuda_outputs[0], outputs[1])
    )
    assert "is a Python scalar" in blocker(args=cuda_args, outputs=(cuda_outputs[0], 1))
    symbolic = copy.deepcopy(proto)
    symbolic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "s0"
    assert "symbolic dims" in blocker(symbolic, cuda_args, cuda_outputs)
    assert "dynamic_shapes=False" in blocker(symbolic, cuda_args, cuda_outputs)
    looping = copy.deepcopy(proto)
    looping.graph.node.append(onnx.helper.make_node("Loop", ["n", "c"], ["o"]))
    assert "control flow (Loop)" in blocker(looping, cuda_args, cuda_outputs)


def test_cuda_graphs_on_cpu_inputs_run_normally_and_say_why():
    def f(x):
        return torch.relu(x) * 2

    backend = OrtBackend(OrtBackendOptions(cuda_graphs=True))
    compiled, _ = _compile(f, backend, dynamic=False)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), f(x))
    (session,) = backend.sessions
    assert session.cuda_graph is False
    assert session.cuda_graph_note.endswith("is on cpu, not CUDA")
    assert session.cuda_graph_status == f"no: {session.cuda_graph_note}"
    from ortlab.views import _fragments

    for html in (session._repr_html_(), _fragments.onnx_model_info(session)):
        assert "CUDA graph" in html and "no: " in html and "is on cpu" in html
    # With the option off there is nothing to explain.
    plain = OrtBackend()
    compiled, _ = _compile(f, plain, dynamic=False)
    compiled(x)
    assert plain.sessions[0].cuda_graph_note is None
    assert plain.sessions[0].cuda_graph_status == ""
    assert "CUDA graph" not in plain.sessions[0]._repr_html_()
    assert "CUDA graph" not in _fragments.onnx_model_info(plain.sessions[0])


def test_cuda_graphs_option_must_be_a_bool():
    with pytest.raises(ortlab.errors.UnsupportedOptionError, match="cuda_graphs"):
        OrtBackendOptions(cuda_graphs="yes")


def test_static_binding_runner_binds_module_state_in_place():

    f, proto, inputs, outputs, (x, y) = _static_partition()
    weight = torch.nn.Parameter(y.clone(), requires_grad=False)
    runner = static_runner(proto, inputs, outputs, (x, weight))
    # Bound where it lives: no copy per call.
    assert runner._in_buffers[1].data_ptr() == weight.data_ptr()
    assert runner._in_buffers[0] is not x  # activations go through a fixed buffer
    with torch.no_grad():
        weight.mul_(-2)  # in place: same address, the next run sees it
    torch.testing.assert_close(runner.run((x, weight))[0], f(x, weight)[0])
    old = weight.detach()
    weight.data = torch.randn(4, 5)  # moved: this runner is bound to the old address
    assert not runner.matches((x, weight))
    assert runner.matches((x, old))


@pytest.mark.parametrize("guaranteed", [False, True])
def test_schema_checks_run_only_where_dynamos_guards_do_not_hold_the_inputs(guaranteed):
    from ortlab.backend import _runtime, _session

    _, proto, inputs, outputs, (x, y) = _static_partition()
    session = _session.create_session(proto.SerializeToString(), [(_session.CPU, {})], None)
    runner = _runtime.OrtRunner(
        session,
        proto,
        input_fx_values=inputs,
        output_fx_values=outputs,
        args=(x, y),
        frozen={},
        preallocate_output=False,
        guaranteed=guaranteed,
    )
    assert runner.matches((x, y))
    # A static export is bound to its sizes and dtypes: they are checked, unless the
    # session was exported from the partition's own metadata, which Dynamo's guards
    # already hold every call to (frozen tensors are checked either way: see
    # test_executor's freeze tests).
    assert runner.matches((torch.randn(5, 4), y)) is guaranteed
    assert runner.matches((x.double(), y)) is guaranteed


# -- layouts: outputs come back with the strides eager gives them -------------------------


@pytest.mark.parametrize(
    ("make", "order"),
    [
        (lambda: torch.empty(2, 3, 4, 5), None),
        (lambda: torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last), (0, 2, 3, 1)),
        (
            lambda: torch.empty(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d),
            (0, 2, 3, 4, 1),
        ),
        (lambda: torch.empty(3, 4).t(), (1, 0)),
        (lambda: torch.empty(1, 3, 4, 4).to(memory_format=torch.channels_last), (0, 2, 3, 1)),
        (lambda: torch.empty(3, 1).expand(3, 4), None),  # not dense
        (lambda: torch.empty(4, 6)[:, :3], None),  # not dense
        (lambda: torch.empty(5), None),
    ],
    ids=[
        "contiguous",
        "channels_last",
        "channels_last_3d",
        "t",
        "batch1",
        "expand",
        "slice",
        "1d",
    ],
)
def test_memory_order_of_a_layout(make, order):
    from ortlab.backend import _runtime

    value = make()
    assert _runtime.memory_order(value) == order
    if order is not None:  # the tensor in memory order is contiguous
        assert value.permute(order).is_contiguous()


class _ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return y, y.mean(dim=(2, 3))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("preallocate", [False, True], ids=["ort-allocates", "preallocated"])
def test_channels_last_outputs_keep_eagers_strides(dynamic, preallocate):
    torch.manual_seed(0)
    model = _ConvBlock().eval().to(memory_format=torch.channels_last)
    backend = OrtBackend(OrtBackendOptions(preallocate_output=preallocate))
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 4, 6, 6).to(memory_format=torch.channels_last)
            got, expected = compiled(x), model(x)
            for g, e in zip(got, expected):
                assert g.stride() == e.stride()
                torch.testing.assert_close(g, e)
    _ran_in_ort(backend, runs=2)
    model_proto = backend.sessions[0].model
    assert model_proto.graph.output[0].name.endswith("__memory_order")


def test_a_transposed_output_keeps_eagers_strides():
    def f(x):
        return (x * 2).t()

    compiled, backend = _compile(f, dynamic=False)
    x = torch.randn(3, 5)
    got = compiled(x)
    assert got.stride() == f(x).stride() == (1, 5)
    torch.testing.assert_close(got, f(x))
    _ran_in_ort(backend)


def test_channels_last_training_step_keeps_strides_and_gradients():
    torch.manual_seed(0)
    model = _ConvBlock().to(memory_format=torch.channels_last)
    reference = copy.deepcopy(model)
    backend = OrtBackend()
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    got = torch.compile(model, backend=backend)(x)
    expected = reference(x)
    assert got[0].stride() == expected[0].stride()
    (got[0].sum() + got[1].sum()).backward()
    (expected[0].sum() + expected[1].sum()).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        # The conv's bias gradient is 0 up to rounding (batch norm follows it).
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    _ran_in_ort(backend)


def test_a_saved_session_of_a_channels_last_model_reruns_as_saved(tmp_path):
    import onnxruntime

    from ortlab.backend import load_test_case

    torch.manual_seed(0)
    model = _ConvBlock().eval().to(memory_format=torch.channels_last)
    backend = OrtBackend(OrtBackendOptions(keep_last_run=True))
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.compile(model, backend=backend)(x)
    (session,) = backend.sessions
    proto, inputs, expected = load_test_case(session.save(tmp_path / "case"))
    ort_session = onnxruntime.InferenceSession(proto.SerializeToString())
    names = [i.name for i in ort_session.get_inputs()]
    for got, want in zip(ort_session.run(None, dict(zip(names, inputs))), expected):
        assert got.shape == want.shape
        torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want))


# -- bfloat16: carried through DLPack (numpy has no bfloat16) -----------------------------


def test_bfloat16_crosses_both_ways_and_moves_exactly_in_onnx_runtime():
    def f(x, y, empty):
        return torch.cat([x.t(), y.t(), empty]).flatten()

    compiled, backend = _compile(f, dynamic=False)
    x, y = torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(3, 4, dtype=torch.bfloat16)
    empty = torch.empty(0, 3, dtype=torch.bfloat16)  # no memory: ONNX Runtime allocates it
    got = compiled(x, y, empty)
    assert got.dtype == torch.bfloat16 and torch.equal(got, f(x, y, empty))
    _ran_in_ort(backend)
    (graph,) = backend.graphs
    assert not graph.eager_node_names


def test_bfloat16_casts_around_float32_arithmetic_run_in_onnx_runtime():
    def f(x):
        return (x.float() * 2 + 1).to(torch.bfloat16)

    compiled, backend = _compile(f, dynamic=False)
    x = torch.randn(4, 5, dtype=torch.bfloat16)
    got = compiled(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, f(x))
    _ran_in_ort(backend)
    assert not backend.graphs[0].eager_node_names


def test_bfloat16_buffers_bind_to_an_io_binding():
    import onnxruntime
    from onnx import TensorProto, helper

    from ortlab.backend import _runtime

    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    session = onnxruntime.InferenceSession(model.SerializeToString())
    x = torch.randn(2, 3, dtype=torch.bfloat16)
    y = torch.empty(3, 2, dtype=torch.bfloat16)
    binding = session.io_binding()
    _runtime._bind(binding, "x", x, output=False)
    _runtime._bind(binding, "y", y, output=True)
    session.run_with_iobinding(binding)
    assert torch.equal(y, x.t())  # ORT wrote into torch's memory


def test_a_dlpack_ortvalue_reads_torch_memory():
    from onnx import TensorProto

    from ortlab.backend import _ort_private

    x = torch.randn(2, 3, dtype=torch.bfloat16)
    value = _ort_private.ortvalue_from_dlpack(x)
    assert value.data_ptr() == x.data_ptr()  # no copy
    assert value.element_type() == TensorProto.BFLOAT16 and value.shape() == [2, 3]
    empty = _ort_private.empty_ortvalue((0, 3), TensorProto.BFLOAT16, x.device)
    assert empty.shape() == [0, 3] and empty.element_type() == TensorProto.BFLOAT16


def test_an_output_onnx_runtime_returns_in_an_inputs_buffer_gets_its_own_memory():
    """A one-node ``t`` on a 1-D tensor is its input: ONNX Runtime returned the runtime's
    temporary contiguous copy of a strided input, freed right after (garbage values)."""
    import onnxruntime
    from onnx import TensorProto, helper

    from ortlab.backend import _runtime

    # What the translation of t on a 1-D tensor is: the graph input as its output.
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    graph = helper.make_graph([], "g", [value], [value])
    proto = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10
    )
    assert _runtime.aliasing_outputs(proto) == ((0, 0),)
    session = onnxruntime.InferenceSession(proto.SerializeToString())
    strided = torch.arange(8.0)[::2]
    runner = _runtime.OrtRunner(
        session,
        proto,
        input_fx_values=(strided,),
        output_fx_values=(strided.contiguous(),),
        args=(strided,),
        frozen={},
        preallocate_output=False,
        guaranteed=True,
    )
    (out,) = runner.run((strided,))
    _ = [torch.randn(64) for _ in range(100)]  # reuse freed memory, if any
    torch.testing.assert_close(out, torch.tensor([0.0, 2.0, 4.0, 6.0]))
    plain = torch.arange(4.0)
    (out,) = runner.run((plain,))
    assert out.data_ptr() != plain.data_ptr()  # the caller's tensor may change later
