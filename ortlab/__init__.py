"""ortlab: run PyTorch models through ONNX Runtime with torch.compile, and see how.

Quick start::

    import torch, ortlab
    backend = ortlab.OrtBackend()
    compiled = torch.compile(model, backend=backend)
    compiled(x)
    backend.graphs            # what was captured, partitioned, exported and run
"""

from __future__ import annotations

# NOTE: ``ortlab.bench`` is the function, not the package of the same name. Importing the
# package here, at import time, keeps it so: a submodule import sets the parent's
# attribute only when the submodule is first loaded, and the function is bound after.
# Library code reaches the package's modules as ``from ortlab.bench import _engine``.
from ortlab.backend import (
    GraphRecord,
    OrtBackend,
    OrtBackendOptions,
    OrtExecutionProvider,
    PartitionRecord,
    RunEvent,
    SessionRecord,
    TimelineEvent,
    Verdict,
    backend_of,
    clear_cache,
    compile,
    precompile,
)
from ortlab.bench import BenchResult, bench
from ortlab.errors import (
    CompileError,
    ExportError,
    FallbackWarning,
    MissingDependencyError,
    OrtlabError,
    SessionError,
    UnsupportedOptionError,
)
from ortlab.numerics import DiffReport, diff

__version__ = "0.1.0"

__all__ = [
    # Backend
    "OrtBackend",
    "OrtBackendOptions",
    "OrtExecutionProvider",
    "compile",
    "precompile",
    "backend_of",
    "clear_cache",
    # Records
    "GraphRecord",
    "PartitionRecord",
    "RunEvent",
    "SessionRecord",
    "TimelineEvent",
    "Verdict",
    # Errors
    "OrtlabError",
    "UnsupportedOptionError",
    "ExportError",
    "SessionError",
    "CompileError",
    "MissingDependencyError",
    "FallbackWarning",
    # Lab: numerics, benchmarks, views (heavy dependencies load on first use)
    "diff",
    "DiffReport",
    "bench",
    "BenchResult",
    "inspect",
    "report",
    "profile",
    "compare",
    # Notebook extension
    "load_ipython_extension",
]


def inspect(obj, **kwargs):
    """The Inspector widget for a backend or compiled callable (text outside notebooks)."""
    from ortlab import views

    return views.inspect(obj, **kwargs)


def report(obj, path, **kwargs):
    """Writes a self-contained HTML report of ``obj`` to ``path``; returns the path."""
    from ortlab import views

    return views.report(obj, path, **kwargs)


def profile(compiled, *args, **kwargs):
    """Where the time of one compiled call goes: Dynamo's entry, each eager node, ortlab's
    glue and each ONNX Runtime node, attributed to FX nodes, modules and source lines
    (an ``ortlab.profiling.Profile``; see ``ortlab.profiling.profile``)."""
    from ortlab import profiling

    return profiling.profile(compiled, *args, **kwargs)


def compare(*objects, **kwargs):
    """Two compiles side by side (``compare(a, b[, *args])``, or one model under two
    option sets: ``compare(model, *args, a={...}, b={...})``); see
    ``ortlab.profiling.compare``."""
    from ortlab import profiling

    return profiling.compare(*objects, **kwargs)


def load_ipython_extension(ipython):  # pragma: no cover - exercised through IPython
    """``%load_ext ortlab``: registers the ``%ortcompile`` magic."""
    from ortlab import magic

    magic.load_ipython_extension(ipython)
