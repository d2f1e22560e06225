"""Building the ONNX Runtime session of a model: a declared pipeline of named steps, each
with its failure policy written next to it, shared by a partition's sessions and the
benchmark's bare-ORT floor.

# NOTE: a partition's session (:func:`build_partition_session`) is built by :data:`STEPS`:
#
#   step        does                                         when it fails
#   export      the partition's model, fused with ONNX       raise: the partition is split
#               Runtime's operators where wanted             around what ONNX Runtime
#               (``_export``)                                refuses, or runs in PyTorch
#   dump        writes it where ``dump_path`` says           a note on the record
#   candidates  the fused model, then the unfused one: the   a refused or disagreeing
#               first whose session ONNX Runtime builds      candidate gives way to the
#               (a CUDA graph, or a session with its         next; the last one's failure
#               threads chosen) and, when fused, whose       is raised
#               first outputs match PyTorch's (:func:`pick`)
#               on a preferred plugin provider: its first    the CPU provider runs it
#               outputs checked against PyTorch's, timed
#               against the CPU provider (the faster runs)
#   choose      fused against unfused (``_choose.faster``),  the first is kept
#               when ``ort_fusions`` is None
#   record      the SessionRecord; the runner, complete;     a cache that cannot be
#               the model and decisions into the compile     written is skipped
#               cache (``_cache``)
#
# With a compile cache, an entry for the partition's key replaces every step but the
# session (and the dump): its model and decisions are read back; one ONNX Runtime
# refuses is deleted and the steps run.
#
# The floor (``ortlab.bench``) runs the same :func:`pick` on its whole-model candidates.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from ortlab import errors
from ortlab.backend import (
    _cache,
    _choose,
    _dump,
    _export,
    _fusions,
    _options,
    _plugins,
    _runtime,
    _session,
    _threads,
    records,
)

if TYPE_CHECKING:
    import onnx
    import torch.fx

logger = logging.getLogger(__name__)

S = TypeVar("S")


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of building a session, and what happens when it fails."""

    name: str
    on_failure: str


STEPS: tuple[Step, ...] = (
    Step("export", "raise: the partition is split around what ONNX Runtime refuses"),
    Step("dump", "a note on the record (SessionRecord.dump_note)"),
    Step("candidates", "the next candidate; the last one's failure is raised"),
    Step("choose", "the first candidate is kept"),
    Step("record", "-; a compile cache that cannot be written is skipped"),
)
"""The steps of :func:`build_partition_session`, in order (see the module's NOTE)."""


# -- candidates and the choice: shared with the floor ------------------------------------
@dataclasses.dataclass(frozen=True)
class Candidate:
    """One model a session could run: ``make()`` returns it and the fusions it holds."""

    label: str
    """``"fused"`` or ``"unfused"``."""
    make: Callable[[], tuple[onnx.ModelProto, dict[str, int]]]


@dataclasses.dataclass
class Picked(Generic[S]):
    """What :func:`pick` kept."""

    session: S
    model: onnx.ModelProto
    label: str
    fusions: dict[str, int]
    note: str
    """How the candidates fared ("" when the first was kept unchecked and untimed)."""
    checked_seconds: float = 0.0
    """Checking a fused model's outputs, and timing it against the unfused one."""
    given_up_seconds: float = 0.0
    """Candidates given up: making them, their sessions and runs."""


