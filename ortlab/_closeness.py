"""How far one tensor is from another, element by element: the rule every comparison in
ortlab applies, the numerics lab's comparator (:mod:`ortlab.numerics._compare`, which
documents the rules) and the backend's check of a model it rewrote for ONNX Runtime's
fused operators.

- Errors are computed in float64 (complex values as pairs of reals).
- A NaN matching a NaN, and an infinity matching the same infinity, are equal (error 0);
  a NaN or infinity on one side only is an infinite error.
- An element is within tolerance when ``|actual - expected| <= atol + rtol * |expected|``.
"""

from __future__ import annotations

import dataclasses
import math

import torch

# (atol, rtol) per dtype: the defaults of torch.testing.assert_close.
_DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-5, 1e-3),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-7, 1e-7),
}


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(atol, rtol)`` that ``torch.testing.assert_close`` uses for ``dtype``.

    Integer and bool dtypes get ``(0.0, 0.0)``: they are compared exactly.
    """
    return _DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))


@dataclasses.dataclass(frozen=True)
class ElementErrors:
    """``actual`` against ``expected``, element by element (same shape)."""

    actual: torch.Tensor
    """``actual`` in float64 on the CPU."""
    expected: torch.Tensor
    """``expected`` in float64 on the CPU."""
    error: torch.Tensor
    """``|actual - expected|``; 0 where both are the same NaN or infinity, ``inf`` where
    only one side is non-finite."""
    magnitude: torch.Tensor
    """``|expected|`` where both sides are finite, else 0."""
    finite: torch.Tensor
    """Both sides finite."""
    nan_actual: torch.Tensor
    nan_expected: torch.Tensor
    inf_actual: torch.Tensor
    inf_expected: torch.Tensor

    @property
    def scale(self) -> float:
        """The largest finite magnitude of ``expected`` (0 when empty)."""
        return float(self.magnitude.max()) if self.magnitude.numel() else 0.0

    def allowed(self, atol: float, rtol: float) -> torch.Tensor:
        """The error allowed at each element: ``atol + rtol * |expected|``."""
        return atol + rtol * self.magnitude

    def beyond(self, atol: float, rtol: float) -> int:
        """How many elements are beyond the tolerance."""
        return int((self.error > self.allowed(atol, rtol)).sum())


def max_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest of :func:`element_errors` (0 when empty), without keeping the
    per-element tensors where every difference is finite (a model's gradients: 11 s
    against well under a second for BERT-base's 110M values)."""
    if actual.numel() == 0:
        return 0.0
    if not (actual.is_complex() or expected.is_complex()):
        difference = (
            actual.to(device="cpu", dtype=torch.float64)
            - expected.to(device="cpu", dtype=torch.float64)
        ).abs_()
        largest = float(difference.max())
        if math.isfinite(largest):
            return largest
    return float(element_errors(actual, expected).error.max())


def element_errors(actual: torch.Tensor, expected: torch.Tensor) -> ElementErrors:
    """The element errors of two tensors of the same shape (see the module docstring)."""
    if actual.is_complex() or expected.is_complex():
        a64 = torch.view_as_real(actual.to(torch.complex128)).cpu()
        b64 = torch.view_as_real(expected.to(torch.complex128)).cpu()
    else:
        a64 = actual.to(device="cpu", dtype=torch.float64)
        b64 = expected.to(device="cpu", dtype=torch.float64)
    nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
    inf_a, inf_b = torch.isinf(a64), torch.isinf(b64)
    finite = ~(nan_a | nan_b | inf_a | inf_b)
    agree_nonfinite = (nan_a & nan_b) | (inf_a & inf_b & (a64 == b64))
    err = torch.where(finite, (a64 - b64).abs(), torch.zeros_like(a64))
    err = torch.where(finite | agree_nonfinite, err, torch.full_like(err, float("inf")))
    magnitude = torch.where(finite, b64.abs(), torch.zeros_like(b64))
    return ElementErrors(a64, b64, err, magnitude, finite, nan_a, nan_b, inf_a, inf_b)
