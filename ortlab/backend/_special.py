"""``lgamma`` and ``digamma``, which ONNX has no op for, as ATen ops computed in float64.

# NOTE: torchlib raises for both, so each cut its graph: a StudentT or NegativeBinomial
# likelihood (transformers' TimeSeriesTransformer, Informer, Autoformer heads; Gamma,
# Beta, Dirichlet and Poisson ``log_prob``) ran its log-gamma in PyTorch in the forward,
# and digamma (lgamma's derivative) in the backward. Both are written here in ops
# ONNX Runtime runs in float64, then rounded to the input's dtype once:
#
# - ``lgamma``: Lanczos' sum (g = 7, 9 terms; relative error ~1e-15) for x >= 0.5, and
#   the reflection ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` below, with ``sin`` of
#   x's exact distance to the nearest integer (no x loses digits to ``pi x``). Poles (0
#   and the negative integers) and both infinities are inf, as in PyTorch, and so is
#   float32 from 4.04e36, where eager's float32 arithmetic overflows.
# - ``digamma``: the recurrence ``psi(x) = psi(x + 6) - sum 1 / (x + k)`` and the
#   asymptotic series at x + 6 >= 6 (error ~1e-11), with the reflection
#   ``psi(1 - x) - pi / tan(pi x)`` below 0.5. ``digamma(0)`` is -inf (+inf for -0.0),
#   the negative integers NaN, ``digamma(inf)`` inf, as in PyTorch.
#
# In bfloat16 and float16 both are correctly rounded; in float32 within an ulp of exact
# except right at their roots (digamma 52 ulps at 1.4616, where the value is ~1e-8),
# and eager's float32 is far further off there (digamma up to 2.6e7 ulps, lgamma 320),
# so the two differ near the roots. float64 inputs keep the op (in PyTorch): these
# forms are 1e-15 relative (1e-11 for digamma), not float64's last digit.
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten

_LANCZOS_G = 7.0
_LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_FLOAT32_OVERFLOW = 4.0371103e36
"""The least float32 whose lgamma eager gives as inf (its float32 arithmetic overflows;
the value, 3.36e38, would still be finite)."""

_SHIFT = 6
"""digamma's recurrence steps before the asymptotic series."""
_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)
"""The Bernoulli-number terms B_2k / (2k) of digamma's asymptotic series, in 1/y^2k."""


def _float64(x: torch.Tensor) -> torch.Tensor:
    return aten._to_copy.default(x, dtype=torch.float64)


