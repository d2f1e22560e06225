"""Shared fixtures: a clean Dynamo and backend cache around every test, and zoo models."""

from __future__ import annotations

import os

import pytest
import torch

import ortlab

# The compile cache stays off in the suite: a test's first call must export, fuse and
# time as it says (tests/test_cache.py turns it on in a directory of its own).
os.environ.setdefault("ORTLAB_CACHE_DIR", "off")

# Torch threads: the CI machine has 2 cores; keep runs predictable.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _reset_dynamo_and_backends():
    torch._dynamo.reset()
    ortlab.OrtBackend.clear_cached_instances()
    yield
    torch._dynamo.reset()
    ortlab.OrtBackend.clear_cached_instances()


@pytest.fixture
def backend():
    """A fresh OrtBackend with default options."""
    return ortlab.OrtBackend()


@pytest.fixture
def fusion_timing(monkeypatch):
    """``fusion_timing(fused_ms, unfused_ms)`` makes the fused-vs-unfused comparison
    (``_fusions.compare_speed``) see those run times on a fake clock; both models still
    run. Returns the calls' notes."""
    from ortlab.backend import _fusions

    real = _fusions.compare_speed
    notes: list[str] = []

    def rig(fused_ms: float, unfused_ms: float) -> list[str]:
        def compare(run_fused, make_unfused, fusions, **_):
            now = [0.0]

            def fused():
                run_fused()
                now[0] += fused_ms / 1e3

            def make():
                run = make_unfused()

                def unfused():
                    run()
                    now[0] += unfused_ms / 1e3

                return unfused

            keep, note = real(fused, make, fusions, clock=lambda: now[0])
            notes.append(note)
            return keep, note

        monkeypatch.setattr(_fusions, "compare_speed", compare)
        return notes

    return rig