def pick(
    candidates: Sequence[Candidate],
    *,
    open_session: Callable[[onnx.ModelProto], S],
    run: Callable[[S], Sequence[Any]],
    expected: Callable[[], Sequence[Any] | None] | None,
    compare: bool,
) -> Picked[S]:
    """The ``candidates`` and ``choose`` steps: the first candidate ONNX Runtime takes
    (its session opens, it runs, and a fused one's outputs match ``expected()``), timed
    against the next one when ``compare`` (``_fusions.compare_speed``).

    Args:
        candidates: Fused first, then unfused (one candidate: nothing to fall back to).
        open_session: Makes a model's session (choosing its threads).
        run: Runs a session once on the first inputs; returns its outputs.
        expected: PyTorch's outputs on those inputs (``None``, or returning ``None``:
            nothing to check against).
        compare: Time the kept fused model against the next candidate.

    Raises:
        Exception: the last candidate's failure.
    """
    notes: list[str] = []
    given_up = 0.0
    for position, candidate in enumerate(candidates):
        last = position == len(candidates) - 1
        start = time.perf_counter()
        try:
            model, fusions = candidate.make()
            session = open_session(model)
            checked = 0.0
            if candidate.label == "fused" and expected is not None:
                check_start = time.perf_counter()
                _check(run(session), expected)
                checked = time.perf_counter() - check_start
        except Exception as e:
            if last:
                raise
            given_up += time.perf_counter() - start
            logger.debug("candidate %s given up", candidate.label, exc_info=True)
            notes.append(_fusions.fallback_note(e))
            continue
        picked = Picked(session, model, candidate.label, dict(fusions), "", checked, given_up)
        if compare and not last and candidate.label == "fused":
            _choose_between(picked, candidates[position + 1], open_session, run)
        picked.note = _fusions.join_notes(*notes, picked.note)
        return picked
    raise AssertionError("no candidates")  # pragma: no cover


def _check(outputs: Sequence[Any], expected: Callable[[], Sequence[Any] | None]) -> None:
    want = expected()
    if want is None:
        return
    why = _fusions.disagreement(outputs, want)
    if why:
        raise _fusions.FusedOutputsDiffer(why)


def _choose_between(
    picked: Picked[S],
    other: Candidate,
    open_session: Callable[[onnx.ModelProto], S],
    run: Callable[[S], Sequence[Any]],
) -> None:
    """The ``choose`` step: ``picked`` (fused) against ``other`` (unfused), in place."""
    made: list[tuple[S, onnx.ModelProto]] = []

    def make_other() -> Callable[[], object]:
        model, _ = other.make()
        made.append((open_session(model), model))
        return lambda: run(made[0][0])

    start = time.perf_counter()
    session = picked.session
    keep, note = _fusions.compare_speed(lambda: run(session), make_other, picked.fusions)
    picked.checked_seconds += time.perf_counter() - start
    picked.note = note
    if not keep:
        picked.session, picked.model = made[0]
        picked.label, picked.fusions = other.label, {}


# -- a whole model's session (the benchmark's floor) --------------------------------------
@dataclasses.dataclass
class ModelSession:
    """A whole model's session built as a partition's is (:func:`build_model_session`)."""

    session: Any
    """The :class:`~ortlab.backend.StandaloneSession` that runs."""
    model: onnx.ModelProto
    """The model it runs (fused, or the one given)."""
    fusions: dict[str, int]
    """ONNX Runtime fused operators in it, by fusion."""
    fusion_note: str
    """How the fused and unfused models compared, or why there are no fusions."""
    fuse_seconds: float
    """Rewriting the model with fused operators."""
    session_seconds: float
    """Making the sessions, checking and timing them."""


def build_model_session(
    model: onnx.ModelProto,
    *,
    like: Sequence[Any],
    options: _options.OrtBackendOptions,
    expected: Callable[[], Sequence[Any] | None],
) -> ModelSession:
    """A session on a whole exported model, built with the steps a partition's session
    takes after its export: fused as ``options.ort_fusions`` says, the fused model checked
    against ``expected()`` (PyTorch's outputs on ``like``) and, with ``ort_fusions=None``,
    timed against the unfused one (:func:`pick`); threads chosen on ``like``.

    Raises:
        SessionError: ONNX Runtime refused the model given.
    """
    from ortlab.backend import _standalone

    start = time.perf_counter()
    fused, fusions, note = _fusions.fuse_proto(model, options.ort_fusions)
    fuse_seconds = time.perf_counter() - start
    candidates = [Candidate("unfused", lambda: (model, {}))]
    if fused is not model:
        candidates.insert(0, Candidate("fused", lambda: (fused, dict(fusions))))
    start = time.perf_counter()
    picked = pick(
        candidates,
        open_session=lambda m: _standalone.create_session(
            m, like=like, options=options, choose_threads=True
        ),
        run=lambda session: session.run(like),
        expected=expected,
        compare=options.ort_fusions is None,
    )
    return ModelSession(
        session=picked.session,
        model=picked.model,
        fusions=picked.fusions,
        fusion_note=_fusions.join_notes("" if picked.given_up_seconds else note, picked.note),
        fuse_seconds=fuse_seconds,
        session_seconds=time.perf_counter() - start,
    )


