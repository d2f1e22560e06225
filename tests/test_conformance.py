"""The conformance suite: known-bad translations are caught, findings fold and key as the
support rules read them, and the committed table agrees with a fresh run of the OpInfos
whose graphs hold the ATen ops the zoo and the corpus use (a drift guard)."""

from __future__ import annotations

import json
import re

import pytest
import torch

from ortlab.backend import _conformance, _conformance_node, _conformance_run, _torch_private

# OpInfos whose samples lower to the ATen ops of the teaching zoo's and the ci corpus's
# graphs (inference and training): listed once from those graphs, by name only.
ZOO_OPS = (
    "nn.functional.cross_entropy",
    "bmm",
    "nn.functional.layer_norm",
    "nn.functional.linear",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.embedding",
    "nn.functional.conv2d",
    "nn.functional.max_pool2d",
    "nn.functional.pad.constant",
    "softmax",
    "masked_fill",
    "index_put",
    "cat",
    "linalg.vector_norm",
    "rsqrt",
    "var",
    "argmax",
    "cumsum",
    "slice_scatter",
    "select_scatter",
    "permute",
    "clamp",
    "nn.functional.relu",
    "tanh",
    "sin",
    "log",
    "logical_not",
    "div.floor_rounding",
    "full_like",
    "ones_like",
    "new_ones",
)

KNOWN_BAD_OPS = (
    "nn.functional.nll_loss",
    "as_strided",
    "nn.functional.embedding_bag",
    "nn.functional.scaled_dot_product_attention",  # its last sample reaches the flash op
)


def _run(ops, **settings):
    return _conformance_run.generate(
        _conformance_run.Settings(ops=ops, dtypes=("float32",), **settings)
    )


def _lookup(table: _conformance.Table, target: str, dtype: str, form: str):
    """The finding of ``(target, dtype, form)`` whatever the node's variant (keys carry
    the modes and numbers an op takes): a failing one when any variant fails."""
    found = [
        finding
        for key, finding in table.rows.get(target, {}).items()
        if key == f"{dtype}/{form}" or key.startswith(f"{dtype}/{form}/")
    ]
    failing = [f for f in found if f.status == "fails"]
    return (failing or found or [_conformance.NOT_VERIFIED])[0]


def _known_bad_missed(table: _conformance.Table) -> list[str]:
    """What the table says wrongly about translations known to be bad ([] when right)."""
    missed = []
    nll = _lookup(table, "aten.nll_loss_forward.default", "float32", "contiguous")
    if nll.outputs != (1,) or "total_weight" not in nll.reason:
        missed.append(f"nll_loss_forward: {nll}")  # output 0 right, total_weight not
    strided = _lookup(table, "aten.as_strided.default", "float32", "strided")
    contiguous = _lookup(table, "aten.as_strided.default", "float32", "contiguous")
    if strided.status != "fails" or contiguous.status != "verified":
        missed.append(f"as_strided: strided {strided}, contiguous {contiguous}")
    bag = _lookup(table, "aten._embedding_bag.default", "float32", "contiguous")
    if not {1, 2, 3} & set(bag.outputs):  # offset2bag, bag_size, max_indices
        missed.append(f"_embedding_bag: {bag}")
    flash = _lookup(
        table,
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "float32",
        "contiguous",
    )
    if 1 not in flash.outputs or 0 in flash.outputs or "logsumexp" not in flash.reason:
        missed.append(f"flash attention: {flash}")  # the attention right, logsumexp not
    return missed


@pytest.fixture(scope="module")
def known_bad() -> _conformance.Table:
    return _run(KNOWN_BAD_OPS, samples=2)


def test_known_bad_translations_are_caught(known_bad):
    assert _known_bad_missed(known_bad) == []
    nll = _lookup(known_bad, "aten.nll_loss_forward.default", "float32", "contiguous")
    assert nll.fails_for((1,)) and not nll.fails_for((0,))
    assert nll.witness is not None and nll.witness.decompositions == "exporter"