def _as(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    dtype = like.dtype if like.dtype.is_floating_point else torch.get_default_dtype()
    return aten._to_copy.default(value, dtype=dtype)


def _from_nearest_integer(x: torch.Tensor) -> torch.Tensor:
    """x - round(x), in [-0.5, 0.5], exact in float64 for any float32 x: ``sin(pi x)``
    and ``tan(pi x)`` up to sign, without the rounding of ``pi x``."""
    return aten.sub.Tensor(x, aten.round.default(x))


def _pole(x: torch.Tensor) -> torch.Tensor:
    """x is 0 or a negative integer."""
    return aten.logical_and.default(
        aten.le.Scalar(x, 0), aten.eq.Tensor(x, aten.floor.default(x))
    )


def _lanczos(x: torch.Tensor) -> torch.Tensor:
    """lgamma(x) for x >= 0.5 (float64)."""
    z = aten.sub.Tensor(x, 1.0)
    total = aten.full_like.default(z, _LANCZOS[0])
    for i, coefficient in enumerate(_LANCZOS[1:], start=1):
        term = aten.mul.Tensor(aten.reciprocal.default(aten.add.Tensor(z, i)), coefficient)
        total = aten.add.Tensor(total, term)
    t = aten.add.Tensor(z, _LANCZOS_G + 0.5)
    result = aten.sub.Tensor(aten.mul.Tensor(aten.add.Tensor(z, 0.5), aten.log.default(t)), t)
    return aten.add.Tensor(aten.add.Tensor(result, _HALF_LOG_2PI), aten.log.default(total))


def lgamma(x: torch.Tensor) -> Any:
    """``aten.lgamma`` in float64 ops (see the module's NOTE); float64 inputs keep the op."""
    if x.dtype == torch.float64:
        return NotImplemented
    y = _float64(x)
    upper = aten.maximum.default(y, aten.rsub.Scalar(y, 1.0))  # x, or 1 - x below 0.5
    sin = aten.abs.default(
        aten.sin.default(aten.mul.Tensor(_from_nearest_integer(y), math.pi))
    )
    reflected = aten.sub.Tensor(
        aten.rsub.Scalar(aten.log.default(sin), math.log(math.pi)), _lanczos(upper)
    )
    result = aten.where.self(aten.lt.Scalar(y, 0.5), reflected, _lanczos(upper))
    infinite = aten.logical_or.default(_pole(y), aten.eq.Scalar(aten.abs.default(y), math.inf))
    if x.dtype == torch.float32:  # where eager's float32 arithmetic overflows
        infinite = aten.logical_or.default(infinite, aten.ge.Scalar(y, _FLOAT32_OVERFLOW))
    result = aten.where.self(infinite, aten.full_like.default(y, math.inf), result)
    return _as(result, x)


def _digamma_positive(y: torch.Tensor) -> torch.Tensor:
    """digamma(y) for y >= 0.5 (float64): the recurrence, then the series."""
    shift = aten.zeros_like.default(y)
    for k in range(_SHIFT):
        shift = aten.add.Tensor(shift, aten.reciprocal.default(aten.add.Tensor(y, k)))
    w = aten.add.Tensor(y, _SHIFT)
    inverse_square = aten.reciprocal.default(aten.mul.Tensor(w, w))
    series = aten.full_like.default(w, _SERIES[-1])
    for coefficient in reversed(_SERIES[:-1]):
        series = aten.add.Tensor(aten.mul.Tensor(series, inverse_square), coefficient)
    series = aten.mul.Tensor(series, inverse_square)
    value = aten.sub.Tensor(
        aten.sub.Tensor(aten.log.default(w), aten.div.Tensor(aten.reciprocal.default(w), 2.0)),
        series,
    )
    return aten.sub.Tensor(value, shift)


def digamma(x: torch.Tensor) -> Any:
    """``aten.digamma`` in float64 ops (see the module's NOTE); float64 inputs keep the
    op."""
    if x.dtype == torch.float64:
        return NotImplemented
    y = _float64(x)
    upper = aten.maximum.default(y, aten.rsub.Scalar(y, 1.0))
    angle = aten.mul.Tensor(_from_nearest_integer(y), math.pi)
    # pi / tan(pi x), as cos / sin: ONNX Runtime has no float64 Tan.
    cotangent = aten.div.Tensor(aten.cos.default(angle), aten.sin.default(angle))
    cotangent = aten.mul.Tensor(cotangent, math.pi)
    reflected = aten.sub.Tensor(_digamma_positive(upper), cotangent)
    result = aten.where.self(aten.lt.Scalar(y, 0.5), reflected, _digamma_positive(upper))
    # Poles: 0 is -inf (copysign(inf, -x): +inf for -0.0), the negative integers NaN.
    at_zero = aten.neg.default(aten.reciprocal.default(y))
    nan = aten.full_like.default(y, math.nan)
    result = aten.where.self(
        _pole(y), aten.where.self(aten.eq.Scalar(y, 0), at_zero, nan), result
    )
    result = aten.where.self(aten.eq.Scalar(y, math.inf), y, result)
    return _as(result, x)


def table() -> dict[Any, Any]:
    """The decompositions, by op."""
    return {aten.lgamma.default: lgamma, aten.digamma.default: digamma}