# -- a partition's session ---------------------------------------------------------------
@dataclasses.dataclass
class Request:
    """What building one session of a partition needs."""

    eager: torch.fx.GraphModule
    """The partition's graph (its PyTorch run checks a fused model)."""
    record: records.PartitionRecord
    options: _options.OrtBackendOptions
    registry: Callable[[], Any]
    """Builds (or returns) the exporter's registry; called only to export."""
    dumper: _dump.ModelDumper
    warned: set[str]
    """What was warned about already (once per backend)."""
    args: Sequence[Any]
    frozen: dict[int, torch.Tensor]
    input_fx_values: tuple[Any, ...]
    output_fx_values: tuple[Any, ...]
    single: bool
    """The partition returns one value (not a tuple)."""
    providers: list[_session.Provider]
    fuse: bool | None
    """``OrtBackendOptions.ort_fusions`` for an inference partition; ``False``."""
    optimize: bool
    """Run onnxscript's optimizer on the exported model (an inference partition)."""
    keep_last_run: bool
    cache: _cache.CompileCache | None = None
    """The compile cache (``None``: off)."""


@dataclasses.dataclass
class Built:
    """A partition's session, complete: its runner and its record."""

    runner: _runtime.OrtRunner
    record: records.SessionRecord
    fused: bool
    """The model has ONNX Runtime's fused operators (a later size it cannot run falls
    back to the unfused model)."""
    regrow: Callable[[], _runtime.OrtRunner] | None = None
    """With one thread chosen by probing: makes the same session with more threads (a
    run that grew long, see ``_threads``)."""


def build_partition_session(request: Request) -> Built:
    """Builds a session of a partition for its arguments' schema by :data:`STEPS`.

    Raises:
        Exception: the export failed, or ONNX Runtime refused or could not run every
            candidate model (the caller splits the partition).
    """
    options = request.options
    static = options.dynamic_shapes is False
    runner_kwargs: dict[str, Any] = dict(
        input_fx_values=request.input_fx_values,
        output_fx_values=request.output_fx_values,
        args=request.args,
        frozen=request.frozen,
        preallocate_output=options.preallocate_output,
        # Exported from the partition's own metadata: Dynamo's guards keep the arguments
        # to that schema (a static export fixes concrete sizes instead).
        guaranteed=not static,
    )
    key = _cache_key(request, static)
    if key is not None and request.cache is not None:
        try:
            hit = request.cache.load(key)
        except Exception:  # the cache is an optimization: a broken one is a miss
            logger.debug("compile cache entry %s unreadable", key, exc_info=True)
            hit = None
        if hit is not None:
            try:
                return _from_cache(request, hit, runner_kwargs)
            except Exception:  # ONNX Runtime refuses it: rebuilt, never run
                logger.debug("compile cache entry %s refused", key, exc_info=True)
                request.cache.discard(key)
    timings: dict[str, float] = {}
    exported = _export_step(request, request.fuse, timings)
    exported_bytes = exported.proto.SerializeToString()
    # Dumped before ONNX Runtime sees it: a model it refuses is worth a look.
    dumped = _dump_step(request, exported_bytes)
    chosen = _choose_step(request, exported, runner_kwargs, timings)
    model_bytes = exported_bytes
    if chosen.picked.model is not exported.proto:  # the unfused model runs: dump it too
        model_bytes = chosen.picked.model.SerializeToString()
        files, note = _dump_step(request, model_bytes)
        dumped = (dumped[0] + files, dumped[1] or note)
    built = _record_step(
        request, exported, chosen, timings, dumped, model_bytes, runner_kwargs
    )
    if key is not None and request.cache is not None:
        _store_step(request.cache, key, model_bytes, exported, chosen, built.record)
    logger.debug("created %r", built.record)
    return built