def test_a_comparison_of_output_0_alone_would_miss_them(monkeypatch):
    # The mutation the known-bad test exists for: outputs past the first not compared.
    compare = _conformance_node.compare

    def first_only(call, actual, returned):
        return compare(call, actual[:1], returned[:1])

    monkeypatch.setattr(_conformance_node, "compare", first_only)
    table = _run(("nn.functional.nll_loss",), samples=1, noncontiguous=False)
    assert any("nll_loss_forward" in m for m in _known_bad_missed(table))


@pytest.fixture(scope="module")
def zoo_run() -> _conformance.Table:
    return _run(ZOO_OPS, samples=1)


_NUMBER = re.compile(r"\d+(\.\d+)?(e[-+]?\d+)?")


def test_committed_table_agrees_with_a_fresh_run_of_the_zoo_ops(zoo_run):
    committed = _conformance.table()
    assert committed.rows, "no conformance table in the package: run make conformance"
    assert committed.meta["versions"] == _conformance_run.versions(), (
        "the table was made with other versions: run make conformance"
    )
    notes = committed.meta.get("notes", {})
    assert not [op for op in ZOO_OPS if any("cut short" in n for n in notes.get(op, []))]
    drift = []
    for target, keyed in zoo_run.rows.items():
        for key, fresh in keyed.items():
            old = committed.rows.get(target, {}).get(key)
            if old is None:
                drift.append(f"{target} {key}: {fresh.status} now, not in the table")
            elif old.status == "verified" and fresh.status != "verified":
                drift.append(f"{target} {key}: verified in the table, now {fresh.reason}")
            elif fresh.status == "fails" and old.status != "fails":
                drift.append(f"{target} {key}: now fails ({fresh.reason})")
            elif old.status == "fails" and old.witness is not None:
                witness = old.witness
                ours = witness.op in ZOO_OPS and witness.dtype == "float32"
                if (
                    ours
                    and witness.sample == 0
                    and (
                        fresh.witness != witness
                        or _NUMBER.sub("#", fresh.reason) != _NUMBER.sub("#", old.reason)
                    )
                ):
                    drift.append(f"{target} {key}: {old.reason!r}, now {fresh}")
    assert not drift, "\n".join(drift)
    assert len(zoo_run.rows) > 60  # the subset reaches the zoo's ops


def test_the_committed_table_catches_the_known_bad_translations():
    assert _known_bad_missed(_conformance.table()) == []


# -- aggregation and keying ------------------------------------------------------------
def _witness(sample: int) -> _conformance.Witness:
    return _conformance.Witness("op", "float32", sample, False, "forward", "ortlab")


def _fold(*outcomes: _conformance_node.Outcome) -> _conformance.Finding:
    aggregate = _conformance_run.Aggregate()
    for sample, outcome in enumerate(outcomes):
        aggregate.add("aten.x.default", "float32", "contiguous", outcome, _witness(sample))
    return aggregate.finding("aten.x.default", "float32", "contiguous")


def test_a_key_is_verified_only_when_every_sample_agreed():
    ok = _conformance_node.Outcome(True, single=False)
    assert _fold(ok, ok) == _conformance.Finding("verified", samples=2)
    bad = _conformance_node.Outcome(False, "output 1 (b) differs", (1,), single=False)
    finding = _fold(ok, bad, ok)
    assert (finding.status, finding.outputs, finding.samples) == ("fails", (1,), 3)
    assert finding.witness == _witness(1)


def test_failures_keep_the_first_reason_and_the_union_of_bad_outputs():
    first = _conformance_node.Outcome(False, "output 2 differs", (2,), single=False)
    second = _conformance_node.Outcome(False, "output 1 differs", (1,), single=False)
    finding = _fold(first, second)
    assert (finding.reason, finding.outputs) == ("output 2 differs", (1, 2))
    assert finding.fails_for((1,)) and not finding.fails_for((0,))


def test_a_whole_node_failure_outranks_output_failures():
    output = _conformance_node.Outcome(False, "output 1 differs", (1,), single=False)
    whole = _conformance_node.Outcome(False, "SessionError: refused", (), single=False)
    finding = _fold(output, whole)
    assert (finding.reason, finding.outputs, finding.witness) == (
        "SessionError: refused",
        (),
        _witness(1),
    )
    assert finding.fails_for((0,))


