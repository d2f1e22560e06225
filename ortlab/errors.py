"""Errors a user of ortlab can cause, rooted at :class:`OrtlabError`.

Every message names the object involved, what was expected and how to fix it.
Internal invariants use ``assert``; anything a person can trigger raises one of these.
"""

from __future__ import annotations

__all__ = [
    "OrtlabError",
    "UnsupportedOptionError",
    "ExportError",
    "SessionError",
    "CompileError",
    "MissingDependencyError",
    "FallbackWarning",
    "describe",
    "first_line",
]


def first_line(text: str) -> str:
    """The first non-blank line of a message, stripped ("" for a blank one)."""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def describe(error: BaseException) -> str:
    """``"TypeError: its first line"`` — how records, warnings and tables name an error
    in one line (just the type for an empty message)."""
    line = first_line(str(error))
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


class OrtlabError(Exception):
    """Base class of every error raised by ortlab on purpose."""


class UnsupportedOptionError(OrtlabError, ValueError):
    """An option name or value that ortlab does not accept."""


class ExportError(OrtlabError):
    """A partition could not be translated to ONNX (or a transform broke it)."""


class SessionError(OrtlabError):
    """ONNX Runtime refused a model, or a run failed."""


class CompileError(OrtlabError):
    """A step of ortlab's compile failed and ``OrtBackendOptions(strict=True)`` asked to
    raise instead of falling back to PyTorch (without ``strict``, the failure is recorded
    and the graph or partition runs eagerly)."""


class MissingDependencyError(OrtlabError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class FallbackWarning(RuntimeWarning):
    """ortlab ran something in PyTorch that it meant to run in ONNX Runtime: a graph it
    could not lower, a partition whose export or session failed, a fused model given up.

    A category of its own so that a test suite can turn it into an error
    (``filterwarnings = ["error::ortlab.FallbackWarning"]``) and a notebook can silence
    it (``warnings.simplefilter("ignore", ortlab.FallbackWarning)``). The record of the
    fall back (``GraphRecord.error``, ``PartitionRecord.error``) says the same.
    """
