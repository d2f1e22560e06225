"""Pins the behaviour of the private torch APIs ortlab relies on (see _torch_private)."""

from __future__ import annotations

import operator
import subprocess
import sys

import onnx
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ortlab.backend import _export, _torch_private


def test_direct_translation_is_available_on_this_torch():
    assert _torch_private.DIRECT_TRANSLATION_ERROR is None


def test_registry_knows_core_ops_and_python_callables():
    registry = _torch_private.onnx_registry()
    assert registry.is_registered(torch.ops.aten.addmm.default)
    assert registry.is_registered(torch.ops.aten.gelu.default)
    assert not registry.is_registered(torch.ops.aten.convolution_backward.default)
    assert _torch_private.onnx_registry() is registry  # built once per process


def test_opset_bounds_match_the_exporter():
    from torch.onnx import _constants

    from ortlab.backend import _options

    assert _torch_private.default_opset() == _constants.ONNX_DEFAULT_OPSET
    assert _options.MAX_OPSET == _constants.ONNX_MAX_OPSET
    assert _options.MIN_OPSET <= _torch_private.default_opset() <= _options.MAX_OPSET
    # None and the default opset share one registry (built once).
    assert _torch_private.onnx_registry(_constants.ONNX_DEFAULT_OPSET) is (
        _torch_private.onnx_registry()
    )


@pytest.mark.parametrize(("opset", "gelu_ops"), [(18, {"Erf"}), (20, {"Gelu"})])
def test_translation_targets_the_requested_opset(opset, gelu_ops):
    gm = make_fx(torch.nn.functional.gelu, tracing_mode="symbolic")(torch.randn(3, 4))
    import onnx_ir as ir

    proto = ir.serde.serialize_model(
        _torch_private.translate_fx_graph(gm, name="g", opset_version=opset)
    )
    onnx.checker.check_model(proto, full_check=True)
    assert {o.version for o in proto.opset_import if o.domain == ""} == {opset}
    assert gelu_ops <= {n.op_type for n in proto.graph.node}


def test_warm_up_builds_what_a_later_compile_reuses():
    import ortlab.backend

    seconds = ortlab.backend.warm_up(19)  # an opset no other test builds
    assert seconds >= 0
    hits = _torch_private.onnx_registry.cache_info().hits
    decomp_hits = _torch_private.onnx_friendly_decompositions.cache_info().hits
    _torch_private.onnx_registry(19)
    _torch_private.onnx_friendly_decompositions(19)
    assert _torch_private.onnx_registry.cache_info().hits == hits + 1
    assert _torch_private.onnx_friendly_decompositions.cache_info().hits == decomp_hits + 1


def test_translated_ops_by_name_answer_as_the_registry_does():
    """What the support rules and the decomposition table ask of the registry, answered
    from the names alone (as read back from the compile cache)."""
    import json

    from torch._decomp import decomposition_table
    from torch.onnx._internal.exporter import _decomp

    registry = _torch_private.onnx_registry()
    names = json.loads(json.dumps(sorted(_torch_private.TranslatedOps.of(registry).names)))
    translated = _torch_private.TranslatedOps(names)
    ops = [*decomposition_table, *(m[0].fx_target for m in registry.functions.values())]
    ops += [operator.getitem, torch.ops.aten.add.Tensor, torch.ops.aten.add.default]
    assert len(translated) > 400
    assert [translated.is_registered(op) for op in ops] == [
        registry.is_registered(op) for op in ops
    ]
    from_names = _decomp.create_onnx_friendly_decomposition_table(translated)
    from_registry = _decomp.create_onnx_friendly_decomposition_table(
        set(_decomp.get_onnx_implemented_overloads(registry))
    )
    assert from_names.keys() == from_registry.keys()


def test_decomposition_table_keeps_registered_ops_whole():
    table = _torch_private.onnx_friendly_decompositions()
    assert torch.ops.aten.gelu.default not in table
    assert torch.ops.aten.sigmoid_backward.default in table


