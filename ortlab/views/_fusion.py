"""Provenance through fusion: which fused operator absorbed an FX node ("inside Attention
``Attention_3``, with 11 other nodes").

# NOTE: three rewrites hide FX nodes from the exporter's provenance metadata
# (``pkg.torch.onnx.fx_node``):
#
# 0. onnxscript's optimizer, at export (inference partitions, ``_passes``): a node it
#    merged into another (a Pad into its Conv) is listed in the survivor's
#    ``ortlab.folded_fx_nodes``; what it folded into constants or removed is listed in
#    the model's ``ortlab.optimized_away_fx_nodes`` (:attr:`Fusions.optimized_away`).
# 1. ortlab's rewrite to ONNX Runtime's fused operators (option ``ort_fusions``): the
#    model a session holds has ``com.microsoft`` nodes (Attention, SkipLayerNormalization)
#    that carry the provenance of one FX node only. The FX nodes they stand for are the
#    ones between the fused node's inputs and outputs in the partition's FX graph.
# 2. ONNX Runtime's own graph optimizer, inside the session: it fuses again
#    (SkipLayerNormalization, FusedMatMul, Gelu ...) and folds constants. Its result is
#    read from the optimized model ONNX Runtime writes when a session is made with
#    ``SessionOptions.optimized_model_filepath`` (made here on demand, for the lab only,
#    never run; cached per backend).
#
# Both links are :mod:`ortlab.profiling`'s (``model_to_fx``, ``optimized_to_model``):
# the lab says a node is inside the operator the profile credits its time from.
#
#   FX:    view_1 ─ transpose ─┐
#   ONNX:  Reshape  Transpose ─┴─ MatMul        (the model given to ONNX Runtime)
#   ORT:              FusedMatMul "node_bmm/MatmulTransposeFusion/"   (its optimized model)
#   -> view_1, transpose, bmm: inside FusedMatMul `node_bmm/MatmulTransposeFusion/`
"""

from __future__ import annotations

import collections
import dataclasses
import os
import tempfile
from typing import TYPE_CHECKING

from ortlab import errors, profiling
from ortlab.backend import records
from ortlab.views import _cache

if TYPE_CHECKING:
    import onnx

REWRITE = "ortlab's rewrite to ONNX Runtime's fused operators"
OPTIMIZER = "ONNX Runtime's graph optimizer"
EXPORT_OPTIMIZER = "onnxscript's optimizer at export"


@dataclasses.dataclass(frozen=True)
class Absorption:
    """A fused operator and the FX nodes it stands for.

    Attributes:
        op: Its op type (``Attention``).
        node: Its node name.
        stage: Which rewrite made it (:data:`REWRITE` or :data:`OPTIMIZER`).
        fx_nodes: The FX nodes inside it, in graph order.
    """

    op: str
    node: str
    stage: str
    fx_nodes: tuple[str, ...]

    def text(self, fx_name: str) -> str:
        """``"inside Attention `Attention_3`, with 11 other nodes (ONNX Runtime's graph
        optimizer)"``."""
        others = len([n for n in self.fx_nodes if n != fx_name])
        with_others = (
            f", with {others} other node{'s' if others != 1 else ''}" if others else ""
        )
        return f"inside {self.op} `{self.node}`{with_others} ({self.stage})"


@dataclasses.dataclass
class Fusions:
    """Where a session's FX nodes went through fusion.

    Attributes:
        by_fx: FX node -> the fused operator holding it.
        folded: FX nodes whose ONNX nodes ONNX Runtime's optimizer folded away
            (constants computed once).
        optimized_away: FX nodes whose ONNX nodes onnxscript's optimizer removed at
            export (``records.OPTIMIZED_AWAY_KEY``).
        note: Why ONNX Runtime's optimized model could not be read (``None`` when it was,
            or was not asked for).
    """

    by_fx: dict[str, Absorption] = dataclasses.field(default_factory=dict)
    folded: set[str] = dataclasses.field(default_factory=set)
    note: str | None = None
    optimized_away: set[str] = dataclasses.field(default_factory=set)

    def describe(self, fx_name: str) -> str | None:
        """Where ``fx_name`` went, in words; ``None`` when it is not fused."""
        found = self.by_fx.get(fx_name)
        if found is not None:
            return found.text(fx_name)
        if fx_name in self.folded:
            return f"removed by {OPTIMIZER} (folded into a constant or eliminated)"
        if fx_name in self.optimized_away:
            return (
                f"removed by {EXPORT_OPTIMIZER} (folded into a constant or into a "
                "neighbouring node, or found to do nothing)"
            )
        return None


def rewrite_fusions(
    session: records.SessionRecord, partition: records.PartitionRecord | None
) -> Fusions:
    """The FX nodes inside the fused operators of ortlab's rewrite (no session made):
    those between each fused operator's inputs and outputs (:func:`ortlab.profiling.
    model_to_fx`, the links the profile credits time along)."""
    out = Fusions(optimized_away=records.optimized_away(session.model))
    if partition is None:
        return out
    model = session.model.graph
    to_fx = profiling.model_to_fx(model, partition.graph_module.graph)
    for node, names in zip(model.node, to_fx):
        if records.is_fused_operator(node) and names:
            absorption = Absorption(node.op_type, node.name, REWRITE, names)
            for name in names:
                out.by_fx.setdefault(name, absorption)
    return out


