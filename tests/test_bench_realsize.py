"""The real-size benchmark, the training-step table and the generation table, on their
tiny configurations (the same code paths as ``make bench``; nothing here is timed)."""

from __future__ import annotations

import inspect
import json
import math
import sys
from unittest import mock

import pytest
import torch

pytest.importorskip("transformers")

from ortlab import backend, cli, errors
from ortlab.bench import _bench, _generation, _realsize, _training

FAST = dict(warmup=0, iters=2)


def test_realsize_writes_the_table_with_floor_ratios_and_targets(tmp_path):
    markdown = _realsize.run_realsize(
        tmp_path,
        fast=True,
        models=["bert-base"],
        backends=("eager", "ortlab", "ort"),
        progress=False,
    )
    assert "| bert-base |" in markdown
    assert "ortlab / ort" in markdown and "ortlab-frozen / ort ≤ 1.03" in markdown
    assert "Fast mode" in markdown
    payload = json.loads((tmp_path / "realsize.json").read_text())
    (model,) = payload["models"]
    assert [r["backend"] for r in model["results"]] == ["eager", "ortlab", "ort"]
    assert all(not r["error"] for r in model["results"])
    assert payload["targets"][0][0] == "bert-base"
    assert "load_avg_1m_after" in payload["machine"]


def test_every_realsize_model_builds_tiny_and_runs_eagerly():
    for spec in _realsize.REALSIZE_MODELS:
        model, inputs = spec.build(True)
        with torch.no_grad():
            out = model(*inputs)
        assert isinstance(out, torch.Tensor) and out.numel() > 0, spec.name


def test_decode_step_repeats_on_the_same_cache_tensors():
    model, (token, mask, *cache) = _realsize.get("llama-gqa-decode").build(True)
    sizes = [c.shape for c in cache]
    with torch.no_grad():
        first = model(token, mask, *cache)
        second = model(token, mask, *cache)
    assert [c.shape for c in cache] == sizes  # the caller's cache did not grow
    assert cache[0].shape[2] == _realsize.DECODE_CACHE
    torch.testing.assert_close(first, second)


def test_an_unknown_realsize_model_is_refused_with_the_names():
    with pytest.raises(errors.UnsupportedOptionError, match="bert-base"):
        _realsize.get("bert-huge")


def test_openvino_missing_is_a_row_naming_the_extra():
    model = torch.nn.Linear(4, 2).eval()
    with mock.patch.dict(sys.modules, {"openvino": None, "openvino.torch": None}):
        result = _bench.bench(
            model, torch.randn(2, 4), backends=("eager", "openvino"), progress=False, **FAST
        )
    row = result.row("openvino")
    assert "ortlab[peers]" in row["error"]
    assert not result.row("eager")["error"]


def test_training_rows_time_a_step_with_the_models_own_loss(tmp_path):
    markdown = _training.run_training(
        tmp_path, fast=True, models=["resnet-18"], backends=("eager", "aot_eager")
    )
    payload = json.loads((tmp_path / "training.json").read_text())
    rows = {r["backend"]: r for r in payload["rows"]}
    assert set(rows) == {"eager", "aot_eager"}
    assert all(not r["error"] and r["iters"] >= 1 for r in rows.values())
    assert rows["eager"]["first_loss"] == pytest.approx(rows["aot_eager"]["first_loss"])
    assert "| resnet-18 |" in markdown


def test_training_rows_compare_the_first_steps_gradients_with_eagers(tmp_path):
    if "OpenVINOExecutionProvider" not in backend.available_providers():
        pytest.skip("OpenVINO's plugin provider is not installed or cannot run here")
    backends = ("eager", "ortlab", "ortlab-openvino")
    markdown = _training.run_training(
        tmp_path, fast=True, models=["bert-4l"], backends=backends
    )
    payload = json.loads((tmp_path / "training.json").read_text())
    rows = {r["backend"]: r for r in payload["rows"]}
    assert all(not r["error"] for r in rows.values())
    assert rows["eager"]["grad_error"] == 0.0
    assert 0.0 < rows["ortlab"]["grad_error"] < 1e-4
    assert 0.0 < rows["ortlab-openvino"]["grad_error"] < 1e-4
    assert "| ortlab-openvino ms |" in markdown and "grad error, ortlab-openvino" in markdown