def test_lowering_table_has_fma_when_built_before_anything_imports_inductors_prims():
    # prims.fma exists once torch._inductor's prims are imported. Built first in a process
    # (ortlab.warm_up() before any compile), the table raised AttributeError.
    code = (
        "import torch\n"
        "from ortlab.backend import _torch_private\n"
        "assert not hasattr(torch.ops.prims, 'fma')\n"
        "table = _torch_private.lowering_decompositions()\n"
        "assert torch.ops.prims.fma.default in table\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_translation_keeps_symbols_as_dim_params_and_stamps_provenance():
    gm = make_fx(lambda x, y: (x @ y).relu(), tracing_mode="symbolic")(
        torch.randn(3, 4), torch.randn(4, 5)
    )
    model = _torch_private.translate_fx_graph(gm, name="g")
    import onnx_ir as ir

    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto)
    dims = [d for i in proto.graph.input for d in i.type.tensor_type.shape.dim]
    assert any(d.HasField("dim_param") for d in dims)
    stamped = [
        p.value
        for n in proto.graph.node
        for p in n.metadata_props
        if p.key == "pkg.torch.onnx.fx_node"
    ]
    assert any(s.startswith("%relu") for s in stamped)


def test_type_promotion_makes_mixed_dtypes_explicit():
    gm = make_fx(lambda x, i: x + i, tracing_mode="fake")(torch.randn(3), torch.arange(3))
    assert _export._needs_type_promotion(gm)
    _torch_private.insert_type_promotion(gm)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.prims.convert_element_type.default in targets


def test_type_promotion_is_skipped_for_single_float_dtype_graphs():
    gm = make_fx(lambda x: x.sin() * 2, tracing_mode="fake")(torch.randn(3))
    assert not _export._needs_type_promotion(gm)


def test_schema_defaults_are_filled_for_torchlib():
    gm = make_fx(lambda x: torch.ops.aten.amax.default(x), tracing_mode="fake")(
        torch.randn(3, 2)
    )
    work = _export.copy_graph_module(gm)
    _export._fill_schema_defaults(work)
    (amax,) = [n for n in work.graph.nodes if n.op == "call_function"]
    assert amax.kwargs == {"dim": [], "keepdim": False}
    # The original graph is untouched.
    (orig,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert orig.kwargs == {}


@pytest.mark.parametrize(
    ("fn", "args", "needed"),
    [
        (
            lambda c, x: torch.where(c, x, x * 2),
            (torch.tensor([True, False]), torch.randn(2)),
            False,
        ),
        (
            lambda w, i: torch.nn.functional.embedding(i, w),
            (torch.randn(5, 3), torch.tensor([1, 4])),
            False,
        ),
        (lambda i, j: i / j, (torch.tensor([3, 4]), torch.tensor([2, 2])), True),
        (lambda i: i * 0.5, (torch.tensor([3, 4]),), True),
        (lambda b: b.sum(), (torch.tensor([True, False]),), True),
        (lambda x, i: x + i, (torch.randn(2), torch.tensor([1, 2])), True),
        (lambda x: x.view(-1, 2).relu(), (torch.randn(4),), False),
    ],
    ids=["where", "embedding", "int-div", "int-times-float", "bool-sum", "mixed-add", "view"],
)
def test_type_promotion_runs_exactly_when_onnx_would_disagree(fn, args, needed):
    gm = make_fx(fn, tracing_mode="symbolic")(*args)
    assert _export._needs_type_promotion(gm) is needed


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (lambda i, j: i / j, (torch.tensor([3, 4]), torch.tensor([2, 2]))),
        (lambda i: i * 0.5 + 1, (torch.tensor([3, 5]),)),
        (lambda b: b.sum() + b.cumsum(0), (torch.tensor([True, False, True]),)),
    ],
)
def test_promoted_graphs_give_pytorch_dtypes_and_values(fn, args):
    import ortlab

    compiled = ortlab.compile(fn)
    got, want = compiled(*args), fn(*args)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    assert compiled.ortlab_backend.execution_count == 1


