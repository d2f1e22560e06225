"""The bare-ORT floor of ortlab.bench: the whole model exported once, run by one session
made and fed the backend's way (providers from the inputs' device, zero-copy)."""

from __future__ import annotations

import math

import onnxruntime
import pytest
import torch

import ortlab
from ortlab import errors, zoo
from ortlab.bench import _floor

FAST = dict(warmup=1, iters=5)

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available()
    or "CUDAExecutionProvider" not in onnxruntime.get_available_providers(),
    reason="needs a CUDA GPU and onnxruntime-gpu (pip install 'ortlab[gpu]')",
)


def _linear_gelu():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU()).eval()


def test_floor_runs_the_exported_model_and_returns_torch_tensors():
    model, x = _linear_gelu(), torch.randn(4, 8)
    floor = _floor.OrtFloor(model, (x,))
    (out,) = floor(x)
    assert isinstance(out, torch.Tensor) and out.device == x.device
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
    assert floor.session.providers[0] == "CPUExecutionProvider"


def test_floor_uses_the_session_options_and_providers_of_the_ortlab_options():
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    x = torch.randn(4, 8)
    floor = _floor.OrtFloor(_linear_gelu(), (x,), options={"ort_session_options": options})
    assert floor.session.session.get_session_options().intra_op_num_threads == 1
    with pytest.warns(RuntimeWarning, match="'NoSuch' is not available"):
        preferred = _floor.OrtFloor(
            _linear_gelu(), (x,), options={"preferred_execution_providers": ["NoSuch"]}
        )
    assert preferred.session.providers == ("CPUExecutionProvider",)


def test_floor_chooses_its_threads_as_the_backend_does(monkeypatch):
    from ortlab.backend import _threads

    monkeypatch.setattr(_threads, "PROBE_BELOW_SECONDS", 60.0)  # every run counts as short
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(4, 8)
        floor = _floor.OrtFloor(_linear_gelu(), (x,))
        fixed = _floor.OrtFloor(_linear_gelu(), (x,), options={"intra_op_threads": 2})
    finally:
        torch.set_num_threads(before)
    choice = floor.session.threads
    assert choice.probed_from == 2 and "median of 5 runs each" in choice.note
    assert floor.session.session.get_session_options().intra_op_num_threads == choice.threads
    assert fixed.session.threads == _threads.ThreadChoice(2, "set by intra_op_threads")


def test_floor_of_a_plain_function_with_several_inputs():
    def mix(a, b):
        return (a * b).sum(dim=0), torch.relu(a - b)

    a, b = torch.randn(3, 5), torch.randn(3, 5)
    outs = _floor.OrtFloor(mix, (a, b))(a, b)
    for got, want in zip(outs, mix(a, b)):
        torch.testing.assert_close(got, want)


def test_bench_ort_export_failure_is_an_error_row_while_ortlab_falls_back():
    # The custom op has no ONNX translation: the whole-model export must fail, while the
    # ortlab backend runs that op in eager and the rest in ONNX Runtime.
    entry = zoo.get("custom_op")
    model, inputs = entry.instantiate()
    result = ortlab.bench(model, *inputs, backends=("eager", "ort", "ortlab"), **FAST)

    assert result.row("ort")["error"] != ""
    assert math.isnan(result.row("ort")["median_ms"])
    ortlab_row = result.row("ortlab")
    assert ortlab_row["error"] == ""
    assert 0 < ortlab_row["nodes_in_ort"] < ortlab_row["nodes"]
    assert ortlab_row["max_abs_diff"] <= entry.atol


def test_first_calls_are_explained_by_the_floor_and_ortlab_steps():
    model, x = _linear_gelu(), torch.randn(4, 8)
    result = ortlab.bench(model, x, backends=("eager", "ortlab", "ort"), **FAST)

    ort = result.first_call_steps["ort"]
    assert set(ort) == {"export", "session", "first_run"}
    assert ort["export"] > 0 and ort["session"] > 0
    # The floor's steps are its first call, split: export + session + the first run.
    assert sum(ort.values()) == pytest.approx(result.row("ort")["first_call_s"])
    steps = result.first_call_steps["ortlab"]
    assert {"dynamo", "lower", "translate", "session", "first_run"} <= set(steps)
    assert sum(steps.values()) <= result.row("ortlab")["first_call_s"]
    assert "eager" not in result.first_call_steps
    assert result.to_dict()["first_call_steps"] == result.first_call_steps


