"""Training through a compiled backend, as users train: the model's own loss, SGD steps,
the loss trajectory and each step's gradients against eager and float64.

:func:`check_gradients` trains copies of one model side by side from the same weights on
the same batch: eager PyTorch, the same model in float64 (the reference both are judged
by), and each compiled backend asked for (``"ortlab"``: :func:`ortlab.compile`; any other
name: ``torch.compile(backend=name)``, e.g. ``"inductor"``). :func:`judge` applies the
gradient rule, :func:`judge_trajectory` the loss rule.

The step
--------
Train mode; the loss is the model's own (:attr:`ZooModel.objective`): the training inputs
with their labels go into the compiled call and ``.loss`` comes out, as a user's
``torch.compile(model)`` followed by ``model(**inputs, labels=y).loss`` does, so that the
loss and its backward run inside the compiled graphs. A model without an objective (the
teaching zoo) trains on a fixed random projection of its first output, ``(out * w).sum()``
with ``w`` drawn from a seeded generator (``out.sum()`` has no gradient through a final
normalisation). One backward, then plain SGD (:data:`LEARNING_RATE`, no momentum, no
weight decay, no clipping: a gradient scale error moves the next loss by as much), each
copy with **its own** gradients, for ``steps`` steps (:data:`TRAIN_STEPS`).

The loss rule
-------------
A backend's loss at step ``k`` must be within :data:`LOSS_RTOL` of eager's, relative,
``|L_b - L_e| <= LOSS_RTOL * |L_e|`` (``|L_e|`` at least :data:`NEGLIGIBLE` times the
trajectory's largest loss, for a projection that crosses zero). The steps judged are
float32's **horizon**: those before the first step where eager itself is off the float64
trajectory by more than :data:`HORIZON` times the tolerance. Past it, float32 rounding
alone decides the trajectory (a batch-norm CNN on two images, a ReLU mask flipped): no
float32 run can be held to another's, and the deviation is reported, not judged; the
gradient rule below still judges every step.

Why 1e-3 (measured on the 42 corpus models, batch 2, 10 steps at 0.05): float32 rounding
(eager against float64) moves the loss of the models that stay within the horizon by at
most 1.7e-5 (wav2vec 2.0's CTC); a gradient twice too large (a float64 run at twice the
learning rate) moves it by 5.7e-2 to 10 (the smallest: Phi, and EfficientNet and
MobileViT, whose losses move slowly), and one 1% too large by 7.8e-4 to 0.2. The tolerance
sits 60x above the rounding and 57x below the smallest doubling. The horizon is eager's:
a backend's own rounding can tip a decision that eager's does not (RegNet, one run of two:
4e-5 off at step 8, 7.4e-4 at step 9, every step's gradients within 5.4e-5 of eager's at
its weights; 3.4e-5 at most in the other run): within the tolerance, but by a margin of
1.35, the rule's thinnest.

The gradient rule
-----------------
At every step, each backend's gradients are compared with those of eager and of float64
**at the backend's own weights** (a float32 and a float64 twin take them before the step;
at step 0 every copy holds the same weights and eager's and float64's own steps serve;
after it, the float64 twin steps only where the gradients are not within tolerance of
eager's, the only case its comparison decides).
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
is over the run: its worst error to the float64 gradients, over the steps, at most
:data:`FP64_FACTOR` times eager's worst (eager's floored at float32 resolution; the rule of
``ortlab.diff(reference="float64")``, :func:`ortlab.numerics._compare.float64_allowed`).
The second case is a discontinuity, not an error: a ReLU network whose pre-activation sits
~1e-5 from 0 flips its mask under a different float32 rounding, which moves one weight's
gradient by tens of percent although the backend is as exact as eager (measured on a
ResNet-18: ortlab vs eager 21% on one weight, and ortlab's error to float64 equal to
eager's). Over the run, not step by step: in such a model float32's error to float64
changes from step to step with the weights, and one step's ratio is a coin toss (LeViT,
10 steps: ortlab's worst error to float64 3.6x eager's at step 7, 6.8e-3 vs 1.9e-3, while
eager's own reached 3.1e-1 at step 5, ortlab's 2.4e-1 at step 4). Both numbers are
reported. The loss at the backend's weights is compared with the float32 twin's at the
model's output tolerances.
"""

# NOTE: the trajectory and the gradients need different things. A trajectory must follow
# each copy's own gradients (an update from eager's gradients on every copy, as the first
# version of this check did, hides a gradient scaled by N: the weights never see it). A
# gradient comparison needs the same weights on both sides. The twins give both: each
# copy trains on its own, and before each backend's step a float32 and a float64 copy take
# its weights and compute the reference gradients there.

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
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
"""A parameter's scale is at least this times the model's largest gradient scale; a
step's loss scale at least this times the trajectory's largest loss."""