# -- used by the lab (numerics, bench, magic) ----------------------------------------------


def test_decomposition_table_leaves_lift_fresh_to_the_tracer():
    # The root cause of "Please convert all Tensors to FakeTensors first ... Found in
    # aten.alias.default(tensor([]))": lift_fresh decomposed before the tracer sees it.
    table = _torch_private.onnx_friendly_decompositions()
    names = {getattr(op, "_schema", None) and op._schema.name for op in table}
    assert "aten::lift_fresh" not in names and "aten::lift" not in names

    def f(x):
        return x * torch.tensor([1.0, 2.0])

    fake = torch._subclasses.fake_tensor.FakeTensorMode()
    with fake:
        x = fake.from_tensor(torch.randn(2))
        gm = make_fx(f, decomposition_table=table)(x)
    assert any("lift_fresh" in str(n.target) for n in gm.graph.nodes)


def test_functionalized_tracing_removes_in_place_ops_and_writes_inputs_back():
    def f(x, buf):
        h = x.relu()
        h.mul_(2)
        buf.add_(h)
        return h

    gm = make_fx(_torch_private.functionalized(f))(torch.randn(3), torch.zeros(3))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    mutating = [t for t in targets if t._schema.is_mutable]
    assert mutating == [torch.ops.aten.copy_.default]  # one write-back, into buf
    copy = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert copy.args[0] is placeholders[1]  # buf

    with pytest.raises(NotImplementedError, match="metadata"):
        make_fx(_torch_private.functionalized(lambda x: x.t_()))(torch.randn(2, 3))


def test_attention_as_math_traces_attention_without_fused_kernels():
    q = k = v = torch.randn(1, 2, 4, 8)

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    with _torch_private.attention_as_math():
        gm = make_fx(f)(q, k, v)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert not any("flash" in t or "efficient" in t for t in targets), targets
    assert any("softmax" in t for t in targets)
    torch.testing.assert_close(gm(q, k, v), f(q, k, v))
    plain = make_fx(f)(q, k, v)  # outside the context: the fused CPU kernel
    assert any("flash" in str(n.target) for n in plain.graph.nodes)


def test_attention_as_math_reaches_the_attention_inside_multi_head_attention_forward():
    """The mode is off while F.multi_head_attention_forward runs; its copy calls the
    math path through its module's global ``scaled_dot_product_attention``."""
    assert "scaled_dot_product_attention" in (
        torch.nn.functional.multi_head_attention_forward.__code__.co_names
    )
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 4, 8)

    def f(x):
        return mha(x, x, x, need_weights=False)[0]

    with _torch_private.attention_as_math():
        gm = make_fx(f)(x)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert not any("flash" in t for t in targets) and any("softmax" in t for t in targets)
    torch.testing.assert_close(gm(x), f(x))


@pytest.mark.parametrize("mask", ["bool", "bool, a fully masked row", "float", "causal"])
def test_attention_as_math_matches_attention_for_every_kind_of_mask(mask):
    q, k, v = (
        torch.randn(2, 4, 6, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)
    )
    attn_mask, causal = None, mask == "causal"
    if mask.startswith("bool"):
        attn_mask = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
        if "fully" in mask:
            attn_mask[0, 0, 2] = False
    elif mask == "float":
        attn_mask = torch.randn(2, 1, 6, 6)

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=causal, scale=0.3
        )

    expected = f(q, k, v)
    with _torch_private.attention_as_math():
        torch.testing.assert_close(f(q, k, v), expected)


