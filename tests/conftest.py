"""Shared fixtures: a clean Dynamo and backend cache around every test, and zoo models."""

from __future__ import annotations

import os

import pytest
import torch

import ortlab

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
