"""Plugin execution providers (``_plugins``): OpenVINO's, from ``onnxruntime-ep-openvino``,
registered with ONNX Runtime, checked against PyTorch and timed against the CPU provider
per session."""

from __future__ import annotations

import copy
import html
import types
import warnings

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import ortlab
from ortlab.backend import _build, _plugins, _session
from ortlab.views import _fragments

pytest.importorskip("onnxruntime_ep_openvino")  # installed with the test extra

OPENVINO = _plugins.OPENVINO

needs_device = pytest.mark.skipif(
    bool(_plugins.unusable(OPENVINO)),
    reason=f"OpenVINO's plugin cannot run here: {_plugins.unusable(OPENVINO)}",
)


def _matmul_model(n: int = 256) -> bytes:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "g", [a, b], [y]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10
    )
    return model.SerializeToString()


@needs_device
def test_openvino_runs_a_session_in_float32():
    assert OPENVINO in _plugins.installed()
    assert OPENVINO in _session.available_providers()
    session = _session.create_session(_matmul_model(), [(OPENVINO, {})], None, 2)
    assert session.get_providers()[0] == OPENVINO
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    (got,) = session.run(None, {"a": a, "b": b})
    want = a.astype(np.float64) @ b.astype(np.float64)
    # OpenVINO's default on processors with AMX is bfloat16: ~1e-2 of the scale.
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


@needs_device
def test_the_split_searchs_quiet_trial_sessions_run_on_the_plugin():
    options = _session.trial_session_options(1)
    session = _session.create_session(_matmul_model(8), [(OPENVINO, {})], options, 1)
    assert session.get_providers()[0] == OPENVINO


@needs_device
def test_a_load_config_of_the_users_own_is_kept():
    given = {"load_config": '{"CPU": {"INFERENCE_NUM_THREADS": "1"}}'}
    assert _plugins.provider_options(OPENVINO, given, 2) == given
    made = _plugins.provider_options(OPENVINO, {}, 3)
    assert '"INFERENCE_PRECISION_HINT": "f32"' in made["load_config"]
    assert '"INFERENCE_NUM_THREADS": "3"' in made["load_config"]


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(50, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 5))

    def forward(self, ids, labels):
        logits = self.mlp(self.words(ids)).flatten(0, 1)
        return nn.functional.cross_entropy(logits, labels.flatten())


@needs_device
def test_a_training_step_on_openvino_matches_eager_and_each_session_says_where_it_runs():
    torch.manual_seed(0)
    model = _Net()
    reference = copy.deepcopy(model)
    ids, labels = torch.randint(0, 50, (4, 16)), torch.randint(0, 5, (4, 16))
    options = {"preferred_execution_providers": [OPENVINO], "compile_cache": False}
    compiled = ortlab.compile(model, options=options)
    compiled(ids, labels).backward()
    reference(ids, labels).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    backend = compiled.ortlab_backend
    sessions = [s for p in backend.partitions for s in p.sessions]
    assert {g.kind for g in backend.graphs} == {"forward", "backward"}
    assert sessions and all(not g.eager_node_names for g in backend.graphs)
    for session in sessions:
        kept = session.provider_note.split(":")[0]
        assert kept in (OPENVINO, _session.CPU)
        assert f"ms {OPENVINO} vs" in session.provider_note  # both were timed
        assert session.providers[0] == kept
        info = html.unescape(_fragments.onnx_model_info(session))
        assert f"{', '.join(session.providers)} ({session.provider_note})" in info


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = nn.Linear(32, 32), nn.LayerNorm(32)

    def forward(self, x, residual):
        return self.norm(nn.functional.gelu(self.linear(x)) + residual)


@pytest.mark.parametrize(
    "providers", [[], pytest.param([OPENVINO], marks=needs_device)], ids=["cpu", "openvino"]
)
def test_onnx_runtimes_fused_operators_are_not_made_for_a_plugin(providers):
    options = {"preferred_execution_providers": providers, "ort_fusions": True}
    compiled = ortlab.compile(_Block().eval(), options={**options, "compile_cache": False})
    with torch.no_grad():
        compiled(torch.randn(2, 8, 32), torch.randn(2, 8, 32))
    (session,) = (s for p in compiled.ortlab_backend.partitions for s in p.sessions)
    # They are com.microsoft operators, which only ONNX Runtime's CPU provider runs.
    assert bool(session.fusions) is not bool(providers)


