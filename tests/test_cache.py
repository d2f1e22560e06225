"""The compile cache on disk: a second compile of the same partition reads its model and
decisions back; an entry that does not check out is rebuilt, never run."""

from __future__ import annotations

import functools
import os

import pytest
import torch

import ortlab
from ortlab.backend import _backend, _cache, _torch_private
from ortlab.backend._backend import warm_up


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.GELU(),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 4),
    ).eval()


def _compile_and_run(model, directory, x, **options):
    """A fresh compile, as a new process would make it (Dynamo's caches reset)."""
    torch._dynamo.reset()
    compiled = ortlab.compile(model, compile_cache=str(directory), **options)
    with torch.no_grad():
        out = compiled(x)
    (session,) = compiled.ortlab_backend.sessions
    return out, session


def test_a_second_compile_reads_the_model_and_its_decisions_back(tmp_path):
    model, x = _model(), torch.randn(3, 16)
    with torch.no_grad():
        expected = model(x)
    first_out, first = _compile_and_run(model, tmp_path, x)
    second_out, second = _compile_and_run(model, tmp_path, x)
    assert first.export_method == "direct" and second.export_method == "cache"
    torch.testing.assert_close(second_out, expected)
    torch.testing.assert_close(first_out, expected)
    assert second.model.SerializeToString() == first.model.SerializeToString()
    assert (second.fusions, second.threads) == (first.fusions, first.threads)
    assert "from the compile cache" in second.threads_note
    # Nothing was exported, fused, checked or timed again.
    assert set(second.timings) == {"cache", "session", "first_run"}
    assert second.export_seconds == second.timings["cache"]


def test_frozen_weights_are_part_of_the_key(tmp_path):
    model, x = _model(), torch.randn(3, 16)
    _compile_and_run(model, tmp_path, x, freeze_parameters=True)
    with torch.no_grad():
        model[0].weight.mul_(2)
        expected = model(x)
    out, session = _compile_and_run(model, tmp_path, x, freeze_parameters=True)
    assert session.export_method == "direct"  # a miss: the weights changed
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(
    "damage", ["model", "meta", "meta-not-an-object", "half-deleted", "refused"]
)
def test_an_entry_that_does_not_check_out_is_rebuilt_not_run(tmp_path, damage):
    model, x = _model(), torch.randn(3, 16)
    with torch.no_grad():
        expected = model(x)
    _compile_and_run(model, tmp_path, x)
    (entry,) = [
        os.path.join(r, d) for r, ds, _ in os.walk(tmp_path) for d in ds if len(d) == 64
    ]
    if damage == "model":
        with open(os.path.join(entry, "model.onnx"), "r+b") as f:
            f.seek(40)
            f.write(b"\xff\xff\xff\xff")
    elif damage == "meta":
        with open(os.path.join(entry, "meta.json"), "w") as f:
            f.write("{not json")
    elif damage == "meta-not-an-object":  # JSON, but not the entry's: every process fell back
        with open(os.path.join(entry, "meta.json"), "w") as f:
            f.write("null")
    elif damage == "half-deleted":  # a process stopped while it evicted: re-exported forever
        os.remove(os.path.join(entry, "model.onnx"))
    else:  # a model ONNX Runtime refuses, under a checksum that matches it
        import hashlib
        import json

        bad = b"not an onnx model"
        with open(os.path.join(entry, "model.onnx"), "wb") as f:
            f.write(bad)
        with open(os.path.join(entry, "meta.json")) as f:
            meta = json.load(f)
        meta["sha256"] = hashlib.sha256(bad).hexdigest()
        with open(os.path.join(entry, "meta.json"), "w") as f:
            json.dump(meta, f)
    out, session = _compile_and_run(model, tmp_path, x)
    assert session.export_method == "direct"
    torch.testing.assert_close(out, expected)
    _, again = _compile_and_run(model, tmp_path, x)  # rebuilt and written again
    assert again.export_method == "cache"


@pytest.mark.parametrize("error", [PermissionError, FileNotFoundError])
def test_a_cache_this_process_can_read_but_not_touch_still_serves(
    tmp_path, monkeypatch, error
):
    # Marking an entry used (its mtime) fails in a cache another user filled, or when
    # another process evicts the entry meanwhile: that sent the partition to PyTorch.
    model, x = _model(), torch.randn(3, 16)
    _compile_and_run(model, tmp_path, x)

    def cannot(*args, **kwargs):
        raise error("not this process's to touch")

    monkeypatch.setattr(_cache.os, "utime", cannot)
    out, session = _compile_and_run(model, tmp_path, x)
    assert session.export_method == "cache"
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


def _as_a_new_process(monkeypatch):
    """Forgets which ops the exporter translates, and makes building its registry fail."""

    def no_registry(*args):
        raise AssertionError("the exporter's registry was built")

    monkeypatch.setattr(_torch_private, "_KNOWN_TRANSLATIONS", {})
    monkeypatch.setattr(_backend, "_TABLES_SEEN", set())
    monkeypatch.setattr(_torch_private, "onnx_registry", functools.cache(no_registry))


