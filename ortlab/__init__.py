"""ortlab: run PyTorch models through ONNX Runtime with torch.compile, and see how.

Quick start::

    import torch, ortlab
    backend = ortlab.OrtBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    compiled(x)
    backend.graphs            # what was captured, partitioned, exported and run
"""

from __future__ import annotations

from ortlab.backend import (
    GraphRecord,
    OrtBackend,
    OrtBackendOptions,
    OrtExecutionProvider,
    PartitionRecord,
    RunEvent,
    SessionRecord,
    Verdict,
    backend_of,
    compile,
)
from ortlab.errors import (
    ExportError,
    MissingDependencyError,
    OrtlabError,
    SessionError,
    UnsupportedOptionError,
)

__version__ = "0.1.0"

__all__ = [
    # Backend
    "OrtBackend",
    "OrtBackendOptions",
    "OrtExecutionProvider",
    "compile",
    "backend_of",
    # Records
    "GraphRecord",
    "PartitionRecord",
    "RunEvent",
    "SessionRecord",
    "Verdict",
    # Errors
    "OrtlabError",
    "UnsupportedOptionError",
    "ExportError",
    "SessionError",
    "MissingDependencyError",
    # Lab: numerics, benchmarks, views (heavy dependencies load on first use)
    "diff",
    "bench",
    "inspect",
    "report",
    # Notebook extension
    "load_ipython_extension",
]


def diff(fn, *args, **kwargs):
    """Compares an ortlab-compiled call with eager PyTorch (:func:`ortlab._numerics.diff`)."""
    from ortlab import _numerics

    return _numerics.diff(fn, *args, **kwargs)


def bench(fn, *args, **kwargs):
    """Benchmarks eager, inductor, ortlab and bare ORT; see :func:`ortlab._bench.bench`."""
    from ortlab import _bench

    return _bench.bench(fn, *args, **kwargs)


def inspect(obj, **kwargs):
    """The Inspector widget for a backend or compiled callable (text outside notebooks)."""
    from ortlab import views

    return views.inspect(obj, **kwargs)


def report(obj, path, **kwargs):
    """Writes a self-contained HTML report of ``obj`` to ``path``; returns the path."""
    from ortlab import views

    return views.report(obj, path, **kwargs)


def load_ipython_extension(ipython):  # pragma: no cover - exercised through IPython
    """``%load_ext ortlab``: registers the ``%ortcompile`` magic."""
    from ortlab import magic

    magic.load_ipython_extension(ipython)
