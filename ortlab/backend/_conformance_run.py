"""The conformance generator: PyTorch's OpInfo samples, lowered to ATen as ortlab lowers
them, every node of the lowered graphs checked through ortlab's translation in ONNX
Runtime (:mod:`ortlab.backend._conformance_node`), aggregated into the table that the
support rules read (:mod:`ortlab.backend._conformance`).

# NOTE: what one run does:
#
#   for each OpInfo, each dtype of DTYPES it supports on CPU (seeded per op and dtype):
#     N of its samples, spread over them (the first, the last, evenly between), each
#     as given and as SampleInput.noncontiguous():
#       inference  make_fx(functionalized(call)) under no_grad, as ortlab's make_fx
#                  lowering does
#       joint      (float32, differentiable) AOTAutograd's forward and backward graphs
#                  (aot_function, min-cut partitioner, inside attention_as_math, as
#                  ortlab's training path), the backward run on random cotangents: every
#                  node of the backward graph is checked, so gradients are verified
#       each with the exporter's ONNX-friendly table, which keeps every registered op
#       whole; where that graph holds an op ortlab's table decomposes anyway
#       (nll_loss_forward, training batch norm), also with ortlab's table. Elsewhere
#       the two tables give the same graph.
#     every graph runs in an FX interpreter on the sample; each ATen node call is checked
#     as it happens (later in-place ops cannot change its inputs), once per sample
#   calls with an empty tensor input are filed apart (``meta["empty_inputs"]``): the key
#   cannot tell them from others, and ONNX Runtime's edge cases there would reject the
#   op for every input (addmm with an inner dim of 0 rejected every nn.Linear)
#   findings per (op, dtype, form): verified when every checked call agreed; else the
#   first failure's reason (a whole-node failure before an output's), the union of the
#   disagreeing outputs and the sample it was seen on (``Witness``)
#
# Sampling is deterministic per (op, dtype): torch's, Python's and numpy's global RNGs
# are seeded before its samples are drawn, and cotangents come from a generator of
# their own. A run restricted to some ops or fewer samples checks a subset of the calls
# a full run checks (the drift test relies on it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import random
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy
import torch
import torch.fx

from ortlab import errors
from ortlab.backend import (
    _conformance,
    _conformance_docs,
    _conformance_node,
    _support,
    _torch_private,
)

_DTYPES_BY_NAME = {name: dtype for dtype, name in _conformance.DTYPES.items()}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a generation run samples."""

    ops: tuple[str, ...] | None = None
    """OpInfo names (``"add"``, ``"nn.functional.nll_loss"``; a variant as
    ``"name.variant"``, a bare name takes every variant); ``None``: every OpInfo."""
    samples: int = 3
    """Samples per OpInfo and dtype, spread over ``op.sample_inputs`` (:func:`spread`)."""
    dtypes: tuple[str, ...] = tuple(_conformance.DTYPES.values())
    """Dtypes to sample (keys of ``_conformance.DTYPES``)."""
    backward_dtypes: tuple[str, ...] = ("float32",)
    """Dtypes whose differentiable samples are lowered through AOTAutograd too."""
    noncontiguous: bool = True
    """Also run each sample's non-contiguous version."""
    op_seconds: float = 90.0
    """An OpInfo still sampling after this long is cut short (noted in the table)."""
    empty_apart: bool = True
    """File the calls with an empty tensor input apart (``meta["empty_inputs"]``), not
    under their key: the key cannot tell an empty input from any other, and ONNX
    Runtime's edge cases there (Gemm ignores ``beta`` when the inner dim is 0; the
    variance of nothing is 0, not NaN) would reject the op for every input."""