def test_a_first_call_from_the_cache_does_not_build_the_registry(tmp_path, monkeypatch):
    model, x = _model(), torch.randn(3, 16)
    with torch.no_grad():
        expected = model(x)
    _compile_and_run(model, tmp_path, x)
    translated = _torch_private.translated_ops()
    assert len(list((tmp_path / "tables").iterdir())) == 1  # the table was written
    _as_a_new_process(monkeypatch)
    out, session = _compile_and_run(model, tmp_path, x)
    assert session.export_method == "cache"
    torch.testing.assert_close(out, expected)
    assert _torch_private.translated_ops().names == translated.names  # read from the table
    # A miss exports, and builds the registry then: here, where that fails, the graph
    # runs in PyTorch, visibly.
    torch._dynamo.reset()
    compiled = ortlab.compile(model, compile_cache=str(tmp_path))
    y = torch.randn(5, 16)
    with pytest.warns(ortlab.FallbackWarning, match="registry was built"), torch.no_grad():
        torch.testing.assert_close(compiled(y), model(y))


def test_a_damaged_table_of_translated_ops_is_rebuilt(tmp_path, monkeypatch):
    cache = _cache.CompileCache(str(tmp_path))
    warm_up(None, cache)
    (table,) = (tmp_path / "tables").iterdir()
    good = table.read_text()
    table.write_text(good.replace("aten::add.Tensor", "aten::add.Tensr"))  # checksum fails
    monkeypatch.setattr(_torch_private, "_KNOWN_TRANSLATIONS", {})
    monkeypatch.setattr(_backend, "_TABLES_SEEN", set())
    warm_up(None, cache)
    assert table.read_text() == good
    assert "aten::add.Tensor" in _torch_private.translated_ops().names


def test_the_cache_is_bounded_and_cleared(tmp_path):
    cache = _cache.CompileCache(str(tmp_path), max_bytes=1)
    decisions = _cache.Decisions(False, {}, None, 1, None, None, {}, "direct", ())
    cache.store("a" * 64, b"x" * 100, decisions)
    assert cache.size() == 0  # evicted at once: over the bound
    cache.max_bytes = 10_000
    cache.store("b" * 64, b"x" * 100, decisions)
    assert cache.size() > 100
    assert ortlab.clear_cache(str(tmp_path)) > 100 and cache.size() == 0


def test_the_environment_moves_or_turns_off_the_default_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(_cache.ENVIRONMENT, str(tmp_path))
    assert _cache.directory_for(None) == str(tmp_path)
    assert _cache.directory_for(False) is None
    monkeypatch.setenv(_cache.ENVIRONMENT, "off")
    assert _cache.directory_for(None) is None and _cache.directory_for(True) is None
    assert _cache.directory_for("elsewhere") == "elsewhere"


def test_transforms_make_a_partition_unkeyable(tmp_path):
    model, x = _model(), torch.randn(3, 16)
    kwargs = {"pre_ort_model_transforms": [lambda m: None]}
    _compile_and_run(model, tmp_path, x, **kwargs)
    _, session = _compile_and_run(model, tmp_path, x, **kwargs)
    assert session.export_method == "direct"


def test_a_float64_model_from_the_cache_keeps_float64_scales(tmp_path):
    """The session made from a cache entry leaves out ONNX Runtime's MatMulScaleFusion for
    float64 models too (see ``_session.inexact_optimizers``): 3e-8 relative otherwise."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(8, 8, dtype=torch.float64, generator=g) for _ in range(2))
    model = _Scaled().double().eval()
    expected = model(a, b)
    for method in ("direct", "cache"):
        torch._dynamo.reset()
        compiled = ortlab.compile(model, compile_cache=str(tmp_path))
        with torch.no_grad():
            got = compiled(a, b)
        (session,) = compiled.ortlab_backend.sessions
        assert session.export_method == method
        assert ((got - expected).abs().max() / expected.abs().max()).item() < 1e-13


class _Scaled(torch.nn.Module):
    def forward(self, a, b):
        return (a @ b) / 3


def test_a_file_entry_is_read_back_only_as_the_file_it_was_stored_as(tmp_path):
    cache = _cache.CompileCache(str(tmp_path))
    cache.store_file("c" * 64, "capture.bin", b"saved")
    assert cache.load_file("c" * 64, "capture.bin") == b"saved"
    decisions = _cache.Decisions(False, {}, None, 1, None, None, {}, "direct", ())
    cache.store("d" * 64, b"model", decisions)  # a partition's entry, not a file's
    assert cache.load_file("d" * 64, "model.onnx") is None
    assert cache.load("d" * 64) is None  # deleted as not what was asked for