def test_dynamo_graph_info_reads_the_frame_being_compiled():
    seen = []

    def backend(gm, example_inputs):
        seen.append(_torch_private.dynamo_graph_info(gm))
        return gm.forward

    def f(x):
        return x.sin()

    compiled = torch.compile(f, backend=backend)
    compiled(torch.randn(3))
    compiled(torch.randn(3, dtype=torch.float64))
    first, second = seen
    assert first.compile_id == "0/0" and second.compile_id == "0/1"
    assert first.seconds_in_dynamo is not None and first.seconds_in_dynamo > 0
    assert first.recompile_reason is None
    assert "dtype mismatch" in second.recompile_reason
    assert not first.graph_break and first.user_stack[-1][2] == "f"


def _infos_of(module: torch.nn.Module) -> list:
    seen = []

    def backend(gm, example_inputs):
        seen.append(_torch_private.dynamo_graph_info(gm))
        return gm.forward

    torch.compile(module, backend=backend)(torch.randn(3))
    return seen


def test_dynamo_records_a_break_inside_a_property_before_ending_the_graph_at_its_call():
    # dynamo_graph_info reads the callee's reason from torch._dynamo.utils'
    # graph_break_reasons, where Dynamo appends it just before "step_unsupported" when
    # forward is called through a decorator's wrapper, as transformers calls it.
    def wrapped(forward):
        def wrapper(self, *args):
            return forward(self, *args)

        return wrapper

    class M(torch.nn.Module):
        @property
        def scale(self):
            print("no scale set")
            return torch.sin

        @wrapped
        def forward(self, x):
            y = x.cos() + 1
            return self.scale(y), y

    first = _infos_of(M())[0]
    assert first.graph_break and first.end_reason.startswith("Failed to trace builtin")
    assert first.user_stack[-1][2:] == ("forward", "return self.scale(y), y")
    assert first.break_stack[-1][2:] == ("scale", 'print("no scale set")')


def test_a_break_inside_a_call_that_dynamo_did_not_record_says_so():
    class M(torch.nn.Module):
        @property
        def scale(self):
            print("no scale set")
            return torch.sin

        def forward(self, x):
            y = x.cos() + 1
            return self.scale(y), y

    first = _infos_of(M())[0]
    assert first.graph_break and first.end_reason.startswith("Dynamo could not trace")
    assert first.user_stack[-1][2:] == ("forward", "return self.scale(y), y")
    assert first.break_stack == ()


def test_dynamo_signals_are_the_restart_and_skip_exceptions():
    from torch._dynamo import exc

    signals = _torch_private.dynamo_signals()
    assert issubclass(exc.TensorifyScalarRestartAnalysis, signals)
    assert issubclass(exc.SkipFrame, signals)
    assert not issubclass(exc.BackendCompilerFailed, signals)


def test_registry_with_translations_is_a_copy():
    import onnxscript
    from onnxscript import opset18 as op

    @onnxscript.script()
    def fake_nms(boxes):
        return op.Identity(boxes)

    target = torch.ops.aten.convolution_backward.default  # has no translation
    base = _torch_private.onnx_registry()
    extended = _torch_private.registry_with(None, ((target, fake_nms),))
    assert extended.is_registered(target) and not base.is_registered(target)
    assert _torch_private.registry_with(None, ()) is base


def test_building_exporter_tables_twice_builds_nothing_the_second_time():
    _torch_private.build_exporter_tables(None)
    assert _torch_private.build_exporter_tables(None) is False


def test_registry_notices_about_torchvision_are_dropped_and_real_warnings_kept(caplog):
    import logging

    from torch.onnx._internal.exporter import _registration

    name = "torch.onnx._internal.exporter._registration"
    with caplog.at_level(logging.WARNING, logger=name):
        _registration.ONNXRegistry.from_torchlib()
    assert any("torchvision is not installed" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=name):
        with _torch_private.without_registry_notices():
            _registration.ONNXRegistry.from_torchlib()
            logging.getLogger(name).warning("a real problem")
    assert [r.getMessage() for r in caplog.records] == ["a real problem"]


