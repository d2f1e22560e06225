"""The project's benchmark (ortlab.bench run_zoo, ``ortlab bench``): the zoo under every
backend, its targets, its report, and the profile script built on the same engine."""

from __future__ import annotations

import json
import math

import pytest

import ortlab
from ortlab import cli, errors
from ortlab.bench import (
    COLUMNS,
    BenchResult,
    _bench,
    run_zoo,
    targets_table,
    zoo_markdown,
)


def test_run_zoo_fast_writes_markdown_json_and_png(tmp_path, monkeypatch):
    order = []
    real_warm_up, real_bench = ortlab.backend.warm_up, _bench.bench

    def warm_up(*args):
        order.append("warm_up")
        real_warm_up(*args)
        return 1.234

    def bench(*args, **kwargs):
        order.append(kwargs["name"])
        return real_bench(*args, **kwargs)

    monkeypatch.setattr(ortlab.backend, "warm_up", warm_up)
    monkeypatch.setattr(_bench, "bench", bench)
    markdown = run_zoo(
        tmp_path, fast=True, models=["mlp"], backends=("eager", "ortlab", "ort")
    )

    assert (tmp_path / "results.md").read_text(encoding="utf-8") == markdown
    assert "| mlp |" in markdown
    assert "ortlab / ort" in markdown and "ortlab / eager" in markdown
    for fact in ("torch_threads", "onnxruntime", "cores"):
        assert f"| {fact} |" in markdown
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data["machine"]["torch_threads"] == 2
    # The exporter's one-time set-up is timed apart, before any model, so that it is not
    # charged to the first model's first call.
    assert order == ["warm_up", "mlp"]
    assert data["machine"]["exporter_warm_up_s"] == 1.23
    [mlp] = data["models"]
    assert [r["backend"] for r in mlp["results"]] == ["eager", "ortlab", "ort"]
    assert all(r["error"] == "" for r in mlp["results"])
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_zoo_rejects_an_unknown_model_before_running(tmp_path):
    with pytest.raises(errors.UnsupportedOptionError, match="no_such_model"):
        run_zoo(tmp_path, fast=True, models=["no_such_model"])
    assert not (tmp_path / "results.md").exists()


def _result(name, medians, first_call_s=1.0, errors=None):
    import pandas as pd

    errors = errors or {}
    rows = [
        {
            **dict.fromkeys(COLUMNS, math.nan),
            "backend": b,
            "median_ms": m,
            "first_call_s": first_call_s,
            "error": errors.get(b, ""),
        }
        for b, m in medians.items()
    ]
    return BenchResult(frame=pd.DataFrame(rows), machine={}, name=name)


def test_targets_table_marks_each_target_met_or_missed():
    cnn = _result("cnn", {"eager": 1.0, "ortlab": 1.04, "ortlab-frozen": 0.9, "ort": 0.8}, 1.6)
    mlp = _result("mlp", {"eager": 1.0, "ortlab": 9.0, "ort": 0.1})  # not a target model
    (row,) = targets_table([cnn, mlp])
    # ortlab/ort 1.30 > 1.25; ortlab/eager 1.04 <= 1.05; frozen/ort 1.125 > 1.10; 1.6 s
    assert row == ["cnn", "1.30 missed", "1.04 met", "1.12 missed", "1.60 s missed"]
    assert targets_table([mlp]) is None


def test_targets_table_says_n_a_for_missing_or_failed_backends():
    gelu = _result(
        "gelu_mlp", {"eager": 2.0, "ortlab": 2.0, "ort": 2.0}, errors={"ortlab": "boom"}
    )
    (row,) = targets_table([gelu])
    assert row == ["gelu_mlp", "n/a", "n/a", "n/a", "n/a"]


def test_zoo_markdown_has_a_targets_section_for_target_models():
    gelu = _result("gelu_mlp", {"eager": 2.0, "ortlab": 2.0, "ortlab-frozen": 1.9, "ort": 1.8})
    markdown = zoo_markdown([gelu], machine={"torch_threads": 2})
    assert "## Targets" in markdown
    assert "| gelu_mlp | 1.11 met | 1.00 met | 1.06 met | 1.00 s met |" in markdown
    mlp = _result("mlp", {"eager": 1.0, "ortlab": 2.0})
    assert "## Targets" not in zoo_markdown([mlp], machine={"torch_threads": 2})


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


def test_ortlab_bench_command_passes_models_backends_threads_and_training(monkeypatch):
    seen = {}

    def fake_run_zoo(out_dir, **kwargs):
        seen.update(out_dir=out_dir, **kwargs)
        return "# results"

    from ortlab.bench import _zoo

    monkeypatch.setattr(_zoo, "run_zoo", fake_run_zoo)
    argv = [
        "bench",
        "--out",
        "o",
        "--fast",
        "--models",
        "mlp,cnn",
        "--backends",
        "eager, ortlab",
        "--threads",
        "1",
        "--training",
    ]
    assert cli.main(argv) == 0
    assert seen == {
        "out_dir": "o",
        "fast": True,
        "models": ["mlp", "cnn"],
        "backends": ["eager", "ortlab"],
        "threads": 1,
        "training": True,
    }
    cli.main(["bench"])
    assert (seen["models"], seen["backends"], seen["threads"], seen["training"]) == (
        None,
        None,
        2,
        False,
    )
