"""Tests of ortlab.bench: rows, ratios, errors, training, threads, rendering.

No assertion here is about absolute speed: timings are only checked for consistency
(ratios follow from medians, percentiles are ordered). Speed is measured by `make bench`.
The timer itself is tested on a fake clock (test_bench_engine.py), the bare-ORT floor in
test_bench_floor.py, the zoo runner in test_bench_zoo.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import ortlab
from ortlab import _harness, errors, numerics, zoo
from ortlab.bench import COLUMNS

FAST = dict(warmup=1, iters=5)


def _mlp():
    return zoo.get("mlp").instantiate()


def test_bench_gives_one_row_per_backend_with_consistent_numbers():
    model, inputs = _mlp()
    result = ortlab.bench(model, *inputs, backends=("eager", "ortlab", "ort"), **FAST)

    frame = result.frame
    assert list(frame.columns) == list(COLUMNS)
    assert list(frame["backend"]) == ["eager", "ortlab", "ort"]
    assert (frame["error"] == "").all(), frame["error"].tolist()
    assert (frame["iters"] == 5).all()
    for row in frame.to_dict("records"):
        assert row["first_call_s"] > 0
        assert 0 < row["p10_ms"] <= row["median_ms"] <= row["p90_ms"]
    eager, ort = result.row("eager"), result.row("ort")
    for row in frame.to_dict("records"):
        assert row["ratio_to_eager"] == pytest.approx(row["median_ms"] / eager["median_ms"])
        assert row["ratio_to_ort"] == pytest.approx(row["median_ms"] / ort["median_ms"])
    assert eager["max_abs_diff"] == 0.0
    tolerance = zoo.get("mlp").atol
    assert 0 <= result.row("ortlab")["max_abs_diff"] <= tolerance
    assert 0 <= ort["max_abs_diff"] <= tolerance
    ortlab_row = result.row("ortlab")
    counts = (ortlab_row["graphs"], ortlab_row["partitions"], ortlab_row["sessions"])
    assert counts == (1, 1, 1)
    assert ortlab_row["nodes_in_ort"] == ortlab_row["nodes"] > 0
    assert math.isnan(eager["graphs"])


def test_bench_records_the_ortlab_backend_it_compiled():
    model, inputs = _mlp()
    result = ortlab.bench(
        model, *inputs, backends=("eager", "ortlab"), interleave=False, **FAST
    )

    backend = result.ortlab_backends["ortlab"]
    assert isinstance(backend, ortlab.OrtBackend)
    assert [g.kind for g in backend.graphs] == ["inference"]
    # first call + warm-up + timed calls all ran the partition in ONNX Runtime
    assert backend.execution_count == 1 + FAST["warmup"] + FAST["iters"]
    assert result.settings["interleave"] is False


def test_bench_unknown_backend_becomes_an_error_row_and_others_still_run():
    model, inputs = _mlp()
    result = ortlab.bench(model, *inputs, backends=("eager", "no_such_backend"), **FAST)

    bad = result.row("no_such_backend")
    assert "no_such_backend" in bad["error"]
    assert bad["iters"] == 0
    assert math.isnan(bad["median_ms"]) and math.isnan(bad["ratio_to_eager"])
    assert result.row("eager")["error"] == ""
    assert result.row("eager")["median_ms"] > 0
    assert "no_such_backend" in repr(result)


def test_bench_training_times_forward_and_backward_and_compares_gradients():
    model, inputs = _mlp()
    model.train()
    result = ortlab.bench(
        model, *inputs, backends=("eager", "ortlab", "ort"), training=True, **FAST
    )

    backend = result.ortlab_backends["ortlab"]
    assert [g.kind for g in backend.graphs] == ["forward", "backward"]
    backward = backend.graphs[1]
    # Every timed step ran backward in ONNX Runtime (plus the first call, the warm-up
    # and one untimed switch call per interleaved block).
    assert result.row("ortlab")["iters"] == FAST["iters"]
    assert sum(p.run_count for p in backward.partitions) > 1 + FAST["warmup"] + FAST["iters"]
    row = result.row("ortlab")
    assert row["error"] == ""
    # outputs and every parameter's gradient agree with eager's
    assert 0 <= row["max_abs_diff"] <= 1e-5
    assert "inference only" in result.row("ort")["error"]
    assert result.settings["training"] is True
    # the caller's model is untouched: each backend trained a deep copy
    assert all(p.grad is None for p in model.parameters())


def test_bench_training_of_a_function_differentiates_its_inputs():
    def scaled_tanh(x):
        return torch.tanh(x) * 3

    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    result = ortlab.bench(scaled_tanh, x, backends=("eager", "ortlab"), training=True, **FAST)

    assert result.name == "scaled_tanh"
    assert (result.frame["error"] == "").all(), result.frame["error"].tolist()
    # float32 tanh in ORT vs ATen: ~1e-6 apart on outputs up to 3 (seen 1.1e-6 unseeded)
    assert result.row("ortlab")["max_abs_diff"] <= 1e-5
    assert x.grad is None and not x.requires_grad


def test_bench_sets_threads_records_machine_facts_and_restores_threads():
    before = torch.get_num_threads()
    model, inputs = _mlp()
    result = ortlab.bench(model, *inputs, backends=("eager",), threads=1, **FAST)

    assert torch.get_num_threads() == before
    machine = result.machine
    assert machine["torch_threads"] == 1 == result.settings["threads"]
    assert machine["cores"] >= 1
    assert machine["torch"] == torch.__version__
    for key in ("onnxruntime", "onnx", "onnxscript", "python", "platform"):
        assert machine[key], key


def test_bench_with_min_time_stops_between_min_and_max_iters():
    model, inputs = _mlp()
    result = ortlab.bench(
        model, *inputs, backends=("eager",), warmup=0, min_time=0.0, min_iters=3, max_iters=3
    )
    assert result.row("eager")["iters"] == 3


def test_bench_rejects_bad_arguments_before_running():
    model, inputs = _mlp()
    with pytest.raises(errors.UnsupportedOptionError, match="backends"):
        ortlab.bench(model, *inputs, backends="eager")
    with pytest.raises(errors.UnsupportedOptionError, match="iters"):
        ortlab.bench(model, *inputs, backends=("eager",), iters=0)
    with pytest.raises(errors.UnsupportedOptionError, match="repeat"):
        ortlab.bench(model, *inputs, backends=("eager", "eager"))


def test_bench_result_renders_as_text_html_markdown_json_and_plot():
    def relu_twice(x):
        return torch.relu(x) * 2

    result = ortlab.bench(
        relu_twice, torch.randn(8, 4), backends=("eager", "ortlab"), name="<b>evil</b>", **FAST
    )

    html = result._repr_html_()
    assert "&lt;b&gt;evil&lt;/b&gt;" in html and "<b>evil</b>" not in html
    assert "ortlab" in repr(result) and "median (ms)" in repr(result)
    markdown = result.to_markdown()
    assert "&lt;b&gt;evil" in markdown and "<b>" not in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| ortlab | ")]
    # the backend row (12 cells, graphs/partitions/sessions "1/1/1") and the version fact
    assert [line.count(" | ") for line in rows] == [11, 1]
    assert "| 1/1/1 |" in rows[0] and "| torch_threads |" in markdown
    data = json.loads(result.to_json())
    assert [r["backend"] for r in data["results"]] == ["eager", "ortlab"]
    assert data["results"][0]["graphs"] is None  # NaN becomes null in JSON

    import matplotlib

    matplotlib.use("Agg")
    fig = result.plot()
    try:
        assert len(fig.axes[0].patches) == 2
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_bench_accepts_a_module_that_was_compiled_with_ortlab_before():
    model, inputs = _mlp()
    with torch.no_grad():
        ortlab.compile(model)(*inputs)  # may leave the backend attached to the module
    result = ortlab.bench(model, *inputs, backends=("eager", "ortlab"), **FAST)
    assert (result.frame["error"] == "").all(), result.frame["error"].tolist()


def test_bench_shows_a_progress_bar_only_when_interactive(monkeypatch, capsys):
    model, inputs = _mlp()
    ortlab.bench(model, *inputs, backends=("eager",), name="silent", **FAST)
    assert "silent" not in capsys.readouterr().err  # pytest's stderr is no terminal

    monkeypatch.setattr(_harness, "interactive", lambda: True)
    ortlab.bench(model, *inputs, backends=("eager",), name="bar-test", **FAST)
    assert "bar-test" in capsys.readouterr().err
    ortlab.bench(model, *inputs, backends=("eager",), progress=False, name="quiet", **FAST)
    assert "quiet" not in capsys.readouterr().err


def test_bench_of_a_compiled_model_starts_from_the_original_module():
    model, inputs = _mlp()
    compiled = ortlab.compile(model)
    result = ortlab.bench(compiled, *inputs, backends=("eager", "ortlab"), **FAST)

    assert result.name == "_TinyMLP"
    # "eager" really ran eagerly, and "ortlab" compiled the module once, not a compiled one
    assert compiled.ortlab_backend.execution_count == 0
    assert result.row("ortlab")["graphs"] == 1


def test_max_abs_diff_is_the_comparators_nan_against_nan_is_no_difference():
    def sqrt_plus_one(x):
        return torch.sqrt(x) + 1  # NaN for negative inputs, on both sides

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    result = ortlab.bench(sqrt_plus_one, x, backends=("eager", "ortlab"), **FAST)
    compiled = ortlab.compile(sqrt_plus_one)
    with torch.no_grad():
        expected = numerics.max_abs_error(
            numerics.compare_outputs(compiled(x), sqrt_plus_one(x))
        )
    assert math.isfinite(result.row("ortlab")["max_abs_diff"])
    assert result.row("ortlab")["max_abs_diff"] == pytest.approx(expected, abs=1e-7)