@dataclasses.dataclass
class _Chosen:
    """What the ``candidates`` and ``choose`` steps kept: the model and its runner, the
    runner's threads and why it is or is not a CUDA graph."""

    picked: Picked[_runtime.OrtRunner]
    choice: _threads.ThreadChoice
    graph_note: str
    provider_note: str = ""
    cpu_instead: bool = False


def _choose_step(
    request: Request,
    exported: _export.ExportedModel,
    runner_kwargs: dict[str, Any],
    timings: dict[str, float],
) -> _Chosen:
    options = request.options
    opened: dict[int, _Opened] = {}

    def open_session(model: onnx.ModelProto) -> _runtime.OrtRunner:
        made = _open(request, model, runner_kwargs)
        opened[id(made.runner)] = made
        return made.runner

    candidates = _candidates(request, exported, timings)
    # pre_ort_model_transforms change the model on purpose: nothing to check it against.
    check = exported.fused and not options.pre_ort_model_transforms
    start = time.perf_counter()
    picked = pick(
        candidates,
        open_session=open_session,
        run=lambda runner: runner.run(request.args),
        expected=functools.partial(_eager_outputs, request) if check else None,
        # A CUDA graph replays one model: nothing to time against it.
        compare=exported.unfused is not None and not options.cuda_graphs,
    )
    elapsed = time.perf_counter() - start
    made = opened[id(picked.session)]
    choice = made.choice
    if picked.given_up_seconds or picked.checked_seconds:
        fuse = picked.given_up_seconds + picked.checked_seconds
        timings["fuse"] = timings.get("fuse", 0.0) + fuse
    timings["session"] = (
        elapsed - picked.given_up_seconds - picked.checked_seconds - choice.seconds
    )
    if choice.probed_from is not None:
        timings["threads"] = choice.seconds
    return _Chosen(picked, choice, made.graph_note, made.provider_note, made.cpu_instead)


def _store_step(
    cache: _cache.CompileCache,
    key: str,
    model_bytes: bytes,
    exported: _export.ExportedModel,
    chosen: _Chosen,
    record: records.SessionRecord,
) -> None:
    decisions = _cache.Decisions(
        fused=chosen.picked.label == "fused",
        fusions=dict(chosen.picked.fusions),
        fusion_note=record.fusion_note,
        threads=chosen.choice.threads,
        threads_note=chosen.choice.note or None,
        threads_probed_from=chosen.choice.probed_from,
        passes=dict(exported.passes),
        export_method=exported.method,
        frozen_inputs=exported.frozen_inputs,
        provider_note=chosen.provider_note or None,
        cpu_instead=chosen.cpu_instead,
    )
    cache.store(key, model_bytes, decisions)


def _cache_key(request: Request, static: bool) -> str | None:
    """The partition's compile-cache key; ``None`` without a cache or a key."""
    if request.cache is None:
        return None
    try:
        return _cache.partition_key(
            graph_module=request.eager,
            args=request.args,
            static=static,
            frozen=request.frozen,
            options=request.options,
            providers=request.providers,
            fuse=request.fuse,
            optimize=request.optimize,
            threads=torch.get_num_threads(),
        )
    except _cache.Unkeyable:
        return None


