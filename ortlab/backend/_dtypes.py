"""The dtypes that cross the torch <-> ONNX Runtime boundary, in one table.

# NOTE: the support rules (a node whose values have another dtype stays in PyTorch) and
# the runtime (how a tensor of each dtype is handed to ONNX Runtime and read back) both
# read :data:`DTYPES`; a dtype added here is supported by both at once.
#
# ONNX Runtime's fast OrtValue APIs name a dtype by its numpy type, and numpy has no
# bfloat16 (ml_dtypes' is not one ONNX Runtime 1.31 accepts: "Numpy_type 256 can't be
# converted to MLDataType"). bfloat16 tensors cross through DLPack instead, both ways
# zero-copy: ``OrtValue.from_dlpack`` in (~7 us a tensor, like ``push_back_batch``), and
# ``to_dlpacks`` out, which returns them as torch.bfloat16. Carrying a dtype is not
# computing in it: ONNX Runtime's CPU provider has bfloat16 kernels for data movement
# (Cast, Transpose, Concat, Squeeze, Flatten, Identity...) but none for arithmetic (Add,
# Mul, MatMul, Softmax, Relu...): a model with those is refused when its session is made.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import torch


@dataclasses.dataclass(frozen=True)
class DtypeInfo:
    """How one torch dtype crosses into ONNX Runtime."""

    onnx: int
    """The ONNX element type (``onnx.TensorProto.FLOAT``...)."""
    numpy: type | None
    """The numpy scalar type ONNX Runtime's ``OrtValue`` APIs name it by; ``None`` where
    numpy has none (bfloat16: handed over through DLPack)."""


DTYPES: dict[torch.dtype, DtypeInfo] = {
    torch.float16: DtypeInfo(onnx.TensorProto.FLOAT16, np.float16),
    torch.bfloat16: DtypeInfo(onnx.TensorProto.BFLOAT16, None),
    torch.float32: DtypeInfo(onnx.TensorProto.FLOAT, np.float32),
    torch.float64: DtypeInfo(onnx.TensorProto.DOUBLE, np.float64),
    torch.int8: DtypeInfo(onnx.TensorProto.INT8, np.int8),
    torch.int16: DtypeInfo(onnx.TensorProto.INT16, np.int16),
    torch.int32: DtypeInfo(onnx.TensorProto.INT32, np.int32),
    torch.int64: DtypeInfo(onnx.TensorProto.INT64, np.int64),
    torch.uint8: DtypeInfo(onnx.TensorProto.UINT8, np.uint8),
    torch.bool: DtypeInfo(onnx.TensorProto.BOOL, np.bool_),
}
"""Every dtype ortlab can run in ONNX Runtime."""

_BY_ONNX: dict[int, torch.dtype] = {info.onnx: dtype for dtype, info in DTYPES.items()}


def supported(dtype: torch.dtype) -> bool:
    """Whether tensors of ``dtype`` can be handed to ONNX Runtime and read back."""
    return dtype in DTYPES


def numpy_type(dtype: torch.dtype) -> type | None:
    """The numpy scalar type ONNX Runtime names ``dtype`` by; ``None`` for a dtype numpy
    lacks (it crosses through DLPack)."""
    return DTYPES[dtype].numpy


def onnx_type(dtype: torch.dtype) -> int:
    """The ONNX element type of ``dtype``."""
    return DTYPES[dtype].onnx


def from_onnx(elem_type: int) -> torch.dtype:
    """The torch dtype of an ONNX element type.

    Raises:
        TypeError: no torch dtype ortlab carries has that element type.
    """
    try:
        return _BY_ONNX[elem_type]
    except KeyError:
        raise TypeError(
            f"ONNX element type {onnx.TensorProto.DataType.Name(elem_type)} has no torch dtype"
        ) from None


def unsupported_reason(dtype: torch.dtype) -> str:
    """Why a node with a value of ``dtype`` stays in PyTorch, and what to do instead."""
    if dtype.is_complex:
        return (
            f"dtype {dtype} has no ONNX Runtime kernel path in ortlab (ONNX has no "
            "complex tensors); it runs in PyTorch. To run the rest of such a model in ONNX "
            "Runtime, keep complex values at its edges or write them as real/imaginary "
            "pairs (torch.view_as_real)"
        )
    return (
        f"dtype {dtype} cannot be handed to ONNX Runtime by ortlab; it runs in PyTorch "
        f"(supported: {', '.join(str(d).removeprefix('torch.') for d in DTYPES)})"
    )


def float32_holds(value: float) -> bool:
    """Whether float32 holds the Python float exactly (numpy: not traced by make_fx)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value)) == value
