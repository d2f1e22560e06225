"""Gradients of a training step through a compiled backend, against eager and float64.

:func:`check_gradients` runs the same training step (or several) on copies of one model:
eager PyTorch, the same model in float64 (the reference both are judged by), and each
compiled backend asked for (``"ortlab"``: :func:`ortlab.compile`; any other name:
``torch.compile(backend=name)``, e.g. ``"inductor"``). :func:`judge` applies the rule.

The step
--------
Train mode, the zoo's deterministic inputs, loss = a fixed random projection of the
first output, ``(out * w).sum()`` with ``w`` drawn from a seeded generator (``out.sum()``
has no gradient through a final normalisation), one backward. Between steps every copy
takes the same plain SGD update, computed from eager's gradients, and the float64 copy
takes the float32 weights that result: the copies then hold the same weights at every
step, so each step's gradients are comparable.

The rule
--------
A parameter's error is relative to the reference's scale: ``max|g - g_ref| / s`` with
``s = max|g_ref|``, but at least :data:`NEGLIGIBLE` times the model's largest ``s``. The
floor matters for gradients that are zero in exact arithmetic (a key projection's bias,
which a softmax cancels): float32 leaves them at rounding noise (~1e-9 of the others),
where a relative error means nothing; the floor judges them on the model's scale instead.
A model's error is its worst parameter's. Differences are taken by the one comparator
(:mod:`ortlab.numerics._compare`).

A backend's gradients **pass** when every parameter is within the model's gradient
tolerance of eager's: ``assert_close(g / s, g_eager / s)`` at ten times the model's output
``atol``/``rtol`` (tolerances on the normalised gradient), or, where the zoo sets
:attr:`ZooModel.grad_atol` / ``grad_rtol``, ``assert_close(g, g_eager)`` at those. They
also pass, **against float64**, when the backend is as close to a float64 run as eager
is: its error to the float64 gradients at most :data:`FP64_FACTOR` times eager's own
(eager's floored at float32 resolution; the rule of ``ortlab.diff(reference="float64")``,
:func:`ortlab.numerics._compare.float64_allowed`). The second case is a discontinuity,
not an error: a ReLU network whose pre-activation sits ~1e-5 from 0 flips its mask under
a different float32 rounding, which moves one weight's gradient by tens of percent
although the backend is as exact as eager (measured on a ResNet-18: ortlab vs eager 21%
on one weight, and ortlab's error to float64 equal to eager's). Both numbers are
reported.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

import ortlab.backend
from ortlab import _harness, errors, zoo
from ortlab.backend import _torch_private
from ortlab.numerics import _compare

FP64_FACTOR = _compare.FLOAT64_FACTOR
"""A backend passes against float64 when its error is at most this times eager's (the
numerics' rule, :func:`ortlab.numerics._compare.float64_allowed`)."""

NEGLIGIBLE = 1e-3
"""A parameter's scale is at least this times the model's largest gradient scale."""

LEARNING_RATE = 0.05
"""The SGD step between training steps (from eager's gradients, on every copy)."""

GRAD_TOLERANCE_FACTOR = 10.0
"""Unset gradient tolerances are this times the model's output tolerances."""

VERDICT_PASS = "pass"
VERDICT_FP64 = "passes vs fp64 (discontinuity)"
VERDICT_FAIL = "FAIL"
VERDICT_CRASH = "crash"


@dataclasses.dataclass
class ParamError:
    """One parameter's gradient against a reference."""

    name: str
    relative: float
    """``max|g - g_ref| / s`` (module docstring)."""
    passed: bool = True
    """Within the tolerance asked for (``True`` when none was)."""


