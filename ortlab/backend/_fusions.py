"""ONNX Runtime's fused operators for an exported inference partition.

# NOTE: ONNX Runtime runs attention, layer and RMS normalisation (with or without the
# residual add before it), bias + GELU and rotary embeddings as single operators of its
# ``com.microsoft`` domain. Its own graph optimizer finds only some of them in what
# torchlib produces; onnxscript's ``ort_fusions`` rewrite the patterns torchlib emits:
#
#   MatMul(q) ─┐                                         MatMul(q) ─┐
#   MatMul(k) ─┼─ Reshape/Transpose ─ MatMul ─ Softmax   MatMul(k) ─┼─ MultiHeadAttention
#   MatMul(v) ─┘         ─ MatMul ─ Transpose/Reshape    MatMul(v) ─┘   (or Attention)
#   x + r ─ LayerNormalization                       ==>  SkipLayerNormalization(x, r)
#   x ─ Pow ─ ReduceMean ─ Add ─ Sqrt ─ Div ─ Mul    ==>  SimplifiedLayerNormalization
#
# Measured on the corpus (one run, per call at batch 2, weights as inputs): T5 217 ->
# 165 us, BERT 180 -> 155, GPT-2 172 -> 159, ViT 160 -> 150, Wav2Vec2 275 -> 263; outputs
# within 1e-6 of eager as before. The rewrite costs 0.1-0.3 s per session (0.4-1.0 s on
# a symbolic decoder graph), so it runs only where its patterns can be: a graph with a
# Softmax, a normalisation or a GELU. Training graphs are left alone: their forward
# graph returns the activations its backward reads, which a fused operator would hide.
#
# A rewrite that raises leaves the partition unfused (the model is translated again), and
# a fused model ONNX Runtime refuses, cannot run on its first inputs, or whose outputs on
# them differ from the partition's run in PyTorch (``disagreement``: a fusion that
# matched a pattern it should not have) is replaced by the unfused one;
# ``SessionRecord.fusion_note`` says so. The check costs one eager run of the partition.
#
# Fused is not always faster: MobileViT's and Swin's attention over many short windows
# ran 12% and 18% slower as MultiHeadAttention than unfused (one run, per call at batch
# 2), while every other corpus transformer gained 0-20%. So by default (``ort_fusions``
# None) the unfused model is kept beside the fused one and both are timed on the first
# inputs (``compare_speed``, as the threads probe times one thread against several);
# the faster runs. ``ort_fusions=True`` keeps the fused model without timing.
#
# One rewrite is repaired after the fact (onnxscript 0.7): a Transpose moving the first
# dim of a MatMul's input (``nn.MultiheadAttention`` on sequence-first inputs) becomes
# ``transBatchA``/``transBatchB`` of a ``FusedMatMul`` even when the other input has
# another rank, which ONNX Runtime's kernel refuses at run time ("Two inputs should have
# same rank and rank >= 3 if transBatchA or transBatchB is true").
# ``explicit_batch_transposes`` puts the Transpose back in front of such a node.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ortlab import _closeness, errors
from ortlab.backend import _choose, records

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

TRIGGER_OPS = frozenset({"Softmax", "LayerNormalization", "Pow", "Erf", "Gelu"})
"""ONNX ops the fused patterns start from; a graph without any has nothing to fuse."""

CHECK_ATOL = 1e-3
CHECK_RTOL = 1e-3
"""How far a fused model's output may be from the partition's run in PyTorch on the same
inputs: ``atol * max(1, largest |expected|) + rtol * |expected|`` per element, with these
or ten times the dtype's ``assert_close`` defaults, whichever is larger (float16: rtol
1e-2). Fused operators reorder float32 arithmetic (measured within 1e-6 relative on the
corpus); a fusion applied where it does not belong (a mask, a scale, an epsilon) is off
by far more."""

COMPARE_RUNS = _choose.RUNS
"""Timed runs of each model when the fused and unfused models are compared (after a
first run of the unfused one, its allocations), alternating so that a change of load
hits both alike."""
COMPARE_BELOW_SECONDS = 50e-3
"""A fused model whose run takes this long or longer is kept without timing the unfused
one (a comparison costs ``2 * COMPARE_RUNS`` runs)."""

_LOGGERS = ("onnxscript.optimizer", "onnxscript.rewriter", "onnx_ir.passes")
"""Loggers whose notes on a rewrite are not the user's concern: constants left unfolded,
patterns tried, and ONNX's shape inference giving up on a contrib op ("Shape inference
failed ... Model is left unchanged", with a traceback)."""


_FOLDING_WARNINGS = r"onnx\.reference(\.|$)"
"""Modules whose numpy warnings come from constant folding: onnxscript's optimizer folds
constants with ONNX's reference evaluator, which warns on values the model then masks
(T5's relative-position buckets take ``log(0)``: "divide by zero encountered in log")."""


