"""A partition that ONNX Runtime computes wrongly is blamed: its local error beyond the
per-dtype tolerance fails it, the wrong op is its first divergent node, and the report
says so, never that the error accumulates. Magnitudes elsewhere in the tensor (an
attention mask) loosen nothing; what eager's own rounding explains is allowed."""

from __future__ import annotations

import pytest
import torch
from numerics_helpers import as_strided_in_logical_order, sin_one_percent_high, x_of

import ortlab
from ortlab.backend import _rewrites
from ortlab.numerics import _compare, _interpret, _runner

_WRONG_SIN = {torch.ops.aten.sin.default: sin_one_percent_high}
_TORCHLIB_AS_STRIDED = {torch.ops.aten.as_strided.default: as_strided_in_logical_order}


def _masked(fill: float) -> torch.Tensor:
    mask = torch.zeros(4, 8)
    mask[:, 6:] = fill
    return mask


def _ran_in_ort(report: ortlab.DiffReport, node: str) -> bool:
    return any(node in p.node_names for p in report.backend.partitions) and all(
        node not in g.eager_node_names for g in report.backend.graphs
    )


@pytest.mark.parametrize("fill", [torch.finfo(torch.float32).min, -1e4])
def test_a_wrong_op_beside_an_attention_mask_fails_its_partition_and_is_named(fill):
    # Tolerances scaled by the largest magnitude made atol 3e33 (or 0.1) for every
    # element here: the partition passed and the report said the error accumulated.
    report = ortlab.diff(
        lambda x, mask: torch.sin(x) + mask,
        x_of(4, 8),
        _masked(fill),
        custom_translations=_WRONG_SIN,
    )
    assert _ran_in_ort(report, "sin"), "the wrong translation must run in ONNX Runtime"
    assert not report.passed
    (failing,) = report.failing_partitions
    assert failing.state == "ort" and failing.carried_in == 0.0
    assert 1e-3 < failing.local_error < 0.02  # its own error: sin is 1% off
    first = report.first_divergent
    assert first is not None and (first.partition, first.node) == (failing.name, "sin")
    assert first.diverged and first.local is not None
    assert first.local.max_abs_error == pytest.approx(0.01, rel=0.05)
    assert report.first_cause is first
    summary = report.summary()
    assert "first divergent node sin" in summary and "accumulates" not in summary


def test_a_failing_partition_without_compared_nodes_is_blamed_in_words():
    report = ortlab.diff(
        lambda x, mask: torch.sin(x) + mask,
        x_of(4, 8),
        _masked(-1e4),
        custom_translations=_WRONG_SIN,
        nodes=False,
    )
    (failing,) = report.failing_partitions
    assert failing.nodes == [] and report.first_cause is None
    summary = report.summary()
    assert (
        f"first failing partition {failing.name} (inference graph 0) is wrong on its own "
        "inputs: output add float32[4x8], local max abs error 0.01"
    ) in summary
    assert "accumulates" not in summary


def test_a_mask_in_a_clean_partition_is_not_blamed():
    def attention(q, k, mask):
        return torch.softmax(q @ k.transpose(-1, -2) / 8 + mask, dim=-1)

    mask = torch.zeros(1, 1, 6, 6)
    mask[..., 4:] = torch.finfo(torch.float32).min
    q, k = x_of(1, 2, 6, 64) * 10, x_of(1, 2, 6, 64, seed=1) * 10
    report = ortlab.diff(attention, q, k, mask, nodes=True)
    assert report.passed and report.partitions_passed, report
    assert not any(n.diverged for n in report.nodes)


# -- as_strided: an op whose result depends on memory layout ------------------------------
@pytest.fixture
def as_strided_in_ort(monkeypatch):
    """The backend as it was when torchlib's as_strided reached ONNX Runtime on any input:
    its rule keeping unrebased as_strided nodes in PyTorch off (now that the backend
    guards against it, only this puts a wrong as_strided into a partition), and a
    translation indexing the input's values as if they were its memory."""
    monkeypatch.setattr(_rewrites, "storage_readers_kept_in_pytorch", lambda graph: {})
    return _TORCHLIB_AS_STRIDED