LEARNING_RATE = 0.05
"""Plain SGD's step, on every copy with its own gradients."""

TRAIN_STEPS = 10
"""Training steps of a check, by default."""

LOSS_RTOL = 1e-3
"""A step's loss passes within this of eager's, relative (module docstring: why)."""

HORIZON = 0.1
"""Steps are judged while eager is within this times :data:`LOSS_RTOL` of the float64
trajectory: a backend as exact as eager then differs from it by about twice that at most,
five times less than the tolerance."""

GRAD_TOLERANCE_FACTOR = 10.0
"""Unset gradient tolerances are this times the model's output tolerances."""

PROJECTION = "projection of the first output, (out * w).sum()"
"""The loss of a model without an objective."""

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
    """One backend's training: its loss trajectory, and its gradients at every step
    against eager and float64 at its weights."""

    backend: str
    steps: int = 0
    """Training steps that completed."""
    vs_eager: float = math.nan
    """Worst per-parameter relative error to eager's gradients, over the steps."""
    worst_param: str = ""
    """The parameter with that error."""
    worst_step: int = 0
    """The step of that error (0: the first)."""
    vs_fp64: float = math.nan
    """Worst per-parameter relative error to the float64 gradients (NaN: no float64
    reference), over the first step and the steps not within tolerance of eager's."""
    eager_vs_fp64: float = math.nan
    """Eager's own worst error to the float64 gradients, over the same steps."""
    within_tolerance: bool = False
    """Every parameter within the gradient tolerance of eager's, at every step."""
    fp64_ok: bool = False
    """Within tolerance at every step, or, over the steps, as close to float64 as eager:
    :attr:`vs_fp64` at most :data:`FP64_FACTOR` times :attr:`eager_vs_fp64`."""
    fp64_complete: bool = True
    """Every step not within tolerance had a float64 reference."""
    output_error: float = math.nan
    """Largest absolute error of the loss (a projection: of the first output) to eager's
    at the same weights, over the steps."""
    output_passed: bool = True
    """That value within the model's output tolerances of eager's, at every step."""
    losses: list[float] = dataclasses.field(default_factory=list)
    """The backend's loss at each step of its own training."""
    loss_deviation: float = math.nan
    """Largest relative deviation of :attr:`losses` from eager's over the judged steps
    (float32's horizon, :attr:`judged_steps`)."""
    loss_deviation_all: float = math.nan
    """The same over every step, the horizon's later steps included (reported only)."""
    judged_steps: int = 0
    """Steps the loss rule judged (those within float32's horizon)."""
    loss_passed: bool = False
    """Every judged step's loss within :data:`LOSS_RTOL` of eager's."""
    error: str | None = None
    """``"Type: message"`` when the backend raised (the steps stop there)."""

    @property
    def verdict(self) -> str:
        """The gradients': :data:`VERDICT_PASS`, :data:`VERDICT_FP64`,
        :data:`VERDICT_FAIL` or :data:`VERDICT_CRASH`."""
        if self.error is not None:
            return VERDICT_CRASH
        if self.steps and self.within_tolerance:
            return VERDICT_PASS
        if self.steps and self.fp64_ok:
            return VERDICT_FP64
        return VERDICT_FAIL

    @property
    def grads_passed(self) -> bool:
        return self.verdict in (VERDICT_PASS, VERDICT_FP64)

    @property
    def loss_verdict(self) -> str:
        """The loss trajectory's: :data:`VERDICT_PASS`, :data:`VERDICT_FAIL` or
        :data:`VERDICT_CRASH`."""
        if self.error is not None:
            return VERDICT_CRASH
        return VERDICT_PASS if self.loss_passed else VERDICT_FAIL

    @property
    def passed(self) -> bool:
        """Gradients and loss trajectory both pass."""
        return self.grads_passed and self.loss_passed

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "verdict": self.verdict,
            "loss_verdict": self.loss_verdict,
        }


