"""Tests of ortlab.zoo: the registry, determinism, eager and compiled runs of every model."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

from ortlab import errors, zoo
from ortlab.zoo import _teaching

NAMES = (
    "mlp",
    "gelu_mlp",
    "cnn",
    "transformer_layer",
    "tiny_llama",
    "custom_op",
    "data_dependent",
)

# Expected output shape of each model for a batch size; keyed like NAMES so that a new model
# cannot be added without saying what it returns.
OUTPUT_SHAPES = {
    "mlp": lambda b: (b, 2),
    "gelu_mlp": lambda b: (b, 512),
    "cnn": lambda b: (b, 10),
    "transformer_layer": lambda b: (b, 128, 256),
    "tiny_llama": lambda b: (b, 8, 16),
    "custom_op": lambda b: (b, 4),
    "data_dependent": lambda b: (b, 4),
}

FAST_PATH_OPS = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")


@pytest.fixture(autouse=True)
def _reset_dynamo():
    # Compiled tests share dynamo's caches; a reset keeps one test's guards and recompile
    # counts from leaking into the next.
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def onnx_registry():
    from torch.onnx._internal.exporter import _registration

    # Building the torchlib registry takes a couple of seconds: once per module.
    return _registration.ONNXRegistry.from_torchlib()


def _aten_targets(model, inputs, *, grad: bool, dynamo_config=None) -> set[str]:
    """Compiles ``model`` and returns the names of the ATen ops in its forward graphs."""
    targets: set[str] = set()

    def record(gm, example_inputs):
        targets.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    backend = aot_autograd(fw_compiler=record)
    with torch._dynamo.config.patch(**(dynamo_config or {})), torch.set_grad_enabled(grad):
        torch.compile(model, backend=backend, dynamic=True, fullgraph=True)(*inputs)
    return targets


def assert_tensors_equal(a, b) -> None:
    """Tensors equal to the bit, with the same dtype, and ``None`` where the other has one."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
        else:
            assert x.dtype == y.dtype
            torch.testing.assert_close(x, y, rtol=0, atol=0)


# --- registry ----------------------------------------------------------------------------


def test_names_in_order():
    assert zoo.names() == NAMES
    assert tuple(m.name for m in zoo.all_models()) == NAMES
    assert set(OUTPUT_SHAPES) == set(NAMES)


def test_get_returns_the_model():
    for name in NAMES:
        assert zoo.get(name).name == name
        assert zoo.get(name) is zoo.get(name)


def test_get_unknown_name_lists_valid_names():
    with pytest.raises(errors.UnsupportedOptionError) as info:
        zoo.get("resnet")
    message = str(info.value)
    assert "'resnet'" in message
    for name in NAMES:
        assert name in message


@pytest.mark.parametrize("name", NAMES)
def test_metadata_is_sane(name):
    m = zoo.get(name)
    assert m.description and "\n" not in m.description
    assert m.batch_sizes == tuple(sorted(set(m.batch_sizes))) and m.batch_sizes[0] >= 1
    assert sum(b > 1 for b in m.batch_sizes) >= 2
    # tiny_llama's sweep (2, 4, 9) is the one of the original LLaMA benchmark.
    assert 1 in m.batch_sizes or name == "tiny_llama"
    assert m.default_batch in m.batch_sizes
    assert 0 < m.atol <= 1e-3 and 0 < m.rtol <= 1e-3
    assert isinstance(m.dynamo_config, types.MappingProxyType)
    assert isinstance(hash(m), int)


def test_fallback_and_dynamo_config_flags():
    flagged = {m.name for m in zoo.all_models() if m.expects_fallback}
    assert flagged == {"custom_op", "data_dependent"}
    assert dict(zoo.get("data_dependent").dynamo_config) == {
        "capture_dynamic_output_shape_ops": True
    }
    assert not zoo.get("data_dependent").trainable
    for name in NAMES:
        if name != "data_dependent":
            assert dict(zoo.get(name).dynamo_config) == {}


