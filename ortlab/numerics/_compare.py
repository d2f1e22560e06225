"""The one comparator: tolerances, and an ONNX Runtime value against its eager counterpart.
(Its element rule lives in :mod:`ortlab._closeness`, which the backend uses too.)

Everything in ortlab that says how far two results are apart comes here: ``ortlab.diff``
(outputs, gradients, partition outputs, nodes), ``ortlab.bench``'s ``max_abs_diff``
column, the demo's "matches" and ``%ortcompile``'s verdict.

Rules
-----
- A tensor passes or fails exactly as ``torch.testing.assert_close(..., equal_nan=True)``
  decides, element by element: ``|actual - expected| <= atol + rtol * |expected|``.
  Unless given, ``atol`` and ``rtol`` are its per-dtype defaults (float32:
  ``atol=1e-5, rtol=1.3e-6``; float16: ``1e-5, 1e-3``; bfloat16: ``1e-5, 1.6e-2``;
  float64: ``1e-7, 1e-7``).
- Integer and bool tensors and Python scalars are compared exactly (tolerances ignored).
- NaN and Inf: a NaN matching a NaN, and an infinity matching the same infinity, are
  equal (error 0); a NaN or Inf on one side only is a mismatch with an infinite error.
  Every NaN/Inf is counted on each side (``TensorDiff.nan_eager`` ...), so agreeing
  non-finite values are never hidden.
- A shape mismatch (other than ``()`` vs ``(1,)``, the runtime's scalar convention) fails
  with an infinite error; a dtype mismatch fails with a note.
- Structures (:func:`compare_outputs`): leaves are compared in order; a different number
  of leaves is a mismatch with an infinite error.
- Intermediates (partition outputs and FX nodes, :func:`compare_intermediate`) are held
  to the same per-dtype tolerance, less only what eager's own rounding explains: where an
  element is beyond ``atol + rtol * |eager|``, the same computation runs eagerly in
  float64 and the allowance becomes ``atol + ROUNDING_FACTOR * rounding + rtol * |eager|``,
  ``rounding`` being the largest distance of eager's value to float64 over elements finite
  in both (:func:`rounding_of`; see the NOTE below). Where the float64 run fails, the
  plain tolerance decides (and a note says so).
- With ``scale`` (a decision flip's operands, :mod:`ortlab.numerics._flips`), ``atol``
  becomes ``atol * max(1, scale)``, ``scale`` being the largest finite magnitude of the
  eager value and ``scale``.
- Against a float64 run (:func:`float64_allowed`): a result is as close to float64 as
  eager's when its largest error to it is at most ``FLOAT64_FACTOR`` (2) times eager's,
  eager's being taken as at least ``FLOAT64_FLOOR`` (1e-6) times the result's magnitude.
"""

# NOTE: what counts as a divergence inside a partition, and why.
#
# 1. Not magnitudes. The rule was ``atol * max(1, scale)``, ``scale`` the largest magnitude
#    among a node's value, its operands and its numeric literals, so that the rounding of a
#    sum over values of ~100 (an element near 0 erring by ~1e-5) would not be called a
#    divergence. But one element set the tolerance of all: an attention mask's -1e4 or
#    finfo.min (or a slice's end=2**63-1, a literal) made atol 0.1 .. 3e33 everywhere: a
#    partition ONNX Runtime computed wrongly passed (a user's Longformer, local error 0.12)
#    and the report said the error accumulated.
# 2. Rounding, measured. Eager's float32 value errs against the exact result by as much as
#    the computation's cancellations make it; ONNX Runtime's rounding is of the same kind
#    (as close to float64 as eager, within twice eager's distance: ``FLOAT64_FACTOR``), so
#    ``|ort - eager| <= |ort - exact| + |eager - exact| <= 3 * rounding``:
#    ``ROUNDING_FACTOR``. A mask adds nothing to it (finfo.min + x is finfo.min in both,
#    -1e4 + x errs by 5e-4), and a wrong op errs by more than rounding does. Float64 runs
#    only where the plain tolerance is exceeded.
# 3. A node diverges on its *own* error: ORT's value against the op run eagerly on ORT's
#    values of its operands (its rounding measured on those, and through the ops before
#    it whose values ONNX Runtime does not expose: a fused operator). Errors accumulated
#    upstream within the partition (measured too, as ``NodeDiff.diff``) do not make a
#    node divergent, so a small error amplified by a layer-norm backward (x256) is not
#    blamed on the node that amplified it, and a planted error is found at its node, not at
#    every node downstream. When no node's own error is beyond tolerance but the
#    partition's outputs are, the first node whose accumulated error is beyond tolerance
#    is reported instead (small errors adding up).
# Measured (the teaching zoo and the corpus's ci models, forward and backward, every node
# compared, float32 defaults): no partition of a clean model fails and no node diverges;
# where the plain tolerance is exceeded (the backward graphs of GPT-2, Llama and the
# transformer layer), errors stay below 61% of this allowance, while the plain tolerance
# alone fails GPT-2's backward by up to 4.6x. A translation 1% off beside an attention
# mask, an as_strided reading the wrong memory, planted changes of 1e-2 (a Constant, a
# frozen weight) and an op swap are found exactly at their node
# (tests/test_numerics_blame.py, tests/test_numerics_localise.py).

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from ortlab import _closeness, _harness
from ortlab.numerics import _records

