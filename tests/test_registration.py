"""The "ortlab" backend (and the "onnxrt" alias) are found by Dynamo through entry points."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

import ortlab


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_backend_names_resolve_without_importing_ortlab():
    out = _run(
        """
        import sys, torch
        from torch._dynamo.backends.registry import list_backends, lookup_backend
        assert "ortlab" not in sys.modules
        names = list_backends(exclude_tags=())
        print("ortlab" in names, "onnxrt" in names)
        fn = lookup_backend("ortlab")
        print(fn.__module__, lookup_backend("onnxrt") is fn)
        """
    )
    assert out.split() == ["True", "True", "ortlab.backend._backend", "True"]


def test_torch_compile_by_name_with_options_in_a_fresh_process():
    out = _run(
        """
        import torch
        f = torch.compile(lambda x: (x * 2).sigmoid(), backend="ortlab",
                          options={"use_aot_autograd": False}, dynamic=True)
        x = torch.randn(5)
        torch.testing.assert_close(f(x), (x * 2).sigmoid())
        import ortlab
        (b,) = ortlab.OrtBackend.get_cached_instances()
        print(b.execution_count, b.options.use_aot_autograd, b.graphs[0].kind)
        """
    )
    assert out.split() == ["1", "False", "inference"]


def test_onnxrt_alias_runs_code_written_for_the_old_backend():
    def f(x):
        return torch.sin(x) + x

    compiled = torch.compile(f, backend="onnxrt", dynamic=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    (backend,) = ortlab.OrtBackend.get_cached_instances()
    assert backend.execution_count == 1


def test_torch_compiles_mode_is_accepted_and_ignored():
    """``mode=`` reaches the backend whenever it is not ``"default"`` (transformers'
    ``CompileConfig`` passes ``"reduce-overhead"``); it raised a TypeError out of
    ``torch.compile``."""

    def f(x):
        return torch.nn.functional.gelu(x @ x.T) + 1

    x = torch.arange(16.0).reshape(4, 4) / 10
    for mode in ("reduce-overhead", "max-autotune-no-cudagraphs"):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, backend="ortlab", mode=mode)(x), f(x))
    assert all(b.execution_count for b in ortlab.OrtBackend.get_cached_instances())
