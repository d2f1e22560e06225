"""Decompositions that keep PyTorch's numbers where ONNX Runtime's kernel or torchlib's
formula loses them at the edges: tails, overflow, NaN and degenerate sizes. Each is
written in ATen ops whose translations are exact there, and added to the lowerings'
table beside :mod:`_decompositions`; calls outside the failing cases keep the op.

# NOTE: each was found by comparing compiled functions with eager on edge inputs; the
# translations pass PyTorch's OpInfo samples, which do not reach these values.
#
# - ``sigmoid`` keeps its op here: its exact spelling is an ONNX rewrite
#   (``_passes.exact_sigmoid``), so the FX graph and the lab still show one node.
# - ``log1p``/``expm1``: torchlib's ``log(1 + x)`` and ``exp(x) - 1`` lose every digit
#   near 0 (``log1p(1e-10)`` gave 0; ``logsigmoid(20)`` and ``BCEWithLogits`` go
#   through ``log1p(exp(-|x|))``). Kahan's forms, in which the rounding of ``1 + x``
#   (``exp(x)``) cancels, are as exact as ``log`` (``exp``).
# - ``logaddexp``/``logaddexp2``: torchlib's ``log(exp(a) + exp(b))`` overflows (eager:
#   1000.69 for (1000, 1000); ortlab gave inf) and underflows (-inf for -1000: log-space
#   probabilities, CRF and HMM forward passes). As ``max + log(1 + exp(-|a - b|))``,
#   with equal infinities passed through, as ATen computes it.
# - ``remainder`` of floats: torchlib's ``a - b * floor(a / b)`` rounds the quotient
#   (``1.0 % 0.1`` gave 0.0 for eager's 0.0999999866) and is NaN for an infinite
#   divisor (eager: ``-1 % inf`` is inf). ATen's own formula: ``fmod``, exact, moved to
#   the divisor's sign. Floor division of floats (``//``, ``div(rounding_mode="floor")``)
#   likewise: ``1.0 // 0.1`` is 9 in eager, 10 as ``floor(a / b)`` (inductor gives 10
#   too). Integer ``div`` with a rounding mode, and ``fmod``, were computed in float
#   (``div(2**24 + 1, 1, rounding_mode="trunc")`` gave 2**24): they are ONNX's integer
#   ``Div`` (which truncates) and torchlib's exact integer floor division.
# - NaN: ``sign``/``sgn`` of NaN is 0 in PyTorch (NaN through ONNX's Sign);
#   ``heaviside(nan, v)`` is 0 (1 through the translation); ``angle(nan)`` is NaN (0);
#   ``xlogy(0, nan)`` is NaN (0).
# - ``atan2``: torchlib turns ``atan(y / x)`` by half a turn toward ``y > 0``, so
#   ``atan2(0, -1)`` was -pi (eager: pi) and ``atan2(2, -0.0)`` -pi/2 (pi/2); it maps
#   NaN to 0, and both-infinite corners gave 0 (pi/4). The signs of zeros are read as
#   ``_decompositions.signbit`` reads them.
#   bf16/fp16 are computed in float32 and rounded once, as eager computes them.
# - ``histc``: torchlib compares with edges computed in float64 and rounded, where
#   ATen's bin is ``floor((x - lo) * bins / (hi - lo))`` in the input's dtype: ``-1.2``
#   fell in bin 1 of 5 over [-2, 2] (ATen: 0). Without bounds it failed to export.
# - NaN through the infinity norms (``linalg_vector_norm``: torchlib's ``ReduceMax``
#   skipped it) and ``logit(x, eps)`` (its ``Clip`` made NaN ``1 - eps``).
# - ``var``/``std`` with ``correction`` at least the number of elements: PyTorch divides
#   by ``max(0, N - correction)`` (inf, or NaN for no spread); the translation divided
#   by the negative count (-0.5 for ``var([1, 2], correction=3)``). Static sizes only.
# - Negative indices where PyTorch raises (``index_add``, ``index_copy``; ``_scalars``
#   for ``embedding``, ``gather``, ``index_select``, ``scatter``): ONNX takes them from
#   the end, so an ``embedding`` of -100 (labels copied into ``input_ids``) read a row
#   where eager raises. They become :data:`OUT_OF_RANGE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ortlab.backend import _decompositions

aten = torch.ops.aten


def log1p(input: torch.Tensor) -> Any:
    """``log(u) * x / (u - 1)`` with ``u = 1 + x`` (exact where ``u`` rounds: the rounding
    error of ``u`` cancels), ``x`` where ``u`` is 1, ``+inf`` at ``+inf``."""
    if input.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    u = aten.add.Tensor(input, 1)
    scaled = aten.mul.Tensor(
        aten.log.default(u), aten.div.Tensor(input, aten.sub.Tensor(u, 1))
    )
    result = aten.where.self(aten.eq.Scalar(u, 1), input, scaled)
    return aten.where.self(aten.eq.Scalar(input, math.inf), input, result)


def expm1(input: torch.Tensor) -> Any:
    """``(u - 1) * (x / log(u))`` with ``u = exp(x)``, ``x`` where ``u`` is 1, ``u - 1``
    where that is -1 (``u`` under half an ulp of 1, or denormal) or ``u`` infinite."""
    if input.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    u = aten.exp.default(input)
    less_one = aten.sub.Tensor(u, 1)
    scaled = aten.mul.Tensor(less_one, aten.div.Tensor(input, aten.log.default(u)))
    result = aten.where.self(aten.eq.Scalar(u, 1), input, scaled)
    ends = aten.logical_or.default(aten.eq.Scalar(less_one, -1), aten.isinf.default(u))
    return aten.where.self(ends, less_one, result)


def _logaddexp(exp: Any, log: Any) -> Any:
    def decompose(input: torch.Tensor, other: torch.Tensor) -> Any:
        if not (input.is_floating_point() and other.is_floating_point()):
            return NotImplemented
        if input.dtype != other.dtype:
            return NotImplemented  # mixed dtypes promote: PyTorch's own path
        larger = aten.maximum.default(input, other)
        gap = aten.neg.default(aten.abs.default(aten.sub.Tensor(input, other)))
        spread = log(aten.add.Tensor(exp(gap), 1))
        both_infinite = aten.logical_and.default(
            aten.isinf.default(input), aten.eq.Tensor(input, other)
        )
        return aten.where.self(both_infinite, input, aten.add.Tensor(larger, spread))

    return decompose


def _exp2(x: torch.Tensor) -> Any:
    return aten.pow.Scalar(2.0, x)


def _log2(x: torch.Tensor) -> Any:
    return aten.log2.default(x)


def _floats(*values: Any) -> bool:
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    return bool(tensors) and all(t.is_floating_point() for t in tensors)


def remainder(input: Any, other: Any) -> Any:
    if not _floats(input, other):
        return NotImplemented  # integers: the translation's floor division is exact
    if isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor):
        if input.dtype != other.dtype:
            return NotImplemented
        rest = aten.fmod.Tensor(input, other)
        other_sign = aten.ne.Tensor(aten.lt.Scalar(rest, 0), aten.lt.Scalar(other, 0))
    elif isinstance(input, torch.Tensor) and isinstance(other, (int, float)):
        rest = aten.fmod.Scalar(input, other)
        other_sign = aten.gt.Scalar(rest, 0) if other < 0 else aten.lt.Scalar(rest, 0)
    else:
        return NotImplemented
    moved = aten.logical_and.default(aten.ne.Scalar(rest, 0), other_sign)
    return aten.where.self(moved, aten.add.Tensor(rest, other), rest)


def floor_divide(input: Any, other: Any) -> Any:
    """ATen's floor division of floats: the quotient of ``a - fmod(a, b)``, exact, moved
    down when the remainder's sign differs from the divisor's, then rounded to the
    nearest integer (``1.0 // 0.1`` is 9; ``floor(1.0 / 0.1)`` is 10)."""
    if not _floats(input, other) or not isinstance(input, torch.Tensor):
        return NotImplemented
    if isinstance(other, torch.Tensor):
        if input.dtype != other.dtype:
            return NotImplemented
        rest = aten.fmod.Tensor(input, other)
        divisor_negative = aten.lt.Scalar(other, 0)
        differs = aten.ne.Tensor(aten.lt.Scalar(rest, 0), divisor_negative)
    elif isinstance(other, (int, float)):
        rest = aten.fmod.Scalar(input, other)
        differs = aten.gt.Scalar(rest, 0) if other < 0 else aten.lt.Scalar(rest, 0)
    else:
        return NotImplemented
    quotient = aten.div.Tensor(aten.sub.Tensor(input, rest), other)
    moved = aten.logical_and.default(aten.ne.Scalar(rest, 0), differs)
    quotient = aten.where.self(moved, aten.sub.Tensor(quotient, 1), quotient)
    floored = aten.floor.default(quotient)
    up = aten.gt.Scalar(aten.sub.Tensor(quotient, floored), 0.5)
    floored = aten.where.self(up, aten.add.Tensor(floored, 1), floored)
    true_quotient = aten.div.Tensor(input, other)
    zero = aten.mul.Tensor(true_quotient, 0)  # 0 with the sign of a / b (not for -0.0)
    result = aten.where.self(aten.eq.Scalar(quotient, 0), zero, floored)
    divisor_zero = aten.eq.Scalar(other, 0) if isinstance(other, torch.Tensor) else other == 0
    if isinstance(divisor_zero, bool):
        return true_quotient if divisor_zero else result
    return aten.where.self(divisor_zero, true_quotient, result)


def div_mode(input: Any, other: Any, *, rounding_mode: str | None = None) -> Any:
    divisor = _same_integers(input, other)
    if divisor is not None:  # integers: exact, where torchlib divides in float32
        if rounding_mode == "trunc":
            return _truncated(input, divisor)  # ONNX's Div of integers
        if rounding_mode == "floor":
            return aten.floor_divide.default(input, divisor)  # exact in torchlib
        return NotImplemented
    if rounding_mode != "floor":
        return NotImplemented
    return floor_divide(input, other)


def fmod(input: Any, other: Any) -> Any:
    """Integer ``fmod`` as ``a - trunc(a / b) * b``: torchlib's ``Mod(fmod=1)`` computes
    it in floating point (``(2**62 + 1) % 3`` gave 1)."""
    divisor = _same_integers(input, other)
    if divisor is None:
        return NotImplemented
    quotient = _truncated(input, divisor)
    return aten.sub.Tensor(input, aten.mul.Tensor(quotient, divisor))


def _truncated(input: torch.Tensor, divisor: torch.Tensor) -> Any:
    """``prims.div`` of integers (C's division), its operands broadcast first (prims
    take one shape)."""
    shape = list(torch.broadcast_shapes(input.shape, divisor.shape))
    pair = (input, divisor)
    operands = [t if list(t.shape) == shape else aten.expand.default(t, shape) for t in pair]
    return torch.ops.prims.div.default(*operands)


def _same_integers(input: Any, other: Any) -> Any:
    """``other`` as a tensor of ``input``'s integer dtype (a number made one), or
    ``None`` when they are not integers of one dtype (promotion: PyTorch's path)."""
    if not isinstance(input, torch.Tensor) or input.dtype.is_floating_point:
        return None
    if input.dtype in (torch.bool, torch.complex64, torch.complex128):
        return None
    if isinstance(other, torch.Tensor):
        return other if other.dtype == input.dtype else None
    if isinstance(other, int) and not isinstance(other, bool):
        info = torch.iinfo(input.dtype)
        if info.min <= other <= info.max:
            return aten.scalar_tensor.default(other, dtype=input.dtype, device=input.device)
    return None


def sign(input: torch.Tensor) -> Any:
    if not input.is_floating_point():
        return NotImplemented
    positive = aten._to_copy.default(aten.gt.Scalar(input, 0), dtype=input.dtype)
    negative = aten._to_copy.default(aten.lt.Scalar(input, 0), dtype=input.dtype)
    return aten.sub.Tensor(positive, negative)  # 0 for NaN, as ATen's (0 < x) - (x < 0)


def heaviside(input: torch.Tensor, values: torch.Tensor) -> Any:
    if not _floats(input, values) or input.dtype != values.dtype:
        return NotImplemented
    positive = aten._to_copy.default(aten.gt.Scalar(input, 0), dtype=input.dtype)
    return aten.where.self(aten.eq.Scalar(input, 0), values, positive)


def angle(input: torch.Tensor) -> Any:
    if not input.is_floating_point():
        return NotImplemented
    half_turns = aten.where.self(
        aten.lt.Scalar(input, 0),
        aten.full_like.default(input, math.pi),
        aten.zeros_like.default(input),
    )
    return aten.where.self(aten.isnan.default(input), input, half_turns)


def xlogy(input: Any, other: Any) -> Any:
    if not _floats(input, other):
        return NotImplemented
    if isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor):
        if input.dtype != other.dtype:
            return NotImplemented
        product = aten.mul.Tensor(input, aten.log.default(other))
        zero = aten.eq.Scalar(input, 0)
    elif isinstance(other, torch.Tensor) and isinstance(input, (int, float)):
        product = aten.mul.Tensor(aten.log.default(other), input)
        zero = input == 0
    else:
        return NotImplemented
    if isinstance(zero, bool):
        result = aten.zeros_like.default(product) if zero else product
    else:
        result = aten.where.self(zero, aten.zeros_like.default(product), product)
    return aten.where.self(aten.isnan.default(other), other, result)