@contextlib.contextmanager
def quiet_onnxscript() -> Iterator[None]:
    """Keeps the rewrite's notes (:data:`_LOGGERS`) and the constant folding's numpy
    warnings (:data:`_FOLDING_WARNINGS`) out of the user's output."""
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", category=RuntimeWarning, module=_FOLDING_WARNINGS
            )
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


# NOTE: onnxscript's optimizer removes ``x + 0``, ``x - 0``, ``x * 1`` and ``x / 1``
# (``rewriter._DEFAULT_REWRITE_RULES``, its ``_no_op`` rules). Their constants are
# pattern constants matched with ``math.isclose(value, expected, rel_tol=1e-5,
# abs_tol=1e-8)``: ``x + 1e-8`` (an optimizer's eps: RMSprop's ``sqrt(v) + eps``,
# Adagrad's 1e-10, ``x / (x.norm() + 1e-8)``) matched ``x + 0`` and was removed, so a
# zero ``v`` gave 0/0 = NaN (a compiled RMSprop or Adagrad step put NaN in every
# parameter element whose gradient was zero), and ``x * 0.999995`` matched ``x * 1``.
# While ortlab runs the optimizer or the fusions, those four rules are replaced by ones
# that remove a node only when its constant is exactly the neutral element.
#
# Five more rules compute something else on some graphs, and are left out (what they
# save is rare, or ONNX Runtime's own session optimizations do it again):
# - ``FuseSuccessiveClip`` / ``FuseSuccessiveReluClip`` (default rules): Clip(Clip(x, a,
#   b), c, d) becomes Clip(x, max(a, c), min(b, d)) and Relu(Clip(x, lo, hi)) becomes
#   Clip(x, max(lo, 0), hi) whatever the bounds: ``clamp(clamp(x, 0, 1), 2, 3)`` gave 1
#   for 2, ``relu(clamp(x, -3, -1))`` -1 for 0.
# - ``FusedMatMulTranspose`` (``ort_fusions``): Transpose(FusedMatMul(x, y, transA=a,
#   transB=b)) becomes FusedMatMul(y, x, transA=1-a, transB=1-b), where y's flag must be
#   1-b and x's 1-a: ``(x.t() @ y).t()`` ran as ``y @ x.t()``.
# - ``FusedMatMulDiv1/2`` (``ort_fusions``): Div(MatMul(x, y), c) becomes FusedMatMul with
#   ``alpha=1/c``, a float32 attribute: a float64 model lost precision to float32's
#   (3e-8 relative), and ``1/c`` overflows for ``|c| < 2.9e-39``.
#
# The optimizer reads ``rewriter._DEFAULT_REWRITE_RULES`` and the fusions
# ``ort_fusions._core.ORT_PATTERN_REWRITE_RULES`` when called (onnxscript 0.7), so the
# swap is of those module attributes, under a lock (tests/test_fusions.py pins both).
_LEFT_OUT_RULES = frozenset(
    {
        "FuseSuccessiveClip",
        "FuseSuccessiveReluClip",
        "FusedMatMulTranspose",
        "FusedMatMulDiv1",
        "FusedMatMulDiv2",
    }
)


def _exact_no_op_rules() -> tuple[Any, ...]:
    from onnxscript.rewriter import _ir_utils, pattern
    from onnxscript.rewriter.rules.common import _no_op

    def rules(op_type: str, neutral: int, commute: bool) -> list[Any]:
        def target(op: Any, x: Any, c: Any) -> Any:
            return getattr(op, op_type)(x, c)

        def exactly(context: Any, x: Any, c: Any, **_: Any) -> bool:
            value = _ir_utils.get_singleton_value(c, rank=0)
            return value is not None and value == neutral

        def identity(op: Any, x: Any, **_: Any) -> Any:
            return op.Identity(x)

        rule = pattern.RewriteRule(target, identity, exactly, name=f"{op_type}By{neutral}")
        return list(rule.commute()) if commute else [rule]

    return (
        *rules("Mul", 1, True),
        *rules("Add", 0, True),
        *rules("Sub", 0, False),
        *rules("Div", 1, False),
        _no_op.dropout_zero_rule,
        _no_op.dropout_inference_rule,
    )


def _kept(rules: Iterable[Any]) -> list[Any]:
    return [r for r in rules if getattr(r, "name", None) not in _LEFT_OUT_RULES]


