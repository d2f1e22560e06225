"""Verdict rules: every call_function node is decided with a reason a person can act on."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ortlab import OrtBackendOptions
from ortlab.backend import _support, _torch_private


@pytest.fixture(scope="module")
def registry():
    return _torch_private.onnx_registry()


def _verdicts(fn, *args, registry, **facts):
    if "excluded_ops" in facts:  # resolved as the options resolve them
        excluded = facts["excluded_ops"]
        facts["excluded_ops"] = OrtBackendOptions(excluded_ops=excluded).excluded_ops
    gm = make_fx(fn, tracing_mode="fake")(*args)
    support = _support.OrtOperatorSupport(_support.Facts(registry=registry, **facts))
    return {n.name: support.verdict(n) for n in gm.graph.nodes if n.op == "call_function"}, gm


def test_registered_ops_are_supported(registry):
    verdicts, _ = _verdicts(lambda x: x.sin() + 1, torch.randn(3), registry=registry)
    assert all(v.supported for v in verdicts.values())
    assert {v.target for v in verdicts.values()} == {"aten.sin.default", "aten.add.Tensor"}


def test_getitem_follows_its_producer(registry):
    def f(x):
        values, indices = torch.sort(x)
        return values, indices

    verdicts, gm = _verdicts(f, torch.randn(5), registry=registry)
    getitems = [n for n in gm.graph.nodes if n.target is operator.getitem]
    assert getitems and all(verdicts[n.name].supported for n in getitems)
    assert "supported node" in verdicts[getitems[0].name].reason

    excluded, gm2 = _verdicts(
        f, torch.randn(5), registry=registry, excluded_ops=("aten.sort",)
    )
    for n in gm2.graph.nodes:
        if n.target is operator.getitem:
            assert not excluded[n.name].supported
            assert "runs in PyTorch" in excluded[n.name].reason


def test_mutating_ops_stay_eager(registry):
    def f(x):
        y = x.clone()
        y.add_(1)
        return y

    verdicts, _ = _verdicts(f, torch.randn(3), registry=registry)
    add_ = next(v for v in verdicts.values() if v.target == "aten.add_.Tensor")
    assert not add_.supported and "in place" in add_.reason


def test_unmappable_dtypes_stay_eager(registry):
    verdicts, _ = _verdicts(
        lambda x: x * 2, torch.randn(3, dtype=torch.complex64), registry=registry
    )
    (v,) = verdicts.values()
    assert not v.supported and "complex64" in v.reason


def test_random_ops_stay_eager_but_attention_without_dropout_runs(registry):
    verdicts, _ = _verdicts(
        lambda x: torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x),
        torch.randn(4),
        registry=registry,
    )
    rng = [v for v in verdicts.values() if "random op" in v.reason]
    assert rng, verdicts

    q = torch.randn(1, 2, 4, 8)
    attn, _ = _verdicts(
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
        q,
        q,
        q,
        registry=registry,
    )
    sdpa = [v for v in attn.values() if "scaled_dot_product" in v.target]
    assert sdpa and all(v.supported for v in sdpa), attn


def test_symbolic_scalars_and_assertions_stay_in_python(registry):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def f(x):
        n = x.shape[0]
        return x.view(n * 2, -1)

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(4, 6), static_shapes=False)
    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 6))
    support = _support.OrtOperatorSupport(_support.Facts(registry=registry))
    verdicts = [support.verdict(n) for n in gm.graph.nodes if n.op == "call_function"]
    scalar = [v for v in verdicts if "Python/symbolic scalar" in v.reason]
    assert scalar and all(not v.supported for v in scalar)
    del x


def test_unregistered_ops_name_the_registry(registry):
    from torch.fx import Graph, GraphModule

    graph = Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten._cdist_forward.default, (x, x, 2.0, None))
    node.meta["val"] = torch.empty(2, 2, device="meta")
    graph.output(node)
    gm = GraphModule(torch.nn.Module(), graph)
    support = _support.OrtOperatorSupport(_support.Facts(registry=registry))
    verdict = support.verdict(next(n for n in gm.graph.nodes if n.op == "call_function"))
    assert not verdict.supported and "torchlib" in verdict.reason


@pytest.mark.parametrize(
    "excluded",
    [
        torch.ops.aten.sin.default,
        torch.ops.aten.sin,
        "aten.sin",
        "aten::sin",
        "aten.sin.default",
    ],
)
def test_excluded_ops_accept_overloads_packets_and_names(registry, excluded):
    verdicts, _ = _verdicts(
        lambda x: x.sin().cos(), torch.randn(3), registry=registry, excluded_ops=(excluded,)
    )
    by_target = {v.target: v for v in verdicts.values()}
    assert not by_target["aten.sin.default"].supported
    assert by_target["aten.cos.default"].supported


def _table(target, key, **row):
    from ortlab.backend import _conformance

    return _conformance.Table({target: {key: _conformance.Finding(**row)}}, {})


_SORT = "aten.sort.default"


def _sort_output_1_fails():
    """A table saying sort's translation is wrong on output 1 (indices) for float32."""
    return _table(
        _SORT,
        "float32/contiguous/descending=False",
        status="fails",
        reason="output 1 differs",
        outputs=(1,),
    )