def _from_cache(request: Request, hit: _cache.Hit, runner_kwargs: dict[str, Any]) -> Built:
    """A session of a cached model, with the decisions made for it (no export, no
    fusion, no check, no timing)."""
    decisions = hit.decisions
    model = hit.model
    data = model.SerializeToString()
    start = time.perf_counter()
    session = _session.create_session(
        data,
        [(_session.CPU, {})] if decisions.cpu_instead else request.providers,
        request.options.ort_session_options,
        decisions.threads,
        disabled_optimizers=_session.inexact_optimizers(model),
    )
    runner = _runtime.OrtRunner(session, model, **runner_kwargs)
    timings = {"cache": hit.seconds, "session": time.perf_counter() - start}
    dump_files, dump_note = _dump_step(request, data)
    record = request.record
    placeholders = record.input_names
    note = f"from the compile cache (entry {hit.key[:12]})"
    session_record = records.SessionRecord(
        **_model_fields(record, model, session),
        export_method="cache",
        export_seconds=hit.seconds,
        session_seconds=timings["session"],
        model_bytes=len(data),
        timings=timings,
        dump_files=dump_files,
        dump_note=dump_note,
        frozen_inputs=tuple(placeholders[i] for i in decisions.frozen_inputs),
        threads=decisions.threads,
        threads_note=_fusions.join_notes(decisions.threads_note or "", note),
        fusions=dict(decisions.fusions),
        fusion_note=decisions.fusion_note,
        provider_note=decisions.provider_note,
        onnx_passes=dict(decisions.passes),
    )
    regrow = None
    if decisions.threads == 1 and decisions.threads_probed_from is not None:
        several = decisions.threads_probed_from
        regrow = functools.partial(_regrown, request, model, several, runner_kwargs)
    runner.keep_last_inputs = request.keep_last_run
    runner.record = session_record
    runner.fused = decisions.fused
    runner.regrow = regrow
    return Built(runner, session_record, decisions.fused, regrow)


def _export_step(
    request: Request, fuse: bool | None, timings: dict[str, float]
) -> _export.ExportedModel:
    record, options = request.record, request.options
    exported = _export.export_partition(
        request.eager,
        name=f"{record.graph_kind}_{record.graph_index}_{record.name}",
        args=request.args,
        static=options.dynamic_shapes is False,
        frozen=request.frozen,
        transforms=options.pre_ort_model_transforms or (),
        opset_version=options.opset_version,
        registry=request.registry(),
        custom_translations=tuple(options.custom_translations or ()),
        fuse=fuse,
        optimize=request.optimize,
    )
    _export.add_timings(timings, exported.timings)
    return exported


def _candidates(
    request: Request, exported: _export.ExportedModel, timings: dict[str, float]
) -> list[Candidate]:
    """The fused model then the unfused one (kept from the export, or exported again
    without fusions when the export did not keep it: forced fusions, transforms)."""
    if not exported.fused:
        return [Candidate("unfused", lambda: (exported.proto, {}))]

    def unfused() -> tuple[onnx.ModelProto, dict[str, int]]:
        if exported.unfused is not None:
            return exported.unfused, {}
        again: dict[str, float] = {}
        model = _export_step(request, False, again).proto
        timings["fuse"] = timings.get("fuse", 0.0) + sum(again.values())
        return model, {}

    return [
        Candidate("fused", lambda: (exported.proto, dict(exported.fusions))),
        Candidate("unfused", unfused),
    ]


def _eager_outputs(request: Request) -> list[Any] | None:
    """The partition run in PyTorch on the first arguments (``None`` when it fails: then
    there is nothing to check a fused model against, which is not its fault)."""
    try:
        with torch.no_grad():
            out = request.eager(*request.args)
    except Exception:
        logger.debug("no eager run to check %s against", request.record.name, exc_info=True)
        return None
    return [out] if request.single else list(out)


@dataclasses.dataclass(frozen=True)
class _Opened:
    """A model's runner, and how it was made."""

    runner: _runtime.OrtRunner
    choice: _threads.ThreadChoice
    graph_note: str
    """Why no CUDA graph (``""``: one, or none asked)."""
    provider_note: str = ""
    """Which provider runs it and why, when a plugin provider was preferred."""
    cpu_instead: bool = False
    """The CPU provider runs it in place of the plugin provider."""