def atan2(input: torch.Tensor, other: torch.Tensor) -> Any:
    """C's ``atan2(y, x)``: ``atan(y / x)``, a half turn toward ``y``'s sign where ``x`` is
    negative (-0.0 included); the corners ``y / x`` cannot give (both zero, both infinite)
    by the signs; NaN through. torchlib's turns by ``y > 0`` (so ``atan2(0, -1)`` was
    -pi), and maps NaN to 0."""
    if not _floats(input, other):
        return NotImplemented
    if input.dtype != other.dtype:  # both to the result's dtype first, as PyTorch does
        common = torch.result_type(input, other)
        input, other = (aten._to_copy.default(t, dtype=common) for t in (input, other))
    if input.dtype == torch.float64:
        return NotImplemented  # ONNX Runtime has no double Atan: the op runs in PyTorch
    if input.dtype in (torch.float16, torch.bfloat16):
        # PyTorch computes in float32 and rounds once; op by op would round four times.
        wide = atan2(*(aten._to_copy.default(t, dtype=torch.float32) for t in (input, other)))
        return aten._to_copy.default(wide, dtype=input.dtype)
    y_negative = _decompositions.signbit(input)
    x_negative = _decompositions.signbit(other)
    atan = aten.atan.default(aten.div.Tensor(input, other))
    half_turn = aten.where.self(
        y_negative, _constant(-math.pi, input), _constant(math.pi, input)
    )
    result = aten.where.self(x_negative, aten.add.Tensor(atan, half_turn), atan)
    zero = aten.logical_and.default(aten.eq.Scalar(input, 0), aten.eq.Scalar(other, 0))
    infinite = aten.logical_and.default(aten.isinf.default(input), aten.isinf.default(other))
    corner = aten.where.self(
        x_negative,
        aten.where.self(zero, _constant(math.pi, input), _constant(0.75 * math.pi, input)),
        aten.where.self(zero, _constant(0.0, input), _constant(0.25 * math.pi, input)),
    )
    corner = aten.where.self(y_negative, aten.neg.default(corner), corner)
    return aten.where.self(aten.logical_or.default(zero, infinite), corner, result)