def test_zoo_model_copies_and_freezes_dynamo_config():
    config = {"capture_scalar_outputs": True}
    m = dataclasses.replace(zoo.get("mlp"), name="x", dynamo_config=config)
    config["capture_scalar_outputs"] = False
    assert m.dynamo_config["capture_scalar_outputs"] is True
    with pytest.raises(TypeError):
        m.dynamo_config["capture_scalar_outputs"] = False  # type: ignore[index]


def test_zoo_model_rejects_default_batch_outside_sweep():
    with pytest.raises(errors.UnsupportedOptionError, match="default_batch"):
        dataclasses.replace(zoo.get("mlp"), batch_sizes=(1, 2), default_batch=3)


@pytest.mark.parametrize("batch", [0, -1, 2.0, True])
def test_example_inputs_rejects_bad_batch(batch):
    with pytest.raises(errors.UnsupportedOptionError, match="batch"):
        zoo.get("mlp").example_inputs(batch)


# --- determinism and eager runs ----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES + zoo.corpus_names(ci=True))
def test_build_is_deterministic_and_leaves_global_rng_alone(name):
    m = zoo.get(name)
    rng_before = torch.random.get_rng_state()
    first, second = m.build(), m.build()
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    assert not first.training and not second.training
    sd1, sd2 = first.state_dict(), second.state_dict()
    assert list(sd1) == list(sd2) and sd1
    for key in sd1:
        torch.testing.assert_close(sd1[key], sd2[key], rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_deterministic(name):
    m = zoo.get(name)
    for batch in m.batch_sizes:
        assert_tensors_equal(m.example_inputs(batch), m.example_inputs(batch))
    assert_tensors_equal(m.example_inputs(), m.example_inputs(m.default_batch))


@pytest.mark.parametrize("name", NAMES)
def test_eager_runs_on_every_batch_size(name):
    m = zoo.get(name)
    model = m.build()
    with torch.no_grad():
        for batch in m.batch_sizes:
            out = model(*m.example_inputs(batch))
            assert tuple(out.shape) == OUTPUT_SHAPES[name](batch)
            assert out.dtype == torch.float32
            assert torch.isfinite(out).all()


def test_instantiate_builds_model_and_inputs():
    model, inputs = zoo.get("cnn").instantiate(2)
    assert isinstance(model, torch.nn.Module)
    assert tuple(inputs[0].shape) == (2, 3, 32, 32)
    _, default_inputs = zoo.get("cnn").instantiate()
    assert default_inputs[0].shape[0] == zoo.get("cnn").default_batch


def test_tiny_llama_inputs_follow_the_recipe():
    input_ids, attention_mask, position_ids = zoo.get("tiny_llama").example_inputs(4)
    assert input_ids.dtype == torch.int64 and tuple(input_ids.shape) == (4, 8)
    assert 0 <= int(input_ids.min()) and int(input_ids.max()) < 7
    assert attention_mask is None
    torch.testing.assert_close(position_ids, torch.arange(8).unsqueeze(0))


# --- compiled runs -----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_compiled_matches_eager(name):
    m = zoo.get(name)
    model, inputs = m.instantiate()
    with torch.no_grad():
        expected = model(*inputs)
        # fullgraph=True: a graph break would change how a backend partitions the model.
        with torch._dynamo.config.patch(**m.dynamo_config):
            compiled = torch.compile(model, backend="aot_eager", dynamic=True, fullgraph=True)
            actual = compiled(*inputs)
    torch.testing.assert_close(actual, expected, atol=m.atol, rtol=m.rtol)


def test_transformer_layer_graph_has_no_fast_path_op():
    model, inputs = zoo.get("transformer_layer").instantiate(2)
    # no_grad is the mode in which the stock layer takes its fused fast path.
    targets = _aten_targets(model, inputs, grad=False)
    assert not [t for t in targets if any(op in t for op in FAST_PATH_OPS)], targets
    assert any("layer_norm" in t for t in targets)


def test_stock_transformer_layer_would_take_the_fast_path():
    # Control for the test above: without the wrapper, no_grad tracing does hit the fused
    # op, so the check there can actually fail.
    model, inputs = zoo.get("transformer_layer").instantiate(2)
    targets = _aten_targets(model.layer, inputs, grad=False)
    assert any(any(op in t for op in FAST_PATH_OPS) for t in targets), targets


def test_transformer_layer_matches_stock_layer():
    model, (x,) = zoo.get("transformer_layer").instantiate(2)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.layer(x), atol=1e-5, rtol=1e-5)