def test_a_translation_conformance_rejects_stays_eager_only_when_its_bad_output_is_used(
    registry,
):
    """A wrong auxiliary output only matters when the graph reads it (AOTAutograd saves
    such outputs for the backward)."""
    target, table = _SORT, _sort_output_1_fails()
    x = torch.randn(6)
    used, _ = _verdicts(lambda x: torch.sort(x), x, registry=registry, conformance=table)
    sort = next(v for v in used.values() if v.target == target)
    assert not sort.supported and sort.rule == "disagrees-with-pytorch"
    assert "output 1 differs" in sort.reason and "float32, contiguous" in sort.reason
    unused, _ = _verdicts(lambda x: torch.sort(x)[0], x, registry=registry, conformance=table)
    sort = next(v for v in unused.values() if v.target == target)
    assert sort.supported and sort.rule == "translated"


def test_a_custom_translation_is_the_users_word_not_the_tables(registry):
    """The table checks the exporter's translations: an op the user translates runs with
    that translation, whatever the table says about torchlib's (an override of as_strided
    or of sort must reach ONNX Runtime)."""
    target, table = _SORT, _sort_output_1_fails()
    x = torch.randn(6)
    for custom in (torch.ops.aten.sort.default, torch.ops.aten.sort):
        verdicts, _ = _verdicts(
            lambda x: torch.sort(x),
            x,
            registry=registry,
            conformance=table,
            custom_ops=frozenset({custom}),
        )
        sort = next(v for v in verdicts.values() if v.target == target)
        assert sort.supported and sort.rule == "custom-translation", sort
        assert "custom_translations[aten.sort.default]" in sort.reason


def test_verified_translations_say_so_and_unsampled_forms_say_not_verified(registry):
    table = _table("aten.sin.default", "float32/contiguous", status="verified", samples=3)
    verdicts, _ = _verdicts(
        lambda x, y: (x.sin(), y.sin(), x.t().sin()),
        torch.randn(3, 2),
        torch.randn(3, 2, dtype=torch.float16),
        registry=registry,
        conformance=table,
    )
    by_rule = {}
    for v in verdicts.values():
        if v.target == "aten.sin.default":
            by_rule.setdefault(v.rule, []).append(v.reason)
    assert len(by_rule["verified"]) == 1 and "3 sample(s)" in by_rule["verified"][0]
    assert sorted(by_rule["translated"]) == sorted(
        [
            "translated by the exporter's registry (torchlib); not verified against "
            "PyTorch for float16, contiguous inputs",
            "translated by the exporter's registry (torchlib); not verified against "
            "PyTorch for float32, strided inputs",
        ]
    )