def test_tree_helpers_flatten_map_and_name_nested_values():
    value = (torch.ones(1), {"a": 2, "b": [None, torch.zeros(2)]})
    leaves = _torch_private.tree_leaves(value)
    assert [type(v).__name__ for v in leaves] == ["Tensor", "int", "NoneType", "Tensor"]
    doubled = _torch_private.tree_map(lambda v: v * 2 if isinstance(v, int) else v, value)
    assert doubled[1]["a"] == 4 and doubled[0] is value[0]
    paths = [p for p, _ in _torch_private.tree_named_leaves(value)]
    assert paths == ["[0]", "[1]['a']", "[1]['b'][0]", "[1]['b'][1]"]
    assert _torch_private.tree_named_leaves(torch.ones(1))[0][0] == ""


def test_compiled_original_is_what_torch_compile_wrapped():
    net = torch.nn.Linear(2, 2)

    def fn(x):
        return x + 1

    assert _torch_private.compiled_original(torch.compile(net)) is net
    assert _torch_private.compiled_original(torch.compile(fn)) is fn
    assert _torch_private.compiled_original(net) is None
    assert _torch_private.compiled_original(fn) is None


def test_is_op_overload_tells_aten_overloads_from_python_callables():
    import operator

    assert _torch_private.is_op_overload(torch.ops.aten.add.Tensor)
    assert not _torch_private.is_op_overload(torch.ops.aten.add)  # the packet
    assert not _torch_private.is_op_overload(operator.getitem)


def test_dynamo_config_patch_applies_settings_and_reset_forgets_compiled_frames():
    before = torch._dynamo.config.recompile_limit
    with _torch_private.dynamo_config_patch({"recompile_limit": before + 1}):
        assert torch._dynamo.config.recompile_limit == before + 1
    assert torch._dynamo.config.recompile_limit == before

    calls = []

    def counting_backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    compiled = torch.compile(lambda x: x.sin(), backend=counting_backend)
    compiled(torch.ones(2))
    compiled(torch.ones(2))
    assert len(calls) == 1
    _torch_private.reset_dynamo()
    compiled(torch.ones(2))
    assert len(calls) == 2


@pytest.mark.parametrize("target", ["module", "function"])
def test_tracing_config_holds_while_dynamo_traces_and_nowhere_else(target):
    seen = []

    def backend(gm, example_inputs):
        seen.append(torch._dynamo.config.specialize_float)
        return gm.forward

    net = torch.nn.Linear(3, 3)
    model = net if target == "module" else (lambda x: net(x) * 2.0)
    compiled = _torch_private.compile_with_dynamo(
        model, backend, dynamic=True, fullgraph=False, specialize_floats=True
    )
    compiled(torch.ones(2, 3))
    assert seen == [True]
    assert torch._dynamo.config.specialize_float is False  # not left behind
    assert _torch_private.dynamo_backend_of(compiled) is backend
    assert _torch_private.compiled_original(compiled) is model
    plain = _torch_private.compile_with_dynamo(
        model, backend, dynamic=True, fullgraph=False, specialize_floats=False
    )
    plain(torch.ones(2, 3))
    assert seen == [True, False]


def test_tracing_config_of_nested_calls_is_undone_in_order():
    # A compiled callable re-entered while it runs (recursion through eager code) enters
    # its tracing config twice: each entry must undo its own change.
    backend = _torch_private._BackendWithTracingConfig(
        lambda gm, example_inputs: gm.forward, {"specialize_float": True}
    )
    outer, inner = backend.backend_ctx_ctor(), backend.backend_ctx_ctor()
    with outer:
        with inner:
            assert torch._dynamo.config.specialize_float is True
        assert torch._dynamo.config.specialize_float is True
    assert torch._dynamo.config.specialize_float is False


