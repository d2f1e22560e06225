"""Helpers of the numerics tests (no tests here): models and planted ONNX changes."""

from __future__ import annotations

import math

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from ortlab import numerics
from ortlab.backend import records


class GeluTanhGelu(nn.Module):
    """Linear -> GELU -> tanh -> Linear -> GELU; with ``excluded_ops=["aten.tanh"]`` the
    tanh stays eager and splits the model into two partitions, each with GELU constants."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc2(torch.tanh(F.gelu(self.fc1(x)))))


def x_of(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def sigmoid_to_relu(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.op_type == "Sigmoid":
            node.op_type = "Relu"


def perturb_sqrt2_constant_of(fx_node: str, hits: list[str] | None = None):
    """A transform scaling GELU's sqrt(2) Constant of one FX node by 1 + 1e-2 (GELU is
    spelled out with that Constant up to opset 19; from opset 20 it is one Gelu op).
    Each perturbed model's graph name is appended to ``hits``."""

    def transform(model: onnx.ModelProto) -> None:
        for node in model.graph.node:
            if node.op_type != "Constant" or records.fx_node_of(node) != fx_node:
                continue
            value = onnx.numpy_helper.to_array(node.attribute[0].t)
            if np.allclose(value, math.sqrt(2)):
                scaled = (value * 1.01).astype(value.dtype)
                node.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(scaled))
                if hits is not None:
                    hits.append(model.graph.name)

    return transform


def partition_holding(report: numerics.DiffReport, fx_node: str) -> str:
    """Name of the partition whose FX graph holds ``fx_node`` (names are not stable)."""
    return next(p.name for p in report.backend.partitions if fx_node in p.node_names)