def test_as_strided_of_a_permuted_value_is_blamed_for_its_own_error(as_strided_in_ort):
    # a + 1 keeps a's transposed layout in eager; ONNX Runtime's Add is contiguous. Rerun
    # on that contiguous value, as_strided repeated the translation's mistake (own error
    # 0) and the divergence was only "accumulated" there.
    report = ortlab.diff(
        lambda a: (a + 1).as_strided((2, 3), (1, 4)) * 2,
        torch.arange(12.0).reshape(3, 4).t(),
        custom_translations=as_strided_in_ort,
    )
    assert _ran_in_ort(report, "as_strided"), "as_strided must run in ONNX Runtime"
    (failing,) = report.failing_partitions
    assert failing.local_error == 12.0 and failing.carried_in == 0.0
    first = report.first_divergent
    assert (first.node, first.target) == ("as_strided", "aten.as_strided.default")
    assert first.diverged and first.local is not None and first.local.max_abs_error == 6.0
    assert "own max abs error 6" in report.summary()


def test_as_strided_of_a_sliced_input_is_blamed_not_accumulated(as_strided_in_ort):
    # The partition receives a view (storage offset 1, rows of 4): ONNX Runtime gets its
    # values, a contiguous copy. The partition rerun on such a copy agreed with ONNX
    # Runtime (local error 0, "the error accumulates"); on a copy of its memory it agrees
    # with eager.
    report = ortlab.diff(
        lambda a: a.as_strided((2, 2), (1, 4)) * 2,
        (torch.arange(12.0).reshape(3, 4) + 1)[:, 1:],
        custom_translations=as_strided_in_ort,
    )
    assert _ran_in_ort(report, "as_strided"), "as_strided must run in ONNX Runtime"
    assert not report.passed
    (failing,) = report.failing_partitions
    assert failing.local_error == 2.0
    assert report.first_divergent.node == "as_strided" and report.first_divergent.diverged
    assert "accumulates" not in report.summary()


def test_a_copy_keeps_the_memory_a_view_reads():
    base = torch.arange(12.0).reshape(3, 4)
    view = base[:, 1:]
    for dtype in (None, torch.float64):
        copy = _runner.clone_value(view, dtype)
        assert copy.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
        assert (copy.stride(), copy.storage_offset()) == (view.stride(), 1)
        assert torch.equal(copy.as_strided((2, 2), (1, 4)), view.as_strided((2, 2), (1, 4)))
    # ONNX Runtime's contiguous value, laid out as eager had it, reads as eager does.
    ort = view.contiguous() * 10
    laid = _runner.laid_out_like(ort, view)
    assert torch.equal(laid, ort) and laid.storage_offset() == 1
    assert _runner.laid_out_like(ort, view.contiguous()) is ort


def test_an_op_that_reads_memory_runs_on_its_operands_laid_out_as_in_eager():
    graph = torch.fx.symbolic_trace(
        lambda a: torch.ops.aten.as_strided.default(a, (2, 3), (1, 4))
    )
    node = next(n for n in graph.graph.nodes if n.op == "call_function")
    (operand,) = node.all_input_nodes
    eager = torch.arange(12.0).reshape(3, 4).t()
    ort = {operand: eager.contiguous()}  # the same values, as ONNX Runtime hands them over
    expected = eager.as_strided((2, 3), (1, 4))
    assert not torch.equal(_interpret.local_value(node, ort), expected)
    assert torch.equal(_interpret.local_value(node, ort, {operand: eager}), expected)
    exact = _interpret.local_value(node, ort, {operand: eager}, float64=True)
    assert exact.dtype == torch.float64 and torch.equal(exact, expected.double())


def test_intermediate_rule_allows_what_eagers_rounding_explains_and_no_more():
    expected = torch.tensor([0.0, 1000.0])
    actual = torch.tensor([5e-4, 1000.0])  # rounding noise of a sum over values near 1000
    assert not _compare.compare_tensors("t", actual, expected).passed
    rounded = _compare.compare_tensors("t", actual, expected, rounding=2e-4)
    assert rounded.passed and rounded.atol == pytest.approx(1e-5 + 3 * 2e-4)
    assert rounded.rounding == 2e-4
    assert not _compare.compare_tensors("t", actual, expected, rounding=1e-4).passed
    # Eager's rounding counts finite elements only: an overflow is no allowance.
    exact = torch.tensor([1e-4, float("inf"), 3.0], dtype=torch.float64)
    assert _compare.rounding_of(torch.tensor([0.0, 3e38, 3.0]), exact) == pytest.approx(1e-4)