# -- the conformance generator's accessors -------------------------------------------------
def test_op_db_is_pytorchs_opinfo_database_with_samples_per_dtype():
    database = _torch_private.op_db()
    assert len(database) > 600
    (nll,) = [op for op in database if op.name == "nn.functional.nll_loss"]
    assert torch.float32 in nll.supported_dtypes("cpu") and nll.supports_autograd
    sample = next(iter(nll.sample_inputs("cpu", torch.float32, requires_grad=True)))
    assert sample.input.requires_grad
    strided = sample.noncontiguous().input
    assert not strided.is_contiguous() and strided.requires_grad
    assert _torch_private.op_db() is database  # imported once


def test_aot_function_hands_forward_and_backward_graphs_to_its_compilers():
    graphs = {}

    def compiler(kind):
        def compile(gm, example_inputs):
            graphs[kind] = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
            return _torch_private.make_boxed(gm.forward)

        return compile

    compiled = _torch_private.aot_function(
        lambda x: torch.nn.functional.nll_loss(x.log_softmax(-1), torch.tensor([1, 0])),
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        decompositions=_torch_private.onnx_friendly_decompositions(),
    )
    x = torch.randn(2, 3, requires_grad=True)
    compiled(x).backward()
    assert "aten.nll_loss_forward.default" in graphs["forward"]  # kept whole by the table
    assert graphs["backward"] and x.grad is not None


def test_registered_targets_names_overloads_as_node_targets_read():
    registry = _torch_private.onnx_registry()
    targets = _torch_private.registered_targets(registry)
    assert {"aten.add.Tensor", "aten.abs.default", "aten.nll_loss_forward.default"} <= set(
        targets
    )
    for text in targets[:50]:
        namespace, name, overload = text.split(".")
        op = getattr(getattr(getattr(torch.ops, namespace), name), overload)
        assert registry.is_registered(op), text


def test_this_torch_isolates_each_compile_s_recompiles():
    # torch 2.11 has no isolate_recompiles: compile_with_dynamo then compiles without it
    # (checked on 2.11); the pinned torch has it.
    assert _torch_private.isolates_recompiles()


def test_the_schema_and_promotion_helpers_read_torch_as_the_rewrites_need():
    sub, ints = torch.ops.aten.sub, torch.tensor([1, 2])
    assert not _torch_private.schema_accepts(sub.Tensor, (1.0, ints), {})
    assert _torch_private.schema_accepts(sub.Tensor, (ints, ints), {})
    assert _torch_private.schema_accepts(sub.Scalar, (ints, 1.0), {})
    assert _torch_private.promoted_dtype(1.0, ints) == torch.float32
    assert _torch_private.promoted_dtype(2, ints.to(torch.uint8)) == torch.uint8
    assert _torch_private.aot_user_outputs() is None  # outside AOTAutograd's compile


def test_the_exporter_picks_a_python_floats_dtype_where_the_swap_replaces_it():
    # _python_floats_as_double swaps _building._determine_input_dtype (param, arg,
    # type_binding) while a float64 graph is translated, and puts it back.
    import inspect

    from torch.onnx._internal.exporter import _building

    original = _building._determine_input_dtype
    assert list(inspect.signature(original).parameters) == ["param", "arg", "type_binding"]
    with _torch_private._python_floats_as_double():
        assert _building._determine_input_dtype is not original
    assert _building._determine_input_dtype is original
    with pytest.raises(RuntimeError), _torch_private._python_floats_as_double():
        raise RuntimeError("a failed translation")
    assert _building._determine_input_dtype is original


def test_inputs_share_memory_and_empty_tensors_are_read_without_guards():
    base = torch.arange(10.0)
    assert _torch_private.inputs_share_memory([base[:5], base[5:]])
    assert not _torch_private.inputs_share_memory([base, torch.arange(3.0), 2])
    assert _torch_private.surely_empty(torch.ones(3, 0))
    assert not _torch_private.surely_empty(torch.ones(3, 1))
    assert _torch_private.surely_same_shape(torch.ones(2, 3), torch.zeros(2, 3))
    assert not _torch_private.surely_same_shape(torch.ones(2, 3), torch.zeros(3, 2))