def optimized_model(session: records.SessionRecord) -> onnx.ModelProto:
    """The model ONNX Runtime runs for ``session`` after its graph optimizer: a session
    is made from ``session.model`` with ``SessionOptions.optimized_model_filepath`` (on
    the CPU, never run).

    Raises:
        SessionError: ONNX Runtime refused the model here.
    """
    import onnx
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # Layout changes (level "all") are not fusions; extended holds every fusion.
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="ortlab-optimized-") as folder:
        path = os.path.join(folder, "optimized.onnx")
        options.optimized_model_filepath = path
        try:
            onnxruntime.InferenceSession(
                session.model.SerializeToString(),
                sess_options=options,
                providers=["CPUExecutionProvider"],
            )
            return onnx.load(path)
        except Exception as e:
            raise errors.SessionError(
                f"ONNX Runtime could not write the optimized model of {session.partition_name}"
                f" session {session.index}: {errors.describe(e)}"
            ) from e


def optimizer_fusions(
    session: records.SessionRecord,
    partition: records.PartitionRecord | None,
    optimized: onnx.ModelProto,
    base: Fusions,
) -> Fusions:
    """``base`` plus what ONNX Runtime's optimizer fused or folded (see module NOTE): an
    FX node whose ONNX nodes all went into one node of the optimized model that is not
    one of them unchanged is inside it; one whose ONNX nodes no optimized node computes
    was folded."""
    model = session.model.graph
    if partition is not None:
        to_fx = profiling.model_to_fx(model, partition.graph_module.graph)
    else:
        to_fx = [(name,) if name else () for name in map(records.fx_node_of, model.node)]
    given = {(n.name, n.op_type) for n in model.node}
    holder: dict[int, int] = {}  # model node -> the optimized node computing it
    for index, (model_nodes, borrowed) in enumerate(
        profiling.optimized_to_model(optimized.graph, model)
    ):
        if not borrowed:
            for m in model_nodes:
                holder.setdefault(m, index)
    holders: dict[str, set[int | None]] = collections.defaultdict(set)
    for m, names in enumerate(to_fx):
        for name in names:
            holders[name].add(holder.get(m))
    members: dict[int, list[str]] = collections.defaultdict(list)
    out = Fusions(dict(base.by_fx), set(base.folded), base.note, set(base.optimized_away))
    for name, found in holders.items():
        only = next(iter(found)) if len(found) == 1 else None
        if found == {None}:
            out.folded.add(name)
        elif only is not None:
            members[only].append(name)
    for q, inside in members.items():
        node = optimized.graph.node[q]
        kept = (node.name, node.op_type) in given
        if kept and len(inside) == 1:
            continue  # one of the model's nodes, kept (with constants folded into it)
        absorption = Absorption(node.op_type, node.name, OPTIMIZER, tuple(inside))
        for name in inside:
            if not (kept and name in base.by_fx):  # a rewrite's operator, kept: its own
                out.by_fx[name] = absorption
    return out


def fusions(
    session: records.SessionRecord,
    partition: records.PartitionRecord | None,
    *,
    optimizer: bool = True,
    cache: _cache.LabCache | None = None,
) -> Fusions:
    """Where ``session``'s FX nodes went through both rewrites (see the module NOTE).

    Args:
        session: The session.
        partition: Its partition (its FX graph).
        optimizer: Also read ONNX Runtime's optimized model (makes a session once).
        cache: Where the optimized model is kept (the backend's lab cache).
    """
    base = rewrite_fusions(session, partition)
    if not optimizer:
        return base
    try:
        if cache is None:
            optimized = optimized_model(session)
        else:
            optimized = cache.get(session, "optimized", lambda: optimized_model(session))
    except errors.SessionError as e:
        base.note = str(e)
        return base
    return optimizer_fusions(session, partition, optimized, base)


def unmapped_reason(partition: records.PartitionRecord | None, fx_name: str) -> str:
    """Why an FX node that no fused operator absorbed has no ONNX node of its own."""
    node = None
    if partition is not None:
        node = next((n for n in partition.graph_module.graph.nodes if n.name == fx_name), None)
    if node is not None and node.op == "call_function" and "getitem" in str(node.target):
        source = node.args[0] if node.args else None
        return (
            f"it picks output {node.args[1] if len(node.args) > 1 else '?'} of "
            f"{getattr(source, 'name', source)}, whose ONNX node computes it: no node of "
            "its own"
        )
    return (
        "no ONNX node of its own: the translation made none (a view that changes "
        "nothing), or ortlab's clean-up passes folded it into a neighbour "
        "(SessionRecord.onnx_passes)"
    )
