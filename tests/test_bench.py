"""Tests of the benchmark harness (ortlab.bench, BenchResult, run_zoo).

No assertion here is about absolute speed: timings are only checked for consistency
(ratios follow from medians, percentiles are ordered). Speed is measured by `make bench`.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import ortlab
from ortlab import _bench, errors, zoo

FAST = dict(warmup=1, iters=5)


def _mlp():
    return zoo.get("mlp").instantiate()


def test_bench_gives_one_row_per_backend_with_consistent_numbers():
    model, inputs = _mlp()
    result = ortlab.bench(model, *inputs, backends=("eager", "ortlab", "ort"), **FAST)

    frame = result.frame
    assert list(frame.columns) == list(_bench.COLUMNS)
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


class _FakeClock:
    """Stands in for time.perf_counter in _bench: only the fake steps advance it, so block
    sizes follow from the step durations, whatever the machine's load."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


def _fake_step(log, name, clock=None, seconds=0.0, fail_after=None):
    def step():
        if fail_after is not None and log.count(name) >= fail_after:
            raise RuntimeError(f"{name} broke")
        log.append(name)
        if clock is not None:
            clock.now += seconds

    return step, lambda: None


def test_interleaved_timing_alternates_backends_in_blocks_and_isolates_failures(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(_bench, "time", clock)
    log = []
    runs = [_bench._Run(name) for name in ("a", "b", "c")]
    steps = {
        "a": _fake_step(log, "a", clock, seconds=0.004),
        "b": _fake_step(log, "b", clock, seconds=0.004),
        "c": _fake_step(log, "c", fail_after=3),
    }
    timing = _bench._Timing(warmup=0, iters=30, min_time=0, min_iters=1, max_iters=30)
    _bench._time_backends(runs, steps, timing, no_grad=True)
    a, b, c = runs
    assert len(a.samples) == len(b.samples) == 30 and a.error is b.error is None
    assert a.samples == pytest.approx([0.004] * 30)
    # Each block: 3 untimed settling calls of 4 ms (the first to reach 10 ms), then
    # int(50 ms / 4 ms) = 12 timed calls; "b" starts right after the first block of "a".
    assert log.index("b") == 3 + 12
    # Round 2 rotates the order ("b" leads, then "a"); 30 samples take blocks 12, 12, 6.
    assert log[15:30] == ["b"] * 15
    assert log.count("a") == log.count("b") == 30 + 3 * 3
    assert c.error == "RuntimeError: c broke" and c.samples == []


def test_sequential_timing_runs_each_backend_to_completion():
    log = []
    runs = [_bench._Run("a"), _bench._Run("b")]
    steps = {"a": _fake_step(log, "a"), "b": _fake_step(log, "b")}
    timing = _bench._Timing(
        warmup=0, iters=None, min_time=0.0, min_iters=4, max_iters=4, interleave=False
    )
    _bench._time_backends(runs, steps, timing, no_grad=True)
    assert log == ["a"] * 4 + ["b"] * 4
    assert [len(r.samples) for r in runs] == [4, 4]


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


def test_run_zoo_fast_writes_markdown_json_and_png(tmp_path):
    markdown = _bench.run_zoo(
        tmp_path, fast=True, models=["mlp"], backends=("eager", "ortlab", "ort")
    )

    assert (tmp_path / "results.md").read_text(encoding="utf-8") == markdown
    assert "| mlp |" in markdown
    assert "ortlab / ort" in markdown and "ortlab / eager" in markdown
    for fact in ("torch_threads", "onnxruntime", "cores"):
        assert f"| {fact} |" in markdown
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data["machine"]["torch_threads"] == 2
    # The exporter's one-time set-up is timed apart, not charged to mlp's first call.
    assert data["machine"]["exporter_warm_up_s"] >= 0
    [mlp] = data["models"]
    assert [r["backend"] for r in mlp["results"]] == ["eager", "ortlab", "ort"]
    assert all(r["error"] == "" for r in mlp["results"])
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_zoo_rejects_an_unknown_model_before_running(tmp_path):
    with pytest.raises(errors.UnsupportedOptionError, match="no_such_model"):
        _bench.run_zoo(tmp_path, fast=True, models=["no_such_model"])
    assert not (tmp_path / "results.md").exists()


def test_bench_accepts_a_module_that_was_compiled_with_ortlab_before():
    model, inputs = _mlp()
    with torch.no_grad():
        ortlab.compile(model)(*inputs)  # may leave the backend attached to the module
    result = ortlab.bench(model, *inputs, backends=("eager", "ortlab"), **FAST)
    assert (result.frame["error"] == "").all(), result.frame["error"].tolist()


def test_bench_shows_a_progress_bar_only_when_interactive(monkeypatch, capsys):
    model, inputs = _mlp()
    ortlab.bench(model, *inputs, backends=("eager",), **FAST)
    assert "backend" not in capsys.readouterr().err  # pytest's stderr is no terminal

    monkeypatch.setattr(_bench, "_interactive", lambda: True)
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


def _result(name, medians, first_call_s=1.0, errors=None):
    import pandas as pd

    errors = errors or {}
    rows = [
        {
            **dict.fromkeys(_bench.COLUMNS, math.nan),
            "backend": b,
            "median_ms": m,
            "first_call_s": first_call_s,
            "error": errors.get(b, ""),
        }
        for b, m in medians.items()
    ]
    return _bench.BenchResult(frame=pd.DataFrame(rows), machine={}, name=name)


def test_targets_table_marks_each_target_met_or_missed():
    cnn = _result("cnn", {"eager": 1.0, "ortlab": 1.04, "ortlab-frozen": 0.9, "ort": 0.8}, 1.6)
    mlp = _result("mlp", {"eager": 1.0, "ortlab": 9.0, "ort": 0.1})  # not a target model
    (row,) = _bench.targets_table([cnn, mlp])
    # ortlab/ort 1.30 > 1.25; ortlab/eager 1.04 <= 1.05; frozen/ort 1.125 > 1.10; 1.6 s
    assert row == ["cnn", "1.30 missed", "1.04 met", "1.12 missed", "1.60 s missed"]
    assert _bench.targets_table([mlp]) is None


def test_targets_table_says_n_a_for_missing_or_failed_backends():
    gelu = _result(
        "gelu_mlp", {"eager": 2.0, "ortlab": 2.0, "ort": 2.0}, errors={"ortlab": "boom"}
    )
    (row,) = _bench.targets_table([gelu])
    assert row == ["gelu_mlp", "n/a", "n/a", "n/a", "n/a"]


def test_zoo_markdown_has_a_targets_section_for_target_models():
    gelu = _result("gelu_mlp", {"eager": 2.0, "ortlab": 2.0, "ortlab-frozen": 1.9, "ort": 1.8})
    markdown = _bench.zoo_markdown([gelu], machine={"torch_threads": 2})
    assert "## Targets" in markdown
    assert "| gelu_mlp | 1.11 met | 1.00 met | 1.06 met | 1.00 s met |" in markdown
    mlp = _result("mlp", {"eager": 1.0, "ortlab": 2.0})
    assert "## Targets" not in _bench.zoo_markdown([mlp], machine={"torch_threads": 2})


def test_profile_call_script_breaks_a_call_down_and_times_the_bare_sessions(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "profile_call.py"
    spec = importlib.util.spec_from_file_location("profile_call", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "profile.md"
    assert module.main(["--models", "mlp", "--calls", "5", "--frozen", "--out", str(out)]) == 0
    markdown = out.read_text(encoding="utf-8")
    assert "freeze_parameters=True" in markdown and "## mlp" in markdown
    (row,) = [line for line in markdown.splitlines() if line.startswith("| mlp |")]
    eager_us, ortlab_us, bare_us = (float(c) for c in row.split("|")[2:5])
    assert eager_us > 0 and ortlab_us > 0 and bare_us > 0
    assert "| ORT run |" in markdown