def _open(request: Request, model: onnx.ModelProto, runner_kwargs: dict[str, Any]) -> _Opened:
    """A model's runner: a CUDA graph where ``cuda_graphs`` asks and it applies, else a
    session with its threads chosen (``_threads.choose``), on a preferred plugin provider
    or the CPU provider, whichever is right and faster (:func:`_plugin_or_cpu`)."""
    options = request.options
    providers = request.providers
    data = model.SerializeToString()
    graph_note = ""
    if options.cuda_graphs:
        graphed, graph_note = _cuda_graph_runner(request, model, data, runner_kwargs)
        if graphed is not None:
            return _Opened(graphed, _threads.initial(options, providers[0][0])[0], "")

    inexact = _session.inexact_optimizers(model)
    declined = ""
    if _plugins.is_plugin(providers[0][0]) and _session.computes_in_float64(model):
        # OpenVINO computes float64 in float32 (a float64 MLP came back 1e-6 off, where
        # the CPU provider is exact to 1e-15); its check against PyTorch, at float32's
        # tolerance, would pass it.
        declined = (
            f"{_session.CPU}: the model computes in float64, which {providers[0][0]} "
            "computes in float32"
        )
        providers = [(_session.CPU, {})]

    def make(threads: int | None, on: Sequence[_session.Provider]) -> _runtime.OrtRunner:
        made = _session.create_session(
            data, on, options.ort_session_options, threads, disabled_optimizers=inexact
        )
        return _runtime.OrtRunner(made, model, **runner_kwargs)

    runner, choice = _threads.choose(
        options,
        providers[0][0],
        functools.partial(make, on=providers),
        run=lambda r: r.run(request.args),
    )
    if declined:
        return _Opened(runner, choice, graph_note, declined, True)
    if not _plugins.is_plugin(providers[0][0]):
        return _Opened(runner, choice, graph_note)
    kept, note = _plugin_or_cpu(
        request, runner, lambda: make(choice.threads, [(_session.CPU, {})])
    )
    if kept is not runner and choice.threads is not None:
        choice = dataclasses.replace(
            choice, note=f"{choice.threads} threads: not probed (the providers were compared)"
        )
    return _Opened(kept, choice, graph_note, note, kept is not runner)