@dataclasses.dataclass
class _KeyState:
    """What the checks of one (target, dtype, form) found so far."""

    samples: int = 0
    failures: int = 0
    wrong: bool = False
    """Some failure was a wrong value or shape (not an error)."""
    first: tuple[str, _conformance.Witness] | None = None
    whole: tuple[str, _conformance.Witness] | None = None
    outputs: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Aggregate:
    """Outcomes per (target, dtype, form), folded into findings."""

    keys: dict[tuple[str, str, str], _KeyState] = dataclasses.field(default_factory=dict)

    def add(
        self,
        target: str,
        dtype: str,
        form: str,
        outcome: _conformance_node.Outcome,
        witness: _conformance.Witness,
    ) -> None:
        """Counts one checked call of ``target`` keyed ``(dtype, form)``.

        Args:
            outcome: What the check found.
            witness: The sample the call came from (kept for the first failures).
        """
        state = self.keys.setdefault((target, dtype, form), _KeyState())
        state.samples += 1
        if outcome.ok:
            return
        state.failures += 1
        state.wrong = state.wrong or not outcome.error
        if state.first is None:
            state.first = (outcome.reason, witness)
        if outcome.outputs:
            state.outputs.update(outcome.outputs)
        elif state.whole is None:
            state.whole = (outcome.reason, witness)

    def finding(self, target: str, dtype: str, form: str) -> _conformance.Finding:
        """Verified when every call agreed; else failing with the first whole-node
        failure (the node as a whole is rejected), or when there was none the first
        failure's reason and every output that disagreed in some call."""
        state = self.keys[(target, dtype, form)]
        if state.first is None:
            return _conformance.Finding("verified", samples=state.samples)
        reason, witness = state.whole or state.first
        outputs = () if state.whole else tuple(sorted(state.outputs))
        return _conformance.Finding(
            "fails",
            reason,
            outputs,
            state.samples,
            witness,
            failures=state.failures,
            errors_only=not state.wrong,
        )

    def rows(self) -> dict[str, dict[str, _conformance.Finding]]:
        """Every finding, as :class:`_conformance.Table` holds them."""
        rows: dict[str, dict[str, _conformance.Finding]] = {}
        for target, dtype, form in sorted(self.keys):
            rows.setdefault(target, {})[f"{dtype}/{form}"] = self.finding(target, dtype, form)
        return rows


@dataclasses.dataclass
class _Context:
    """What the checks of one sample share."""

    checker: _conformance_node.Checker
    aggregate: Aggregate
    empty: Aggregate | None
    """Where calls with an empty tensor input go (``None``: with the others)."""
    witness: _conformance.Witness
    seen: set[Any] = dataclasses.field(default_factory=set)
    checks: int = 0


def _value_digest(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1).clone(memory_format=torch.contiguous_format)
        return (
            tuple(value.shape),
            str(value.dtype),
            zlib.crc32(flat.view(torch.uint8).numpy().tobytes()),
        )
    if isinstance(value, (list, tuple)):
        return tuple(_value_digest(v) for v in value)
    return None


def _check(call: _conformance_node.NodeCall, graph: str, table: str, ctx: _Context) -> None:
    if _conformance_node.skip_reason(call, ctx.checker.registry):
        return
    digest = (
        _conformance_node.cache_key(call),
        _value_digest(call.args),
        _value_digest(tuple(call.kwargs.values())),
    )
    if digest in ctx.seen:  # the same call in another graph of this sample
        return
    ctx.seen.add(digest)
    one = _conformance_node.one_node_graph(call)
    keyed = _conformance.node_key(one.node)
    if keyed is None:  # a dtype conformance does not sample (float64, int32...)
        return
    if _conformance_node.foreign_dtype(call, _DTYPES_BY_NAME[keyed[0]]) is not None:
        return
    outcome = ctx.checker.check(call, one)
    ctx.checks += 1
    witness = dataclasses.replace(ctx.witness, graph=graph, decompositions=table)
    into = ctx.aggregate
    if ctx.empty is not None and any(t.numel() == 0 for t in one.inputs):
        into = ctx.empty
    into.add(_support.target_text(call.target), *keyed, outcome, witness)


class _Checking(torch.fx.Interpreter):
    """Runs a graph, checking each ATen node call as it happens."""

    def __init__(self, gm: torch.fx.GraphModule, graph: str, table: str, ctx: _Context):
        super().__init__(gm)
        self._labels = (graph, table)
        self._ctx = ctx

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function" and _torch_private.is_op_overload(n.target):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            call = _conformance_node.NodeCall(n.target, tuple(args), dict(kwargs), result)
            _check(call, *self._labels, self._ctx)
        return result


def _tables() -> tuple[dict[Any, Any], dict[Any, Any], frozenset[Any]]:
    """The exporter's table, ortlab's, and the ops only ortlab's decomposes."""
    exporter = _torch_private.onnx_friendly_decompositions()
    ortlab = _torch_private.lowering_decompositions()
    return exporter, ortlab, frozenset(set(ortlab) - set(exporter))


