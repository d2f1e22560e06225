"""The ortlab backend: partition -> export -> execute on ONNX Runtime.

This package imports only torch, onnx, onnx_ir and onnxruntime; it knows nothing of
notebooks. Everything it does is written into records (:mod:`ortlab.backend.records`).
"""

from __future__ import annotations

from ortlab.backend._backend import (
    OrtBackend,
    backend_of,
    compile,
    compile_with,
    torch_compile_backend,
    warm_up,
)
from ortlab.backend._build import ModelSession, build_model_session
from ortlab.backend._cache import clear_cache
from ortlab.backend._options import OrtBackendOptions, OrtExecutionProvider
from ortlab.backend._precompile import Precompiled, precompile
from ortlab.backend._session import available_providers, default_session_options
from ortlab.backend._standalone import StandaloneSession, create_session
from ortlab.backend._support import OrtOperatorSupport
from ortlab.backend._testdata import load_test_case, write_test_case
from ortlab.backend.records import (
    GraphRecord,
    PartitionRecord,
    RunEvent,
    SessionRecord,
    TimelineEvent,
    Verdict,
)

__all__ = [
    # Backend
    "OrtBackend",
    "OrtBackendOptions",
    "OrtExecutionProvider",
    "torch_compile_backend",
    "compile",
    "compile_with",
    "precompile",
    "Precompiled",
    "backend_of",
    "warm_up",
    "clear_cache",
    # Sessions outside a compiled graph (the numerics' debug models, the bench's ORT floor)
    "create_session",
    "StandaloneSession",
    "build_model_session",
    "ModelSession",
    "available_providers",
    "default_session_options",
    # Support
    "OrtOperatorSupport",
    # Records
    "GraphRecord",
    "PartitionRecord",
    "RunEvent",
    "SessionRecord",
    "TimelineEvent",
    "Verdict",
    # Test cases in ONNX's test-data layout (SessionRecord.save, DiffReport.save_repro)
    "write_test_case",
    "load_test_case",
]
