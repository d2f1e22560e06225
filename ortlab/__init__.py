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
    SessionRecord,
    Verdict,
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
    # Records
    "GraphRecord",
    "PartitionRecord",
    "SessionRecord",
    "Verdict",
    # Errors
    "OrtlabError",
    "UnsupportedOptionError",
    "ExportError",
    "SessionError",
    "MissingDependencyError",
    # Notebook extension
    "load_ipython_extension",
]


def load_ipython_extension(ipython):  # pragma: no cover - exercised through IPython
    """``%load_ext ortlab``: registers the ``%ortcompile`` magic."""
    from ortlab import magic

    magic.load_ipython_extension(ipython)