def _uses(gm: torch.fx.GraphModule, ops: frozenset[Any]) -> bool:
    return any(n.op == "call_function" and n.target in ops for n in gm.graph.nodes)


def _flat_call(op: Any, sample: Any) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """The sample's call as a function of its tensors, and the tensors."""
    structure = (sample.input, sample.args, sample.kwargs)
    tensors = [v for v in _torch_private.tree_leaves(structure) if isinstance(v, torch.Tensor)]

    def call(*inputs: torch.Tensor) -> Any:
        given = iter(inputs)
        value, args, kwargs = _torch_private.tree_map(
            lambda v: next(given) if isinstance(v, torch.Tensor) else v, structure
        )
        return op(value, *args, **kwargs)

    return call, tensors


def _lower_inference(
    call: Callable[..., Any], tensors: list[torch.Tensor], ctx: _Context
) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    exporter, ortlab, extra = _tables()
    inputs = [t.detach() for t in tensors]
    with torch.no_grad():
        gm = make_fx(_torch_private.functionalized(call), decomposition_table=exporter)(
            *inputs
        )
        both = _uses(gm, extra)
        _Checking(gm, "inference", "exporter" if both else "ortlab", ctx).run(*inputs)
        if both:
            gm = make_fx(_torch_private.functionalized(call), decomposition_table=ortlab)(
                *inputs
            )
            _Checking(gm, "inference", "ortlab", ctx).run(*inputs)