class _FakeRunner:
    def __init__(self, clock, seconds: float, out: torch.Tensor) -> None:
        self.clock, self.seconds, self.out = clock, seconds, out

    def run(self, args):
        self.clock.now += self.seconds
        return [self.out]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _request(expected: torch.Tensor):
    record = types.SimpleNamespace(name="p")
    return types.SimpleNamespace(
        providers=[(OPENVINO, {}), (_session.CPU, {})],
        eager=lambda *args: expected,
        args=(),
        single=True,
        record=record,
    )


@pytest.mark.parametrize(
    ("plugin_ms", "cpu_ms", "kept"), [(1.0, 3.0, OPENVINO), (5.0, 2.0, _session.CPU)]
)
def test_the_faster_of_the_plugin_and_the_cpu_provider_is_kept(plugin_ms, cpu_ms, kept):
    clock, value = _Clock(), torch.ones(3)
    plugin = _FakeRunner(clock, plugin_ms / 1e3, value)
    cpu = _FakeRunner(clock, cpu_ms / 1e3, value)
    runner, note = _build._plugin_or_cpu(_request(value), plugin, lambda: cpu, clock=clock)
    assert runner is (plugin if kept == OPENVINO else cpu)
    assert note.startswith(f"{kept}: {plugin_ms:.3f} ms {OPENVINO} vs {cpu_ms:.3f} ms")


def test_a_plugin_whose_outputs_differ_from_pytorchs_gives_way_to_the_cpu_provider():
    clock = _Clock()
    plugin = _FakeRunner(clock, 1e-3, torch.tensor([1.0, 2.0, 3.5]))
    cpu = _FakeRunner(clock, 9e-3, torch.tensor([1.0, 2.0, 3.0]))
    request = _request(torch.tensor([1.0, 2.0, 3.0]))
    runner, note = _build._plugin_or_cpu(request, plugin, lambda: cpu, clock=clock)
    assert runner is cpu
    assert note.startswith(f"{_session.CPU}: {OPENVINO}'s outputs differ from PyTorch's")


@needs_device
def test_a_cached_session_runs_where_the_first_process_chose(tmp_path, monkeypatch):
    def cpu_instead(request, runner, make_cpu, **_):
        return make_cpu(), f"{_session.CPU}: chosen"

    monkeypatch.setattr(_build, "_plugin_or_cpu", cpu_instead)
    options = {"preferred_execution_providers": [OPENVINO], "compile_cache": str(tmp_path)}
    model, x = nn.Linear(8, 4), torch.randn(2, 8)
    with torch.no_grad():
        for _ in range(2):  # a new backend each time: the second reads the cache
            compiled = ortlab.compile(model, options=options)
            compiled(x)
            (session,) = (s for p in compiled.ortlab_backend.partitions for s in p.sessions)
            assert session.providers == (_session.CPU,)
            assert session.provider_note == f"{_session.CPU}: chosen"
    assert session.export_method == "cache"


@needs_device
def test_the_users_session_options_are_read_and_left_as_they_are():
    import onnxruntime

    given = onnxruntime.SessionOptions()
    given.log_severity_level = 4
    given.intra_op_num_threads = 1
    for _ in range(2):  # a provider added to the options would refuse the second
        session = _session.create_session(_matmul_model(8), [(OPENVINO, {})], given, None)
        assert session.get_providers()[0] == OPENVINO
    assert given.log_severity_level == 4 and given.intra_op_num_threads == 1
    options = ortlab.backend.OrtBackendOptions(
        preferred_execution_providers=[OPENVINO], ort_session_options=given
    )
    compiled = ortlab.compile(nn.Linear(8, 4), options=options.replace(compile_cache=False))
    with torch.no_grad():
        compiled(torch.randn(2, 8))
    (session,) = compiled.ortlab_backend.sessions
    assert session.provider_note.split(":")[0] in (OPENVINO, _session.CPU)


@needs_device
def test_a_float64_model_stays_on_the_cpu_provider():
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8)).double()
    options = {"preferred_execution_providers": [OPENVINO], "compile_cache": False}
    compiled = ortlab.compile(model, options=options)
    x = torch.randn(4, 64, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-12, atol=1e-14)
    (session,) = compiled.ortlab_backend.sessions
    assert session.providers == (_session.CPU,)
    assert session.provider_note == (
        f"{_session.CPU}: the model computes in float64, which {OPENVINO} computes in float32"
    )


