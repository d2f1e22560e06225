"""The public-architecture corpus through ortlab: the fast (ci) subset compiled for real
(inference, the decoder's cached decode step, training with each model's own loss), the
training check against backends that get gradients wrong, and the coverage and
corpus-benchmark logic on synthetic rows (no compile)."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import math
import types

import pandas as pd
import pytest
import torch
from torch.nn import functional as F

from ortlab import cli, errors, zoo
from ortlab.backend import records
from ortlab.bench import (
    COLUMNS,
    BenchResult,
    _corpus,
    _coverage,
    _coverage_report,
    _format,
    _grads,
)

CI = zoo.corpus_names(ci=True)

CI_TRAIN_STEPS = _grads.TRAIN_STEPS
"""The ci models train as many steps as ``make corpus`` trains them (the compile, not
the steps, is what a model costs: 7 models x 10 steps add about 20 s)."""


def test_each_corpus_model_starts_on_a_settled_heap(monkeypatch):
    # A full collection walking the earlier models' objects landed in a later model's
    # first call (0.6-1.0 s by the sixth model), often between its timed steps.
    frozen = []

    def cover(spec, **_):
        frozen.append((spec.name, gc.get_freeze_count() > 0))
        return _coverage.CoverageRow(model=spec.name, family=spec.family)

    monkeypatch.setattr(_coverage, "cover_model", cover)
    rows = _coverage.run_coverage(["resnet_tiny", "bert"], timing=None)
    assert [r.model for r in rows] == ["resnet_tiny", "bert"]
    assert frozen == [("resnet_tiny", True), ("bert", True)]
    assert gc.get_freeze_count() == 0


# --- the ci subset, compiled -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", CI)
def test_ci_corpus_model_compiles_and_matches_eager_including_the_decode_step(name):
    spec = zoo.get(name)
    row = _coverage.cover_model(spec, train_steps=0, timing=None)

    assert row.crashes == []
    assert row.fell_back == [] and row.failed_partitions == []
    assert row.output_passed, f"max abs error {row.output_error}"
    if spec.followup_inputs is not None:
        # The decode step (a key/value cache) is a graph of its own, and right.
        assert row.decode_graphs is not None and row.decode_graphs >= 1
        assert row.decode_passed, f"decode step max abs error {row.decode_error}"
    else:
        assert row.decode_graphs is None
    # Compiled for the shapes of its first call (torch.compile's default), every ci model
    # is one ONNX Runtime partition holding every node: no size arithmetic is left over.
    assert row.one_partition and row.eager_nodes == 0, row.eager_ops
    assert row.nodes_in_ort == row.nodes > 0
    # A larger batch: Dynamo compiles the model once more with that size symbolic, and
    # the symbolic graph is one partition too (its size arithmetic stays in Python).
    assert row.other_batch == 4 and row.other_batch_passed, row.other_batch_error
    assert row.other_batch_graphs == 1 and row.other_batch_one_partition


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CI if zoo.get(n).trainable])
def test_ci_corpus_model_trains_with_its_own_loss_like_eager(name):
    spec = zoo.get(name)
    report = _grads.check_gradients(spec, ("ortlab",), steps=CI_TRAIN_STEPS)

    # The model's own loss, computed inside the compiled call from the labels.
    assert spec.objective is not None and report.objective == spec.objective.loss
    assert report.eager_error is None and report.fp64_error is None
    eager = report.eager_losses
    assert len(eager) == CI_TRAIN_STEPS and eager[-1] < eager[0], eager  # it learns
    # Every ci model stays within float32's horizon: every step is judged.
    assert report.horizon == CI_TRAIN_STEPS, (eager, report.fp64_losses)
    check = report.checks["ortlab"]
    assert check.error is None and check.steps == CI_TRAIN_STEPS
    assert check.output_passed, f"loss error at the same weights {check.output_error}"
    assert check.loss_passed, (check.loss_deviation, check.losses, eager)
    assert check.grads_passed, _coverage_report.grad_cell(check)
    graphs = report.graphs["ortlab"]
    assert {g.kind for g in graphs} >= {"forward", "backward"}
    assert all(g.error is None for g in graphs), [g.error for g in graphs]
    assert all(p.error is None for g in graphs for p in g.partitions)
    assert not report.recompiled["ortlab"], "a later step compiled new graphs"


# --- the training check against backends that get gradients wrong -----------------------


class _Classifier(torch.nn.Module):
    """Two linear layers and a cross-entropy with mean reduction, as a classifier with
    labels computes its loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.fc2(torch.tanh(self.fc1(x)))
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def _classifier_spec() -> zoo.ZooModel:
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return _Classifier().eval()

    def inputs(batch: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(1)
        return {
            "x": torch.randn(batch, 8, generator=g),
            "labels": torch.randint(0, 4, (batch,), generator=g),
        }

    objective = zoo.Objective("cross-entropy", "_Classifier", build, inputs)
    return dataclasses.replace(zoo.get("mlp"), objective=objective)


def _scaling_backend(scale: float):
    """A torch.compile backend whose backward returns every gradient ``scale`` times too
    large: what a translation with a wrong ``total_weight`` did to a mean cross-entropy."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def backward(gm, _):
        def run(*args):
            return [scale * g if isinstance(g, torch.Tensor) else g for g in gm(*args)]

        return make_boxed_func(run)

    return aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm), bw_compiler=backward)


_SCALED = {"grads_x2": 2.0, "grads_x1": 1.0}
for _name, _scale in _SCALED.items():
    if _name not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(_scaling_backend(_scale), name=_name)


def test_a_backend_that_doubles_the_gradients_fails_the_loss_trajectory_and_the_gradients():
    report = _grads.check_gradients(_classifier_spec(), ("grads_x2", "grads_x1"), steps=10)

    assert report.eager_error is None and report.objective == "cross-entropy"
    eager = report.eager_losses
    assert report.horizon == 10 and eager[-1] < 0.9 * eager[0]
    right, doubled = report.checks["grads_x1"], report.checks["grads_x2"]
    # The control: the same backend without the scale trains like eager.
    assert right.passed and right.loss_deviation < 1e-5 and right.vs_eager < 1e-5
    # Doubled: the forward is right (same loss at the same weights), the loss falls
    # faster than eager's from the second step on, every step's gradients are off by 1.0
    # of their scale.
    assert doubled.output_passed and doubled.losses[0] == pytest.approx(eager[0], rel=1e-6)
    assert doubled.loss_verdict == _grads.VERDICT_FAIL and not doubled.passed
    assert doubled.loss_deviation > 10 * _grads.LOSS_RTOL
    assert all(d < e for d, e in zip(doubled.losses[1:], eager[1:], strict=True))
    assert doubled.verdict == _grads.VERDICT_FAIL
    assert doubled.vs_eager == pytest.approx(1.0, rel=1e-3)


def test_the_loss_is_read_from_a_model_output_or_a_mapping():
    loss = torch.tensor(0.5)
    assert _grads.model_loss({"loss": loss, "logits": torch.zeros(2)}) is loss
    assert _grads.model_loss(types.SimpleNamespace(loss=loss)) is loss
    with pytest.raises(errors.OrtlabError, match="has no loss"):
        _grads.model_loss({"logits": torch.zeros(2)})  # called without its labels


# --- corpus selection --------------------------------------------------------------------


def test_select_understands_all_ci_families_and_names():
    assert _coverage.select(None) == zoo.corpus_names()
    assert _coverage.select("all") == zoo.corpus_names()
    assert _coverage.select("ci") == CI
    assert _coverage.select("decoder") == zoo.corpus_names("decoder")
    assert _coverage.select("bert, gpt2,bert") == ("bert", "gpt2")
    assert _coverage.select(["ci", "resnet18"]) == (*CI, "resnet18")
    assert _coverage.select(["ci", "resnet18,mobilenet_v2"]) == (
        *CI,
        "resnet18",
        "mobilenet_v2",
    )


@pytest.mark.parametrize("bad", ["no_such_model", "mlp", " , "])
def test_select_rejects_unknown_names_teaching_models_and_nothing(bad):
    with pytest.raises(errors.UnsupportedOptionError):
        _coverage.select(bad)


# --- records -> coverage facts -----------------------------------------------------------


def _graph(verdicts, partitions=(), error=None, symbolic=()):
    """A GraphRecord whose graph module holds one node per verdict; nodes named in
    ``symbolic`` carry a SymInt-like (int) value."""
    graph = torch.fx.Graph()
    for v in verdicts:
        node = graph.create_node("call_function", torch.neg, (), name=v.node)
        node.meta["val"] = 3 if v.node in symbolic else torch.zeros(1)
    graph.output(None)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    parts = [
        records.PartitionRecord(name, 0, "inference", gm, node_names=nodes, error=err)
        for name, nodes, err in partitions
    ]
    return records.GraphRecord(
        0, "inference", gm, partitions=parts, verdicts=list(verdicts), error=error
    )


def _v(node, target, supported, reason="translated"):
    return records.Verdict(node, target, supported, reason)


def test_eager_ops_group_by_reason_with_stable_op_names():
    g = _graph(
        [
            _v("a", "aten.add.Tensor", True),
            _v("m1", "<built-in function mul>", False, "size arithmetic"),
            _v("m2", "<built-in function mul>", False, "size arithmetic"),
            _v("s", "<function sym_sum at 0x7f00e6ed1120>", False, "size arithmetic"),
            _v("i", "aten._local_scalar_dense.default", False, ".item()"),
            _v("c", "aten.conv.default", True),
        ],
        partitions=[("fused_0", ("a",), None), ("fused_1", ("c",), "ExportError: boom\nmore")],
    )
    assert _coverage.eager_ops([g]) == {
        "size arithmetic": {"mul": 2, "sym_sum": 1},
        ".item()": {"aten._local_scalar_dense.default": 1},
        "partition fell back: ExportError: boom": {"aten.conv.default": 1},
    }


def test_one_partition_needs_one_graph_one_ort_partition_and_nothing_eager():
    clean = _graph([_v("a", "aten.add.Tensor", True)], [("fused_0", ("a",), None)])
    assert _coverage.one_partition([clean])
    assert not _coverage.one_partition([clean, clean])
    failed = _graph([_v("a", "aten.add.Tensor", True)], [("fused_0", ("a",), "boom")])
    assert not _coverage.one_partition([failed])
    sizes = _graph(
        [_v("a", "aten.add.Tensor", True), _v("m", "<built-in function mul>", False)],
        [("fused_0", ("a",), None)],
        symbolic=("m",),
    )
    assert not _coverage.one_partition([sizes])
    assert _coverage.one_partition_but_sizes([sizes])
    item = _graph(
        [_v("a", "aten.add.Tensor", True), _v("i", "aten._local_scalar_dense", False)],
        [("fused_0", ("a",), None)],
    )
    assert not _coverage.one_partition_but_sizes([item])  # a tensor read is not a size
    two = _graph(
        [_v("a", "aten.add.Tensor", True), _v("b", "aten.add.Tensor", True)],
        [("fused_0", ("a",), None), ("fused_1", ("b",), None)],
    )
    assert not _coverage.one_partition([two]) and not _coverage.one_partition_but_sizes([two])


def test_the_speed_targets_count_a_graph_with_size_arithmetic_as_one_partition():
    # BERT's batch * seq stays a Python number; every tensor op is in the one partition.
    sizes = _graph(
        [_v("a", "aten.add.Tensor", True), _v("m", "<built-in function mul>", False)],
        [("fused_0", ("a",), None)],
        symbolic=("m",),
    )
    item = _graph(
        [_v("a", "aten.add.Tensor", True), _v("i", "aten._local_scalar_dense", False)],
        [("fused_0", ("a",), None)],
    )
    result = _result("bert", {"ortlab": 1.0})
    assert _corpus.is_one_partition(result) is None  # no ortlab row's backend
    result.ortlab_backends["ortlab"] = types.SimpleNamespace(graphs=[sizes])
    assert _corpus.is_one_partition(result) is True
    result.ortlab_backends["ortlab"] = types.SimpleNamespace(graphs=[item])
    assert _corpus.is_one_partition(result) is False


def test_cache_tensors_are_the_keys_and_values_of_every_layer():
    k0, v0, k1, v1 = (torch.full((1,), float(i)) for i in range(4))
    cache = types.SimpleNamespace(
        layers=[
            types.SimpleNamespace(keys=k0, values=v0),
            types.SimpleNamespace(keys=k1, values=v1),
        ]
    )
    assert _coverage.cache_tensors(cache) == [k0, v0, k1, v1]
    assert _coverage.cache_tensors(torch.zeros(1)) == []


# --- the gradient rule -------------------------------------------------------------------


def test_gradients_within_tolerance_pass_and_beyond_fail():
    ref = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
    close = {"w": torch.tensor([1.0005, -2.0]), "b": torch.tensor([0.5])}
    (w, b) = _grads.param_errors(close, ref, atol=1e-3, rtol=1e-3)
    assert w.relative == pytest.approx(0.0005 / 2.0, rel=1e-4) and w.passed and b.passed
    far = {"w": torch.tensor([1.2, -2.0]), "b": torch.tensor([0.5])}
    (w, _) = _grads.param_errors(far, ref, atol=1e-3, rtol=1e-3)
    assert w.relative == pytest.approx(0.1, rel=1e-4) and not w.passed


def test_a_gradient_that_is_zero_but_for_rounding_is_judged_on_the_model_scale():
    # A key bias's gradient: zero in exact arithmetic, rounding noise in float32.
    ref = {"weight": torch.tensor([1.0, -3.0]), "k_bias": torch.tensor([2e-9])}
    got = {"weight": torch.tensor([1.0, -3.0]), "k_bias": torch.tensor([-3e-9])}
    (_, bias) = _grads.param_errors(got, ref, atol=1e-3, rtol=1e-3)
    # Relative to its own scale the error would be 2.5; on 1e-3 of the model's it is tiny.
    assert bias.relative == pytest.approx(5e-9 / (_grads.NEGLIGIBLE * 3.0), rel=1e-4)
    assert bias.passed


def test_a_missing_gradient_fails():
    (e,) = _grads.param_errors({}, {"w": torch.ones(2)}, atol=1.0, rtol=1.0)
    assert e.relative == math.inf and not e.passed


def _judged(vs_eager, vs_fp64, eager_vs_fp64, passed, loss_deviation=0.0):
    """Two steps of the same gradient errors, and a loss trajectory that deviates from
    eager's ``[2.0, 1.0]`` by ``loss_deviation`` at its second step."""
    check = _grads.GradCheck("ortlab", losses=[2.0, 1.0 + loss_deviation])
    for _ in range(2):
        _grads.judge(
            check,
            [_grads.ParamError("w", vs_eager, passed)],
            [_grads.ParamError("w", vs_fp64)],
            [_grads.ParamError("w", eager_vs_fp64)],
        )
    _grads.judge_trajectory(check, [2.0, 1.0], 2)
    return check


def test_verdicts_pass_discontinuity_and_fail():
    ok = _judged(1e-6, 1e-6, 1e-6, True)
    assert (ok.verdict, ok.steps, ok.passed) == (_grads.VERDICT_PASS, 2, True)
    # A ReLU mask flip: 21% off eager, yet as close to float64 as eager is.
    flip = _judged(0.21, 0.20, 0.21, False)
    assert flip.verdict == _grads.VERDICT_FP64 and flip.passed
    assert (flip.vs_eager, flip.vs_fp64, flip.eager_vs_fp64) == (0.21, 0.20, 0.21)
    wrong = _judged(0.65, 0.65, 7.6e-7, False)
    assert wrong.verdict == _grads.VERDICT_FAIL and not wrong.passed
    crashed = _grads.GradCheck("ortlab", error="RuntimeError: boom")
    assert crashed.verdict == _grads.VERDICT_CRASH and not crashed.passed
    assert crashed.loss_verdict == _grads.VERDICT_CRASH
    # Right gradients at every step, yet a trajectory off eager's: it fails.
    drifted = _judged(1e-6, 1e-6, 1e-6, True, loss_deviation=0.1)
    assert drifted.grads_passed and drifted.loss_verdict == _grads.VERDICT_FAIL
    assert not drifted.passed


def test_the_float64_rule_holds_over_the_run_not_step_by_step():
    # LeViT over 10 steps: at one step ortlab is 3.6x eager's error to float64, yet over
    # the run its worst error is below eager's worst.
    def step(check, vs_eager, vs_fp64, eager_vs_fp64):
        _grads.judge(
            check,
            [_grads.ParamError("w", vs_eager, False)],
            [_grads.ParamError("w", vs_fp64)],
            [_grads.ParamError("w", eager_vs_fp64)],
        )

    levit = _grads.GradCheck("ortlab")
    step(levit, 5.8e-3, 6.8e-3, 1.9e-3)
    assert levit.verdict == _grads.VERDICT_FAIL
    step(levit, 2.3e-1, 2.4e-1, 3.1e-1)
    assert levit.verdict == _grads.VERDICT_FP64
    # Twice too large at every step, eager exact: no step of eager's excuses it.
    doubled = _grads.GradCheck("ortlab")
    for _ in range(3):
        step(doubled, 1.0, 1.0, 3e-6)
    assert doubled.verdict == _grads.VERDICT_FAIL
    # A step beyond tolerance without a float64 reference cannot pass against it.
    missing = _grads.GradCheck("ortlab")
    step(missing, 0.2, 0.2, 0.3)
    _grads.judge(missing, [_grads.ParamError("w", 0.2, False)], None, None)
    assert not missing.fp64_complete and missing.verdict == _grads.VERDICT_FAIL


def test_fp64_closeness_is_relative_to_eager_with_a_floor():
    assert _grads.fp64_close(2e-3, 1e-3) and not _grads.fp64_close(2.1e-3, 1e-3)
    assert _grads.fp64_close(1.5e-6, 0.0)  # eager exact: the floor, not zero
    assert not _grads.fp64_close(math.nan, 1e-3)


def test_one_failing_step_fails_the_check():
    check = _grads.GradCheck("ortlab")
    _grads.judge(check, [_grads.ParamError("w", 1e-6, True)], None, None)
    _grads.judge(check, [_grads.ParamError("w", 0.5, False)], None, None)
    assert check.verdict == _grads.VERDICT_FAIL and check.vs_eager == 0.5


def test_loss_deviations_are_relative_with_a_floor_for_losses_near_zero():
    assert _grads.deviations([2.002, 1.0], [2.0, 1.0]) == pytest.approx([1e-3, 0.0])
    # A projection crossing zero: judged on 1e-3 of the trajectory's largest loss.
    assert _grads.deviations([1e-9, 1.0], [0.0, 1.0]) == pytest.approx([1e-6, 0.0])
    assert _grads.deviations([10.0, 0.0], [10.0, 1e-9]) == pytest.approx([0.0, 1e-7])
    assert _grads.deviations([math.nan], [1.0]) == [math.inf]


def test_the_horizon_ends_where_eager_leaves_float64():
    fp64 = [2.0, 1.5, 1.0, 0.5]
    limit = _grads.HORIZON * _grads.LOSS_RTOL
    assert _grads.horizon(fp64, fp64) == 4
    tipped = [2.0, 1.5 * (1 + limit / 2), 1.0 * (1 + 3 * limit), 0.5]
    assert _grads.horizon(tipped, fp64) == 2  # step 2 and everything after
    assert _grads.horizon(tipped, []) == 4  # no float64: every step is judged


def _trajectory(losses, eager, judged):
    check = _grads.GradCheck("ortlab", losses=list(losses))
    _grads.judge_trajectory(check, eager, judged)
    return check


def test_the_loss_trajectory_passes_within_tolerance_over_the_judged_steps():
    eager = [2.0, 1.5, 1.0, 0.5]
    close = _trajectory([2.0, 1.5 * (1 + 5e-4), 1.0, 0.5], eager, 4)
    assert close.loss_verdict == _grads.VERDICT_PASS and close.judged_steps == 4
    assert close.loss_deviation == pytest.approx(5e-4)
    off = _trajectory([2.0, 1.5 * (1 + 2e-3), 1.0, 0.5], eager, 4)
    assert off.loss_verdict == _grads.VERDICT_FAIL and not off.passed
    # Past the horizon a deviation is reported, not judged.
    chaotic = _trajectory([2.0, 1.5, 1.3, 0.2], eager, 2)
    assert chaotic.loss_passed and chaotic.judged_steps == 2
    assert chaotic.loss_deviation == 0.0 and chaotic.loss_deviation_all == pytest.approx(0.6)
    # A trajectory cut short (the backend crashed at step 2) fails.
    assert not _trajectory([2.0, 1.5], eager, 4).loss_passed


def test_gradient_tolerance_defaults_to_ten_times_the_output_tolerance():
    spec = zoo.get("bert")
    assert _grads.tolerance(spec) == (10 * spec.atol, 10 * spec.rtol, True)
    raw = dataclasses.replace(spec, grad_atol=1e-2)
    assert _grads.tolerance(raw) == (1e-2, 10 * spec.rtol, False)


# --- coverage rows, report, exit code ----------------------------------------------------


def _row(name="bert", **fields):
    row = _coverage.CoverageRow(name, "text", "BERT", output_error=1e-7, output_passed=True)
    for k, v in fields.items():
        setattr(row, k, v)
    return row


def _check(verdict):
    values = {
        "pass": (1e-6, 1e-6, 1e-6, True),
        "fp64": (0.21, 0.2, 0.21, False),
        "fail": (0.6, 0.6, 1e-6, False),
        "loss": (1e-6, 1e-6, 1e-6, True, 0.1),
    }[verdict]
    return _judged(*values)


def test_row_status_orders_crash_mismatch_and_gradients():
    assert _row().status == _coverage.STATUS_OK
    assert _row(grads={"ortlab": _check("fp64")}).status == _coverage.STATUS_OK
    assert _row(grads={"ortlab": _check("fail")}).status == _coverage.STATUS_GRADS
    assert _row(grads={"ortlab": _check("loss")}).status == _coverage.STATUS_LOSS
    # inductor's gradients are reported, not ortlab's to answer for
    assert _row(grads={"inductor": _check("fail")}).status == _coverage.STATUS_OK
    assert _row(decode_graphs=0).status == _coverage.STATUS_MISMATCH
    assert _row(decode_passed=False).status == _coverage.STATUS_MISMATCH
    assert _row(other_batch=4, other_batch_passed=False).status == _coverage.STATUS_MISMATCH
    mismatch = _row(output_passed=False, grads={"ortlab": _check("fail")})
    assert mismatch.status == _coverage.STATUS_MISMATCH
    crash = _row(crashes=["inference: RuntimeError: boom"], output_passed=False)
    assert crash.status == _coverage.STATUS_CRASH
    # A graph that fell back ran eagerly: reported, not a failure.
    assert _row(fell_back=["graph 0 (inference): boom"]).status == _coverage.STATUS_OK
    rows = [_row("a"), crash, _row("c", grads={"ortlab": _check("fail")})]
    assert [r.model for r in _coverage.failures(rows)] == ["bert", "c"]


def test_coverage_markdown_and_json_say_what_the_rows_hold():
    ok = _row(
        "resnet_tiny",
        family="vision",
        graphs=1,
        partitions=1,
        nodes=10,
        nodes_in_ort=10,
        one_partition=True,
        one_partition_but_sizes=True,
        grads={"ortlab": _check("fp64"), "inductor": _check("pass")},
        objective="cross-entropy on class labels",
        train_steps=2,
        eager_losses=[2.0, 1.0],
        fp64_losses=[2.0, 1.0],
        horizon=2,
        train_graphs=2,
        train_partitions=3,
        train_nodes=10,
        train_nodes_in_ort=9,
        train_eager_ops={
            "mutates a graph input": {"aten.copy_.default": 1},
            "no ONNX translation of aten.cbw in the registry; it runs in PyTorch. To run": {
                "aten.cbw": 2
            },
        },
        train_breaks=["model.py:3: print(x)"],
        first_call_s=4.0,
        first_call_steps={"dynamo": 2.0, "lower": 1.0, "translate": 0.25, "serialize": 0.25},
        ortlab_ms=2.0,
        eager_ms=4.0,
        floor_ms=1.0,
        other_batch=4,
        other_batch_error=1.2e-7,
        other_batch_passed=True,
        other_batch_graphs=1,
        other_batch_s=2.94,
        other_batch_one_partition=True,
    )
    sized = _row(
        "bert",
        graphs=1,
        partitions=1,
        nodes=4,
        nodes_in_ort=3,
        one_partition_but_sizes=True,
        eager_ops={"size arithmetic": {"mul": 1}},
        floor_error="ExportError: nope",
        other_batch=4,
        other_batch_error=3e-3,
        other_batch_passed=False,
        other_batch_graphs=2,
        other_batch_s=1.0,
        other_batch_one_partition=False,
    )
    crash = _row("gpt2", family="decoder", crashes=["decode step: RuntimeError: boom"])
    markdown = _coverage_report.coverage_markdown([ok, sized, crash])

    lines = markdown.splitlines()
    (row,) = [line for line in lines if line.startswith("| resnet_tiny | vision | ok |")]
    assert "| 100% | 0 |" in row and "| 4.00 | 2.00 | 4.00 | 1.00 | 0.50 | 2.00 |" in row
    assert "| 4: 1.2e-07, 1 graph, 2.9 s |" in row
    assert "| pass 0.0e+00 | 4.00 |" in row  # the loss trajectory, then the first call
    assert (
        "| resnet_tiny | cross-entropy on class labels | 2/2 | 2 → 1 | 0.0e+00 | pass "
        "0.0e+00 | 0.0e+00 | pass 0.0e+00 | 0.0e+00 |" in markdown
    )
    assert "| resnet_tiny | eager | 2 1 |" in markdown
    assert "| resnet_tiny | ortlab | 2 1 |" in markdown
    assert (
        "| resnet_tiny | 2 | 3 | 9/10 | 90% | mutates a graph input: aten.copy_.default ×1; "
        "no ONNX translation: aten.cbw ×2 | model.py:3: print(x) |" in markdown
    )
    (bert,) = [line for line in lines if line.startswith("| bert | text | mismatch |")]
    assert "| 4: 3.0e-03 MISMATCH, 2 graphs (not one partition), 1.0 s |" in bert
    assert "| bert | mismatch | batch 4 output error 3.0e-03 beyond the model's" in markdown
    assert "passes vs fp64 (discontinuity) 2.1e-01 (fp64: 2.0e-01 vs eager 2.1e-01)" in row
    assert (
        "every node in it (the speed targets of the corpus benchmark apply to these): "
        "resnet_tiny." in markdown
    )
    assert "left in PyTorch: bert." in markdown
    assert "| bert | size arithmetic: mul ×1 |" in markdown
    assert "| resnet_tiny | inductor | pass |" in markdown
    assert "| resnet_tiny | 4.00 | 2.00 | 1.00 | 0.50 | 0.00 | 0.00 | 0.00 |" in markdown
    assert "| bert | ExportError: nope |" in markdown
    assert "| gpt2 | crash | decode step: RuntimeError: boom |" in markdown

    data = json.loads(_coverage_report.coverage_json([ok, sized, crash], machine={"cores": 2}))
    assert data["failures"] == ["bert", "gpt2"] and data["one_partition"] == ["resnet_tiny"]
    first = data["models"][0]
    assert first["grads"]["ortlab"]["verdict"] == _grads.VERDICT_FP64
    assert first["grads"]["ortlab"]["loss_verdict"] == _grads.VERDICT_PASS
    assert first["grads"]["ortlab"]["losses"] == [2.0, 1.0]
    assert first["eager_losses"] == [2.0, 1.0] and first["horizon"] == 2
    assert first["objective"] == "cross-entropy on class labels"
    assert first["train_in_ort_percent"] == 90.0
    assert first["ortlab_over_floor"] == 2.0 and data["models"][1]["ortlab_ms"] is None


def test_short_reasons_keep_what_differs_between_ops():
    short = _coverage_report.short_reason
    assert short("no ONNX translation of aten.x in the registry; it runs in PyTorch.") == (
        "no ONNX translation"
    )
    assert (
        short(
            "the ONNX translation disagrees with PyTorch for float32, strided inputs (the "
            "output differs: max abs error 6.78 (allowed 0.000339); found by the suite); it "
            "runs in PyTorch"
        )
        == "the ONNX translation disagrees with PyTorch for float32, strided inputs"
    )
    assert short("size arithmetic") == "size arithmetic"


def test_write_coverage_writes_markdown_and_json(tmp_path):
    md, js, markdown = _coverage_report.write_coverage([_row()], tmp_path / "out")
    assert md.read_text(encoding="utf-8") == markdown
    assert json.loads(js.read_text(encoding="utf-8"))["models"][0]["model"] == "bert"


def test_demo_corpus_prints_writes_and_fails_on_a_failing_model(monkeypatch, capsys, tmp_path):
    from ortlab import _demo

    seen = {}
    rows = [_row("bert"), _row("gpt2", crashes=["inference: RuntimeError: boom"])]

    def fake(selection, **kwargs):
        seen.update(selection=selection, **kwargs)
        return rows, "# coverage table", (tmp_path / "a.md", tmp_path / "a.json")

    corpus_coverage = _demo.corpus_coverage
    monkeypatch.setattr(_demo, "corpus_coverage", fake)
    argv = ["demo", "--corpus", "ci", "gpt2", "--out", "o", "--inductor", "none"]
    assert cli.main([*argv, "--steps", "2", "--no-floor"]) == 1
    captured = capsys.readouterr()
    assert "# coverage table" in captured.out and "gpt2 (crash)" in captured.err
    assert seen == {
        "selection": ["ci", "gpt2"],
        "out_dir": "o",
        "inductor": "none",
        "train_steps": 2,
        "timing": True,
        "floor": False,
    }
    rows.pop()
    seen.clear()
    assert cli.main(["demo", "--corpus", "--no-timing"]) == 0
    assert seen["selection"] is None and seen["timing"] is False
    # no --inductor: the coverage's default, the ci subset and two batch-norm CNNs
    assert "inductor" not in seen
    default = inspect.signature(corpus_coverage).parameters["inductor"].default
    assert _coverage.select(default) == (*CI, "resnet18", "mobilenet_v2")


def test_demo_corpus_refuses_the_zoo_report_options():
    with pytest.raises(SystemExit):
        cli.main(["demo", "--corpus", "--report", "r.html"])


# --- the corpus benchmark: targets and report --------------------------------------------


def _result(name, medians, errors_=None, steps=None):
    errors_ = errors_ or {}
    rows = [
        {
            **dict.fromkeys(COLUMNS, math.nan),
            "backend": b,
            "median_ms": m,
            "p10_ms": m * 0.9,
            "p90_ms": m * 1.2,
            "first_call_s": 2.0,
            "error": errors_.get(b, ""),
        }
        for b, m in medians.items()
    ]
    return BenchResult(
        frame=pd.DataFrame(rows), machine={}, name=name, first_call_steps=steps or {}
    )


def test_corpus_targets_apply_to_one_partition_models_and_where_the_floor_beats_inductor():
    fast = _result(
        "resnet_tiny",
        {"eager": 2.0, "inductor": 1.5, "ortlab": 1.2, "ortlab-frozen": 1.05, "ort": 1.0},
    )
    slow = _result(
        "resnet18",
        {
            **{"eager": 2.0, "inductor": 1.1, "ortlab": 2.5, "ortlab-frozen": 2.1},
            **{"ort": 1.0, "ort+dynamo": 2.0},
        },
    )
    split = _result("bert", {"inductor": 1.0, "ortlab": 2.0, "ort": 1.5})
    failed = _result(
        "gpt2", {"inductor": 2.0, "ortlab": 1.0, "ort": 1.0}, errors_={"ortlab": "boom"}
    )
    rows = _corpus.target_rows(
        [fast, slow, split, failed],
        {"resnet_tiny": True, "resnet18": True, "bert": False, "gpt2": None},
    )
    other = ["not one partition"] * 4
    assert rows == [
        ["resnet_tiny", "yes", "1.05 met", "1.20 met", "n/a", "n/a", "0.80 met"],
        [
            "resnet18",
            "yes",
            # Dynamo's entry alone is 2x the floor: no torch.compile backend meets these
            "2.10 missed (Dynamo's entry alone: 2.00)",
            "2.50 missed (Dynamo's entry alone: 2.00)",
            "1.05 met",
            "1.25 met",
            "2.27 missed",
        ],
        ["bert", "no", *other, "floor behind inductor (1.50)"],
        ["gpt2", "?", *other, "n/a"],
    ]
    summary = _corpus.target_summary(rows)
    met_missed = [(met, missed) for _, met, missed in summary]
    assert met_missed == [(1, 1), (1, 1), (1, 0), (1, 0), (1, 1)]


def test_a_target_cells_verdict_is_read_back_whatever_follows_it():
    cells = {
        _format.target_cell(1.3, 1.25, "1.30"): "missed",
        _format.target_cell(0.17, 1.5, "0.17 s"): "met",
        _format.target_cell(1.0, 1.0, "1.00", strict=True): "missed",
        _format.target_cell(math.nan, 1.0, "nan"): "",
        "2.10 missed (Dynamo's entry alone: 2.00)": "missed",
        "floor behind inductor (1.50)": "",
        "not one partition": "",
    }
    assert list(cells)[:4] == ["1.30 missed", "0.17 s met", "1.00 missed", "n/a"]
    assert {c: _format.target_verdict(c) for c in cells} == cells


def test_corpus_markdown_has_spreads_targets_and_first_calls():
    result = _result(
        "resnet_tiny",
        {"eager": 2.0, "ortlab": 1.2, "ort": 1.0},
        steps={
            "ortlab": {"dynamo": 1.0, "lower": 0.5, "translate": 0.1, "registry": 0.4},
            "ort": {"export": 1.5, "session": 0.25, "first_run": 0.25},
        },
    )
    markdown = _corpus.corpus_markdown([result], {"resnet_tiny": True}, machine={"cores": 2})
    assert "| resnet_tiny | vision | yes | 2.00 (1.80–2.40) | 1.20 (1.08–1.44) |" in markdown
    assert (
        "## Targets" in markdown and "| resnet_tiny | yes | n/a | 1.20 met | n/a |" in markdown
    )
    # ortlab first call, dynamo, lower, translate, fuse, session, first_run, other; ort's
    assert (
        "| resnet_tiny | 2.00 | 1.00 | 0.50 | 0.10 | 0.00 | 0.00 | 0.00 | 0.40 | 2.00 | "
        "1.50 | 0.25 |  |" in markdown
    )


def test_corpus_markdown_lists_the_machine_and_each_failed_backend():
    ok = _result("resnet_tiny", {"eager": 2.0, "ortlab": 1.2, "ort": 1.0})
    failed = _result("bert", {"eager": 2.0, "ortlab": 1.0}, errors_={"ortlab": "boom"})
    markdown = _corpus.corpus_markdown([ok], {}, machine={"cores": 2})
    assert "## Machine" in markdown and "| cores | 2 |" in markdown
    assert "## Errors" not in markdown
    markdown = _corpus.corpus_markdown([ok, failed], {}, machine={})
    assert markdown.endswith(
        "## Errors\n\n| model | backend | error |\n| --- | --- | --- |\n"
        "| bert | ortlab | boom |\n"
    )


def test_the_default_corpus_bench_set_is_the_ci_subset_and_real_corpus_models():
    assert set(CI) <= set(_corpus.CORPUS_BENCH_MODELS)
    assert _coverage.select(_corpus.CORPUS_BENCH_MODELS) == _corpus.CORPUS_BENCH_MODELS


def test_ortlab_bench_corpus_passes_selection_fast_backends_and_threads(monkeypatch):
    seen = {}

    def fake_run_corpus(out_dir, **kwargs):
        seen.update(out_dir=out_dir, **kwargs)
        return "# corpus"

    monkeypatch.setattr(_corpus, "run_corpus", fake_run_corpus)
    argv = ["bench", "--corpus", "ci,resnet18", "--out", "o", "--fast", "--threads", "1"]
    assert cli.main([*argv, "--backends", "eager,ortlab"]) == 0
    assert seen == {
        "out_dir": "o",
        "selection": "ci,resnet18",
        "fast": True,
        "backends": ["eager", "ortlab"],
        "threads": 1,
    }
    assert cli.main(["bench", "--corpus"]) == 0
    assert seen["selection"] is None and seen["backends"] is None
    with pytest.raises(SystemExit):
        cli.main(["bench", "--corpus", "--models", "mlp"])


@pytest.mark.slow
def test_run_corpus_fast_writes_the_report_and_reads_one_partition_from_the_records(
    tmp_path,
):
    markdown = _corpus.run_corpus(
        tmp_path, selection="resnet_tiny", fast=True, backends=("eager", "ortlab", "ort")
    )
    assert (tmp_path / "corpus.md").read_text(encoding="utf-8") == markdown
    data = json.loads((tmp_path / "corpus.json").read_text(encoding="utf-8"))
    assert data["one_partition"] == {"resnet_tiny": True}
    [model] = data["models"]
    assert {r["backend"]: r["error"] for r in model["results"]} == dict.fromkeys(
        ("eager", "ortlab", "ort"), ""
    )
    steps = model["first_call_steps"]
    assert set(steps["ort"]) == {"export", "session", "first_run"}
    assert {"dynamo", "lower", "translate", "session"} <= set(steps["ortlab"])
    assert "| resnet_tiny | yes |" in markdown and "## First call" in markdown
    assert (tmp_path / "corpus.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