def _cotangent(value: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
    return noise.to(value.dtype)


def _lower_joint(
    call: Callable[..., Any], tensors: list[torch.Tensor], seed: int, ctx: _Context
) -> None:
    exporter, ortlab, extra = _tables()
    for table, decompositions in (("exporter", exporter), ("ortlab", ortlab)):
        # The forward graph decides: does it hold an op that ortlab's table decomposes?
        # If not, the exporter's graphs are ortlab's too and one trace is enough.
        both: list[bool] = []

        def compiler(graph: str, table: str = table, both: list[bool] = both) -> Any:
            def compile(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
                if not both:
                    both.append(table == "exporter" and _uses(gm, extra))
                label = "exporter" if both[0] else "ortlab"
                checking = _Checking(gm, graph, label, ctx)
                return _torch_private.make_boxed(checking.run)

            return compile

        inputs = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
        with _torch_private.attention_as_math():
            compiled = _torch_private.aot_function(
                call,
                fw_compiler=compiler("forward"),
                bw_compiler=compiler("backward"),
                decompositions=decompositions,
            )
            outputs = [
                v
                for v in _torch_private.tree_leaves(compiled(*inputs))
                if isinstance(v, torch.Tensor) and v.requires_grad
            ]
            if outputs:
                generator = torch.Generator().manual_seed(seed)
                cotangents = [_cotangent(v, generator) for v in outputs]
                torch.autograd.backward(outputs, cotangents)
        if not (both and both[0]):
            return


def op_key(op: Any) -> str:
    """An OpInfo's name as settings and witnesses write it: ``"name"`` or
    ``"name.variant"``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else str(op.name)


def select_ops(names: Iterable[str] | None) -> list[Any]:
    """The OpInfos named (each name or ``name.variant``), in database order.

    Raises:
        UnsupportedOptionError: a name matches no OpInfo.
    """
    database = _torch_private.op_db()
    if names is None:
        return list(database)
    wanted = set(names)
    chosen = [op for op in database if op.name in wanted or op_key(op) in wanted]
    found = {op.name for op in chosen} | {op_key(op) for op in chosen}
    missing = sorted(wanted - found)
    if missing:
        raise errors.UnsupportedOptionError(
            f"no OpInfo named {', '.join(missing)} (names as in PyTorch's op_db, e.g. "
            "'add', 'nn.functional.nll_loss', 'as_strided')"
        )
    return chosen


def _seed(op: Any, dtype: str) -> int:
    return zlib.crc32(f"{op_key(op)}/{dtype}".encode())


def spread(count: int, wanted: int) -> list[int]:
    """``wanted`` indices spread evenly over ``range(count)``, the first and the last
    among them (an OpInfo's first samples tend to vary one argument of one shape)."""
    if count <= wanted:
        return list(range(count))
    if wanted == 1:
        return [0]
    return sorted({round(i * (count - 1) / (wanted - 1)) for i in range(wanted)})


def _samples(op: Any, dtype: torch.dtype, grad: bool, count: int) -> Iterator[tuple[int, Any]]:
    """``(index, sample)`` for ``count`` of the OpInfo's samples, spread over all of
    them (drawn in order, so that index 0 is the same sample whatever ``count``)."""
    produced = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    for index in spread(len(produced), count):
        yield index, produced[index]


@dataclasses.dataclass
class OpReport:
    """What sampling one OpInfo did."""

    op: str
    samples: int = 0
    checks: int = 0
    seconds: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)
    """Why parts were not run: samples that failed to lower, a time cut."""


def _note(report: OpReport, text: str) -> None:
    if text not in report.notes:
        report.notes.append(text)


@dataclasses.dataclass
class _Run:
    """One generation run's state: what it samples, its checker, what it found."""

    settings: Settings
    checker: _conformance_node.Checker
    aggregate: Aggregate = dataclasses.field(default_factory=Aggregate)
    empty: Aggregate = dataclasses.field(default_factory=Aggregate)
    """Calls with an empty tensor input (``Settings.empty_apart``)."""


def _run_sample(
    run: _Run, op: Any, sample: Any, witness: _conformance.Witness, report: OpReport
) -> None:
    """Checks one sample, as given and (settings permitting) non-contiguous."""
    versions = [(False, sample)]
    if run.settings.noncontiguous:
        versions.append((True, sample.noncontiguous()))
    grad = witness.dtype in run.settings.backward_dtypes and op.supports_autograd
    for noncontiguous, version in versions:
        report.samples += 1
        where = dataclasses.replace(witness, noncontiguous=noncontiguous)
        empty = run.empty if run.settings.empty_apart else None
        ctx = _Context(run.checker, run.aggregate, empty, where)
        call, tensors = _flat_call(op, version)
        try:
            _lower_inference(call, tensors, ctx)
        except Exception as e:
            _note(report, f"{witness.dtype} inference lowering: {errors.describe(e)}"[:200])
        if grad and any(t.requires_grad for t in tensors):
            try:
                _lower_joint(call, tensors, _seed(op, witness.dtype) + witness.sample, ctx)
            except Exception as e:
                _note(report, f"{witness.dtype} AOTAutograd: {errors.describe(e)}"[:200])
        report.checks += ctx.checks


def sample_op(op: Any, run: _Run) -> OpReport:
    """Runs one OpInfo's samples (see the module NOTE) into ``run.aggregate``."""
    settings = run.settings
    report = OpReport(op_key(op))
    start = time.perf_counter()
    supported = op.supported_dtypes("cpu")
    backward = op.supported_backward_dtypes("cpu") if op.supports_autograd else set()
    for name in settings.dtypes:
        dtype = _DTYPES_BY_NAME[name]
        if dtype not in supported:
            continue
        grad = name in settings.backward_dtypes and dtype in backward
        seed = _seed(op, name)
        random.seed(seed)  # sample functions draw from all three
        numpy.random.seed(seed)
        torch.manual_seed(seed)
        try:
            for index, sample in _samples(op, dtype, grad, settings.samples):
                if time.perf_counter() - start > settings.op_seconds:
                    _note(report, f"cut short after {settings.op_seconds:g} s (in {name})")
                    break
                witness = _conformance.Witness(
                    report.op, name, index, False, "inference", "ortlab"
                )
                _run_sample(run, op, sample, witness, report)
        except Exception as e:
            _note(report, f"{name} samples: {errors.describe(e)}"[:200])
        if any(note.startswith("cut short") for note in report.notes):
            break
    report.seconds = time.perf_counter() - start
    return report


def _empty_inputs(empty: Aggregate) -> dict[str, Any]:
    """Calls with an empty tensor input: how many, and the failing keys as table rows."""
    failing = {
        target: {key: f.to_dict() for key, f in keyed.items() if f.status == "fails"}
        for target, keyed in empty.rows().items()
    }
    return {
        "checked": sum(state.samples for state in empty.keys.values()),
        "failing": {target: keyed for target, keyed in failing.items() if keyed},
    }


def versions() -> dict[str, str]:
    """The versions of the stack a table was made with."""
    import onnx
    import onnx_ir
    import onnxruntime
    import onnxscript

    return {
        "torch": torch.__version__,
        "onnxscript": onnxscript.__version__,
        "onnx_ir": onnx_ir.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
    }


def _counts(
    rows: dict[str, dict[str, _conformance.Finding]], registered: tuple[str, ...]
) -> dict[str, Any]:
    per_dtype: dict[str, dict[str, int]] = {}
    for keyed in rows.values():
        for key, finding in keyed.items():
            counts = per_dtype.setdefault(key.split("/")[0], {"verified": 0, "fails": 0})
            counts[finding.status] += 1
    by_dtype: dict[str, dict[str, set[str]]] = {}
    for target, keyed in rows.items():
        for key, finding in keyed.items():
            sets = by_dtype.setdefault(key.split("/")[0], {"reached": set(), "failing": set()})
            sets["reached"].add(target)
            if finding.status == "fails":
                sets["failing"].add(target)
    claimed = set(registered)
    reached = claimed & set(rows)
    verified = {t for t in reached if any(f.status == "verified" for f in rows[t].values())}
    return {
        "keys": {
            "verified": sum(c["verified"] for c in per_dtype.values()),
            "fails": sum(c["fails"] for c in per_dtype.values()),
        },
        "keys_by_dtype": dict(sorted(per_dtype.items())),
        "ops_by_dtype": {
            dtype: {
                "reached": len(sets["reached"]),
                "verified": len(sets["reached"] - sets["failing"]),
            }
            for dtype, sets in sorted(by_dtype.items())
        },
        "registry": {
            "claimed": len(claimed),
            "reached": len(reached),
            "verified_somewhere": len(verified),
            "not_reached": sorted(claimed - reached),
        },
    }


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No warnings, and onnx_ir's notes (an empty attribute's type) only when errors:
    thousands of translations would print them by the hundred."""
    logger = logging.getLogger("onnx_ir")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def generate(
    settings: Settings, progress: Callable[[str], None] | None = None
) -> _conformance.Table:
    """Runs the conformance suite; returns the table with its ``meta`` (settings,
    versions, provider, date, counts, the OpInfos cut short or partly lowered)."""
    start = time.perf_counter()
    unknown = sorted(set(settings.dtypes) - set(_DTYPES_BY_NAME))
    if unknown:
        raise errors.UnsupportedOptionError(
            f"conformance does not sample dtype(s) {', '.join(unknown)}; it samples "
            f"{', '.join(_DTYPES_BY_NAME)}"
        )
    ops = select_ops(settings.ops)
    registry = _torch_private.onnx_registry()
    checker = _conformance_node.Checker(registry)
    run = _Run(settings, checker)
    reports = []
    with _quiet():
        for number, op in enumerate(ops, 1):
            report = sample_op(op, run)
            reports.append(report)
            if progress is not None:
                notes = f"; {len(report.notes)} note(s)" if report.notes else ""
                progress(
                    f"[{number}/{len(ops)}] {report.op}: {report.samples} samples, "
                    f"{report.checks} node checks, {report.seconds:.1f} s{notes}"
                )
    checker.clear()
    rows = run.aggregate.rows()
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "provider": checker.provider,
        "opset": _torch_private.default_opset(),
        "settings": {
            "samples": settings.samples,
            "dtypes": list(settings.dtypes),
            "backward_dtypes": list(settings.backward_dtypes),
            "noncontiguous": settings.noncontiguous,
            "op_seconds": settings.op_seconds,
            "empty_apart": settings.empty_apart,
            "ops": None if settings.ops is None else list(settings.ops),
        },
        "seconds": round(time.perf_counter() - start, 1),
        "opinfos": {
            "selected": len(ops),
            "sampled": sum(1 for r in reports if r.samples),
            "samples": sum(r.samples for r in reports),
            "node_checks": sum(r.checks for r in reports),
            "exports": checker.exports,
        },
        "notes": {r.op: r.notes for r in reports if r.notes},
        "empty_inputs": _empty_inputs(run.empty),
        **_counts(rows, _torch_private.registered_targets(registry)),
    }
    return _conformance.Table(rows, meta)


def write(table: _conformance.Table, path: str, docs: str | None = None) -> None:
    """Writes the table as JSON to ``path`` and, with ``docs``, its markdown there."""
    for target in (path, docs):
        if target:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(table.to_json())
    if docs:
        with open(docs, "w", encoding="utf-8") as f:
            f.write(_conformance_docs.markdown(table))
