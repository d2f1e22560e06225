"""DiffReport.save_repro: the partition run to look at, as an ONNX test case that a bare
InferenceSession reproduces, with eager's outputs as the expected ones."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch
from numerics_helpers import sigmoid_to_relu, x_of

import ortlab
from ortlab import errors, numerics, zoo


def _run_bare(path):
    model, inputs, expected = ortlab.backend.load_test_case(path)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    return model, inputs, expected, session.run(None, dict(zip(names, inputs)))


@pytest.mark.parametrize("freeze", [False, True], ids=["inputs", "frozen"])
def test_save_repro_writes_the_failing_partition_with_orts_inputs_and_eagers_outputs(
    tmp_path, freeze
):
    model, inputs = zoo.get("custom_op").instantiate()
    report = ortlab.diff(
        model, *inputs, pre_ort_model_transforms=[sigmoid_to_relu], freeze_parameters=freeze
    )
    part = report.repro_partition
    assert part is report.failing_partitions[0]
    path = report.save_repro(tmp_path / "repro")
    assert path == str(tmp_path / "repro")
    onnx_model, saved, expected, got = _run_bare(path)
    capture = part.run_data
    frozen = capture.session.frozen_inputs
    assert len(saved) == len(capture.inputs) - len(frozen) == len(onnx_model.graph.input)
    assert bool(frozen) == freeze
    # The model on the saved inputs is what ONNX Runtime returned during the diff...
    for mine, theirs in zip(got, capture.outputs):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=0, atol=1e-6)
    # ... and the expected outputs are eager's, as far from it as the report said.
    diffs = [
        numerics.compare_tensors("", torch.tensor(g), torch.tensor(e))
        for g, e in zip(got, expected)
    ]
    assert numerics.max_abs_error(diffs) == pytest.approx(part.local_error, rel=1e-6)
    assert part.local_error > 0.1
    readme = (tmp_path / "repro" / "README.md").read_text()
    first = report.first_divergent
    assert first.node == "sigmoid" and first.describe() in readme
    source = report.backend.graphs[first.graph_index].verdict("sigmoid").source
    assert "_teaching.py" in source and f"- source: {source}" in readme
    assert f"max abs error {ortlab._html.number(part.local_error)}" in readme
    assert "onnx_test_runner" in readme and "load_test_case" in readme


def test_save_repro_says_when_nothing_fails(tmp_path):
    report = ortlab.diff(lambda t: t.sin() * 2, x_of(3, 4))
    assert report.passed and report.repro_partition is None
    with pytest.raises(errors.OrtlabError, match="nothing to save") as raised:
        report.save_repro(tmp_path / "repro")
    assert "passed" in str(raised.value)
    assert not (tmp_path / "repro").exists()