@dataclasses.dataclass
class GradCheck:
    """One backend's gradients over the training steps, against eager and float64."""

    backend: str
    steps: int = 0
    """Training steps that completed."""
    vs_eager: float = math.nan
    """Worst per-parameter relative error to eager's gradients, over the steps."""
    worst_param: str = ""
    """The parameter with that error."""
    vs_fp64: float = math.nan
    """Worst per-parameter relative error to the float64 gradients (NaN: no float64
    reference)."""
    eager_vs_fp64: float = math.nan
    """Eager's own worst error to the float64 gradients, over the same steps."""
    within_tolerance: bool = False
    """Every parameter within the gradient tolerance of eager's, at every step."""
    fp64_ok: bool = False
    """At every step, within tolerance or as close to float64 as eager."""
    output_error: float = math.nan
    """Largest absolute error of the train-mode first output (the one the loss
    projects) to eager's, over the steps."""
    output_passed: bool = True
    """That output within the model's output tolerances of eager's, at every step."""
    error: str | None = None
    """``"Type: message"`` when the backend raised (the steps stop there)."""

    @property
    def verdict(self) -> str:
        """:data:`VERDICT_PASS`, :data:`VERDICT_FP64`, :data:`VERDICT_FAIL` or
        :data:`VERDICT_CRASH`."""
        if self.error is not None:
            return VERDICT_CRASH
        if self.steps and self.within_tolerance:
            return VERDICT_PASS
        if self.steps and self.fp64_ok:
            return VERDICT_FP64
        return VERDICT_FAIL

    @property
    def passed(self) -> bool:
        return self.verdict in (VERDICT_PASS, VERDICT_FP64)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "verdict": self.verdict}


@dataclasses.dataclass
class GradReport:
    """Every backend's :class:`GradCheck` for one model, and what the reference did."""

    checks: dict[str, GradCheck] = dataclasses.field(default_factory=dict)
    fp64_error: str | None = None
    """Why there is no float64 reference (the model did not run in float64)."""
    eager_error: str | None = None
    """Why there is no reference at all (the model did not train eagerly)."""
    graphs: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    """The ortlab backends' graph records (``GraphRecord``), by backend name."""
    recompiled: dict[str, bool] = dataclasses.field(default_factory=dict)
    """Whether a later step compiled graphs the first had not (by backend name)."""


def tolerance(spec: zoo.ZooModel) -> tuple[float, float, bool]:
    """``(atol, rtol, normalised)`` of a model's gradients: the zoo's own on raw
    gradients (``normalised=False``), or ten times its output's on gradients divided by
    their scale."""
    if spec.grad_atol is None and spec.grad_rtol is None:
        return GRAD_TOLERANCE_FACTOR * spec.atol, GRAD_TOLERANCE_FACTOR * spec.rtol, True
    atol = spec.grad_atol if spec.grad_atol is not None else GRAD_TOLERANCE_FACTOR * spec.atol
    rtol = spec.grad_rtol if spec.grad_rtol is not None else GRAD_TOLERANCE_FACTOR * spec.rtol
    return atol, rtol, False


def _magnitude(t: torch.Tensor) -> float:
    finite = t.detach()[torch.isfinite(t.detach())]
    return float(finite.abs().max()) if finite.numel() else 0.0


def param_errors(
    grads: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    *,
    atol: float | None = None,
    rtol: float | None = None,
    normalised: bool = True,
) -> list[ParamError]:
    """Each parameter's gradient against the reference's (module docstring): its
    relative error, and whether it is within ``atol``/``rtol`` (on the gradients divided
    by their scale when ``normalised``, else on the raw ones; no tolerance: passes)."""
    scales = {n: _magnitude(r) for n, r in reference.items()}
    floor = NEGLIGIBLE * max(scales.values(), default=0.0)
    out = []
    for name, ref in reference.items():
        got = grads.get(name)
        if got is None:
            out.append(ParamError(name, math.inf, False))
            continue
        got = got.to(ref.dtype)
        scale = max(scales[name], floor) or 1.0  # an all-zero model: absolute errors
        diff = _compare.compare_tensors(
            name,
            got / scale,
            ref / scale,
            atol=atol if normalised else None,
            rtol=rtol if normalised else None,
        )
        passed = diff.passed
        if not normalised:
            passed = _compare.compare_tensors(name, got, ref, atol=atol, rtol=rtol).passed
        out.append(ParamError(name, diff.max_abs_error, passed or atol is None))
    return out


