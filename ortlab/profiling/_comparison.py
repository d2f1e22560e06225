"""``ortlab.compare``: two compiles side by side, and what changed between them.

# NOTE: what is compared, from the records (always) and from a call (when arguments are
# given):
#
#   options      the ``OrtBackendOptions`` fields that differ
#   graphs       per graph: nodes, nodes in ONNX Runtime, partitions
#   placement    FX nodes that run in ONNX Runtime in one and in PyTorch in the other
#                (with the verdict of the eager side)
#   sessions     per partition session: ONNX nodes, fused operators, threads, and the
#                inputs frozen as initializers in one but passed as inputs in the other
#                (named as the parameters they are: ``GraphRecord.source_of``)
#   numerics     b's outputs against a's, by the one comparator (``numerics._compare``)
#   time         the two calls timed together (interleaved, by the bench engine), and
#                from two profiles: per part, per module, per op type and per FX node,
#                a and b side by side with b - a
#
# FX nodes are matched across the two by (graph, module path, op, occurrence) rather
# than by name, so that an edit of the model that renames nodes still pairs them; on the
# same model the two keys agree.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

import ortlab.backend
from ortlab import _harness, _html, errors
from ortlab.bench import _engine
from ortlab.numerics import _compare
from ortlab.numerics import _records as _numerics_records
from ortlab.profiling import _attribute, _profile, _records

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend

COMPILE_KEYS = ("dynamic", "fullgraph", "specialize_floats")
"""Keys of ``a=``/``b=`` that go to ``ortlab.compile`` itself, not to the options."""


@dataclasses.dataclass
class Change:
    """One thing that differs between a and b (``a``/``b`` are display values)."""

    what: str
    key: str
    a: Any
    b: Any
    detail: str = ""


@dataclasses.dataclass
class TimeChange:
    """One row of time per call, a beside b."""

    key: str
    a_seconds: float
    b_seconds: float
    label: str = ""

    @property
    def delta_seconds(self) -> float:
        """``b - a`` (negative: b is faster)."""
        return self.b_seconds - self.a_seconds


@dataclasses.dataclass
class Comparison:
    """Two compiles side by side (``ortlab.compare``)."""

    labels: tuple[str, str]
    changes: list[Change] = dataclasses.field(default_factory=list)
    """Options, graphs, placement, sessions and frozen inputs that differ."""
    outputs: list[_numerics_records.TensorDiff] = dataclasses.field(default_factory=list)
    """b's outputs against a's (empty without a call)."""
    call: TimeChange | None = None
    """The two calls, timed together (medians)."""
    parts: list[TimeChange] = dataclasses.field(default_factory=list)
    modules: list[TimeChange] = dataclasses.field(default_factory=list)
    op_types: list[TimeChange] = dataclasses.field(default_factory=list)
    nodes: list[TimeChange] = dataclasses.field(default_factory=list)
    """FX nodes, largest change first."""
    profiles: tuple[_records.Profile | None, _records.Profile | None] = (None, None)
    notes: list[str] = dataclasses.field(default_factory=list)
    backends: tuple[Any, Any] = dataclasses.field(default=(None, None), repr=False)

    def of(self, what: str) -> list[Change]:
        """The changes of one kind (``"option"``, ``"graph"``, ``"placement"``,
        ``"session"``, ``"frozen"``)."""
        return [c for c in self.changes if c.what == what]

    @property
    def frozen_in_b(self) -> list[Change]:
        """Inputs a passes to ONNX Runtime that b has as initializers."""
        return [c for c in self.of("frozen") if c.b == "initializer"]

    @property
    def max_abs_diff(self) -> float | None:
        return _compare.max_abs_error(self.outputs) if self.outputs else None

    @property
    def explained_seconds(self) -> float:
        """How much of the profiles' call difference their parts explain (the FX nodes'
        total is one of the parts: ``nodes`` itemizes it)."""
        return sum(p.delta_seconds for p in self.parts if p.key != "unattributed")

    def text(self, top: int = 10) -> str:
        a, b = self.labels
        out = [f"Comparison {a} vs {b}"]
        if self.call is not None:
            c = self.call
            ratio = c.a_seconds / c.b_seconds if c.b_seconds else float("nan")
            out.append(
                f"call (timed together): {a} {_ms(c.a_seconds)} ms, {b} {_ms(c.b_seconds)} "
                f"ms ({b} is {ratio:.2f}x {'faster' if ratio >= 1 else 'as fast'})"
            )
        if self.outputs:
            out.append(f"outputs: max abs diff {b} vs {a} {self.max_abs_diff:.3g}")
        if self.changes:
            out.append(
                _html.text_table(
                    ("what", "key", a, b, "detail"),
                    [(c.what, c.key, c.a, c.b, c.detail) for c in self.changes[: top * 4]],
                )
            )
        for title, rows in (
            ("parts", self.parts),
            ("modules", self.modules[:top]),
            ("FX nodes", self.nodes[:top]),
            ("op types", self.op_types[:top]),
        ):
            if rows:
                out.append(f"\n{title} (ms per call):")
                out.append(
                    _html.text_table(
                        ("", a, b, f"{b} - {a}"),
                        [
                            (
                                r.key[:90],
                                _ms(r.a_seconds),
                                _ms(r.b_seconds),
                                _ms(r.delta_seconds),
                            )
                            for r in rows
                        ],
                    )
                )
        out.extend(f"note: {n}" for n in self.notes)
        return "\n".join(out)

    def __repr__(self) -> str:
        a, b = self.labels
        return f"Comparison({a} vs {b}: {len(self.changes)} changes)"

    def _repr_html_(self) -> str:
        from ortlab.views import _compare

        return _compare.comparison_html(self)


def _ms(seconds: float) -> str:
    return _html.number(seconds * 1e3)


# -- records ------------------------------------------------------------------------------


def _options(a: OrtBackend, b: OrtBackend) -> list[Change]:
    out = []
    for field in dataclasses.fields(a.options):
        va, vb = getattr(a.options, field.name), getattr(b.options, field.name)
        if field.name == "keep_last_run":
            continue
        try:
            same = bool(va == vb)
        except Exception:
            same = va is vb
        if not same:
            out.append(Change("option", field.name, va, vb))
    return out


def _graphs(a: OrtBackend, b: OrtBackend) -> list[Change]:
    out = []
    for i in range(max(len(a.graphs), len(b.graphs))):
        ga = a.graphs[i] if i < len(a.graphs) else None
        gb = b.graphs[i] if i < len(b.graphs) else None

        def describe(g: Any) -> str:
            if g is None:
                return "(none)"
            return (
                f"{g.node_count} nodes, {len(g.ort_node_names)} in ORT, "
                f"{len(g.partitions)} partitions"
            )

        if describe(ga) != describe(gb):
            out.append(Change("graph", f"graph {i}", describe(ga), describe(gb)))
    return out


def _placement(a: OrtBackend, b: OrtBackend) -> list[Change]:
    out = []
    for ga, gb in zip(a.graphs, b.graphs):
        in_a, in_b = set(ga.ort_node_names), set(gb.ort_node_names)
        names_b = {v.node for v in gb.verdicts}
        for v in ga.verdicts:
            if v.node not in names_b or (v.node in in_a) == (v.node in in_b):
                continue
            eager = gb.verdict(v.node) if v.node in in_a else v
            out.append(
                Change(
                    "placement",
                    f"graph {ga.index} {v.node} ({v.target})",
                    "ORT" if v.node in in_a else "eager",
                    "ORT" if v.node in in_b else "eager",
                    eager.reason if eager is not None else "",
                )
            )
    return out


def _sessions(backend: OrtBackend) -> dict[tuple[int, str], Any]:
    out = {}
    for p in backend.partitions:
        active = [s for s in p.sessions if s.active] or p.sessions
        if active:
            out[(p.graph_index, p.name)] = (p, active[-1])
    return out


def _session_changes(a: OrtBackend, b: OrtBackend) -> list[Change]:
    out: list[Change] = []
    sa, sb = _sessions(a), _sessions(b)
    for key in sorted(set(sa) | set(sb)):
        pa, ra = sa.get(key, (None, None))
        _, rb = sb.get(key, (None, None))
        where = f"graph {key[0]} {key[1]}"
        if ra is None or rb is None:
            out.append(
                Change("session", where, "yes" if ra else "(none)", "yes" if rb else "(none)")
            )
            continue
        for name, va, vb in (
            ("ONNX nodes", ra.onnx_node_count, rb.onnx_node_count),
            ("fused operators", _fusions(ra), _fusions(rb)),
            ("threads", ra.threads, rb.threads),
            ("providers", ", ".join(ra.providers), ", ".join(rb.providers)),
            ("frozen inputs", len(ra.frozen_inputs), len(rb.frozen_inputs)),
        ):
            if va != vb:
                out.append(Change("session", f"{where}: {name}", va, vb))
        graph_a, graph_b = a.graphs[key[0]], b.graphs[key[0]]
        frozen_a, frozen_b = set(ra.frozen_inputs), set(rb.frozen_inputs)
        for name in pa.input_names:
            if (name in frozen_a) == (name in frozen_b):
                continue
            graph = graph_b if name in frozen_b else graph_a
            source = graph.source_of(name)
            local = _attribute.root_local(graph.graph_module.graph)
            if local and source.startswith(local + "."):
                source = source[len(local) + 1 :]  # the model's own name for it
            out.append(
                Change(
                    "frozen",
                    f"{where} {name}",
                    "initializer" if name in frozen_a else "input",
                    "initializer" if name in frozen_b else "input",
                    source if source != name else "",
                )
            )
    return out


def _fusions(session: Any) -> str:
    return ", ".join(f"{k} ×{v}" for k, v in sorted(session.fusions.items())) or "none"


# -- time ---------------------------------------------------------------------------------


def _node_key(n: _records.NodeTime, seen: collections.Counter[Any]) -> tuple[Any, ...]:
    base = (n.graph_index, n.module, n.target)
    seen[base] += 1
    return (*base, seen[base])


def _times(pa: _records.Profile, pb: _records.Profile) -> dict[str, list[TimeChange]]:
    def paired(
        rows_a: Mapping[Any, tuple[str, float]], rows_b: Mapping[Any, tuple[str, float]]
    ) -> list[TimeChange]:
        keys = list(dict.fromkeys([*rows_a, *rows_b]))
        out = []
        for k in keys:
            la, va = rows_a.get(k, ("", 0.0))
            lb, vb = rows_b.get(k, ("", 0.0))
            label = la if la == lb or not lb else (lb if not la else f"{la} / {lb}")
            out.append(TimeChange(label, va, vb))
        return sorted(out, key=lambda r: -abs(r.delta_seconds))

    def nodes(p: _records.Profile) -> dict[Any, tuple[str, float]]:
        seen: collections.Counter[Any] = collections.Counter()
        return {
            _node_key(n, seen): (f"{n.node} ({n.target}) {n.module}".strip(), n.seconds)
            for n in p.nodes
        }

    def groups(rows: list[_records.GroupTime]) -> dict[Any, tuple[str, float]]:
        return {g.key: (g.key or "(model)", g.seconds) for g in rows}

    parts = [TimeChange("FX nodes", pa.node_seconds, pb.node_seconds)]
    for kind, label in _records.OVERHEAD_LABELS.items():
        va = pa.unattributed_seconds if kind == "unattributed" else pa.overhead(kind)  # type: ignore[arg-type]
        vb = pb.unattributed_seconds if kind == "unattributed" else pb.overhead(kind)  # type: ignore[arg-type]
        if va or vb:
            parts.append(TimeChange(kind, va, vb, label))
    return {
        "parts": parts,
        "modules": paired(groups(pa.by_module()), groups(pb.by_module())),
        "op_types": paired(groups(pa.by_op_type()), groups(pb.by_op_type())),
        "nodes": paired(nodes(pa), nodes(pb)),
    }


def _time_calls(
    call_a: Callable[[], Any], call_b: Callable[[], Any], runs: int, clock: Callable[[], float]
) -> TimeChange:
    timed = _engine.measure(
        {"a": call_a, "b": call_b}, _engine.Timing(warmup=2, iters=runs), clock=clock
    )
    for m in timed.values():
        if m.error is not None:
            raise errors.OrtlabError(f"compare: the {m.name} call failed: {m.error}")
    return TimeChange("call", timed["a"].median_ms * 1e-3, timed["b"].median_ms * 1e-3)


# -- entry point --------------------------------------------------------------------------


def _compile(
    model: Any, settings: Mapping[str, Any], name: str, kwargs: Mapping[str, Any]
) -> Any:
    """``model`` compiled with ``settings`` (a fresh entry: the call's keyword arguments
    bound, so that the compiled callable takes the positional ones only)."""
    settings = dict(settings)
    compile_args = {k: settings.pop(k) for k in COMPILE_KEYS if k in settings}
    target = _harness.unwrap_compiled(model)
    entry = _harness.fresh_entry(target, name=f"ortlab_compare_{name}", kwargs=kwargs)
    return ortlab.backend.compile(entry, **compile_args, **settings)


def _are_names(labels: Any) -> bool:
    return (
        isinstance(labels, (tuple, list))
        and len(labels) == 2
        and all(isinstance(x, str) for x in labels)
    )


def compare(
    *objects: Any,
    a: Mapping[str, Any] | None = None,
    b: Mapping[str, Any] | None = None,
    labels: tuple[str, str] | None = None,
    runs: int = 10,
    profile: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **kwargs: Any,
) -> Comparison:
    """Two compiles side by side: what changed, and what it did to the time and numbers.

    Forms::

        ortlab.compare(model, x, a=dict(), b=dict(freeze_parameters=True))  # one model,
                                                    # two option sets, compiled here
        ortlab.compare(compiled_a, compiled_b, x)   # two compiled callables, called on x
        ortlab.compare(compiled_a, compiled_b)      # records only (both have run)
        ortlab.compare(profile_a, profile_b)        # two profiles (and their records)

    Args:
        *objects: See the forms.
        a: Options of the first compile (``ortlab.compile``'s keywords: backend options,
            and ``dynamic``, ``fullgraph``, ``specialize_floats``).
        b: Options of the second.
        labels: Names of the two (default ``"a"``, ``"b"``, or the differing option). A
            value that is not two strings is the call's ``labels=`` keyword argument
            (transformers' training input).
        runs: Timed runs of each call and part.
        profile: With arguments, profile both calls (``ortlab.profile``) for per-module
            and per-node time.
        atol: Absolute tolerance of the outputs' comparison (default: the dtype's).
        rtol: Relative tolerance.
        clock: The clock of the profiles.
        **kwargs: Keyword arguments of the call.

    Raises:
        UnsupportedOptionError: the objects are not one of the forms.
    """
    if labels is not None and not _are_names(labels):
        # A model input named ``labels`` (transformers' training input), not our names.
        kwargs["labels"], labels = labels, None
    one_model = a is not None or b is not None
    called = bool(kwargs) or len(objects) > (1 if one_model else 2)
    if one_model:
        if not objects:
            raise errors.UnsupportedOptionError(
                "compare(model, *args, a=..., b=...): no model"
            )
        model, args = objects[0], objects[1:]
        first = _compile(model, a or {}, "a", kwargs)
        second = _compile(model, b or {}, "b", kwargs)
        kwargs = {}  # bound in both entries
        labels = labels or _labels(a or {}, b or {})
    elif len(objects) >= 2:
        first, second, args = objects[0], objects[1], objects[2:]
    else:
        raise errors.UnsupportedOptionError(
            "compare takes two compiled callables (or profiles), or a model with a=... "
            "and b=... option sets"
        )
    labels = labels or ("a", "b")
    profiles: list[_records.Profile | None] = [None, None]
    callables = [first, second]
    for i, obj in enumerate(callables):
        if isinstance(obj, _records.Profile):
            profiles[i] = obj
    backends: tuple[OrtBackend, OrtBackend] = (
        _backend_of(first, profiles[0]),
        _backend_of(second, profiles[1]),
    )
    result = Comparison(labels=labels, backends=backends)
    if called and not any(p is not None for p in profiles):
        grad = torch.is_grad_enabled()

        def runner(c: Any) -> Callable[[], Any]:
            def run() -> Any:
                with torch.set_grad_enabled(grad):
                    return c(*args, **kwargs)

            return run

        out_a, out_b = runner(first)(), runner(second)()
        result.outputs = _compare.compare_outputs(out_b, out_a, atol=atol, rtol=rtol)
        result.call = _time_calls(runner(first), runner(second), runs, clock)
        if profile:
            for i, c in enumerate(callables):
                profiles[i] = _profile.profile(
                    c, *args, runs=runs, label=labels[i], clock=clock, **kwargs
                )
    result.changes = [
        *_options(*backends),
        *_graphs(*backends),
        *_placement(*backends),
        *_session_changes(*backends),
    ]
    result.profiles = (profiles[0], profiles[1])
    if profiles[0] is not None and profiles[1] is not None:
        times = _times(profiles[0], profiles[1])
        result.parts, result.modules = times["parts"], times["modules"]
        result.op_types, result.nodes = times["op_types"], times["nodes"]
        if result.call is None:
            result.call = TimeChange(
                "call", profiles[0].call_seconds, profiles[1].call_seconds
            )
            result.notes.append("the calls' times are the two profiles' (timed apart)")
    return result


def _backend_of(obj: Any, profile: _records.Profile | None) -> OrtBackend:
    if profile is not None:
        if profile.backend is None:
            raise errors.UnsupportedOptionError("compare: a profile without its backend")
        return profile.backend
    return ortlab.backend.backend_of(obj)


def _labels(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[str, str]:
    def text(options: Mapping[str, Any], other: Mapping[str, Any]) -> str:
        differing = [f"{k}={v!r}" for k, v in options.items() if other.get(k, None) != v]
        return ", ".join(differing) or "defaults"

    return text(a, b), text(b, a)
