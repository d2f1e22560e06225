"""``ortlab.diff(..., reference="float64")``: is ortlab as close to the exact result as eager?

The call runs a third time, eagerly in float64 (a float64 copy of the module, the inputs
in float64, the same RNG state and output gradient), and each output and gradient of
eager and of ortlab is measured against it (:mod:`ortlab.numerics._compare`).

# NOTE: what "as close" means. Eager float32 is not the truth either: where ortlab and eager
# differ by rounding, float64 says which is nearer. ortlab passes a tensor when its largest
# distance to float64 is at most twice eager's, eager's counted as at least 1e-6 of the
# tensor's magnitude (eager may round exactly by luck): the rule is the comparator's
# (``_compare.float64_allowed``). Downstream of a decision flip a tensor may
# fail: float64 decided the flipped element like one side, and the other side's gradient is
# then far from float64, by as much as the two float32 runs differ; ortlab is then no worse
# than eager would be on another seed, but this check cannot say so. Random ops draw other
# numbers in float64 (dropout in train mode), which makes the reference meaningless there.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from ortlab import _harness
from ortlab.backend import _torch_private
from ortlab.numerics import _compare, _findings, _runner


def _float64(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return _runner.clone_value(value, torch.float64)  # a view stays a view
    return value


def _run_float64(
    fn: Any, args: Sequence[Any], runs: _runner.Runs, *, backward: bool
) -> tuple[list[tuple[str, Any]], list[tuple[str, torch.Tensor | None]]]:
    """The call in float64: its named outputs and, with ``backward``, named gradients."""
    target = _harness.unwrap_compiled(fn)
    module = None
    if isinstance(target, torch.nn.Module):
        module = copy.deepcopy(target).to(torch.float64)
        target = module
    inputs = _runner._clone_inputs(
        [_torch_private.tree_map(_float64, a) for a in args], grad=backward
    )
    with torch.random.fork_rng(devices=runs.devices):
        runs.rng.restore()
        with torch.set_grad_enabled(backward):
            out = target(*inputs)
    flat = _harness.named_leaves(out)
    detached = [(n, v.detach() if isinstance(v, torch.Tensor) else v) for n, v in flat]
    if not backward:
        return detached, []
    # The sides' output gradient: drawn in float64, rounded to their dtype.
    cotangents = []
    for cot, (_, eager) in zip(_runner._cotangents(flat), runs.eager.outputs):
        if cot is not None and isinstance(eager, torch.Tensor):
            cot = cot.to(eager.dtype).to(torch.float64)
        cotangents.append(cot)
    grads = _runner._gradients(module, inputs, [v for _, v in flat], cotangents)
    return detached, grads


def _distance(name: str, value: Any, exact: torch.Tensor) -> float:
    return _compare.compare_tensors(name, value, exact).max_abs_error


def float64_reference(
    fn: Any, args: Sequence[Any], runs: _runner.Runs, *, backward: bool
) -> _findings.Float64Reference:
    """Eager's and ortlab's outputs (and gradients) against the call run in float64.

    Args:
        fn: The module or function diffed.
        args: Its inputs (converted to float64 where floating point).
        runs: Both sides as diffed (their values, RNG state and devices).
        backward: Whether gradients were compared.

    Returns:
        A :class:`~ortlab.numerics.Float64Reference`; when the float64 run fails, one with
        no tensors and a note saying why.
    """
    try:
        outputs, grads = _run_float64(fn, args, runs, backward=backward)
    except Exception as e:
        return _findings.Float64Reference(
            [], notes=[f"the float64 run failed: {type(e).__name__}: {e}"]
        )
    tensors = []
    sides = (
        ("output", outputs, runs.eager.outputs, runs.compiled.outputs),
        ("gradient", grads, runs.eager.grads, runs.compiled.grads),
    )
    for kind, exact_side, eager_side, ort_side in sides:
        eager_by_name, ort_by_name = dict(eager_side), dict(ort_side)
        for name, exact in exact_side:
            eager, ort = eager_by_name.get(name), ort_by_name.get(name)
            if not all(isinstance(v, torch.Tensor) for v in (exact, eager, ort)):
                continue
            assert isinstance(exact, torch.Tensor) and isinstance(eager, torch.Tensor)
            if not eager.is_floating_point() or exact.numel() == 0:
                continue
            finite = exact[torch.isfinite(exact)]
            scale = float(finite.abs().max()) if finite.numel() else 0.0
            eager_error = _distance(name, eager, exact)
            tensors.append(
                _findings.ReferenceDiff(
                    name,
                    kind,
                    eager_error,
                    _distance(name, ort, exact),
                    _compare.float64_allowed(eager_error, scale),
                )
            )
    return _findings.Float64Reference(tensors)