def test_legacy_reduction_reads_size_average_and_reduce_as_torch_does():
    assert _torch_private.legacy_reduction(None, None) == "mean"
    assert _torch_private.legacy_reduction(False, None) == "sum"
    assert _torch_private.legacy_reduction(None, False) == "none"


def test_rng_state_ops_are_the_checkpointing_higher_order_ops():
    save, replay = _torch_private.rng_state_ops()
    assert _torch_private.is_higher_order_op(save) and save.name() == "run_and_save_rng_state"
    assert _torch_private.is_higher_order_op(replay) and replay.name() == "run_with_rng_state"
    x = torch.randn(8)
    torch.manual_seed(0)
    state, (_, mask) = save(torch.ops.aten.native_dropout.default, x, 0.5, True)
    after = torch.get_rng_state()
    again = replay(state, torch.ops.aten.native_dropout.default, x, 0.5, True)
    assert torch.equal(again[1], mask) and torch.equal(torch.get_rng_state(), after)


class _SavedGraph(_torch_private.serializable_callable_base()):
    """A backend result that serializes itself as Dynamo's graph (module level: the
    capture pickles its class by name)."""

    def __init__(self, data):
        self.data = data

    @classmethod
    def serialize_compile_artifacts(cls, fn):
        return fn.data

    @classmethod
    def deserialize_compile_artifacts(cls, data):
        return cls(data)

    def __call__(self, *args):
        graph_module, mode = _torch_private.load_dynamo_graph(self.data)
        fakes = _torch_private.fake_static_inputs(mode, args)
        assert all(tuple(f.shape) == tuple(a.shape) for f, a in zip(fakes, args))
        return graph_module(*args)


def _linear_relu(model, x):
    return model(x).relu()


def test_a_capture_saves_and_loads_with_its_guards_and_the_backends_result():
    # The pieces ortlab.precompile relies on: a whole-graph capture with the guards torch
    # can save, the backend's result serializing itself, Dynamo's graph as bytes, and a
    # guard check the caller makes.
    graphs = []

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        with _torch_private.outside_aot_capture():
            assert not torch._functorch.config.bundled_autograd_cache
        return _SavedGraph(_torch_private.dump_dynamo_graph(graph_module))

    model, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    with torch.no_grad():
        captured, read = _torch_private.aot_capture(_linear_relu, (model, x), {}, backend)
        assert all(
            isinstance(name, str) and isinstance(kind, str) for name, kind, _, _ in read
        )
        assert "example_value" in next(iter(graphs[0].graph.nodes)).meta  # put back
        loaded = _torch_private.aot_load(
            _torch_private.aot_bytes(captured),
            _linear_relu,
            _torch_private.aot_installed_modules(captured, _linear_relu),
        )
        assert isinstance(_torch_private.aot_backend_result(loaded), _SavedGraph)
        assert _torch_private.aot_guards_pass(loaded, (model, x), {})
        torch.testing.assert_close(loaded(model, x), model(x).relu())
        other = torch.randn(5, 3)
        assert not _torch_private.aot_guards_pass(loaded, (model, other), {})
        assert "size" in _torch_private.aot_guard_failure(loaded, (model, other), {})
    assert _torch_private.aot_changed_sources(loaded) == []


def test_the_capture_is_told_apart_from_a_plain_compile_and_backends_are_found_by_name():
    seen = []

    def backend(graph_module, example_inputs):
        seen.append(_torch_private.under_aot_capture())
        return graph_module.forward

    x = torch.randn(2)
    torch.compile(lambda t: t + 1, backend=backend)(x)
    with torch.no_grad():
        try:
            _torch_private.aot_capture(_linear_relu, (torch.nn.Linear(2, 2), x), {}, backend)
        except RuntimeError:  # a plain function is no SerializableCallable
            pass
    assert seen == [False, True] and not _torch_private.under_aot_capture()
    from ortlab.backend._backend import torch_compile_backend

    assert _torch_private.registered_backend("ortlab") is torch_compile_backend
