"""Sessions: execution providers (preferred > inferred > default > CPU) and session
options."""

from __future__ import annotations

import pytest
import torch

import ortlab
from ortlab import OrtBackend, OrtBackendOptions
from ortlab.backend import _session


def test_unavailable_provider_is_dropped_with_one_warning_naming_it():
    backend = OrtBackend(
        OrtBackendOptions(preferred_execution_providers=["NoSuchExecutionProvider"])
    )
    compiled = torch.compile(lambda x: x + 1, backend=backend, dynamic=True)
    with pytest.warns(RuntimeWarning, match="NoSuchExecutionProvider") as caught:
        compiled(torch.randn(3))
        compiled(torch.randn(5))
    assert len([w for w in caught if "NoSuchExecutionProvider" in str(w.message)]) == 1
    assert backend.sessions[0].providers == ("CPUExecutionProvider",)


def test_provider_selection_order_and_cpu_last_resort():
    warned: set[str] = set()
    chosen = _session.select_providers(
        preferred=[("B", {"x": 1})],
        inferred=("A",),
        default=[("C", {})],
        available=("A", "B", "C", "CPUExecutionProvider"),
        warned=warned,
    )
    assert chosen == [("B", {"x": 1}), ("A", {}), ("C", {}), ("CPUExecutionProvider", {})]
    assert not warned
    only_cpu = _session.select_providers(
        preferred=None,
        inferred=(),
        default=None,
        available=("CPUExecutionProvider",),
        warned=warned,
    )
    assert only_cpu == [("CPUExecutionProvider", {})]


def test_cuda_tensors_infer_the_cuda_provider_from_devices():
    fake_mode = torch._subclasses.fake_tensor.FakeTensorMode()
    with fake_mode:
        on_cuda = torch.empty(2, device="cuda")
    assert _session.infer_providers_from_values([torch.ones(1), on_cuda]) == (
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    )


def test_user_session_options_are_used_as_given():
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    backend = OrtBackend(OrtBackendOptions(ort_session_options=so))
    compiled = torch.compile(lambda x: x * 2 + 1, backend=backend)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert backend.execution_count == 1


def test_default_session_options_share_cores_with_torch():
    so = _session.default_session_options()
    assert so.intra_op_num_threads == torch.get_num_threads()
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_cuda_provider_uses_tf32_as_pytorch_does():
    """ONNX Runtime's CUDA provider computes float32 matrix products in TF32 by default,
    PyTorch does not: on an H200 a Linear(64, 128) differed from PyTorch's by 22%
    (relative). The provider follows PyTorch's setting, unless given its own."""

    def cuda_options(**user):
        (cuda, _cpu) = _session.select_providers(
            preferred=[("CUDAExecutionProvider", user)],
            inferred=(),
            default=None,
            available=("CUDAExecutionProvider", "CPUExecutionProvider"),
            warned=set(),
        )
        return cuda[1]

    matmul = torch.backends.cuda.matmul  # its attributes are torch's flags
    before = matmul.allow_tf32
    try:
        matmul.allow_tf32 = False
        assert cuda_options() == {"use_tf32": "0"}
        matmul.allow_tf32 = True
        assert cuda_options() == {"use_tf32": "1"}
        assert cuda_options(use_tf32="0", device_id="0") == {"use_tf32": "0", "device_id": "0"}
    finally:
        matmul.allow_tf32 = before


def test_float64_matrix_products_keep_float64_scales():
    """ONNX Runtime's MatMulScaleFusion folds ``/ 3`` into a float32 ``alpha``: a float64
    ``(a @ b) / 3`` was off by 3e-8 relative, attention by 4e-7. Float32 keeps it."""

    def fn(a, b):
        q = a[None, None]
        attention = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return (a @ b) / 3, attention

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(8, 8, dtype=torch.float64, generator=g) for _ in range(2))
    compiled = ortlab.compile(fn, compile_cache=False)
    with torch.no_grad():
        for got, want in zip(compiled(a, b), fn(a, b)):
            assert ((got - want).abs().max() / want.abs().max()).item() < 1e-13
    (session,) = compiled.ortlab_backend.sessions
    assert _session.inexact_optimizers(session.model) == ("MatMulScaleFusion",)
    float32 = ortlab.compile(fn, compile_cache=False)
    with torch.no_grad():
        float32(a.float(), b.float())
    (session,) = float32.ortlab_backend.sessions
    assert _session.inexact_optimizers(session.model) == ()
