"""What the runtime tests share: a compiled function's one partition as a runner sees it,
and a fixed-buffer runner on a CPU session."""

from __future__ import annotations

import torch

from ortlab import OrtBackend


def single_partition(fn, args):
    """Compiles ``fn`` with static shapes, calls it on ``args`` and returns its one
    partition's ONNX model with the FX values of the partition's inputs and outputs."""
    from ortlab.backend import _export

    backend = OrtBackend()
    torch.compile(fn, backend=backend, dynamic=False)(*args)
    (part,) = backend.partitions
    (session,) = part.sessions
    gm = part.graph_module
    inputs = tuple(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")
    outputs, _ = _export.fx_output_values(gm)
    return session.model, inputs, outputs


def static_runner(proto, inputs, outputs, args):
    """A StaticBindingRunner on a CPU session (the fixed-buffer path, without CUDA)."""
    from ortlab.backend import _runtime, _session

    session = _session.create_session(proto.SerializeToString(), [(_session.CPU, {})], None)
    return _runtime.StaticBindingRunner(
        session,
        proto,
        input_fx_values=inputs,
        output_fx_values=outputs,
        args=args,
        frozen={},
        preallocate_output=False,
    )