def test_a_plugin_that_cannot_run_the_model_gives_way_to_the_cpu_provider():
    class _Failing:
        def run(self, args):
            raise RuntimeError("Tensor data equal nullptr")

    clock, value = _Clock(), torch.ones(3)
    cpu = _FakeRunner(clock, 1e-3, value)
    runner, note = _build._plugin_or_cpu(_request(value), _Failing(), lambda: cpu, clock=clock)
    assert runner is cpu
    failed = "RuntimeError: Tensor data equal nullptr"
    assert note == f"{_session.CPU}: {OPENVINO} failed to run it ({failed})"


def test_cuda_tensors_keep_the_cuda_provider_when_a_plugin_is_preferred():
    chosen = _session.select_providers(
        preferred=[(OPENVINO, {})],
        inferred=(_session.CUDA,),
        default=None,
        available=(_session.CUDA, _session.CPU, OPENVINO),
        warned=set(),
    )
    assert [name for name, _ in chosen] == [_session.CUDA, _session.CPU]


def test_the_compile_cache_key_pins_the_plugins_version(monkeypatch):
    from ortlab.backend import _cache

    graph = torch.fx.symbolic_trace(nn.Linear(4, 2))
    options = ortlab.backend.OrtBackendOptions()

    def key() -> str:
        return _cache.partition_key(
            graph_module=graph,
            args=(torch.randn(2, 4),),
            static=False,
            frozen={},
            options=options,
            providers=[(OPENVINO, {}), (_session.CPU, {})],
            fuse=False,
            optimize=False,
            threads=2,
        )

    first = key()
    monkeypatch.setattr(_plugins, "versions", lambda names: ["onnxruntime-ep-openvino==9"])
    assert key() != first


def test_a_missing_plugin_provider_is_skipped_saying_what_to_install(monkeypatch):
    monkeypatch.setattr(_plugins, "installed", dict)
    chosen, message = _preferring_openvino(available=(_session.CPU,))
    assert chosen == [(_session.CPU, {})]
    assert "pip install 'ortlab[openvino]'" in message


def _preferring_openvino(available: tuple[str, ...]) -> tuple[list, str]:
    """The providers chosen with OpenVINO's preferred, and the one warning given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = _session.select_providers(
            preferred=[(OPENVINO, {})],
            inferred=(),
            default=None,
            available=available,
            warned=set(),
        )
    (warning,) = caught
    return chosen, str(warning.message)


def test_a_plugin_with_no_device_here_is_skipped_saying_why(monkeypatch):
    import onnxruntime

    registered = []
    monkeypatch.setattr(_plugins, "_registered", {})
    monkeypatch.setattr(_plugins, "_devices", lambda name: [])
    monkeypatch.setattr(
        onnxruntime,
        "register_execution_provider_library",
        lambda name, path: registered.append(name),
    )
    available = _session.available_providers()
    assert OPENVINO not in available and _session.CPU in available
    chosen, message = _preferring_openvino(available)
    assert chosen == [(_session.CPU, {})]
    assert f"{OPENVINO!r} cannot run here: onnxruntime-ep-openvino" in message
    assert "lists no CPU device on this processor (vendor " in message
    assert "pip install" not in message  # it is installed
    with pytest.raises(ortlab.errors.SessionError, match="lists no CPU device"):
        _plugins.cpu_devices(OPENVINO)
    assert registered == [OPENVINO]  # once per process


def test_a_plugin_that_cannot_be_registered_says_so(monkeypatch):
    import onnxruntime

    def refuse(name, path):
        raise RuntimeError("bad library")

    monkeypatch.setattr(_plugins, "_registered", {})
    monkeypatch.setattr(_plugins, "_devices", lambda name: [])
    monkeypatch.setattr(onnxruntime, "register_execution_provider_library", refuse)
    assert _plugins.names() == ()
    why = _plugins.unusable(OPENVINO)
    assert why.startswith("onnxruntime-ep-openvino ") and "could not be registered" in why
    assert "RuntimeError: bad library" in why


def test_a_plugin_the_user_registered_already_is_judged_by_its_devices(monkeypatch):
    import onnxruntime

    def registered(name, path):
        raise RuntimeError(f"EP library is already registered under {name}")

    monkeypatch.setattr(_plugins, "_registered", {})
    monkeypatch.setattr(_plugins, "_devices", lambda name: [])
    monkeypatch.setattr(onnxruntime, "register_execution_provider_library", registered)
    assert "lists no CPU device on this processor" in _plugins.unusable(OPENVINO)