@contextlib.contextmanager
def exact_rules() -> Iterator[None]:
    """onnxscript's optimizer and fusions with the no-op rules that remove a node only
    when its constant is exactly 0 or 1, and without the rules that compute something
    else (see the NOTE above)."""
    from onnxscript import rewriter
    from onnxscript.rewriter.ort_fusions import _core
    from onnxscript.rewriter.rules.common import _no_op

    with _RULES_LOCK:
        before = rewriter._DEFAULT_REWRITE_RULES, _core.ORT_PATTERN_REWRITE_RULES
        tolerant = set(_no_op.rules.rules)
        rewriter._DEFAULT_REWRITE_RULES = (
            *_exact_no_op_rules(),
            *_kept(r for r in before[0] if r not in tolerant),
        )
        _core.ORT_PATTERN_REWRITE_RULES = _kept(before[1])
        try:
            yield
        finally:
            rewriter._DEFAULT_REWRITE_RULES, _core.ORT_PATTERN_REWRITE_RULES = before


_RULES_LOCK = threading.RLock()
"""Held while onnxscript's rules are swapped (two threads' optimizations, nested in the
fusions' own)."""


NO_PATTERNS_NOTE = "none of the fused operators' patterns is in the model"
"""``fusion_note`` of a model rewritten where no fusion applied."""


def has_patterns(model: ir.Model) -> bool:
    """Whether the graph holds an op a fused pattern starts from (:data:`TRIGGER_OPS`)."""
    return any(node.op_type in TRIGGER_OPS for node in model.graph.all_nodes())


def wanted(model: ir.Model, option: bool | None) -> bool:
    """Whether ``model`` is to be rewritten under ``OrtBackendOptions.ort_fusions``:
    ``True`` always, ``False`` never, ``None`` where it has a pattern's first op."""
    return bool(option) or (option is None and has_patterns(model))


def failed_note(error: BaseException) -> str:
    """``fusion_note`` of a model whose rewrite raised ``error`` (it runs unfused)."""
    return f"the fusions failed ({errors.describe(error)}); runs unfused"


def join_notes(*notes: str) -> str:
    """The non-empty notes, joined with ``"; "``."""
    return "; ".join(n for n in notes if n)


def fuse(model: ir.Model) -> dict[str, int]:
    """Rewrites ``model`` in place with ONNX Runtime's fused operators; returns how many
    of each fusion applied (only those that did).

    Raises:
        Exception: whatever the rewrite raised (the model may then be half rewritten).
    """
    from onnxscript.rewriter import ort_fusions

    with quiet_onnxscript(), exact_rules():
        _, counts = ort_fusions.optimize_for_ort(model)
    explicit_batch_transposes(model)
    applied = collections.Counter({name: n for name, n in counts.items() if n})
    return dict(applied.most_common())


class FusedOutputsDiffer(Exception):
    """A fused model computed something else than the graph it was made from (the
    message: :func:`disagreement`)."""


def fallback_note(error: BaseException) -> str:
    """``SessionRecord.fusion_note`` of a fused model given up for ``error``."""
    if isinstance(error, FusedOutputsDiffer):
        why = f"the fused model's outputs differ from PyTorch's ({error})"
    else:
        why = f"ONNX Runtime could not run the fused model ({errors.describe(error)})"
    return f"{why}; the unfused model runs"


def disagreement(fused: Sequence[Any], expected: Sequence[Any]) -> str:
    """How a fused model's outputs differ from the partition's run in PyTorch on the same
    inputs ("" when they agree): floating-point tensors within :data:`CHECK_ATOL` /
    :data:`CHECK_RTOL`, everything else equal."""
    import torch

    if len(fused) != len(expected):
        return f"{len(fused)} outputs instead of {len(expected)}"
    for index, (got, want) in enumerate(zip(fused, expected)):
        if not isinstance(want, torch.Tensor):
            if got != want:
                return f"output {index} is {got!r} instead of {want!r}"
            continue
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return f"output {index} is {shape} instead of {tuple(want.shape)}"
        if not want.is_floating_point():
            if not torch.equal(got.to(want.dtype), want):
                return f"output {index} ({want.dtype}) differs"
            continue
        element = _closeness.element_errors(got, want)
        default_atol, default_rtol = _closeness.default_tolerance(want.dtype)
        atol, rtol = max(CHECK_ATOL, 10 * default_atol), max(CHECK_RTOL, 10 * default_rtol)
        beyond = element.beyond(atol * max(1.0, element.scale), rtol)
        if beyond:
            worst = float(element.error.max())
            return (
                f"output {index}: {beyond} of {want.numel()} elements beyond "
                f"{atol:g}/{rtol:g}, max abs error {worst:.3g}"
            )
    return ""


