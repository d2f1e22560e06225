"""Where a difference comes from: each partition run, the nodes inside a failing one, and
decisions that flipped.

For every partition run captured during the compiled call:

- its ONNX Runtime outputs against its own FX subgraph run eagerly on exactly the inputs
  ONNX Runtime received (the *local* error, :attr:`PartitionDiff.outputs`);
- its inputs and outputs against an all-eager run of the whole partitioned graph on the
  same graph inputs and RNG state (the error *carried in*, and the *total* error); a
  backward graph's all-eager run starts from its forward graph's all-eager outputs (the
  activations AOTAutograd saved), so what the forward did differently is carried in;
- inside a failing partition (or every one with ``nodes=True``), every FX node against
  the ONNX value it became (accumulated error) and against its op run on the ONNX values
  of its operands (its *own* error); the first node whose own error is beyond tolerance is
  the *first divergent node*;
- where a value is beyond the per-dtype tolerance, the same computation in float64: how
  much of that eager's own rounding explains (the intermediate rule,
  :mod:`ortlab.numerics._compare`); the rest is the partition's own error, never called
  accumulated;
- every node with a discrete result against the all-eager run: the *decision flips*
  (:mod:`ortlab.numerics._flips`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ortlab.numerics import _compare, _debug, _flips, _interpret, _records, _runner

if TYPE_CHECKING:
    from ortlab.backend import GraphRecord, OrtBackend, OrtBackendOptions, PartitionRecord


class _Float64Run:
    """A partition's graph run in float64 on the inputs ONNX Runtime received, once, when
    first asked: eager's own rounding of each of its nodes."""

    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        inputs: Sequence[Any],
        eager_env: Mapping[torch.fx.Node, Any],
    ) -> None:
        self._graph_module = graph_module
        self._inputs = inputs
        self._eager_env = eager_env
        self._env: Mapping[torch.fx.Node, Any] | None = None
        self.failure = ""
        """Why the float64 run failed (``""``: it did not, or has not run)."""

    def _values(self) -> Mapping[torch.fx.Node, Any] | None:
        if self._env is None and not self.failure:
            interp = _interpret.Float64Interpreter(self._graph_module)
            try:
                with torch.no_grad():
                    interp.run(*(_runner.clone_value(v) for v in self._inputs))
            except Exception as e:
                self.failure = f"the float64 run failed ({type(e).__name__}: {e})"
                return None
            self._env = interp.env
        return self._env

    def rounding(self, node: Any) -> tuple[float | None, str]:
        """Eager's rounding of ``node``'s value (``None`` and why when unknown)."""
        env = self._values()
        if env is None:
            return None, self.failure
        return _measured(_compare.rounding_of(self._eager_env.get(node), env.get(node)), node)


def _measured(rounding: float | None, node: Any) -> tuple[float | None, str]:
    why = "" if rounding is not None else f"no float64 value of {getattr(node, 'name', node)}"
    return rounding, why


def _compare_nodes(
    capture: _runner.Capture,
    eager_env: Mapping[torch.fx.Node, Any],
    float64: _Float64Run,
    *,
    atol: float | None,
    rtol: float | None,
    options: OrtBackendOptions,
    notes: list[str],
) -> list[_records.NodeDiff]:
    """Every intermediate FX node of one partition run vs its ONNX value (accumulated
    error) and vs its op run on the ONNX values of its operands (own error)."""
    record = capture.partition
    nodes = [n for n in record.graph_module.graph.nodes if n.op != "output"]
    names = [n.name for n in nodes if n.op != "placeholder"]
    mapping, ops, fused = _debug.onnx_values(capture.session.model, names)
    ort_values: dict[str, torch.Tensor] = {}
    try:
        ort_values, note = _debug.run_debug_model(
            capture, sorted(set(mapping.values())), options
        )
        if note:
            notes.append(note)
    except Exception as e:
        notes.append(f"could not run the debug model: {type(e).__name__}: {e}")
    frozen = _debug.frozen_initializers(capture.session.model, capture.session.frozen_inputs)
    # What ONNX Runtime computed for each node, where it is known; elsewhere the node
    # recomputed eagerly from those values (tuples of multi-output ops, unmatched nodes).
    ort_env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, capture.inputs):
        ort_env[node] = frozen.get(node.name, _runner.clone_value(value))
    compare = _NodeComparison(
        record,
        eager_env,
        ort_env,
        float64,
        mapping,
        ops,
        fused,
        ort_values,
        frozen,
        atol,
        rtol,
    )
    with torch.no_grad():
        found = [compare(node, position) for position, node in enumerate(nodes)]
    return [n for n in found if n is not None]