FLOAT64_FACTOR = 2.0
"""A result is as close to float64 as eager's when its error is at most this times eager's."""

FLOAT64_FLOOR = 1e-6
"""Eager's error to float64 is taken as at least this times the result's magnitude (about
eight float32 units in the last place), so that a reference eager happens to round exactly
to does not ask the impossible."""

ROUNDING_FACTOR = FLOAT64_FACTOR + 1
"""An intermediate may differ from eager by this many times eager's own rounding (its
distance to float64) beyond the per-dtype tolerance (module NOTE)."""

SAMPLE_SIZE = 20_000
"""Elements kept per output for histograms and scatter plots (an even stride)."""

Tolerance = float | Mapping[str, float] | None
"""One number for every tensor, ``{tensor name: number}`` (others: dtype defaults), or
``None`` (dtype defaults)."""


def tolerance_for(value: Tolerance, name: str) -> float | None:
    """The tolerance of the tensor called ``name`` (``None``: the dtype default)."""
    if value is None or isinstance(value, (int, float)):
        return value
    return value.get(name)


def intermediate_tolerance(value: Tolerance) -> float | None:
    """Intermediates use the single tolerance given, or the loosest of a per-output map."""
    if value is None or isinstance(value, (int, float)):
        return value
    return max(value.values(), default=None)


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return None  # SymInts and anything else: compared with ==


def _mismatch(name: str, actual: Any, expected: Any) -> _records.TensorDiff:
    """Values that are not numbers or tensors: equal or not."""
    same = bool(actual == expected)
    return _records.TensorDiff(
        name,
        (),
        type(expected).__name__,
        0.0,
        0.0,
        same,
        max_abs_error=0.0 if same else math.inf,
        mismatched=0 if same else 1,
        numel=1,
        exact=True,
        note="" if same else f"ORT {actual!r} != eager {expected!r}",
    )