def test_findings_round_trip_through_json_with_their_witness():
    finding = _conformance.Finding("fails", "r", (1,), 3, _witness(2))
    table = _conformance.Table({"aten.x.default": {"float32/strided": finding}}, {"a": 1})
    again = _conformance.Table.from_json(table.to_json())
    assert again.lookup("aten.x.default", "float32", "strided") == finding
    assert again.meta == {"a": 1}


def _call(target, *args, **kwargs):
    return _conformance_node.NodeCall(target, args, kwargs, target(*args, **kwargs))


def _key(call):
    return _conformance.node_key(_conformance_node.one_node_graph(call).node)


def test_one_node_graphs_are_keyed_by_their_inputs_strides_and_data_dtype():
    x = torch.randn(4, 6)
    assert _key(_call(torch.ops.aten.sin.default, x)) == ("float32", "contiguous")
    assert _key(_call(torch.ops.aten.sin.default, x.t())) == ("float32", "strided")
    assert _key(_call(torch.ops.aten.sin.default, x[1:])) == ("float32", "strided")
    where = _call(torch.ops.aten.where.self, x > 0, x.long(), x.long())
    assert _key(where) == ("int64", "contiguous")  # the data's dtype, not the mask's
    both = _call(torch.ops.aten.logical_and.default, x > 0, x < 1)
    assert _key(both) == ("bool", "contiguous")


def test_keys_carry_the_modes_and_number_classes_that_select_what_a_translation_does():
    """A translation wrong for one mode (scatter_reduce's 'mean') or one class of numbers
    (a fractional upsampling scale) must not reject the op's other uses."""
    x, index = torch.randn(4, 3), torch.tensor([[0, 1, 0], [1, 0, 1], [0, 0, 1], [1, 1, 0]])
    scatter = torch.ops.aten.scatter_reduce.two
    mean = _key(_call(scatter, x, 0, index, x, "mean"))
    amax = _key(_call(scatter, x, 0, index, x, "amax", include_self=False))
    assert mean == ("float32", "contiguous/reduce='mean',include_self=True")
    assert amax == ("float32", "contiguous/reduce='amax',include_self=False")
    # Numbers by class: 0, 1, -1, nan, inf, an integer, a fraction; defaults filled in.
    add = torch.ops.aten.add.Tensor
    assert _key(_call(add, x, x)) == ("float32", "contiguous/alpha=1")
    assert _key(_call(add, x, x, alpha=2.5)) == ("float32", "contiguous/alpha=frac")
    assert _key(_call(add, x, x, alpha=7)) == ("float32", "contiguous/alpha=int")
    assert _key(_call(torch.ops.aten.sin.default, x)) == ("float32", "contiguous")
    assert _conformance.describe_key(amax) == (
        "float32, contiguous inputs with reduce='amax',include_self=False"
    )
    assert _conformance.describe_key(("bool", "strided")) == "bool, strided inputs"


def test_a_table_of_another_format_is_not_read(tmp_path, monkeypatch, caplog):
    old = tmp_path / "conformance.json"
    old.write_text(json.dumps({"format": _conformance.FORMAT - 1, "meta": {}, "rows": {}}))
    monkeypatch.setattr(_conformance, "TABLE_FILE", str(old))
    _conformance.table.cache_clear()
    try:
        assert _conformance.table() is _conformance.EMPTY
        assert "make conformance" in caplog.text
    finally:
        _conformance.table.cache_clear()


def test_cache_key_ignores_values_but_not_constants():
    x, y = torch.randn(3), torch.randn(3)
    same = _conformance_node.cache_key(_call(torch.ops.aten.add.Tensor, x, y))
    assert same == _conformance_node.cache_key(_call(torch.ops.aten.add.Tensor, y, x))
    scaled = _conformance_node.cache_key(
        _conformance_node.NodeCall(torch.ops.aten.add.Tensor, (x, y), {"alpha": 2}, x)
    )
    assert scaled != same


@pytest.fixture(scope="module")
def checker():
    return _conformance_node.Checker(_torch_private.onnx_registry())


def _check(checker, call):
    return checker.check(call, _conformance_node.one_node_graph(call))