def test_a_kernel_missing_on_the_cpu_rejects_only_nodes_on_the_cpu(registry):
    """The conformance suite runs on ONNX Runtime's CPU provider, which has few bfloat16
    kernels. A missing kernel there said nothing of CUDA, whose provider has them: 102
    nodes of a Llama trained under CUDA bfloat16 autocast ran in PyTorch, in 26 forward
    partitions. Traced on fake CUDA tensors (no GPU needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    table = _table(
        "aten.mm.default",
        "bfloat16/contiguous",
        status="fails",
        reason="SessionError: onnxruntime refused the model (NotImplemented: "
        "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
        "MatMul(13) node)",
        samples=4,
        failures=4,
        errors_only=True,
    )
    with FakeTensorMode():
        on_cuda = torch.empty(4, 4, dtype=torch.bfloat16, device="cuda")
    on_cpu = torch.empty(4, 4, dtype=torch.bfloat16)
    rules = {}
    for device, x in (("cpu", on_cpu), ("cuda", on_cuda)):
        verdicts, _ = _verdicts(torch.mm, x, x, registry=registry, conformance=table)
        (mm,) = [v for v in verdicts.values() if v.target == "aten.mm.default"]
        rules[device] = (mm.supported, mm.rule, mm.reason)
    assert rules["cpu"][:2] == (False, "disagrees-with-pytorch")
    assert rules["cuda"][:2] == (True, "translated")
    expected = "not verified against PyTorch for bfloat16, contiguous inputs on cuda"
    assert expected in rules["cuda"][2]


def test_a_whole_node_failure_rejects_every_use(registry):
    table = _table(
        "aten.sin.default", "float32/contiguous", status="fails", reason="session refused"
    )
    verdicts, _ = _verdicts(
        lambda x: x.sin() + 1, torch.randn(3), registry=registry, conformance=table
    )
    by_target = {v.target: v for v in verdicts.values()}
    assert not by_target["aten.sin.default"].supported
    assert by_target["aten.add.Tensor"].supported


def test_the_rules_are_named_documented_and_ordered():
    names = [r.name for r in _support.RULES]
    assert len(names) == len(set(names))
    assert all(r.doc for r in _support.RULES), [r.name for r in _support.RULES if not r.doc]
    # The session stage overrides everything; the partition stage comes last.
    assert _support.RULES[0].stage == "session"
    assert _support.RULES[-1].stage == "partition"
    assert names.index("no-translation") < names.index("disagrees-with-pytorch")
    assert names.index("disagrees-with-pytorch") < names.index("verified")
    assert names[-2] == "translated"  # the last node rule always decides


def test_every_verdict_names_the_rule_that_decided(registry):
    verdicts, _ = _verdicts(
        lambda x: x.sin().add_(1),
        torch.randn(3),
        registry=registry,
        excluded_ops=("aten.sin",),
    )
    assert {v.target: v.rule for v in verdicts.values()} == {
        "aten.sin.default": "excluded-by-user",
        "aten.add_.Tensor": "in-place",
    }


def test_plainness_is_decided_without_guards():
    """Tensor.is_contiguous() on a symbolic fake tensor can guard its sizes: keying nodes
    for conformance once made a dynamic encoder layer recompile at its second batch size
    (tests/test_fusions.py's later-size test caught it)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = mode.from_tensor(torch.randn(4, 6), static_shapes=False)
    assert _torch_private.surely_plain(x)
    assert not _torch_private.surely_plain(x.t())
    assert not _torch_private.surely_plain(x[1:])
    assert _torch_private.surely_plain(torch.empty(5, 0).t())  # no elements: plain
    assert not env.guards


def test_as_strided_on_a_non_contiguous_graph_input_stays_in_pytorch_and_is_right():
    """ONNX Runtime receives a contiguous copy of a non-contiguous input, so an as_strided
    that reads the input's memory cannot run there (the storage-reader rule)."""
    import ortlab

    def fn(a):
        return a.as_strided((2, 3), (1, 4)) * 2

    x = torch.arange(12.0).reshape(3, 4).t()
    compiled = ortlab.compile(fn)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
    (graph,) = compiled.ortlab_backend.graphs
    verdict = graph.verdict("as_strided")
    assert not verdict.supported and verdict.rule == "storage-reader"
    assert graph.verdict("mul").supported


def test_attention_whose_logsumexp_is_used_stays_eager_even_without_a_conformance_row(
    registry,
):
    """torchlib returns zeros for logsumexp; the backward reads it (MultiheadAttention's
    training gradients were off by 47-140 while only the conformance table could say so
    and had no row for it)."""
    from ortlab.backend import _conformance

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    q = torch.randn(1, 2, 4, 8)
    empty = _conformance.Table({}, {})
    used, _ = _verdicts(lambda q: op(q, q, q), q, registry=registry, conformance=empty)
    attn = next(v for v in used.values() if "flash_attention" in v.target)
    assert not attn.supported and attn.rule == "placeholder-outputs"
    assert "logsumexp" in attn.reason
    unused, _ = _verdicts(lambda q: op(q, q, q)[0], q, registry=registry, conformance=empty)
    assert next(v for v in unused.values() if "flash_attention" in v.target).supported


def test_multihead_attention_trains_with_eager_gradients():
    import ortlab

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = torch.randn(2, 4, 16, requires_grad=True)

    def fn(m, x):
        return m(x, x, x, need_weights=False)[0]

    compiled = ortlab.compile(mha)
    out = compiled(x, x, x, need_weights=False)[0]
    out.pow(2).sum().backward()
    got = [p.grad.clone() for p in mha.parameters()]
    mha.zero_grad()
    fn(mha, x).pow(2).sum().backward()
    for g, p in zip(got, mha.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attention",
    [
        lambda q: torch.ops.aten._scaled_dot_product_flash_attention(q, q, q)[0],
        lambda q: torch.ops.aten._scaled_dot_product_efficient_attention(q, q, q, None, False)[
            0
        ],
    ],
    ids=["flash", "efficient"],
)
def test_outputs_the_graph_does_not_read_do_not_decide(attention, registry):
    """CUDA's attention kernels also return sizes (integers) and their RNG state
    (uint64); a graph that reads the attention output alone runs it in ONNX Runtime."""
    q = torch.empty(1, 2, 8, 16, device="meta")
    verdicts, _ = _verdicts(attention, q, registry=registry)
    (op,) = [v for v in verdicts.values() if "attention" in v.target]
    assert op.supported, op.reason