@dataclasses.dataclass
class _NodeComparison:
    """Compares the nodes of one partition run, in topological order (each node's ORT
    value is put into ``ort_env`` for the nodes that read it)."""

    record: PartitionRecord
    eager_env: Mapping[torch.fx.Node, Any]
    ort_env: dict[torch.fx.Node, Any]
    float64: _Float64Run
    mapping: Mapping[str, str]
    """FX node name -> ONNX value name."""
    ops: Mapping[str, Sequence[str]]
    fused: Collection[str]
    """FX nodes stamped on an ONNX Runtime fused operator."""
    ort_values: Mapping[str, torch.Tensor]
    """ONNX value name -> what the debug model computed."""
    frozen: Mapping[str, Any]
    atol: float | None
    rtol: float | None
    exact: dict[torch.fx.Node, Any] = dataclasses.field(default_factory=dict)
    """Float64 counterparts of ``ort_env``'s values, computed when first needed
    (:meth:`_exact`)."""
    from_ort: set[torch.fx.Node] = dataclasses.field(default_factory=set)
    """The nodes whose ``ort_env`` value ONNX Runtime computed (or received)."""

    def __call__(self, node: torch.fx.Node, position: int) -> _records.NodeDiff | None:
        eager = self.eager_env.get(node)
        record = self.record
        base: dict[str, Any] = {
            "partition": record.name,
            "graph_index": record.graph_index,
            "graph_kind": record.graph_kind,
            "node": node.name,
            "target": "placeholder"
            if node.op == "placeholder"
            else _interpret.target_text(node),
            "position": position,
            "onnx_ops": tuple(self.ops.get(node.name, ())),
        }
        if node.op == "placeholder":
            self.from_ort.add(node)
            if node.name not in self.frozen:
                return None  # a real input: identical on both sides by construction
            diff = _compare.compare_tensors(
                node.name,
                self.frozen[node.name],
                eager,
                scale=0.0,
                atol=self.atol,
                rtol=self.rtol,
            )
            return _records.NodeDiff(
                **base, onnx_value=node.name, diff=diff, note="frozen initializer"
            )
        local_note = ""
        try:
            local_ref = _interpret.local_value(node, self.ort_env, self.eager_env)
        except Exception as e:
            local_ref = None
            local_note = f"own error not isolated ({type(e).__name__})"
        value_name = self.mapping.get(node.name, "")
        got = self.ort_values.get(value_name) if value_name else None
        not_comparable = ""
        if isinstance(got, torch.Tensor) and isinstance(eager, torch.Tensor):
            if got.dtype != eager.dtype and got.numel() == eager.numel():
                got = got.to(eager.dtype)  # a translation detail, not a numerical error
            got, not_comparable = _in_node_shape(got, eager)
        if isinstance(got, torch.Tensor) and isinstance(eager, torch.Tensor):
            self.ort_env[node] = got
            self.from_ort.add(node)
        else:
            self.ort_env[node] = local_ref if local_ref is not None else eager
        if not isinstance(eager, torch.Tensor):
            kind = "a tuple" if isinstance(eager, (tuple, list)) else type(eager).__name__
            return _records.NodeDiff(
                **base, onnx_value=value_name, diff=None, note=f"value is {kind}"
            )
        if got is None:
            why = not_comparable or (
                "no ONNX value carries this node" if not value_name else "not computed"
            )
            if not value_name and node.name in self.fused:
                why = "inside an ONNX Runtime fused operator: compared where it ends"
            return _records.NodeDiff(**base, onnx_value=value_name, diff=None, note=why)
        judge = functools.partial(
            _compare.compare_intermediate, node.name, got, atol=self.atol, rtol=self.rtol
        )
        diff = judge(eager, functools.partial(self.float64.rounding, node))
        local = None
        if isinstance(local_ref, torch.Tensor):
            local = judge(local_ref, functools.partial(self._own_rounding, node, local_ref))
        return _records.NodeDiff(
            **base, onnx_value=value_name, diff=diff, local=local, note=local_note
        )

    def _own_rounding(self, node: torch.fx.Node, value: Any) -> tuple[float | None, str]:
        """Eager's rounding of what the node's own error covers: its op on ONNX Runtime's
        values of its operands, and the ops before it whose values ONNX Runtime does not
        expose (a fused operator's insides, which its value holds too)."""
        try:
            for operand in node.all_input_nodes:
                self._exact(operand)
            exact = _interpret.local_value(node, self.exact, self.eager_env, float64=True)
        except Exception as e:
            return None, f"it failed in float64 ({type(e).__name__}: {e})"
        return _measured(_compare.rounding_of(value, exact), node)

    def _exact(self, node: torch.fx.Node) -> Any:
        """``ort_env[node]`` in float64: ONNX Runtime's value where it computed one, else
        the node run in float64 on its operands' (in topological order, no recursion)."""
        stack = [node]
        while stack:
            top = stack[-1]
            if top in self.exact:
                stack.pop()
            elif top in self.from_ort:
                self.exact[top] = _interpret.float64_value(self.ort_env[top])
            else:
                missing = [a for a in top.all_input_nodes if a not in self.exact]
                if missing:
                    stack.extend(missing)
                    continue
                self.exact[top] = _interpret.local_value(
                    top, self.exact, self.eager_env, float64=True
                )
        return self.exact[node]