@dataclasses.dataclass
class GradReport:
    """Every backend's :class:`GradCheck` for one model, and what the references did."""

    checks: dict[str, GradCheck] = dataclasses.field(default_factory=dict)
    objective: str = ""
    """The loss trained on (:attr:`ortlab.zoo.Objective.loss`, or :data:`PROJECTION`)."""
    learning_rate: float = LEARNING_RATE
    eager_losses: list[float] = dataclasses.field(default_factory=list)
    """Eager's loss at each step of its own training."""
    fp64_losses: list[float] = dataclasses.field(default_factory=list)
    """Float64's, the same way (empty without a float64 reference)."""
    horizon: int = 0
    """Float32's horizon: the steps before eager leaves the float64 trajectory by more
    than :data:`HORIZON` times :data:`LOSS_RTOL` (every step without float64)."""
    fp64_error: str | None = None
    """Why there is no float64 reference (the model did not run in float64)."""
    eager_error: str | None = None
    """Why there is no reference at all (the model did not train eagerly)."""
    graphs: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    """The ortlab backends' graph records (``GraphRecord``), by backend name."""
    recompiled: dict[str, bool] = dataclasses.field(default_factory=dict)
    """Whether a later step compiled graphs the first had not (by backend name)."""

    @property
    def eager_vs_fp64(self) -> float:
        """Eager's largest relative deviation from the float64 trajectory (NaN without
        it)."""
        return max(
            (d for d in deviations(self.eager_losses, self.fp64_losses)), default=math.nan
        )


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
    """Folds one step's gradient errors into ``check``: worst values kept, tolerance
    and-ed, and the float64 rule applied to the worst errors so far."""
    first = check.steps == 0
    w = worst(vs_eager)
    rel = w.relative if w is not None else 0.0
    if first or not rel <= check.vs_eager:
        check.vs_eager, check.worst_param = rel, w.name if w is not None else ""
        check.worst_step = check.steps
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
    judgeable = ok or not math.isnan(fp64)
    check.fp64_complete = judgeable if first else check.fp64_complete and judgeable
    check.fp64_ok = check.within_tolerance or (
        check.fp64_complete and fp64_close(check.vs_fp64, check.eager_vs_fp64)
    )
    check.steps += 1


def deviations(losses: Sequence[float], reference: Sequence[float]) -> list[float]:
    """Each step's ``|L - L_ref| / s`` (module docstring: ``s`` is ``|L_ref|``, at least
    :data:`NEGLIGIBLE` times the reference's largest); as many steps as both have."""
    top = max((abs(r) for r in reference), default=0.0)
    out = []
    for got, ref in zip(losses, reference, strict=False):
        scale = max(abs(ref), NEGLIGIBLE * top) or 1.0
        out.append(abs(got - ref) / scale if math.isfinite(got) else math.inf)
    return out


def horizon(eager: Sequence[float], fp64: Sequence[float]) -> int:
    """The steps before eager's loss first leaves float64's by more than :data:`HORIZON`
    times :data:`LOSS_RTOL` (every step of eager's without a float64 trajectory)."""
    if not fp64:
        return len(eager)
    for step, d in enumerate(deviations(eager, fp64)):
        if not d <= HORIZON * LOSS_RTOL:
            return step
    return min(len(eager), len(fp64))


def judge_trajectory(check: GradCheck, eager: Sequence[float], judged: int) -> None:
    """Judges ``check.losses`` against eager's over the first ``judged`` steps (the loss
    rule); a trajectory that stopped early (a crash) fails."""
    devs = deviations(check.losses, eager)
    check.judged_steps = min(judged, len(devs))
    check.loss_deviation = max(devs[:judged], default=math.nan)
    check.loss_deviation_all = max(devs, default=math.nan)
    complete = len(check.losses) == len(eager) and check.judged_steps > 0
    check.loss_passed = complete and check.loss_deviation <= LOSS_RTOL