def test_floor_refuses_inputs_unlike_those_it_was_made_for():
    x = torch.randn(4, 8)
    floor = _floor.OrtFloor(_linear_gelu(), (x,))
    with pytest.raises(errors.SessionError, match="create a session like these inputs"):
        floor(x.double())


@pytest.mark.cuda
@needs_cuda
def test_floor_of_cuda_inputs_runs_on_the_cuda_provider_and_stays_on_device():
    model, x = _linear_gelu().cuda(), torch.randn(4, 8, device="cuda")
    floor = _floor.OrtFloor(model, (x,))
    assert floor.session.providers[0] == "CUDAExecutionProvider"
    (out,) = floor(x)
    assert out.device == x.device
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)


def _norm_block():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).eval()


def test_floor_is_fused_as_ortlab_partitions_are_unless_told_not_to():
    x = torch.randn(2, 5, 8)
    fused = _floor.OrtFloor(_norm_block(), (x,))
    plain = _floor.OrtFloor(_norm_block(), (x,), options={"ort_fusions": False})
    forced = _floor.OrtFloor(
        _linear_gelu(), (torch.randn(4, 8),), options={"ort_fusions": True}
    )
    assert (plain.fusions, plain.fusion_note) == ({}, "")
    assert "patterns is in the model" in forced.fusion_note
    with torch.no_grad():
        expected = _norm_block()(x)
    for floor in (fused, plain):
        (out,) = floor(x)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


class _ResidualNorm(torch.nn.Module):
    """A residual add before a LayerNorm: one SkipLayerNormalization, fused."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.fc, self.norm = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.fc(x))


def test_floor_keeps_the_unfused_model_where_it_is_faster(fusion_timing):
    x = torch.randn(2, 5, 8)
    notes = fusion_timing(fused_ms=0.1, unfused_ms=0.2)
    fused = _floor.OrtFloor(_ResidualNorm().eval(), (x,))
    fusion_timing(fused_ms=0.2, unfused_ms=0.1)
    unfused = _floor.OrtFloor(_ResidualNorm().eval(), (x,))
    assert fused.fusions and fused.fusion_note == notes[0]
    assert unfused.fusions == {} and unfused.fusion_note == notes[1]
    assert notes[1].endswith("(median of 5 runs each); the unfused model runs")
    contrib = [
        {n.op_type for n in floor.model.graph.node if n.domain == "com.microsoft"}
        for floor in (fused, unfused)
    ]
    assert contrib == [{"SkipLayerNormalization"}, set()]
    with torch.no_grad():
        expected = _ResidualNorm().eval()(x)
    for floor in (fused, unfused):
        torch.testing.assert_close(floor(x)[0], expected, atol=1e-5, rtol=1e-5)


def test_dynamo_entry_runs_nothing_after_its_first_call():
    def model(x):
        return x * 2

    entry = _floor.dynamo_entry(model)
    first = entry(torch.ones(3))
    again = entry(torch.full((3,), 5.0))  # another input: still the first outputs
    torch.testing.assert_close(again, first)
    torch.testing.assert_close(first, torch.full((3,), 2.0))


def test_the_floor_behind_dynamo_row_returns_the_floors_outputs_and_its_first_call():
    model, x = _linear_gelu(), torch.randn(4, 8)
    result = ortlab.bench(model, x, backends=("eager", "ort", "ort+dynamo"), **FAST)
    row = result.row("ort+dynamo")
    assert row["error"] == "" and row["max_abs_diff"] <= 1e-5
    steps = result.first_call_steps["ort+dynamo"]
    assert set(steps) == {"export", "session", "dynamo", "first_run"} and steps["dynamo"] > 0
    assert sum(steps.values()) == pytest.approx(result.row("ort+dynamo")["first_call_s"])
    trained = ortlab.bench(model, x, backends=("eager", "ort+dynamo"), training=True, **FAST)
    assert '"ort+dynamo" floor runs inference only' in trained.row("ort+dynamo")["error"]