def _in_node_shape(got: torch.Tensor, eager: torch.Tensor) -> tuple[torch.Tensor | None, str]:
    """ONNX Runtime's value in the shape of the node's, where it holds the same elements in
    the same order: ``(1,)`` vs ``()`` (the runtime's scalar convention), ``[B, S, N]`` vs
    ``[B*S, N]`` (a linear map ortlab runs over the leading dims, backend/_passes.py).
    Otherwise ``None`` and a note: a fused operator that kept the node's name may lay its
    result out differently (attention's ``[B, S, H, D]`` for ``[B, H, S, D]``), and
    comparing it reshaped would blame the node for a permutation."""
    if got.shape == eager.shape or got.numel() != eager.numel():
        return got, ""  # a different size fails the comparison, as it should
    flattened = (got.dim() == 2 or eager.dim() == 2) and got.shape[-1:] == eager.shape[-1:]
    if got.numel() <= 1 or flattened:
        return got.reshape(eager.shape), ""
    return None, (
        f"the ONNX value is {list(got.shape)}, the node's {list(eager.shape)}: laid out "
        "otherwise, not compared"
    )


def _compatible(meta: Any, value: Any) -> bool:
    """Whether ``value`` can be what a placeholder with this ``meta["val"]`` received."""
    if isinstance(meta, torch.Tensor):
        return (
            isinstance(value, torch.Tensor)
            and value.dtype == meta.dtype
            and value.dim() == meta.dim()
        )
    return isinstance(meta, (torch.SymInt, int)) and isinstance(value, int)