def worst(errors_: Sequence[ParamError]) -> ParamError | None:
    """The parameter with the largest relative error (``None`` for no parameters)."""
    return max(errors_, key=lambda e: e.relative, default=None)


def fp64_close(backend_vs_fp64: float, eager_vs_fp64: float) -> bool:
    """The backend is as close to float64 as eager is; both errors are relative to the
    gradients' scale, so the scale is 1."""
    if not (math.isfinite(backend_vs_fp64) and math.isfinite(eager_vs_fp64)):
        return False
    return backend_vs_fp64 <= _compare.float64_allowed(eager_vs_fp64, 1.0)


def judge(
    check: GradCheck,
    vs_eager: Sequence[ParamError],
    vs_fp64: Sequence[ParamError] | None,
    eager_vs_fp64: Sequence[ParamError] | None,
) -> None:
    """Folds one step's errors into ``check`` (worst values kept, passes and-ed)."""
    first = check.steps == 0
    w = worst(vs_eager)
    rel = w.relative if w is not None else 0.0
    if first or not rel <= check.vs_eager:
        check.vs_eager, check.worst_param = rel, w.name if w is not None else ""
    ok = all(e.passed for e in vs_eager)
    fp64 = math.nan
    eager64 = math.nan
    if vs_fp64 is not None and eager_vs_fp64 is not None:
        w64, e64 = worst(vs_fp64), worst(eager_vs_fp64)
        fp64 = w64.relative if w64 is not None else 0.0
        eager64 = e64.relative if e64 is not None else 0.0
        check.vs_fp64 = fp64 if first else _nanmax(check.vs_fp64, fp64)
        check.eager_vs_fp64 = eager64 if first else _nanmax(check.eager_vs_fp64, eager64)
    check.within_tolerance = ok if first else check.within_tolerance and ok
    step_ok = ok or fp64_close(fp64, eager64)
    check.fp64_ok = step_ok if first else check.fp64_ok and step_ok
    check.steps += 1