def _nanmax(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


def loss_weights(out: torch.Tensor) -> torch.Tensor:
    """The fixed random projection of the loss (seed 0), shaped like ``out``."""
    return torch.randn(out.shape, generator=torch.Generator().manual_seed(0))


def model_loss(output: Any) -> torch.Tensor:
    """The ``loss`` of a model's output (a ``transformers`` ``ModelOutput`` or a mapping).

    Raises:
        OrtlabError: The output has no loss (the labels did not reach the model).
    """
    loss = output.get("loss") if isinstance(output, Mapping) else None
    if loss is None:
        loss = getattr(output, "loss", None)
    if not isinstance(loss, torch.Tensor):
        raise errors.OrtlabError(
            f"The model's output ({type(output).__name__}) has no loss: does its forward "
            "take the objective's labels?"
        )
    return loss


@dataclasses.dataclass
class _Task:
    """What a training step runs: the model, its inputs, and the loss of its output."""

    model: torch.nn.Module
    """A freshly built model (every side trains a copy)."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loss: Callable[[Any], torch.Tensor]
    """The loss of the model's output."""
    compared: Callable[[Any], Any]
    """What is compared with eager at the same weights (the loss, or the first output)."""
    objective: str


def _task(spec: zoo.ZooModel, model: torch.nn.Module | None) -> _Task:
    """The model's objective, or the projection of its first output."""
    if spec.objective is not None:
        return _Task(
            model if model is not None else spec.objective.build(),
            (),
            spec.training_inputs(),
            model_loss,
            model_loss,
            spec.objective.loss,
        )
    model = model if model is not None else spec.build()
    args = spec.example_inputs()
    with torch.no_grad():  # the eval model, for the shape of the loss weights only
        weights = loss_weights(_harness.tensor_leaves(model(*args))[0])

    def first(output: Any) -> torch.Tensor:
        outputs = _harness.tensor_leaves(output)
        if not outputs:
            raise errors.OrtlabError("the model returned no tensor")
        return outputs[0]

    def project(output: Any) -> torch.Tensor:
        out = first(output)
        return (out * weights.to(out.dtype)).sum()

    return _Task(model, args, {}, project, first, PROJECTION)


@dataclasses.dataclass
class _Side:
    """One copy of the model that takes the training steps."""

    name: str
    module: torch.nn.Module
    call: Callable[[], Any]
    backend: Any = None


@dataclasses.dataclass
class _Step:
    """What one forward and backward gave."""

    loss: float
    compared: Any
    grads: dict[str, torch.Tensor]


def _step(side: _Side, task: _Task) -> _Step:
    """One forward and backward: the loss, the value compared with eager, and every
    parameter's gradient (zeros for a parameter the loss does not reach)."""
    for p in side.module.parameters():
        p.grad = None
    output = side.call()
    loss = task.loss(output)
    compared = _detached(task.compared(output))
    loss.backward()
    grads = {
        n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
        for n, p in side.module.named_parameters()
        if p.requires_grad
    }
    return _Step(float(loss.detach()), compared, grads)


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


def _side(name: str, module: torch.nn.Module, task: _Task, backend: str | None) -> _Side:
    """A side calling ``module`` (eager, or compiled by ``backend``) on the task's
    inputs; float64 inputs for a float64 module."""
    double = next(module.parameters()).dtype == torch.float64
    args = tuple(_as_double(a) for a in task.args) if double else task.args
    kwargs = {k: _as_double(v) for k, v in task.kwargs.items()} if double else task.kwargs
    if backend is None:
        return _Side(name, module, lambda: module(*args, **kwargs))
    if backend == "ortlab":
        # As a user compiles: the module itself, called with the inputs and the labels.
        compiled = ortlab.backend.compile(module)
        return _Side(
            name,
            module,
            lambda: compiled(*args, **kwargs),
            ortlab.backend.backend_of(compiled),
        )
    entry = _harness.fresh_entry(module, name=f"train_{name}", kwargs=kwargs)
    other = torch.compile(entry, backend=backend)
    return _Side(name, module, lambda: other(*args))


def _as_double(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    return value


def check_gradients(
    spec: zoo.ZooModel,
    backends: Sequence[str] = ("ortlab",),
    *,
    steps: int = TRAIN_STEPS,
    model: torch.nn.Module | None = None,
) -> GradReport:
    """Trains eager, float64 and each backend's copy ``steps`` SGD steps on the model's
    own loss, and judges each backend's loss trajectory and gradients (module docstring).

    Args:
        spec: The zoo model (objective, tolerances, Dynamo settings).
        backends: ``"ortlab"`` and/or ``torch.compile`` backend names.
        steps: Training steps.
        model: The model to train, freshly built (left untouched: every side trains a
            copy); ``None``: the objective's model (else the zoo model) is built.

    Returns:
        The :class:`GradReport`; a backend that raises has its error on its check and the
        others go on. Never raises for a backend's failure.
    """
    report = GradReport()
    try:
        task = _task(spec, model)
    except Exception as e:
        report.eager_error = errors.describe(e)
        return report
    report.objective = task.objective
    atol, rtol, normalised = tolerance(spec)
    eager = _side("eager", copy.deepcopy(task.model).train(), task, None)
    fp64: _Side | None = None
    twin64: _Side | None = None
    try:
        fp64 = _side("fp64", copy.deepcopy(task.model).train().double(), task, None)
        twin64 = _side("twin64", copy.deepcopy(task.model).train().double(), task, None)
    except Exception as e:  # a model that cannot be cast: judged against eager only
        report.fp64_error, fp64 = errors.describe(e), None
    twin = _side("twin", copy.deepcopy(task.model).train(), task, None)
    sides: dict[str, _Side] = {}
    for b in backends:
        report.checks[b] = GradCheck(b)
        try:
            sides[b] = _side(b, copy.deepcopy(task.model).train(), task, b)
        except Exception as e:
            report.checks[b].error = errors.describe(e)
    # (kept apart: a backend that crashes leaves the steps, its records stay reported)
    records_of = {b: s.backend for b, s in sides.items() if s.backend is not None}
    graph_counts: dict[str, int] = {}
    with _torch_private.dynamo_config_patch(dict(spec.dynamo_config)):
        for step in range(steps):
            try:
                ref_step = _step(eager, task)
            except Exception as exc:
                report.eager_error = errors.describe(exc)
                break
            report.eager_losses.append(ref_step.loss)
            e64: _Step | None = None
            if fp64 is not None:
                try:
                    e64 = _step(fp64, task)
                    report.fp64_losses.append(e64.loss)
                except Exception as exc:
                    report.fp64_error, fp64, twin64 = errors.describe(exc), None, None
            updates: dict[str, dict[str, torch.Tensor]] = {}
            for b, side in list(sides.items()):
                check = report.checks[b]
                try:
                    got = _step(side, task)
                except Exception as exc:
                    check.error = errors.describe(exc)
                    del sides[b]
                    continue
                check.losses.append(got.loss)
                updates[b] = got.grads
                fp64_at: Callable[[], _Step | None]
                if step == 0:  # every copy holds the initial weights
                    ref, fp64_at = ref_step, _given(e64)
                else:
                    ref = _at_weights(twin, side, task)
                    fp64_at = _float64_at(twin64, side, task)
                _compare_step(check, got, ref, fp64_at, spec, atol, rtol, normalised)
                if side.backend is not None:
                    count = len(side.backend.graphs)
                    if step == 0:
                        graph_counts[b] = count
                    report.recompiled[b] = count > graph_counts[b]
            _update(eager, ref_step.grads)
            if fp64 is not None and e64 is not None:
                _update(fp64, e64.grads)
            for b, grads in updates.items():
                _update(sides[b], grads)
    report.horizon = horizon(report.eager_losses, report.fp64_losses)
    if report.eager_error is None:
        for check in report.checks.values():
            judge_trajectory(check, report.eager_losses, report.horizon)
    for b, ortlab_backend in records_of.items():
        report.graphs[b] = list(ortlab_backend.graphs)
    return report


def _at_weights(twin: _Side, side: _Side, task: _Task) -> _Step:
    """The twin's step at ``side``'s weights (and buffers)."""
    with torch.no_grad():
        twin.module.load_state_dict(side.module.state_dict())
    return _step(twin, task)


def _given(step: _Step | None) -> Callable[[], _Step | None]:
    return lambda: step


def _float64_at(twin64: _Side | None, side: _Side, task: _Task) -> Callable[[], _Step | None]:
    """The float64 twin's step at ``side``'s weights, when asked for (``None``: no
    float64 twin)."""
    if twin64 is None:
        return lambda: None
    return lambda: _at_weights(twin64, side, task)


def _compare_step(
    check: GradCheck,
    got: _Step,
    ref: _Step,
    fp64_at: Callable[[], _Step | None],
    spec: zoo.ZooModel,
    atol: float,
    rtol: float,
    normalised: bool,
) -> None:
    """One step of a backend against the references at its weights. The float64 step
    (``fp64_at``) is taken at the first step, and at a later one only where the gradients
    are not within tolerance of eager's: only then does the rule need it (a float64
    step of a 224x224 ResNet-18 costs seconds on a CPU)."""
    diffs = _compare.compare_outputs(
        got.compared, ref.compared, atol=spec.atol, rtol=spec.rtol
    )
    check.output_error = _nanmax(check.output_error, _compare.max_abs_error(diffs))
    check.output_passed = check.output_passed and all(d.passed for d in diffs)
    vs_eager = param_errors(got.grads, ref.grads, atol=atol, rtol=rtol, normalised=normalised)
    vs64 = eager64 = None
    ref64 = fp64_at() if check.steps == 0 or not all(e.passed for e in vs_eager) else None
    if ref64 is not None:
        vs64 = param_errors(got.grads, ref64.grads)
        eager64 = param_errors(ref.grads, ref64.grads)
    judge(check, vs_eager, vs64, eager64)


def _update(side: _Side, grads: dict[str, torch.Tensor]) -> None:
    """Plain SGD on one copy, from its own gradients."""
    with torch.no_grad():
        for n, p in side.module.named_parameters():
            if n in grads:
                p.sub_(LEARNING_RATE * grads[n])