def _bind_placeholders(
    gm: torch.fx.GraphModule,
    captures: Sequence[_runner.Capture],
    known: Mapping[str, Any],
    reference: Mapping[str, Any],
) -> tuple[list[Any] | None, str]:
    """Values of a partitioned graph's placeholders for its all-eager run: ``reference``
    values (the all-eager outputs of the forward graph a backward graph belongs to) where
    they fit, else what its partitions received, else ``known`` values of earlier graphs
    by name (AOTAutograd names a backward graph's saved inputs after the forward nodes
    that made them); SymInt placeholders are bound from tensor shapes. ``None`` and a
    reason when an input no partition saw is needed."""
    values: dict[str, Any] = {}
    calls = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    for cap in captures:
        call = calls.get(cap.partition.name)
        if call is None:
            continue
        for arg, value in zip(call.args, cap.inputs):
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder":
                values.setdefault(arg.name, value)
    live = _interpret.live_nodes(gm.graph)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        if node.name not in values and node.name in known and node in live:
            if _compatible(node.meta.get("val"), known[node.name]):
                values[node.name] = known[node.name]
    for node in placeholders:
        eager = reference.get(node.name)
        if node in live and _compatible(node.meta.get("val"), eager):
            seen = values.get(node.name)
            if isinstance(seen, torch.Tensor) and isinstance(eager, torch.Tensor):
                if seen.shape != eager.shape:
                    continue
            values[node.name] = eager
    symbols: dict[Any, int] = {}
    for node in placeholders:
        meta, value = node.meta.get("val"), values.get(node.name)
        if isinstance(meta, torch.Tensor) and isinstance(value, torch.Tensor):
            for dim, size in zip(meta.shape, value.shape):
                if isinstance(dim, torch.SymInt):
                    symbols[dim.node.expr] = int(size)
    out = []
    for node in placeholders:
        if node.name in values:
            out.append(values[node.name])
            continue
        meta = node.meta.get("val")
        if node not in live:
            out.append(None)
        elif isinstance(meta, torch.SymInt) and meta.node.expr in symbols:
            out.append(symbols[meta.node.expr])
        else:
            return None, f"graph input {node.name} reaches no partition"
    return out, ""


def _named_outputs(gm: torch.fx.GraphModule, out: Any) -> dict[str, Any]:
    """A graph's output values by the names of the nodes they are in ``gm``, the graph as
    AOTAutograd made it (partitioning renames them, ``getitem_3`` of a partition call)."""
    node = next(n for n in gm.graph.nodes if n.op == "output")
    args = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return {a.name: v for a, v in zip(args, outs) if isinstance(a, torch.fx.Node)}


def _forward_of(backend: OrtBackend, graph: GraphRecord) -> int | None:
    """The index of the forward graph a backward graph belongs to (AOTAutograd compiles a
    backward right after its forward)."""
    before = graph.index - 1
    if graph.kind == "backward" and before >= 0 and backend.graphs[before].kind == "forward":
        return before
    return None


def _carried_in(
    backend: OrtBackend,
    captures: Sequence[_runner.Capture],
    results: Mapping[int, _records.PartitionDiff],
    *,
    atol: float | None,
    rtol: float | None,
    rng_state: _runner.RngState,
    keep: Mapping[tuple[int, str], Collection[str]],
) -> dict[int, dict[str, Any]]:
    """Fills ``carried_in`` and ``total_error``: each partition's inputs and outputs
    against an all-eager run of its graph on the same graph inputs (and RNG state, so
    eager random ops such as dropout draw what they drew in the compiled run). A backward
    graph's all-eager run starts from its forward graph's all-eager outputs, so that what
    the forward did differently is carried into the backward.

    Returns:
        By capture index, the all-eager values of the nodes ``keep`` names for that
        partition (by graph index and partition name).
    """
    known: dict[str, Any] = {}  # values seen so far by FX name, across graphs
    eager_outputs: dict[int, dict[str, Any]] = {}  # all-eager graph outputs, by name
    kept: dict[int, dict[str, Any]] = {}
    for graph in backend.graphs:
        gm = graph.partitioned
        mine = [
            (i, c) for i, c in enumerate(captures) if c.partition.graph_index == graph.index
        ]
        if gm is None or not mine:
            continue
        first_runs: dict[str, tuple[int, _runner.Capture]] = {}
        for i, cap in mine:
            first_runs.setdefault(cap.partition.name, (i, cap))
        if len(first_runs) != len(mine):
            note = "partitions ran several times: error carried in is not split by run"
            for i, _ in mine:
                results[i].notes.append(note)
            continue
        forward = _forward_of(backend, graph)
        reference = eager_outputs.get(forward, {}) if forward is not None else {}
        values, why = _bind_placeholders(gm, [c for _, c in mine], known, reference)
        for _, cap in mine:
            known.update(zip(cap.partition.input_names, cap.inputs))
            known.update(zip(cap.partition.output_names, cap.outputs))
        if values is None:
            for i, _ in mine:
                results[i].notes.append(f"no all-eager reference: {why}")
            continue
        eager = {p.name: p.graph_module for p in graph.partitions}
        wanted = {p.name: keep[(graph.index, p.name)] for p in graph.partitions}
        interp = _interpret.AllEagerInterpreter(gm, eager, keep=wanted)
        try:
            with torch.no_grad():
                rng_state.restore()
                # Clones: ops such as batch norm update their inputs in place.
                out = interp.run(*(_runner.clone_value(v) for v in values))
        except Exception as e:
            for i, _ in mine:
                results[i].notes.append(
                    "no all-eager reference: the graph failed eagerly "
                    f"({type(e).__name__}: {e})"
                )
            continue
        eager_outputs[graph.index] = _named_outputs(graph.graph_module, out)
        for i, cap in mine:
            _fill_carried_in(results[i], cap, interp, atol=atol, rtol=rtol)
            if cap.partition.name in interp.partition_values:
                kept[i] = interp.partition_values[cap.partition.name]
    return kept