def compare_tensors(
    name: str,
    actual: Any,
    expected: Any,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    scale: float | None = None,
    rounding: float | None = None,
    keep_samples: bool = False,
) -> _records.TensorDiff:
    """Compares an ONNX Runtime value (``actual``) with the eager one (``expected``).

    Args:
        name: Shown in tables.
        actual: Tensor or Python scalar computed through ONNX Runtime.
        expected: The eager PyTorch value.
        atol: Absolute tolerance; ``None``: the ``assert_close`` default for the dtype.
        rtol: Relative tolerance; ``None``: the ``assert_close`` default for the dtype.
        scale: Magnitude rule (a decision flip's operands): ``atol`` becomes
            ``atol * max(1, scale, max|expected|)``. ``None``: not applied.
        rounding: Intermediate rule (module NOTE): eager's own rounding, the largest
            distance of ``expected`` to the same computation in float64
            (:func:`rounding_of`); ``atol`` becomes ``atol + ROUNDING_FACTOR * rounding``.
            ``None``: not applied.
        keep_samples: Keep up to 20 000 (eager value, error) pairs for plots.

    Returns:
        A :class:`~ortlab.numerics.TensorDiff` (the rules: module docstring).
    """
    a, b = _as_tensor(actual), _as_tensor(expected)
    if a is None or b is None:
        return _mismatch(name, actual, expected)
    shape = tuple(b.shape)
    dtype = str(b.dtype).removeprefix("torch.")
    exact = (not (b.dtype.is_floating_point or b.dtype.is_complex)) or not isinstance(
        expected, torch.Tensor
    )
    atol_used, rtol_used = 0.0, 0.0
    if not exact:
        d_atol, d_rtol = _closeness.default_tolerance(b.dtype)
        atol_used = d_atol if atol is None else float(atol)
        rtol_used = d_rtol if rtol is None else float(rtol)
    if a.shape != b.shape:
        if a.numel() == b.numel() and a.numel() <= 1:
            a = a.reshape(b.shape)  # 0-d vs (1,): the runtime's scalar convention
        else:
            return _records.TensorDiff(
                name,
                shape,
                dtype,
                atol_used,
                rtol_used,
                False,
                max_abs_error=math.inf,
                mismatched=b.numel(),
                numel=b.numel(),
                exact=exact,
                note=f"shape differs: ORT {list(a.shape)} vs eager {list(b.shape)}",
            )
    dtype_ok = a.dtype == b.dtype or not isinstance(actual, torch.Tensor)
    note = "" if dtype_ok else f"dtype differs: ORT {str(a.dtype).removeprefix('torch.')}"
    errors = _closeness.element_errors(a, b)
    own_scale = errors.scale
    if scale is not None:
        own_scale = max(own_scale, scale)
        atol_used *= max(1.0, own_scale)
    if rounding is not None and not exact:
        atol_used += ROUNDING_FACTOR * rounding
    allowed = errors.allowed(atol_used, rtol_used)
    mismatched = int((errors.error > allowed).sum())
    result = _records.TensorDiff(
        name,
        shape,
        dtype,
        atol_used,
        rtol_used,
        mismatched == 0 and dtype_ok,
        mismatched=mismatched,
        numel=b.numel(),
        nan_eager=int(errors.nan_expected.sum()),
        nan_ort=int(errors.nan_actual.sum()),
        inf_eager=int(errors.inf_expected.sum()),
        inf_ort=int(errors.inf_actual.sum()),
        exact=exact,
        scale=own_scale,
        rounding=None if exact else rounding,
        note=note,
    )
    if result.numel:
        _fill_statistics(
            result,
            errors.error,
            allowed,
            errors.finite,
            errors.actual,
            errors.expected,
            keep_samples=keep_samples,
        )
    return result


def compare_intermediate(
    name: str,
    actual: Any,
    expected: Any,
    rounding: Callable[[], tuple[float | None, str]],
    *,
    atol: float | None = None,
    rtol: float | None = None,
) -> _records.TensorDiff:
    """The intermediate rule (module NOTE): ``actual`` against ``expected`` at the
    per-dtype tolerance and, where a finite error is beyond it, at that tolerance plus
    what eager's own rounding explains.

    Args:
        name: Shown in tables.
        actual: ONNX Runtime's value of a partition output or FX node.
        expected: The eager value it is judged against.
        rounding: Returns eager's rounding of ``expected`` (:func:`rounding_of` of it and
            its float64 counterpart), or ``None`` and why it is unknown; called only when
            the plain tolerance is exceeded (it costs a float64 run).
        atol: Absolute tolerance; ``None``: the dtype default.
        rtol: Relative tolerance; ``None``: the dtype default.
    """
    plain = compare_tensors(name, actual, expected, atol=atol, rtol=rtol)
    if plain.passed or plain.exact or math.isinf(plain.max_abs_error):
        return plain  # rounding explains no infinite error (shape, NaN, Inf)
    measured, why = rounding()
    if measured is None:
        note = f"eager's rounding not measured: {why}"
        plain.note = f"{plain.note}; {note}" if plain.note else note
        return plain
    return compare_tensors(name, actual, expected, atol=atol, rtol=rtol, rounding=measured)


