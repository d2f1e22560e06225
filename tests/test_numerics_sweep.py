"""ortlab.diff(sweep=...): one row per configuration, timed together by the bench engine."""

from __future__ import annotations

import onnxruntime
import pytest
import torch
from numerics_helpers import x_of

import ortlab
from ortlab import errors, zoo


def test_sweep_reports_error_and_latency_per_configuration_and_skips_missing_providers():
    model, inputs = zoo.get("mlp").instantiate(4)
    sweep = {
        "providers": ["CPUExecutionProvider", "CUDAExecutionProvider"],
        "graph_optimization_level": ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"],
    }
    report = ortlab.diff(model, *inputs, sweep=sweep, repeat=2)
    rows = report.sweep
    assert rows[0].label == "eager (PyTorch)" and rows[0].latency_ms > 0
    assert len(rows) == 1 + 4
    cuda_available = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    for row in rows[1:]:
        if "CUDA" in row.label and not cuda_available:
            assert row.status.startswith("skipped") and row.report is None
            continue
        assert row.status == "ok" and row.passed and row.latency_ms > 0
        level = row.settings["graph_optimization_level"]
        session_options = row.report.backend.options.ort_session_options
        assert session_options.graph_optimization_level.name == level
        assert session_options.intra_op_num_threads == torch.get_num_threads()
        assert row.providers[0] == row.settings["providers"]
    frame = report.sweep_frame()
    assert list(frame["config"])[1] == "CPU / ORT_DISABLE_ALL"
    assert "latency_ms" in frame.columns


def test_sweep_rejects_unknown_keys_and_levels():
    with pytest.raises(errors.UnsupportedOptionError, match="sweep key"):
        ortlab.diff(lambda t: t + 1, x_of(2), sweep={"fast": [True]})
    with pytest.raises(errors.UnsupportedOptionError, match="ORT_ENABLE_ALL"):
        ortlab.diff(lambda t: t + 1, x_of(2), sweep={"graph_optimization_level": ["max"]})