def _fill_carried_in(
    result: _records.PartitionDiff,
    cap: _runner.Capture,
    interp: _interpret.AllEagerInterpreter,
    *,
    atol: float | None,
    rtol: float | None,
) -> None:
    ref_args = interp.partition_args.get(cap.partition.name)
    if ref_args is None:
        return
    worst, worst_name = 0.0, ""
    for name, got, ref in zip(cap.partition.input_names, cap.inputs, ref_args):
        if _identical(got, ref):
            # The same values (a weight, most often): nothing carried in. Measuring the
            # error of BERT-base's 199 weights took 21 s of a 28 s comparison.
            continue
        d = _compare.compare_tensors(name, got, ref, atol=atol, rtol=rtol, scale=0.0)
        if d.max_abs_error > worst or (not worst_name and not d.passed):
            worst, worst_name = d.max_abs_error, name
    result.carried_in, result.carried_in_from = worst, worst_name
    ref_out = interp.partition_outputs.get(cap.partition.name)
    ref_outs = ref_out if isinstance(ref_out, (tuple, list)) else (ref_out,)
    result.total_error = _compare.max_abs_error(
        [_compare.compare_tensors("", got, ref) for got, ref in zip(cap.outputs, ref_outs)]
    )


def _identical(got: Any, ref: Any) -> bool:
    """Whether two values are tensors of one dtype and shape with equal elements (a NaN
    is never equal: such tensors are compared in full)."""
    return (
        isinstance(got, torch.Tensor)
        and isinstance(ref, torch.Tensor)
        and got.dtype == ref.dtype
        and got.shape == ref.shape
        and got.device == ref.device
        and bool(torch.equal(got, ref))
    )


def _stale_frozen(cap: _runner.Capture) -> list[str]:
    """The frozen weights of the session's model that differ from the tensors the
    partition was called with (see :attr:`PartitionDiff.stale_frozen`)."""
    from onnx import numpy_helper

    frozen = set(cap.session.frozen_inputs)
    if not frozen:
        return []
    initializers = {init.name: init for init in cap.session.model.graph.initializer}
    stale = []
    for name, value in zip(cap.partition.input_names, cap.inputs):
        init = initializers.get(name)
        if name not in frozen or init is None or not isinstance(value, torch.Tensor):
            continue
        baked = torch.from_numpy(numpy_helper.to_array(init).copy())
        current = value.detach().to("cpu")
        if baked.shape != current.shape or not torch.equal(baked.to(current.dtype), current):
            error = (baked.double() - current.double()).abs().max().item()
            stale.append(
                f"frozen weight {name} of {cap.partition.name} no longer matches the "
                f"module's tensor (max abs difference {error:.3g}): it was written "
                "without PyTorch counting it (through .data in place, or a NumPy view), "
                "so the session runs the old value; backend.clear_sessions() exports it "
                "again"
            )
    return stale