def test_the_gradient_error_is_the_worst_parameters_relative_difference():
    eager = [torch.tensor([1.0, -4.0]), torch.tensor([0.5]), torch.zeros(3), None]
    ours = [torch.tensor([1.0, -3.0]), torch.tensor([0.5]), torch.zeros(3), None]
    assert _training.gradient_error(ours, eager) == pytest.approx(0.25)  # 1.0 of 4.0
    # A gradient far below the model's largest is compared with a thousandth of it.
    tiny = [torch.tensor([4.0]), torch.tensor([1e-9])]
    assert _training.gradient_error([tiny[0], torch.tensor([2e-9])], tiny) < 1e-5
    assert _training.gradient_error([tiny[0], torch.tensor([2e-3])], tiny) > 0.4
    assert _training.gradient_error([*ours[:2], torch.ones(3), None], eager) == 250.0
    assert _training.gradient_error([*ours[:3], torch.ones(1)], eager) == math.inf


def test_training_step_moves_the_weights_and_clears_the_gradients():
    net, inputs = _training.TRAINING_MODELS[0].build(True)
    model = _training.LossOf(net, list(inputs))
    before = [p.detach().clone() for p in model.parameters()]
    step = _training.make_train_step(model, model, tuple(inputs.values()))
    loss = step()
    assert loss.ndim == 0 and not loss.requires_grad
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())


def test_training_refuses_the_inference_floor(tmp_path):
    with pytest.raises(errors.UnsupportedOptionError, match="inference only"):
        _training.run_training(tmp_path, fast=True, backends=("eager", "ort"))


def test_compiled_forward_keeps_the_signature_generate_inspects():
    lm = _realsize.llama_gqa(True)
    params = set(inspect.signature(lm.forward).parameters)
    _generation.compiled_forward(lm, "aot_eager")
    assert set(inspect.signature(lm.forward).parameters) == params


def test_generation_rows_compare_tokens_with_eager():
    lm = _realsize.llama_gqa(True)
    prompt = torch.randint(4, 100, (1, 6))
    rows = _generation.bench_cache(
        lm, prompt, "dynamic", ("eager", "aot_eager"), new_tokens=3, **FAST
    )
    by_backend = {r.backend: r for r in rows}
    assert by_backend["aot_eager"].same_tokens is True
    assert by_backend["aot_eager"].tokens_per_s > 0


def test_compiling_the_module_compiles_nothing_for_generate():
    lm = _realsize.llama_gqa(True)
    assert _generation.compiled_module_generate_graphs(lm, torch.randint(4, 100, (1, 6))) == 0


def test_generation_markdown_says_what_to_compile():
    rows = [_generation.GenerationRow("dynamic", "eager", tokens_per_s=10.0, median_ms=6.4)]
    text = _generation.generation_markdown(
        rows, machine={"torch_threads": 2}, compiled_module_graphs=0, description="x"
    )
    assert "compiled 0 graphs" in text and "`model.forward`" in text


def test_cli_refuses_an_unknown_real_size_part(capsys):
    assert cli.main(["bench", "--real-size", "speed"]) == 2
    assert "unknown part" in capsys.readouterr().out


def test_first_call_runs_new_processes_and_reads_the_capture_back(tmp_path):
    from ortlab.bench import _first_call

    markdown = _first_call.run_first_call(tmp_path, fast=True, rounds=1)
    payload = json.loads((tmp_path / "first_call.json").read_text())
    (steps,) = payload["rounds"]
    assert [s["step"] for s in steps] == list(_first_call.STEPS)
    assert all("error" not in s for s in steps), steps
    assert [s["source"] for s in steps] == [None, None, "traced", "file"]
    assert all(s["max_abs_diff"] < 1e-4 for s in steps)
    assert "| read back |" in markdown and "Target: read back ≤ 0.30× cold:" in markdown
    assert (tmp_path / "first_call.md").read_text() == markdown


def test_first_call_table_shows_errors_and_an_unexpected_source():
    from ortlab.bench import _first_call

    rounds = [
        [
            {"step": "cold", "first_call_s": 10.0, "source": None, "max_abs_diff": 0.0},
            {"step": "cached", "first_call_s": 5.0, "source": None, "max_abs_diff": 0.0},
            {"step": "precompile", "error": "RuntimeError: boom"},
            {"step": "read back", "first_call_s": 5.0, "source": "traced", "note": "n"},
        ]
    ]
    markdown = _first_call.first_call_markdown(rounds, machine={}, fast=False)
    assert "| cached | 5.00 | 0.50 |" in markdown
    assert "error: RuntimeError: boom" in markdown
    assert "5.00 (traced)" in markdown  # read back, but it traced again
    assert "read back ≤ 0.30× cold: missed" in markdown and "- read back: n" in markdown