def test_every_output_is_compared_and_named_from_the_schema(checker):
    logits = torch.randn(8, 5).log_softmax(-1)
    target = torch.randint(0, 5, (8,))
    # reduction=mean, ignore_index=-100: total_weight is 8, torchlib returns 1
    call = _call(torch.ops.aten.nll_loss_forward.default, logits, target, None, 1, -100)
    outcome = _check(checker, call)
    assert (outcome.ok, outcome.outputs, outcome.single) == (False, (1,), False)
    assert outcome.reason.startswith("output 1 (total_weight) differs: max abs error 7")


def test_tied_indices_pick_the_same_values(checker):
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    call = _call(torch.ops.aten.max.dim, x, 1)
    ort_like = torch.tensor([2, 1])  # another of the tied elements
    assert _conformance_node.picks_tied_values(call, 1, ort_like)
    assert not _conformance_node.picks_tied_values(call, 1, torch.tensor([0, 1]))
    assert _check(checker, call).ok


def test_uninitialized_outputs_compare_shape_and_dtype_only(checker):
    call = _call(torch.ops.aten.empty_like.default, torch.randn(2, 3))
    assert _check(checker, call).ok


def test_samples_spread_over_the_opinfo_from_its_first():
    assert _conformance_run.spread(25, 3) == [0, 12, 24]
    assert _conformance_run.spread(2, 3) == [0, 1]
    assert _conformance_run.spread(10, 1) == [0]


def test_a_float64_result_of_float32_inputs_is_held_to_float32s_tolerance():
    # sum(x, dtype=float64) of float32 x: torchlib sums in float32, then casts
    exact = torch.tensor([1.0], dtype=torch.float64)
    rounded = exact + 5e-5
    assert _conformance_node.difference(rounded, exact) != ""
    assert _conformance_node.difference(rounded, exact, computed_in=torch.float32) == ""
    assert _conformance_node.difference(rounded + 1, exact, computed_in=torch.float32)


def test_nodes_with_a_value_the_runtime_cannot_carry_are_filed_only_under_its_dtype():
    x = torch.randn(3)
    to_complex = _conformance_node.NodeCall(
        torch.ops.aten._to_copy.default,
        (x,),
        {"dtype": torch.complex64},
        x.to(torch.complex64),
    )
    assert _conformance_node.foreign_dtype(to_complex, torch.float32) == torch.complex64
    assert (
        _conformance_node.foreign_dtype(_call(torch.ops.aten.sin.default, x), torch.float32)
        is None
    )


def test_calls_with_an_empty_input_are_filed_apart(checker):
    # ONNX Runtime's Gemm ignores beta when the inner dim is 0: filed under addmm's key,
    # that edge would reject every nn.Linear
    bias, a, b = torch.randn(4), torch.randn(3, 0), torch.randn(0, 4)
    call = _conformance_node.NodeCall(
        torch.ops.aten.addmm.default,
        (bias, a, b),
        {"beta": 0.5},
        torch.ops.aten.addmm.default(bias, a, b, beta=0.5),
    )
    keyed, apart = _conformance_run.Aggregate(), _conformance_run.Aggregate()
    ctx = _conformance_run._Context(checker, keyed, apart, _witness(0))
    _conformance_run._check(call, "inference", "ortlab", ctx)
    assert not keyed.keys
    (finding,) = apart.rows()["aten.addmm.default"].values()
    assert finding.status == "fails" and "differs" in finding.reason


def test_the_command_line_writes_the_table_and_its_coverage(tmp_path, capsys):
    from ortlab import cli

    out = tmp_path / "table.json"
    docs = tmp_path / "conformance.md"
    argv = ["conformance", "--ops", "nn.functional.relu", "--samples", "1"]
    assert (
        cli.main([*argv, "--dtypes", "float32", "--out", str(out), "--docs", str(docs)]) == 0
    )
    table = _conformance.Table.from_json(out.read_text())
    assert table.lookup("aten.relu.default", "float32", "contiguous").status == "verified"
    assert table.meta["settings"]["ops"] == ["nn.functional.relu"]
    assert "## Failing translations" in docs.read_text()
    printed = capsys.readouterr()
    assert "keys (op, dtype, form)" in printed.out
    assert "[1/1] nn.functional.relu" in printed.err