def _partition_run(
    cap: _runner.Capture,
    run: int,
    *,
    atol: float | None,
    rtol: float | None,
    nodes: bool | None,
    options: OrtBackendOptions,
    keep: Collection[str],
) -> tuple[_records.PartitionDiff, dict[str, Any]]:
    """One partition run: its local error and, when asked or failing, its nodes; and the
    values of the nodes ``keep`` names in its graph run eagerly on ONNX Runtime's inputs."""
    record = cap.partition
    result = _records.PartitionDiff(
        record.name,
        record.graph_index,
        record.graph_kind,
        run,
        "ort",
        session_index=cap.session.index,
    )
    result.stale_frozen = _stale_frozen(cap)
    interp = _interpret.RecordingInterpreter(record.graph_module)
    try:
        with torch.no_grad():
            eager_out = interp.run(*(_runner.clone_value(v) for v in cap.inputs))
    except Exception as e:
        result.state = "eager failed"
        result.notes.append(f"the FX subgraph failed eagerly: {type(e).__name__}: {e}")
        return result, {}
    eager_outs = eager_out if isinstance(eager_out, (tuple, list)) else (eager_out,)
    float64 = _Float64Run(record.graph_module, cap.inputs, interp.env)
    output_node = next(n for n in record.graph_module.graph.nodes if n.op == "output")
    out_args = output_node.args[0]
    out_nodes = out_args if isinstance(out_args, (tuple, list)) else (out_args,)
    for name, got, ref, node in zip(record.output_names, cap.outputs, eager_outs, out_nodes):
        rounding = functools.partial(float64.rounding, node)
        result.outputs.append(
            _compare.compare_intermediate(name, got, ref, rounding, atol=atol, rtol=rtol)
        )
    if nodes or (nodes is None and not result.passed):
        result.nodes = _compare_nodes(
            cap,
            interp.env,
            float64,
            atol=atol,
            rtol=rtol,
            options=options,
            notes=result.notes,
        )
        if not result.passed and result.first_divergent is None:
            result.notes.append(
                "the outputs diverge but no intermediate could be matched to ONNX"
            )
    return result, _interpret.kept_values(interp.env, keep)


def _source(graph: GraphRecord, node: str) -> str:
    verdict = graph.verdict(node)
    return verdict.source if verdict is not None else ""


def partition_diffs(
    backend: OrtBackend,
    captures: Sequence[_runner.Capture],
    *,
    atol: float | None,
    rtol: float | None,
    nodes: bool | None,
    rng_state: _runner.RngState,
) -> list[_records.PartitionDiff]:
    """Every captured partition run, in execution order, then the partitions that did not
    run in ONNX Runtime (fell back to PyTorch, or did not run at all).

    Args:
        nodes: Compare intermediate nodes: ``None`` in failing partitions only, ``True``
            in every partition, ``False`` never.
    """
    runs: dict[tuple[int, str], int] = {}
    results: dict[int, _records.PartitionDiff] = {}
    sites = {
        (record.graph_index, record.name): _flips.sites(record.graph_module)
        for record in backend.partitions
    }
    keep = {key: _flips.names_of(found) for key, found in sites.items()}
    local: dict[int, dict[str, Any]] = {}
    for index, cap in enumerate(captures):
        key = (cap.partition.graph_index, cap.partition.name)
        runs[key] = runs.get(key, 0) + 1
        results[index], local[index] = _partition_run(
            cap,
            runs[key] - 1,
            atol=atol,
            rtol=rtol,
            nodes=nodes,
            options=backend.options,
            keep=keep.get(key, ()),
        )
    eager = _carried_in(
        backend, captures, results, atol=atol, rtol=rtol, rng_state=rng_state, keep=keep
    )
    for index, cap in enumerate(captures):
        result = results[index]
        found = sites.get((cap.partition.graph_index, cap.partition.name), [])
        if found and result.state == "ort":
            result.flips = _flips.find_flips(
                cap,
                result,
                found,
                eager.get(index),
                local[index],
                atol=atol,
                rtol=rtol,
                options=backend.options,
                source=functools.partial(_source, backend.graphs[cap.partition.graph_index]),
            )
        if result.flips or not result.passed:
            result.run_data = cap  # what save_repro writes
    ordered = [results[i] for i in range(len(captures))]
    seen = {(c.partition.graph_index, c.partition.name) for c in captures}
    for record in backend.partitions:
        if (record.graph_index, record.name) in seen:
            continue
        state = "eager" if record.error else "not run"
        notes = [record.error] if record.error else ["did not run during the diff"]
        ordered.append(
            _records.PartitionDiff(
                record.name, record.graph_index, record.graph_kind, 0, state, notes=notes
            )
        )
    return ordered