def test_custom_op_has_no_onnx_translation(onnx_registry):
    zoo.get("custom_op").build()  # registers the op
    assert not onnx_registry.is_registered(torch.ops.ortlab_zoo.soft_clip.default)
    # Control: the registry does know ordinary ops.
    assert onnx_registry.is_registered(torch.ops.aten.relu.default)


def test_custom_op_survives_in_the_aten_graph():
    model, inputs = zoo.get("custom_op").instantiate()
    targets = _aten_targets(model, inputs, grad=False)
    assert "ortlab_zoo.soft_clip.default" in targets
    assert "aten.addmm.default" in targets


def test_custom_op_values_and_gradient():
    zoo.get("custom_op").build()
    x = torch.linspace(-6, 6, 25, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(torch.ops.ortlab_zoo.soft_clip(x, 2.0), 2.0 * torch.tanh(x / 2))
    assert torch.autograd.gradcheck(lambda t: torch.ops.ortlab_zoo.soft_clip(t, 2.0), (x,))


def test_custom_op_registration_survives_a_second_import(monkeypatch):
    zoo.get("custom_op").build()  # registers the op
    op = torch.ops.ortlab_zoo.soft_clip.default
    # Execute _teaching.py, which holds the registration, again under another module name
    # (as importlib.reload would), without disturbing sys.modules for other tests; building
    # the copy's "custom_op" then runs the copy's registration path with the op registered.
    spec = importlib.util.spec_from_file_location("_ortlab_teaching_copy", _teaching.__file__)
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, copy)  # dataclasses look the module up
    spec.loader.exec_module(copy)
    (custom_op,) = [m for m in copy.MODELS if m.name == "custom_op"]
    model, inputs = custom_op.instantiate()
    assert type(model) is copy._SoftClipMLP
    # Registering again would not fail: it would silently replace the op (a new overload).
    assert torch.ops.ortlab_zoo.soft_clip.default is op
    torch.testing.assert_close(model(*inputs), zoo.get("custom_op").build()(*inputs))


def test_data_dependent_graph_has_a_data_dependent_op():
    m = zoo.get("data_dependent")
    model, inputs = m.instantiate()
    targets = _aten_targets(model, inputs, grad=False, dynamo_config=m.dynamo_config)
    assert {"aten.index.Tensor", "aten.nonzero.default"} & targets, targets


# --- training ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [m.name for m in zoo.all_models() if m.trainable])
def test_trainable_models_have_finite_grads(name):
    model, inputs = zoo.get(name).instantiate()
    out = model(*inputs)
    # A fixed random projection: out.sum() would give zero grads through a final LayerNorm.
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    (out * weights).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


# --- import cost and optional dependency -------------------------------------------------


def test_import_is_cheap():
    code = (
        "import sys, torch, ortlab.zoo\n"
        "print('transformers' in sys.modules, hasattr(torch.ops.ortlab_zoo, 'soft_clip'))\n"
    )
    repo_root = Path(zoo.__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]


def test_tiny_llama_without_transformers_raises_missing_dependency(monkeypatch):
    # A None entry in sys.modules makes `import transformers` raise ImportError.
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(errors.MissingDependencyError, match="transformers"):
        zoo.get("tiny_llama").build()
