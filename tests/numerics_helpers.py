"""Helpers of the numerics tests (no tests here): models, planted ONNX changes and
translations that are wrong on purpose."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript
import torch
import torch.nn.functional as F
from onnxscript import FLOAT, INT64
from onnxscript import opset18 as op
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
    """A wrong sigmoid: the last op of its ONNX spelling, ``Reciprocal(1 + exp(-x))``
    (``_passes.exact_sigmoid``), becomes a Relu (``1 + exp(-x)`` out)."""
    for node in model.graph.node:
        fx = (records.fx_node_of(node) or "").rstrip("_0123456789")
        if node.op_type in ("Sigmoid", "Reciprocal") and fx == "sigmoid":
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


@onnxscript.script()
def sin_one_percent_high(self: FLOAT) -> FLOAT:
    """``aten.sin`` translated subtly wrong: 1% too large (a wrong op, not rounding)."""
    return op.Mul(op.Sin(self), op.CastLike(1.01, self))


def as_strided_in_logical_order(
    self: FLOAT,
    size: Sequence[INT64],
    stride: Sequence[INT64],
    storage_offset: INT64 | None = None,
) -> FLOAT:
    """``aten.as_strided`` as onnxscript's torchlib translates it: the input's values,
    flattened in logical order, gathered at ``offset + sum(i * stride)``. Right where the
    input's memory is its values in order; wrong for a transposed or sliced input, whose
    memory is not (ONNX Runtime sees only the values)."""
    indices = np.array(storage_offset or 0, dtype=np.int64)
    for dim, (count, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[dim] = count
        indices = indices + (np.arange(count, dtype=np.int64) * step).reshape(shape)
    flat = op.Reshape(self, op.Constant(value_ints=[-1]))
    return op.Gather(flat, op.Constant(value=ir.tensor(indices)))