def _nanmax(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


def loss_weights(out: torch.Tensor) -> torch.Tensor:
    """The fixed random projection of the loss (seed 0), shaped like ``out``."""
    return torch.randn(out.shape, generator=torch.Generator().manual_seed(0))


@dataclasses.dataclass
class _Side:
    """One copy of the model that takes the training steps."""

    name: str
    module: torch.nn.Module
    call: Any
    args: tuple[Any, ...]
    backend: Any = None


def _step(side: _Side, weights: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward and backward; the first output and every parameter's gradient (zeros
    for a parameter the loss does not reach)."""
    for p in side.module.parameters():
        p.grad = None
    outputs = _harness.tensor_leaves(side.call(*side.args))
    if not outputs:
        raise errors.OrtlabError(f"{side.name}: the model returned no tensor")
    out = outputs[0]
    (out * weights.to(out.dtype)).sum().backward()
    grads = {
        n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
        for n, p in side.module.named_parameters()
        if p.requires_grad
    }
    return out.detach(), grads


def _compiled(backend: str, module: torch.nn.Module, name: str) -> tuple[Any, Any]:
    if backend == "ortlab":
        compiled = ortlab.backend.compile(module)
        return compiled, ortlab.backend.backend_of(compiled)
    entry = _harness.fresh_entry(module, name=f"grads_{name}_{backend}")
    return torch.compile(entry, backend=backend), None


def _as_double(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    return value


def check_gradients(
    spec: zoo.ZooModel,
    model: torch.nn.Module,
    backends: Sequence[str] = ("ortlab",),
    *,
    steps: int = 1,
) -> GradReport:
    """Runs ``steps`` training steps on eager, float64 and each backend's copy of
    ``model`` and judges each backend's gradients (module docstring).

    Args:
        spec: The zoo model (inputs, tolerances, Dynamo settings).
        model: A freshly built model (left untouched: every side trains a copy).
        backends: ``"ortlab"`` and/or ``torch.compile`` backend names.
        steps: Training steps (an SGD update between them).

    Returns:
        The :class:`GradReport`; a backend that raises has its error on its check and the
        others go on. Never raises for a backend's failure.
    """
    report = GradReport()
    atol, rtol, normalised = tolerance(spec)
    args = spec.example_inputs()
    eager = _Side("eager", copy.deepcopy(model).train(), None, args)
    eager.call = eager.module
    fp64: _Side | None = None
    try:
        module64 = copy.deepcopy(model).train().double()
        fp64 = _Side("fp64", module64, module64, tuple(_as_double(a) for a in args))
    except Exception as e:  # a model that cannot be cast: judged against eager only
        report.fp64_error = errors.describe(e)
    sides: dict[str, _Side] = {}
    records_of: dict[str, Any] = {}
    for b in backends:
        report.checks[b] = GradCheck(b)
        module = copy.deepcopy(model).train()
        try:
            call, ortlab_backend = _compiled(b, module, spec.name)
        except Exception as e:
            report.checks[b].error = errors.describe(e)
            continue
        sides[b] = _Side(b, module, call, args, ortlab_backend)
        if ortlab_backend is not None:
            records_of[b] = ortlab_backend
    graph_counts: dict[str, int] = {}
    try:
        with torch.no_grad():  # the eval model, for the shape of the loss weights only
            weights = loss_weights(_harness.tensor_leaves(model(*args))[0])
    except Exception as e:
        report.eager_error = errors.describe(e)
        return report
    with _torch_private.dynamo_config_patch(dict(spec.dynamo_config)):
        for step in range(steps):
            try:
                out, g_eager = _step(eager, weights)
            except Exception as e:
                report.eager_error = errors.describe(e)
                return report
            g64: dict[str, torch.Tensor] | None = None
            if fp64 is not None:
                try:
                    _, g64 = _step(fp64, weights)
                except Exception as e:
                    report.fp64_error, fp64 = errors.describe(e), None
            eager64 = param_errors(g_eager, g64) if g64 is not None else None
            for b, side in list(sides.items()):
                check = report.checks[b]
                try:
                    got, grads = _step(side, weights)
                except Exception as e:
                    check.error = errors.describe(e)
                    del sides[b]
                    continue
                diffs = _compare.compare_outputs(got, out, atol=spec.atol, rtol=spec.rtol)
                check.output_error = _nanmax(check.output_error, _compare.max_abs_error(diffs))
                check.output_passed = check.output_passed and all(d.passed for d in diffs)
                vs64 = param_errors(grads, g64) if g64 is not None else None
                vs_eager = param_errors(
                    grads, g_eager, atol=atol, rtol=rtol, normalised=normalised
                )
                judge(check, vs_eager, vs64, eager64)
                if side.backend is not None:
                    count = len(side.backend.graphs)
                    if step == 0:
                        graph_counts[b] = count
                    report.recompiled[b] = count > graph_counts[b]
            if step + 1 < steps:
                _update(eager, sides.values(), fp64, g_eager)
    for b, ortlab_backend in records_of.items():  # a crashed backend's too
        report.graphs[b] = list(ortlab_backend.graphs)
    return report


def _update(
    eager: _Side, others: Any, fp64: _Side | None, grads: dict[str, torch.Tensor]
) -> None:
    """The same SGD step on every float32 copy; the float64 copy takes their weights."""
    with torch.no_grad():
        for side in (eager, *others):
            for n, p in side.module.named_parameters():
                if n in grads:
                    p.sub_(LEARNING_RATE * grads[n])
        if fp64 is not None:
            weights = dict(eager.module.named_parameters())
            for n, p in fp64.module.named_parameters():
                p.copy_(weights[n])