def _fill_statistics(
    result: _records.TensorDiff,
    err: torch.Tensor,
    allowed: torch.Tensor,
    finite: torch.Tensor,
    a64: torch.Tensor,
    b64: torch.Tensor,
    *,
    keep_samples: bool,
) -> None:
    """Error statistics, the worst element and (optionally) samples, from the float64
    element errors ``err`` of a non-empty comparison."""
    flat_err = err.reshape(-1)
    over = torch.where(allowed > 0, err / allowed.clamp_min(1e-300), err * math.inf)
    result.ratio = float(torch.nan_to_num(over, nan=0.0, posinf=math.inf).max())
    worst = int(torch.argmax(flat_err))
    result.max_abs_error = float(flat_err[worst])
    finite_flat = finite.reshape(-1)
    if bool(finite_flat.any()):
        result.mean_abs_error = float(flat_err[finite_flat].mean())
    nonzero = finite & (b64 != 0)
    if bool(nonzero.any()):
        result.max_rel_error = float((err[nonzero] / b64[nonzero].abs()).max())
    # "higher": no interpolation between infinities (which would give NaN).
    result.p99_abs_error = float(np.percentile(flat_err.numpy(), 99, method="higher"))
    if result.max_abs_error > 0:
        index = np.unravel_index(worst, tuple(err.shape))
        result.worst_index = tuple(int(i) for i in index)
        result.eager_at_worst = float(b64.reshape(-1)[worst])
        result.ort_at_worst = float(a64.reshape(-1)[worst])
    if keep_samples:
        picked = torch.nonzero(finite_flat).reshape(-1)
        if picked.numel() > SAMPLE_SIZE:
            picked = picked[:: math.ceil(picked.numel() / SAMPLE_SIZE)]
        result.eager_sample = b64.reshape(-1)[picked].numpy().copy()
        result.error_sample = flat_err[picked].numpy().copy()


def compare_outputs(
    actual: Any,
    expected: Any,
    *,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    keep_samples: bool = False,
) -> list[_records.TensorDiff]:
    """Compares two nested outputs leaf by leaf (names: ``"output[0]"``, ...).

    A different number of leaves adds a failing entry ``"structure"`` with an infinite
    error; the leaves both have are still compared.
    """
    got, want = _harness.named_leaves(actual), _harness.named_leaves(expected)
    diffs = [
        compare_tensors(
            name,
            a,
            b,
            atol=tolerance_for(atol, name),
            rtol=tolerance_for(rtol, name),
            keep_samples=keep_samples,
        )
        for (name, b), (_, a) in zip(want, got)
    ]
    if len(got) != len(want):
        diffs.append(
            _records.TensorDiff(
                "structure",
                (),
                "",
                0.0,
                0.0,
                False,
                max_abs_error=math.inf,
                note=f"ORT returned {len(got)} values, eager {len(want)}",
            )
        )
    return diffs


def rounding_of(value: Any, exact: Any) -> float | None:
    """Eager's own rounding: the largest ``|value - exact|`` over elements finite in both,
    ``exact`` being the same computation in float64 (0 when none is; ``None`` when they
    are not floating-point tensors of one shape)."""
    if not (isinstance(value, torch.Tensor) and isinstance(exact, torch.Tensor)):
        return None
    if value.shape != exact.shape or not (value.is_floating_point() or value.is_complex()):
        return None
    errors = _closeness.element_errors(value.detach(), exact.detach())
    finite = errors.error[errors.finite]
    return float(finite.max()) if finite.numel() else 0.0


def float64_allowed(eager_error: float, scale: float) -> float:
    """The largest error to a float64 run that is as close as eager's ``eager_error``, for
    a result of magnitude ``scale`` (module docstring)."""
    return FLOAT64_FACTOR * max(eager_error, FLOAT64_FLOOR * scale)


def max_abs_difference(actual: Any, expected: Any) -> float:
    """``max_abs_error(compare_outputs(actual, expected))`` without the statistics of
    each leaf: the same rules (NaN against NaN is no difference; a NaN or Inf on one
    side only, a shape mismatch or a different structure is ``inf``)."""
    got, want = _harness.named_leaves(actual), _harness.named_leaves(expected)
    if len(got) != len(want):
        return math.inf
    worst = 0.0
    for (name, b), (_, a) in zip(want, got):
        ta, tb = _as_tensor(a), _as_tensor(b)
        if ta is None or tb is None or ta.shape != tb.shape:
            error = compare_tensors(name, a, b).max_abs_error  # the rare forms, as rated
        else:
            error = _closeness.max_error(ta, tb)
        worst = max(worst, error)
    return worst


def max_abs_error(diffs: list[_records.TensorDiff]) -> float:
    """The largest absolute error among compared values (0 when there are none)."""
    return max((d.max_abs_error for d in diffs), default=0.0)