def histc(input: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    """ATen's histc: the bin of ``x`` is ``floor((x - lo) * bins / (hi - lo))`` in the
    input's dtype (the last bin closed), counted by a scatter-add. torchlib's compares
    with edges computed in float64 and rounded: ``-1.2`` fell in bin 1 of
    ``histc(bins=5, min=-2, max=2)``, where ATen's arithmetic gives 0. Without bounds
    (``min == max``), the data's extrema, widened by 1 when they are equal; where those
    are not finite, PyTorch raises, so the index is :data:`OUT_OF_RANGE` and ONNX
    Runtime refuses the call, which reruns in PyTorch."""
    if not input.is_floating_point() or input.numel() == 0:
        return NotImplemented
    if not (math.isfinite(min) and math.isfinite(max)) or min > max:
        return NotImplemented  # PyTorch's error
    flat = aten.reshape.default(input, [-1])
    finite = None
    if min == max:
        lo, hi = aten.amin.default(flat), aten.amax.default(flat)
        finite = aten.logical_and.default(aten.isfinite.default(lo), aten.isfinite.default(hi))
        same = aten.eq.Tensor(lo, hi)
        lo = aten.where.self(same, aten.sub.Tensor(lo, 1), lo)
        hi = aten.where.self(same, aten.add.Tensor(hi, 1), hi)
    else:
        lo, hi = _constant(float(min), input), _constant(float(max), input)
    inside = aten.logical_and.default(aten.ge.Tensor(flat, lo), aten.le.Tensor(flat, hi))
    offset = aten.mul.Tensor(aten.sub.Tensor(flat, lo), bins)
    scaled = aten.div.Tensor(offset, aten.sub.Tensor(hi, lo))
    position = aten._to_copy.default(
        aten.where.self(inside, aten.floor.default(scaled), _constant(0.0, input)),
        dtype=torch.int64,
    )
    position = aten.clamp_max.default(position, bins - 1)  # x == hi: the last bin
    if finite is not None:
        beyond = aten.full_like.default(position, OUT_OF_RANGE)
        position = aten.where.self(finite, position, beyond)
    counts = aten.zeros.default([bins], dtype=input.dtype, device=input.device)
    ones = aten._to_copy.default(inside, dtype=input.dtype)
    return aten.scatter_add.default(counts, 0, position, ones)


def vector_norm(
    input: torch.Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, **kw: Any
) -> Any:
    """The infinity norms as ``amax``/``amin`` of ``|x|``, which keep NaN (``_nan``):
    torchlib's ``ReduceMax`` skipped it (``[5, 1, nan]`` gave 5; eager NaN), so a NaN
    gradient passed ``clip_grad_norm_(norm_type=inf)`` unseen."""
    if not (isinstance(ord, (int, float)) and math.isinf(ord)):
        return NotImplemented
    if not input.is_floating_point() or input.numel() == 0:
        return NotImplemented  # PyTorch's path (and its error for an empty input)
    dtype = kw.get("dtype")
    x = input if dtype is None else aten._to_copy.default(input, dtype=dtype)
    reduce = aten.amax.default if ord > 0 else aten.amin.default
    return reduce(aten.abs.default(x), _dims(dim) or [], keepdim)


def logit(input: torch.Tensor, eps: float | None = None) -> Any:
    """``log(z / (1 - z))`` with ``z`` = ``x`` held to ``[eps, 1 - eps]`` as ATen holds it
    (the lower bound first, for an ``eps`` over 0.5 too), NaN kept: the
    translation's ``Clip`` turned NaN into ``1 - eps`` (``logit(nan, eps=1e-6)`` gave
    13.8)."""
    if eps is None or not input.is_floating_point():
        return NotImplemented
    low, high = _constant(eps, input), _constant(1 - eps, input)
    z = aten.where.self(aten.gt.Scalar(input, 1 - eps), high, input)
    z = aten.where.self(aten.lt.Scalar(input, eps), low, z)  # x < lo first, as ATen
    return aten.log.default(aten.div.Tensor(z, aten.rsub.Scalar(z, 1)))


def _constant(value: float, like: torch.Tensor) -> Any:
    return aten.scalar_tensor.default(value, dtype=like.dtype, device=like.device)


def _dims(dim: Any) -> list[int] | None:
    """``dim`` as a list, ``None`` for every dim."""
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    return list(dim) if isinstance(dim, (list, tuple)) else [dim]


def _degenerate_count(input: torch.Tensor, dim: Any, correction: Any) -> bool:
    """Whether ``correction`` is at least the number of elements reduced (static)."""
    if correction is None or not isinstance(correction, (int, float)):
        return False
    sizes = input.shape
    dims: Sequence[int] = _dims(dim) or range(input.dim())
    count = 1
    for d in dims:
        size = sizes[d]
        if not isinstance(size, int):
            return False
        count *= size
    return count - correction <= 0


def _sum_of_squares(input: torch.Tensor, dim: Any, keepdim: bool) -> Any:
    dims = _dims(dim)
    mean = aten.mean.dim(input, dims, True)
    centred = aten.sub.Tensor(input, mean)
    return aten.sum.dim_IntList(aten.mul.Tensor(centred, centred), dims, keepdim)


def var_correction(
    input: torch.Tensor,
    dim: Any = None,
    *,
    correction: Any = None,
    keepdim: bool = False,
) -> Any:
    if not input.is_floating_point() or not _degenerate_count(input, dim, correction):
        return NotImplemented
    return aten.div.Tensor(_sum_of_squares(input, dim, keepdim), 0.0)


def std_correction(
    input: torch.Tensor,
    dim: Any = None,
    *,
    correction: Any = None,
    keepdim: bool = False,
) -> Any:
    variance = var_correction(input, dim, correction=correction, keepdim=keepdim)
    return variance if variance is NotImplemented else aten.sqrt.default(variance)


OUT_OF_RANGE = 2**62
"""The index a negative one becomes in ops whose index PyTorch rejects when negative
(ONNX counts it from the end): out of range for any tensor, so ONNX Runtime refuses the
call as PyTorch does, and ortlab's rerun in PyTorch raises PyTorch's error (naming this
index). ``_scalars`` does the same for the ops the lowering keeps whole."""


def _index_checked(position: int, earlier: Callable[..., Any]) -> Callable[..., Any]:
    """``earlier``'s decomposition with the index at ``position`` checked: ``index_add``
    and ``index_copy`` become ``index_put``, which takes negative indices."""

    def decompose(*args: Any, **kwargs: Any) -> Any:
        index = args[position]
        negative = aten.lt.Scalar(index, 0)
        beyond = aten.full_like.default(index, OUT_OF_RANGE)
        checked = aten.where.self(negative, beyond, index)
        return earlier(*args[:position], checked, *args[position + 1 :], **kwargs)

    return decompose


def table(earlier: Mapping[Any, Any]) -> dict[Any, Any]:
    """The decompositions, by op; a call outside the failing cases goes to ``earlier``'s
    decomposition of the op where it has one (torch decomposes ``var``), else keeps it."""
    logaddexp = _logaddexp(aten.exp.default, aten.log.default)
    ours = {
        aten.log1p.default: log1p,
        aten.expm1.default: expm1,
        aten.logaddexp.default: logaddexp,
        aten.logaddexp2.default: _logaddexp(_exp2, _log2),
        aten.remainder.Tensor: remainder,
        aten.remainder.Scalar: remainder,
        aten.floor_divide.default: floor_divide,
        aten.floor_divide.Scalar: floor_divide,
        aten.div.Tensor_mode: div_mode,
        aten.div.Scalar_mode: div_mode,
        aten.fmod.Tensor: fmod,
        aten.fmod.Scalar: fmod,
        aten.sign.default: sign,
        aten.sgn.default: sign,
        aten.heaviside.default: heaviside,
        aten.angle.default: angle,
        aten.atan2.default: atan2,
        aten.histc.default: histc,
        aten.linalg_vector_norm.default: vector_norm,
        aten.logit.default: logit,
        aten.xlogy.Tensor: xlogy,
        aten.xlogy.Scalar_Self: xlogy,
        aten.xlogy.Scalar_Other: xlogy,
        aten.var.correction: var_correction,
        aten.std.correction: std_correction,
    }
    checked = {
        op: _index_checked(2, earlier[op])
        for op in (aten.index_add.default, aten.index_copy.default)
        if op in earlier
    }
    return {op: _or(decompose, earlier.get(op)) for op, decompose in ours.items()} | checked


def _or(decompose: Callable[..., Any], earlier: Callable[..., Any] | None) -> Any:
    if earlier is None:
        return decompose

    def either(*args: Any, **kwargs: Any) -> Any:
        result = decompose(*args, **kwargs)
        return earlier(*args, **kwargs) if result is NotImplemented else result

    return either