def compare_speed(
    run_fused: Callable[[], object],
    make_unfused: Callable[[], Callable[[], object]],
    fusions: dict[str, int],
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[bool, str]:
    """Times a fused model against the unfused one on the same inputs, the way every A/B
    choice is timed (``_choose.faster``); returns whether to keep the fused one (ties and
    an unfused model that cannot be made or run keep it) and why, with the medians.

    Args:
        run_fused: Runs the fused model once (it has run before).
        make_unfused: Makes the unfused model's session (only when the fused run is
            short enough to compare) and returns what runs it once.
        fusions: The fusions applied, for the note.
        clock: Seconds (a fake one in tests).
    """

    def make() -> tuple[None, Callable[[], object]]:
        return None, make_unfused()

    race = _choose.faster(run_fused, make, below=COMPARE_BELOW_SECONDS, clock=clock)
    if race.error is not None:
        return True, f"fused (the unfused model to time it against failed: {race.error})"
    if not race.timed:
        return True, (
            f"fused without timing the unfused model: a run takes "
            f"{race.first_seconds * 1e3:.1f} ms (compared under "
            f"{COMPARE_BELOW_SECONDS * 1e3:g} ms)"
        )
    medians = race.medians("fused", "unfused")
    if race.kept == "b":
        tried = records.fusions_text(fusions)
        what = f"slower fused ({tried})" if tried else "slower rewritten"
        return False, f"{what}: {medians}; the unfused model runs"
    return True, medians


def fuse_proto(
    proto: onnx.ModelProto, option: bool | None
) -> tuple[onnx.ModelProto, dict[str, int], str]:
    """A whole model rewritten as an inference partition would be with ``option``
    (``OrtBackendOptions.ort_fusions``): the model, the fusions applied, and why none
    were where they were tried. ``proto`` itself is never changed; a rewrite that raises
    returns it, with the error in the note."""
    import onnx
    import onnx_ir as ir

    if option is False:  # nothing to rewrite: not even a copy to make
        return proto, {}, ""
    # The IR shares the proto's tensors: a rewrite that renames an initializer (Llama's
    # rotary embedding does) would rename it in ``proto`` too, and ``proto`` is the
    # unfused model the caller falls back to.
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    model = ir.serde.deserialize_model(copy)
    if not wanted(model, option):
        return proto, {}, ""
    try:
        counts = fuse(model)
    except Exception as e:
        return proto, {}, failed_note(e)
    return ir.serde.serialize_model(model), counts, "" if counts else NO_PATTERNS_NOTE


def _batch_transpose_perm(rank: int, transposed: bool) -> list[int]:
    """The Transpose ``FusedMatMul`` applies to an input of ``rank`` dims with
    ``transBatch`` set (and ``trans`` as ``transposed``): the first dim moves behind the
    other batch dims, then (``transposed``) the last two swap."""
    if not transposed:
        return [*range(1, rank - 1), 0, rank - 1]
    return [*range(1, rank), 0]


def explicit_batch_transposes(model: ir.Model) -> int:
    """Rewrites each ``FusedMatMul`` whose ``transBatchA``/``transBatchB`` ONNX Runtime
    cannot run (inputs of different ranks, or fewer than 3 dims) as an explicit
    ``Transpose`` of that input feeding a ``FusedMatMul`` without the flags (ONNX
    Runtime's own optimizer may fuse a valid part of it again). Returns how many.

    Raises:
        ValueError: such an input's rank is unknown.
    """
    import onnx_ir as ir

    repaired = 0
    for node in list(model.graph.all_nodes()):
        if node.op_type != "FusedMatMul" or node.domain != records.FUSED_OPERATOR_DOMAIN:
            continue
        flags = [node.attributes.get_int(f"transBatch{side}", 0) for side in "AB"]
        if not any(flags):
            continue
        ranks = [
            len(v.shape) if v is not None and v.shape is not None else None
            for v in node.inputs[:2]
        ]
        if ranks[0] is not None and ranks[0] == ranks[1] and ranks[0] >= 3:
            continue
        graph = node.graph
        assert graph is not None
        for position, side in enumerate("AB"):
            if not flags[position]:
                continue
            rank = ranks[position]
            if rank is None or rank < 2:
                raise ValueError(
                    f"{node.name}: transBatch{side} on an input of unknown rank or rank < 2"
                )
            transposed = bool(node.attributes.get_int(f"trans{side}", 0))
            transpose = ir.node(
                "Transpose",
                [node.inputs[position]],
                attributes={"perm": _batch_transpose_perm(rank, transposed)},
                metadata_props=dict(node.metadata_props),
            )
            graph.insert_before(node, transpose)
            node.replace_input_with(position, transpose.outputs[0])
            node.attributes[f"transBatch{side}"] = ir.AttrInt64(f"transBatch{side}", 0)
            node.attributes[f"trans{side}"] = ir.AttrInt64(f"trans{side}", 0)
        repaired += 1
    return repaired