def _plugin_or_cpu(
    request: Request,
    runner: _runtime.OrtRunner,
    make_cpu: Callable[[], _runtime.OrtRunner],
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[_runtime.OrtRunner, str]:
    """The runner on a plugin provider, or one on ONNX Runtime's CPU provider: the
    plugin's first outputs are checked against PyTorch's (they differ: the CPU provider
    runs it), then both are timed on the first inputs (``_choose.faster``, however long a
    run takes) and the faster is kept; with a note saying which and why."""
    name = request.providers[0][0]
    try:
        outputs = runner.run(request.args)
    except Exception as e:  # the plugin took the model but cannot run it
        return make_cpu(), f"{_session.CPU}: {name} failed to run it ({errors.describe(e)})"
    expected = _eager_outputs(request)
    if expected is not None:
        why = _fusions.disagreement(outputs, expected)
        if why:
            note = f"{_session.CPU}: {name}'s outputs differ from PyTorch's ({why})"
            return make_cpu(), note

    def make_twin() -> tuple[_runtime.OrtRunner, Callable[[], object]]:
        twin = make_cpu()
        return twin, lambda: twin.run(request.args)

    race = _choose.faster(
        lambda: runner.run(request.args), make_twin, below=math.inf, clock=clock
    )
    if race.error is not None:
        return runner, f"{name}: the CPU provider's session failed ({race.error})"
    medians = race.medians(name, _session.CPU)
    if race.kept == "b" and race.b is not None:
        return race.b, f"{_session.CPU}: {medians}"
    return runner, f"{name}: {medians}"


def _regrown(
    request: Request,
    model: onnx.ModelProto,
    threads: int,
    runner_kwargs: dict[str, Any],
) -> _runtime.OrtRunner:
    """The same session with ``threads`` threads (see :attr:`Built.regrow`). Only a
    session on the CPU provider is probed, so with a plugin provider preferred the
    session is the one the plugin gave way to (a float64 model)."""
    providers = request.providers
    if _plugins.is_plugin(providers[0][0]):
        providers = [(_session.CPU, {})]
    session = _session.create_session(
        model.SerializeToString(),
        providers,
        request.options.ort_session_options,
        threads,
        disabled_optimizers=_session.inexact_optimizers(model),
    )
    return _runtime.OrtRunner(session, model, **runner_kwargs)


def _cuda_graph_runner(
    request: Request, model: onnx.ModelProto, data: bytes, runner_kwargs: dict[str, Any]
) -> tuple[_runtime.OrtRunner | None, str]:
    """A runner replaying a CUDA graph, or ``(None, why not)``."""
    args, frozen = request.args, request.frozen
    slots = _runtime.input_slots(len(args), frozen)
    providers = request.providers
    why = _runtime.static_binding_blocker(
        model, request.output_fx_values, args, slots, first_provider=providers[0][0]
    )
    if why:
        return None, why
    with_graph = [
        (name, {**opts, "enable_cuda_graph": "1"} if name == _session.CUDA else opts)
        for name, opts in providers
    ]
    try:
        session = _session.create_session(
            data,
            with_graph,
            request.options.ort_session_options,
            disabled_optimizers=_session.inexact_optimizers(model),
        )
        return _runtime.StaticBindingRunner(session, model, **runner_kwargs), ""
    except Exception as e:  # e.g. a node ORT placed on the CPU provider
        return None, errors.describe(e)


def _dump_step(request: Request, model_bytes: bytes) -> tuple[tuple[str, ...], str | None]:
    """Writes the model where the dump path says: the files, and why none were written
    when that failed (a note, and one warning per backend: the partition runs anyway)."""
    try:
        files = request.dumper.dump(model_bytes, request.eager, request.options.dump_path)
    except _dump.DumpFailed as e:
        note = str(e)
        if "dump_path" not in request.warned:
            request.warned.add("dump_path")
            warnings.warn(f"ortlab: {note}", RuntimeWarning, stacklevel=7)
        return (), note
    return files, None


def _model_fields(
    record: records.PartitionRecord, model: onnx.ModelProto, session: Any
) -> dict[str, Any]:
    """The fields of a SessionRecord that its model and session give (built or cached)."""
    return dict(
        partition_name=record.name,
        index=len(record.sessions) + record.dropped_sessions,
        model=model,
        input_names=tuple(i.name for i in model.graph.input),
        output_names=tuple(o.name for o in model.graph.output),
        input_value_infos=tuple(model.graph.input),
        output_value_infos=tuple(model.graph.output),
        # A reshape to the shape ONNX already has (kept off the graph output, where ONNX
        # Runtime would copy) views nothing: the record says so only where shapes differ.
        output_views=tuple(
            v[1] if v and v[0] != v[1] else None for v in _runtime.output_views(model)
        ),
        providers=tuple(session.get_providers()),
    )


def _record_step(
    request: Request,
    exported: _export.ExportedModel,
    chosen: _Chosen,
    timings: dict[str, float],
    dumped: tuple[tuple[str, ...], str | None],
    model_bytes: bytes,
    runner_kwargs: dict[str, Any],
) -> Built:
    """The ``record`` step: the SessionRecord, and the runner made complete with it."""
    record = request.record
    picked, choice = chosen.picked, chosen.choice
    runner, model = picked.session, picked.model
    placeholders = record.input_names
    # The export's own note (no pattern applied...) holds unless the fused model was
    # given up: the note then says why.
    fusion_note = _fusions.join_notes(
        "" if picked.given_up_seconds else exported.fusion_note, picked.note
    )
    session_record = records.SessionRecord(
        **_model_fields(record, model, runner.session),
        export_method=exported.method,
        export_seconds=sum(timings.get(k, 0.0) for k in records.EXPORT_STEPS),
        session_seconds=timings["session"],
        model_bytes=len(model_bytes),
        timings=timings,
        dump_files=dumped[0],
        frozen_inputs=tuple(placeholders[i] for i in exported.frozen_inputs),
        cuda_graph=isinstance(runner, _runtime.StaticBindingRunner),
        cuda_graph_note=chosen.graph_note or None,
        threads=choice.threads,
        threads_note=choice.note or None,
        provider_note=chosen.provider_note or None,
        fusions=picked.fusions,
        fusion_note=fusion_note or None,
        onnx_passes=dict(exported.passes),
        dump_note=dumped[1],
    )
    regrow = None
    if choice.probed_from is not None and choice.threads == 1:
        several = choice.probed_from
        regrow = functools.partial(_regrown, request, model, several, runner_kwargs)
    runner.keep_last_inputs = request.keep_last_run
    runner.record = session_record
    runner.fused = picked.label == "fused"
    runner.regrow = regrow
    return Built(runner, session_record, runner.fused, regrow)
